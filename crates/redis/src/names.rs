//! Every label, annotation, name, port and path of the Redis operator's contract in one place.
//! The `redis.io/*` keys are howl-cloud/redis-operator's, unchanged: users, dashboards and
//! runbooks select on them, so they must not change.

/// Operator name: the process, its metrics and its logs.
pub const OPERATOR_NAME: &str = "redis-operator";
/// Field manager of the operator's writes and reporter of its Events (upstream's recorder name).
pub const FIELD_MANAGER: &str = "redis-operator";
/// Leader-election Lease name: upstream's election ID, so an upstream deployment and this one
/// never lead at once during a migration.
pub const LEASE_NAME: &str = "redis-operator-leader";
/// Namespace of the operator when nothing else says (upstream's default).
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "redis-operator-system";

/// Controller names (the lower-cased kind, the `controller` metric label).
pub mod controller {
    /// The RedisCluster controller.
    pub const CLUSTER: &str = "rediscluster";
    /// The RedisBackup controller.
    pub const BACKUP: &str = "redisbackup";
    /// The RedisScheduledBackup controller.
    pub const SCHEDULED_BACKUP: &str = "redisscheduledbackup";
}

/// Default Redis image of `spec.imageName`.
pub const DEFAULT_REDIS_IMAGE: &str = "redis:7.2";

// Labels on the pods (a documented compatibility contract upstream), PVCs, Services and Secrets.
/// The owning RedisCluster's name.
pub const LABEL_CLUSTER: &str = "redis.io/cluster";
/// The pod's own name (the instance).
pub const LABEL_INSTANCE: &str = "redis.io/instance";
/// `primary`, `replica` or `sentinel`.
pub const LABEL_ROLE: &str = "redis.io/role";
/// `data` or `sentinel`.
pub const LABEL_WORKLOAD: &str = "redis.io/workload";
/// Shard of a cluster-mode pod (`s<N>`; cluster mode is reserved).
pub const LABEL_SHARD: &str = "redis.io/shard";
/// Role of a cluster-mode pod within its shard (cluster mode is reserved).
pub const LABEL_SHARD_ROLE: &str = "redis.io/shard-role";
/// On RedisBackups a RedisScheduledBackup created: the scheduled backup's name (pruning).
pub const LABEL_SCHEDULED_BACKUP: &str = "redis.io/scheduled-backup";
/// `"true"` on the published connection Secret.
pub const LABEL_CONNECTION_SECRET: &str = "redis.io/connection-secret";

/// Values of [`LABEL_ROLE`].
pub mod role {
    /// The primary data pod.
    pub const PRIMARY: &str = "primary";
    /// A replica data pod.
    pub const REPLICA: &str = "replica";
    /// A Sentinel pod.
    pub const SENTINEL: &str = "sentinel";
}

/// Values of [`LABEL_WORKLOAD`].
pub mod workload {
    /// A Redis data pod.
    pub const DATA: &str = "data";
    /// A Sentinel pod.
    pub const SENTINEL: &str = "sentinel";
}

// Annotations.
/// On the RedisCluster: a JSON array of fenced pod names.
pub const ANN_FENCED_INSTANCES: &str = "redis.io/fencedInstances";
/// On the RedisCluster: `on`/`true` hibernates (every pod deleted, PVCs kept).
pub const ANN_HIBERNATION: &str = "redis.io/hibernation";
/// On the RedisCluster: `"true"` approves a supervised primary update (consumed).
pub const ANN_APPROVE_PRIMARY_UPDATE: &str = "redis.io/approve-primary-update";
/// On data pods: the hash of everything that needs a restart to change.
pub const ANN_SPEC_HASH: &str = "redis.io/spec-hash";
/// On the `-leader` Service: `"true"` while the cluster is in replica mode.
pub const ANN_REPLICA_MODE: &str = "redis.io/replica-mode";
/// On the RedisCluster: the JSON array of the pods the operator itself added to
/// [`ANN_FENCED_INSTANCES`] during a failover, so that it releases only its own fences and
/// never one a user set. Written in the same patch as the fence itself.
pub const ANN_OPERATOR_FENCED: &str = "redis.io/operatorFencedInstances";
/// On the children the operator applies: a hash of what it last applied, so an unchanged
/// child costs no write.
pub const ANN_APPLIED_HASH: &str = "redis.io/applied-hash";
/// The fencing annotation's wildcard: every instance is fenced.
pub const FENCE_ALL: &str = "*";
/// On the RedisCluster: `"disabled"` pauses the RedisCluster controller for this cluster
/// (CloudNativePG's `cnpg.io/reconciliationLoop`); `"enabled"` or absent reconciles.
pub const ANN_RECONCILIATION_LOOP: &str = "redis.io/reconciliationLoop";
/// Values [`ANN_RECONCILIATION_LOOP`] accepts.
pub const RECONCILIATION_LOOP_VALUES: [&str; 2] = ["enabled", "disabled"];
/// On a RedisBackup with `deletionPolicy: Delete`: the artifact is deleted from the object
/// store before the object goes.
pub const FINALIZER_ARTIFACT: &str = "redis.io/artifact-cleanup";

/// Values [`ANN_HIBERNATION`] accepts (case-sensitive, as upstream's webhook).
pub const HIBERNATION_VALUES: [&str; 5] = ["on", "off", "true", "false", ""];

// Ports.
/// Redis data port (also the TLS port when TLS is on).
pub const REDIS_PORT: i32 = 6379;
/// Sentinel port.
pub const SENTINEL_PORT: i32 = 26379;
/// Redis Cluster bus port (cluster mode is reserved).
pub const CLUSTER_BUS_PORT: i32 = 16379;
/// The instance manager's HTTP port in data pods (status, promote, backup, probes, metrics).
pub const INSTANCE_HTTP_PORT: i32 = 8080;
/// The operator's admission webhook port.
pub const WEBHOOK_PORT: u16 = 9443;
/// The operator's metrics port (upstream's `--metrics-bind-address` default).
pub const METRICS_PORT: u16 = 9090;
/// The operator's health probe port (upstream's).
pub const PROBE_PORT: u16 = 8080;

// Admission webhook.
/// Path of the RedisCluster defaulting webhook.
pub const PATH_MUTATE_CLUSTER: &str = "/mutate-redis-io-v1-rediscluster";
/// Path of the RedisCluster validating webhook.
pub const PATH_VALIDATE_CLUSTER: &str = "/validate-redis-io-v1-rediscluster";
/// Path of the RedisScheduledBackup validating webhook.
pub const PATH_VALIDATE_SCHEDULED_BACKUP: &str = "/validate-redis-io-v1-redisscheduledbackup";
/// Name of the RedisCluster defaulting webhook in its configuration.
pub const WEBHOOK_MUTATE_CLUSTER: &str = "mrediscluster.redis.io";
/// Name of the RedisCluster validating webhook in its configuration.
pub const WEBHOOK_VALIDATE_CLUSTER: &str = "vrediscluster.redis.io";
/// Name of the RedisScheduledBackup validating webhook in its configuration.
pub const WEBHOOK_VALIDATE_SCHEDULED_BACKUP: &str = "vredisscheduledbackup.redis.io";
/// The MutatingWebhookConfiguration whose caBundle the operator keeps current.
pub const MUTATING_WEBHOOK_CONFIGURATION: &str = "redis-operator-mutating-webhook";
/// The ValidatingWebhookConfiguration whose caBundle the operator keeps current.
pub const VALIDATING_WEBHOOK_CONFIGURATION: &str = "redis-operator-validating-webhook";
/// The Service in front of the webhook server (the serving certificate's DNS names).
pub const WEBHOOK_SERVICE: &str = "redis-operator-webhook-service";
/// Secret of the webhook CA (`tls.crt`, `tls.key`, `ca.crt`).
pub const WEBHOOK_CA_SECRET: &str = "redis-operator-ca-secret";
/// Secret of the webhook serving certificate (`tls.crt`, `tls.key`, `ca.crt`).
pub const WEBHOOK_CERT_SECRET: &str = "redis-operator-webhook-cert";

// The instance manager's HTTP API (data pods, port INSTANCE_HTTP_PORT).
/// Liveness (with the primary isolation check).
pub const PATH_HEALTHZ: &str = "/healthz";
/// Readiness.
pub const PATH_READYZ: &str = "/readyz";
/// Prometheus metrics.
pub const PATH_METRICS: &str = "/metrics";
/// Replication status, polled by the operator.
pub const PATH_STATUS: &str = "/v1/status";
/// Promote this instance to primary.
pub const PATH_PROMOTE: &str = "/v1/promote";
/// Demote this instance to a replica of `primaryIP`.
pub const PATH_DEMOTE: &str = "/v1/demote";
/// Hand the primary role over to a replica (sent to the current primary).
pub const PATH_SWITCHOVER: &str = "/v1/switchover";
/// Take a backup and upload it (`GET /v1/backup/<id>` reports it).
pub const PATH_BACKUP: &str = "/v1/backup";

// Inside data pods.
/// Redis data directory (PVC or emptyDir).
pub const DATA_DIR: &str = "/data";
/// emptyDir the init container copies the operator binary into.
pub const CONTROLLER_DIR: &str = "/controller";
/// Where the init container puts the binary (`copy-binary <this>`).
pub const MANAGER_BINARY: &str = "/controller/manager";
/// redis-server's Unix socket (mode 700): the instance manager's own connection, and
/// `kubectl redis cli`'s (redis-server listens on the pod IP only, never on 127.0.0.1).
pub const REDIS_SOCKET: &str = "/controller/redis.sock";
/// Projected Secrets: `/projected/<secret>/<key>`.
pub const PROJECTED_DIR: &str = "/projected";
/// TLS material (`tls.crt`, `tls.key`, `ca.crt`).
pub const TLS_DIR: &str = "/tls";
/// Object storage credentials.
pub const BACKUP_CREDENTIALS_DIR: &str = "/backup-credentials";

// Secret keys.
/// Password key of the auth Secret and of the replica-mode source Secret.
pub const KEY_PASSWORD: &str = "password";
/// ACL rules key of the ACL Secret.
pub const KEY_ACL: &str = "acl";
/// Certificate key of TLS Secrets.
pub const KEY_TLS_CRT: &str = "tls.crt";
/// Private key key of TLS Secrets.
pub const KEY_TLS_KEY: &str = "tls.key";
/// CA certificate key.
pub const KEY_CA_CRT: &str = "ca.crt";

/// Pod name of instance `ordinal`: `<cluster>-<ordinal>`.
pub fn pod_name(cluster: &str, ordinal: i32) -> String {
    format!("{cluster}-{ordinal}")
}

/// PVC name of instance `ordinal`: `<cluster>-data-<ordinal>`.
pub fn pvc_name(cluster: &str, ordinal: i32) -> String {
    format!("{cluster}-data-{ordinal}")
}

/// The ordinal of a data pod name of `cluster` (`<cluster>-<n>`), if it is one.
pub fn ordinal_of(cluster: &str, pod: &str) -> Option<i32> {
    let n = pod.strip_prefix(cluster)?.strip_prefix('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0'))
    {
        return None;
    }
    n.parse().ok()
}

/// Sentinel pod `i`: `<cluster>-sentinel-<i>`.
pub fn sentinel_pod_name(cluster: &str, i: i32) -> String {
    format!("{cluster}-sentinel-{i}")
}

/// The read-write Service (selects the primary): `<cluster>-leader`.
pub fn leader_service(cluster: &str) -> String {
    format!("{cluster}-leader")
}

/// The read-only Service (selects replicas): `<cluster>-replica`.
pub fn replica_service(cluster: &str) -> String {
    format!("{cluster}-replica")
}

/// The Service selecting every data pod: `<cluster>-any`.
pub fn any_service(cluster: &str) -> String {
    format!("{cluster}-any")
}

/// The Sentinel Service: `<cluster>-sentinel`.
pub fn sentinel_service(cluster: &str) -> String {
    format!("{cluster}-sentinel")
}

/// The generated auth Secret: `<cluster>-auth`.
pub fn auth_secret(cluster: &str) -> String {
    format!("{cluster}-auth")
}

/// The PodDisruptionBudget: `<cluster>-pdb`.
pub fn pdb_name(cluster: &str) -> String {
    format!("{cluster}-pdb")
}

/// The instance manager's ServiceAccount, Role and RoleBinding: `<cluster>`.
pub fn instance_service_account(cluster: &str) -> String {
    cluster.to_owned()
}

/// The PodDisruptionBudget of the primary (`minAvailable: 1`): `<cluster>-primary`.
pub fn primary_pdb_name(cluster: &str) -> String {
    format!("{cluster}-primary")
}

/// The PodDisruptionBudget of the replicas (`minAvailable: instances - 2`): `<cluster>-replicas`.
pub fn replicas_pdb_name(cluster: &str) -> String {
    format!("{cluster}-replicas")
}

/// The Lease naming the one instance allowed to be primary: `<cluster>-primary`. A promotion
/// first moves it from the old primary to the new one by compare-and-swap, so two promotions
/// can never both happen.
pub fn primary_lease(cluster: &str) -> String {
    format!("{cluster}-primary")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_cluster_names_follow_upstream() {
        assert_eq!(pod_name("demo", 0), "demo-0");
        assert_eq!(pvc_name("demo", 2), "demo-data-2");
        assert_eq!(sentinel_pod_name("demo", 1), "demo-sentinel-1");
        assert_eq!(leader_service("demo"), "demo-leader");
        assert_eq!(replica_service("demo"), "demo-replica");
        assert_eq!(any_service("demo"), "demo-any");
        assert_eq!(sentinel_service("demo"), "demo-sentinel");
        assert_eq!(auth_secret("demo"), "demo-auth");
        assert_eq!(pdb_name("demo"), "demo-pdb");
        assert_eq!(instance_service_account("demo"), "demo");
    }

    #[test]
    fn ordinals_are_parsed_numerically() {
        let cases = [
            ("demo-0", Some(0)),
            ("demo-10", Some(10)),
            ("demo-9", Some(9)),
            ("demo-01", None),
            ("demo-", None),
            ("demo-sentinel-0", None),
            ("demo-data-0", None),
            ("other-0", None),
            ("demo0", None),
        ];
        for (pod, want) in cases {
            assert_eq!(ordinal_of("demo", pod), want, "{pod}");
        }
    }
}
