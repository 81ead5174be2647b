//! The FoundationDBCluster status, field for field upstream's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    DatabaseConfiguration, ProcessGroupStatus, RequiredAddressSet, is_default, is_false, is_zero,
};

/// The observed state of a FoundationDBCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBClusterStatus {
    /// The running configuration of the database (updated only while it is available).
    #[serde(default, skip_serializing_if = "is_default")]
    pub database_configuration: DatabaseConfiguration,
    /// The latest generation that reached each stage of reconciliation.
    #[serde(default, skip_serializing_if = "is_default")]
    pub generations: ClusterGenerationStatus,
    /// The database's health.
    #[serde(default, skip_serializing_if = "is_default")]
    pub health: ClusterHealth,
    /// The addresses processes must listen on.
    #[serde(default, skip_serializing_if = "is_default")]
    pub required_addresses: RequiredAddressSet,
    /// The config map is out of date with the spec.
    #[serde(default, skip_serializing_if = "is_false")]
    pub has_incorrect_config_map: bool,
    /// The services are out of date with the spec.
    #[serde(default, skip_serializing_if = "is_false")]
    pub has_incorrect_service_config: bool,
    /// The coordinators no longer meet the fault-tolerance requirements.
    #[serde(default, skip_serializing_if = "is_false")]
    pub needs_new_coordinators: bool,
    /// The version the processes run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub running_version: String,
    /// The cluster file's contents.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection_string: String,
    /// Whether the database has been configured (never goes back to false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub configured: bool,
    /// Whether every pod has a listen-address variable.
    #[serde(
        rename = "hasListenIPsForAllPods",
        default,
        skip_serializing_if = "is_false"
    )]
    pub has_listen_ips_for_all_pods: bool,
    /// The storage servers per pod seen (more than one value: a migration is under way).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub storage_servers_per_disk: Vec<i64>,
    /// The log servers per pod seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub log_servers_per_disk: Vec<i64>,
    /// The image types in use (more than one: a migration is under way).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10), inner(length(max = 1024)))]
    pub image_types: Vec<String>,
    /// Every process group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_groups: Vec<ProcessGroupStatus>,
    /// The locking system.
    #[serde(default, skip_serializing_if = "is_default")]
    pub locks: LockSystemStatus,
    /// Deprecated and unused.
    #[serde(default, skip_serializing_if = "is_default")]
    pub maintenance_mode_info: MaintenanceModeInfo,
    /// The number of process groups the spec asks for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub desired_process_groups: i64,
    /// Process groups with no condition that are not marked for removal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reconciled_process_groups: i64,
    /// Flotilla's addition: `Ready` (reconciled), `SpecValid` (false when only the operator can
    /// tell the spec is unusable), `DatabaseAvailable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The latest generation in each state. `reconciled` equal to `metadata.generation` means the
/// spec is rolled out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGenerationStatus {
    /// The last fully reconciled generation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reconciled: i64,
    /// Waiting for a configuration change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_configuration_change: i64,
    /// Waiting for a coordinator change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_coordinator_change: i64,
    /// Waiting for processes to be restarted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_bounce: i64,
    /// Waiting for pods to be recreated.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_pod_deletion: i64,
    /// Waiting for process groups to be excluded and removed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_shrink: i64,
    /// Waiting for process groups to be added.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_grow: i64,
    /// Waiting for the monitor configuration to reach the pods.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_monitor_conf_update: i64,
    /// The database was unavailable.
    #[serde(
        rename = "missingDatabaseStatus",
        default,
        skip_serializing_if = "is_zero"
    )]
    pub database_unavailable: i64,
    /// Processes listen on more addresses than they should.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub has_extra_listeners: i64,
    /// Waiting for a service change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_service_update: i64,
    /// Excluded process groups whose resources are still terminating (counts as reconciled).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub has_pending_removal: i64,
    /// A process group has a condition.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub has_unhealthy_process: i64,
    /// Waiting for the deny list to reach the database.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub needs_lock_configuration_changes: i64,
}

/// The database's health.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterHealth {
    /// The database accepts reads and writes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub available: bool,
    /// The database is fully healthy.
    #[serde(default, skip_serializing_if = "is_false")]
    pub healthy: bool,
    /// All data is fully replicated.
    #[serde(default, skip_serializing_if = "is_false")]
    pub full_replication: bool,
    /// The priority of the most urgent data movement.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub data_movement_priority: i64,
}

/// The locking system as seen in the database.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LockSystemStatus {
    /// Operator instances denied from taking locks.
    #[serde(
        rename = "lockDenyList",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub deny_list: Vec<String>,
}

/// Deprecated and unused.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceModeInfo {
    /// Deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// Deprecated.
    #[serde(rename = "zoneID", default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 512))]
    pub zone_id: String,
    /// Deprecated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 200))]
    pub process_groups: Vec<String>,
}
