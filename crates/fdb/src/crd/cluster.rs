//! The FoundationDBCluster spec (`apps.foundationdb.org/v1beta2`), field for field upstream's.
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    ContainerOverrides, DatabaseConfiguration, FoundationDBClusterStatus, ProcessClass,
    ProcessCounts, ProcessGroupId, is_default, is_false, is_zero,
};

/// A FoundationDB cluster: process groups (pods, with PVCs for stateful classes) per process
/// class, their configuration, the database configuration, coordinators and upgrades.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(remote = "Self", rename_all = "camelCase")]
#[schemars(rename = "FoundationDBClusterSpec")]
#[kube(
    group = "apps.foundationdb.org",
    version = "v1beta2",
    kind = "FoundationDBCluster",
    plural = "foundationdbclusters",
    singular = "foundationdbcluster",
    shortname = "fdb",
    namespaced,
    status = "FoundationDBClusterStatus",
    doc = "FoundationDBCluster is the Schema for the foundationdbclusters API",
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
        name = "Available",
        type_ = "boolean",
        description = "Database available",
        json_path = ".status.health.available"
    ),
    printcolumn(
        name = "FullReplication",
        type_ = "boolean",
        description = "Database fully replicated",
        json_path = ".status.health.fullReplication"
    ),
    printcolumn(
        name = "ReconciledProcessGroups",
        type_ = "integer",
        description = "Number of reconciled process groups",
        json_path = ".status.reconciledProcessGroups",
        priority = 1
    ),
    printcolumn(
        name = "DesiredProcessGroups",
        type_ = "integer",
        description = "Desired number of process groups",
        json_path = ".status.desiredProcessGroups",
        priority = 1
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        description = "Running version",
        json_path = ".status.runningVersion"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct FoundationDBClusterSpec {
    /// The FoundationDB version the cluster runs (`<major>.<minor>.<patch>`, at least 7.1.0).
    /// A protocol-compatible change (same major.minor) recreates pods zone by zone; an
    /// incompatible upgrade stages the new binaries on every pod, waits until every client
    /// supports the new version, then restarts every process at once.
    #[schemars(
        regex(pattern = r"(\d+)\.(\d+)\.(\d+)"),
        extend("x-kubernetes-validations" = [{
            "rule": "!self.matches('^[0-9]+[.][0-9]+[.]') || int(self.split('.')[0]) > 7 || (int(self.split('.')[0]) == 7 && int(self.split('.')[1]) >= 1)",
            "message": "version is not supported, minimum supported version is: 7.1.0",
        }])
    )]
    pub version: String,

    /// The database configuration (`configure`): redundancy mode, storage engine, role
    /// counts, regions. Also drives the default process counts and the coordinator count.
    #[serde(default, skip_serializing_if = "is_default")]
    pub database_configuration: DatabaseConfiguration,

    /// Settings per process class (`general` applies to every class without its own entry,
    /// field by field): pod template, volume claim template, custom fdbserver parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub processes: BTreeMap<ProcessClass, ProcessSettings>,

    /// Process groups (pods, not processes) per class. Usually left out: the operator derives
    /// the counts from the database configuration (an empty double spec gets 3 storage, 4 log
    /// and 9 stateless). -1 means none of that class.
    #[serde(default, skip_serializing_if = "is_default")]
    pub process_counts: ProcessCounts,

    /// An extra connection string, used when neither the status nor the config map has one
    /// (joining an existing database, recovering one).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub seed_connection_string: String,

    /// Part of the connection string (database name, generation ID) the initial cluster file
    /// uses; no effect with `seedConnectionString`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub partial_connection_string: ConnectionString,

    /// What to replicate across: the zone of each process (`zoneid` locality). Default: the
    /// node (`kubernetes.io/hostname` from `spec.nodeName`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub fault_domain: FoundationDBClusterFaultDomain,

    /// Process groups to replace: each is marked for removal, a replacement is created, it
    /// is excluded and removed once its data moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 0, max = 500))]
    pub process_groups_to_remove: Vec<ProcessGroupId>,

    /// Process groups to replace without excluding them first (a pod without an address,
    /// data given up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 0, max = 500))]
    pub process_groups_to_remove_without_exclusion: Vec<ProcessGroupId>,

    /// Extra data, labels and annotations for the `<cluster>-config` config map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMap>,

    /// Customization of the `foundationdb` container (TLS, image configs).
    #[serde(default, skip_serializing_if = "is_default")]
    pub main_container: ContainerOverrides,

    /// Customization of the `foundationdb-kubernetes-sidecar` container.
    #[serde(default, skip_serializing_if = "is_default")]
    pub sidecar_container: ContainerOverrides,

    /// Root CAs the cluster trusts, in PEM.
    #[serde(rename = "trustedCAs", default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_cas: Vec<String>,

    /// Extra variables the sidecar substitutes in the monitor configuration (split image).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sidecar_variables: Vec<String>,

    /// The trace-log group (`--loggroup`); defaults to the cluster's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_group: String,

    /// The data center of these processes (`--locality_dcid`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data_center: String,

    /// The data hall of these processes (`--locality_data_hall`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data_hall: String,

    /// Switches and limits for the operator's automatic actions.
    #[serde(default, skip_serializing_if = "is_default")]
    pub automation_options: FoundationDBClusterAutomationOptions,

    /// Prefix of the process-group IDs (`<prefix>-<class>-<n>`); also this operator
    /// instance's ID in the global lock. Changing it replaces every process group.
    #[serde(
        rename = "processGroupIDPrefix",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    #[schemars(
        length(max = 43),
        regex(pattern = r"^[a-z0-9A-Z]([\-._a-z0-9A-Z])*[a-z0-9A-Z]$")
    )]
    pub process_group_id_prefix: String,

    /// How global operations are locked between operator instances sharing one database.
    #[serde(default, skip_serializing_if = "is_default")]
    pub lock_options: LockOptions,

    /// How processes are addressed: headless service, DNS names in the cluster file, IP
    /// family, public IP source.
    #[serde(default, skip_serializing_if = "is_default")]
    pub routing: RoutingConfig,

    /// Skip the check that every client supports a new version before an upgrade.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_upgradability_checks: bool,

    /// Fault injection for testing.
    #[serde(default, skip_serializing_if = "is_default")]
    pub buggify: BuggifyConfig,

    /// fdbserver processes per storage pod (default 1). Changing it replaces storage pods.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub storage_servers_per_pod: i64,

    /// fdbserver processes per log or transaction pod (default 1).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub log_servers_per_pod: i64,

    /// Seconds every process must have been up before the operator restarts processes.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 1), extend("default" = 600))]
    pub minimum_uptime_seconds_for_bounce: i64,

    /// Replace (rather than recreate) pods when their CPU or memory requests increase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub replace_instances_when_resources_change: Option<bool>,

    /// Skip reconciling this cluster entirely.
    #[serde(default, skip_serializing_if = "is_false")]
    #[schemars(extend("default" = false))]
    pub skip: bool,

    /// Classes eligible as coordinators and their priority (higher is preferred). Empty:
    /// every stateful class, log-like classes first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coordinator_selection: Vec<CoordinatorSelectionSetting>,

    /// The labels the operator uses to find and mark its resources.
    #[serde(rename = "labels", default, skip_serializing_if = "is_default")]
    pub label_config: LabelConfig,

    /// Deprecated: pass `--listen_address` separately from the public address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_explicit_listen_address: Option<bool>,

    /// `unified` (default: fdb-kubernetes-monitor, configuration through pod annotations) or
    /// `split` (fdbmonitor plus the sidecar's HTTP API). This operator builds only the unified
    /// image: a cluster asking for `split` is reported invalid (`SpecValid` False, reason
    /// `InvalidSpec`) and left as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), extend("enum" = ["split", "unified"], "default" = "unified"))]
    pub image_type: Option<String>,

    /// At most this many zones may have unavailable pods while pods are updated; unset is
    /// unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_zones_with_unavailable_pods: Option<i64>,
}

kit::optional_spec!(FoundationDBClusterSpec);

/// Settings of one process class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessSettings {
    /// The pod template. An image with a tag is refused: the tag follows `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// The persistent volume claim template (stateful classes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<PersistentVolumeClaim>,
    /// Extra fdbserver parameters (`name=value`; a value `$X` reads environment variable X).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(max = 100)))]
    pub custom_parameters: Option<Vec<String>>,
}

/// A connection string, or part of one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionString {
    /// The database name, kept across coordinator changes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub database_name: String,
    /// The ID of the current coordinator generation.
    #[serde(
        rename = "generationID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub generation_id: String,
    /// The coordinators' addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coordinators: Vec<String>,
}

/// What processes replicate across.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBClusterFaultDomain {
    /// The topology key (default `kubernetes.io/hostname`); `foundationdb.org/none` makes
    /// every pod its own zone, `foundationdb.org/kubernetes-cluster` the whole Kubernetes
    /// cluster one zone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// A fixed zone ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Where the zone ID comes from: a pod field path (default `spec.nodeName`), or `$VAR`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value_from: String,
    /// Fault domains in the data center (kubernetes-cluster strategy).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zone_count: i64,
    /// This Kubernetes cluster's index among them (kubernetes-cluster strategy).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zone_index: i64,
}

/// Switches and limits for automatic actions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBClusterAutomationOptions {
    /// Whether the operator may reconfigure the database (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configure_database: Option<bool>,
    /// Whether the operator may restart fdbserver processes (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_processes: Option<bool>,
    /// Fetch `status json` once per reconcile and share it between steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_database_status_for_reconciliation: Option<bool>,
    /// Automatic replacement of failed process groups.
    #[serde(default, skip_serializing_if = "is_default")]
    pub replacements: AutomaticReplacementOptions,
    /// Pods Pending longer than this (nanoseconds; default 5 min) are ignored.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ignore_pending_pods_duration: i64,
    /// Use non-blocking excludes when verifying exclusions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_non_blocking_excludes: Option<bool>,
    /// Exclude by `locality_instance_id` instead of IP (default true from 7.1.42 / 7.3.26).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_localities_for_exclusion: Option<bool>,
    /// Pods terminating longer than this are ignored (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_terminating_pods_seconds: Option<i64>,
    /// Groups missing processes longer than this are ignored by bounces (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_missing_processes_seconds: Option<i64>,
    /// A pod deleting longer than this is `PodFailing` (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_pod_duration_seconds: Option<i64>,
    /// Misconfigured process groups replaced at once (unset: unlimited; 0 blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_concurrent_replacements: Option<i64>,
    /// How pods are deleted to update them: `All`, `Zone`, `ProcessGroup`, `None`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["All", "Zone", "ProcessGroup", "None"], "default" = "Zone"))]
    pub deletion_mode: String,
    /// How removed process groups are deleted: `All`, `Zone`, `ProcessGroup`, `None`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["All", "Zone", "ProcessGroup", "None"], "default" = "Zone"))]
    pub removal_mode: String,
    /// Seconds between removals (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_between_removals_seconds: Option<i64>,
    /// How pod spec changes roll out: `Replace`, `ReplaceTransactionSystem`, `Delete`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend(
        "enum" = ["Replace", "ReplaceTransactionSystem", "Delete"],
        "default" = "ReplaceTransactionSystem"
    ))]
    pub pod_update_strategy: String,
    /// Deprecated: use `databaseInteractionMode`.
    #[serde(
        rename = "useManagementAPI",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub use_management_api: Option<bool>,
    /// Maintenance-mode settings.
    #[serde(default, skip_serializing_if = "is_default")]
    pub maintenance_mode_options: MaintenanceModeOptions,
    /// Client log groups that never block an upgrade (default `fdb-kubernetes-operator`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10), inner(length(max = 256)))]
    pub ignore_log_groups_for_upgrade: Vec<String>,
    /// `local` (default) or `global` coordination between operator instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["local", "global"], "default" = "local"))]
    pub synchronization_mode: Option<String>,
    /// `fdbcli` (default) or `managementapi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 256),
        extend("x-kubernetes-validations" = [{
            "rule": "self in ['fdbcli', 'managementapi']",
            "message": "database interaction mode is not supported, allowed values: [fdbcli, managementapi]",
        }])
    )]
    pub database_interaction_mode: Option<String>,
}

/// Maintenance-mode settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceModeOptions {
    /// Set the maintenance zone while updating storage pods.
    #[serde(
        rename = "UseMaintenanceModeChecker",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub use_maintenance_mode_checker: Option<bool>,
    /// Reset maintenance once every storage process of the zone restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_maintenance_mode: Option<bool>,
    /// How long a zone stays in maintenance (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_mode_time_seconds: Option<i64>,
}

/// A node taint the operator replaces pods for.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaintReplacementOption {
    /// The taint key (`*` for any).
    #[schemars(length(max = 256), regex(pattern = r"^([\-._\/a-z0-9A-Z\*])*$"))]
    pub key: String,
    /// Seconds the taint must be present before replacing.
    #[schemars(range(min = 0))]
    pub duration_in_seconds: i64,
}

/// Automatic replacement of failed process groups.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutomaticReplacementOptions {
    /// Whether failed process groups are replaced automatically (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Count the budget in fault domains rather than process groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_domain_based_replacements: Option<bool>,
    /// Seconds a group must be failed before it is replaced (default 7200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_detection_time_seconds: Option<i64>,
    /// Seconds in `NodeTaintReplacing` before replacement (default 1800).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint_replacement_time_seconds: Option<i64>,
    /// Automatic replacements in flight at once (0 disables them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 1))]
    pub max_concurrent_replacements: Option<i64>,
    /// The taints the operator reacts to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub taint_replacement_options: Vec<TaintReplacementOption>,
    /// Fault domains that may have tainted groups replaced (number or percentage; default
    /// 10 %, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fault_domains_with_tainted_process_groups: Option<IntOrString>,
}

/// Lock options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockOptions {
    /// Disable locking. Unset: locks are used only with several zones of Kubernetes clusters,
    /// several regions or three_data_hall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_locks: Option<bool>,
    /// The key prefix of the lock records (default `\xff\x02/org.foundationdb.kubernetes-operator`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lock_key_prefix: String,
    /// How long a lock is held (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_duration_minutes: Option<i64>,
    /// Operator instances denied (or, with `allow: true`, allowed again) to take locks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_list: Vec<LockDenyListEntry>,
}

/// One deny-list entry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LockDenyListEntry {
    /// The operator instance (its process-group-ID prefix).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// `true` removes the instance from the deny list; removing the entry does not.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow: bool,
}

/// Routing to the processes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingConfig {
    /// Run a headless service named like the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headless_service: Option<bool>,
    /// `pod` (default) or `service`: where processes get their public IP.
    #[serde(
        rename = "publicIPSource",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub public_ip_source: Option<String>,
    /// 4 or 6.
    #[serde(
        rename = "podIPFamily",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self in [0, 4, 6]",
        "message": "Pod IP Family is not valid, only 4 or 6 are allowed.",
    }]))]
    pub pod_ip_family: Option<i64>,
    /// Coordinators are named by DNS in the cluster file (default true).
    #[serde(
        rename = "useDNSInClusterFile",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub use_dns_in_cluster_file: Option<bool>,
    /// Give pods DNS names and pass them as `--locality_dns_name`.
    #[serde(
        rename = "defineDNSLocalityFields",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub define_dns_locality_fields: Option<bool>,
    /// The cluster domain of DNS names (default `cluster.local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub dns_domain: Option<String>,
}

/// Which addresses processes must listen on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequiredAddressSet {
    /// A TLS address.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tls: bool,
    /// A non-TLS address.
    #[serde(rename = "nonTLS", default, skip_serializing_if = "is_false")]
    pub non_tls: bool,
}

/// Containers to crash-loop, per process group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrashLoopContainerObject {
    /// The container.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 253))]
    pub container_name: String,
    /// The process groups (`*` for all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 0, max = 10000))]
    pub targets: Vec<ProcessGroupId>,
}

/// Fault injection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuggifyConfig {
    /// Process groups whose pods must fail to schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_schedule: Vec<ProcessGroupId>,
    /// Deprecated: use `crashLoopContainers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crash_loop: Vec<ProcessGroupId>,
    /// Containers to crash-loop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 0, max = 8))]
    pub crash_loop_containers: Vec<CrashLoopContainerObject>,
    /// Configure no fdbserver process at all.
    #[serde(default, skip_serializing_if = "is_false")]
    pub empty_monitor_conf: bool,
    /// Process groups the restart command leaves out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub ignore_during_restart: Vec<ProcessGroupId>,
    /// Process groups that are excluded but never removed while listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub block_removal: Vec<ProcessGroupId>,
}

/// Labels the operator uses.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelConfig {
    /// Labels identifying the cluster's resources (default
    /// `foundationdb.org/fdb-cluster-name: <name>`), applied to everything it creates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Extra labels for created resources.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_labels: BTreeMap<String, String>,
    /// Labels carrying the process-group ID; the first is used for selection.
    #[serde(
        rename = "processGroupIDLabels",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 100))]
    pub process_group_id_labels: Vec<String>,
    /// Labels carrying the process class; the first is used for selection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub process_class_labels: Vec<String>,
    /// Deprecated: also require an owner reference to the cluster.
    #[serde(
        rename = "filterOnOwnerReference",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub filter_on_owner_references: Option<bool>,
}

/// A class eligible as coordinator, with its priority.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoordinatorSelectionSetting {
    /// The class.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub process_class: String,
    /// Higher is preferred.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
}
