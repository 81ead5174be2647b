//! The RedisScheduledBackup API (`redis.io/v1`): upstream's fields, defaults and printer
//! columns. The schedule and time zone are checked at admission by the operator's webhook
//! ([`crate::admission`]), with [`crate::schedule`].
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BackupDeletionPolicy, BackupDestination, BackupMethod, BackupTarget};

/// Backups of a RedisCluster on a cron schedule: each tick creates a RedisBackup
/// `<name>-<unixSeconds>`, and the oldest completed and failed ones beyond the history limits
/// are deleted (their stored artifacts too only with `backupDeletionPolicy: Delete`).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(remote = "Self", rename_all = "camelCase")]
#[schemars(rename = "RedisScheduledBackupSpec")]
#[kube(
    group = "redis.io",
    version = "v1",
    kind = "RedisScheduledBackup",
    plural = "redisscheduledbackups",
    singular = "redisscheduledbackup",
    shortname = "rsb",
    category = "redis",
    namespaced,
    status = "RedisScheduledBackupStatus",
    doc = "RedisScheduledBackup is the Schema for the redisscheduledbackups API.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Last Backup",
        type_ = "date",
        json_path = ".status.lastScheduleTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct RedisScheduledBackupSpec {
    /// When to back up: a 5-field cron expression (minute hour day-of-month month
    /// day-of-week), or `@hourly`, `@daily` (`@midnight`), `@weekly`, `@monthly`, `@yearly`
    /// (`@annually`) or `@every <duration>` (for example `@every 6h`). No seconds field.
    /// The first backup is taken at the first tick after creation.
    #[schemars(length(min = 1))]
    pub schedule: String,

    /// IANA time zone the schedule is read in (for example `America/Chicago`); default `UTC`.
    #[serde(
        default = "default_time_zone",
        skip_serializing_if = "String::is_empty"
    )]
    pub time_zone: String,

    /// Name of the RedisCluster (in the same namespace) to back up.
    pub cluster_name: String,

    /// Which instance takes each backup: `prefer-replica` (default) or `primary`.
    #[serde(default)]
    pub target: BackupTarget,

    /// `rdb` (default) or `aof`.
    #[serde(default)]
    pub method: BackupMethod,

    /// Where each backup is uploaded: exactly one of `s3` or `azure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<BackupDestination>,

    /// No new backups are scheduled while true (phase `Suspended`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Completed RedisBackups to keep (default 3); older ones are deleted. Only the objects,
    /// unless `backupDeletionPolicy` is `Delete`: by default the stored artifacts are kept
    /// (use a bucket lifecycle rule, or `backupDeletionPolicy: Delete`).
    #[serde(default = "default_history_limit")]
    #[schemars(range(min = 0))]
    pub successful_backups_history_limit: Option<i32>,

    /// Failed RedisBackups to keep (default 3); older ones are deleted.
    #[serde(default = "default_history_limit")]
    #[schemars(range(min = 0))]
    pub failed_backups_history_limit: Option<i32>,

    /// The `deletionPolicy` of every RedisBackup this schedule creates: `Retain` (the
    /// default, as upstream: pruning deletes the RedisBackup objects, the artifacts stay) or
    /// `Delete` (a pruned backup's artifact is deleted from the object store too). Backups
    /// created before a change keep their own `deletionPolicy`. An addition to upstream's
    /// API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_deletion_policy: Option<BackupDeletionPolicy>,
}

kit::optional_spec!(RedisScheduledBackupSpec);

impl Default for RedisScheduledBackupSpec {
    fn default() -> Self {
        Self {
            schedule: String::new(),
            time_zone: default_time_zone(),
            cluster_name: String::new(),
            target: BackupTarget::default(),
            method: BackupMethod::default(),
            destination: None,
            suspend: None,
            successful_backups_history_limit: default_history_limit(),
            failed_backups_history_limit: default_history_limit(),
            backup_deletion_policy: None,
        }
    }
}

fn default_time_zone() -> String {
    "UTC".into()
}

fn default_history_limit() -> Option<i32> {
    Some(3)
}

/// Observed state of a RedisScheduledBackup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisScheduledBackupStatus {
    /// `Active` or `Suspended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ScheduledBackupPhase>,

    /// When the last backup was triggered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,

    /// When the next backup will be triggered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,

    /// Name of the most recently created RedisBackup.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_backup_name: String,

    /// `ScheduleValid`: whether the schedule and time zone parse.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The phase of a RedisScheduledBackup.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ScheduledBackupPhase {
    /// Backups are scheduled.
    Active,
    /// `suspend` is true.
    Suspended,
}

/// Condition type: the schedule and time zone parse (reasons `ScheduleParsed`,
/// `InvalidSchedule`).
pub const CONDITION_SCHEDULE_VALID: &str = "ScheduleValid";
