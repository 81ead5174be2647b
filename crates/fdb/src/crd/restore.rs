//! The FoundationDBRestore API (`fdbrestore`), field for field upstream's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BlobStoreConfiguration, BlobStoreError, is_false};

/// A restore of a backup from a blob store into a FoundationDBCluster: started once with
/// `fdbrestore start`, then followed until it completes.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(remote = "Self", rename_all = "camelCase")]
#[schemars(rename = "FoundationDBRestoreSpec")]
#[kube(
    group = "apps.foundationdb.org",
    version = "v1beta2",
    kind = "FoundationDBRestore",
    plural = "foundationdbrestores",
    singular = "foundationdbrestore",
    shortname = "fdbrestore",
    namespaced,
    status = "FoundationDBRestoreStatus",
    doc = "FoundationDBRestore is the Schema for the foundationdbrestores API",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state")
)]
pub struct FoundationDBRestoreSpec {
    /// The FoundationDBCluster (same namespace) the data is restored into.
    pub destination_cluster_name: String,

    /// The key ranges to restore; all data when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_ranges: Vec<FoundationDBKeyRange>,

    /// The blob store the backup is read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_store_configuration: Option<BlobStoreConfiguration>,

    /// Extra parameters for `fdbrestore`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(max = 100)))]
    pub custom_parameters: Vec<String>,

    /// The encryption key file of the backup.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub encryption_key_path: String,

    /// Restore to this version instead of the latest restorable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_version: Option<u64>,
}

kit::optional_spec!(FoundationDBRestoreSpec);

/// A key range to restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct FoundationDBKeyRange {
    /// The first key.
    #[schemars(regex(pattern = r"^[A-Za-z0-9\/\\-]+$"))]
    pub start: String,
    /// The end key (exclusive).
    #[schemars(regex(pattern = r"^[A-Za-z0-9\/\\-]+$"))]
    pub end: String,
}

/// The observed state of a restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct FoundationDBRestoreStatus {
    /// Whether the restore runs.
    #[serde(default, skip_serializing_if = "is_false")]
    pub running: bool,
    /// The restore's state as `fdbrestore status` reports it: `uninitialized`, `queued`,
    /// `starting`, `running`, `completed`, `aborted`, or `Unknown`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 50))]
    pub state: String,
    /// Flotilla's addition: `Complete` (`True` once the restore completed; `False` with the
    /// reason before, or when the spec cannot be used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl FoundationDBRestore {
    /// The backup's name in the bucket (defaults to this resource's name).
    pub fn backup_name(&self) -> String {
        let name = self.name_any();
        self.spec
            .blob_store_configuration
            .as_ref()
            .map_or(name.clone(), |b| b.backup_name_or(&name).to_owned())
    }

    /// The source URL.
    pub fn backup_url(&self) -> Result<String, BlobStoreError> {
        let conf = self
            .spec
            .blob_store_configuration
            .clone()
            .unwrap_or_default();
        conf.url(&self.backup_name())
    }
}
