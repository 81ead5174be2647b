//! `status.conditions` on backups and restores (a Flotilla addition, like the cluster's), so
//! `kubectl wait --for=condition=Ready fdbbackup/<name>` and
//! `kubectl wait --for=condition=Complete fdbrestore/<name>` work.
//!
//! Contract: [`backup_ready`] and [`restore_complete`] are pure. A backup is `Ready`
//! (`Reconciled`) when `generations.reconciled` is its generation; otherwise `False` with the
//! first pending thing as reason (`AgentsUpdating`, `BackupStarting`, `BackupStopping`,
//! `PauseToggling`, `BackupModifying`). A restore is `Complete` (`Completed`) once its state
//! is `completed`; otherwise `False` with reason `Restoring` (`running`), `RestoreAborted`, or
//! `RestorePending`. Input the operator cannot use sets the condition `False` with the
//! Warning Event's reason ([`problem`]). Transition times move only when the status flips
//! (`kit::conditions::upsert`), so a converged pass writes nothing.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::conditions::{Desired, upsert};

use crate::crd::{FoundationDBBackup, FoundationDBBackupStatus, FoundationDBRestoreStatus};

/// The backup's condition type.
pub const READY: &str = "Ready";
/// The restore's condition type.
pub const COMPLETE: &str = "Complete";

/// See the module docs.
pub fn backup_ready(backup: &FoundationDBBackup, status: &FoundationDBBackupStatus) -> Desired {
    let generation = backup.metadata.generation;
    let g = &status.generations;
    let now = generation.unwrap_or(0);
    let desired = if g.reconciled == now {
        Desired::new(READY, true, "Reconciled", "the backup is as the spec asks")
    } else if g.needs_backup_agent_update == now {
        let message = format!(
            "waiting for the backup agents: {} of {} ready and up to date",
            status.agent_count,
            backup.desired_agent_count()
        );
        Desired::new(READY, false, "AgentsUpdating", message)
    } else if g.needs_backup_start == now {
        Desired::new(
            READY,
            false,
            "BackupStarting",
            "the backup is being started",
        )
    } else if g.needs_backup_stop == now {
        Desired::new(
            READY,
            false,
            "BackupStopping",
            "the backup is being stopped",
        )
    } else if g.needs_backup_pause_toggle == now {
        Desired::new(
            READY,
            false,
            "PauseToggling",
            "the backup agents are being paused or resumed",
        )
    } else if g.needs_backup_reconfiguration == now {
        Desired::new(
            READY,
            false,
            "BackupModifying",
            "the backup's snapshot period or destination is being changed",
        )
    } else {
        Desired::new(
            READY,
            false,
            "Reconciling",
            "the backup is being reconciled",
        )
    };
    desired.observed(generation)
}

/// See the module docs.
pub fn restore_complete(status: &FoundationDBRestoreStatus) -> Desired {
    match status.state.as_str() {
        "completed" => Desired::new(COMPLETE, true, "Completed", "the restore completed"),
        "running" => Desired::new(
            COMPLETE,
            false,
            "Restoring",
            "fdbrestore reports the restore running",
        ),
        "aborted" => Desired::new(
            COMPLETE,
            false,
            "RestoreAborted",
            "fdbrestore reports the restore aborted",
        ),
        "" if status.running => {
            Desired::new(COMPLETE, false, "RestorePending", "the restore was started")
        }
        "" => Desired::new(
            COMPLETE,
            false,
            "RestorePending",
            "the restore has not been started yet",
        ),
        other => Desired::new(
            COMPLETE,
            false,
            "RestorePending",
            format!("fdbrestore reports state {other:?}"),
        ),
    }
}

/// The condition of type `type_` set to `False` with `reason` and `message`, on `conditions`
/// (a copy), at `now`.
pub fn problem(
    conditions: &[Condition],
    type_: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = conditions.to_vec();
    upsert(
        &mut out,
        Desired::new(type_, false, reason, message).observed(generation),
        now,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::decide_tests::backup;

    type Mark = fn(&mut FoundationDBBackupStatus);

    #[test]
    fn ready_names_the_first_pending_thing() {
        let b = backup("Running", "continuous", "backup_agent", None);
        let mut s = FoundationDBBackupStatus::default();
        s.generations.reconciled = 1;
        assert_eq!(backup_ready(&b, &s).reason, "Reconciled");
        let cases: [(Mark, &str); 5] = [
            (
                |s| s.generations.needs_backup_agent_update = 1,
                "AgentsUpdating",
            ),
            (|s| s.generations.needs_backup_start = 1, "BackupStarting"),
            (|s| s.generations.needs_backup_stop = 1, "BackupStopping"),
            (
                |s| s.generations.needs_backup_pause_toggle = 1,
                "PauseToggling",
            ),
            (
                |s| s.generations.needs_backup_reconfiguration = 1,
                "BackupModifying",
            ),
        ];
        for (set, reason) in cases {
            let mut s = FoundationDBBackupStatus::default();
            set(&mut s);
            let d = backup_ready(&b, &s);
            assert_eq!(
                (d.reason.as_str(), d.status),
                (reason, kit::conditions::Status::False)
            );
        }
    }

    #[test]
    fn complete_follows_the_restore_state() {
        let cases = [
            ("completed", false, "Completed", true),
            ("running", true, "Restoring", false),
            ("aborted", false, "RestoreAborted", false),
            ("", true, "RestorePending", false),
            ("queued", true, "RestorePending", false),
        ];
        for (state, running, reason, complete) in cases {
            let s = FoundationDBRestoreStatus {
                running,
                state: state.into(),
                ..Default::default()
            };
            let d = restore_complete(&s);
            assert_eq!(d.reason, reason, "{state}");
            assert_eq!(
                d.status == kit::conditions::Status::True,
                complete,
                "{state}"
            );
        }
    }
}
