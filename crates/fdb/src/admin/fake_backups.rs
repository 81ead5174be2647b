//! The fake database's backups and restores: what `fdbbackup` and `fdbrestore` would report,
//! kept beside the rest of [`FakeDatabase`]'s state.
//!
//! Contract:
//! - Backups are kept by tag. `start` on a tag whose backup runs fails as fdbbackup does; it
//!   records the destination URL as holding data (the blob store), running, not restorable.
//!   A running backup becomes restorable after [`FakeDatabase::set_backup_restorable_reads`]
//!   (default 2) status reads of its tag; a one-time backup (started without `-z`) then
//!   stops by itself.
//! - `discontinue`/`abort` of a tag that does not run fail with fdbbackup's words
//!   (`A backup was not running on tag`); `modify` needs a running backup; `pause`/`resume`
//!   flip the agents of every tag at once; `delete -d <url>` removes the data at the URL and
//!   fails with `Backup does not exist` when there is none. A tag never started has no
//!   status (`Backup does not exist`).
//! - One restore at a time: `fdbrestore start -r <url>` needs data at the URL (a backup this
//!   database wrote there) and no restore running; it then reports `running` for
//!   [`FakeDatabase::set_restore_reads`] (default 3) status reads and `completed` afterwards.
//!   `fdbrestore status` before any restore is `No restores found`.
//! - Every call is logged in fdbbackup's and fdbrestore's words.

use std::collections::{BTreeMap, BTreeSet};

use super::FakeDatabase;
use crate::admin::{AdminError, LiveBackupState, LiveBackupStatus};
use crate::crd::{BACKUP_TYPE_PARTITIONED_LOG, FoundationDBBackup, FoundationDBRestore};

/// One backup as the fake database reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeBackup {
    /// The destination URL.
    pub url: String,
    /// Whether it runs.
    pub running: bool,
    /// Whether it is restorable.
    pub restorable: bool,
    /// Seconds between snapshots.
    pub snapshot_period: i64,
    /// Started without `-z` (one snapshot, then stop).
    pub one_time: bool,
    /// The state's name (`running`, `completed`, `discontinued`, `aborted`).
    pub state: String,
    reads_until_restorable: u32,
}

/// The backup and restore side of the fake database.
#[derive(Debug)]
pub(super) struct Backups {
    by_tag: BTreeMap<String, FakeBackup>,
    paused: bool,
    // URLs holding backup data (the blob store).
    data: BTreeSet<String>,
    restorable_reads: u32,
    restore: Option<(String, String, u32)>,
    restore_reads: u32,
}

impl Default for Backups {
    fn default() -> Self {
        Backups {
            by_tag: BTreeMap::new(),
            paused: false,
            data: BTreeSet::new(),
            restorable_reads: 2,
            restore: None,
            restore_reads: 3,
        }
    }
}

fn not_running(tag: &str) -> AdminError {
    AdminError::BackupNotRunning(format!("ERROR: A backup was not running on tag `{tag}'"))
}

fn command(binary: &str, output: String) -> AdminError {
    AdminError::Command {
        binary: binary.into(),
        code: Some(1),
        output,
    }
}

fn url_of(backup: &FoundationDBBackup) -> Result<String, AdminError> {
    backup
        .backup_url()
        .map_err(|e| AdminError::InvalidInput(e.to_string()))
}

impl FakeDatabase {
    /// The backups by tag.
    pub fn backups(&self) -> BTreeMap<String, FakeBackup> {
        self.st().backups.by_tag.clone()
    }

    /// Whether the backup agents are paused.
    pub fn backups_paused(&self) -> bool {
        self.st().backups.paused
    }

    /// The URLs holding backup data.
    pub fn backup_data(&self) -> BTreeSet<String> {
        self.st().backups.data.clone()
    }

    /// How many status reads a new backup takes to become restorable.
    pub fn set_backup_restorable_reads(&self, reads: u32) {
        self.st().backups.restorable_reads = reads;
    }

    /// How many status reads a restore reports `running` before `completed`.
    pub fn set_restore_reads(&self, reads: u32) {
        self.st().backups.restore_reads = reads;
    }

    pub(super) fn fake_start_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        let (url, tag) = (url_of(backup)?, backup.tag().to_owned());
        let one_time = backup.backup_mode() != "continuous";
        let mut words = format!("fdbbackup start -d {url} -t {tag}");
        if !one_time {
            words.push_str(&format!(" -s {} -z", backup.snapshot_period_seconds()));
        }
        if backup.backup_type() == BACKUP_TYPE_PARTITIONED_LOG {
            words.push_str(" --partitioned-log-experimental");
        }
        let mut st = self.call("start_backup", words)?;
        let b = &mut st.backups;
        if b.by_tag.get(&tag).is_some_and(|x| x.running) {
            return Err(command(
                "fdbbackup",
                format!("ERROR: A backup is already running on tag `{tag}'"),
            ));
        }
        b.data.insert(url.clone());
        let fresh = FakeBackup {
            url,
            running: true,
            restorable: false,
            snapshot_period: backup.snapshot_period_seconds(),
            one_time,
            state: "running".into(),
            reads_until_restorable: b.restorable_reads,
        };
        b.by_tag.insert(tag, fresh);
        Ok(())
    }

    pub(super) fn fake_end_backup(
        &self,
        method: &'static str,
        verb: &str,
        backup: &FoundationDBBackup,
    ) -> Result<(), AdminError> {
        let tag = backup.tag().to_owned();
        let mut st = self.call(method, format!("fdbbackup {verb} -t {tag}"))?;
        match st.backups.by_tag.get_mut(&tag) {
            Some(b) if b.running => {
                b.running = false;
                b.state = if verb == "abort" {
                    "aborted"
                } else {
                    "discontinued"
                }
                .into();
                Ok(())
            }
            _ => Err(not_running(&tag)),
        }
    }

    pub(super) fn fake_delete_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        let url = url_of(backup)?;
        let mut st = self.call("delete_backup", format!("fdbbackup delete -d {url}"))?;
        if st.backups.data.remove(&url) {
            Ok(())
        } else {
            Err(AdminError::BackupDoesNotExist(
                "ERROR: Backup does not exist".into(),
            ))
        }
    }

    pub(super) fn fake_pause(&self, pause: bool) -> Result<(), AdminError> {
        let (method, verb) = if pause {
            ("pause_backups", "pause")
        } else {
            ("resume_backups", "resume")
        };
        let mut st = self.call(method, format!("fdbbackup {verb}"))?;
        st.backups.paused = pause;
        Ok(())
    }

    pub(super) fn fake_modify_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        let (url, tag) = (url_of(backup)?, backup.tag().to_owned());
        let period = backup.snapshot_period_seconds();
        let words = format!("fdbbackup modify -s {period} -d {url} -t {tag}");
        let mut st = self.call("modify_backup", words)?;
        let b = &mut st.backups;
        match b.by_tag.get_mut(&tag) {
            Some(x) if x.running => {
                x.snapshot_period = period;
                x.url = url.clone();
                b.data.insert(url);
                Ok(())
            }
            _ => Err(not_running(&tag)),
        }
    }

    pub(super) fn fake_backup_status(
        &self,
        backup: &FoundationDBBackup,
    ) -> Result<LiveBackupStatus, AdminError> {
        let tag = backup.tag().to_owned();
        let mut st = self.call(
            "get_backup_status",
            format!("fdbbackup status --json -t {tag}"),
        )?;
        let paused = st.backups.paused;
        let Some(b) = st.backups.by_tag.get_mut(&tag) else {
            return Err(AdminError::BackupDoesNotExist(
                "ERROR: Backup does not exist".into(),
            ));
        };
        if b.running && !b.restorable {
            b.reads_until_restorable = b.reads_until_restorable.saturating_sub(1);
            if b.reads_until_restorable == 0 {
                b.restorable = true;
                if b.one_time {
                    b.running = false;
                    b.state = "completed".into();
                }
            }
        }
        Ok(LiveBackupStatus {
            destination_url: b.url.clone(),
            snapshot_interval_seconds: b.snapshot_period,
            status: LiveBackupState {
                name: b.state.clone(),
                running: b.running,
                completed: b.state == "completed",
            },
            backup_agents_paused: paused,
            restorable: Some(b.restorable),
            uid: Some(format!("fake-{tag}")),
            tag: Some(tag),
        })
    }

    pub(super) fn fake_start_restore(
        &self,
        url: &str,
        _restore: &FoundationDBRestore,
    ) -> Result<(), AdminError> {
        let mut st = self.call("start_restore", format!("fdbrestore start -r {url}"))?;
        let reads = st.backups.restore_reads;
        let b = &mut st.backups;
        if b.restore.as_ref().is_some_and(|(_, s, _)| s == "running") {
            return Err(command(
                "fdbrestore",
                "ERROR: A restore is already running".into(),
            ));
        }
        if !b.data.contains(url) {
            return Err(AdminError::BackupDoesNotExist(format!(
                "ERROR: Backup does not exist at {url}"
            )));
        }
        b.restore = Some((url.to_owned(), "running".into(), reads));
        Ok(())
    }

    pub(super) fn fake_restore_status(&self) -> Result<String, AdminError> {
        let mut st = self.call("get_restore_status", "fdbrestore status".into())?;
        let Some((url, state, left)) = st.backups.restore.as_mut() else {
            return Err(AdminError::RestoreDoesNotExist);
        };
        if state == "running" {
            *left = left.saturating_sub(1);
            if *left == 0 {
                *state = "completed".into();
            }
        }
        Ok(format!(
            "Tag: default  UID: fake-restore  State: {state}  Blocks: 0/0  BlocksInProgress: 0  \
             Files: 0  BytesWritten: 0  CurrentVersion: 0  FirstConsistentVersion: -1  \
             ApplyVersionLag: 0  LastError: ''  URL: {url}\n"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::AdminClient;

    fn backup(tag: &str, mode: &str) -> FoundationDBBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
            "metadata": {"name": format!("b-{tag}"), "namespace": "db"},
            "spec": {"version": "7.1.57", "clusterName": "c", "tag": tag, "backupMode": mode,
                     "blobStoreConfiguration": {"accountName": "a@h:80"}},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_backup_runs_by_tag_becomes_restorable_and_stops_once() {
        let db = FakeDatabase::new();
        let b = backup("t", "continuous");
        assert!(matches!(
            db.get_backup_status(&b).await,
            Err(AdminError::BackupDoesNotExist(_))
        ));
        db.start_backup(&b).await.unwrap();
        assert!(
            db.start_backup(&b).await.is_err(),
            "one running backup per tag"
        );
        let first = db.get_backup_status(&b).await.unwrap();
        assert!(first.status.running && first.restorable == Some(false));
        let second = db.get_backup_status(&b).await.unwrap();
        assert_eq!(second.restorable, Some(true), "restorable after two reads");
        db.pause_backups().await.unwrap();
        assert!(db.get_backup_status(&b).await.unwrap().backup_agents_paused);
        db.stop_backup(&b).await.unwrap();
        assert!(matches!(
            db.stop_backup(&b).await,
            Err(AdminError::BackupNotRunning(_))
        ));
        assert!(!db.backups()["t"].running);
        let url = b.backup_url().unwrap();
        assert!(db.backup_data().contains(&url));
        db.delete_backup(&b).await.unwrap();
        assert!(matches!(
            db.delete_backup(&b).await,
            Err(AdminError::BackupDoesNotExist(_))
        ));
        assert_eq!(
            db.calls()[0..2],
            [
                "fdbbackup status --json -t t".to_owned(),
                format!("fdbbackup start -d {url} -t t -s 864000 -z"),
            ]
        );
    }

    #[tokio::test]
    async fn a_one_time_backup_stops_once_restorable() {
        let db = FakeDatabase::new();
        let b = backup("once", "oneTime");
        db.start_backup(&b).await.unwrap();
        db.get_backup_status(&b).await.unwrap();
        let done = db.get_backup_status(&b).await.unwrap();
        assert!(!done.status.running && done.status.completed && done.restorable == Some(true));
    }

    #[tokio::test]
    async fn a_restore_needs_data_runs_then_completes() {
        let db = FakeDatabase::new();
        db.set_restore_reads(2);
        let b = backup("t", "continuous");
        let url = b.backup_url().unwrap();
        let r = FoundationDBRestore::new("r", Default::default());
        assert!(matches!(
            db.get_restore_status().await,
            Err(AdminError::RestoreDoesNotExist)
        ));
        assert!(
            db.start_restore(&url, &r).await.is_err(),
            "no backup at the URL"
        );
        db.start_backup(&b).await.unwrap();
        db.start_restore(&url, &r).await.unwrap();
        assert!(
            db.start_restore(&url, &r).await.is_err(),
            "one restore at a time"
        );
        assert!(
            db.get_restore_status()
                .await
                .unwrap()
                .contains("State: running")
        );
        assert!(
            db.get_restore_status()
                .await
                .unwrap()
                .contains("State: completed")
        );
    }
}
