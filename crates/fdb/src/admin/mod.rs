//! The data-plane ports of the cluster controller: the admin client (reference §10) and the
//! lock client (§5), as traits, with the real implementation that runs `fdbcli`, `fdbbackup`
//! and `fdbrestore` from `$FDB_BINARY_DIR/<major.minor>/` exactly as upstream does ([`cli`]).
//!
//! Contract:
//! - One client per cluster and reconcile pass, built from the cluster's connection string,
//!   running version and spec version ([`ClusterTarget`]); nothing is cached between passes.
//! - Errors are classified as upstream classifies fdbcli output ([`AdminError`]): a timeout
//!   (the database did not answer) is never a permanent failure.
//! - [`status`] parses `status json`; [`keys`] speaks fdbcli's key escaping and the tuple
//!   layer the lock record uses; [`lock`] holds the lock semantics as a pure decision.

pub mod binaries;
pub mod cli;
pub mod fake;
pub mod fake_monitor;
pub mod keys;
pub mod lock;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;

use crate::crd::{
    DatabaseConfiguration, FoundationDBBackup, FoundationDBRestore, LockDenyListEntry,
    ProcessAddress,
};
pub use status::FdbStatus;

/// fdbcli's default `--timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The timeout of slow calls (status, exclude, kill).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(40);

/// What an admin call failed with.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The database did not answer in time (`Specified timeout reached`, unavailable, an
    /// incomplete status).
    #[error("timeout: {0}")]
    Timeout(String),
    /// `fdbbackup` reports no such backup.
    #[error("backup does not exist: {0}")]
    BackupDoesNotExist(String),
    /// `fdbbackup` reports no backup running on the tag.
    #[error("backup not running: {0}")]
    BackupNotRunning(String),
    /// `fdbrestore status` reports no restore.
    #[error("no restores found")]
    RestoreDoesNotExist,
    /// A binary exited with an error.
    #[error("{binary} failed (exit {code:?}): {output}")]
    Command {
        /// The binary.
        binary: String,
        /// Its exit code.
        code: Option<i32>,
        /// Its combined output.
        output: String,
    },
    /// A binary ran past twice its timeout and was killed.
    #[error("{binary} did not finish within {after:?}")]
    HardTimeout {
        /// The binary.
        binary: String,
        /// How long it ran.
        after: Duration,
    },
    /// A binary could not be started (missing for this version, not executable).
    #[error("could not run {binary}: {error}")]
    Spawn {
        /// The binary's path.
        binary: String,
        /// Why.
        error: String,
    },
    /// Output the operator cannot read.
    #[error("unexpected output: {0}")]
    Parse(String),
    /// Input that cannot be sent (a value with `;`, a missing URL).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Another operator instance holds the lock.
    #[error("failed to get the lock, current lock owner: {owner}, lock will expire at: {expires}")]
    LockHeld {
        /// The holder.
        owner: String,
        /// When it expires (Unix seconds).
        expires: i64,
    },
    /// This operator instance is on the deny list.
    #[error("failed to get lock due to deny list, owner ID: {0} is on deny list")]
    LockDenied(String),
    /// The transaction conflicted with another writer.
    #[error("transaction not committed due to conflict with another transaction")]
    Conflict,
}

impl AdminError {
    /// A stable category for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            AdminError::Timeout(_) | AdminError::HardTimeout { .. } => "database_timeout",
            AdminError::BackupDoesNotExist(_) => "backup_does_not_exist",
            AdminError::BackupNotRunning(_) => "backup_not_running",
            AdminError::RestoreDoesNotExist => "restore_does_not_exist",
            AdminError::Command { .. } => "fdb_command_failed",
            AdminError::Spawn { .. } => "fdb_binary_unavailable",
            AdminError::Parse(_) => "fdb_output_unreadable",
            AdminError::InvalidInput(_) => "fdb_invalid_input",
            AdminError::LockHeld { .. } | AdminError::LockDenied(_) | AdminError::Conflict => {
                "lock_unavailable"
            }
        }
    }

    /// Whether the database did not answer.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            AdminError::Timeout(_) | AdminError::HardTimeout { .. }
        )
    }
}

/// The live state of a backup (`fdbbackup status --json`).
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default, rename_all = "PascalCase")]
pub struct LiveBackupStatus {
    /// The destination URL.
    #[serde(rename = "DestinationURL")]
    pub destination_url: String,
    /// The snapshot interval.
    pub snapshot_interval_seconds: i64,
    /// The state.
    pub status: LiveBackupState,
    /// Whether the agents are paused.
    pub backup_agents_paused: bool,
    /// Whether the backup is restorable.
    pub restorable: Option<bool>,
    /// The backup's UID.
    #[serde(rename = "UID")]
    pub uid: Option<String>,
    /// The tag.
    pub tag: Option<String>,
}

/// `Status` of a live backup.
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default, rename_all = "PascalCase")]
pub struct LiveBackupState {
    /// The state's name.
    pub name: String,
    /// Whether it runs.
    pub running: bool,
    /// Whether it completed.
    pub completed: bool,
}

/// The operations the cluster, backup and restore controllers need from the database.
#[async_trait]
pub trait AdminClient: Send + Sync {
    /// `status json`.
    async fn get_status(&self) -> Result<FdbStatus, AdminError>;
    /// `configure [new] <configuration>`.
    async fn configure_database(
        &self,
        configuration: &DatabaseConfiguration,
        new: bool,
    ) -> Result<(), AdminError>;
    /// `exclude [no_wait] <addresses>` (ports dropped); blocking unless `no_wait`.
    async fn exclude(&self, addresses: &[ProcessAddress], no_wait: bool) -> Result<(), AdminError>;
    /// `include <addresses>`.
    async fn include(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError>;
    /// The exclusions of the configuration.
    async fn get_exclusions(&self) -> Result<Vec<String>, AdminError>;
    /// `kill; kill <addresses>; sleep 5`.
    async fn kill(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError>;
    /// `kill; kill <addresses>; sleep 1; kill <addresses>; sleep 5` (incompatible upgrades).
    async fn kill_for_upgrade(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError>;
    /// `coordinators <addresses>`; returns the new connection string.
    async fn change_coordinators(&self, addresses: &[ProcessAddress])
    -> Result<String, AdminError>;
    /// Whether binaries for `version` are installed.
    async fn version_supported(&self, version: &str) -> Result<bool, AdminError>;
    /// The protocol version of `version`'s fdbcli (`fdbcli --version`).
    async fn protocol_version(&self, version: &str) -> Result<String, AdminError>;
    /// The running version if a quorum of coordinators answers with it, else the spec
    /// version if that answers during an incompatible upgrade, else `None`.
    async fn version_from_reachable_coordinators(&self) -> Option<String>;
    /// `maintenance on <zone> <seconds>`.
    async fn set_maintenance_zone(&self, zone: &str, seconds: i64) -> Result<(), AdminError>;
    /// `maintenance off`.
    async fn reset_maintenance_mode(&self) -> Result<(), AdminError>;
    /// The operator's maintenance list: process group → when it was taken down.
    async fn get_processes_under_maintenance(&self) -> Result<BTreeMap<String, i64>, AdminError>;
    /// Adds process groups to the maintenance list at `timestamp`.
    async fn set_processes_under_maintenance(
        &self,
        ids: &[String],
        timestamp: i64,
    ) -> Result<(), AdminError>;
    /// Removes process groups from the maintenance list.
    async fn remove_processes_under_maintenance(&self, ids: &[String]) -> Result<(), AdminError>;
    /// `fdbbackup start`.
    async fn start_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError>;
    /// `fdbbackup discontinue`.
    async fn stop_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError>;
    /// `fdbbackup abort`.
    async fn abort_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError>;
    /// `fdbbackup delete` of the backup's data.
    async fn delete_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError>;
    /// `fdbbackup pause` (every tag).
    async fn pause_backups(&self) -> Result<(), AdminError>;
    /// `fdbbackup resume` (every tag).
    async fn resume_backups(&self) -> Result<(), AdminError>;
    /// `fdbbackup modify`.
    async fn modify_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError>;
    /// `fdbbackup status --json`.
    async fn get_backup_status(
        &self,
        backup: &FoundationDBBackup,
    ) -> Result<LiveBackupStatus, AdminError>;
    /// `fdbrestore start`.
    async fn start_restore(
        &self,
        url: &str,
        restore: &FoundationDBRestore,
    ) -> Result<(), AdminError>;
    /// `fdbrestore status` (free text).
    async fn get_restore_status(&self) -> Result<String, AdminError>;
}

/// The global lock and the records beside it (reference §5).
#[async_trait]
pub trait LockClient: Send + Sync {
    /// Whether locks are off for this cluster (every call then succeeds at once).
    fn disabled(&self) -> bool;
    /// Takes or extends the lock.
    async fn take_lock(&self) -> Result<(), AdminError>;
    /// Releases the lock if this instance holds it and it has not expired.
    async fn release_lock(&self) -> Result<(), AdminError>;
    /// Registers process groups as ready for `version`.
    async fn add_pending_upgrades(&self, version: &str, ids: &[String]) -> Result<(), AdminError>;
    /// The process groups registered as ready for `version`.
    async fn get_pending_upgrades(&self, version: &str) -> Result<BTreeSet<String>, AdminError>;
    /// Clears every pending-upgrade record.
    async fn clear_pending_upgrades(&self) -> Result<(), AdminError>;
    /// The deny list.
    async fn get_deny_list(&self) -> Result<Vec<String>, AdminError>;
    /// Applies deny-list entries: `allow: false` adds, `allow: true` removes; other IDs are
    /// left alone.
    async fn update_deny_list(&self, entries: &[LockDenyListEntry]) -> Result<(), AdminError>;
}

/// Everything a client needs to know about the cluster it talks to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterTarget {
    /// The cluster's UID (temporary cluster files live under `<tmp>/<uid>-cli/`).
    pub uid: String,
    /// The connection string.
    pub connection_string: String,
    /// The version the processes run (selects the binaries).
    pub running_version: String,
    /// The version the spec asks for.
    pub spec_version: String,
    /// A protocol-incompatible upgrade is under way (status falls back to the spec version).
    pub incompatible_upgrade: bool,
    /// Whether the cluster is configured.
    pub configured: bool,
    /// The lock-key prefix.
    pub lock_prefix: String,
    /// This instance's lock ID.
    pub lock_id: String,
    /// How long a lock is held.
    pub lock_duration: Duration,
    /// Locks are in use.
    pub use_locks: bool,
}

impl ClusterTarget {
    /// The target of `cluster` as it is now.
    pub fn of(cluster: &crate::crd::FoundationDBCluster) -> Self {
        use kube::ResourceExt;
        let status = cluster.status.clone().unwrap_or_default();
        ClusterTarget {
            uid: cluster.uid().unwrap_or_else(|| cluster.name_any()),
            connection_string: status.connection_string.clone(),
            running_version: cluster.running_version(),
            spec_version: cluster.spec.version.clone(),
            incompatible_upgrade: cluster.is_being_upgraded_with_incompatible_version(),
            configured: status.configured,
            lock_prefix: cluster.lock_prefix(),
            lock_id: cluster.lock_id().to_owned(),
            lock_duration: cluster.lock_duration(),
            use_locks: cluster.should_use_locks(),
        }
    }
}
