//! Instrumented controllers and the operator entry point, [`Operator::run`].
//!
//! Contract:
//! - [`instrument`] wraps a reconcile fn so every pass gets a tracing span with the
//!   controller and the object's namespace/name, a duration in
//!   `controller_runtime_reconcile_time_seconds`, and one count in
//!   `controller_runtime_reconcile_total` by result: `Ok(Action::await_change())` is
//!   `success`, any other `Ok` is `requeue_after`, `Err` is `error` (plus
//!   `reconcile_errors_total` and the error's category).
//! - The wrapper, not kube-runtime, enforces `max_concurrent_reconciles`: [`run_controller`]
//!   lets kube-runtime release up to [`RELEASED_PER_WORKER`] times that many reconciles and a
//!   semaphore holds them back. That makes the queue observable: `workqueue_depth` is the
//!   number of objects whose reconcile kube-runtime has released (due now, and not already
//!   running for that object) that wait for a free worker; `workqueue_adds_total` counts
//!   reconciles handed to the workers. Objects still inside kube-runtime's internal scheduler
//!   (debounce, requeue timers, a re-trigger while the same object reconciles, and what waits
//!   beyond the released ones) are invisible here and not counted: depth is a lower bound,
//!   and a depth at its ceiling says the queue is backed up. kube-runtime is never run
//!   unbounded: it polls every released reconcile on each wake-up, so a burst of N objects
//!   released at once cost O(N) per wake and O(N²) in all.
//! - [`run_controller`] watches the controller's own errors: a watch the API server refuses
//!   (403 Forbidden) is logged at ERROR with the verb, resource and scope and makes `/readyz`
//!   answer 503 until the permission is back (see [`crate::forbidden`]); other watch errors
//!   are logged at WARN. Either way the watch keeps retrying with back-off.
//! - [`Operator::run`] ties an operator's process together: telemetry, signals, the
//!   metrics/probe servers, and leader election. With election on, controllers start only once
//!   leading, and losing the lease returns an error (the binary should exit non-zero and be
//!   restarted as a standby). Shutdown drains controllers before the lease is released and
//!   before the endpoints stop.

use std::{fmt::Debug, hash::Hash, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use futures::{StreamExt, future::BoxFuture};
use kube::{
    Client, Resource, ResourceExt,
    runtime::{
        Controller,
        controller::{self, Action},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    flags::OperatorFlags,
    forbidden::WatchAccess,
    health::{self, Readiness},
    leader::{LeaderElector, LeaseConfig, run_while_leading},
    metrics::{ControllerMetrics, Metrics, ReconcileResult},
    reconcile::ReconcileError,
    shutdown, telemetry,
};

/// How one controller runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSettings {
    /// Controller name: the `controller` metric label; by convention the lower-cased kind.
    pub name: String,
    /// Reconciles running at once (controller-runtime's default is 1). Zero is taken as 1.
    pub max_concurrent_reconciles: usize,
    /// kube-runtime's trailing-edge debounce of reconcile requests.
    pub debounce: Duration,
}

impl ControllerSettings {
    /// One reconcile at a time, no debounce.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            max_concurrent_reconciles: 1,
            debounce: Duration::ZERO,
        }
    }
}

/// The classification used for `controller_runtime_reconcile_total{result}`.
pub fn classify<E>(result: &Result<Action, E>) -> ReconcileResult {
    match result {
        Err(_) => ReconcileResult::Error,
        Ok(a) if *a == Action::await_change() => ReconcileResult::Success,
        Ok(_) => ReconcileResult::RequeueAfter,
    }
}

/// Wraps `reconcile` with metrics, a span and a concurrency limit of `max_concurrent`.
///
/// `reconcile` is only called once a worker is free, so none of its work runs while queued.
pub fn instrument<K, Ctx, E, Fut, R>(
    metrics: ControllerMetrics,
    max_concurrent: usize,
    reconcile: R,
) -> impl FnMut(Arc<K>, Arc<Ctx>) -> BoxFuture<'static, Result<Action, E>> + Send + 'static
where
    K: Resource + Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
    E: ReconcileError + Send + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    R: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
{
    let reconcile = Arc::new(reconcile);
    let limit = max_concurrent.max(1);
    metrics.set_max_concurrent(limit);
    let permits = Arc::new(Semaphore::new(limit));
    move |obj, ctx| {
        let span = tracing::info_span!(
            "reconcile",
            controller = %metrics.name(),
            object.namespace = %obj.namespace().unwrap_or_default(),
            object.name = %obj.name_any(),
        );
        let (metrics, permits, reconcile) = (metrics.clone(), permits.clone(), reconcile.clone());
        let queued = metrics.enqueue();
        Box::pin(
            async move {
                // The semaphore is never closed, so acquiring cannot fail.
                let _permit = permits.acquire_owned().await.ok();
                drop(queued);
                let _worker = metrics.worker();
                let started = tokio::time::Instant::now();
                let result = reconcile(obj, ctx).await;
                metrics.observe_duration(started.elapsed());
                record(&metrics, &result);
                result
            }
            .instrument(span),
        )
    }
}

fn record<E: ReconcileError>(metrics: &ControllerMetrics, result: &Result<Action, E>) {
    metrics.record_result(classify(result));
    match result {
        Ok(action) => tracing::debug!(?action, "reconciled"),
        Err(e) => {
            metrics.record_error_category(e.category());
            tracing::warn!(error = %e, category = e.category(), "reconcile failed");
        }
    }
}

/// Runs `controller` with an instrumented `reconcile` until `rc.shutdown`, then drains: no
/// new reconciles start, running ones finish, for at most [`SHUTDOWN_DRAIN`]; a reconcile
/// still running then is dropped (cancelled at its await point, logged as a warning), so a
/// stuck reconcile can never keep the process from stopping within the pod's grace period.
/// Metrics go to `rc.metrics`; a watch refused with
/// 403 holds `rc.readiness` back until the permission returns (see the module docs).
///
/// The returned future borrows nothing, so it can be spawned or joined with others.
pub fn run_controller<K, Ctx, E, Fut, R, P>(
    controller: Controller<K>,
    settings: &ControllerSettings,
    rc: &RunContext,
    reconcile: R,
    error_policy: P,
    ctx: Arc<Ctx>,
) -> impl Future<Output = ()> + Send + 'static
where
    K: Clone + Resource + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Debug + Unpin + Send + Sync,
    Ctx: Send + Sync + 'static,
    E: ReconcileError + Send + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    R: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    P: Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
{
    let name = settings.name.clone();
    let wrapped = instrument(
        rc.metrics.controller(&name),
        settings.max_concurrent_reconciles,
        reconcile,
    );
    let access = WatchAccess::new(
        name.clone(),
        rc.client.clone(),
        rc.readiness.clone(),
        rc.shutdown.clone(),
    );
    // Bounded in kube-runtime too (see the module docs): the wrapper's semaphore is the limit.
    let released = settings
        .max_concurrent_reconciles
        .max(1)
        .saturating_mul(RELEASED_PER_WORKER);
    let config = controller::Config::default()
        .debounce(settings.debounce)
        .concurrency(u16::try_from(released).unwrap_or(u16::MAX));
    let events = controller
        .with_config(config)
        .graceful_shutdown_on(rc.shutdown.clone().cancelled_owned())
        .run(wrapped, error_policy, ctx);
    let shutdown = rc.shutdown.clone();
    async move {
        let drained = events.for_each(|res| {
            runtime_error(&name, &access, res.err());
            std::future::ready(())
        });
        let deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_DRAIN).await;
        };
        tokio::select! {
            () = drained => {}
            () = deadline => tracing::warn!(
                controller = %name,
                drain = ?SHUTDOWN_DRAIN,
                "reconciles still running after the shutdown drain; dropping them"
            ),
        }
        tracing::info!(controller = %name, "controller stopped");
    }
}

/// How many reconciles per worker kube-runtime releases to the wrapper at most: the ones
/// beyond the workers wait for one, counted in `workqueue_depth` (see the module docs).
pub const RELEASED_PER_WORKER: usize = 2;

/// How long a stopping controller waits for its running reconciles (well inside the
/// kubelet's default 30 s grace period).
pub const SHUTDOWN_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

// The runtime's own errors: reconcile failures were logged inside their span already.
fn runtime_error<E: std::error::Error>(
    name: &str,
    access: &WatchAccess,
    err: Option<controller::Error<E, watcher::Error>>,
) {
    match err {
        None | Some(controller::Error::ReconcilerFailed(..)) => {}
        Some(controller::Error::QueueError(e)) => access.failed(&e),
        // A trigger for an object that is gone by the time it runs: expected after deletions.
        Some(e @ controller::Error::ObjectNotFound(_)) => {
            tracing::debug!(controller = %name, error = %e, "controller event")
        }
        Some(e) => tracing::warn!(controller = %name, error = %e, "controller runtime error"),
    }
}

/// What an operator's controllers get once they may run.
#[derive(Clone)]
pub struct RunContext {
    /// The Kubernetes client.
    pub client: Client,
    /// The shared registry; pass to [`run_controller`].
    pub metrics: Metrics,
    /// `/readyz`: ready once the endpoints serve, unless [`Operator::with_manual_readiness`].
    pub readiness: Readiness,
    /// Cancelled on shutdown (or on losing the lease): stop and return.
    pub shutdown: CancellationToken,
    /// Where `/metrics` is actually served.
    pub metrics_addr: SocketAddr,
    /// Where `/healthz` and `/readyz` are actually served.
    pub probe_addr: SocketAddr,
}

/// An operator process: flags plus optional overrides, then [`Operator::run`].
pub struct Operator {
    name: String,
    flags: OperatorFlags,
    metrics: Metrics,
    client: Option<Client>,
    shutdown: Option<CancellationToken>,
    lease: Option<LeaseConfig>,
    readiness: Readiness,
    manual_readiness: bool,
}

impl Operator {
    /// An operator called `name` (default lease name `<name>-leader`).
    pub fn new(name: impl Into<String>, flags: OperatorFlags) -> Self {
        Self {
            name: name.into(),
            flags,
            metrics: Metrics::new(),
            client: None,
            shutdown: None,
            lease: None,
            readiness: Readiness::new(),
            manual_readiness: false,
        }
    }

    /// The `/readyz` state, for callers that mark readiness themselves.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// Leaves `/readyz` at 503 until the caller marks it ready (e.g. once its stores synced).
    ///
    /// By default the operator is ready as soon as its endpoints serve, because a standby
    /// replica waiting for the lease must be Ready too, or a rollout would wait on a lease the
    /// old leader still holds. Use this only when every replica can become ready by itself.
    #[must_use]
    pub fn with_manual_readiness(mut self) -> Self {
        self.manual_readiness = true;
        self
    }

    /// The registry, to register the operator's own metrics before running.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Uses this client instead of `Client::try_default()`.
    #[must_use]
    pub fn with_client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Uses this token instead of SIGTERM/SIGINT handlers (tests, embedding).
    #[must_use]
    pub fn with_shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// Overrides the whole lease configuration (timings, identity) when electing.
    #[must_use]
    pub fn with_lease(mut self, lease: LeaseConfig) -> Self {
        self.lease = Some(lease);
        self
    }

    fn lease_config(&self, client: &Client) -> LeaseConfig {
        if let Some(l) = &self.lease {
            return l.clone();
        }
        let name = self
            .flags
            .lease_name
            .clone()
            .unwrap_or_else(|| format!("{}-leader", self.name));
        let namespace = self
            .flags
            .lease_namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| client.default_namespace().to_owned());
        LeaseConfig::new(name, namespace)
    }

    /// Runs until shutdown, an error from `controllers`, or the loss of leadership.
    ///
    /// `controllers` should run its controllers until `RunContext::shutdown` is cancelled.
    pub async fn run<F, Fut>(self, controllers: F) -> anyhow::Result<()>
    where
        F: FnOnce(RunContext) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        telemetry::init(self.flags.log_format, self.flags.log_level.as_deref())?;
        let shutdown = match self.shutdown.clone() {
            Some(t) => t,
            None => shutdown::on_signals().context("installing signal handlers")?,
        };
        let client = match self.client.clone() {
            Some(c) => c,
            None => Client::try_default()
                .await
                .context("building the Kubernetes client")?,
        };
        let readiness = self.readiness.clone();
        let stop_server = CancellationToken::new();
        let f = &self.flags;
        let server = health::start(
            f.metrics_addr,
            f.probe_addr,
            self.metrics.clone(),
            readiness.clone(),
            stop_server.clone(),
        )
        .await
        .context("binding the metrics and probe addresses")?;
        if !self.manual_readiness {
            readiness.set_ready(true);
        }
        let ctx = RunContext {
            client: client.clone(),
            metrics: self.metrics.clone(),
            readiness,
            shutdown: shutdown.clone(),
            metrics_addr: server.metrics_addr(),
            probe_addr: server.probe_addr(),
        };
        tracing::info!(operator = %self.name, leader_elect = f.leader_elect, "starting");
        let result = if f.leader_elect {
            self.run_elected(client, ctx, controllers).await
        } else {
            controllers(ctx).await
        };
        stop_server.cancel();
        let served = server.wait().await.context("serving metrics and probes");
        result.and(served)
    }

    async fn run_elected<F, Fut>(
        &self,
        client: Client,
        ctx: RunContext,
        controllers: F,
    ) -> anyhow::Result<()>
    where
        F: FnOnce(RunContext) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let lease = self.lease_config(&client);
        tracing::info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity, "contending for leadership");
        let elector = LeaderElector::new(client, lease.clone());
        let mut leading = elector.subscribe();
        let metrics = self.metrics.clone();
        metrics.set_leader(&lease.name, false);
        let gauge = tokio::spawn(async move {
            while leading.changed().await.is_ok() {
                let now = *leading.borrow_and_update();
                metrics.set_leader(&lease.name, now);
            }
        });
        let shutdown = ctx.shutdown.clone();
        let outcome = run_while_leading(elector, shutdown, |token| {
            controllers(RunContext {
                shutdown: token,
                ..ctx
            })
        })
        .await;
        // The elector (the watch sender) is gone now, so the mirror ends after the last value.
        let _ = gauge.await;
        match outcome {
            Ok(Some(result)) => result,
            Ok(None) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use tokio::sync::oneshot;

    use super::*;
    use crate::{health::tests::get, telemetry::LogFormat};

    #[derive(Debug, thiserror::Error)]
    #[error("apply failed")]
    struct ApplyFailed;

    impl ReconcileError for ApplyFailed {
        fn category(&self) -> &'static str {
            "apply_failed"
        }
    }

    fn cm(name: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }

    /// Polls `cond` until it holds or 10 s pass.
    async fn eventually(what: &str, cond: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await; // polling a condition with a deadline
        }
    }

    #[test]
    fn results_are_classified_like_controller_runtime() {
        let ok: Result<Action, ApplyFailed> = Ok(Action::await_change());
        let later: Result<Action, ApplyFailed> = Ok(Action::requeue(Duration::from_secs(5)));
        let err: Result<Action, ApplyFailed> = Err(ApplyFailed);
        assert_eq!(classify(&ok), ReconcileResult::Success);
        assert_eq!(classify(&later), ReconcileResult::RequeueAfter);
        assert_eq!(classify(&err), ReconcileResult::Error);
    }

    #[tokio::test]
    async fn wrapped_reconcile_records_results_and_durations() {
        let m = Metrics::new();
        let mut wrapped = instrument(
            m.controller("configmap"),
            2,
            |obj: Arc<ConfigMap>, _ctx: Arc<()>| async move {
                match obj.name_any().as_str() {
                    "done" => Ok(Action::await_change()),
                    "wait" => Ok(Action::requeue(Duration::from_secs(30))),
                    _ => Err(ApplyFailed),
                }
            },
        );
        for name in ["done", "done", "wait", "broken"] {
            let _ = wrapped(cm(name), Arc::new(())).await;
        }
        let c = m.controller("configmap");
        assert_eq!(c.result_count(ReconcileResult::Success), 2);
        assert_eq!(c.result_count(ReconcileResult::RequeueAfter), 1);
        assert_eq!(c.result_count(ReconcileResult::Error), 1);
        let out = m.encode();
        assert!(
            out.contains(r#"controller_runtime_reconcile_errors_total{controller="configmap"} 1"#)
        );
        assert!(out.contains(
            r#"controller_runtime_reconcile_time_seconds_count{controller="configmap"} 4"#
        ));
        assert!(
            out.contains(
                r#"controller_runtime_max_concurrent_reconciles{controller="configmap"} 2"#
            )
        );
        assert!(out.contains(r#"workqueue_adds_total{name="configmap",controller="configmap"} 4"#));
        assert!(out.contains(r#"category="apply_failed"} 1"#));
    }

    #[tokio::test]
    async fn reconciles_beyond_the_limit_wait_in_the_queue() {
        let m = Metrics::new();
        let c = m.controller("configmap");
        let gates = Arc::new(std::sync::Mutex::new(Vec::<oneshot::Receiver<()>>::new()));
        let (first_tx, first_rx) = oneshot::channel();
        let (second_tx, second_rx) = oneshot::channel();
        gates.lock().expect("lock").extend([first_rx, second_rx]);
        let g = gates.clone();
        let mut wrapped = instrument(c.clone(), 1, move |_obj: Arc<ConfigMap>, _ctx: Arc<()>| {
            let gate = g.lock().expect("lock").remove(0);
            async move {
                let _ = gate.await;
                Ok::<_, ApplyFailed>(Action::await_change())
            }
        });
        let a = tokio::spawn(wrapped(cm("a"), Arc::new(())));
        let b = tokio::spawn(wrapped(cm("b"), Arc::new(())));
        eventually("one worker busy, one queued", || {
            c.active_workers() == 1 && c.queue_depth() == 1
        })
        .await;
        let _ = first_tx.send(());
        eventually("second picked up", || {
            c.queue_depth() == 0 && c.active_workers() == 1
        })
        .await;
        let _ = second_tx.send(());
        assert!(a.await.expect("join").is_ok());
        assert!(b.await.expect("join").is_ok());
        assert_eq!((c.active_workers(), c.queue_depth()), (0, 0));
        assert_eq!(c.result_count(ReconcileResult::Success), 2);
    }

    fn offline_client() -> Client {
        // Never contacted: these tests run without leader election.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("uri"));
        Client::try_from(config).expect("client")
    }

    fn local_flags() -> OperatorFlags {
        OperatorFlags {
            metrics_addr: "127.0.0.1:0".parse().expect("addr"),
            probe_addr: "127.0.0.1:0".parse().expect("addr"),
            leader_elect: false,
            lease_name: None,
            lease_namespace: None,
            log_format: LogFormat::Text,
            log_level: Some("error".into()),
        }
    }

    #[tokio::test]
    async fn operator_serves_endpoints_until_shutdown() {
        let token = CancellationToken::new();
        let (started_tx, started_rx) = oneshot::channel();
        let op = Operator::new("demo", local_flags())
            .with_client(offline_client())
            .with_shutdown(token.clone());
        let run = tokio::spawn(op.run(|ctx| async move {
            let _ = started_tx.send((ctx.readiness.is_ready(), ctx.probe_addr, ctx.metrics_addr));
            ctx.shutdown.cancelled().await;
            Ok(())
        }));
        let (ready, probe, metrics) = tokio::time::timeout(Duration::from_secs(10), started_rx)
            .await
            .expect("controllers started")
            .expect("context sent");
        assert!(ready, "a running operator reports ready");
        assert_eq!(get(probe, "/readyz").await.expect("get").0, 200);
        assert_eq!(get(metrics, "/metrics").await.expect("get").0, 200);
        assert_ne!(probe.port(), 0);
        assert_eq!(probe, metrics, "equal flag addresses share one listener");
        token.cancel();
        let done = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("stops after shutdown");
        done.expect("join").expect("clean exit");
        assert!(
            tokio::net::TcpStream::connect(probe).await.is_err(),
            "endpoints stopped"
        );
    }

    #[tokio::test]
    async fn manual_readiness_waits_for_the_caller() {
        let token = CancellationToken::new();
        let (addr_tx, addr_rx) = oneshot::channel();
        let op = Operator::new("demo", local_flags())
            .with_client(offline_client())
            .with_shutdown(token.clone())
            .with_manual_readiness();
        let readiness = op.readiness().clone();
        let run = tokio::spawn(op.run(|ctx| async move {
            let _ = addr_tx.send(ctx.probe_addr);
            ctx.shutdown.cancelled().await;
            Ok(())
        }));
        let probe = tokio::time::timeout(Duration::from_secs(10), addr_rx)
            .await
            .expect("controllers started")
            .expect("sent");
        assert_eq!(get(probe, "/readyz").await.expect("get").0, 503);
        readiness.set_ready(true);
        assert_eq!(get(probe, "/readyz").await.expect("get").0, 200);
        token.cancel();
        let done = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("stops");
        done.expect("join").expect("clean exit");
    }

    #[tokio::test]
    async fn controller_failure_is_the_operator_result() {
        let op = Operator::new("demo", local_flags())
            .with_client(offline_client())
            .with_shutdown(CancellationToken::new());
        let err = op
            .run(|_ctx| async { anyhow::bail!("watch failed") })
            .await
            .expect_err("error surfaces");
        assert!(err.to_string().contains("watch failed"));
    }

    #[tokio::test]
    async fn lease_defaults_to_operator_name_and_flag_namespace() {
        let mut flags = local_flags();
        flags.lease_namespace = Some("ops".into());
        let op = Operator::new("cocoon", flags);
        let l = op.lease_config(&offline_client());
        assert_eq!(
            (l.name.as_str(), l.namespace.as_str()),
            ("cocoon-leader", "ops")
        );
        assert!(l.validate().is_ok());
    }
}
