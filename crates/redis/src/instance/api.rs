//! The instance manager's HTTPS API (the contract is [`crate::instance_api`]).
//!
//! Contract:
//! - Served over TLS on the pod IP with the certificate projected at
//!   [`crate::instance_api::TLS_MOUNT`] (reloaded when the files change).
//! - `/healthz`, `/readyz`, `/metrics` answer anyone (the kubelet, scrapers) and change
//!   nothing. `/healthz` fails only for an isolated primary (the API server and every peer
//!   unreachable within `spec.primaryIsolation`'s timeouts, so the probe is bounded by them);
//!   a waiting or fenced instance stays live. `/readyz` is ready only when redis-server runs,
//!   is not fenced, answers, is not loading, and — on a replica — has its link to the primary
//!   up and no full sync in progress; otherwise 503 with the reason.
//! - Every `/v1/*` request must carry `Authorization: Bearer <token>` matching the projected
//!   token (re-read per request, compared in constant time; a missing or empty token file
//!   refuses everything) — else 401 before anything else is looked at — and the API version
//!   header, else 409. Answers carry the version header.
//! - Promote, demote and switchover hold the role lock, so they never interleave with each
//!   other or with the loop, and leave a [`Hold`] so the loop does not undo them on a stale
//!   view.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use super::decide::Hold;
use super::info::Info;
use super::local::Switchover;
use super::manager::Instance;
use super::metrics::{self, Identity};
use crate::https::{self, CertStore};
use crate::instance_api::{
    self, API_VERSION, Boot, CommandResult, DemoteRequest, InstanceReport, PromoteRequest,
    SwitchoverRequest, VERSION_HEADER,
};
use crate::names;

fn read_pair(inst: &Instance) -> anyhow::Result<(String, String)> {
    let dir = &inst.settings.api_tls_dir;
    let r = |k: &str| {
        std::fs::read_to_string(dir.join(k))
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", dir.join(k).display()))
    };
    Ok((r(names::KEY_TLS_CRT)?, r(names::KEY_TLS_KEY)?))
}

/// Serves the API on the pod IP until `stop`; returns once listening.
pub async fn serve(
    inst: Arc<Instance>,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let (crt, key) = read_pair(&inst)?;
    let store = match inst.certs.get() {
        Some(s) => {
            s.set(&crt, &key)?;
            s.clone()
        }
        None => {
            let s = Arc::new(CertStore::new(&crt, &key)?);
            let _ = inst.certs.set(s.clone());
            s
        }
    };
    let listener = tokio::net::TcpListener::bind(inst.settings.http_addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding the API address {}: {e}", inst.settings.http_addr))?;
    let config = https::tls_config(store)?;
    tracing::info!(addr = %inst.settings.http_addr, "serving the instance API");
    Ok(tokio::spawn(https::serve(
        listener,
        router(inst),
        config,
        stop,
    )))
}

/// Serves the certificate now projected (called when the files change).
pub fn reload_cert(inst: &Instance) {
    let Some(store) = inst.certs.get() else {
        return;
    };
    match read_pair(inst).and_then(|(c, k)| Ok(store.set(&c, &k)?)) {
        Ok(()) => tracing::info!("serving the renewed instance API certificate"),
        Err(e) => {
            tracing::warn!(error = %e, "the renewed instance API certificate is unusable; keeping the old one")
        }
    }
}

/// The routes.
pub fn router(inst: Arc<Instance>) -> Router {
    let v1 = Router::new()
        .route(names::PATH_STATUS, get(status))
        .route(names::PATH_PROMOTE, post(promote))
        .route(names::PATH_DEMOTE, post(demote))
        .route(names::PATH_SWITCHOVER, post(switchover))
        .route(names::PATH_BACKUP, post(super::backup::start))
        .route(
            &format!("{}/{{id}}", names::PATH_BACKUP),
            get(backup_status).delete(super::backup::delete),
        )
        .layer(middleware::from_fn_with_state(inst.clone(), authenticate));
    Router::new()
        .route(names::PATH_HEALTHZ, get(healthz))
        .route(names::PATH_READYZ, get(readyz))
        .route(names::PATH_METRICS, get(metrics))
        .merge(v1)
        .with_state(inst)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `header` (an `Authorization` value) carries the token in `token_file`.
pub fn token_matches(header: Option<&str>, token_file: Option<&str>) -> bool {
    let Some(expected) = token_file.map(str::trim).filter(|t| !t.is_empty()) else {
        return false;
    };
    let Some(given) = header
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
    else {
        return false;
    };
    constant_time_eq(given.as_bytes(), expected.as_bytes())
}

async fn authenticate(State(inst): State<Arc<Instance>>, req: Request, next: Next) -> Response {
    guard(&inst.settings.token_dir, req, next).await
}

/// The `/v1` gate (see the module contract) of a server whose token is projected under
/// `token_dir`: the data pods' API and the Sentinel pods' `/v1/status`.
pub async fn guard(token_dir: &std::path::Path, req: Request, next: Next) -> Response {
    let token = std::fs::read_to_string(token_dir.join(instance_api::TOKEN_KEY)).ok();
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let mut resp = if !token_matches(header, token.as_deref()) {
        (StatusCode::UNAUTHORIZED, "a valid bearer token is required").into_response()
    } else {
        match req
            .headers()
            .get(VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            Some(API_VERSION) => next.run(req).await,
            other => {
                let msg = format!(
                    "instance API version mismatch: this instance speaks {API_VERSION:?}, the request says {:?}",
                    other.unwrap_or("nothing")
                );
                command(StatusCode::CONFLICT, false, msg)
            }
        }
    };
    resp.headers_mut()
        .insert(VERSION_HEADER, HeaderValue::from_static(API_VERSION));
    resp
}

fn command(code: StatusCode, done: bool, message: String) -> Response {
    (code, Json(CommandResult { done, message })).into_response()
}

async fn healthz(State(inst): State<Arc<Instance>>) -> Response {
    let st = inst.state();
    if st.boot != Boot::Running || !st.isolation.enabled {
        return (StatusCode::OK, "ok").into_response();
    }
    let is_primary = matches!(inst.local.info("replication").await, Ok(i) if i.is_master());
    if !is_primary {
        return (StatusCode::OK, "ok").into_response();
    }
    let api = inst.read_cluster(st.isolation.api_timeout).await;
    let Err(api_err) = api else {
        return (StatusCode::OK, "ok").into_response();
    };
    if st.peers.is_empty() {
        tracing::info!(error = %api_err, "primary isolation check: API unreachable and no peers known; not failing");
        return (StatusCode::OK, "ok").into_response();
    }
    let checks = st.peers.iter().map(|ip| {
        let d = inst.dialer.clone();
        let t = st.isolation.peer_timeout;
        let ip = ip.clone();
        Box::pin(async move { d.status(&ip, t).await })
    });
    let any = tokio::time::timeout(
        st.isolation.peer_timeout + Duration::from_millis(500),
        futures::future::select_ok(checks),
    )
    .await;
    if matches!(any, Ok(Ok(_))) {
        return (StatusCode::OK, "ok").into_response();
    }
    tracing::warn!(error = %api_err, "primary isolated: cannot reach the API server or any peer");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "primary isolated: cannot reach API server or any peer",
    )
        .into_response()
}

/// Why an instance is not ready, or `None` when it is (pure).
pub fn not_ready(boot: &Boot, fenced: bool, info: Result<&Info, String>) -> Option<String> {
    match boot {
        Boot::Waiting { reason } => return Some(format!("redis-server is not running: {reason}")),
        Boot::Stopping => return Some("redis-server is stopping".into()),
        Boot::Running => {}
    }
    if fenced {
        return Some("fenced".into());
    }
    let info = match info {
        Ok(i) => i,
        Err(e) => return Some(format!("redis not ready: {e}")),
    };
    if info.int("loading") == 1 {
        return Some("redis is loading its dataset".into());
    }
    if info.is_master() {
        return None;
    }
    if !info.link_up() {
        return Some("the link to the primary is down".into());
    }
    if info.int("master_sync_in_progress") == 1 {
        return Some("a full synchronisation from the primary is in progress".into());
    }
    None
}

async fn readyz(State(inst): State<Arc<Instance>>) -> Response {
    let st = inst.state();
    let info = match &st.boot {
        Boot::Running => inst.local.info("all").await.map_err(|e| e.to_string()),
        _ => Err(String::new()),
    };
    match not_ready(&st.boot, st.fenced, info.as_ref().map_err(Clone::clone)) {
        None => (StatusCode::OK, "ok").into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

async fn metrics(State(inst): State<Arc<Instance>>) -> Response {
    let st = inst.state();
    let info = match st.boot {
        Boot::Running => inst.local.info("all").await.ok(),
        _ => None,
    };
    let s = &inst.settings;
    let id = Identity {
        namespace: s.namespace.clone(),
        cluster: s.cluster.clone(),
        pod: s.pod.clone(),
    };
    let mut r = metrics::render(&id, info.as_ref(), st.fenced).into_response();
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// The status report from the manager's state and `INFO` (pure).
pub fn report(pod: &str, st: &super::manager::State, info: Option<&Info>) -> InstanceReport {
    let mut r = InstanceReport {
        pod: pod.to_owned(),
        boot: st.boot.clone(),
        fenced: st.fenced,
        role: String::new(),
        replication_id: String::new(),
        replication_id2: String::new(),
        replication_offset: 0,
        connected_replicas: 0,
        replicas: Vec::new(),
        master_host: String::new(),
        master_port: 0,
        master_link_status: String::new(),
        master_sync_in_progress: false,
        master_link_down_since_seconds: 0,
        min_replicas_to_write: st.min_replicas_to_write,
        writes_refused: false,
        auth_generation: st.generation.clone(),
    };
    let Some(i) = info else {
        return r;
    };
    r.role = i.role().to_owned();
    r.replication_id = i.get("master_replid").to_owned();
    r.replication_id2 = i.get("master_replid2").to_owned();
    r.replication_offset = i.offset();
    if i.is_master() {
        r.connected_replicas = i32::try_from(i.int("connected_slaves")).unwrap_or(0);
        r.replicas = i.replicas();
        let good =
            i.0.get("min_slaves_good_slaves")
                .and_then(|v| v.parse::<i64>().ok());
        r.writes_refused = st.min_replicas_to_write > 0
            && good.is_some_and(|g| g < i64::from(st.min_replicas_to_write));
    } else {
        if let Some((h, p)) = i.master() {
            r.master_host = h;
            r.master_port = p;
        }
        r.master_link_status = i.get("master_link_status").to_owned();
        r.master_sync_in_progress = i.int("master_sync_in_progress") == 1;
        r.master_link_down_since_seconds = i.int("master_link_down_since_seconds");
    }
    r
}

async fn status(State(inst): State<Arc<Instance>>) -> Response {
    let st = inst.state();
    let info = match st.boot {
        Boot::Running => match inst.local.info("replication").await {
            Ok(i) => Some(i),
            Err(e) => {
                return command(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    false,
                    format!("INFO replication: {e}"),
                );
            }
        },
        _ => None,
    };
    Json(report(&inst.settings.pod, &st, info.as_ref())).into_response()
}

/// Whether a promotion may proceed (pure): `Ok(true)` to run it, `Ok(false)` when already
/// done, `Err` with the reason to refuse.
pub fn promote_check(info: &Info, req: &PromoteRequest) -> Result<bool, String> {
    let id = info.get("master_replid");
    if info.is_master() {
        if id == req.expected_replication_id
            || info.get("master_replid2") == req.expected_replication_id
        {
            return Ok(false);
        }
        return Err(format!(
            "already a primary, but of replication ID {id}, not a promotion from {}",
            req.expected_replication_id
        ));
    }
    if id != req.expected_replication_id {
        return Err(format!(
            "replication ID is {id}, not {}: this replica re-synchronised since it was chosen",
            req.expected_replication_id
        ));
    }
    if info.offset() < req.min_offset {
        return Err(format!(
            "offset {} is behind the required {}",
            info.offset(),
            req.min_offset
        ));
    }
    Ok(true)
}

async fn running_info(inst: &Instance) -> Result<Info, Response> {
    let st = inst.state();
    if st.fenced {
        return Err(command(StatusCode::CONFLICT, false, "fenced".into()));
    }
    if st.boot != Boot::Running {
        return Err(command(
            StatusCode::CONFLICT,
            false,
            format!("redis-server is not running ({:?})", st.boot),
        ));
    }
    inst.local.info("replication").await.map_err(|e| {
        command(
            StatusCode::INTERNAL_SERVER_ERROR,
            false,
            format!("INFO replication: {e}"),
        )
    })
}

async fn promote(
    State(inst): State<Arc<Instance>>,
    body: Result<Json<PromoteRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let req = match body {
        Ok(Json(r)) => r,
        Err(e) => {
            return command(
                StatusCode::BAD_REQUEST,
                false,
                format!("the body must be a PromoteRequest: {e}"),
            );
        }
    };
    let _role = inst.role_lock.lock().await;
    let info = match running_info(&inst).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    match promote_check(&info, &req) {
        Err(why) => command(StatusCode::CONFLICT, false, why),
        Ok(false) => {
            inst.update(|s| s.hold = Some(Hold::Primary));
            command(StatusCode::OK, true, "already primary".into())
        }
        Ok(true) => match inst.local.promote().await {
            Ok(()) => {
                inst.update(|s| s.hold = Some(Hold::Primary));
                tracing::info!(expected = %req.expected_replication_id, "promoted to primary by the operator");
                command(StatusCode::OK, true, "promoted".into())
            }
            Err(e) => command(
                StatusCode::INTERNAL_SERVER_ERROR,
                false,
                format!("REPLICAOF NO ONE: {e}"),
            ),
        },
    }
}

async fn demote(
    State(inst): State<Arc<Instance>>,
    body: Result<Json<DemoteRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let req = match body {
        Ok(Json(r)) => r,
        Err(e) => {
            return command(
                StatusCode::BAD_REQUEST,
                false,
                format!("the body must be a DemoteRequest: {e}"),
            );
        }
    };
    if req.primary_ip.parse::<std::net::IpAddr>().is_err() || req.primary_port == 0 {
        return command(
            StatusCode::BAD_REQUEST,
            false,
            "primaryIP must be an IP and primaryPort not 0".into(),
        );
    }
    let _role = inst.role_lock.lock().await;
    let info = match running_info(&inst).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    if info.master() == Some((req.primary_ip.clone(), req.primary_port)) {
        inst.update(|s| s.hold = Some(Hold::Replica));
        return command(
            StatusCode::OK,
            true,
            "already a replica of that primary".into(),
        );
    }
    match inst
        .local
        .follow(&req.primary_ip, req.primary_port, info.is_master())
        .await
    {
        Ok(killed) => {
            inst.update(|s| s.hold = Some(Hold::Replica));
            tracing::info!(primary = %req.primary_ip, killed, "demoted by the operator");
            command(
                StatusCode::OK,
                true,
                format!(
                    "following {}:{}; {killed} clients disconnected",
                    req.primary_ip, req.primary_port
                ),
            )
        }
        Err(e) => command(
            StatusCode::INTERNAL_SERVER_ERROR,
            false,
            format!("REPLICAOF: {e}"),
        ),
    }
}

async fn switchover(
    State(inst): State<Arc<Instance>>,
    body: Result<Json<SwitchoverRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let req = match body {
        Ok(Json(r)) => r,
        Err(e) => {
            return command(
                StatusCode::BAD_REQUEST,
                false,
                format!("the body must be a SwitchoverRequest: {e}"),
            );
        }
    };
    if req.target_ip.parse::<std::net::IpAddr>().is_err()
        || req.target_port == 0
        || req.timeout_ms == 0
    {
        return command(
            StatusCode::BAD_REQUEST,
            false,
            "targetIP must be an IP, targetPort and timeoutMs not 0".into(),
        );
    }
    let _role = inst.role_lock.lock().await;
    let info = match running_info(&inst).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    if !info.is_master() && info.master() != Some((req.target_ip.clone(), req.target_port)) {
        return command(StatusCode::CONFLICT, false, "not a primary".into());
    }
    match inst
        .local
        .switchover(
            &req.target_ip,
            req.target_port,
            Duration::from_millis(req.timeout_ms),
        )
        .await
    {
        Ok(Switchover::Done) | Ok(Switchover::Already) => {
            inst.update(|s| s.hold = Some(Hold::Replica));
            tracing::info!(target = %req.target_ip, "switched over by the operator");
            command(
                StatusCode::OK,
                true,
                format!(
                    "{}:{} is the primary; this instance follows it",
                    req.target_ip, req.target_port
                ),
            )
        }
        Ok(Switchover::Abandoned(why)) => command(StatusCode::CONFLICT, false, why),
        Err(super::resp::RespError::Server(e)) => command(
            StatusCode::CONFLICT,
            false,
            format!("FAILOVER refused: {e}"),
        ),
        Err(e) => command(
            StatusCode::INTERNAL_SERVER_ERROR,
            false,
            format!("FAILOVER: {e}"),
        ),
    }
}

async fn backup_status(State(inst): State<Arc<Instance>>, Path(id): Path<String>) -> Response {
    match inst.backups.get(&id) {
        Some(r) => Json(r).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("no backup {id:?} on this instance"),
        )
            .into_response(),
    }
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
