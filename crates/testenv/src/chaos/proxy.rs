//! A fault-injecting proxy in front of the local plane's API server, or of any API server of
//! the test environment ([`Upstream`]: the plane, or one of the spaces of `testenv::spaces`).
//!
//! Contract:
//! - [`FaultProxy::start`] listens on 127.0.0.1 (a free port) with the API server's own serving
//!   certificate, so a client that trusts the plane trusts the proxy: the operator under test
//!   gets a kubeconfig that differs from the plane's only in the port ([`FaultProxy::kubeconfig`])
//!   and cannot tell the proxy is there. [`FaultProxy::start_in_front_of`] does the same for
//!   another [`Upstream`] (a space's API server, with the spaces' own CA and serving
//!   certificate). Requests are forwarded over TLS to the API server with
//!   their own credentials (a bearer token passes through; client certificates cannot, so use a
//!   ServiceAccount token, as operator tests do anyway).
//! - Each request is numbered in arrival order and gets the fault [`Plan::decide`] gives it.
//!   Every fault is logged (tracing, target `testenv::chaos`) with the seed, the number, the
//!   method and the path, and kept in [`FaultProxy::log`]; [`FaultProxy::counts`] sums them
//!   by kind.
//! - Faults: error statuses are answered as the API server would (a `Status` JSON body, a
//!   `Retry-After` header on 429); a reset closes the connection with no answer, before
//!   forwarding or after the API server answered a write; a cut watch ends with a broken
//!   stream; `Gone` answers a resumed watch with the ERROR event the API server sends for an
//!   expired resourceVersion.
//! - [`FaultProxy::set_rates`] changes the rates of a running proxy (a scenario can stop
//!   injecting before it checks convergence); [`FaultProxy::last_fault`] says when the last
//!   injected fault took effect (a cut watch counts at the moment it is cut).
//! - [`FaultProxy::traffic`] counts every request by class (reads, writes, watches), faulted
//!   or not, so a scenario can bound the operator's request rate (a hot loop shows there).
//! - Every request is also counted by verb and resource ([`FaultProxy::request_counts`]), so a
//!   benchmark can count what an operator running as its own process asks of the API server
//!   (with [`Rates::none`] the proxy only forwards and counts).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::plan::{Class, Fault, Plan, Rates, classify};
use crate::plane;

type Body = BoxBody<Bytes, std::io::Error>;
type UpstreamClient = HttpClient<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Incoming,
>;

/// One injected fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRecord {
    /// The request's number.
    pub n: u64,
    /// When it took effect, since the proxy started (a cut watch: when it is cut).
    pub at: Duration,
    /// The fault's name ([`Fault::name`]).
    pub fault: &'static str,
    /// `METHOD path?query`.
    pub request: String,
}

/// Requests seen, by class (faulted or not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    /// GET and LIST.
    pub reads: u64,
    /// POST, PUT, PATCH, DELETE.
    pub writes: u64,
    /// Watches, new and resumed.
    pub watches: u64,
}

impl Traffic {
    /// Reads and writes: the requests a reconcile makes (watches are long-lived streams).
    pub fn calls(&self) -> u64 {
        self.reads + self.writes
    }
}

struct Shared {
    plan: Mutex<Plan>,
    journal: Mutex<Option<std::fs::File>>,
    next: AtomicU64,
    started: tokio::time::Instant,
    reads: AtomicU64,
    writes: AtomicU64,
    watches: AtomicU64,
    log: Mutex<Vec<FaultRecord>>,
    counts: crate::RequestCounts,
    upstream: UpstreamClient,
    api: String,
}

/// An API server a proxy can stand in front of: its URL and the PKI directory
/// (`testenv::pki` layout) holding the CA its clients trust (`ca.crt`) and its serving
/// certificate and key (`apiserver.crt`, `apiserver.key`), which the proxy presents too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The PKI directory.
    pub pki: PathBuf,
}

impl Upstream {
    /// The running plane's API server.
    pub fn plane() -> anyhow::Result<Self> {
        let state = plane::read_state().ok_or_else(|| anyhow::anyhow!("no local plane"))?;
        Ok(Self {
            url: format!("https://127.0.0.1:{}", state.api_port),
            pki: plane::plane_dir().join("pki"),
        })
    }

    /// The API server of space `name` of the running topology (`testenv::spaces`).
    pub fn space(name: &str) -> anyhow::Result<Self> {
        let state = crate::spaces::read_state().ok_or_else(|| anyhow::anyhow!("no spaces"))?;
        let space = state
            .space(name)
            .ok_or_else(|| anyhow::anyhow!("no space {name:?}"))?;
        Ok(Self {
            url: format!("https://127.0.0.1:{}", space.api_port),
            pki: crate::spaces::spaces_dir().join("pki"),
        })
    }
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    ca: PathBuf,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FaultProxy {
    /// Starts a proxy in front of the running plane's API server with `plan`.
    pub async fn start(plan: Plan) -> anyhow::Result<Self> {
        Self::start_in_front_of(plan, &Upstream::plane()?).await
    }

    /// Starts a proxy in front of `upstream` with `plan`.
    pub async fn start_in_front_of(plan: Plan, upstream: &Upstream) -> anyhow::Result<Self> {
        let pki = &upstream.pki;
        let tls = server_tls(&pki.join("apiserver.crt"), &pki.join("apiserver.key"))?;
        let client = upstream_client(&pki.join("ca.crt"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tracing::info!(target: "testenv::chaos", seed = plan.seed, %addr, upstream = %upstream.url, "fault proxy listening");
        let shared = Arc::new(Shared {
            plan: Mutex::new(plan),
            journal: Mutex::new(None),
            next: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            started: tokio::time::Instant::now(),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            counts: crate::RequestCounts::default(),
            upstream: client,
            api: upstream.url.clone(),
        });
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, tls, shared.clone(), stop.clone()));
        Ok(Self {
            addr,
            shared,
            stop,
            ca: pki.join("ca.crt"),
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// A kubeconfig for `token` pointing at the proxy (trusting its upstream's CA), written to
    /// `path` (mode 0600).
    pub fn kubeconfig(&self, path: &Path, token: &str, namespace: &str) -> anyhow::Result<()> {
        let ca = self.ca.display().to_string();
        crate::identity::write_kubeconfig_with_ca(path, &self.url(), &ca, token, namespace)
    }

    /// From now on, writes a line to `path` as each request arrives (`> #n METHOD path`) and
    /// as its answer starts (`< #n status in ms`, or `reset`), with the time since the proxy
    /// started: a hung request is one without its `<` line.
    pub fn journal_to(&self, path: &Path) -> anyhow::Result<()> {
        let f = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)?;
        *lock(&self.shared.journal) = Some(f);
        Ok(())
    }

    /// Replaces the fault rates (the seed and the numbering go on).
    pub fn set_rates(&self, rates: Rates) {
        lock(&self.shared.plan).rates = rates;
    }

    /// Every fault injected so far, in order.
    pub fn log(&self) -> Vec<FaultRecord> {
        lock(&self.shared.log).clone()
    }

    /// Faults injected so far, by kind.
    pub fn counts(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let mut m = std::collections::BTreeMap::new();
        for r in lock(&self.shared.log).iter() {
            *m.entry(r.fault).or_default() += 1;
        }
        m
    }

    /// Requests seen so far.
    pub fn requests(&self) -> u64 {
        self.shared.next.load(Ordering::Relaxed)
    }

    /// Requests seen so far by verb and resource; resetting it starts a new count.
    pub fn request_counts(&self) -> crate::RequestCounts {
        self.shared.counts.clone()
    }

    /// Requests seen so far, by class.
    pub fn traffic(&self) -> Traffic {
        Traffic {
            reads: self.shared.reads.load(Ordering::Relaxed),
            writes: self.shared.writes.load(Ordering::Relaxed),
            watches: self.shared.watches.load(Ordering::Relaxed),
        }
    }

    /// Time since the proxy started (the clock of [`FaultRecord::at`]).
    pub fn elapsed(&self) -> Duration {
        self.shared.started.elapsed()
    }

    /// When the last fault took effect (since the proxy started), if any; a watch that is
    /// still to be cut counts at its cut.
    pub fn last_fault(&self) -> Option<Duration> {
        lock(&self.shared.log).iter().map(|r| r.at).max()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn server_tls(cert: &Path, key: &Path) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

fn upstream_client(ca: &Path) -> anyhow::Result<UpstreamClient> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca)? {
        roots.add(c?)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    Ok(HttpClient::builder(TokioExecutor::new()).build(https))
}

async fn serve(
    listener: TcpListener,
    tls: tokio_rustls::TlsAcceptor,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((tcp, _)) = accepted else { continue };
        let (tls, shared, stop) = (tls.clone(), shared.clone(), stop.clone());
        tokio::spawn(async move {
            let Ok(stream) = tls.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = conn => {}
            }
        });
    }
}

/// Why a connection is dropped on purpose.
#[derive(Debug, thiserror::Error)]
#[error("fault injected: connection reset")]
struct Reset;

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Reset> {
    let n = shared.next.fetch_add(1, Ordering::Relaxed);
    shared.counts.record_request(req.method(), req.uri());
    let began = shared.started.elapsed();
    let what = format!(
        "{} {}",
        req.method(),
        req.uri().path_and_query().map_or("/", |p| p.as_str())
    );
    journal(
        &shared,
        format_args!("{:9.3} > #{n} {what}", began.as_secs_f64()),
    );
    let result = respond(&shared, req, n).await;
    let outcome = match &result {
        Ok(r) => r.status().as_u16().to_string(),
        Err(_) => "reset".to_owned(),
    };
    let took = shared.started.elapsed() - began;
    journal(
        &shared,
        format_args!(
            "{:9.3} < #{n} {outcome} in {} ms",
            shared.started.elapsed().as_secs_f64(),
            took.as_millis()
        ),
    );
    result
}

fn journal(shared: &Shared, line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    if let Some(f) = lock(&shared.journal).as_mut() {
        let _ = writeln!(f, "{line}");
    }
}

async fn respond(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    n: u64,
) -> Result<Response<Body>, Reset> {
    let class = classify(req.method(), req.uri().query());
    let counter = match class {
        Class::Read => &shared.reads,
        Class::Write => &shared.writes,
        Class::Watch | Class::WatchResume => &shared.watches,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let (fault, seed) = {
        let plan = lock(&shared.plan);
        (plan.decide(n, class), plan.seed)
    };
    let described = format!(
        "{} {}",
        req.method(),
        req.uri().path_and_query().map_or("/", |p| p.as_str())
    );
    if fault != Fault::None {
        tracing::info!(target: "testenv::chaos", seed, n, fault = fault.name(), request = %described, "injecting");
        let mut at = shared.started.elapsed();
        if let Fault::CutWatch(after) = fault {
            at += after;
        }
        lock(&shared.log).push(FaultRecord {
            n,
            at,
            fault: fault.name(),
            request: described,
        });
    }
    match fault {
        Fault::Conflict => Ok(status(
            StatusCode::CONFLICT,
            "Conflict",
            "the object has been modified; please apply your changes to the latest version and try again",
            None,
        )),
        Fault::Throttle(after) => Ok(status(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "too many requests, please try again later",
            Some(after),
        )),
        Fault::ServerError => Ok(status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "an error on the server (\"injected\") has prevented the request from succeeding",
            None,
        )),
        Fault::Unavailable => Ok(status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            None,
        )),
        Fault::ResetBefore => Err(Reset),
        Fault::Gone => Ok(gone(class)),
        Fault::Latency(d) => {
            tokio::time::sleep(d).await;
            forward(shared, req, None).await
        }
        Fault::ResetAfter => {
            // The write reaches the API server; its answer never reaches the client.
            let _ = forward(shared, req, None).await;
            Err(Reset)
        }
        Fault::CutWatch(after) => forward(shared, req, Some(after)).await,
        Fault::None => forward(shared, req, None).await,
    }
}

async fn forward(
    shared: &Shared,
    req: Request<Incoming>,
    cut_after: Option<Duration>,
) -> Result<Response<Body>, Reset> {
    let (mut parts, body) = req.into_parts();
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{}{pq}", shared.api).parse().map_err(|_| Reset)?;
    parts.headers.remove(http::header::HOST);
    let upstream = shared
        .upstream
        .request(Request::from_parts(parts, body))
        .await
        .map_err(|_| Reset)?;
    let (parts, body) = upstream.into_parts();
    let body = body.map_err(std::io::Error::other);
    let body: Body = match cut_after {
        None => body.boxed(),
        Some(after) => {
            let deadline = tokio::time::Instant::now() + after;
            let frames = body.into_data_stream().map(|r| r.map(Frame::data));
            let cut = futures::stream::once(async move {
                tokio::time::sleep_until(deadline).await;
                Err(std::io::Error::other("fault injected: watch cut"))
            });
            // Frames until the deadline, then the error that breaks the stream.
            let stream = frames
                .take_until(tokio::time::sleep_until(deadline))
                .chain(cut);
            BodyExt::boxed(StreamBody::new(stream))
        }
    };
    Ok(Response::from_parts(parts, body))
}

fn full(body: Bytes) -> Body {
    Full::new(body)
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn status(
    code: StatusCode,
    reason: &str,
    message: &str,
    retry_after: Option<u64>,
) -> Response<Body> {
    let mut details = serde_json::json!({});
    if let Some(s) = retry_after {
        details = serde_json::json!({"retryAfterSeconds": s});
    }
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason,
        "details": details, "code": code.as_u16(),
    });
    let mut resp = Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(s) = retry_after {
        resp = resp.header(http::header::RETRY_AFTER, s.to_string());
    }
    resp.body(full(Bytes::from(body.to_string())))
        .expect("a static response builds")
}

fn gone(_class: Class) -> Response<Body> {
    let event = serde_json::json!({
        "type": "ERROR",
        "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "too old resource version: injected",
            "reason": "Expired", "code": 410,
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(full(Bytes::from(format!("{event}\n"))))
        .expect("a static response builds")
}
