//! The instance manager of a Sentinel pod (`redis-operator instance --role=sentinel`): PID 1
//! of the `sentinel` container, around a Redis Sentinel child.
//!
//! Contract:
//! - Before the first start it needs a master to monitor: what the other Sentinels already
//!   agree on (a data pod of this cluster), else `status.currentPrimary`'s pod IP; while
//!   neither is known it waits, stays up and says why on `/readyz`.
//! - `sentinel.conf` ([`crate::sentinel::conf`]) is written into the pod's emptyDir only when
//!   it is not there: after a container restart Sentinel keeps the state it wrote itself
//!   (epochs, the master after a failover, the known Sentinels and replicas).
//! - Sentinel runs as `redis-sentinel <conf>` (argv[0] `redis-sentinel`, Debian's and the
//!   image's way; `--redis-server` names the executable), bound to the pod IP on 26379. When
//!   the cluster has TLS (`tlsSecret` and `caSecret`, projected at `/tls`), that port speaks
//!   only TLS and the Sentinel speaks TLS to the data pods and its peers; the manager's own
//!   connections to Sentinels (readiness, seeding) then use TLS with the projected CA.
//! - Every `--resync` seconds: a changed password is given to Sentinel (`SENTINEL SET
//!   <cluster> auth-pass`) once every data pod accepts it (the data pods take a rotated
//!   password alongside the old one, and retire the old one only once every Sentinel pod
//!   reports the new one's generation on `/v1/status`); changed TLS files restart Sentinel (it reads them only at start;
//!   its state in `sentinel.conf` is kept); Sentinel exiting by itself ends the manager with
//!   an error (the container restarts); SIGTERM stops it (SIGTERM, SIGKILL after
//!   `--shutdown-grace`).
//! - HTTPS on the pod IP:8080 with the instance API's certificate: `/healthz` (200 while
//!   the manager runs), `/readyz` (200 when Sentinel answers and monitors the master) and,
//!   behind the instance API's token, `/v1/status` (role `sentinel`, and the `authGeneration`
//!   of the password Sentinel was given).

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;

use super::Settings;
use super::dial::Dial;
use super::sentinel_inputs::{
    accepted_by_every_instance, dial_for, read_cluster, read_password, seed,
};
use crate::crd::RedisCluster;
use crate::https::{self, CertStore};
use crate::instance_api::{Boot, InstanceReport};
use crate::names;
use crate::sentinel::quorum::Answer;
use crate::sentinel::{CONF_FILE, client, conf};

pub(super) const ASK_TIMEOUT: Duration = Duration::from_secs(2);
const START_TIMEOUT: Duration = Duration::from_secs(30);

struct Shared {
    settings: Settings,
    waiting: Mutex<Option<String>>,
    /// How to reach Sentinels (TLS when the cluster has it), set from the cluster read.
    dial: Mutex<Dial>,
    /// The password Sentinel was given (`auth-pass`); empty before it starts.
    given: Mutex<String>,
}

impl Shared {
    fn dial(&self) -> Dial {
        self.dial.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn give(&self, password: &str) {
        *self.given.lock().unwrap_or_else(|p| p.into_inner()) = password.to_owned();
    }
}

pub(super) fn port() -> u16 {
    names::SENTINEL_PORT as u16
}

/// Runs the Sentinel pod's instance manager (see the module contract) until Sentinel exits
/// or `shutdown`.
pub async fn run(
    settings: Settings,
    client: kube::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&settings.paths.data_dir)
        .with_context(|| format!("creating {}", settings.paths.data_dir.display()))?;
    let shared = Arc::new(Shared {
        settings: settings.clone(),
        waiting: Mutex::new(Some("starting".into())),
        dial: Mutex::new(Dial::Tcp),
        given: Mutex::new(String::new()),
    });
    let serving = shutdown.child_token();
    let server = serve(shared.clone(), serving.clone()).await?;
    let result = supervise(&shared, &client, &shutdown).await;
    serving.cancel();
    let _ = server.await;
    result
}

fn wait(shared: &Shared, reason: String) {
    let mut w = shared.waiting.lock().unwrap_or_else(|p| p.into_inner());
    if w.as_deref() != Some(reason.as_str()) {
        tracing::info!(%reason, "Sentinel is not running");
    }
    *w = Some(reason);
}

async fn supervise(
    shared: &Shared,
    client: &kube::Client,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let s = &shared.settings;
    let mut tick = tokio::time::interval(s.resync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut child: Option<tokio::process::Child> = None;
    let mut password = String::new();
    // The TLS files Sentinel loaded (it reads them only at start).
    let mut loaded: Option<String> = None;
    loop {
        let exited = async {
            match child.as_mut() {
                Some(c) => c.wait().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => {
                if let Some(c) = child.as_mut() {
                    stop(c, s.grace).await;
                }
                return Ok(());
            }
            status = exited => {
                let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                anyhow::bail!("Sentinel exited ({status}); exiting so the container restarts");
            }
            _ = tick.tick() => {}
        }
        let cluster = match read_cluster(client, s).await {
            Ok(c) => c,
            Err(e) => {
                if child.is_none() {
                    wait(shared, e);
                }
                continue;
            }
        };
        if child.is_none() {
            *shared.dial.lock().unwrap_or_else(|p| p.into_inner()) = dial_for(s, &cluster);
        }
        let now = match read_password(s, &cluster) {
            Ok(p) => p,
            Err(e) => {
                if child.is_none() {
                    wait(shared, e);
                }
                continue;
            }
        };
        if child.is_none() {
            match start(shared, client, &cluster, &now).await {
                Ok(c) => {
                    child = Some(c);
                    password = now.clone();
                    shared.give(&now);
                    loaded = tls_files(shared);
                    *shared.waiting.lock().unwrap_or_else(|p| p.into_inner()) = None;
                }
                Err(Start::Wait(reason)) => wait(shared, reason),
                Err(Start::Failed(e)) => return Err(e),
            }
        } else if let Some(rotated) =
            tls_files(shared).filter(|h| loaded.as_ref().is_some_and(|l| l != h))
        {
            // Sentinel cannot reload its certificate (no CONFIG SET in Sentinel mode): a
            // restart loads the new files and keeps its state (sentinel.conf stays).
            wait(
                shared,
                "restarting Sentinel to load the rotated TLS files".into(),
            );
            if let Some(c) = child.as_mut() {
                stop(c, s.grace).await;
            }
            child = None;
            tracing::info!(files = %rotated, "the TLS files changed; Sentinel restarts with them");
            tick.reset_immediately();
        } else if now != password {
            let ip = s.pod_ip.to_string();
            let dial = shared.dial();
            if let Err(why) = accepted_by_every_instance(client, s, &dial, &now).await {
                tracing::info!(%why, "keeping Sentinel on the previous password until every instance accepts the rotated one");
                continue;
            }
            match client::set_auth_pass(&dial, &ip, port(), &s.cluster, &now, ASK_TIMEOUT).await {
                Ok(()) => {
                    tracing::info!("gave Sentinel the rotated password (auth-pass)");
                    shared.give(&now);
                    password = now;
                }
                Err(e) => tracing::warn!(error = %e, "SENTINEL SET auth-pass failed; retrying"),
            }
        }
    }
}

enum Start {
    Wait(String),
    Failed(anyhow::Error),
}

async fn start(
    shared: &Shared,
    client: &kube::Client,
    cluster: &RedisCluster,
    password: &str,
) -> Result<tokio::process::Child, Start> {
    let s = &shared.settings;
    let dial = shared.dial();
    let path = s.paths.data_dir.join(CONF_FILE);
    let kept = path.exists();
    if kept {
        tracing::info!(path = %path.display(), "keeping Sentinel's own state from before the restart");
    } else {
        let master = seed(client, s, &dial, cluster).await.map_err(Start::Wait)?;
        let bind = s.pod_ip.to_string();
        let dir = s.paths.data_dir.to_string_lossy().into_owned();
        let file = |k: &str| s.paths.tls_dir.join(k).to_string_lossy().into_owned();
        let (cert, key, ca) = (
            file(names::KEY_TLS_CRT),
            file(names::KEY_TLS_KEY),
            file(names::KEY_CA_CRT),
        );
        if dial.is_tls() {
            tls_projected(&[&cert, &key, &ca]).map_err(Start::Wait)?;
        }
        let text = conf::render(&conf::Input {
            name: &s.cluster,
            bind: &bind,
            port: port(),
            master_ip: &master,
            master_port: names::REDIS_PORT as u16,
            password,
            dir: &dir,
            tls: dial.is_tls().then_some(conf::Tls {
                cert: &cert,
                key: &key,
                ca: &ca,
            }),
        });
        write_private(&path, &text)
            .with_context(|| format!("writing {}", path.display()))
            .map_err(Start::Failed)?;
        tracing::info!(%master, "seeded sentinel.conf");
    }
    let mut child = tokio::process::Command::new(&s.redis_server)
        .arg0("redis-sentinel")
        .arg(&path)
        .arg("--sentinel")
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", s.redis_server.display()))
        .map_err(Start::Failed)?;
    let ip = s.pod_ip.to_string();
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(mut c) = dial.conn(&ip, port(), ASK_TIMEOUT).await
            && c.command(&["PING"]).await.is_ok()
        {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Start::Failed(anyhow::anyhow!(
                "Sentinel exited at start ({status})"
            )));
        }
        if Instant::now() > deadline {
            return Err(Start::Failed(anyhow::anyhow!(
                "Sentinel did not answer within {START_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::info!(pid = child.id().unwrap_or(0), "started Sentinel");
    if kept
        && let Err(e) =
            client::set_auth_pass(&dial, &ip, port(), &s.cluster, password, ASK_TIMEOUT).await
    {
        tracing::warn!(error = %e, "SENTINEL SET auth-pass failed");
    }
    Ok(child)
}

async fn stop(child: &mut tokio::process::Child, grace: Duration) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        tracing::warn!("Sentinel still running at the end of the grace period; SIGKILL");
        let _ = child.kill().await;
    }
}

/// A hash of the TLS files when Sentinel speaks TLS and they are all readable.
fn tls_files(shared: &Shared) -> Option<String> {
    if !shared.dial().is_tls() {
        return None;
    }
    let names = [names::KEY_TLS_CRT, names::KEY_TLS_KEY, names::KEY_CA_CRT];
    super::manager::files_hash(&shared.settings.paths.tls_dir, &names)
}

/// Whether the TLS files are all there (the kubelet projects them); why not.
fn tls_projected(files: &[&str]) -> Result<(), String> {
    match files.iter().find(|f| !std::path::Path::new(f).is_file()) {
        Some(f) => Err(format!("the TLS file {f} is not projected yet")),
        None => Ok(()),
    }
}

fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

async fn serve(
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let dir = &shared.settings.api_tls_dir;
    let r = |k: &str| {
        std::fs::read_to_string(dir.join(k))
            .with_context(|| format!("reading {}", dir.join(k).display()))
    };
    let store = Arc::new(CertStore::new(
        &r(names::KEY_TLS_CRT)?,
        &r(names::KEY_TLS_KEY)?,
    )?);
    let addr = shared.settings.http_addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let config = https::tls_config(store)?;
    let v1 = Router::new()
        .route(names::PATH_STATUS, get(status))
        .layer(middleware::from_fn_with_state(shared.clone(), authenticate));
    let router = Router::new()
        .route(names::PATH_HEALTHZ, get(healthz))
        .route(names::PATH_READYZ, get(readyz))
        .merge(v1)
        .with_state(shared);
    tracing::info!(%addr, "serving /healthz, /readyz and /v1/status");
    Ok(tokio::spawn(https::serve(listener, router, config, stop)))
}

async fn authenticate(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    super::api::guard(&shared.settings.token_dir, req, next).await
}

/// `/v1/status` of a Sentinel pod: what the data pods need to finish a password rotation.
async fn status(State(shared): State<Arc<Shared>>) -> Json<InstanceReport> {
    let waiting = shared
        .waiting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let given = shared
        .given
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    Json(InstanceReport {
        pod: shared.settings.pod.clone(),
        boot: waiting.map_or(Boot::Running, |reason| Boot::Waiting { reason }),
        fenced: false,
        role: names::role::SENTINEL.into(),
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
        min_replicas_to_write: 0,
        writes_refused: false,
        auth_generation: if given.is_empty() {
            String::new()
        } else {
            super::auth::generation(&given)
        },
    })
}

async fn healthz() -> Response {
    (StatusCode::OK, "ok").into_response()
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let waiting = shared
        .waiting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if let Some(why) = waiting {
        return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    }
    let s = &shared.settings;
    let dial = shared.dial();
    match client::ask(
        &dial,
        &s.pod_ip.to_string(),
        port(),
        &s.cluster,
        ASK_TIMEOUT,
    )
    .await
    {
        Answer::Master { .. } => (StatusCode::OK, "ok").into_response(),
        Answer::Unknown => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("Sentinel does not monitor {}", s.cluster),
        )
            .into_response(),
        Answer::Unreachable(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("Sentinel does not answer: {e}"),
        )
            .into_response(),
    }
}
