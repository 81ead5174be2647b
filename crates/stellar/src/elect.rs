//! Leader election for the `stellar` processes (`kit::leader`, a `coordination.k8s.io/v1`
//! Lease as client-go does it), so several replicas of the controller-manager (lease in the
//! WDS) or of an agent (lease in the WEC) can run and only one acts.
//!
//! Contract:
//! - Without election the work runs until SIGINT/SIGTERM.
//! - With election the process contends for the Lease; only once it holds it does the work
//!   start (logged `leading`), and a standby makes no other request. On SIGINT/SIGTERM the
//!   work stops, then the Lease is released, so a standby takes over at its next retry (2 s);
//!   a leader that dies without releasing is replaced once its lease expires (15 s).
//! - Losing the Lease (it could not be renewed within 10 s) stops the work at once and exits
//!   with an error, as controller-runtime does: a supervisor restarts the process, which
//!   contends again.

use std::time::Duration;

use anyhow::Context as _;
use kit::leader::{LeaderElector, LeaseConfig, run_while_leading};
use kube::Client;
use tokio_util::sync::CancellationToken;

/// How a process contends.
#[derive(Debug, Clone)]
pub struct Election {
    /// Lease name.
    pub lease: String,
    /// Lease namespace.
    pub namespace: String,
    /// Lease duration (renew deadline and retry period scale with it as client-go's 15/10/2).
    pub lease_duration: Duration,
}

/// The lease config of `e`: identity from `POD_NAME` or host name plus a random suffix.
pub fn lease_config(e: &Election) -> LeaseConfig {
    let mut c = LeaseConfig::new(&e.lease, &e.namespace);
    let secs = e.lease_duration.as_secs().max(3);
    c.lease_duration = Duration::from_secs(secs);
    c.renew_deadline = Duration::from_millis(secs * 1000 * 2 / 3);
    c.retry_period = Duration::from_millis((secs * 1000 / 7).max(200));
    c
}

/// Runs `work` until SIGINT/SIGTERM, while leading when `election` is given (its Lease in the
/// space of `client`). `work` gets a token cancelled at shutdown.
pub async fn run<F, Fut>(client: Client, election: Option<Election>, work: F) -> anyhow::Result<()>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let shutdown = kit::shutdown::on_signals().context("installing signal handlers")?;
    let Some(e) = election else {
        return work(shutdown).await;
    };
    let config = lease_config(&e);
    config.validate()?;
    tracing::info!(lease = %e.lease, namespace = %e.namespace, identity = %config.identity, "waiting for leadership");
    let identity = config.identity.clone();
    let elector = LeaderElector::new(client, config);
    let outcome = run_while_leading(elector, shutdown, |token| async move {
        tracing::info!(lease = %e.lease, identity = %identity, "leading");
        work(token).await
    })
    .await
    .context("leader election")?;
    outcome.unwrap_or(Ok(()))
}
