//! The operator process: flags (upstream's environment variables, with CLI flags overriding
//! them) and both controllers run under [`kit::controller::Operator`].
//!
//! Contract:
//! - [`Flags`] are the shared operator flags (`METRICS_ADDR` :8080, `PROBE_ADDR` :8081,
//!   `LEADER_ELECT` true; controller-runtime's `--metrics-bind-address` and
//!   `--health-probe-bind-address` are accepted) plus `OPERATOR_LOG_LEVEL`, the concurrency of
//!   each controller and the snapshot registry settings.
//! - [`run`] and [`run_with_client`] run until shutdown, an error of either controller, or the
//!   loss of leadership. With leader election on, controllers start only once the Lease
//!   `cocoon-operator.cocoonset.cocoonstack.io` (upstream's election ID) is held.
//! - A bad registry configuration or a concurrency below 1 fails at start-up, before any
//!   controller runs.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use kit::controller::{Operator, RunContext};
use kit::flags::OperatorFlags;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::hibernation::decide::Timeouts;
use crate::metrics::CocoonMetrics;
use crate::registry::config::RegistrySettings;

/// Operator name: the process, its metrics and its logs.
pub const OPERATOR_NAME: &str = "cocoon-operator";
/// Default leader-election Lease name: upstream's election ID, so an upstream deployment and
/// this one never lead at once during a migration.
pub const LEASE_NAME: &str = "cocoon-operator.cocoonset.cocoonstack.io";

/// Command-line flags of `cocoon-operator`.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(
    name = "cocoon-operator",
    version,
    about = "The cocoon operator: CocoonSet and CocoonHibernation controllers"
)]
pub struct Flags {
    /// Metrics, probes, leader election and logging.
    #[command(flatten)]
    pub operator: OperatorFlags,

    /// Log level (upstream's variable); `--log-level`/`LOG_LEVEL` wins when both are set.
    #[arg(long, env = "OPERATOR_LOG_LEVEL")]
    pub operator_log_level: Option<String>,

    /// CocoonSets reconciled at once (at least 1).
    #[arg(long, env = "COCOONSET_CONCURRENCY", default_value_t = 4)]
    pub cocoonset_concurrency: usize,

    /// CocoonHibernations reconciled at once (at least 1).
    #[arg(long, env = "HIBERNATION_CONCURRENCY", default_value_t = 4)]
    pub hibernation_concurrency: usize,

    /// Watch only this namespace (CocoonSets, CocoonHibernations and pods); every namespace
    /// when unset. A Flotilla addition: a namespace-scoped install needs only a Role.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// OCI distribution registry holding the snapshots, `host[:port][/path]` (https unless an
    /// `http://` prefix is given). When unset, the epoch registry at `--epoch-url` is used.
    #[arg(long, env = "OCI_REGISTRY")]
    pub oci_registry: Option<String>,

    /// Username for the OCI registry (else from the docker config).
    #[arg(long, env = "OCI_USERNAME")]
    pub oci_username: Option<String>,

    /// Password for the OCI registry (prefer a docker config mounted from a Secret).
    #[arg(long, env = "OCI_PASSWORD", hide_env_values = true)]
    pub oci_password: Option<String>,

    /// PEM CA bundle trusted for the OCI registry, in addition to the system roots.
    #[arg(long, env = "OCI_CA_CERT")]
    pub oci_ca_cert: Option<PathBuf>,

    /// Directory holding the docker `config.json` with registry credentials.
    #[arg(long, env = "DOCKER_CONFIG")]
    pub docker_config: Option<PathBuf>,

    /// Base URL of the epoch registry (used when `--oci-registry` is unset).
    #[arg(
        long,
        env = "EPOCH_URL",
        default_value = "http://epoch.cocoon-system.svc:8080"
    )]
    pub epoch_url: String,

    /// Bearer token for epoch. Deletes need a write token; a read-only one leaks tags.
    #[arg(long, env = "EPOCH_TOKEN", hide_env_values = true)]
    pub epoch_token: Option<String>,

    /// PEM CA bundle trusted for epoch, in addition to the system roots.
    #[arg(long, env = "EPOCH_CA_CERT")]
    pub epoch_ca_cert: Option<PathBuf>,
}

impl Flags {
    /// The registry settings these flags describe.
    pub fn registry_settings(&self) -> RegistrySettings {
        RegistrySettings {
            oci_registry: self.oci_registry.clone().filter(|s| !s.is_empty()),
            oci_username: self.oci_username.clone().filter(|s| !s.is_empty()),
            oci_password: self.oci_password.clone().filter(|s| !s.is_empty()),
            oci_ca_cert: self.oci_ca_cert.clone(),
            docker_config: self.docker_config.clone(),
            epoch_url: self.epoch_url.clone(),
            epoch_token: self.epoch_token.clone().filter(|s| !s.is_empty()),
            epoch_ca_cert: self.epoch_ca_cert.clone(),
        }
    }

    /// Rejects settings no controller could run with.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.cocoonset_concurrency >= 1,
            "--cocoonset-concurrency must be at least 1, got {}",
            self.cocoonset_concurrency
        );
        anyhow::ensure!(
            self.hibernation_concurrency >= 1,
            "--hibernation-concurrency must be at least 1, got {}",
            self.hibernation_concurrency
        );
        Ok(())
    }

    fn operator_flags(&self) -> OperatorFlags {
        let mut flags = self.operator.clone();
        if flags.log_level.is_none() {
            flags.log_level = self.operator_log_level.clone();
        }
        flags
            .lease_name
            .get_or_insert_with(|| LEASE_NAME.to_owned());
        flags
    }
}

/// Runs the operator with the in-cluster (or `KUBECONFIG`) client until SIGTERM/SIGINT.
pub async fn run(flags: Flags) -> anyhow::Result<()> {
    flags.validate()?;
    let operator = Operator::new(OPERATOR_NAME, flags.operator_flags());
    start(operator, flags).await
}

/// Runs the operator with `client` until `shutdown` is cancelled (tests, embedding).
pub async fn run_with_client(
    flags: Flags,
    client: Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    flags.validate()?;
    let operator = Operator::new(OPERATOR_NAME, flags.operator_flags())
        .with_client(client)
        .with_shutdown(shutdown);
    start(operator, flags).await
}

async fn start(operator: Operator, flags: Flags) -> anyhow::Result<()> {
    let registry = flags
        .registry_settings()
        .build()
        .context("snapshot registry configuration")?;
    let metrics = CocoonMetrics::register(operator.metrics());
    operator
        .run(move |rc| controllers(rc, registry, metrics, flags))
        .await
}

async fn controllers(
    rc: RunContext,
    registry: crate::registry::SharedRegistry,
    metrics: CocoonMetrics,
    flags: Flags,
) -> anyhow::Result<()> {
    let ctx = Arc::new(Context::new(rc.client.clone(), registry, metrics));
    run_controllers(ctx, rc, &flags, Timeouts::from_env()).await
}

/// Both controllers over one context, scoped by `--watch-namespace`, until `rc.shutdown`;
/// the first failure ends both. `timeouts` are the CocoonHibernation deadlines (from the
/// environment in the binary; tests shorten them).
pub async fn run_controllers(
    ctx: Arc<Context>,
    rc: RunContext,
    flags: &Flags,
    timeouts: Timeouts,
) -> anyhow::Result<()> {
    // A child token: a failing controller stops its sibling without cancelling the caller's.
    let rc = RunContext {
        shutdown: rc.shutdown.child_token(),
        ..rc
    };
    let namespace = flags.watch_namespace.clone().filter(|n| !n.is_empty());
    // One cache of CocoonHibernations, kept by their controller's watch, read by both.
    let (crs, crs_writer) = crate::cache::hibernations();
    let sets = tokio::spawn(crate::cocoonset::run(
        ctx.clone(),
        rc.clone(),
        flags.cocoonset_concurrency,
        namespace.clone(),
        crs.clone(),
    ));
    let settings = crate::hibernation::Settings {
        concurrency: flags.hibernation_concurrency,
        namespace,
        timeouts,
    };
    let hibernations = tokio::spawn(crate::hibernation::run_with(
        ctx,
        rc.clone(),
        settings,
        (crs, crs_writer),
    ));
    let result =
        futures::future::try_join(async { sets.await? }, async { hibernations.await? }).await;
    if result.is_err() {
        rc.shutdown.cancel();
    }
    result.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Flags {
        Flags::try_parse_from(std::iter::once("cocoon-operator").chain(args.iter().copied()))
            .expect("flags parse")
    }

    #[test]
    fn defaults_follow_upstream() {
        let f = parse(&[]);
        assert_eq!(f.cocoonset_concurrency, 4);
        assert_eq!(f.hibernation_concurrency, 4);
        assert_eq!(f.epoch_url, "http://epoch.cocoon-system.svc:8080");
        assert_eq!(f.operator_flags().lease_name.as_deref(), Some(LEASE_NAME));
        assert!(f.validate().is_ok());
    }

    #[test]
    fn controller_runtime_flag_names_are_accepted() {
        let f = parse(&[
            "--metrics-bind-address=127.0.0.1:9090",
            "--health-probe-bind-address=:9091",
            "--leader-elect=false",
        ]);
        assert_eq!(f.operator.metrics_addr.to_string(), "127.0.0.1:9090");
        assert_eq!(f.operator.probe_addr.port(), 9091);
        assert!(!f.operator.leader_elect);
    }

    #[test]
    fn zero_concurrency_is_rejected() {
        let err = parse(&["--cocoonset-concurrency=0"])
            .validate()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("--cocoonset-concurrency must be at least 1")
        );
        let err = parse(&["--hibernation-concurrency=0"])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("--hibernation-concurrency"));
    }

    #[test]
    fn operator_log_level_is_the_fallback() {
        let f = parse(&["--operator-log-level=debug"]);
        assert_eq!(f.operator_flags().log_level.as_deref(), Some("debug"));
        let f = parse(&["--operator-log-level=debug", "--log-level=warn"]);
        assert_eq!(f.operator_flags().log_level.as_deref(), Some("warn"));
    }
}
