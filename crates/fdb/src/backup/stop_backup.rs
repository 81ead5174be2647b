//! StopBackup (reference §11 B4): discontinues a running backup that should not run.
//!
//! Contract: [`decide`] is pure, on the status read at the start of the pass: a managed
//! backup the database reports running whose spec says it should not run (`Stopped`, or a
//! one-time backup that is restorable) is stopped with `fdbbackup discontinue -t <tag>`
//! (Event `StoppedBackup`). An `unmanaged` backup is never stopped.

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::start_backup::running;
use super::{Pass, step_error};
use crate::crd::{BACKUP_TYPE_UNMANAGED, FoundationDBBackup};

step_error!(StopBackupError, "stopping the backup");

/// The step.
pub struct StopBackup;

/// See the module docs.
pub fn decide(backup: &FoundationDBBackup) -> bool {
    backup.backup_type() != BACKUP_TYPE_UNMANAGED && !backup.should_run() && running(backup)
}

impl Step<Pass> for StopBackup {
    fn name(&self) -> &'static str {
        "stop_backup"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            if !decide(&pass.backup) {
                return Ok(Flow::Continue);
            }
            let b = pass.backup.clone();
            pass.admin
                .stop_backup(&b)
                .await
                .map_err(StopBackupError::from)?;
            pass.event(
                false,
                "StoppedBackup",
                format!(
                    "discontinued the backup on tag {} (backupState {:?})",
                    b.tag(),
                    b.spec.backup_state
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
    fn stopped_only_when_running_and_it_should_not() {
        // (state, mode, type, running, restorable) -> stop
        let cases = [
            ("Stopped", "continuous", "backup_agent", true, false, true),
            ("Stopped", "continuous", "backup_agent", false, false, false),
            ("Running", "continuous", "backup_agent", true, true, false),
            ("Paused", "continuous", "backup_agent", true, false, false),
            ("Stopped", "continuous", "unmanaged", true, false, false),
            ("Running", "oneTime", "backup_agent", true, true, true),
        ];
        for (state, mode, kind, running, restorable, want) in cases {
            let b = backup(
                state,
                mode,
                kind,
                Some((running, false, restorable, 864_000)),
            );
            assert_eq!(decide(&b), want, "{state} {mode} {kind} running={running}");
        }
    }
}
