//! StartBackup (reference §11 B3): starts the backup when it should run and does not.
//!
//! Contract: [`decide`] is pure and reads the status UpdateBackupStatus read at the start of
//! the pass: an `unmanaged` backup is never started; a backup that should run (`Running` or
//! `Paused`, except a one-time backup that is already restorable) and is not running is
//! started with `fdbbackup start -d <url> -t <tag>` (`-s <period> -z` when continuous). The
//! start is recorded as an Event `StartedBackup` (its URL without the secret). Started
//! exactly once per need: a backup the database reports running is never started again.

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::finalizer::redact;
use super::{Pass, step_error};
use crate::crd::{BACKUP_TYPE_UNMANAGED, FoundationDBBackup};

step_error!(StartBackupError, "starting the backup");

/// The step.
pub struct StartBackup;

/// Whether the database reports the backup running (by the status read this pass).
pub fn running(backup: &FoundationDBBackup) -> bool {
    backup
        .status
        .as_ref()
        .and_then(|s| s.backup_details.as_ref())
        .is_some_and(|d| d.running)
}

/// See the module docs.
pub fn decide(backup: &FoundationDBBackup) -> bool {
    backup.backup_type() != BACKUP_TYPE_UNMANAGED && backup.should_run() && !running(backup)
}

impl Step<Pass> for StartBackup {
    fn name(&self) -> &'static str {
        "start_backup"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            if !decide(&pass.backup) {
                return Ok(Flow::Continue);
            }
            let b = pass.backup.clone();
            pass.admin
                .start_backup(&b)
                .await
                .map_err(StartBackupError::from)?;
            let url = redact(&b.backup_url().unwrap_or_default());
            pass.event(
                false,
                "StartedBackup",
                format!("started the backup on tag {} to {url}", b.tag()),
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
    fn started_only_when_it_should_run_and_does_not() {
        // (state, mode, type, running, restorable) -> start
        let cases = [
            ("", "continuous", "backup_agent", false, false, true),
            ("Running", "continuous", "backup_agent", true, false, false),
            ("Paused", "continuous", "backup_agent", false, false, true),
            ("Stopped", "continuous", "backup_agent", false, false, false),
            ("Running", "continuous", "unmanaged", false, false, false),
            ("Running", "oneTime", "backup_agent", false, true, false),
            ("Running", "oneTime", "backup_agent", false, false, true),
            (
                "Running",
                "continuous",
                "partitioned_log",
                false,
                false,
                true,
            ),
        ];
        for (state, mode, kind, running, restorable, want) in cases {
            let b = backup(
                state,
                mode,
                kind,
                Some((running, false, restorable, 864_000)),
            );
            assert_eq!(
                decide(&b),
                want,
                "{state} {mode} {kind} running={running} restorable={restorable}"
            );
        }
        assert!(
            decide(&backup("Running", "continuous", "backup_agent", None)),
            "no backup yet"
        );
    }
}
