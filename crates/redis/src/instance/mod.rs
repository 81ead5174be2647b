//! The instance manager (`redis-operator instance`): PID 1 of every data pod, a small state
//! machine around its redis-server child (CloudNativePG's shape).
//!
//! Contract — how the pod looks (the operator builds it to match):
//! - init container `copy-manager`: the operator image, `/redis-operator copy-binary
//!   /controller/manager`;
//! - container `redis`: image `spec.imageName` (stock `redis:7.2`), command
//!   `["/controller/manager", "instance"]` with the flags of [`InstanceFlags`] (each also read
//!   from its environment variable: `CLUSTER_NAME`, `POD_NAME`, `POD_NAMESPACE` and `POD_IP`
//!   from the downward API), ports 6379 (`redis`) and 8080 (`http`, HTTPS), liveness `GET
//!   /healthz` and readiness `GET /readyz` with `scheme: HTTPS`, a
//!   `terminationGracePeriodSeconds` equal to `--shutdown-grace` plus a few seconds;
//! - volumes: `data` at `/data`; `controller` (emptyDir) at `/controller`; Secrets projected
//!   at `/projected/<secret>/<key>` (auth `password`, ACL `acl`, replica-mode source
//!   `password`); the API token at [`crate::instance_api::TOKEN_MOUNT`]; the API's serving
//!   certificate at [`crate::instance_api::TLS_MOUNT`]; the user's TLS (`tls.crt`, `tls.key`
//!   from `tlsSecret`, `ca.crt` from `caSecret`) at `/tls`; backup credentials at
//!   `/backup-credentials`;
//! - ServiceAccount `<cluster>` with the per-cluster Role (docs/redis.md): get/list/watch
//!   its own RedisCluster, get/list pods. The instance manager never writes the API.
//!
//! What it does ([`manager`]): on every start it reads the RedisCluster and decides
//! ([`decide::boot`]) whether redis-server starts as primary, as a replica of the primary's
//! pod IP, or not at all (fenced, primary unknown, secrets missing: it waits, stays up and
//! says why on `/v1/status` and `/readyz`). It renders redis.conf ([`config`]) with the
//! password in it, starts redis-server bound to the pod IP, and then keeps it converged:
//! fencing, role ([`decide::running`]), live configuration, password rotation ([`auth`]),
//! TLS certificate reloads. It serves the operator's API ([`api`]) and exits when
//! redis-server exits; SIGTERM becomes a graceful `SHUTDOWN` within the grace period.

pub mod api;
pub mod auth;
pub mod azure;
pub mod backup;
pub mod config;
pub mod decide;
pub mod dial;
pub mod fence;
pub mod info;
pub mod local;
pub mod manager;
pub mod metrics;
pub mod peers;
pub mod process;
pub mod resp;
pub mod restore;
pub mod s3;
pub mod secrets;
pub mod sentinel;
pub mod sentinel_boot;
pub mod sentinel_inputs;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kit::telemetry::LogFormat;

use crate::names;

/// Flags of `redis-operator instance`.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
#[command(about = "Run the instance manager of a Redis data pod")]
pub struct InstanceFlags {
    /// What this pod runs: `data` (redis-server, the data pods) or `sentinel` (Redis
    /// Sentinel, the Sentinel pods of sentinel mode).
    #[arg(long, env = "INSTANCE_ROLE", value_enum, default_value = "data")]
    pub role: InstanceRole,
    /// The RedisCluster this pod belongs to.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// This pod's name.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: String,
    /// This pod's namespace (the RedisCluster's).
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: String,
    /// This pod's IP: redis-server and the API bind to it.
    #[arg(long, env = "POD_IP")]
    pub pod_ip: IpAddr,
    /// The Redis port (TLS port when TLS is on).
    #[arg(long, env = "REDIS_PORT", default_value_t = names::REDIS_PORT as u16)]
    pub redis_port: u16,
    /// The API's port (HTTPS).
    #[arg(long, env = "HTTP_PORT", default_value_t = names::INSTANCE_HTTP_PORT as u16)]
    pub http_port: u16,
    /// Seconds a stop may take: SHUTDOWN, then SIGKILL when they are spent. Keep it below
    /// the pod's terminationGracePeriodSeconds.
    #[arg(long, env = "SHUTDOWN_GRACE_SECONDS", default_value_t = 25)]
    pub shutdown_grace: u64,
    /// The redis-server executable.
    #[arg(long, env = "REDIS_SERVER", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// The data directory.
    #[arg(long, default_value = names::DATA_DIR)]
    pub data_dir: PathBuf,
    /// The Unix socket the manager talks to redis-server through.
    #[arg(long, default_value = names::REDIS_SOCKET)]
    pub socket: PathBuf,
    /// Projected Secrets (`<dir>/<secret>/<key>`).
    #[arg(long, default_value = names::PROJECTED_DIR)]
    pub projected_dir: PathBuf,
    /// The user's TLS material.
    #[arg(long, default_value = names::TLS_DIR)]
    pub tls_dir: PathBuf,
    /// The API token Secret.
    #[arg(long, default_value = crate::instance_api::TOKEN_MOUNT)]
    pub token_dir: PathBuf,
    /// The API's serving certificate.
    #[arg(long, default_value = crate::instance_api::TLS_MOUNT)]
    pub api_tls_dir: PathBuf,
    /// Object storage credentials.
    #[arg(long, default_value = names::BACKUP_CREDENTIALS_DIR)]
    pub backup_credentials_dir: PathBuf,
    /// Seconds between two passes of the convergence loop (it also runs on every change of
    /// the RedisCluster).
    #[arg(long, env = "RESYNC_SECONDS", default_value_t = 5)]
    pub resync: u64,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log level (a tracing filter).
    #[arg(long, env = "LOG_LEVEL")]
    pub log_level: Option<String>,
}

/// What an instance manager runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InstanceRole {
    /// A data pod: redis-server.
    #[default]
    Data,
    /// A Sentinel pod: Redis Sentinel ([`sentinel`]).
    Sentinel,
}

/// Everything the instance manager is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The RedisCluster.
    pub cluster: String,
    /// Its namespace.
    pub namespace: String,
    /// This pod.
    pub pod: String,
    /// This pod's IP.
    pub pod_ip: IpAddr,
    /// The Redis port.
    pub port: u16,
    /// Where the API listens.
    pub http_addr: SocketAddr,
    /// The configuration's paths.
    pub paths: config::Paths,
    /// Projected Secrets.
    pub projected_dir: PathBuf,
    /// API token.
    pub token_dir: PathBuf,
    /// API serving certificate.
    pub api_tls_dir: PathBuf,
    /// Backup credentials.
    pub backup_credentials_dir: PathBuf,
    /// redis-server.
    pub redis_server: PathBuf,
    /// Stop grace.
    pub grace: Duration,
    /// Loop period.
    pub resync: Duration,
}

impl InstanceFlags {
    /// The settings these flags give.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        for (flag, v) in [
            ("--cluster-name", &self.cluster_name),
            ("--pod-name", &self.pod_name),
            ("--pod-namespace", &self.pod_namespace),
        ] {
            anyhow::ensure!(!v.trim().is_empty(), "{flag} must not be empty");
        }
        anyhow::ensure!(
            self.shutdown_grace >= 1,
            "--shutdown-grace must be at least 1 second"
        );
        Ok(Settings {
            cluster: self.cluster_name.clone(),
            namespace: self.pod_namespace.clone(),
            pod: self.pod_name.clone(),
            pod_ip: self.pod_ip,
            port: self.redis_port,
            http_addr: SocketAddr::new(self.pod_ip, self.http_port),
            paths: config::Paths {
                data_dir: self.data_dir.clone(),
                socket: self.socket.clone(),
                tls_dir: self.tls_dir.clone(),
            },
            projected_dir: self.projected_dir.clone(),
            token_dir: self.token_dir.clone(),
            api_tls_dir: self.api_tls_dir.clone(),
            backup_credentials_dir: self.backup_credentials_dir.clone(),
            redis_server: self.redis_server.clone(),
            grace: Duration::from_secs(self.shutdown_grace),
            resync: Duration::from_secs(self.resync.max(1)),
        })
    }
}

/// The rules of the per-cluster Role the instance manager runs under (ServiceAccount
/// `<cluster>`), one per need. The operator creates the Role from these, so the instance
/// manager's needs are written down once, next to the code that has them. Read-only: status
/// is pulled by the operator.
pub fn role_rules(cluster: &str) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    use k8s_openapi::api::rbac::v1::PolicyRule;
    let rule =
        |group: &str, resource: &str, names: Option<Vec<String>>, verbs: &[&str]| PolicyRule {
            api_groups: Some(vec![group.to_owned()]),
            resources: Some(vec![resource.to_owned()]),
            resource_names: names,
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            non_resource_urls: None,
        };
    vec![
        // Its own RedisCluster: currentPrimary/targetPrimary, fencing, the spec (boot guard,
        // live configuration); watched for prompt reactions, read afresh before every boot.
        rule(
            crate::crd::GROUP,
            "redisclusters",
            Some(vec![cluster.to_owned()]),
            &["get", "list", "watch"],
        ),
        // Pods of the namespace: the primary's pod IP (boot guard, role convergence) and the
        // peers' IPs (isolation check, password rotation).
        rule("", "pods", None, &["get", "list"]),
        // The bootstrap restore reads the RedisBackup it restores.
        rule(crate::crd::GROUP, "redisbackups", None, &["get"]),
    ]
}

/// Runs the instance manager until redis-server exits or SIGTERM/SIGINT.
pub async fn run(flags: InstanceFlags) -> anyhow::Result<()> {
    let settings = flags.settings()?;
    kit::telemetry::init(flags.log_format, flags.log_level.as_deref())?;
    let shutdown = kit::shutdown::on_signals().context("installing signal handlers")?;
    let client = kube::Client::try_default()
        .await
        .context("building the Kubernetes client")?;
    match flags.role {
        InstanceRole::Data => manager::run(settings, client, shutdown).await,
        InstanceRole::Sentinel => sentinel::run(settings, client, shutdown).await,
    }
}
