//! Fixtures for the decision tables of the backup steps.

use crate::crd::{
    FoundationDBBackup, FoundationDBBackupStatus, FoundationDBBackupStatusBackupDetails,
};

/// A backup with `backupState`, `backupMode` and `backupType`, and the status a pass read:
/// `live` = (running, paused, restorable, snapshot period), `None` without a live backup.
pub fn backup(
    state: &str,
    mode: &str,
    kind: &str,
    live: Option<(bool, bool, bool, i64)>,
) -> FoundationDBBackup {
    let mut b: FoundationDBBackup = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
        "metadata": {"name": "b", "namespace": "db", "generation": 1},
        "spec": {"version": "7.1.57", "clusterName": "c", "backupState": state,
                 "backupMode": mode, "backupType": kind,
                 "blobStoreConfiguration": {"accountName": "a@h"}},
    }))
    .unwrap();
    let url = b.backup_url().unwrap();
    b.status = Some(FoundationDBBackupStatus {
        backup_details: live.map(|(running, paused, restorable, period)| {
            FoundationDBBackupStatusBackupDetails {
                url: url.clone(),
                running,
                paused,
                snapshot_period_seconds: period,
                restorable,
                tag: "default".into(),
            }
        }),
        ..FoundationDBBackupStatus::default()
    });
    b
}
