//! What a cluster's RedisBackups add up to (pure): the cluster's backup status
//! (`lastSuccessfulBackup`, `lastFailedBackup`, condition `LastBackupSucceeded`) and the
//! metrics `redis_backup_phase_count` and `redis_last_successful_backup_timestamp`.
//!
//! Contract:
//! - A backup's finishing time is its `completedAt` (its creation time when an older
//!   operator left none).
//! - [`cluster_status`] never moves the two timestamps back: each is the later of what the
//!   cluster records and what the existing backups show, so deleting (pruning) a backup
//!   changes nothing. `LastBackupSucceeded` is True when the last success is at least as
//!   recent as the last failure, False otherwise, naming the backup when it still exists;
//!   `None` when nothing needs writing (no finished backup ever, or already as desired).
//! - [`phase_counts`] counts the cluster's backups by phase (`Unknown` for none yet), with
//!   every phase present.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kit::conditions::{self, Desired};
use kube::ResourceExt;

use crate::crd::{BackupPhase, RedisBackup, RedisClusterStatus, condition};

/// Label values of `redis_backup_phase_count{phase}` (upstream's, `Unknown` for no phase).
pub const PHASES: [&str; 5] = ["Pending", "Running", "Completed", "Failed", "Unknown"];

/// The phase label of a backup.
pub fn phase_name(b: &RedisBackup) -> &'static str {
    match b.status.as_ref().and_then(|s| s.phase) {
        Some(BackupPhase::Pending) => "Pending",
        Some(BackupPhase::Running) => "Running",
        Some(BackupPhase::Completed) => "Completed",
        Some(BackupPhase::Failed) => "Failed",
        None => "Unknown",
    }
}

/// When a finished backup finished.
pub fn finished_at(b: &RedisBackup) -> Option<Timestamp> {
    let s = b.status.as_ref()?;
    if !matches!(s.phase, Some(BackupPhase::Completed | BackupPhase::Failed)) {
        return None;
    }
    s.completed_at
        .as_ref()
        .map(|t| t.0)
        .or_else(|| b.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The newest finished backup of `phase` among `backups` (ties by name).
pub fn newest<'a>(backups: &[&'a RedisBackup], phase: BackupPhase) -> Option<&'a RedisBackup> {
    backups
        .iter()
        .copied()
        .filter(|b| b.status.as_ref().and_then(|s| s.phase) == Some(phase))
        .filter_map(|b| Some((finished_at(b)?, b.name_any(), b)))
        .max_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)))
        .map(|(_, _, b)| b)
}

/// Backups by phase label, every phase present.
pub fn phase_counts(backups: &[&RedisBackup]) -> BTreeMap<&'static str, i64> {
    let mut m: BTreeMap<&'static str, i64> = PHASES.iter().map(|p| (*p, 0)).collect();
    for b in backups {
        *m.entry(phase_name(b)).or_default() += 1;
    }
    m
}

/// The backup fields of a cluster's status to write.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterBackupStatus {
    /// `lastSuccessfulBackup`.
    pub last_successful_backup: Option<Time>,
    /// `lastFailedBackup`.
    pub last_failed_backup: Option<Time>,
    /// `conditions`, with `LastBackupSucceeded` set.
    pub conditions: Vec<Condition>,
}

fn later(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    a.max(b)
}

/// The cluster's backup status from its finished `backups` (see the module contract).
pub fn cluster_status(
    live: &RedisClusterStatus,
    backups: &[&RedisBackup],
    generation: Option<i64>,
    now: Timestamp,
) -> Option<ClusterBackupStatus> {
    let ok = newest(backups, BackupPhase::Completed);
    let failed = newest(backups, BackupPhase::Failed);
    let last_ok = later(
        live.last_successful_backup.as_ref().map(|t| t.0),
        ok.and_then(finished_at),
    );
    let last_failed = later(
        live.last_failed_backup.as_ref().map(|t| t.0),
        failed.and_then(finished_at),
    );
    let succeeded = match (last_ok, last_failed) {
        (None, None) => return None,
        (Some(o), Some(f)) => o >= f,
        (o, _) => o.is_some(),
    };
    let desired = if succeeded {
        let name = ok
            .filter(|b| finished_at(b) == last_ok)
            .map(|b| format!("RedisBackup {} completed", b.name_any()));
        Desired::new(
            condition::LAST_BACKUP_SUCCEEDED,
            true,
            "BackupCompleted",
            name.unwrap_or_else(|| "the last backup completed".into()),
        )
    } else {
        let what = failed.filter(|b| finished_at(b) == last_failed).map(|b| {
            let err = b.status.as_ref().map(|s| s.error.as_str()).unwrap_or("");
            format!("RedisBackup {} failed: {err}", b.name_any())
        });
        Desired::new(
            condition::LAST_BACKUP_SUCCEEDED,
            false,
            "BackupFailed",
            what.unwrap_or_else(|| "the last backup failed".into()),
        )
    };
    let mut conds = live.conditions.clone();
    let current = conditions::get(&conds, condition::LAST_BACKUP_SUCCEEDED).cloned();
    // A condition that already says this (a message naming a backup since pruned included)
    // is left as it is.
    let same = current.as_ref().is_some_and(|c| {
        c.status == desired.status.as_str()
            && c.reason == desired.reason
            && (c.message == desired.message || !desired.message.starts_with("RedisBackup"))
    });
    if !same {
        conditions::upsert(&mut conds, desired.observed(generation), now);
    }
    let out = ClusterBackupStatus {
        last_successful_backup: last_ok.map(Time),
        last_failed_backup: last_failed.map(Time),
        conditions: conds,
    };
    let unchanged = out.last_successful_backup == live.last_successful_backup
        && out.last_failed_backup == live.last_failed_backup
        && out.conditions == live.conditions;
    (!unchanged).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).expect("ts")
    }

    fn backup(name: &str, phase: Option<&str>, done: Option<i64>, error: &str) -> RedisBackup {
        let mut status = serde_json::json!({"error": error});
        if let Some(p) = phase {
            status["phase"] = p.into();
        }
        if let Some(d) = done {
            status["completedAt"] = serde_json::to_value(Time(t(d))).expect("time");
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "redis.io/v1", "kind": "RedisBackup",
            "metadata": {"name": name, "creationTimestamp": "2023-11-14T22:13:20Z"},
            "spec": {"clusterName": "demo"},
            "status": status,
        }))
        .expect("backup")
    }

    fn cond(s: &ClusterBackupStatus) -> (String, String, String) {
        let c = conditions::get(&s.conditions, condition::LAST_BACKUP_SUCCEEDED).expect("set");
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn the_newest_finished_backup_decides() {
        let a = backup("a", Some("Completed"), Some(10), "");
        let b = backup("b", Some("Failed"), Some(20), "HTTP 403");
        let c = backup("c", Some("Running"), None, "");
        let live = RedisClusterStatus::default();
        let s = cluster_status(&live, &[&a, &b, &c], Some(3), t(30)).expect("write");
        assert_eq!(s.last_successful_backup, Some(Time(t(10))));
        assert_eq!(s.last_failed_backup, Some(Time(t(20))));
        assert_eq!(
            cond(&s),
            (
                "False".into(),
                "BackupFailed".into(),
                "RedisBackup b failed: HTTP 403".into()
            )
        );
        let d = backup("d", Some("Completed"), Some(25), "");
        let s = cluster_status(&live, &[&a, &b, &c, &d], Some(3), t(30)).expect("write");
        assert_eq!(
            cond(&s),
            (
                "True".into(),
                "BackupCompleted".into(),
                "RedisBackup d completed".into()
            )
        );
    }

    #[test]
    fn nothing_finished_means_nothing_to_write() {
        let c = backup("c", Some("Running"), None, "");
        let p = backup("p", None, None, "");
        assert_eq!(
            cluster_status(&RedisClusterStatus::default(), &[&c, &p], None, t(0)),
            None
        );
    }

    #[test]
    fn pruning_never_moves_the_status_back_and_a_written_status_is_stable() {
        let a = backup("a", Some("Completed"), Some(10), "");
        let b = backup("b", Some("Failed"), Some(20), "boom");
        let first =
            cluster_status(&RedisClusterStatus::default(), &[&a, &b], None, t(30)).expect("write");
        let live = RedisClusterStatus {
            last_successful_backup: first.last_successful_backup.clone(),
            last_failed_backup: first.last_failed_backup.clone(),
            conditions: first.conditions.clone(),
            ..RedisClusterStatus::default()
        };
        // Written: the same backups ask for nothing.
        assert_eq!(cluster_status(&live, &[&a, &b], None, t(40)), None);
        // The failed backup is pruned (failedBackupsHistoryLimit 0): still False.
        assert_eq!(cluster_status(&live, &[&a], None, t(50)), None);
        // Both gone: nothing moves either.
        assert_eq!(cluster_status(&live, &[], None, t(60)), None);
        // A newer success turns it True.
        let n = backup("n", Some("Completed"), Some(70), "");
        let s = cluster_status(&live, &[&a, &n], None, t(80)).expect("write");
        assert_eq!(s.last_failed_backup, Some(Time(t(20))));
        assert_eq!(cond(&s).0, "True");
    }

    #[test]
    fn other_conditions_are_kept() {
        let mut live = RedisClusterStatus::default();
        conditions::upsert(
            &mut live.conditions,
            Desired::new("Ready", true, "ClusterReady", "ok"),
            t(0),
        );
        let a = backup("a", Some("Completed"), Some(10), "");
        let s = cluster_status(&live, &[&a], None, t(30)).expect("write");
        assert!(conditions::is_true(&s.conditions, "Ready"));
        assert_eq!(s.conditions.len(), 2);
    }

    #[test]
    fn phases_are_counted_with_every_label() {
        let a = backup("a", Some("Completed"), Some(10), "");
        let b = backup("b", Some("Completed"), Some(11), "");
        let p = backup("p", None, None, "");
        let m = phase_counts(&[&a, &b, &p]);
        assert_eq!(m["Completed"], 2);
        assert_eq!(m["Unknown"], 1);
        assert_eq!(m["Failed"], 0);
        assert_eq!(m.len(), 5);
    }
}
