//! Sentinel mode's shared parts: the numbers every party agrees on, the rendering of
//! `sentinel.conf` ([`conf`]), the reading of the Sentinels' answers ([`quorum`]) and the
//! client that asks them ([`client`]).
//!
//! Contract: a sentinel-mode RedisCluster has exactly [`SENTINELS`] Sentinel pods
//! (`<cluster>-sentinel-<i>`), each monitoring the master under the name of the cluster with
//! a quorum of [`QUORUM`]. The operator and the data pods' instance managers read the
//! Sentinels the same way ([`quorum::read`]): an address counts only when it is a data pod of
//! this cluster, and only a majority of the Sentinels agreeing on one address is an answer.

pub mod client;
pub mod conf;
pub mod quorum;

/// Sentinel pods per cluster (upstream's fixed three).
pub const SENTINELS: i32 = 3;
/// Sentinels that must agree: for `SENTINEL monitor`'s quorum, and for the operator and
/// the data pods to take an answer.
pub const QUORUM: usize = 2;
/// `down-after-milliseconds` (upstream's).
pub const DOWN_AFTER_MS: u64 = 5_000;
/// `failover-timeout` (upstream's).
pub const FAILOVER_TIMEOUT_MS: u64 = 60_000;
/// `parallel-syncs` (upstream's).
pub const PARALLEL_SYNCS: u32 = 1;
/// The Sentinel pods' container.
pub const CONTAINER: &str = "sentinel";
/// Where a Sentinel keeps its configuration and state (an emptyDir).
pub const CONF_FILE: &str = "sentinel.conf";
