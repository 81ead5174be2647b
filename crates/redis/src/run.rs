//! The `controller` process: flags (upstream's, with environment fallbacks) and the operator
//! runtime.
//!
//! Contract:
//! - [`ControllerFlags`] are kit's operator flags with upstream's defaults (metrics on `:9090`,
//!   probes on `:8080`, leader election on with the Lease `redis-operator-leader`) plus
//!   `--max-concurrent-reconciles` (default 5).
//! - `--watch-namespaces` limits the controllers to some namespaces; `--operator-image`
//!   (`RELATED_IMAGE_OPERATOR`), `--status-poll-seconds` and the test-only
//!   `--pods-on-process-nodes` shape the RedisCluster controller ([`crate::cluster`]);
//!   `--backup-timeout` bounds each RedisBackup ([`crate::backup`]).
//! - [`run`] and [`run_with_client`] run until shutdown (SIGTERM/SIGINT or the token), the
//!   loss of leadership, or a failure of the webhook server; either part failing stops the
//!   other. Controllers run only while the Lease is held; the admission webhook server
//!   ([`crate::admission`]) runs on every replica, leader or not, and `/readyz` turns ready
//!   once it serves (at once when `--webhook-enabled=false`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kit::controller::{Operator, RunContext};
use kit::flags::OperatorFlags;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::admission::{Webhook, WebhookFlags};
use crate::cluster::build::PodSettings;
use crate::context::HandoffHook;
use crate::context::{Context, Settings};
use crate::instance_client::https::HttpsConnector;
use crate::metrics::RedisMetrics;
use crate::names;

/// Flags of `redis-operator controller`.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
#[command(
    about = "Run the operator",
    mut_arg("metrics_addr", |a| a.default_value(":9090")),
    mut_arg("probe_addr", |a| a.default_value(":8080"))
)]
pub struct ControllerFlags {
    /// Metrics, probes, leader election and logging.
    #[command(flatten)]
    pub operator: OperatorFlags,

    /// RedisClusters reconciled at once (at least 1).
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 5)]
    pub max_concurrent_reconciles: usize,

    /// Comma-separated namespaces whose RedisClusters, RedisBackups and RedisScheduledBackups the
    /// operator manages; empty
    /// means every namespace.
    #[arg(long, env = "WATCH_NAMESPACES", default_value = "")]
    pub watch_namespaces: String,

    /// Comma-separated controllers to run while leading (`rediscluster`, `redisbackup`,
    /// `redisscheduledbackup`), as kube-controller-manager's `--controllers`; `*` runs them
    /// all. One operator normally runs all three; a subset lets a test (or a split deployment)
    /// run the backup controllers beside data pods it manages itself.
    #[arg(long, env = "CONTROLLERS", default_value = "*")]
    pub controllers: String,

    /// How long a RedisBackup may wait for an instance to take it, and then how long it may
    /// run, before it fails (a Go duration such as `1h` or `90s`).
    #[arg(long, env = "BACKUP_TIMEOUT", default_value = "1h", value_parser = parse_timeout)]
    pub backup_timeout: Duration,

    /// How long the artifact of a deleted RedisBackup with `deletionPolicy: Delete` may take to
    /// be deleted from the object store (no data pod to ask, the store refusing) before it is
    /// kept with a Warning `ArtifactKept` and the RedisBackup released (a Go duration).
    #[arg(long, env = "ARTIFACT_DELETION_TIMEOUT", default_value = "10m", value_parser = parse_timeout)]
    pub artifact_deletion_timeout: Duration,

    /// The admission webhook server and its PKI.
    #[command(flatten)]
    pub webhook: WebhookFlags,

    /// The operator image the data pods' `copy-manager` init container runs (it installs the
    /// instance manager). Defaults to this operator's own published image.
    #[arg(long, env = "RELATED_IMAGE_OPERATOR", default_value_t = crate::context::default_operator_image())]
    pub operator_image: String,

    /// Seconds between two status polls of a converged cluster's instances.
    #[arg(long, env = "STATUS_POLL_SECONDS", default_value_t = 5)]
    pub status_poll_seconds: u64,

    /// Let data pods tolerate and select Flotilla's process-backed test nodes
    /// (`flotilla.dev/process-node`). For the local test plane only; never in production.
    #[arg(long, env = "PODS_ON_PROCESS_NODES", default_value_t = false)]
    pub pods_on_process_nodes: bool,
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = crate::schedule::parse_go_duration(s)?;
    Duration::try_from(d)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?} must be a positive duration"))
}

impl ControllerFlags {
    /// Rejects settings the operator cannot run with.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.max_concurrent_reconciles >= 1,
            "--max-concurrent-reconciles must be at least 1, got {}",
            self.max_concurrent_reconciles
        );
        self.enabled()?;
        Ok(())
    }

    /// The controllers `--controllers` names, or why it is wrong.
    pub fn enabled(&self) -> anyhow::Result<Enabled> {
        let mut on = Enabled::default();
        for name in self.controllers.split(',').map(str::trim) {
            match name {
                "*" => {
                    on = Enabled {
                        cluster: true,
                        backup: true,
                        scheduled_backup: true,
                    }
                }
                "rediscluster" => on.cluster = true,
                "redisbackup" => on.backup = true,
                "redisscheduledbackup" => on.scheduled_backup = true,
                other => anyhow::bail!(
                    "--controllers: unknown controller {other:?} (known: rediscluster, redisbackup, redisscheduledbackup, *)"
                ),
            }
        }
        Ok(on)
    }

    /// The namespaces to watch, or `None` for every namespace.
    pub fn namespaces(&self) -> Option<Vec<String>> {
        let list: Vec<String> = self
            .watch_namespaces
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        (!list.is_empty()).then_some(list)
    }

    /// The settings the RedisCluster controller runs with.
    pub fn settings(&self) -> Settings {
        Settings {
            pod: PodSettings {
                operator_image: self.operator_image.clone(),
                process_nodes: self.pods_on_process_nodes,
            },
            max_concurrent_reconciles: self.max_concurrent_reconciles,
            poll_interval: std::time::Duration::from_secs(self.status_poll_seconds.max(1)),
            handoff_hook: None,
        }
    }

    fn operator_flags(&self) -> OperatorFlags {
        let mut flags = self.operator.clone();
        flags
            .lease_name
            .get_or_insert_with(|| names::LEASE_NAME.to_owned());
        flags
    }
}

/// Runs the operator with the in-cluster (or `KUBECONFIG`) client until SIGTERM/SIGINT.
pub async fn run(flags: ControllerFlags) -> anyhow::Result<()> {
    flags.validate()?;
    kit::telemetry::init(
        flags.operator.log_format,
        flags.operator.log_level.as_deref(),
    )?;
    let shutdown = kit::shutdown::on_signals().context("installing signal handlers")?;
    let client = Client::try_default()
        .await
        .context("building the Kubernetes client")?;
    run_with_client(flags, client, shutdown, |_| {}).await
}

/// Runs the operator with `client` until `shutdown` is cancelled (tests, embedding);
/// `on_webhook` is told where the webhook server listens once it serves.
pub async fn run_with_client(
    flags: ControllerFlags,
    client: Client,
    shutdown: CancellationToken,
    on_webhook: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    run_with_hook(flags, client, shutdown, on_webhook, None).await
}

/// [`run_with_client`] with a [`HandoffHook`] (crash points for tests).
pub async fn run_with_hook(
    flags: ControllerFlags,
    client: Client,
    shutdown: CancellationToken,
    on_webhook: impl FnOnce(SocketAddr),
    hook: Option<HandoffHook>,
) -> anyhow::Result<()> {
    flags.validate()?;
    // A child token: a failing part stops its sibling without cancelling the caller's token.
    let inner = shutdown.child_token();
    let operator = Operator::new(names::OPERATOR_NAME, flags.operator_flags())
        .with_client(client.clone())
        .with_shutdown(inner.clone())
        .with_manual_readiness();
    let readiness = operator.readiness().clone();
    let metrics = RedisMetrics::register(operator.metrics());
    let backups = BackupSettings {
        backup_timeout: flags.backup_timeout,
        artifact_deletion_timeout: flags.artifact_deletion_timeout,
        concurrency: flags.max_concurrent_reconciles,
        enabled: flags.enabled()?,
    };
    let (mut settings, namespaces) = (flags.settings(), flags.namespaces());
    settings.handoff_hook = hook;
    let run = move |rc| controllers(rc, settings, namespaces, backups, metrics);
    if !flags.webhook.webhook_enabled {
        readiness.set_ready(true);
        return operator.run(run).await;
    }
    let webhook = Webhook::new(client, flags.webhook.clone());
    let (ran, served) = tokio::join!(
        async {
            let r = operator.run(run).await;
            inner.cancel();
            r
        },
        async {
            let r = webhook.run(readiness, inner.clone(), on_webhook).await;
            inner.cancel();
            r
        }
    );
    served.and(ran)
}

/// Which controllers run while leading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Enabled {
    /// RedisCluster.
    pub cluster: bool,
    /// RedisBackup.
    pub backup: bool,
    /// RedisScheduledBackup.
    pub scheduled_backup: bool,
}

// What the backup controllers are built with.
#[derive(Clone, Copy, Debug)]
struct BackupSettings {
    backup_timeout: Duration,
    artifact_deletion_timeout: Duration,
    concurrency: usize,
    enabled: Enabled,
}

// The controllers, while leading, per watched namespace (or one of each over every
// namespace): RedisCluster, RedisBackup and RedisScheduledBackup; the first failure stops
// the others.
async fn controllers(
    rc: RunContext,
    settings: Settings,
    namespaces: Option<Vec<String>>,
    backups: BackupSettings,
    metrics: RedisMetrics,
) -> anyhow::Result<()> {
    // One instance client for every controller: one connection pool per cluster CA.
    let connector: Arc<HttpsConnector> = Arc::new(HttpsConnector::default());
    let ctx = Arc::new(Context::new(
        rc.client.clone(),
        settings,
        connector.clone(),
        metrics,
    ));
    let mut shared = crate::backup::Shared::new(
        rc.client.clone(),
        &rc.metrics,
        backups.backup_timeout,
        connector,
    );
    shared.artifact_timeout = backups.artifact_deletion_timeout;
    let shared = Arc::new(shared);
    let rc = RunContext {
        shutdown: rc.shutdown.child_token(),
        ..rc
    };
    let scopes: Vec<Option<String>> = match namespaces {
        Some(list) => list.into_iter().map(Some).collect(),
        None => vec![None],
    };
    let mut runs = Vec::new();
    let on = backups.enabled;
    for ns in scopes {
        if on.cluster {
            let run = crate::cluster::run::run(ctx.clone(), rc.clone(), ns.clone());
            runs.push(tokio::spawn(run));
        }
        if on.backup {
            let run =
                crate::backup::run(shared.clone(), rc.clone(), ns.clone(), backups.concurrency);
            runs.push(tokio::spawn(run));
        }
        if on.scheduled_backup {
            let run = crate::scheduled_backup::run(shared.clone(), rc.clone(), ns);
            runs.push(tokio::spawn(run));
        }
    }
    let results =
        futures::future::try_join_all(runs.into_iter().map(|h| async move { h.await? })).await;
    if results.is_err() {
        rc.shutdown.cancel();
    }
    results.map(|_| ())
}

#[cfg(test)]
mod tests {

    #[test]
    fn controllers_flag_names_a_subset_or_all() {
        let enabled = |v: &str| {
            parse(&["--controllers", v])
                .enabled()
                .map_err(|e| e.to_string())
        };
        let all = Enabled {
            cluster: true,
            backup: true,
            scheduled_backup: true,
        };
        assert_eq!(enabled("*"), Ok(all));
        assert_eq!(
            enabled("redisbackup, redisscheduledbackup"),
            Ok(Enabled {
                cluster: false,
                ..all
            })
        );
        let err = enabled("rediscluster,backups").unwrap_err();
        assert!(err.contains("unknown controller \"backups\""), "{err}");
    }
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> ControllerFlags {
        let cli = Cli::try_parse_from(
            ["redis-operator", "controller"]
                .into_iter()
                .chain(args.iter().copied()),
        )
        .expect("flags parse");
        match cli.command {
            Command::Controller(f) => *f,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_upstream() {
        let f = parse(&[]);
        // Set in the environment of a test run only if someone exported them; the explicit
        // flags below pin the values this test checks.
        let f2 = parse(&["--metrics-addr=:9090", "--probe-addr=:8080"]);
        assert_eq!(f2.operator.metrics_addr.port(), 9090);
        assert_eq!(f2.operator.probe_addr.port(), 8080);
        assert_eq!(f.max_concurrent_reconciles, 5);
        assert_eq!(
            f.operator_flags().lease_name.as_deref(),
            Some(names::LEASE_NAME)
        );
        assert!(f.validate().is_ok());
    }

    #[test]
    fn upstream_flag_names_are_accepted() {
        let f = parse(&[
            "--metrics-bind-address=127.0.0.1:9091",
            "--health-probe-bind-address=:9092",
            "--leader-elect=false",
            "--max-concurrent-reconciles=2",
        ]);
        assert_eq!(f.operator.metrics_addr.to_string(), "127.0.0.1:9091");
        assert_eq!(f.operator.probe_addr.port(), 9092);
        assert!(!f.operator.leader_elect);
        assert_eq!(f.max_concurrent_reconciles, 2);
    }

    #[test]
    fn zero_concurrency_is_rejected() {
        let err = parse(&["--max-concurrent-reconciles=0"])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("--max-concurrent-reconciles"));
    }
}
