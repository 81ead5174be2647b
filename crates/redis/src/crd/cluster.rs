//! The RedisCluster API (`redis.io/v1`): upstream's spec and status, field for field, plus the
//! CloudNativePG-style additions (failover and switchover delays, the primary update method, the
//! lag bound of synchronous replicas, the two-field primary handoff and per-instance replication
//! detail). Rules that need only the object are CEL rules here; see docs/redis.md for the list.
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{LocalObjectReference, is_false, is_zero, is_zero_i64};

/// A Redis deployment of `instances` pods managed directly (no StatefulSet): one primary and
/// `instances - 1` replicas. `status.currentPrimary` names the primary; every other instance
/// replicates from it. Failover fences the old primary before promoting the most advanced
/// replica.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(remote = "Self", rename_all = "camelCase")]
#[schemars(rename = "RedisClusterSpec")]
#[kube(
    group = "redis.io",
    version = "v1",
    kind = "RedisCluster",
    plural = "redisclusters",
    singular = "rediscluster",
    shortname = "rc",
    shortname = "rcl",
    category = "redis",
    namespaced,
    status = "RedisClusterStatus",
    doc = "RedisCluster is the Schema for the redisclusters API.",
    printcolumn(name = "Instances", type_ = "integer", json_path = ".spec.instances"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyInstances"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.currentPrimary"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.spec.mode == oldSelf.spec.mode || (oldSelf.spec.mode == 'standalone' && self.spec.mode == 'sentinel')").message(MODE_TRANSITION_UNSUPPORTED).field_path(".spec.mode").reason(Reason::FieldValueForbidden),
    validation = Rule::new("!(oldSelf.spec.mode == 'standalone' && self.spec.mode == 'sentinel') || self.?status.?currentPrimary.orValue('') != ''").message(MODE_MIGRATION_NOT_READY).field_path(".spec.mode").reason(Reason::FieldValueForbidden),
    validation = Rule::new("!(oldSelf.spec.mode == 'standalone' && self.spec.mode == 'sentinel') || !(has(oldSelf.spec.tlsSecret) || has(oldSelf.spec.caSecret) || has(self.spec.tlsSecret) || has(self.spec.caSecret))").message(MODE_MIGRATION_TLS).field_path(".spec.mode").reason(Reason::FieldValueForbidden)
)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.mode != 'sentinel' || self.instances >= 3", "message": "sentinel mode requires at least 3 redis instances", "fieldPath": ".instances"},
    {"rule": "!has(self.tlsSecret) || has(self.caSecret)", "message": "caSecret is required when tlsSecret is set", "fieldPath": ".caSecret", "reason": "FieldValueRequired"},
    {"rule": "!has(self.caSecret) || has(self.tlsSecret)", "message": "tlsSecret is required when caSecret is set", "fieldPath": ".tlsSecret", "reason": "FieldValueRequired"},
    {"rule": "self.?minSyncReplicas.orValue(0) <= self.instances - 1", "message": "must be less than or equal to instances - 1", "fieldPath": ".minSyncReplicas"},
    {"rule": "self.?maxSyncReplicas.orValue(0) >= self.?minSyncReplicas.orValue(0)", "message": "must be greater than or equal to minSyncReplicas", "fieldPath": ".maxSyncReplicas"},
    {"rule": "!(self.?nodeMaintenanceWindow.inProgress.orValue(false) && !self.?nodeMaintenanceWindow.?reusePVC.orValue(true) && self.instances == 1)", "message": MAINTENANCE_SINGLE_INSTANCE, "fieldPath": ".nodeMaintenanceWindow.reusePVC"},
    {"rule": "self.storage.type != 'emptyDir' || self.?bootstrap.backupName.orValue('') == ''", "message": EPHEMERAL_BOOTSTRAP, "fieldPath": ".bootstrap", "reason": "FieldValueForbidden"},
    {"rule": "self.storage.type != 'emptyDir' || self.storage.?storageClassName.orValue('') == ''", "message": EPHEMERAL_STORAGE_CLASS, "fieldPath": ".storage.storageClassName", "reason": "FieldValueForbidden"},
    {"rule": "(has(self.bootstrap) ? self.bootstrap.backupName : '') == (has(oldSelf.bootstrap) ? oldSelf.bootstrap.backupName : '')", "message": "bootstrap backupName is immutable after creation", "fieldPath": ".bootstrap.backupName", "reason": "FieldValueForbidden"},
    {"rule": "!oldSelf.?replicaMode.?enabled.orValue(false) || self.?replicaMode.?enabled.orValue(false) || oldSelf.?replicaMode.?promote.orValue(false)", "message": REPLICA_MODE_DISABLE, "fieldPath": ".replicaMode.enabled", "reason": "FieldValueForbidden"},
    {"rule": "!self.?replicaMode.?promote.orValue(false) || oldSelf.?replicaMode.?enabled.orValue(false)", "message": "replicaMode.promote can only be set after replicaMode is already enabled", "fieldPath": ".replicaMode.promote", "reason": "FieldValueForbidden"},
]))]
pub struct RedisClusterSpec {
    /// Total number of Redis pods: one primary plus `instances - 1` replicas, named
    /// `<cluster>-<ordinal>`. Defaults to 1 (upstream's webhook also turns an explicit 0 into 1).
    /// At least 3 in sentinel mode. Scaling down removes the highest ordinals, never the
    /// primary (the operator switches over first).
    #[serde(default = "default_instances")]
    #[schemars(
        range(min = 0),
        extend("x-kubernetes-validations" = [{"rule": "self >= 1", "message": "must be at least 1"}])
    )]
    pub instances: i32,

    /// Redis operating mode: `standalone` (the operator drives replication and failover) or
    /// `sentinel` (three Sentinel pods drive failover and the operator follows them). `cluster`
    /// (Redis Cluster with shards) is reserved and rejected at admission. The only mode change
    /// allowed on an existing cluster is `standalone` to `sentinel`, once
    /// `status.currentPrimary` is set and with no TLS on either side.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self != 'cluster'", "message": CLUSTER_MODE_RESERVED, "reason": "FieldValueForbidden"},
    ]))]
    pub mode: ClusterMode,

    /// Number of hash-slot shards in cluster mode (at least 3). Cluster mode is reserved, so
    /// this field has no effect; it is kept so upstream manifests apply unchanged.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 3))]
    pub shards: i32,

    /// Replicas per shard in cluster mode. Cluster mode is reserved, so this field has no
    /// effect; it is kept so upstream manifests apply unchanged.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub replicas_per_shard: i32,

    /// Whether the rolling update replaces the primary by itself once every replica is updated
    /// (`unsupervised`), or waits with phase `WaitingForUser` until the annotation
    /// `redis.io/approve-primary-update: "true"` is set (`supervised`; the operator removes the
    /// annotation once it acted on it).
    #[serde(default)]
    pub primary_update_strategy: PrimaryUpdateStrategy,

    /// How the primary is updated once it is its turn: `switchover` (default) first hands the
    /// primary role to the most advanced in-sync replica and then recreates the old primary as
    /// a replica; `restart` recreates the primary in place, keeping it primary (a short write
    /// outage, no role change). A single-instance cluster is always restarted.
    #[serde(default)]
    pub primary_update_method: PrimaryUpdateMethod,

    /// The Redis container image of the data pods (and Sentinel pods). Part of the pod spec
    /// hash: changing it rolls the pods, replicas first (highest ordinal first), primary last.
    #[serde(default = "default_image")]
    pub image_name: String,

    /// How `/data` is backed: a PersistentVolumeClaim `<cluster>-data-<ordinal>` per instance,
    /// or a pod-local emptyDir.
    pub storage: StorageSpec,

    /// redis.conf parameters (`key: value`), applied live with `CONFIG SET` where Redis allows
    /// it; `bind`, `port`, `tls-port`, `unixsocket`, `databases` and `loadmodule` only take
    /// effect through a rolling restart (the map is part of the pod spec hash). `maxmemory` and
    /// `maxmemory-policy` are rejected when `memory` is set. An explicit `min-replicas-to-write`
    /// or `min-replicas-max-lag` here wins over `minSyncReplicas`/`minSyncReplicasMaxLag`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub redis: BTreeMap<String, String>,

    /// CPU and memory of the Redis container. When `requests` is not set the operator's
    /// defaulting webhook sets 128Mi memory and 100m CPU (each capped at its limit, if one is
    /// set). Part of the pod spec hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Redis `maxmemory` and eviction policy, kept consistent with the container memory
    /// limit. Use this instead of `maxmemory`/`maxmemory-policy` in `redis`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySpec>,

    /// Minimum number of replicas that must be connected (and within `minSyncReplicasMaxLag`
    /// seconds) for the primary to accept writes: rendered as Redis `min-replicas-to-write`, so
    /// an isolated primary stops taking writes by itself. At most `instances - 1`. 0 (default)
    /// turns the check off.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub min_sync_replicas: i32,

    /// Upper bound on synchronous replicas, at least `minSyncReplicas`. Redis has no such
    /// setting: accepted and validated for compatibility, without effect (admission warns when
    /// it is above 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub max_sync_replicas: i32,

    /// Seconds since a replica's last acknowledgement after which it no longer counts towards
    /// `minSyncReplicas`: rendered as Redis `min-replicas-max-lag`. Default 10 (Redis' own).
    #[serde(default = "default_min_sync_replicas_max_lag")]
    #[schemars(range(min = 1))]
    pub min_sync_replicas_max_lag: i32,

    /// Seconds the primary may be unreachable before the operator fails over to a replica
    /// (CloudNativePG's `failoverDelay`). 0 (default) fails over as soon as the failure is
    /// confirmed.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub failover_delay: i32,

    /// Seconds a planned switchover may keep the primary's writes paused while the chosen
    /// replica catches up to the primary's replication offset. If the replica has not caught
    /// up by then, the switchover is abandoned, the old primary keeps its role and resumes
    /// writes, and the operator retries later. Default 30.
    #[serde(default = "default_switchover_delay")]
    #[schemars(range(min = 1))]
    pub switchover_delay: i32,

    /// Whether the operator keeps a PodDisruptionBudget for the cluster's pods (default true);
    /// false deletes it.
    #[serde(default = "default_true")]
    pub enable_pod_disruption_budget: bool,

    /// Secret holding the Redis password in key `password`. When not set the operator creates
    /// `<cluster>-auth` with a random password and sets this field to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret: Option<LocalObjectReference>,

    /// Secret holding Redis ACL rules in key `acl`, written to `/data/users.acl` and loaded
    /// with `aclfile`.
    #[serde(
        rename = "aclConfigSecret",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub acl_config_secret: Option<LocalObjectReference>,

    /// Secret holding `tls.crt` and `tls.key`; turns TLS on (Redis listens with TLS only on
    /// port 6379 and replicates over TLS; in sentinel mode the Sentinels listen with TLS only
    /// on port 26379 and reach Redis and each other over TLS). The certificate must allow
    /// client authentication too. Requires `caSecret`.
    #[serde(rename = "tlsSecret", default, skip_serializing_if = "Option::is_none")]
    pub tls_secret: Option<LocalObjectReference>,

    /// Secret holding `ca.crt` to verify TLS peers. Requires `tlsSecret`.
    #[serde(rename = "caSecret", default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<LocalObjectReference>,

    /// Secret with object storage credentials, projected whole at `/backup-credentials` in the
    /// data pods (used by backups and by the bootstrap restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_credentials_secret: Option<LocalObjectReference>,

    /// Liveness check of the primary: a primary that can reach neither the API server nor any
    /// peer instance fails its liveness probe and is restarted (as a replica).
    #[serde(default = "default_primary_isolation")]
    #[schemars(extend("default" = {}))]
    pub primary_isolation: Option<PrimaryIsolationSpec>,

    /// Node labels the pods must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Pod affinity and anti-affinity of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Tolerations of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,

    /// Topology spread constraints of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,

    /// Initialise the cluster from a completed RedisBackup (restored into the first primary
    /// before Redis starts). Immutable; not allowed with emptyDir storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<BootstrapSpec>,

    /// Planned node maintenance: while `inProgress`, the PodDisruptionBudget is removed and no
    /// automatic failover happens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_maintenance_window: Option<NodeMaintenanceWindow>,

    /// Disaster-recovery replica cluster: every pod replicates from an external Redis primary
    /// until `promote` makes the designated leader a standalone primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_mode: Option<ReplicaModeSpec>,

    /// When set, the operator publishes and maintains a Secret with ready-to-use connection
    /// details (hosts, port, password, URLs). The Secret carries the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_secret: Option<ConnectionSecretSpec>,
}

kit::optional_spec!(RedisClusterSpec);

impl Default for RedisClusterSpec {
    fn default() -> Self {
        Self {
            instances: default_instances(),
            mode: ClusterMode::default(),
            shards: 0,
            replicas_per_shard: 0,
            primary_update_strategy: PrimaryUpdateStrategy::default(),
            primary_update_method: PrimaryUpdateMethod::default(),
            image_name: default_image(),
            storage: StorageSpec::default(),
            redis: BTreeMap::new(),
            resources: None,
            memory: None,
            min_sync_replicas: 0,
            max_sync_replicas: 0,
            min_sync_replicas_max_lag: default_min_sync_replicas_max_lag(),
            failover_delay: 0,
            switchover_delay: default_switchover_delay(),
            enable_pod_disruption_budget: true,
            auth_secret: None,
            acl_config_secret: None,
            tls_secret: None,
            ca_secret: None,
            backup_credentials_secret: None,
            primary_isolation: default_primary_isolation(),
            node_selector: BTreeMap::new(),
            affinity: None,
            tolerations: None,
            topology_spread_constraints: None,
            bootstrap: None,
            node_maintenance_window: None,
            replica_mode: None,
            connection_secret: None,
        }
    }
}

/// The pattern of a Kubernetes quantity, as controller-gen writes it for `resource.Quantity`.
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Message of a standalone/sentinel/cluster change other than standalone to sentinel.
pub const MODE_TRANSITION_UNSUPPORTED: &str = "unsupported mode transition; only standalone->sentinel is supported as an in-place migration (set instances>=3 and do not enable TLS). See docs/runbooks/standalone-to-sentinel-migration.md";
/// Message of a standalone to sentinel change before a primary exists.
pub const MODE_MIGRATION_NOT_READY: &str = "cannot migrate standalone->sentinel until status.currentPrimary is set; wait for the cluster to become Healthy before changing mode";
/// Message of a standalone to sentinel change with TLS on either side.
pub const MODE_MIGRATION_TLS: &str = "cannot migrate standalone->sentinel in place for a TLS-enabled cluster; the in-place migration does not support TLS (clearing tlsSecret/caSecret in the same change would strand the migration). Sentinel mode itself does support TLS for clusters created as sentinel. Use the backup/recreate path. See docs/runbooks/standalone-to-sentinel-migration.md";
/// Message of `mode: cluster`.
pub const CLUSTER_MODE_RESERVED: &str =
    "cluster mode is reserved and not supported yet; use standalone or sentinel";
/// Message of `reusePVC: false` during maintenance of a single-instance cluster.
pub const MAINTENANCE_SINGLE_INSTANCE: &str = "nodeMaintenanceWindow.reusePVC=false is not allowed for single-instance clusters; set reusePVC=true or scale up first";
/// Message of a bootstrap with emptyDir storage.
pub const EPHEMERAL_BOOTSTRAP: &str = "bootstrap is not supported with ephemeral storage (storage.type=emptyDir); restored data would be lost when pods are recreated";
/// Message of a StorageClass with emptyDir storage.
pub const EPHEMERAL_STORAGE_CLASS: &str =
    "storageClassName has no effect with ephemeral storage (storage.type=emptyDir); remove it";
/// Message of a changed storage type.
pub const STORAGE_TYPE_IMMUTABLE: &str = "storage.type is immutable after creation; switching between pvc and emptyDir would destroy or migrate data";
/// Message of `maxMemory` together with `maxMemoryPercent`.
pub const MEMORY_MUTUALLY_EXCLUSIVE: &str =
    "spec.memory.maxMemory and spec.memory.maxMemoryPercent are mutually exclusive; set only one";
/// Message of `maxMemoryPercent` without a memory limit.
pub const MEMORY_PERCENT_REQUIRES_LIMIT: &str =
    "spec.memory.maxMemoryPercent requires spec.resources.limits.memory to be set";
/// Message of a `maxMemory` above the memory limit.
pub const MEMORY_EXCEEDS_LIMIT: &str =
    "spec.memory.maxMemory must not exceed spec.resources.limits.memory";
/// Message of a `maxMemory` of zero or less.
pub const MEMORY_NON_POSITIVE: &str = "spec.memory.maxMemory must be greater than 0";
/// Message of turning replica mode off without promoting first.
pub const REPLICA_MODE_DISABLE: &str =
    "replicaMode.enabled cannot be disabled directly; set replicaMode.promote=true first";

fn default_instances() -> i32 {
    1
}

fn default_image() -> String {
    crate::names::DEFAULT_REDIS_IMAGE.to_owned()
}

fn default_true() -> bool {
    true
}

fn default_min_sync_replicas_max_lag() -> i32 {
    10
}

fn default_switchover_delay() -> i32 {
    30
}

fn default_primary_isolation() -> Option<PrimaryIsolationSpec> {
    Some(PrimaryIsolationSpec::default())
}

/// The Redis operating mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ClusterMode {
    /// Operator-driven replication and failover.
    #[default]
    #[serde(rename = "standalone")]
    Standalone,
    /// Three Sentinel pods drive failover; the operator follows them.
    #[serde(rename = "sentinel")]
    Sentinel,
    /// Redis Cluster (reserved: rejected at admission).
    #[serde(rename = "cluster")]
    Cluster,
}

impl ClusterMode {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterMode::Standalone => "standalone",
            ClusterMode::Sentinel => "sentinel",
            ClusterMode::Cluster => "cluster",
        }
    }
}

/// How the primary is replaced during a rolling update.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PrimaryUpdateStrategy {
    /// Automatically, once the replicas are updated.
    #[default]
    Unsupervised,
    /// Only after the user approves with `redis.io/approve-primary-update: "true"`.
    Supervised,
}

/// What updating the primary does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PrimaryUpdateMethod {
    /// Switch over to an in-sync replica first, then recreate the old primary as a replica.
    #[default]
    Switchover,
    /// Recreate the primary in place; it stays primary.
    Restart,
}

/// How `/data` is backed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StorageType {
    /// A PersistentVolumeClaim per instance (durable across pod recreation).
    #[default]
    #[serde(rename = "pvc")]
    Pvc,
    /// Pod-local emptyDir (data is lost when a pod is recreated).
    #[serde(rename = "emptyDir")]
    EmptyDir,
}

/// Storage of the Redis data directory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// `pvc` (default): a PersistentVolumeClaim `<cluster>-data-<ordinal>` per instance, kept
    /// when the cluster is deleted; `emptyDir`: pod-local storage, lost when a pod is
    /// recreated. Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message(STORAGE_TYPE_IMMUTABLE).reason(Reason::FieldValueForbidden))]
    pub r#type: StorageType,

    /// Size of each instance's storage (default 1Gi): the PVC request, or the emptyDir
    /// sizeLimit. Growing it expands the PVCs when their StorageClass allows volume expansion;
    /// it cannot shrink below the largest existing PVC request.
    #[schemars(extend(
        "default" = "1Gi",
        "pattern" = QUANTITY_PATTERN
    ))]
    pub size: Quantity,

    /// StorageClass of the PVCs (the cluster default when not set). Not allowed with
    /// `emptyDir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

impl Default for StorageSpec {
    fn default() -> Self {
        Self {
            r#type: StorageType::Pvc,
            size: Quantity("1Gi".into()),
            storage_class_name: None,
        }
    }
}

/// Redis eviction policy once `maxmemory` is reached.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum MaxMemoryPolicy {
    /// Reject writes at the limit (Redis' default).
    #[default]
    #[serde(rename = "noeviction")]
    NoEviction,
    /// Evict the least recently used keys.
    #[serde(rename = "allkeys-lru")]
    AllKeysLru,
    /// Evict the least frequently used keys.
    #[serde(rename = "allkeys-lfu")]
    AllKeysLfu,
    /// Evict the least recently used keys with an expiry.
    #[serde(rename = "volatile-lru")]
    VolatileLru,
    /// Evict the least frequently used keys with an expiry.
    #[serde(rename = "volatile-lfu")]
    VolatileLfu,
    /// Evict random keys.
    #[serde(rename = "allkeys-random")]
    AllKeysRandom,
    /// Evict random keys with an expiry.
    #[serde(rename = "volatile-random")]
    VolatileRandom,
    /// Evict the keys with the nearest expiry.
    #[serde(rename = "volatile-ttl")]
    VolatileTtl,
}

impl MaxMemoryPolicy {
    /// The redis.conf value.
    pub fn as_str(self) -> &'static str {
        match self {
            MaxMemoryPolicy::NoEviction => "noeviction",
            MaxMemoryPolicy::AllKeysLru => "allkeys-lru",
            MaxMemoryPolicy::AllKeysLfu => "allkeys-lfu",
            MaxMemoryPolicy::VolatileLru => "volatile-lru",
            MaxMemoryPolicy::VolatileLfu => "volatile-lfu",
            MaxMemoryPolicy::AllKeysRandom => "allkeys-random",
            MaxMemoryPolicy::VolatileRandom => "volatile-random",
            MaxMemoryPolicy::VolatileTtl => "volatile-ttl",
        }
    }
}

/// Redis memory limit and eviction, the first-class alternative to `maxmemory` and
/// `maxmemory-policy` in `spec.redis`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.maxMemory) && has(self.maxMemoryPercent))").message(MEMORY_MUTUALLY_EXCLUSIVE).field_path(".maxMemoryPercent").reason(Reason::FieldValueForbidden))]
pub struct MemorySpec {
    /// Explicit Redis `maxmemory` (for example `256Mi`), rendered in bytes. At most
    /// `resources.limits.memory` when a limit is set. Mutually exclusive with
    /// `maxMemoryPercent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "pattern" = QUANTITY_PATTERN
    ))]
    pub max_memory: Option<Quantity>,

    /// `maxmemory` as a percentage (1-100) of `resources.limits.memory`, which must be set.
    /// Leave headroom (for example 75) for replication buffers, copy-on-write during
    /// persistence and fragmentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_memory_percent: Option<i32>,

    /// Eviction policy (`maxmemory-policy`). Defaults to `noeviction`: writes are rejected at
    /// the limit instead of keys being evicted.
    #[serde(default)]
    pub max_memory_policy: MaxMemoryPolicy,
}

/// Bootstrap of a new cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// Name of a RedisBackup in the same namespace, in phase `Completed`, restored into the
    /// first primary before Redis starts. Immutable.
    pub backup_name: String,
}

/// Planned node maintenance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceWindow {
    /// True while planned node maintenance is in progress: the PodDisruptionBudget is removed
    /// and no automatic failover happens.
    pub in_progress: bool,

    /// Whether pods come back on their existing PVCs during maintenance (default true). With
    /// false, the PVCs of missing instances are deleted so they come back on fresh storage
    /// (not allowed for single-instance clusters).
    #[serde(default = "default_reuse_pvc", rename = "reusePVC")]
    pub reuse_pvc: Option<bool>,
}

fn default_reuse_pvc() -> Option<bool> {
    Some(true)
}

/// External replication for a disaster-recovery replica cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!self.?promote.orValue(false) || self.?enabled.orValue(false)").message("replicaMode.promote=true requires replicaMode.enabled=true").field_path(".promote"))]
#[x_kube(validation = Rule::new("!self.?enabled.orValue(false) || has(self.source)").message("source is required when replicaMode.enabled=true").field_path(".source").reason(Reason::FieldValueRequired))]
#[x_kube(validation = Rule::new("!self.?enabled.orValue(false) || !has(self.source) || self.source.host.trim() != ''").message("source.host is required when replicaMode.enabled=true").field_path(".source.host").reason(Reason::FieldValueRequired))]
pub struct ReplicaModeSpec {
    /// Every data pod replicates from `source` (`replicaof`), authenticated with the source
    /// password. Cannot be turned off directly: set `promote` first.
    #[serde(default, skip_serializing_if = "is_false")]
    pub enabled: bool,

    /// The external Redis primary to replicate from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ReplicaSourceSpec>,

    /// Promote the designated leader (`status.currentPrimary`) to a standalone primary; the
    /// operator then sets `enabled` and `promote` back to false. Only once replica mode is
    /// already enabled.
    #[serde(default, skip_serializing_if = "is_false")]
    pub promote: bool,
}

/// An external Redis primary.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSourceSpec {
    /// Human-readable name of the source cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_name: String,

    /// Host name or IP of the external Redis primary.
    pub host: String,

    /// Port of the external Redis primary (default 6379).
    #[serde(default = "default_redis_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// Secret in the cluster's namespace whose key `password` authenticates to the source
    /// (`masterauth`). Must exist.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("self == '' || self.trim() != ''").message("must not be empty when set"))]
    pub auth_secret_name: String,
}

fn default_redis_port() -> i32 {
    crate::names::REDIS_PORT
}

/// Primary isolation detection (liveness of the primary).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrimaryIsolationSpec {
    /// Whether a primary that can reach neither the API server nor any peer fails its liveness
    /// probe (default true).
    #[serde(default = "default_enabled")]
    pub enabled: Option<bool>,

    /// Timeout of the API server reachability check, a duration such as `5s` (default).
    #[serde(rename = "apiServerTimeout", default = "default_isolation_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub api_server_timeout: Option<String>,

    /// Timeout of each peer instance-manager reachability check, a duration such as `5s`
    /// (default). The liveness probe's timeout is `ceil(apiServerTimeout + peerTimeout + 2s)`.
    #[serde(default = "default_isolation_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub peer_timeout: Option<String>,
}

impl Default for PrimaryIsolationSpec {
    fn default() -> Self {
        Self {
            enabled: default_enabled(),
            api_server_timeout: default_isolation_timeout(),
            peer_timeout: default_isolation_timeout(),
        }
    }
}

fn default_enabled() -> Option<bool> {
    Some(true)
}

fn default_isolation_timeout() -> Option<String> {
    Some("5s".into())
}

/// The operator-published connection Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSecretSpec {
    /// Name of the Secret (a DNS-1123 subdomain) the operator creates and keeps up to date in
    /// the cluster's namespace, owned by the RedisCluster. An existing Secret of that name
    /// that the cluster does not own is never overwritten.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.trim() != ''").message("name is required when connectionSecret is set").reason(Reason::FieldValueRequired))]
    #[x_kube(validation = Rule::new(DNS1123_SUBDOMAIN_RULE).message(DNS1123_SUBDOMAIN_MESSAGE))]
    pub name: String,
}

const DNS1123_SUBDOMAIN_RULE: &str = r"self.trim() == '' || self.trim().matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";
const DNS1123_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Observed state of a RedisCluster, written by the operator only (instance managers report
/// through their HTTP status endpoint, which the operator polls).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisClusterStatus {
    /// `Creating`, `Healthy`, `Degraded`, `Replicating`, `FailingOver`, `Scaling`, `Updating`,
    /// `WaitingForUser`, `Deleting` or `Hibernating`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,

    /// Why the cluster is in its phase, in words (for example which replica is being
    /// promoted).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase_reason: String,

    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,

    /// Pod name of the instance that is primary. Every other instance replicates from it; an
    /// instance that boots and is not this one always starts as a replica.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_primary: String,

    /// When `currentPrimary` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary_timestamp: Option<Time>,

    /// Since when the operator has seen the current primary failing (cleared when it
    /// recovers or a failover completes); failover starts `failoverDelay` seconds after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary_failing_since_timestamp: Option<Time>,

    /// The instance that is to become primary: written before a failover or switchover starts
    /// (the durable intent), equal to `currentPrimary` once the handoff is complete. `pending`
    /// while a failover has fenced the old primary and not yet chosen a replica.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_primary: String,

    /// When `targetPrimary` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_primary_timestamp: Option<Time>,

    /// The newest replication ID of the primary that a replica was seen in sync with: the
    /// replication history whose acknowledged writes the replicas hold. A primary restarted in
    /// place, or just promoted, has a new replication ID before its replicas catch up; until one
    /// does, a failover promotes a replica of this history (a replica that never synchronised
    /// is never promoted).
    #[serde(
        rename = "syncedReplicationID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub synced_replication_id: String,

    /// The Service clients write through: `<cluster>-leader`, which selects the primary
    /// (CloudNativePG's `writeService`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub write_service: String,

    /// The Service that reaches every instance for reads: `<cluster>-any` (CloudNativePG's
    /// `readService`; `<cluster>-replica` selects the replicas only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub read_service: String,

    /// The data pods of the cluster that exist, in ordinal order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_names: Vec<String>,

    /// Data instances whose Redis answered the operator's last status poll.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ready_instances: i32,

    /// Sentinel pods passing their readiness probe (sentinel mode).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sentinel_ready_instances: i32,

    /// Data instances the operator polled.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub instances: i32,

    /// Per-instance state, keyed by pod name (a map, so entries merge by key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instances_status: BTreeMap<String, InstanceStatus>,

    /// `CLUSTER INFO` cluster_state (cluster mode; unused while cluster mode is reserved).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_state: String,

    /// `CLUSTER INFO` cluster_slots_assigned (cluster mode; unused while cluster mode is
    /// reserved).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slots_assigned: i32,

    /// Whether the one-time bootstrap finished: for a cluster restored from
    /// `bootstrap.backupName`, set the first time the cluster is Healthy (from then on a
    /// recreated first instance resynchronises from the primary instead of restoring the
    /// backup again); in cluster mode (reserved), the slot assignment.
    #[serde(default, skip_serializing_if = "is_false")]
    pub bootstrap_completed: bool,

    /// Per-shard state keyed by shard name (cluster mode; unused while cluster mode is
    /// reserved).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shards: BTreeMap<String, ShardStatus>,

    /// PVCs of the cluster that are bound and in use.
    #[serde(rename = "healthyPVC", default, skip_serializing_if = "is_zero")]
    pub healthy_pvc: i32,

    /// PVCs of the cluster that no pod mounts.
    #[serde(rename = "danglingPVC", default, skip_serializing_if = "Vec::is_empty")]
    pub dangling_pvc: Vec<String>,

    /// resourceVersion of each referenced Secret, by name: a change is a rotation.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets_resource_version: BTreeMap<String, String>,

    /// When the newest completed RedisBackup of this cluster completed (written by the backup
    /// controller; it never moves back, also when that RedisBackup is deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<Time>,

    /// When the newest failed RedisBackup of this cluster failed (written by the backup
    /// controller; it never moves back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_backup: Option<Time>,

    /// `Ready`, `PrimaryAvailable`, `ReplicationHealthy`, `ReplicaMode`,
    /// `PrimaryUpdateWaiting`, `LastBackupSucceeded` (written by the backup controller: True
    /// when the newest finished backup completed, False when it failed), `Hibernated`,
    /// `MaintenanceInProgress`, `PVCResizeInProgress`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The phase of a RedisCluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClusterPhase {
    /// No instance has reported yet.
    Creating,
    /// Every instance is connected and there is exactly one primary.
    Healthy,
    /// Some instance is missing, unreachable or not replicating.
    Degraded,
    /// Replica mode: every instance replicates from the external source.
    Replicating,
    /// A failover is in progress.
    FailingOver,
    /// Instances are being added or removed.
    Scaling,
    /// A rolling update is in progress.
    Updating,
    /// A supervised primary update waits for `redis.io/approve-primary-update`.
    WaitingForUser,
    /// The cluster is being deleted.
    Deleting,
    /// The cluster is hibernated (`redis.io/hibernation`): no pods, PVCs kept.
    Hibernating,
}

/// Condition types of a RedisCluster.
pub mod condition {
    /// The primary is reachable and is the only primary.
    pub const READY: &str = "Ready";
    /// A primary is available.
    pub const PRIMARY_AVAILABLE: &str = "PrimaryAvailable";
    /// Every replica is connected with its link up.
    pub const REPLICATION_HEALTHY: &str = "ReplicationHealthy";
    /// Replica mode is on.
    pub const REPLICA_MODE: &str = "ReplicaMode";
    /// A supervised primary update waits for approval.
    pub const PRIMARY_UPDATE_WAITING: &str = "PrimaryUpdateWaiting";
    /// The last backup succeeded.
    pub const LAST_BACKUP_SUCCEEDED: &str = "LastBackupSucceeded";
    /// The cluster is hibernated.
    pub const HIBERNATED: &str = "Hibernated";
    /// Node maintenance is in progress.
    pub const MAINTENANCE_IN_PROGRESS: &str = "MaintenanceInProgress";
    /// A PVC resize is in progress.
    pub const PVC_RESIZE_IN_PROGRESS: &str = "PVCResizeInProgress";
}

/// The state of one instance, as the operator last polled it from its instance manager.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// `master` or `slave`, as Redis `INFO replication` reports it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub role: String,

    /// Whether the operator reached the instance manager and it reached Redis. Always
    /// written, so an instance the operator cannot reach is never an empty entry (server-side
    /// apply turns an entry whose fields all went away into `null`, which the schema refuses).
    #[serde(default)]
    pub connected: bool,

    /// Whether the pod is Ready (its readiness probe passes).
    #[serde(default, skip_serializing_if = "is_false")]
    pub ready: bool,

    /// Replication offset in bytes: `master_repl_offset` on a primary, `slave_repl_offset` on
    /// a replica.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub replication_offset: i64,

    /// Bytes the replica is behind the primary's replication offset (replicas only).
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub replica_lag_bytes: i64,

    /// The replication ID (`master_replid`): replicas in sync with a primary share its ID; a
    /// promotion starts a new one.
    #[serde(
        rename = "replicationID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub replication_id: String,

    /// Replicas connected to this instance (primary only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub connected_replicas: i32,

    /// `up` or `down`: the replica's link to its primary (replicas only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub master_link_status: String,

    /// Whether a full synchronisation from the primary is in progress (replicas only).
    #[serde(default, skip_serializing_if = "is_false")]
    pub master_sync_in_progress: bool,

    /// Seconds since the replica's link to its primary went down (replicas with the link
    /// down only).
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub link_down_since_seconds: i64,

    /// Redis Cluster node ID (cluster mode; unused while cluster mode is reserved).
    #[serde(rename = "nodeID", default, skip_serializing_if = "String::is_empty")]
    pub node_id: String,

    /// Slot ranges this node serves (cluster mode; unused while cluster mode is reserved).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots_served: Vec<SlotRange>,

    /// Redis Cluster state seen by this node (cluster mode; unused while cluster mode is
    /// reserved).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_state: String,

    /// Redis Cluster configuration epoch (cluster mode; unused while cluster mode is
    /// reserved).
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub current_epoch: i64,

    /// When the operator last reached this instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_at: Option<Time>,
}

/// An inclusive range of Redis hash slots.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SlotRange {
    /// First slot.
    pub start: i32,
    /// Last slot.
    pub end: i32,
}

/// Topology of one shard (cluster mode; unused while cluster mode is reserved).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// Pod of the shard's primary.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub primary_pod: String,
    /// Pods of the shard's replicas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_pods: Vec<String>,
    /// Slot ranges of the shard.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slot_ranges: Vec<SlotRange>,
    /// Node ID of the shard's primary.
    #[serde(
        rename = "primaryNodeID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub primary_node_id: String,
    /// Configuration epoch of the shard.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub epoch: i64,
}
