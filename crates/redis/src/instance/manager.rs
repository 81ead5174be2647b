//! The instance manager's loop: one pass on every change of the RedisCluster and every
//! `--resync` seconds, plus the shared state the API reads.
//!
//! Contract:
//! - While redis-server is not running, a pass reads the RedisCluster afresh (a quorum read,
//!   never a cache) and applies [`decide::boot`]: start it, or wait and say why (the reason
//!   is [`Boot::Waiting`] on `/v1/status` and the body of a failing `/readyz`).
//! - While it runs, a pass holds the role lock (API commands hold it too, so the loop never
//!   acts in the middle of a promotion or switchover) and applies [`decide::running`], then
//!   the live configuration, the password rotation and TLS certificate reloads. A fenced
//!   instance's redis-server is shut down and stays down; the process and its API stay up.
//! - redis-server exiting by itself ends [`run`] with an error (the container restarts and
//!   the boot guard runs again); SIGTERM stops it gracefully within `--shutdown-grace` and
//!   ends [`run`] with `Ok`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::auth::{self, Rotation, Upstream};
use super::decide::{self, Action, Hold, PrimaryAddr, View};
use super::fence::Fencing;
use super::info::Info;
use super::local::Local;
use super::peers::{self, Dialer};
use super::process::{self, Child};
use super::secrets::{self, Projected};
use super::{Settings, config};
use crate::crd::{RedisCluster, RedisClusterSpec};
use crate::instance_api::{self, Boot};

const API_TIMEOUT: Duration = Duration::from_secs(10);
const PEER_TIMEOUT: Duration = Duration::from_secs(3);
const PEERS_REFRESH: Duration = Duration::from_secs(15);
const START_TIMEOUT: Duration = Duration::from_secs(60);
const HASHES_FILE: &str = ".instance-auth.json";

/// The primary isolation check's settings (`spec.primaryIsolation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Isolation {
    /// Whether a primary checks it is not isolated.
    pub enabled: bool,
    /// Timeout of the API server check.
    pub api_timeout: Duration,
    /// Timeout of the peer checks.
    pub peer_timeout: Duration,
}

impl Isolation {
    fn of(spec: &RedisClusterSpec) -> Self {
        let d = |v: Option<&String>| {
            v.and_then(|s| crate::schedule::parse_go_duration(s).ok())
                .and_then(|d| Duration::try_from(d).ok())
                .filter(|d| !d.is_zero())
                .unwrap_or(Duration::from_secs(5))
        };
        let p = spec.primary_isolation.clone().unwrap_or_default();
        Self {
            enabled: p.enabled.unwrap_or(true),
            api_timeout: d(p.api_server_timeout.as_ref()),
            peer_timeout: d(p.peer_timeout.as_ref()),
        }
    }
}

/// What the API reads about the instance.
#[derive(Clone, Debug)]
pub struct State {
    /// What the manager does with redis-server.
    pub boot: Boot,
    /// Whether the fencing annotation names this pod (as last read).
    pub fenced: bool,
    /// A role an API command set, held until the cluster view confirms it.
    pub hold: Option<Hold>,
    /// The reported password generation.
    pub generation: String,
    /// `min-replicas-to-write` in effect.
    pub min_replicas_to_write: i32,
    /// The isolation check's settings.
    pub isolation: Isolation,
    /// IPs of the other data pods (last refresh).
    pub peers: Vec<String>,
}

/// One instance: settings, clients and the shared state.
pub struct Instance {
    /// Settings.
    pub settings: Settings,
    /// The local redis-server.
    pub local: Local,
    /// The API client (this pod's ServiceAccount).
    pub client: kube::Client,
    /// How to reach peers.
    pub dialer: Dialer,
    /// Held by the loop's running pass and by role-changing API commands.
    pub role_lock: tokio::sync::Mutex<()>,
    /// Wakes the loop.
    pub wake: Notify,
    /// Backups started through the API.
    pub backups: super::backup::Jobs,
    /// The API's serving certificate (set once serving).
    pub certs: std::sync::OnceLock<Arc<crate::https::CertStore>>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("pod", &self.settings.pod)
            .finish()
    }
}

impl Instance {
    /// A new instance, waiting.
    pub fn new(settings: Settings, client: kube::Client) -> Self {
        let dialer = Dialer {
            server_name: instance_api::server_name(&settings.cluster, &settings.namespace),
            port: settings.http_addr.port(),
            tls_dir: settings.api_tls_dir.clone(),
            token_dir: settings.token_dir.clone(),
        };
        Self {
            local: Local::new(settings.paths.socket.clone(), Vec::new()),
            backups: super::backup::Jobs::default(),
            certs: std::sync::OnceLock::new(),
            settings,
            client,
            dialer,
            role_lock: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            state: Mutex::new(State {
                boot: Boot::Waiting {
                    reason: "starting".into(),
                },
                fenced: false,
                hold: None,
                generation: String::new(),
                min_replicas_to_write: 0,
                isolation: Isolation::of(&RedisClusterSpec::default()),
                peers: Vec::new(),
            }),
        }
    }

    /// A copy of the state.
    pub fn state(&self) -> State {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes the state.
    pub fn update<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Reads this pod's RedisCluster from the API (never a cache).
    pub async fn read_cluster(&self, timeout: Duration) -> Result<RedisCluster, String> {
        let api: Api<RedisCluster> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        match tokio::time::timeout(timeout, api.get(&self.settings.cluster)).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(format!(
                "reading RedisCluster {}/{}: {e}",
                self.settings.namespace, self.settings.cluster
            )),
            Err(_) => Err(format!(
                "reading RedisCluster {}/{}: no answer within {timeout:?}",
                self.settings.namespace, self.settings.cluster
            )),
        }
    }

    async fn primary_addr(&self, view: &View) -> PrimaryAddr {
        let current = view.current_primary.as_str();
        if view.replica_mode.is_some() || current.is_empty() || current == self.settings.pod {
            return PrimaryAddr::NotNeeded;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        match tokio::time::timeout(API_TIMEOUT, pods.get_opt(current)).await {
            Ok(Ok(None)) => PrimaryAddr::Missing,
            Ok(Ok(Some(p))) => match p.status.and_then(|s| s.pod_ip).filter(|ip| !ip.is_empty()) {
                Some(ip) => PrimaryAddr::Ip(ip),
                None => PrimaryAddr::NoIp,
            },
            Ok(Err(e)) => PrimaryAddr::Unknown(e.to_string()),
            Err(_) => PrimaryAddr::Unknown(format!("no answer within {API_TIMEOUT:?}")),
        }
    }
}

/// Runs the instance manager (see the module contract) with `client`, until redis-server
/// exits or `shutdown`.
pub async fn run(
    settings: Settings,
    client: kube::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&settings.paths.data_dir)
        .with_context(|| format!("creating {}", settings.paths.data_dir.display()))?;
    let inst = Arc::new(Instance::new(settings, client));
    let serving = shutdown.child_token();
    let server = super::api::serve(inst.clone(), serving.clone()).await?;
    let (tx, rx) = watch::channel(None);
    let watching = tokio::spawn(watch_cluster(inst.clone(), tx, serving.clone()));
    let result = Loop::new(inst.clone(), rx).run(shutdown).await;
    serving.cancel();
    let _ = watching.await;
    let _ = server.await;
    result
}

// Keeps the latest RedisCluster in `tx` and wakes the loop on every change.
async fn watch_cluster(
    inst: Arc<Instance>,
    tx: watch::Sender<Option<Arc<RedisCluster>>>,
    stop: CancellationToken,
) {
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let api: Api<RedisCluster> = Api::namespaced(inst.client.clone(), &inst.settings.namespace);
    let cfg =
        watcher::Config::default().fields(&format!("metadata.name={}", inst.settings.cluster));
    let mut stream = std::pin::pin!(watcher::watcher(api, cfg));
    loop {
        let ev = tokio::select! {
            () = stop.cancelled() => return,
            ev = stream.next() => ev,
        };
        match ev {
            Some(Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))) => {
                tx.send_replace(Some(Arc::new(c)));
                inst.wake.notify_one();
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::debug!(error = %e, "RedisCluster watch failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            None => return,
        }
    }
}

/// The loop's own state (not shared).
struct Loop {
    inst: Arc<Instance>,
    cluster: watch::Receiver<Option<Arc<RedisCluster>>>,
    child: Option<Child>,
    rotation: Option<Rotation>,
    masterauth: String,
    applied: BTreeMap<String, String>,
    tls_hash: Option<String>,
    acl: Option<String>,
    api_cert: Option<String>,
    peers_at: Option<Instant>,
    said: String,
}

fn sha(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn files_hash(dir: &Path, names: &[&str]) -> Option<String> {
    let contents: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(dir.join(n)).ok())
        .collect::<Option<_>>()?;
    Some(sha(&contents.iter().map(Vec::as_slice).collect::<Vec<_>>()))
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
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

impl Loop {
    fn new(inst: Arc<Instance>, cluster: watch::Receiver<Option<Arc<RedisCluster>>>) -> Self {
        Self {
            inst,
            cluster,
            child: None,
            rotation: None,
            masterauth: String::new(),
            applied: BTreeMap::new(),
            tls_hash: None,
            acl: None,
            api_cert: None,
            peers_at: None,
            said: String::new(),
        }
    }

    async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut tick = tokio::time::interval(self.inst.settings.resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let exited = async {
                match self.child.as_mut() {
                    Some(c) => c.wait().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => {
                    self.stop("shutting down (SIGTERM)").await;
                    return Ok(());
                }
                status = exited => {
                    self.inst.update(|s| s.boot = Boot::Stopping);
                    let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                    anyhow::bail!("redis-server exited ({status}); exiting so the container restarts and the boot guard runs again");
                }
                _ = tick.tick() => {}
                r = self.cluster.changed() => { if r.is_err() { tick.tick().await; } }
                () = self.inst.wake.notified() => {}
            }
            if self.child.is_none() {
                self.boot_pass().await?;
            } else {
                self.running_pass().await;
            }
            self.reload_api_cert();
        }
    }

    fn wait(&mut self, reason: String) {
        if reason != self.said {
            tracing::info!(%reason, "redis-server is not running");
            self.said = reason.clone();
        }
        self.inst.update(|s| s.boot = Boot::Waiting { reason });
    }

    fn note(&mut self, what: Option<String>) {
        let what = what.unwrap_or_default();
        if what != self.said {
            if !what.is_empty() {
                tracing::info!(reason = %what, "holding the current role");
            }
            self.said = what;
        }
    }

    async fn stop(&mut self, why: &str) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        self.inst.update(|s| s.boot = Boot::Stopping);
        tracing::info!(reason = why, "stopping redis-server");
        match child.stop(&self.inst.local, self.inst.settings.grace).await {
            Ok(status) => tracing::info!(%status, "redis-server stopped"),
            Err(e) => tracing::warn!(error = %e, "waiting for redis-server to stop failed"),
        }
    }

    fn observe_spec(&self, cluster: &RedisCluster) -> View {
        let view = View::of(cluster, &self.inst.settings.pod);
        let isolation = Isolation::of(&cluster.spec);
        self.inst.update(|s| {
            s.fenced = view.fencing == Fencing::Fenced;
            s.isolation = isolation;
        });
        view
    }

    async fn boot_pass(&mut self) -> anyhow::Result<()> {
        let cluster = match self.inst.read_cluster(API_TIMEOUT).await {
            Ok(c) => c,
            Err(e) => {
                self.wait(format!(
                    "cannot read the RedisCluster, so cannot tell the role: {e}"
                ));
                return Ok(());
            }
        };
        let view = self.observe_spec(&cluster);
        let s = &self.inst.settings;
        let projected = secrets::read(
            &s.projected_dir,
            &s.paths.tls_dir,
            &s.cluster,
            &cluster.spec,
        );
        let primary = self.inst.primary_addr(&view).await;
        let ready = projected.as_ref().map(drop).map_err(Clone::clone);
        let decision = if cluster.spec.mode == crate::crd::ClusterMode::Sentinel {
            // Sentinel owns the primary role: its quorum decides (sentinel_boot).
            let dial = super::sentinel_inputs::dial_for(s, &cluster);
            match super::sentinel_boot::sight(&self.inst, &dial).await {
                Ok(sight) => {
                    super::sentinel_boot::decide(&s.pod, &view, &primary, s.port, ready, &sight)
                }
                Err(e) => decide::Boot::Wait(format!("cannot see the Sentinels: {e}")),
            }
        } else {
            decide::boot(&s.pod, &view, &primary, s.port, ready)
        };
        match decision {
            decide::Boot::Wait(reason) => {
                self.wait(reason);
                Ok(())
            }
            role => match projected {
                Ok(p) => self.start(&cluster, &role, p).await,
                Err(e) => {
                    self.wait(e);
                    Ok(())
                }
            },
        }
    }

    fn kept_hashes(&self) -> Vec<String> {
        let path = self.inst.settings.paths.data_dir.join(HASHES_FILE);
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn persist_hashes(&self, hashes: &[String]) {
        let path = self.inst.settings.paths.data_dir.join(HASHES_FILE);
        let text = serde_json::to_string(hashes).unwrap_or_default();
        if let Err(e) = write_private(&path, &text) {
            tracing::warn!(error = %e, "cannot keep the accepted password hashes");
        }
    }

    async fn start(
        &mut self,
        cluster: &RedisCluster,
        role: &decide::Boot,
        p: Projected,
    ) -> anyhow::Result<()> {
        let s = self.inst.settings.clone();
        let rotation = Rotation::start(&p.password, &self.kept_hashes());
        let accepted = rotation.accepted();
        let masterauth = p
            .source_password
            .clone()
            .unwrap_or_else(|| rotation.masterauth.clone());
        if let Some(acl) = &p.acl {
            write_private(&s.paths.acl_file(), &auth::acl_file(acl, &accepted))
                .with_context(|| format!("writing {}", s.paths.acl_file().display()))?;
        }
        let default_user = auth::default_user_rules(&accepted);
        let grace = u32::try_from(s.grace.as_secs()).unwrap_or(u32::MAX);
        let bind = s.pod_ip.to_string();
        let rendered = config::render(&config::Input {
            spec: &cluster.spec,
            boot: role,
            bind: &bind,
            port: s.port,
            paths: &s.paths,
            default_user: &default_user,
            masterauth: &masterauth,
            shutdown_timeout: (grace / 3).clamp(1, 10),
        });
        for why in &rendered.ignored {
            tracing::warn!(%why, "left out of redis.conf");
        }
        write_private(&s.paths.conf(), &rendered.text)
            .with_context(|| format!("writing {}", s.paths.conf().display()))?;
        self.persist_hashes(&accepted);
        let _ = std::fs::remove_file(&s.paths.socket);
        self.inst.local.set_passwords(rotation.candidates());
        let mut child = process::spawn(&s.redis_server, &s.paths.conf())
            .with_context(|| format!("starting {}", s.redis_server.display()))?;
        tracing::info!(pid = child.pid(), ?role, "started redis-server");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.inst.local.ping().await {
                Ok(()) => break,
                Err(super::resp::RespError::Server(m)) if m.starts_with("LOADING") => break,
                Err(e) => {
                    if let Some(status) = child.exited() {
                        anyhow::bail!("redis-server exited at start ({status})");
                    }
                    if Instant::now() > deadline {
                        anyhow::bail!("redis-server did not answer within {START_TIMEOUT:?}: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        self.child = Some(child);
        self.applied = config::live(&cluster.spec);
        self.tls_hash = files_hash(
            &s.paths.tls_dir,
            &[
                crate::names::KEY_TLS_CRT,
                crate::names::KEY_TLS_KEY,
                crate::names::KEY_CA_CRT,
            ],
        );
        self.acl = p.acl;
        self.masterauth = masterauth;
        let generation = rotation.generation();
        self.rotation = Some(rotation);
        self.said.clear();
        let min = cluster.spec.min_sync_replicas;
        let hold = None;
        self.inst.update(|st| {
            st.boot = Boot::Running;
            st.generation = generation;
            st.min_replicas_to_write = min;
            st.hold = hold;
        });
        Ok(())
    }

    async fn running_pass(&mut self) {
        let inst = self.inst.clone();
        let _role = inst.role_lock.lock().await;
        let Some(cluster) = self.cluster.borrow().clone() else {
            return;
        };
        let view = self.observe_spec(&cluster);
        let info = match inst.local.info("replication").await {
            Ok(i) => i,
            Err(e) => {
                tracing::debug!(error = %e, "INFO replication failed");
                return;
            }
        };
        let primary = inst.primary_addr(&view).await;
        let hold = inst.state().hold;
        let s = &inst.settings;
        let (action, hold) = if cluster.spec.mode == crate::crd::ClusterMode::Sentinel {
            // Sentinel promotes and re-points instances itself; the manager only fences.
            match &view.fencing {
                Fencing::Fenced => (
                    Action::Stop(format!(
                        "fenced: {} is listed in the fencing annotation",
                        s.pod
                    )),
                    hold,
                ),
                _ => (Action::Nothing(None), None),
            }
        } else {
            decide::running(&s.pod, &view, &primary, s.port, &info, hold)
        };
        inst.update(|st| st.hold = hold);
        match action {
            Action::Stop(reason) => {
                self.stop(&reason).await;
                self.wait(reason);
                return;
            }
            Action::Promote(reason) => match inst.local.promote().await {
                Ok(()) => tracing::info!(%reason, "promoted to primary"),
                Err(e) => tracing::warn!(%reason, error = %e, "promotion failed"),
            },
            Action::Follow {
                host,
                port,
                kill_clients,
                reason,
            } => match inst.local.follow(&host, port, kill_clients).await {
                Ok(killed) => tracing::info!(%reason, %host, port, killed, "following the primary"),
                Err(e) => tracing::warn!(%reason, error = %e, "REPLICAOF failed"),
            },
            Action::Nothing(why) => self.note(why),
        }
        if info.is_master() {
            // The isolation check needs to know its peers before it needs them.
            self.peers().await;
        }
        self.apply_config(&cluster.spec).await;
        self.rotate(&cluster.spec, &view, &info).await;
        self.reload_tls(&cluster.spec).await;
    }

    async fn apply_config(&mut self, spec: &RedisClusterSpec) {
        let desired = config::live(spec);
        for (k, v) in &desired {
            if self.applied.get(k) == Some(v) {
                continue;
            }
            match self.inst.local.config_set(k, v).await {
                Ok(()) => {
                    tracing::info!(key = %k, value = %v, "applied configuration");
                    self.applied.insert(k.clone(), v.clone());
                }
                Err(e) => {
                    tracing::warn!(key = %k, error = %e, "CONFIG SET refused; it takes effect at the next restart");
                    self.applied.insert(k.clone(), v.clone());
                }
            }
        }
        let min = spec.min_sync_replicas;
        self.inst.update(|st| st.min_replicas_to_write = min);
    }

    async fn peers(&mut self) -> Vec<String> {
        let due = self.peers_at.is_none_or(|t| t.elapsed() > PEERS_REFRESH);
        if due {
            let s = &self.inst.settings;
            match peers::list(&self.inst.client, &s.namespace, &s.cluster, &s.pod).await {
                Ok(ips) => {
                    self.inst.update(|st| st.peers = ips);
                    self.peers_at = Some(Instant::now());
                }
                Err(e) => tracing::debug!(error = %e, "listing peers failed"),
            }
        }
        self.inst.state().peers
    }

    /// The Sentinel pods' IPs; `None` when they cannot be listed.
    async fn sentinel_peers(&self) -> Option<Vec<String>> {
        let s = &self.inst.settings;
        match peers::sentinels(&self.inst.client, &s.namespace, &s.cluster).await {
            Ok(ips) => Some(ips),
            Err(e) => {
                tracing::debug!(error = %e, "listing the Sentinel pods failed");
                None
            }
        }
    }

    async fn rotate(&mut self, spec: &RedisClusterSpec, view: &View, info: &Info) {
        let s = self.inst.settings.clone();
        let projected = match secrets::read(&s.projected_dir, &s.paths.tls_dir, &s.cluster, spec) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(reason = %e, "secrets not readable; keeping the current ones");
                return;
            }
        };
        let Some(rot) = self.rotation.clone() else {
            return;
        };
        let settled =
            !rot.rotating() && rot.current == projected.password && rot.masterauth == rot.current;
        let mut upstream = Upstream::Me;
        let mut peers_on = true;
        if !settled {
            let ips = self.peers().await;
            let want = auth::generation(&projected.password);
            // In sentinel mode the Sentinels authenticate with the password too: the old one
            // is retired only once they report the new one (an unlisted Sentinel pod keeps
            // it, and the rotation waits).
            let sentinels = if spec.mode == crate::crd::ClusterMode::Sentinel {
                self.sentinel_peers().await
            } else {
                Some(Vec::new())
            };
            peers_on &= sentinels.is_some();
            let all: Vec<&String> = ips.iter().chain(sentinels.iter().flatten()).collect();
            let reports = futures::future::join_all(
                all.iter()
                    .map(|ip| self.inst.dialer.status(ip, PEER_TIMEOUT)),
            )
            .await;
            let mut by_ip = BTreeMap::new();
            for (ip, r) in all.into_iter().zip(reports) {
                peers_on &= r.as_ref().is_ok_and(|r| r.auth_generation == want);
                by_ip.insert(ip.clone(), r.ok().map(|r| r.auth_generation));
            }
            if view.replica_mode.is_none() && !info.is_master() {
                let master = info.master().map(|(h, _)| h).unwrap_or_default();
                upstream = Upstream::Peer(by_ip.get(&master).cloned().flatten());
            }
        }
        let next = rot.next(&projected.password, &upstream, peers_on);
        self.apply_rotation(&rot, &next).await;
        let masterauth = projected
            .source_password
            .clone()
            .unwrap_or_else(|| next.masterauth.clone());
        if masterauth != self.masterauth {
            match self.inst.local.config_set("masterauth", &masterauth).await {
                Ok(()) => {
                    tracing::info!("masterauth updated");
                    self.masterauth = masterauth;
                }
                Err(e) => tracing::warn!(error = %e, "CONFIG SET masterauth failed"),
            }
        }
        if projected.acl != self.acl {
            if let Some(acl) = &projected.acl {
                self.reload_acl(acl, &next.accepted()).await;
            }
            self.acl = projected.acl.clone();
        }
        let generation = next.generation();
        self.inst.update(|st| st.generation = generation);
        self.rotation = Some(next);
    }

    async fn apply_rotation(&mut self, old: &Rotation, new: &Rotation) {
        let (before, after) = (old.accepted(), new.accepted());
        if before == after {
            return;
        }
        let added: Vec<String> = after
            .iter()
            .filter(|h| !before.contains(h))
            .cloned()
            .collect();
        if !added.is_empty() {
            if let Err(e) = self.inst.local.command(&auth::add_args(&added)).await {
                tracing::warn!(error = %e, "adding the new password failed; retrying next pass");
                return;
            }
            tracing::info!("the new password is accepted alongside the old one");
        }
        self.inst.local.set_passwords(new.candidates());
        for gone in before.iter().filter(|h| !after.contains(h)) {
            match self.inst.local.command(&auth::remove_args(gone)).await {
                Ok(_) => tracing::info!("a rotated-out password is no longer accepted"),
                Err(e) => tracing::debug!(error = %e, "removing an old password"),
            }
        }
        if let Some(acl) = &self.acl {
            let path = self.inst.settings.paths.acl_file();
            if let Err(e) = write_private(&path, &auth::acl_file(acl, &after)) {
                tracing::warn!(error = %e, "rewriting the ACL file failed");
            }
        }
        self.persist_hashes(&after);
    }

    async fn reload_acl(&self, acl: &str, accepted: &[String]) {
        let path = self.inst.settings.paths.acl_file();
        if let Err(e) = write_private(&path, &auth::acl_file(acl, accepted)) {
            tracing::warn!(error = %e, "writing the ACL file failed");
            return;
        }
        match self
            .inst
            .local
            .command(&["ACL".to_owned(), "LOAD".to_owned()])
            .await
        {
            Ok(_) => tracing::info!("ACL rules reloaded"),
            Err(e) => {
                tracing::warn!(error = %e, "ACL LOAD refused the new rules; the previous ones stay in force")
            }
        }
    }

    async fn reload_tls(&mut self, spec: &RedisClusterSpec) {
        if !config::tls_enabled(spec) {
            return;
        }
        let s = &self.inst.settings;
        let names = [
            crate::names::KEY_TLS_CRT,
            crate::names::KEY_TLS_KEY,
            crate::names::KEY_CA_CRT,
        ];
        let Some(now) = files_hash(&s.paths.tls_dir, &names) else {
            return;
        };
        if self.tls_hash.as_deref() == Some(now.as_str()) {
            return;
        }
        // All three in one CONFIG SET: Redis loads and checks them together, so a certificate
        // never meets the previous key; a failure keeps the old ones and retries next pass.
        let f = |n: &str| s.paths.tls_dir.join(n).to_string_lossy().into_owned();
        let args: Vec<String> = ["CONFIG", "SET", "tls-cert-file"]
            .map(str::to_owned)
            .into_iter()
            .chain([
                f(names[0]),
                "tls-key-file".into(),
                f(names[1]),
                "tls-ca-cert-file".into(),
                f(names[2]),
            ])
            .collect();
        match self.inst.local.command(&args).await {
            Ok(_) => {
                tracing::info!("reloaded the TLS certificates");
                self.tls_hash = Some(now);
            }
            Err(e) => {
                tracing::warn!(error = %e, "reloading the TLS certificates failed; retrying next pass")
            }
        }
    }

    fn reload_api_cert(&mut self) {
        let dir = &self.inst.settings.api_tls_dir;
        let Some(now) = files_hash(dir, &[crate::names::KEY_TLS_CRT, crate::names::KEY_TLS_KEY])
        else {
            return;
        };
        if self.api_cert.as_deref() == Some(now.as_str()) {
            return;
        }
        if self.api_cert.is_some() {
            super::api::reload_cert(&self.inst);
        }
        self.api_cert = Some(now);
    }
}
