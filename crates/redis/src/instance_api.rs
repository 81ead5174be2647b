//! The typed HTTP API between the operator and the instance managers (CloudNativePG's shape:
//! the operator pulls status and sends commands; the instance manager never writes the
//! RedisCluster).
//!
//! Contract (both sides build on these types and constants; neither invents its own):
//! - Transport: HTTPS on [`crate::names::INSTANCE_HTTP_PORT`] of the **pod IP**, never a
//!   Service. The serving certificate is issued by a per-cluster CA the operator creates
//!   (Secret [`ca_secret`]: `ca.crt`, `ca.key`; the instances' serving pair in Secret
//!   [`server_secret`]: `tls.crt`, `tls.key`, `ca.crt`, projected into every data pod at
//!   [`TLS_MOUNT`]). The certificate names [`server_name`] (a DNS SAN), and the operator
//!   verifies against the CA with that name whatever IP it dials.
//! - Authentication: every `/v1/*` request carries `Authorization: Bearer <token>`, the token
//!   being the key [`TOKEN_KEY`] of Secret [`token_secret`], projected at [`TOKEN_MOUNT`] and
//!   re-read on every request (so a rotated token works without a restart). A request
//!   without it, or with another token, gets 401 and nothing happens. `/healthz`, `/readyz`
//!   and `/metrics` are served unauthenticated on the same port, for the kubelet and scrapers,
//!   and reveal nothing that could change state.
//! - Status: `GET /v1/status` → [`InstanceReport`] (200), built from `INFO` at request time.
//! - Commands are idempotent and answer [`CommandResult`] (200 when done, 409 when refused
//!   because the instance is not in a state to do it, with the reason; 500 when Redis failed):
//!   - `POST /v1/promote` [`PromoteRequest`]: become primary (`REPLICAOF NO ONE`) — only if
//!     the instance's current replication ID is the one given (a replica that re-synced from
//!     somewhere else since the operator chose it is refused) and it is not fenced;
//!   - `POST /v1/demote` [`DemoteRequest`]: follow the given primary (`REPLICAOF ip port`),
//!     then kill normal and pubsub clients so they reconnect to the new primary;
//!   - `POST /v1/switchover` [`SwitchoverRequest`]: on the current primary, hand over to the
//!     given replica with no acknowledged write lost (`FAILOVER TO ip port TIMEOUT ms`, or
//!     pause writes, wait for the replica's offset, then demote), then kill clients;
//!   - `POST /v1/backup` [`BackupRequest`] → [`BackupResult`]: starts a backup in the
//!     background and answers at once (202) with its id; `GET /v1/backup/<id>` reports it.
//!   - `DELETE /v1/backup/<id>` [`BackupRequest`] (the backup's name, method and
//!     destination) → [`CommandResult`]: deletes that backup's stored artifact (200 when it
//!     is gone, deleted or not there; 409 while the backup still runs on the instance or when
//!     the store refused, with its reason).
//! - Versions: [`API_VERSION`] is sent in header [`VERSION_HEADER`] both ways; a mismatch is a
//!   409 naming both, never a misread body.

use serde::{Deserialize, Serialize};

/// The API revision both sides speak.
pub const API_VERSION: &str = "1";
/// Header carrying [`API_VERSION`].
pub const VERSION_HEADER: &str = "x-redis-instance-api";
/// Where the instance TLS Secret is mounted in data pods.
pub const TLS_MOUNT: &str = "/instance-tls";
/// Where the API token Secret is mounted in data pods.
pub const TOKEN_MOUNT: &str = "/instance-token";
/// Key of the token in [`token_secret`].
pub const TOKEN_KEY: &str = "token";

/// Secret of the per-cluster CA (operator only): `<cluster>-instance-ca`.
pub fn ca_secret(cluster: &str) -> String {
    format!("{cluster}-instance-ca")
}

/// Secret of the instances' serving certificate: `<cluster>-instance-tls`.
pub fn server_secret(cluster: &str) -> String {
    format!("{cluster}-instance-tls")
}

/// Secret of the API token: `<cluster>-instance-token`.
pub fn token_secret(cluster: &str) -> String {
    format!("{cluster}-instance-token")
}

/// The DNS name in the instances' serving certificate, verified by the operator.
pub fn server_name(cluster: &str, namespace: &str) -> String {
    format!("{cluster}.{namespace}.instances.redis.io")
}

/// What the instance manager is doing with redis-server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Boot {
    /// redis-server runs.
    Running,
    /// redis-server is not started, and why (fenced, primary unknown or unresolvable, …).
    Waiting {
        /// A sentence for humans and for the status.
        reason: String,
    },
    /// redis-server is shutting down.
    Stopping,
}

/// One replica as its primary sees it (`INFO replication` `slaveN`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSeen {
    /// Its IP.
    pub ip: String,
    /// Its port.
    pub port: u16,
    /// `online`, `wait_bgsave`, `send_bulk`, …
    pub state: String,
    /// Its acknowledged offset.
    pub offset: i64,
    /// Seconds since its last acknowledgement.
    pub lag_seconds: i64,
}

/// `GET /v1/status`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceReport {
    /// The pod (POD_NAME).
    pub pod: String,
    /// What the manager does with redis-server.
    pub boot: Boot,
    /// Whether this pod is listed in the fencing annotation (as last read).
    pub fenced: bool,
    /// `master` or `slave` (empty while redis-server is not running).
    pub role: String,
    /// `master_replid`.
    pub replication_id: String,
    /// `master_replid2` (the ID this instance followed before its last promotion).
    pub replication_id2: String,
    /// `master_repl_offset` on a primary, `slave_repl_offset` on a replica.
    pub replication_offset: i64,
    /// Replicas connected (primary only).
    pub connected_replicas: i32,
    /// The replicas as the primary sees them (primary only).
    pub replicas: Vec<ReplicaSeen>,
    /// `master_host` (replicas only).
    pub master_host: String,
    /// `master_port` (replicas only).
    pub master_port: u16,
    /// `up` or `down` (replicas only).
    pub master_link_status: String,
    /// `master_sync_in_progress` (replicas only).
    pub master_sync_in_progress: bool,
    /// `master_link_down_since_seconds` (replicas with the link down only).
    pub master_link_down_since_seconds: i64,
    /// `min-replicas-to-write` in effect (0 = off).
    pub min_replicas_to_write: i32,
    /// Whether writes are currently refused by `min-replicas-to-write`.
    pub writes_refused: bool,
    /// The password generation (a hash of the projected password) the instance has applied,
    /// so the operator knows when a rotation has reached every instance.
    pub auth_generation: String,
}

/// `POST /v1/promote`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PromoteRequest {
    /// The replication ID the operator saw when it chose this instance; the promotion is
    /// refused (409) if the instance now reports another one.
    pub expected_replication_id: String,
    /// The offset the operator saw; the promotion is refused if the instance is behind it.
    pub min_offset: i64,
}

/// `POST /v1/demote`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DemoteRequest {
    /// The primary to follow.
    pub primary_ip: String,
    /// Its port.
    pub primary_port: u16,
}

/// `POST /v1/switchover` (sent to the current primary).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverRequest {
    /// The replica to hand over to.
    pub target_ip: String,
    /// Its port.
    pub target_port: u16,
    /// How long writes may stay paused while the target catches up.
    pub timeout_ms: u64,
}

/// The answer to a command.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CommandResult {
    /// Whether the command took effect (or already had).
    pub done: bool,
    /// What happened, or why it was refused.
    pub message: String,
}

/// Where a backup goes (from the RedisBackup's destination; credentials are read by the
/// instance from its projected backup-credentials volume, never sent over the API).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupRequest {
    /// The RedisBackup's name (the object key's file name).
    pub backup_name: String,
    /// `rdb` or `aof`.
    pub method: String,
    /// The destination, as in the RedisBackup spec.
    pub destination: crate::crd::BackupDestination,
}

/// The state of a backup (`POST /v1/backup` answers it with `phase: Running`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupResult {
    /// The backup's id on this instance.
    pub id: String,
    /// `Running`, `Completed` or `Failed`.
    pub phase: String,
    /// `rdb` or `aof-archive`.
    pub artifact_type: String,
    /// `s3://bucket/key` or `azblob://container/blob`.
    pub backup_path: String,
    /// Bytes uploaded.
    pub backup_size: i64,
    /// sha256 of the artifact.
    pub checksum_sha256: String,
    /// Why it failed.
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_per_cluster() {
        assert_eq!(ca_secret("demo"), "demo-instance-ca");
        assert_eq!(server_secret("demo"), "demo-instance-tls");
        assert_eq!(token_secret("demo"), "demo-instance-token");
        assert_eq!(server_name("demo", "ns"), "demo.ns.instances.redis.io");
    }

    #[test]
    fn boot_states_are_tagged() {
        let w = Boot::Waiting {
            reason: "fenced".into(),
        };
        let v = serde_json::to_value(&w).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"state": "waiting", "reason": "fenced"})
        );
        assert_eq!(serde_json::from_value::<Boot>(v).expect("back"), w);
    }
}
