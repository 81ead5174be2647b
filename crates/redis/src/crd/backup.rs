//! The RedisBackup API (`redis.io/v1`) and the object storage destination it shares with
//! RedisScheduledBackup: upstream's fields, defaults and printer columns. No admission rule
//! rejects a RedisBackup (as upstream); the backup controller fails one whose destination is
//! invalid, with [`BackupDestination::validate`]'s message.
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::is_zero_i64;

/// A one-off backup of a RedisCluster: an RDB snapshot (or an AOF archive) taken on one
/// instance and uploaded to S3-compatible or Azure Blob storage.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(remote = "Self", rename_all = "camelCase")]
#[schemars(rename = "RedisBackupSpec")]
#[kube(
    group = "redis.io",
    version = "v1",
    kind = "RedisBackup",
    plural = "redisbackups",
    singular = "redisbackup",
    shortname = "rb",
    category = "redis",
    namespaced,
    status = "RedisBackupStatus",
    doc = "RedisBackup is the Schema for the redisbackups API.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Target", type_ = "string", json_path = ".status.targetPod"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct RedisBackupSpec {
    /// Name of the RedisCluster (in the same namespace) to back up.
    pub cluster_name: String,

    /// Which instance takes the backup: `prefer-replica` (default; a replica in sync with the
    /// primary when there is one, else the primary) or `primary`.
    #[serde(default)]
    pub target: BackupTarget,

    /// `rdb` (default): a `BGSAVE` snapshot; `aof`: a `BGREWRITEAOF` and an archive of the
    /// append-only directory.
    #[serde(default)]
    pub method: BackupMethod,

    /// Where the backup is uploaded: exactly one of `s3` or `azure`. Credentials come from the
    /// cluster's `backupCredentialsSecret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<BackupDestination>,

    /// What happens to the stored artifact when this RedisBackup is deleted (by hand, or
    /// pruned by its RedisScheduledBackup's history limits): `Retain` (the default, as
    /// upstream: the object goes, the artifact stays) or `Delete` (the operator deletes the
    /// artifact from the object store first, through one of the cluster's data pods, which
    /// hold the credentials; finalizer `redis.io/artifact-cleanup`). A deletion that cannot
    /// be done in time (no reachable data pod, the store refusing) ends with a Warning
    /// `ArtifactKept` and the artifact left in place, so no object waits forever. An
    /// addition to upstream's API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<BackupDeletionPolicy>,
}

kit::optional_spec!(RedisBackupSpec);

/// What happens to a backup's stored artifact when the RedisBackup is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BackupDeletionPolicy {
    /// The artifact stays in the object store (the default, upstream's behaviour).
    #[default]
    Retain,
    /// The artifact is deleted from the object store before the RedisBackup goes.
    Delete,
}

impl RedisBackupSpec {
    /// The policy in effect (`Retain` when not set).
    pub fn deletion_policy(&self) -> BackupDeletionPolicy {
        self.deletion_policy.unwrap_or_default()
    }
}

/// Which instance a backup runs on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BackupTarget {
    /// The primary.
    #[serde(rename = "primary")]
    Primary,
    /// An in-sync replica when there is one, else the primary.
    #[default]
    #[serde(rename = "prefer-replica")]
    PreferReplica,
}

/// How a backup is taken.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackupMethod {
    /// An RDB snapshot (`BGSAVE`).
    #[default]
    Rdb,
    /// An archive of the append-only files (`BGREWRITEAOF`).
    Aof,
}

/// The format of a stored backup.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BackupArtifactType {
    /// An RDB file.
    #[serde(rename = "rdb")]
    Rdb,
    /// A tar.gz of the append-only directory.
    #[serde(rename = "aof-archive")]
    AofArchive,
}

/// Object storage destination of a backup: exactly one backend.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct BackupDestination {
    /// An S3-compatible bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Destination>,

    /// An Azure Blob Storage container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureBlobDestination>,
}

impl BackupDestination {
    /// Upstream's destination check: exactly one backend, with its bucket or container.
    pub fn validate(destination: Option<&BackupDestination>) -> Result<(), String> {
        let Some(d) = destination else {
            return Err("destination is required".into());
        };
        match (&d.s3, &d.azure) {
            (None, None) => Err("destination requires exactly one of s3 or azure".into()),
            (Some(_), Some(_)) => Err("destination must set exactly one of s3 or azure".into()),
            (Some(s3), None) if s3.bucket.is_empty() => {
                Err("destination.s3.bucket is required".into())
            }
            (None, Some(az)) if az.container.is_empty() => {
                Err("destination.azure.container is required".into())
            }
            _ => Ok(()),
        }
    }
}

/// An S3-compatible storage location.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct S3Destination {
    /// Bucket name.
    pub bucket: String,

    /// Key prefix within the bucket; the object is `<path>/<backupName>.rdb` (or
    /// `.aof.tar.gz`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,

    /// Endpoint URL of a non-AWS S3-compatible store.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,

    /// AWS region (us-east-1 when not set).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
}

/// An Azure Blob Storage location. Credentials are taken from the cluster's
/// `backupCredentialsSecret` in this order: `AZURE_STORAGE_CONNECTION_STRING`, then
/// `AZURE_STORAGE_ACCOUNT` with `AZURE_STORAGE_KEY`, then `AZURE_STORAGE_SAS_TOKEN`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureBlobDestination {
    /// Container name.
    pub container: String,

    /// Blob name prefix within the container.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,

    /// Storage account name, used to build the service URL for shared-key and SAS
    /// authentication (else `AZURE_STORAGE_ACCOUNT` from the credentials). Ignored with a
    /// connection string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub account_name: String,

    /// Blob service URL (Azurite, sovereign clouds); `https://<accountName>.blob.core.windows.net`
    /// when not set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,
}

/// Observed state of a RedisBackup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisBackupStatus {
    /// `Pending`, `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,

    /// The pod that runs or ran the backup.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_pod: String,

    /// When the backup started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// When the backup completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,

    /// Size of the stored backup in bytes.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub backup_size: i64,

    /// Where the backup is stored: `s3://<bucket>/<key>` or `azblob://<container>/<blob>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backup_path: String,

    /// Format of the stored backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<BackupArtifactType>,

    /// Per-shard artifacts of a cluster-mode backup (unused while cluster mode is reserved).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shard_artifacts: BTreeMap<String, ShardBackupArtifact>,

    /// Why the backup failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,

    /// Conditions of the backup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The phase of a RedisBackup.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BackupPhase {
    /// Waiting for the cluster to be healthy.
    Pending,
    /// Being taken and uploaded.
    Running,
    /// Stored.
    Completed,
    /// Failed; `error` says why.
    Failed,
}

/// The stored backup of one shard (cluster mode; unused while cluster mode is reserved).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardBackupArtifact {
    /// The pod that took it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_pod: String,
    /// Where it is stored.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backup_path: String,
    /// Size in bytes.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub backup_size: i64,
    /// Format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<BackupArtifactType>,
    /// SHA-256 of the stored object.
    #[serde(
        rename = "checksumSHA256",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub checksum_sha256: String,
}
