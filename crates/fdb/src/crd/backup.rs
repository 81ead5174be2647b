//! The FoundationDBBackup API (`fdbbackup`), field for field upstream's.
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    BlobStoreConfiguration, BlobStoreError, ContainerOverrides, FdbVersion, is_default, is_false,
    is_zero,
};

/// A continuous (or one-time) backup of a FoundationDBCluster to a blob store: a Deployment
/// of `backup_agent` processes and the backup itself, started, paused, resumed, modified and
/// stopped with `fdbbackup`.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(remote = "Self", rename_all = "camelCase")]
#[schemars(rename = "FoundationDBBackupSpec")]
#[kube(
    group = "apps.foundationdb.org",
    version = "v1beta2",
    kind = "FoundationDBBackup",
    plural = "foundationdbbackups",
    singular = "foundationdbbackup",
    shortname = "fdbbackup",
    namespaced,
    status = "FoundationDBBackupStatus",
    doc = "FoundationDBBackup is the Schema for the foundationdbbackups API",
    printcolumn(
        name = "Generation",
        type_ = "integer",
        description = "Latest generation of the spec",
        json_path = ".metadata.generation"
    ),
    printcolumn(
        name = "Reconciled",
        type_ = "integer",
        description = "Last reconciled generation of the spec",
        json_path = ".status.generations.reconciled"
    ),
    printcolumn(
        name = "Restorable",
        type_ = "boolean",
        description = "If the backup is restorable",
        json_path = ".status.backupDetails.restorable"
    ),
    printcolumn(
        name = "Tag",
        type_ = "string",
        description = "The current backup tag",
        json_path = ".status.backupDetails.tag"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct FoundationDBBackupSpec {
    /// The FoundationDB version of the backup agents.
    pub version: String,

    /// The FoundationDBCluster (same namespace) to back up.
    pub cluster_name: String,

    /// The data center of the agents.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data_center: String,

    /// `Running` (default), `Paused` or `Stopped`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["Running", "Stopped", "Paused"]))]
    pub backup_state: String,

    /// Backup agents to run (default 2; 0 runs none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_count: Option<i64>,

    /// Seconds between snapshots (default 864000, ten days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_period_seconds: Option<i64>,

    /// Labels and annotations of the agents' Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_deployment_metadata: Option<ObjectMeta>,

    /// The agents' pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_spec: Option<PodTemplateSpec>,

    /// Extra parameters for the agents and `fdbbackup` (`locality_*` ones are not passed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(max = 100)))]
    pub custom_parameters: Vec<String>,

    /// Deprecated: use image configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub allow_tag_override: Option<bool>,

    /// The blob store the backup is written to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_store_configuration: Option<BlobStoreConfiguration>,

    /// The encryption key file (7.3.73+ / 7.4.6+; ignored by older versions).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub encryption_key_path: String,

    /// Customization of the agents' main container.
    #[serde(default, skip_serializing_if = "is_default")]
    pub main_container: ContainerOverrides,

    /// Customization of the sidecar container.
    #[serde(default, skip_serializing_if = "is_default")]
    pub sidecar_container: ContainerOverrides,

    /// `split` or `unified` images for the agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), extend("enum" = ["split", "unified"], "default" = "split"))]
    pub image_type: Option<String>,

    /// `backup_agent` (default), `partitioned_log` or `unmanaged` (the operator runs agents but
    /// never starts or stops the backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        extend("enum" = ["backup_agent", "partitioned_log", "unmanaged"], "default" = "backup_agent")
    )]
    pub backup_type: Option<String>,

    /// What deleting the resource does: `noop` (default), `stop` the backup, or `cleanup`
    /// (stop and delete its data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("enum" = ["noop", "stop", "cleanup"], "default" = "noop"))]
    pub deletion_policy: Option<String>,

    /// `continuous` (default) or `oneTime` (one snapshot, then stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("enum" = ["continuous", "oneTime"], "default" = "continuous"))]
    pub backup_mode: Option<String>,

    /// The backup tag (default `default`); immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "BackupTag is immutable"}])
    )]
    pub tag: Option<String>,
}

kit::optional_spec!(FoundationDBBackupSpec);

/// The observed state of a backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBBackupStatus {
    /// Agents that are up to date, ready and not terminating.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub agent_count: i64,
    /// The agents' Deployment is configured as desired.
    #[serde(default, skip_serializing_if = "is_false")]
    pub deployment_configured: bool,
    /// The backup as the database reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_details: Option<FoundationDBBackupStatusBackupDetails>,
    /// The latest generation that reached each stage.
    #[serde(default, skip_serializing_if = "is_default")]
    pub generations: BackupGenerationStatus,
    /// Flotilla's addition: `Ready` (the spec is carried out; `False` with the reason while
    /// something is pending or the spec cannot be used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The backup as the database reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBBackupStatusBackupDetails {
    /// The destination URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// Whether the backup runs.
    #[serde(default, skip_serializing_if = "is_false")]
    pub running: bool,
    /// Whether the agents are paused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// The snapshot period in seconds.
    #[serde(rename = "snapshotTime", default, skip_serializing_if = "is_zero")]
    pub snapshot_period_seconds: i64,
    /// Whether the backup can be restored.
    #[serde(default, skip_serializing_if = "is_false")]
    pub restorable: bool,
    /// The backup tag.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tag: String,
}

/// The latest generation in each backup state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupGenerationStatus {
    /// The last fully reconciled generation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reconciled: i64,
    /// The agents' Deployment needs an update.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_backup_agent_update: i64,
    /// The backup must be started.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_backup_start: i64,
    /// The backup must be stopped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_backup_stop: i64,
    /// The backup must be paused or resumed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_backup_pause_toggle: i64,
    /// The backup must be modified.
    #[serde(
        rename = "needsBackupModification",
        default,
        skip_serializing_if = "is_zero"
    )]
    pub needs_backup_reconfiguration: i64,
}

/// `backup_agent`.
pub const BACKUP_TYPE_AGENT: &str = "backup_agent";
/// `partitioned_log`.
pub const BACKUP_TYPE_PARTITIONED_LOG: &str = "partitioned_log";
/// `unmanaged`.
pub const BACKUP_TYPE_UNMANAGED: &str = "unmanaged";

impl FoundationDBBackup {
    /// Running or Paused (or unset), except a one-time backup that is already restorable.
    pub fn should_run(&self) -> bool {
        let restorable = self
            .status
            .as_ref()
            .and_then(|s| s.backup_details.as_ref())
            .is_some_and(|d| d.restorable);
        if self.backup_mode() == "oneTime" && restorable {
            return false;
        }
        matches!(self.spec.backup_state.as_str(), "" | "Running" | "Paused")
    }

    /// `backupState: Paused`.
    pub fn should_be_paused(&self) -> bool {
        self.spec.backup_state == "Paused"
    }

    /// The backup's name in the bucket.
    pub fn backup_name(&self) -> String {
        let name = self.name_any();
        self.spec
            .blob_store_configuration
            .as_ref()
            .map_or(name.clone(), |b| b.backup_name_or(&name).to_owned())
    }

    /// The destination URL.
    pub fn backup_url(&self) -> Result<String, BlobStoreError> {
        let conf = self
            .spec
            .blob_store_configuration
            .clone()
            .unwrap_or_default();
        conf.url(&self.backup_name())
    }

    /// Seconds between snapshots (default 864000).
    pub fn snapshot_period_seconds(&self) -> i64 {
        self.spec.snapshot_period_seconds.unwrap_or(864_000)
    }

    /// Agents to run (default 2).
    pub fn desired_agent_count(&self) -> i64 {
        self.spec.agent_count.unwrap_or(2)
    }

    /// The backup type (default `backup_agent`).
    pub fn backup_type(&self) -> &str {
        self.spec
            .backup_type
            .as_deref()
            .unwrap_or(BACKUP_TYPE_AGENT)
    }

    /// The deletion policy (default `noop`).
    pub fn deletion_policy(&self) -> &str {
        self.spec.deletion_policy.as_deref().unwrap_or("noop")
    }

    /// The backup mode (default `continuous`).
    pub fn backup_mode(&self) -> &str {
        self.spec.backup_mode.as_deref().unwrap_or("continuous")
    }

    /// The tag (default `default`).
    pub fn tag(&self) -> &str {
        self.spec.tag.as_deref().unwrap_or("default")
    }

    /// Whether the agents use the unified image (the getter's default is unified).
    pub fn uses_unified_image(&self) -> bool {
        self.spec.image_type.as_deref().unwrap_or("unified") == "unified"
    }

    /// The encryption key path when the version supports encrypted backups, else empty.
    pub fn encryption_key(&self) -> String {
        match FdbVersion::parse(&self.spec.version) {
            Ok(v) if v.supports_backup_encryption() => self.spec.encryption_key_path.clone(),
            _ => String::new(),
        }
    }

    /// A running backup whose snapshot period or URL differs from the spec.
    pub fn needs_backup_reconfiguration(&self) -> bool {
        let Some(details) = self.status.as_ref().and_then(|s| s.backup_details.as_ref()) else {
            return false;
        };
        if !details.running {
            return false;
        }
        let Ok(url) = self.backup_url() else {
            return false;
        };
        self.snapshot_period_seconds() != details.snapshot_period_seconds || url != details.url
    }

    /// Compares spec and status like upstream's `CheckReconciliation`: the generation markers
    /// of what is still to do, or only `reconciled` when nothing is. Returns whether reconciled.
    pub fn check_reconciliation(&self, status: &mut FoundationDBBackupStatus) -> bool {
        let generation = self.metadata.generation.unwrap_or_default();
        let mut reconciled = true;
        let g = &mut status.generations;
        if status.agent_count != self.desired_agent_count() || !status.deployment_configured {
            g.needs_backup_agent_update = generation;
            reconciled = false;
        }
        if self.backup_type() != BACKUP_TYPE_UNMANAGED {
            let details = status.backup_details.as_ref();
            let running = details.is_some_and(|d| d.running);
            let paused = details.is_some_and(|d| d.paused);
            let should_run = self.should_run();
            if should_run && !running {
                g.needs_backup_start = generation;
                reconciled = false;
            }
            if !should_run && running {
                g.needs_backup_stop = generation;
                reconciled = false;
            }
            if self.should_be_paused() != paused {
                g.needs_backup_pause_toggle = generation;
                reconciled = false;
            }
            if running && self.needs_backup_reconfiguration() {
                g.needs_backup_reconfiguration = generation;
                reconciled = false;
            }
        }
        if reconciled {
            status.generations = BackupGenerationStatus {
                reconciled: generation,
                ..Default::default()
            };
        }
        reconciled
    }
}
