//! ModifyBackup (reference §11 B6): a running continuous backup takes a new snapshot period
//! or destination without being restarted.
//!
//! Contract: [`decide`] is pure, on the status read at the start of the pass: a managed,
//! continuous backup the database reports running whose snapshot period or URL differs from
//! the spec's is modified with `fdbbackup modify -s <period> -d <url> -t <tag>` (Event
//! `ModifiedBackup`). Nothing else is modified.

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::start_backup::running;
use super::{Pass, step_error};
use crate::crd::{BACKUP_TYPE_UNMANAGED, FoundationDBBackup};

step_error!(ModifyBackupError, "modifying the backup");

/// The step.
pub struct ModifyBackup;

/// See the module docs.
pub fn decide(backup: &FoundationDBBackup) -> bool {
    backup.backup_type() != BACKUP_TYPE_UNMANAGED
        && backup.backup_mode() == "continuous"
        && running(backup)
        && backup.needs_backup_reconfiguration()
}

impl Step<Pass> for ModifyBackup {
    fn name(&self) -> &'static str {
        "modify_backup"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            if !decide(&pass.backup) {
                return Ok(Flow::Continue);
            }
            let b = pass.backup.clone();
            pass.admin
                .modify_backup(&b)
                .await
                .map_err(ModifyBackupError::from)?;
            pass.event(
                false,
                "ModifiedBackup",
                format!(
                    "modified the backup on tag {}: snapshot period {} s",
                    b.tag(),
                    b.snapshot_period_seconds()
                ),
            )
            .await;
            Ok(Flow::Continue)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::decide;
    use crate::backup::decide_tests::backup;

    #[test]
    fn only_a_running_continuous_backup_with_other_settings_is_modified() {
        // (mode, type, running, live period) -> modify
        let cases = [
            ("continuous", "backup_agent", true, 864_000, false),
            ("continuous", "backup_agent", true, 3600, true),
            ("continuous", "backup_agent", false, 3600, false),
            ("oneTime", "backup_agent", true, 3600, false),
            ("continuous", "unmanaged", true, 3600, false),
        ];
        for (mode, kind, running, period, want) in cases {
            let b = backup("Running", mode, kind, Some((running, false, false, period)));
            assert_eq!(
                decide(&b),
                want,
                "{mode} {kind} running={running} period={period}"
            );
        }
        let mut moved = backup(
            "Running",
            "continuous",
            "backup_agent",
            Some((true, false, false, 864_000)),
        );
        moved.spec.blob_store_configuration.as_mut().unwrap().bucket = "elsewhere".into();
        assert!(decide(&moved), "a new destination");
    }
}
