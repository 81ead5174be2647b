//! HTTP endpoints for the kubelet and Prometheus: `/healthz`, `/readyz` and `/metrics`.
//!
//! Contract:
//! - `/healthz` answers 200 while the process serves HTTP at all (liveness).
//! - `/readyz` answers 503 until [`Readiness::set_ready`] marks the operator ready (for
//!   example once its informers have synced), then 200; it can be marked unready again. It
//!   also answers 503 while any blocker is set ([`Readiness::block`], e.g. a watch the API
//!   server forbids), with the blockers' reasons in the body, and 200 again once every
//!   blocker is cleared.
//! - `/metrics` answers the text encoding of the shared [`Metrics`] registry.
//!
//! [`start`] binds the metrics and probe addresses before returning (so the bound ports are
//! known, port 0 included). When both addresses are equal one listener serves all three paths;
//! otherwise `/metrics` is on the metrics listener and the probes on the probe listener, as
//! controller-runtime's `METRICS_ADDR` / `PROBE_ADDR` split does. Cancelling the shutdown
//! token stops accepting connections and lets in-flight requests finish.

use std::{
    collections::BTreeMap,
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use tokio::{net::TcpListener, task::JoinSet};
use tokio_util::sync::CancellationToken;

use crate::metrics::{self, Metrics};

/// Whether the operator is ready to serve; shared between the probe server and the operator.
///
/// Ready means: marked ready ([`Readiness::set_ready`]) and no blocker set
/// ([`Readiness::block`]). Blockers are keyed, so independent problems (two forbidden
/// watches) are raised and cleared independently.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<ReadinessState>);

#[derive(Debug, Default)]
struct ReadinessState {
    ready: AtomicBool,
    blockers: Mutex<BTreeMap<String, String>>,
}

impl Readiness {
    /// Starts not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the operator ready (200 on /readyz, unless blocked) or not (503).
    pub fn set_ready(&self, ready: bool) {
        self.0.ready.store(ready, Ordering::Release);
    }

    /// The current readiness: marked ready and not blocked.
    pub fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::Acquire) && self.blockers_map().is_empty()
    }

    /// Holds readiness back for `key`, saying `why`; returns whether `key` was not blocked yet.
    pub fn block(&self, key: impl Into<String>, why: impl Into<String>) -> bool {
        self.blockers_map().insert(key.into(), why.into()).is_none()
    }

    /// Clears the blocker `key`; returns whether it was set.
    pub fn unblock(&self, key: &str) -> bool {
        self.blockers_map().remove(key).is_some()
    }

    /// Every blocker's reason, in key order.
    pub fn blockers(&self) -> Vec<String> {
        self.blockers_map().values().cloned().collect()
    }

    fn blockers_map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.0
            .blockers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(ready): State<Readiness>) -> (StatusCode, String) {
    if ready.is_ready() {
        return (StatusCode::OK, "ok".into());
    }
    let blockers = ready.blockers();
    let body = if blockers.is_empty() {
        "not ready".to_owned()
    } else {
        format!("not ready: {}", blockers.join("; "))
    };
    (StatusCode::SERVICE_UNAVAILABLE, body)
}

async fn render_metrics(State(m): State<Metrics>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], m.encode())
}

/// The `/healthz` and `/readyz` routes.
pub fn probe_router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(readiness)
}

/// The `/metrics` route.
pub fn metrics_router(metrics: Metrics) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(metrics)
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then drains in-flight requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// The running endpoint server(s), with the addresses actually bound.
#[derive(Debug)]
pub struct HealthServer {
    metrics_addr: SocketAddr,
    probe_addr: SocketAddr,
    tasks: JoinSet<io::Result<()>>,
}

impl HealthServer {
    /// Where `/metrics` is served.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Where `/healthz` and `/readyz` are served.
    pub fn probe_addr(&self) -> SocketAddr {
        self.probe_addr
    }

    /// Waits until every listener has stopped (after shutdown); returns the first error.
    pub async fn wait(mut self) -> io::Result<()> {
        let mut result = Ok(());
        while let Some(joined) = self.tasks.join_next().await {
            let outcome = joined.unwrap_or_else(|e| Err(io::Error::other(e)));
            if result.is_ok() {
                result = outcome;
            }
        }
        result
    }
}

/// Binds the metrics and probe addresses and serves them in background tasks.
pub async fn start(
    metrics_addr: SocketAddr,
    probe_addr: SocketAddr,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> io::Result<HealthServer> {
    let mut tasks = JoinSet::new();
    let metrics_listener = TcpListener::bind(metrics_addr).await?;
    let bound_metrics = metrics_listener.local_addr()?;
    let bound_probe = if metrics_addr == probe_addr {
        let all = metrics_router(metrics).merge(probe_router(readiness));
        tasks.spawn(serve(metrics_listener, all, shutdown));
        bound_metrics
    } else {
        let probe_listener = TcpListener::bind(probe_addr).await?;
        let bound = probe_listener.local_addr()?;
        tasks.spawn(serve(
            metrics_listener,
            metrics_router(metrics),
            shutdown.clone(),
        ));
        tasks.spawn(serve(probe_listener, probe_router(readiness), shutdown));
        bound
    };
    tracing::info!(metrics = %bound_metrics, probes = %bound_probe, "serving metrics and probes");
    Ok(HealthServer {
        metrics_addr: bound_metrics,
        probe_addr: bound_probe,
        tasks,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A plain HTTP/1.1 GET returning the status code and body (shared with other tests).
    pub(crate) async fn get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut raw = String::new();
        s.read_to_string(&mut raw).await?;
        let status = raw
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = raw
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((status, body))
    }

    fn local() -> SocketAddr {
        "127.0.0.1:0".parse().expect("addr")
    }

    #[tokio::test]
    async fn probes_follow_readiness_on_a_shared_listener() {
        let (ready, token) = (Readiness::new(), CancellationToken::new());
        let srv = start(
            local(),
            local(),
            Metrics::new(),
            ready.clone(),
            token.clone(),
        )
        .await
        .expect("start");
        let addr = srv.probe_addr();
        assert_eq!(srv.metrics_addr(), addr);
        assert_eq!(get(addr, "/healthz").await.expect("get").0, 200);
        assert_eq!(get(addr, "/readyz").await.expect("get").0, 503);
        ready.set_ready(true);
        assert_eq!(get(addr, "/readyz").await.expect("get").0, 200);
        ready.set_ready(false);
        assert_eq!(get(addr, "/readyz").await.expect("get").0, 503);
        assert_eq!(get(addr, "/nope").await.expect("get").0, 404);
        // A blocker wins over set_ready and names itself; each clears independently.
        ready.set_ready(true);
        assert!(ready.block("a", "watch of services forbidden"));
        assert!(!ready.block("a", "watch of services forbidden"));
        assert!(ready.block("b", "watch of jobs forbidden"));
        let (code, body) = get(addr, "/readyz").await.expect("get");
        assert_eq!(code, 503);
        assert!(
            body.contains("services forbidden") && body.contains("jobs forbidden"),
            "{body}"
        );
        assert!(ready.unblock("a"));
        assert!(!ready.is_ready());
        assert!(ready.unblock("b") && !ready.unblock("b"));
        assert_eq!(get(addr, "/readyz").await.expect("get").0, 200);
        token.cancel();
        tokio::time::timeout(Duration::from_secs(10), srv.wait())
            .await
            .expect("server stops after shutdown")
            .expect("clean stop");
        assert!(
            get(addr, "/healthz").await.is_err(),
            "listener closed after shutdown"
        );
    }

    #[tokio::test]
    async fn separate_listeners_split_metrics_from_probes() {
        let metrics = Metrics::new();
        metrics.controller("widget");
        let token = CancellationToken::new();
        let probe: SocketAddr = "127.0.0.2:0".parse().expect("addr");
        let srv = start(local(), probe, metrics, Readiness::new(), token.clone())
            .await
            .expect("start");
        assert_ne!(srv.metrics_addr(), srv.probe_addr());
        let (code, body) = get(srv.metrics_addr(), "/metrics").await.expect("get");
        assert_eq!(code, 200);
        assert!(body.contains("controller_runtime_reconcile_total{controller=\"widget\""));
        assert_eq!(
            get(srv.metrics_addr(), "/healthz").await.expect("get").0,
            404
        );
        assert_eq!(get(srv.probe_addr(), "/healthz").await.expect("get").0, 200);
        assert_eq!(get(srv.probe_addr(), "/metrics").await.expect("get").0, 404);
        token.cancel();
        tokio::time::timeout(Duration::from_secs(10), srv.wait())
            .await
            .expect("server stops after shutdown")
            .expect("clean stop");
    }
}
