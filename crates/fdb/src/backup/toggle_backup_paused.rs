//! ToggleBackupPaused (reference §11 B5): pauses or resumes the backup agents.
//!
//! Contract: [`decide`] is pure, on the status read at the start of the pass. A backup that
//! should run but had no live backup when the pass began stops the pass (it was started just
//! now; the next pass sees it). `backupState: Paused` on agents that are not paused ⇒
//! `fdbbackup pause`; any other state on paused agents ⇒ `fdbbackup resume`. Note that
//! fdbbackup pauses and resumes the agents of every tag on the cluster, as upstream. An
//! `unmanaged` backup is never touched.

use std::time::Duration;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, step_error};
use crate::crd::{BACKUP_TYPE_UNMANAGED, FoundationDBBackup};

step_error!(ToggleBackupPausedError, "pausing or resuming the backup");

/// The step.
pub struct ToggleBackupPaused;

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing.
    Nothing,
    /// The backup is not running yet: end the pass, look again.
    NotRunningYet,
    /// `fdbbackup pause`.
    Pause,
    /// `fdbbackup resume`.
    Resume,
}

/// See the module docs.
pub fn decide(backup: &FoundationDBBackup) -> Decision {
    if backup.backup_type() == BACKUP_TYPE_UNMANAGED {
        return Decision::Nothing;
    }
    let details = backup
        .status
        .as_ref()
        .and_then(|s| s.backup_details.as_ref());
    let Some(details) = details else {
        return if backup.should_run() {
            Decision::NotRunningYet
        } else {
            Decision::Nothing
        };
    };
    match (backup.should_be_paused(), details.paused) {
        (true, false) => Decision::Pause,
        (false, true) => Decision::Resume,
        _ => Decision::Nothing,
    }
}

impl Step<Pass> for ToggleBackupPaused {
    fn name(&self) -> &'static str {
        "toggle_backup_paused"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            match decide(&pass.backup) {
                Decision::Nothing => {}
                Decision::NotRunningYet => {
                    tracing::info!(backup = %pass.name(), "the backup is not running yet");
                    return Ok(Flow::stop(Duration::from_secs(1)));
                }
                Decision::Pause => {
                    pass.admin
                        .pause_backups()
                        .await
                        .map_err(ToggleBackupPausedError::from)?;
                    pass.event(
                        false,
                        "PausedBackup",
                        "paused the backup agents (fdbbackup pause)".into(),
                    )
                    .await;
                }
                Decision::Resume => {
                    pass.admin
                        .resume_backups()
                        .await
                        .map_err(ToggleBackupPausedError::from)?;
                    pass.event(
                        false,
                        "ResumedBackup",
                        "resumed the backup agents (fdbbackup resume)".into(),
                    )
                    .await;
                }
            }
            Ok(Flow::Continue)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Decision, decide};
    use crate::backup::decide_tests::backup;

    #[test]
    fn the_agents_follow_the_paused_state() {
        use Decision::*;
        // (state, type, live (running, paused)) -> decision
        let cases = [
            ("Paused", "backup_agent", Some((true, false)), Pause),
            ("Paused", "backup_agent", Some((true, true)), Nothing),
            ("Running", "backup_agent", Some((true, true)), Resume),
            ("Stopped", "backup_agent", Some((false, true)), Resume),
            ("Running", "backup_agent", Some((true, false)), Nothing),
            ("Running", "backup_agent", None, NotRunningYet),
            ("Stopped", "backup_agent", None, Nothing),
            ("Paused", "unmanaged", Some((true, false)), Nothing),
        ];
        for (state, kind, live, want) in cases {
            let live = live.map(|(r, p)| (r, p, false, 864_000));
            assert_eq!(
                decide(&backup(state, "continuous", kind, live)),
                want,
                "{state} {kind} {live:?}"
            );
        }
    }
}
