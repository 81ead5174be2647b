//! The operator process: upstream's manager flags (reference §10, upstream `setup.go`) and the
//! FoundationDBCluster, FoundationDBBackup and FoundationDBRestore controllers under
//! [`kit::controller::Operator`].
//!
//! Contract:
//! - [`Flags`] accept upstream's flag names where they mean the same thing here:
//!   `--metrics-addr` (`:8080`), `--enable-leader-election` (on), `--leader-election-id`
//!   (`fdb-kubernetes-operator`, the Lease name, so an upstream deployment and this one never
//!   lead at once during a migration), `--max-concurrent-reconciles` (1), `--watch-namespace`
//!   (`WATCH_NAMESPACE`), `--cli-timeout` (10) and `--max-cli-timeout` (40) in seconds,
//!   `--minimum-recovery-time-for-exclusion` (120) and `--minimum-recovery-time-for-inclusion`
//!   (600) in seconds, `--minimum-age-for-terminal-pod-deletion` (30s),
//!   `--maintenance-list-stale-duration` (4h), `--maintenance-list-wait-duration` (5m),
//!   `--enable-restart-incompatible-processes` (true) and `--zap-log-level`
//!   (as `--log-level`). kit's own names (`--leader-elect`, `--probe-addr`, `--log-format`…)
//!   work too. Flags upstream has that this operator does not implement are rejected by name,
//!   not silently ignored.
//! - The database binaries come from `$FDB_BINARY_DIR`, as upstream: start-up fails unless it
//!   names a directory; versioned sub-directories copied in by upstream's init containers
//!   (`<dir>/<x.y.z>/bin/<x.y.z>/fdbcli`) are moved to `<dir>/<x.y>/` first
//!   ([`crate::admin::binaries`]). Without FoundationDB's binaries the operator cannot reach
//!   any database: it runs against real clusters only (the tests use the fake database).
//! - One process runs the FoundationDBCluster, FoundationDBBackup and FoundationDBRestore
//!   controllers, with the same namespace limit and concurrency.
//! - [`run`] runs until SIGTERM/SIGINT or the loss of leadership; with election on the
//!   controller runs only while the Lease is held. [`run_with`] takes the client, the database
//!   clients and the shutdown token (tests, embedding).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kit::controller::{Operator, RunContext};
use kit::flags::OperatorFlags;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::admin::binaries;
use crate::admin::cli::BinaryConfig;
use crate::cluster::{CliClients, Context, DatabaseClients, Options};

/// Operator name: the process, its metrics and its logs.
pub const OPERATOR_NAME: &str = "fdb-operator";
/// Upstream's default leader-election ID, the name of the Lease.
pub const LEASE_NAME: &str = "fdb-kubernetes-operator";

/// Command-line flags of `fdb-operator`.
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    name = "fdb-operator",
    version,
    about = "The FoundationDB operator: the FoundationDBCluster, FoundationDBBackup and FoundationDBRestore controllers",
    mut_arg("leader_elect", |a| a.alias("enable-leader-election")),
    mut_arg("lease_name", |a| a.alias("leader-election-id")),
    mut_arg("log_level", |a| a.alias("zap-log-level"))
)]
pub struct Flags {
    /// Metrics, probes, leader election and logging.
    #[command(flatten)]
    pub operator: OperatorFlags,

    /// FoundationDBClusters reconciled at once (at least 1).
    #[arg(long, default_value_t = 1)]
    pub max_concurrent_reconciles: usize,

    /// Watch only this namespace; every namespace when unset or empty.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// fdbcli's timeout in seconds for ordinary calls.
    #[arg(long, default_value_t = 10)]
    pub cli_timeout: u64,

    /// fdbcli's timeout in seconds for slow calls (`status json`, a blocking `exclude`).
    #[arg(long, default_value_t = 40)]
    pub max_cli_timeout: u64,

    /// Seconds since the last recovery before processes may be excluded.
    #[arg(long, default_value_t = 120.0)]
    pub minimum_recovery_time_for_exclusion: f64,

    /// Seconds since the last recovery before removed processes are included again.
    #[arg(long, default_value_t = 600.0)]
    pub minimum_recovery_time_for_inclusion: f64,

    /// How old a pod in phase Failed or Succeeded must be before it is deleted (and then
    /// recreated), a duration such as `30s` or `2m`.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub minimum_age_for_terminal_pod_deletion: Duration,

    /// The last recovery must be at least this old before the coordinators are changed because
    /// one of them is missing (`2m`).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub minimum_uptime_for_coordinator_change_with_missing_process: Duration,

    /// The last recovery must be at least this old before the coordinators are changed because
    /// one of them is undesired (excluded, being removed, zones too few) (`5m`).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub minimum_uptime_for_coordinator_change_with_undesired_process: Duration,

    /// The last recovery must be at least this old before the database configuration is
    /// changed (`1m`; `configure new` is not gated).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub minimum_uptime_for_configuration_changes: Duration,

    /// Maintenance-list entries older than this are removed (`4h`; only with
    /// `maintenanceModeOptions` letting the operator reset maintenance).
    #[arg(long, default_value = "4h", value_parser = parse_duration)]
    pub maintenance_list_stale_duration: Duration,

    /// How long a listed process in another zone than the one in maintenance still blocks
    /// the reset (`5m`).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub maintenance_list_wait_duration: Duration,

    /// Restart (recreate the pods of) processes that connect with an incompatible protocol
    /// (`--enable-restart-incompatible-processes=false` to disable).
    #[arg(
        long,
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub enable_restart_incompatible_processes: bool,

    /// Where fdbcli, fdbbackup and fdbrestore are, one directory per `major.minor` version.
    #[arg(long, env = "FDB_BINARY_DIR")]
    pub fdb_binary_dir: Option<PathBuf>,

    /// Upstream watches Nodes only when this pod label (naming the pod's cluster) is given;
    /// this operator always watches the nodes' taints and wakes the clusters that have
    /// `taintReplacementOptions`, so the value is accepted for compatibility and not needed.
    #[arg(long)]
    pub cluster_label_key_for_node_trigger: Option<String>,
}

/// Parses a duration: `30s`, `5m`, `1h30m`, `1.5s` (Go's and jiff's friendly forms).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    Duration::try_from(d).map_err(|_| format!("{s:?} must not be negative"))
}

impl Flags {
    /// Rejects settings the operator cannot run with.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.max_concurrent_reconciles >= 1,
            "--max-concurrent-reconciles must be at least 1, got {}",
            self.max_concurrent_reconciles
        );
        anyhow::ensure!(
            self.cli_timeout >= 1 && self.max_cli_timeout >= 1,
            "--cli-timeout and --max-cli-timeout must be at least 1 second"
        );
        for (name, v) in [
            (
                "--minimum-recovery-time-for-exclusion",
                self.minimum_recovery_time_for_exclusion,
            ),
            (
                "--minimum-recovery-time-for-inclusion",
                self.minimum_recovery_time_for_inclusion,
            ),
        ] {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "{name} must be a non-negative number of seconds, got {v}"
            );
        }
        Ok(())
    }

    /// The operator-wide thresholds these flags set.
    pub fn options(&self) -> Options {
        Options {
            minimum_recovery_time_for_exclusion: self.minimum_recovery_time_for_exclusion,
            minimum_recovery_time_for_inclusion: self.minimum_recovery_time_for_inclusion,
            minimum_recovery_time_for_missing_coordinator_change: self
                .minimum_uptime_for_coordinator_change_with_missing_process
                .as_secs_f64(),
            minimum_uptime_for_coordinator_change: self
                .minimum_uptime_for_coordinator_change_with_undesired_process
                .as_secs_f64(),
            minimum_uptime_for_configuration_changes: self
                .minimum_uptime_for_configuration_changes
                .as_secs_f64(),
            minimum_age_for_terminal_pod_deletion: self.minimum_age_for_terminal_pod_deletion,
            maintenance_list_stale_duration: self.maintenance_list_stale_duration,
            maintenance_list_wait_duration: self.maintenance_list_wait_duration,
            restart_incompatible_processes: self.enable_restart_incompatible_processes,
            ..Options::default()
        }
    }

    /// The thresholds of the backup and restore controllers these flags set.
    pub fn backup_options(&self) -> crate::backup::Options {
        crate::backup::Options {
            minimum_age_for_terminal_pod_deletion: self.minimum_age_for_terminal_pod_deletion,
            ..crate::backup::Options::default()
        }
    }

    /// The namespace to watch, if limited to one.
    pub fn namespace(&self) -> Option<String> {
        self.watch_namespace.clone().filter(|n| !n.is_empty())
    }

    /// Where the binaries are and the fdbcli timeouts.
    pub fn binary_config(&self) -> BinaryConfig {
        let mut config = BinaryConfig::from_env().with_timeouts(
            Duration::from_secs(self.cli_timeout),
            Duration::from_secs(self.max_cli_timeout),
        );
        if let Some(dir) = &self.fdb_binary_dir {
            config.binary_dir = dir.clone();
        }
        config
    }

    fn operator_flags(&self) -> OperatorFlags {
        let mut flags = self.operator.clone();
        flags
            .lease_name
            .get_or_insert_with(|| LEASE_NAME.to_owned());
        flags
    }
}

/// Runs the operator with the in-cluster (or `KUBECONFIG`) client and the real database
/// clients until SIGTERM/SIGINT.
pub async fn run(flags: Flags) -> anyhow::Result<()> {
    flags.validate()?;
    let config = flags.binary_config();
    anyhow::ensure!(
        config.binary_dir.is_dir(),
        "FDB_BINARY_DIR (or --fdb-binary-dir) must name a directory holding fdbcli, fdbbackup \
         and fdbrestore under <major.minor>/, got {:?}",
        config.binary_dir
    );
    let moved = binaries::arrange(&config.binary_dir)
        .with_context(|| format!("arranging the binaries in {:?}", config.binary_dir))?;
    let clients: Arc<dyn DatabaseClients> = Arc::new(CliClients::new(config));
    let operator = Operator::new(OPERATOR_NAME, flags.operator_flags());
    operator
        .run(move |rc| {
            // Logged here: telemetry starts inside Operator::run.
            for (from, to) in &moved {
                tracing::info!(from = %from.display(), to = %to.display(), "moved a FoundationDB binary");
            }
            controllers(rc, clients, flags)
        })
        .await
}

/// Runs the operator with `client` and `clients` until `shutdown` is cancelled.
pub async fn run_with(
    flags: Flags,
    client: Client,
    clients: Arc<dyn DatabaseClients>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    flags.validate()?;
    let operator = Operator::new(OPERATOR_NAME, flags.operator_flags())
        .with_client(client)
        .with_shutdown(shutdown);
    start(operator, flags, clients).await
}

async fn start(
    operator: Operator,
    flags: Flags,
    clients: Arc<dyn DatabaseClients>,
) -> anyhow::Result<()> {
    operator
        .run(move |rc| controllers(rc, clients, flags))
        .await
}

async fn controllers(
    rc: RunContext,
    clients: Arc<dyn DatabaseClients>,
    flags: Flags,
) -> anyhow::Result<()> {
    let ctx =
        Arc::new(Context::new(rc.client.clone(), clients.clone()).with_options(flags.options()));
    let data = Arc::new(
        crate::backup::Context::new(rc.client.clone(), clients)
            .with_options(flags.backup_options()),
    );
    let (ns, n) = (flags.namespace(), flags.max_concurrent_reconciles);
    tracing::info!(namespace = ?ns, concurrency = n, "starting the FoundationDBCluster, FoundationDBBackup and FoundationDBRestore controllers");
    tokio::join!(
        crate::cluster::run_with(ctx, rc.clone(), ns.clone(), n),
        crate::backup::run(data.clone(), rc.clone(), ns.clone(), n),
        crate::restore::run(data, rc, ns, n),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Flags, clap::Error> {
        Flags::try_parse_from(std::iter::once("fdb-operator").chain(args.iter().copied()))
    }

    #[test]
    fn upstreams_flag_names_and_defaults() {
        let f = parse(&[
            "--metrics-addr=:9090",
            "--enable-leader-election=false",
            "--leader-election-id=fdb-a",
            "--max-concurrent-reconciles=5",
            "--watch-namespace=db",
            "--cli-timeout=20",
            "--max-cli-timeout=60",
            "--minimum-recovery-time-for-exclusion=1.0",
            "--minimum-recovery-time-for-inclusion=2.5",
            "--zap-log-level=debug",
            "--cluster-label-key-for-node-trigger=foundationdb.org/fdb-cluster-name",
        ])
        .expect("upstream flags parse");
        assert_eq!(f.operator.metrics_addr.port(), 9090);
        assert!(!f.operator.leader_elect);
        assert_eq!(f.operator_flags().lease_name.as_deref(), Some("fdb-a"));
        assert_eq!(f.max_concurrent_reconciles, 5);
        assert_eq!(f.namespace().as_deref(), Some("db"));
        assert_eq!(f.operator.log_level.as_deref(), Some("debug"));
        let config = f.binary_config();
        assert_eq!(config.cli_timeout, Duration::from_secs(20));
        assert_eq!(config.max_cli_timeout, Duration::from_secs(60));
        let o = f.options();
        assert_eq!(o.minimum_recovery_time_for_exclusion, 1.0);
        assert_eq!(o.minimum_recovery_time_for_inclusion, 2.5);
        assert!(f.validate().is_ok());
    }

    #[test]
    fn defaults_follow_upstream() {
        let f = parse(&["--enable-leader-election"]).expect("parse");
        assert!(f.operator.leader_elect);
        assert_eq!(f.operator.metrics_addr.port(), 8080);
        assert_eq!(f.operator_flags().lease_name.as_deref(), Some(LEASE_NAME));
        assert_eq!(f.max_concurrent_reconciles, 1);
        assert_eq!(f.options(), Options::default());
        assert_eq!(f.cli_timeout, 10);
        assert_eq!(f.max_cli_timeout, 40);
    }

    #[test]
    fn maintenance_and_incompatible_process_flags() {
        let f = parse(&[
            "--maintenance-list-stale-duration=1h",
            "--maintenance-list-wait-duration=30s",
            "--enable-restart-incompatible-processes=false",
        ])
        .expect("parse");
        let o = f.options();
        assert_eq!(o.maintenance_list_stale_duration, Duration::from_secs(3600));
        assert_eq!(o.maintenance_list_wait_duration, Duration::from_secs(30));
        assert!(!o.restart_incompatible_processes);
        let on = parse(&["--enable-restart-incompatible-processes"]).expect("parse");
        assert!(on.options().restart_incompatible_processes);
    }

    #[test]
    fn coordinator_and_configuration_gates_are_upstreams_flags() {
        let f = parse(&[
            "--minimum-uptime-for-coordinator-change-with-missing-process=30s",
            "--minimum-uptime-for-coordinator-change-with-undesired-process=10m",
            "--minimum-uptime-for-configuration-changes=90s",
        ])
        .expect("parse");
        let o = f.options();
        assert_eq!(o.minimum_recovery_time_for_missing_coordinator_change, 30.0);
        assert_eq!(o.minimum_uptime_for_coordinator_change, 600.0);
        assert_eq!(o.minimum_uptime_for_configuration_changes, 90.0);
        let defaults = parse(&[]).expect("parse").options();
        assert_eq!(
            (
                defaults.minimum_recovery_time_for_missing_coordinator_change,
                defaults.minimum_uptime_for_coordinator_change,
                defaults.minimum_uptime_for_configuration_changes,
            ),
            (120.0, 300.0, 60.0),
            "upstream's defaults: 2m, 5m, 1m"
        );
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5s").is_err());
        let f = parse(&["--minimum-age-for-terminal-pod-deletion=2m"]).expect("parse");
        assert_eq!(
            f.options().minimum_age_for_terminal_pod_deletion,
            Duration::from_secs(120)
        );
    }

    #[test]
    fn bad_values_are_rejected_with_the_flag_name() {
        let err = parse(&["--max-concurrent-reconciles=0"])
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("--max-concurrent-reconciles"));
        let err = parse(&["--minimum-recovery-time-for-inclusion=-1"])
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("--minimum-recovery-time-for-inclusion")
        );
        // Upstream flags this operator does not implement are refused, not ignored.
        assert!(parse(&["--label-selector=a=b"]).is_err());
        assert!(parse(&["--server-side-apply"]).is_err());
    }
}
