//! The machine-readable status (`status json`), as far as the operator reads it, with
//! FoundationDB's own JSON names (documentation: "Machine-readable status" schema), and the
//! checks upstream makes before trusting a status document.
//!
//! Contract of [`parse`]: text before the first `{` (fdbcli warnings) is dropped; a document
//! whose `client.database_status.available` is false, whose cluster messages hold
//! `status_incomplete_timeout`, or (when processes are required) which lists no process, is
//! a timeout ([`StatusError::Timeout`]), as upstream treats it: the database cannot be
//! trusted to answer. Unknown fields are ignored; missing ones take their zero value.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::crd::{DatabaseConfiguration, ProcessAddress};

/// The whole document.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct FdbStatus {
    /// What the client saw.
    pub client: ClientInfo,
    /// What the cluster reported.
    pub cluster: ClusterInfo,
}

/// `client`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ClientInfo {
    /// `client.coordinators`.
    pub coordinators: CoordinatorInfo,
    /// `client.database_status`.
    pub database_status: ClientDatabaseStatus,
    /// `client.messages`.
    pub messages: Vec<StatusMessage>,
}

/// `client.coordinators`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct CoordinatorInfo {
    /// Every coordinator of the cluster file.
    pub coordinators: Vec<Coordinator>,
    /// A majority of them answered.
    pub quorum_reachable: bool,
}

/// One coordinator as the client saw it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct Coordinator {
    /// Its address.
    pub address: String,
    /// Whether it answered.
    pub reachable: bool,
}

/// `client.database_status`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ClientDatabaseStatus {
    /// The database accepts reads and writes.
    pub available: bool,
    /// The database is healthy.
    pub healthy: bool,
}

/// A message in `client.messages` or `cluster.messages`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct StatusMessage {
    /// The message's name (`status_incomplete`, `unreachable_processes`, …).
    pub name: String,
    /// Its description.
    pub description: String,
    /// For `unreachable_processes`: the processes.
    pub unreachable_processes: Vec<UnreachableProcess>,
}

/// An unreachable process.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct UnreachableProcess {
    /// Its address.
    pub address: String,
}

/// `cluster`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ClusterInfo {
    /// `cluster.configuration`: absent before `configure new`.
    pub configuration: DatabaseConfiguration,
    /// Every process, by FoundationDB's process ID.
    pub processes: BTreeMap<String, ProcessInfo>,
    /// Data distribution.
    pub data: DataStatistics,
    /// All data fully replicated.
    pub full_replication: bool,
    /// The cluster's generation.
    pub generation: i64,
    /// The zone in maintenance, if any.
    pub maintenance_zone: String,
    /// Connected clients.
    pub clients: ClusterClientInfo,
    /// Layer status (backups) and `_error` (`configurationMissing`).
    pub layers: LayerInfo,
    /// Log systems.
    pub logs: Vec<LogInfo>,
    /// Ratekeeper figures.
    pub qos: QosInfo,
    /// Fault tolerance.
    pub fault_tolerance: FaultTolerance,
    /// Addresses of incompatible connections.
    pub incompatible_connections: Vec<String>,
    /// Recovery state.
    pub recovery_state: RecoveryState,
    /// The current connection string.
    pub connection_string: String,
    /// Cluster messages.
    pub messages: Vec<StatusMessage>,
    /// Bounce impact.
    pub bounce_impact: BounceImpact,
    /// Whether the database is available (cluster's view).
    pub database_available: Option<bool>,
    /// The active primary data center.
    pub active_primary_dc: Option<String>,
    /// The database lock.
    pub database_lock_state: LockState,
}

/// `cluster.database_lock_state`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct LockState {
    /// Whether the database is locked.
    pub locked: Option<bool>,
}

/// `cluster.bounce_impact`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct BounceImpact {
    /// Whether all processes can be restarted without a second recovery.
    pub can_clean_bounce: Option<bool>,
}

/// `cluster.fault_tolerance`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct FaultTolerance {
    /// Zones that may fail without losing data.
    pub max_zone_failures_without_losing_data: i64,
    /// Zones that may fail without losing availability.
    pub max_zone_failures_without_losing_availability: i64,
}

/// One process in `cluster.processes`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ProcessInfo {
    /// Its address (`ip:port[:tls]`).
    pub address: String,
    /// Its class.
    pub class_type: String,
    /// Its command line.
    pub command_line: String,
    /// Whether it is excluded.
    pub excluded: bool,
    /// Whether it is in the maintenance zone.
    pub under_maintenance: bool,
    /// Its localities (`instance_id`, `zoneid`, `process_id`, `dcid`, `dns_name`, …).
    pub locality: BTreeMap<String, String>,
    /// Its version.
    pub version: String,
    /// Seconds since it started.
    pub uptime_seconds: f64,
    /// Run-loop busy fraction.
    pub run_loop_busy: f64,
    /// Its roles.
    pub roles: Vec<ProcessRoleInfo>,
    /// Its messages (`io_error`, `io_timeout`, …).
    pub messages: Vec<ProcessMessage>,
}

/// The locality key of the operator's process-group ID.
pub const LOCALITY_INSTANCE_ID: &str = "instance_id";
/// The locality key of the operator's per-process ID in multi-process pods.
pub const LOCALITY_PROCESS_ID: &str = "process_id";
/// The zone locality.
pub const LOCALITY_ZONE_ID: &str = "zoneid";
/// The data-center locality.
pub const LOCALITY_DC_ID: &str = "dcid";
/// The DNS-name locality.
pub const LOCALITY_DNS_NAME: &str = "dns_name";

impl ProcessInfo {
    /// The parsed address.
    pub fn parsed_address(&self) -> Option<ProcessAddress> {
        ProcessAddress::parse(&self.address).ok()
    }

    /// `locality.instance_id`.
    pub fn instance_id(&self) -> Option<&str> {
        self.locality.get(LOCALITY_INSTANCE_ID).map(String::as_str)
    }

    /// Whether it holds role `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r.role == role)
    }
}

/// A process message.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ProcessMessage {
    /// When.
    pub time: f64,
    /// Name (`io_error`, `io_timeout`, …).
    pub name: String,
    /// Type.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A role of a process.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ProcessRoleInfo {
    /// `coordinator`, `storage`, `log`, `cluster_controller`, …
    pub role: String,
    /// Bytes stored (storage).
    pub stored_bytes: i64,
    /// The role's ID.
    pub id: String,
    /// Data lag (storage).
    pub data_lag: LagInfo,
    /// KV store used bytes.
    pub kvstore_used_bytes: Option<i64>,
    /// KV store total bytes.
    pub kvstore_total_bytes: Option<i64>,
    /// KV store free bytes.
    pub kvstore_free_bytes: Option<i64>,
    /// KV store available bytes.
    pub kvstore_available_bytes: Option<i64>,
}

/// `cluster.data`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct DataStatistics {
    /// Total key-value bytes.
    pub total_kv_size_bytes: i64,
    /// Data in flight.
    pub moving_data: MovingData,
    /// Data-distribution state.
    pub state: DataState,
    /// Team trackers (primary and remote).
    pub team_trackers: Vec<TeamTracker>,
    /// Disk used.
    pub total_disk_used_bytes: Option<i64>,
}

/// A data-distribution state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct DataState {
    /// Description.
    pub description: String,
    /// Healthy.
    pub healthy: bool,
    /// `healthy`, `healthy_repartitioning`, `missing_data`, …
    pub name: String,
    /// The fewest replicas any team has left.
    pub min_replicas_remaining: i64,
}

/// `cluster.data.moving_data`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MovingData {
    /// Highest priority of movements.
    pub highest_priority: i64,
    /// Bytes in flight.
    pub in_flight_bytes: i64,
    /// Bytes queued.
    pub in_queue_bytes: i64,
}

/// One team tracker.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct TeamTracker {
    /// Primary region.
    pub primary: bool,
    /// Its state.
    pub state: DataState,
    /// Unhealthy servers.
    pub unhealthy_servers: Option<i64>,
}

/// `cluster.clients`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ClusterClientInfo {
    /// Connected clients.
    pub count: i64,
    /// Clients by supported version.
    pub supported_versions: Vec<SupportedVersion>,
}

/// One entry of `cluster.clients.supported_versions`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct SupportedVersion {
    /// The client version.
    pub client_version: String,
    /// Clients supporting it.
    pub connected_clients: Vec<ConnectedClient>,
    /// Clients whose newest supported protocol this is.
    pub max_protocol_clients: Vec<ConnectedClient>,
    /// The protocol version (hex), or `Unknown`.
    pub protocol_version: String,
    /// The source version.
    pub source_version: String,
}

/// A connected client.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ConnectedClient {
    /// `ip:port`.
    pub address: String,
    /// Its trace log group.
    pub log_group: String,
}

impl ConnectedClient {
    /// `address (log_group)`.
    pub fn description(&self) -> String {
        if self.log_group.is_empty() {
            self.address.clone()
        } else {
            format!("{} ({})", self.address, self.log_group)
        }
    }
}

/// `cluster.layers`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct LayerInfo {
    /// Layer status valid.
    #[serde(rename = "_valid")]
    pub valid: Option<bool>,
    /// Backup layer.
    pub backup: BackupInfo,
    /// `configurationMissing` before `configure new`.
    #[serde(rename = "_error")]
    pub error: String,
}

/// `cluster.layers.backup`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct BackupInfo {
    /// Agents paused.
    pub paused: bool,
    /// Backups by tag.
    pub tags: BTreeMap<String, BackupTag>,
}

/// A backup tag in the layer status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct BackupTag {
    /// Destination.
    pub current_container: String,
    /// Running.
    pub running_backup: Option<bool>,
    /// Restorable.
    pub running_backup_is_restorable: Option<bool>,
}

/// One log system.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct LogInfo {
    /// The current generation's log system.
    pub current: bool,
    /// Logs that may fail.
    pub log_fault_tolerance: i64,
    /// Log replication factor.
    pub log_replication_factor: i64,
    /// Remote logs that may fail.
    pub remote_log_fault_tolerance: i64,
    /// Remote replication factor.
    pub remote_log_replication_factor: i64,
    /// Satellite logs that may fail.
    pub satellite_log_fault_tolerance: i64,
    /// Satellite replication factor.
    pub satellite_log_replication_factor: i64,
}

/// A lag.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct LagInfo {
    /// Seconds.
    pub seconds: f64,
    /// Versions.
    pub versions: i64,
}

/// `cluster.qos`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct QosInfo {
    /// Limiting durability lag.
    pub limiting_durability_lag_storage_server: LagInfo,
    /// Worst data lag.
    pub worst_data_lag_storage_server: LagInfo,
    /// Worst durability lag.
    pub worst_durability_lag_storage_server: LagInfo,
    /// Worst log-server queue.
    pub worst_queue_bytes_log_server: i64,
    /// Worst storage-server queue.
    pub worst_queue_bytes_storage_server: i64,
}

/// `cluster.recovery_state`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct RecoveryState {
    /// Active generations.
    pub active_generations: i64,
    /// `fully_recovered`, `all_logs_recruited`, …
    pub name: String,
    /// Seconds since the last recovery.
    pub seconds_since_last_recovered: f64,
}

/// Why a status document is not usable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatusError {
    /// The database did not answer in time (unavailable, incomplete, no processes).
    #[error("timeout: {0}")]
    Timeout(String),
    /// The output is not a status document.
    #[error("malformed status: {0}")]
    Malformed(String),
}

/// Drops anything before the first `{` (fdbcli warnings).
pub fn strip_warnings(output: &str) -> Result<&str, StatusError> {
    output.find('{').map(|i| output[i..].trim()).ok_or_else(|| {
        StatusError::Malformed("the JSON string doesn't contain a starting '{'".into())
    })
}

/// Parses fdbcli's `status json` output (see the module docs).
pub fn parse(output: &str, require_processes: bool) -> Result<FdbStatus, StatusError> {
    let status = parse_document(output)?;
    if !status.client.database_status.available {
        return Err(StatusError::Timeout("database is unavailable".into()));
    }
    if status
        .cluster
        .messages
        .iter()
        .any(|m| m.name == "status_incomplete_timeout")
    {
        return Err(StatusError::Timeout(
            "found \"status_incomplete_timeout\" in cluster messages".into(),
        ));
    }
    if require_processes && status.cluster.processes.is_empty() {
        return Err(StatusError::Timeout(
            "machine-readable status is missing process information".into(),
        ));
    }
    Ok(status)
}

/// Parses the document without judging it (for the quorum check while unavailable).
pub fn parse_document(output: &str) -> Result<FdbStatus, StatusError> {
    serde_json::from_str(strip_warnings(output)?).map_err(|e| StatusError::Malformed(e.to_string()))
}

impl FdbStatus {
    /// The status the operator works with before the database has a connection string:
    /// unavailable, `configurationMissing`.
    pub fn configuration_missing() -> Self {
        let mut s = FdbStatus::default();
        s.cluster.layers.error = "configurationMissing".into();
        s
    }

    /// The exclusions in the configuration, as `exclude` strings (addresses or
    /// `locality_instance_id:…`).
    pub fn exclusions(&self) -> Vec<String> {
        self.cluster
            .configuration
            .excluded_servers
            .iter()
            .map(|e| e.as_exclusion().to_owned())
            .collect()
    }

    /// Process-group IDs excluded by locality.
    pub fn excluded_localities(&self) -> std::collections::BTreeSet<String> {
        self.cluster
            .configuration
            .excluded_servers
            .iter()
            .filter_map(|e| e.locality.strip_prefix("locality_instance_id:"))
            .map(str::to_owned)
            .collect()
    }

    /// `instance_id`s of processes holding the coordinator role.
    pub fn coordinator_instance_ids(&self) -> std::collections::BTreeSet<String> {
        self.cluster
            .processes
            .values()
            .filter(|p| p.has_role("coordinator"))
            .filter_map(|p| p.instance_id().map(str::to_owned))
            .collect()
    }

    /// The database has been configured (`configure new` ran).
    pub fn is_configured(&self) -> bool {
        self.client.database_status.available && self.cluster.layers.error != "configurationMissing"
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
