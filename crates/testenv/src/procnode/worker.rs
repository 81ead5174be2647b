//! The pod worker: one task per pod bound to a process-backed node, acting as its kubelet.
//!
//! Contract:
//! - On acceptance: a network namespace with the pod's address, the pod's /etc files, its
//!   volumes (retried every 2 s while a source is missing, with a `FailedMount` Event), then
//!   containers in the order of [`super::model::plan`]: init containers one by one, then the
//!   app containers together.
//! - A container that cannot start waits with the kubelet's reason: `ErrImagePull` /
//!   `ImagePullBackOff` (no image mapping), `CreateContainerConfigError` (a missing Secret or
//!   ConfigMap key, `runAsNonRoot` with root); an exec failure is a `StartError` exit (128).
//! - Exits are restarted per the restart policy after the crash-loop back-off
//!   ([`super::backoff`]); probes run per run ([`super::probe_run`]); a liveness or startup
//!   failure kills the container (SIGTERM, SIGKILL after the grace period) and it restarts.
//! - The pod's status is computed by [`super::status::compute`] and written (a strategic merge
//!   patch of `pods/status`) only when it differs from what was last written.
//! - Secret, ConfigMap, downwardAPI and token contents are rewritten in place when their
//!   sources change (`Msg::Sources`, pod label/annotation changes, token refresh time).
//! - Deletion: SIGTERM to every running container, SIGKILL to whatever is left after the grace
//!   period (`metadata.deletionGracePeriodSeconds`, at least 2 s as the kubelet), then the
//!   network namespace, cgroups and pod directory are removed (PVC data stays) and the pod
//!   object is deleted for good. `Msg::Shutdown` (the agent stopping) kills at once.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodStatus, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use nix::sys::signal::Signal;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::agent::Ctx;
use super::backoff::BackOff;
use super::envvars::{self, Objects, PodContext};
use super::events::{self, Kind as EventKind};
use super::launch;
use super::model::{self, Ctr, CtrKind, RestartPolicy, RunState, Terminated};
use super::probe::{Kind as ProbeKind, Verdict as ProbeVerdict};
use super::probe_run::{self, Prober, Target, Verdict};
use super::runtime::{self, Exit};
use super::spec::{Mount, RunSpec};
use super::status;
use super::{cgroup, images, network, projection, tokens, volumes};

/// What a pod worker is told.
#[derive(Debug)]
pub enum Msg {
    /// A newer version of the pod.
    Pod(Box<Pod>),
    /// The pod is gone from the API (force-deleted).
    Deleted,
    /// Secrets or ConfigMaps of its namespace changed.
    Sources,
    /// A container run exited.
    Exited {
        /// Container index.
        index: usize,
        /// Which run.
        run: u64,
        /// How.
        exit: Exit,
    },
    /// A probe's verdict changed.
    Probe(Verdict),
    /// The grace period of a kill is over: SIGKILL what is left of that run.
    Escalate {
        /// Container index.
        index: usize,
        /// Which run.
        run: u64,
    },
    /// The agent stops: kill everything now and clean up, without touching the API.
    Shutdown,
}

/// A running container run.
struct Live {
    run: u64,
    pid: i32,
    prober: Option<tokio::task::JoinHandle<()>>,
}

/// The pod's network namespace and address.
struct Sandbox {
    ip: Ipv4Addr,
    ready: bool,
}

const RETRY: Duration = Duration::from_secs(2);
/// The kubelet's minimum grace period for a kill.
const MIN_GRACE: Duration = Duration::from_secs(2);

/// One pod's worker.
pub struct Worker {
    ctx: Arc<Ctx>,
    pod: Arc<Pod>,
    uid: String,
    ns: String,
    name: String,
    node: String,
    node_index: usize,
    rx: UnboundedReceiver<Msg>,
    tx: UnboundedSender<Msg>,
    specs: Vec<Container>,
    ctrs: Vec<Ctr>,
    runs: Vec<Option<Live>>,
    backoffs: Vec<BackOff>,
    pull_failures: Vec<u32>,
    next_run: u64,
    sandbox: Option<Sandbox>,
    volumes: Option<BTreeMap<String, PathBuf>>,
    tokens: tokens::Cache,
    sources_dirty: bool,
    retry_at: Option<Instant>,
    status_retry_at: Option<Instant>,
    plan_wake: Option<Instant>,
    start_time: Time,
    written: Option<PodStatus>,
    gone: bool,
    shutdown: bool,
}

/// Secrets and ConfigMaps of one namespace, from the agent's caches.
pub struct NamespaceObjects<'a> {
    /// The agent.
    pub ctx: &'a Ctx,
    /// The namespace.
    pub ns: &'a str,
}

impl Objects for NamespaceObjects<'_> {
    fn config_map(&self, name: &str) -> Option<Arc<ConfigMap>> {
        self.ctx
            .config_maps
            .get(&ObjectRef::new(name).within(self.ns))
    }
    fn secret(&self, name: &str) -> Option<Arc<Secret>> {
        self.ctx.secrets.get(&ObjectRef::new(name).within(self.ns))
    }
}

fn now_time() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl Worker {
    /// A worker for `pod` on node index `node_index`.
    pub fn new(
        ctx: Arc<Ctx>,
        pod: Pod,
        node_index: usize,
        rx: UnboundedReceiver<Msg>,
        tx: UnboundedSender<Msg>,
    ) -> Self {
        let spec = pod.spec.clone().unwrap_or_default();
        let has_init = spec.init_containers.as_ref().is_some_and(|i| !i.is_empty());
        let mut specs = Vec::new();
        let mut ctrs = Vec::new();
        for c in spec.init_containers.iter().flatten() {
            let kind = if c.restart_policy.as_deref() == Some("Always") {
                CtrKind::Sidecar
            } else {
                CtrKind::Init
            };
            ctrs.push(Ctr::new(
                &c.name,
                kind,
                c.image.as_deref().unwrap_or_default(),
                "PodInitializing",
            ));
            specs.push(c.clone());
        }
        for c in &spec.containers {
            let reason = if has_init {
                "PodInitializing"
            } else {
                "ContainerCreating"
            };
            ctrs.push(Ctr::new(
                &c.name,
                CtrKind::App,
                c.image.as_deref().unwrap_or_default(),
                reason,
            ));
            specs.push(c.clone());
        }
        let n = ctrs.len();
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.clone())
            .unwrap_or_else(now_time);
        Self {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            ns: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            node: super::NODES[node_index].to_string(),
            node_index,
            pod: Arc::new(pod),
            ctx,
            rx,
            tx,
            specs,
            ctrs,
            runs: (0..n).map(|_| None).collect(),
            backoffs: vec![BackOff::default(); n],
            pull_failures: vec![0; n],
            next_run: 1,
            sandbox: None,
            volumes: None,
            tokens: tokens::Cache::default(),
            sources_dirty: false,
            retry_at: None,
            status_retry_at: None,
            plan_wake: None,
            start_time,
            written: None,
            gone: false,
            shutdown: false,
        }
    }

    /// Runs the pod until it is deleted (or the agent stops).
    pub async fn run(mut self) {
        loop {
            if self.shutdown {
                self.terminate(Duration::ZERO).await;
                break;
            }
            if self.gone || self.pod.metadata.deletion_timestamp.is_some() {
                let grace = self.deletion_grace();
                self.terminate(grace).await;
                break;
            }
            self.sync().await;
            let wake = self.wake_at();
            let msg = tokio::select! {
                m = self.rx.recv() => m,
                _ = tokio::time::sleep_until(wake.into()) => continue,
            };
            match msg {
                Some(m) => self.handle(m),
                None => self.shutdown = true,
            }
            while let Ok(m) = self.rx.try_recv() {
                self.handle(m);
            }
        }
        self.ctx.forget_pod(&self.ns, &self.name, &self.uid);
    }

    fn wake_at(&self) -> Instant {
        [
            self.plan_wake,
            self.retry_at,
            self.status_retry_at,
            self.tokens.next_refresh(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(60))
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Pod(p) => {
                let meta_changed = p.metadata.labels != self.pod.metadata.labels
                    || p.metadata.annotations != self.pod.metadata.annotations;
                self.sources_dirty |= meta_changed;
                self.pod = Arc::new(*p);
            }
            Msg::Deleted => self.gone = true,
            Msg::Sources => self.sources_dirty = true,
            Msg::Shutdown => self.shutdown = true,
            Msg::Exited { index, run, exit } => {
                if self.runs[index].as_ref().is_some_and(|l| l.run == run) {
                    self.on_exit(index, exit);
                }
            }
            Msg::Escalate { index, run } => {
                if self.runs[index].as_ref().is_some_and(|l| l.run == run) {
                    let _ = cgroup::kill_now(
                        self.ctx
                            .cgroups
                            .container(&self.uid, &self.specs[index].name),
                    );
                }
            }
            Msg::Probe(v) => {
                if self.runs[v.index].as_ref().is_some_and(|l| l.run == v.run) {
                    self.on_verdict(v);
                }
            }
        }
    }

    fn on_verdict(&mut self, v: Verdict) {
        let i = v.index;
        tracing::info!(pod = %self.name, ns = %self.ns, container = %self.specs[i].name, probe = ?v.kind, verdict = ?v.verdict, message = %v.message, "probe verdict changed");
        let has_readiness = self.specs[i].readiness_probe.is_some();
        match (v.kind, v.verdict) {
            (ProbeKind::Startup, ProbeVerdict::Success) => {
                self.ctrs[i].started = true;
                if !has_readiness {
                    self.ctrs[i].ready = true;
                }
            }
            (ProbeKind::Readiness, ProbeVerdict::Success) => {
                self.ctrs[i].ready = self.ctrs[i].started
            }
            (ProbeKind::Readiness, ProbeVerdict::Failure) => self.ctrs[i].ready = false,
            (ProbeKind::Startup | ProbeKind::Liveness, ProbeVerdict::Failure) => {
                let name = self.specs[i].name.clone();
                let what = if v.kind == ProbeKind::Startup {
                    "startup"
                } else {
                    "liveness"
                };
                self.event(
                    EventKind::Normal,
                    "Killing",
                    format!("Container {name} failed {what} probe, will be restarted"),
                    Some(&name),
                );
                let probe = if v.kind == ProbeKind::Startup {
                    &self.specs[i].startup_probe
                } else {
                    &self.specs[i].liveness_probe
                };
                let grace = probe
                    .as_ref()
                    .and_then(|p| p.termination_grace_period_seconds)
                    .or_else(|| {
                        self.pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.termination_grace_period_seconds)
                    })
                    .unwrap_or(30);
                self.kill(i, Duration::from_secs(grace.max(0) as u64).max(MIN_GRACE));
            }
            _ => {}
        }
    }

    fn event(&self, kind: EventKind, reason: &str, message: String, container: Option<&str>) {
        events::record(
            &self.ctx.client,
            &self.pod,
            &self.node,
            kind,
            reason,
            message,
            container,
        );
    }

    fn policy(&self) -> RestartPolicy {
        RestartPolicy::parse(
            self.pod
                .spec
                .as_ref()
                .and_then(|s| s.restart_policy.as_deref()),
        )
    }

    fn deletion_grace(&self) -> Duration {
        if self.gone {
            return MIN_GRACE;
        }
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        Duration::from_secs(secs.max(0) as u64).max(MIN_GRACE)
    }

    /// One pass: sandbox, volumes, container starts and stops, status.
    async fn sync(&mut self) {
        let now = Instant::now();
        let terminal = matches!(status::phase(&self.pod, &self.ctrs), "Succeeded" | "Failed");
        let idle = self.runs.iter().all(Option::is_none);
        if terminal && idle {
            self.release_sandbox();
        } else if self.retry_at.is_none_or(|t| t <= now) {
            self.retry_at = None;
            if self.ensure_sandbox().await && self.ensure_volumes().await {
                self.start_and_stop().await;
            }
        } else if self.volumes.is_some() {
            self.start_and_stop().await;
        }
        self.write_status().await;
    }

    async fn start_and_stop(&mut self) {
        if self.sources_dirty
            || self
                .tokens
                .next_refresh()
                .is_some_and(|t| t <= Instant::now())
        {
            self.refresh_volumes().await;
        }
        let plan = model::plan(&self.ctrs, Instant::now());
        self.plan_wake = plan.wake_at;
        for i in plan.stop {
            self.kill(i, self.deletion_grace());
        }
        for i in plan.start {
            self.start(i).await;
        }
        let next = model::plan(&self.ctrs, Instant::now());
        self.plan_wake = next.wake_at;
    }

    async fn ensure_sandbox(&mut self) -> bool {
        if self.sandbox.as_ref().is_some_and(|s| s.ready) {
            return true;
        }
        let slot = self.ctx.slot;
        let ip = match &self.sandbox {
            Some(s) => Some(s.ip),
            None => self
                .ctx
                .ipam
                .lock()
                .expect("ipam")
                .allocate(slot, self.node_index),
        };
        let Some(ip) = ip else {
            let message = format!("no free pod address left on {}", self.node);
            return self.waiting_all("ContainerCreating", message);
        };
        self.sandbox = Some(Sandbox { ip, ready: false });
        let uid = self.uid.clone();
        let etc = self.ctx.layout.etc_dir(&self.uid);
        let hosts = launch::etc_hosts(
            &self.pod,
            &ip.to_string(),
            &network::gateway(slot).to_string(),
        );
        let hostname = launch::hostname(&self.pod);
        let made = tokio::task::spawn_blocking(move || -> Result<(), String> {
            network::create_pod(slot, &uid, ip).map_err(|e| e.to_string())?;
            fs::create_dir_all(&etc).map_err(|e| e.to_string())?;
            fs::write(etc.join("hosts"), hosts).map_err(|e| e.to_string())?;
            fs::write(etc.join("hostname"), format!("{hostname}\n")).map_err(|e| e.to_string())?;
            fs::write(etc.join("resolv.conf"), launch::RESOLV_CONF).map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        match made {
            Ok(()) => {
                if let Some(s) = self.sandbox.as_mut() {
                    s.ready = true;
                }
                true
            }
            Err(e) => {
                tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "creating the pod sandbox");
                self.event(
                    EventKind::Warning,
                    "FailedCreatePodSandBox",
                    format!("Failed to create pod sandbox: {e}"),
                    None,
                );
                self.waiting_all(
                    "ContainerCreating",
                    format!("creating the pod sandbox: {e}"),
                )
            }
        }
    }

    /// Marks every container that never ran as waiting; schedules a retry; returns false.
    fn waiting_all(&mut self, reason: &str, message: String) -> bool {
        for c in self.ctrs.iter_mut().filter(|c| !c.ever_ran()) {
            c.state = RunState::Waiting {
                reason: reason.into(),
                message: Some(message.clone()),
            };
        }
        self.retry_at = Some(Instant::now() + RETRY);
        false
    }

    fn pod_context(&self) -> (String, String) {
        let ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip.to_string())
            .unwrap_or_default();
        (ip, network::gateway(self.ctx.slot).to_string())
    }

    async fn ensure_volumes(&mut self) -> bool {
        if self.volumes.is_some() {
            return true;
        }
        let pod_spec_volumes = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let projections = projection::token_projections(&pod_spec_volumes);
        let result = async {
            self.tokens
                .refresh(&self.ctx.client, &self.pod, &projections)
                .await
                .map_err(|e| ("token".to_string(), e))?;
            let claims = volumes::claims(&self.ctx.client, &self.pod)
                .await
                .map_err(|e| ("claim".to_string(), e))?;
            let (ip, gw) = self.pod_context();
            let pctx = PodContext {
                pod: &self.pod,
                pod_ip: &ip,
                host_ip: &gw,
                node_cpu: super::node::ALLOCATABLE.0,
                node_memory: super::node::ALLOCATABLE.1,
            };
            let objects = NamespaceObjects {
                ctx: &self.ctx,
                ns: &self.ns,
            };
            let src = volumes::Sources {
                layout: &self.ctx.layout,
                objects: &objects,
                tokens: &self.tokens,
                pod: &pctx,
            };
            volumes::materialize(&src, &claims)
        }
        .await;
        match result {
            Ok(dirs) => {
                self.volumes = Some(dirs);
                self.sources_dirty = false;
                true
            }
            Err((volume, message)) => {
                let text = format!("MountVolume.SetUp failed for volume \"{volume}\" : {message}");
                self.event(EventKind::Warning, "FailedMount", text.clone(), None);
                self.waiting_all("ContainerCreating", text)
            }
        }
    }

    async fn refresh_volumes(&mut self) {
        let pod_spec_volumes = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let projections = projection::token_projections(&pod_spec_volumes);
        if let Err(e) = self
            .tokens
            .refresh(&self.ctx.client, &self.pod, &projections)
            .await
        {
            tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "refreshing tokens");
        }
        let (ip, gw) = self.pod_context();
        let pctx = PodContext {
            pod: &self.pod,
            pod_ip: &ip,
            host_ip: &gw,
            node_cpu: super::node::ALLOCATABLE.0,
            node_memory: super::node::ALLOCATABLE.1,
        };
        let objects = NamespaceObjects {
            ctx: &self.ctx,
            ns: &self.ns,
        };
        let src = volumes::Sources {
            layout: &self.ctx.layout,
            objects: &objects,
            tokens: &self.tokens,
            pod: &pctx,
        };
        for (volume, e) in volumes::refresh(&src) {
            tracing::warn!(pod = %self.name, ns = %self.ns, volume, error = %e, "refreshing a volume");
        }
        self.sources_dirty = false;
    }

    /// Starts container `i` (a first run or a restart).
    async fn start(&mut self, i: usize) {
        let spec = self.specs[i].clone();
        let image = self
            .ctx
            .images
            .read()
            .expect("images")
            .resolve(spec.image.as_deref().unwrap_or_default());
        let image = match image.and_then(|r| r.check().map(|()| r)) {
            Ok(r) => r,
            Err(message) => {
                self.pull_failures[i] += 1;
                let n = self.pull_failures[i];
                let reason = if n == 1 {
                    "ErrImagePull"
                } else {
                    "ImagePullBackOff"
                };
                if n == 1 {
                    self.event(
                        EventKind::Warning,
                        "Failed",
                        format!("Failed to pull image \"{}\": {message}", self.ctrs[i].image),
                        Some(&spec.name),
                    );
                }
                return self.not_started(
                    i,
                    reason,
                    message,
                    Duration::from_secs((5u64 << (n - 1).min(4)).min(60)),
                );
            }
        };
        self.ctrs[i].image_id = Some(image.image_id.clone());
        let (ip, gw) = self.pod_context();
        let pctx = PodContext {
            pod: &self.pod,
            pod_ip: &ip,
            host_ip: &gw,
            node_cpu: super::node::ALLOCATABLE.0,
            node_memory: super::node::ALLOCATABLE.1,
        };
        let objects = NamespaceObjects {
            ctx: &self.ctx,
            ns: &self.ns,
        };
        let env = envvars::resolve(&spec, &pctx, &objects, &envvars::service_env(&gw));
        let creds = launch::credentials(&self.pod, &spec);
        let (env, creds) = match (env, creds) {
            (Ok(e), Ok(c)) => (e, c),
            (Err(m), _) | (_, Err(m)) => {
                self.event(
                    EventKind::Warning,
                    "Failed",
                    format!("Error: {m}"),
                    Some(&spec.name),
                );
                return self.not_started(i, "CreateContainerConfigError", m, RETRY);
            }
        };
        let hostname = launch::hostname(&self.pod);
        let argv = launch::argv(&spec, &image.entry, &env);
        let mut full_env = launch::base_env(&image.entry, &hostname, creds.uid);
        full_env.extend(env.clone());
        let mounts = match self.mounts(&spec, &image.entry, &env) {
            Ok(m) => m,
            Err(m) => return self.not_started(i, "CreateContainerError", m, RETRY),
        };
        let working_dir = spec
            .working_dir
            .clone()
            .filter(|w| !w.is_empty())
            .or(image.entry.working_dir.clone())
            .unwrap_or_else(|| "/".into());
        let ever = self.ctrs[i].ever_ran();
        let restart = if ever {
            self.ctrs[i].restart_count + 1
        } else {
            0
        };
        let run_spec = RunSpec {
            netns: PathBuf::from("/run/netns")
                .join(super::layout::netns_name(self.ctx.slot, &self.uid)),
            cgroup: self.ctx.cgroups.container(&self.uid, &spec.name),
            shim_cgroup: self.ctx.cgroups.shims(),
            log: self
                .ctx
                .layout
                .log_file(&self.ns, &self.name, &self.uid, &spec.name, restart),
            start_error: self
                .ctx
                .layout
                .container_dir(&self.uid, &spec.name)
                .join("start-error"),
            scratch: self
                .ctx
                .layout
                .container_dir(&self.uid, &spec.name)
                .join("scratch"),
            hostname,
            mounts,
            read_only_root: spec
                .security_context
                .as_ref()
                .and_then(|s| s.read_only_root_filesystem)
                .unwrap_or(false),
            no_new_privs: spec
                .security_context
                .as_ref()
                .and_then(|s| s.allow_privilege_escalation)
                == Some(false),
            argv,
            env: full_env.clone().into_iter().collect(),
            working_dir: working_dir.clone(),
            uid: creds.uid,
            gid: creds.gid,
            groups: creds.groups.clone(),
        };
        let spec_path = match prepare_run(
            &run_spec,
            &self.ctx.layout.container_dir(&self.uid, &spec.name),
        ) {
            Ok(p) => p,
            Err(m) => return self.not_started(i, "CreateContainerError", m, RETRY),
        };
        let run = self.next_run;
        self.next_run += 1;
        if !ever {
            self.event(
                EventKind::Normal,
                "Pulled",
                format!(
                    "Container image \"{}\" already present on machine (mapped to host programs)",
                    self.ctrs[i].image
                ),
                Some(&spec.name),
            );
        }
        match runtime::launch(&spec_path, &run_spec.cgroup).await {
            Ok(launched) => {
                let pid = launched.pid;
                let c = &mut self.ctrs[i];
                if let RunState::Terminated(t) = &c.state {
                    c.last_terminated = Some(t.clone());
                }
                if ever {
                    c.restart_count += 1;
                }
                c.state = RunState::Running {
                    started_at: now_time(),
                    container_id: format!("proc://{pid}"),
                };
                c.started = spec.startup_probe.is_none();
                c.ready = c.started && spec.readiness_probe.is_none();
                c.restart_at = None;
                self.pull_failures[i] = 0;
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let exit = launched.wait().await;
                    let _ = tx.send(Msg::Exited {
                        index: i,
                        run,
                        exit,
                    });
                });
                let started = Instant::now();
                let prober = probe_run::has_probes(&spec).then(|| {
                    let exec = probe_run::exec_context(
                        pid,
                        run_spec.cgroup.clone(),
                        run_spec.env.clone(),
                        &creds,
                        working_dir,
                    );
                    let target = Target {
                        pod_ip: ip.clone(),
                        ports: spec
                            .ports
                            .iter()
                            .flatten()
                            .filter_map(|p| Some((p.name.clone()?, p.container_port)))
                            .collect(),
                        exec,
                    };
                    let prober = Prober {
                        client: self.ctx.client.clone(),
                        http: self.ctx.http.clone(),
                        pod: self.pod.clone(),
                        node: self.node.clone(),
                        index: i,
                        run,
                        tx: self.tx.clone(),
                    };
                    tokio::spawn(prober.run(spec.clone(), target, started.into()))
                });
                self.runs[i] = Some(Live { run, pid, prober });
                self.ctx.note_run(
                    &self.ns,
                    &self.name,
                    &self.uid,
                    &spec.name,
                    self.ctrs[i].restart_count,
                    true,
                );
                self.event(
                    EventKind::Normal,
                    "Created",
                    format!("Created container {}", spec.name),
                    Some(&spec.name),
                );
                self.event(
                    EventKind::Normal,
                    "Started",
                    format!("Started container {}", spec.name),
                    Some(&spec.name),
                );
            }
            Err(message) => {
                // The shim could not even start init: report it like a start error.
                let t = Terminated {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError".into(),
                    message: Some(message),
                    started_at: None,
                    finished_at: now_time(),
                    container_id: None,
                };
                self.finish(i, t);
            }
        }
    }

    /// A container that could not be started waits with `reason`, retried after `retry`.
    fn not_started(&mut self, i: usize, reason: &str, message: String, retry: Duration) {
        let c = &mut self.ctrs[i];
        c.state = RunState::Waiting {
            reason: reason.into(),
            message: Some(message),
        };
        c.restart_at = Some(Instant::now() + retry);
    }

    fn mounts(
        &self,
        spec: &Container,
        image: &images::ImageEntry,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<Mount>, String> {
        let mut mounts: Vec<Mount> = image
            .files
            .iter()
            .map(|(target, host)| Mount {
                source: host.into(),
                target: target.clone(),
                read_only: true,
            })
            .collect();
        let etc = self.ctx.layout.etc_dir(&self.uid);
        for f in ["hosts", "hostname", "resolv.conf"] {
            mounts.push(Mount {
                source: etc.join(f),
                target: format!("/etc/{f}"),
                read_only: false,
            });
        }
        let log = self
            .ctx
            .layout
            .container_dir(&self.uid, &spec.name)
            .join("termination-log");
        mounts.push(Mount {
            source: log,
            target: spec
                .termination_message_path
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/dev/termination-log".into()),
            read_only: false,
        });
        let dirs = self.volumes.as_ref().ok_or("volumes not ready")?;
        for vm in spec.volume_mounts.iter().flatten() {
            let dir = dirs
                .get(&vm.name)
                .ok_or_else(|| format!("volume {} is not defined", vm.name))?;
            let sub = match (&vm.sub_path, &vm.sub_path_expr) {
                (Some(s), _) if !s.is_empty() => Some(s.clone()),
                (_, Some(e)) if !e.is_empty() => {
                    Some(super::expand::expand(e, |k| env.get(k).cloned()))
                }
                _ => None,
            };
            let source = match sub {
                Some(s) if s.split('/').any(|c| c == "..") || s.starts_with('/') => {
                    return Err(format!(
                        "subPath {s:?} must be a relative path without '..'"
                    ));
                }
                Some(s) => {
                    let p = dir.join(&s);
                    if !p.exists() {
                        fs::create_dir_all(&p).map_err(|e| format!("creating subPath {s}: {e}"))?;
                        let _ = fs::set_permissions(
                            &p,
                            std::os::unix::fs::PermissionsExt::from_mode(0o777),
                        );
                    }
                    p
                }
                None => dir.clone(),
            };
            mounts.push(Mount {
                source,
                target: vm.mount_path.clone(),
                read_only: vm.read_only == Some(true),
            });
        }
        Ok(mounts)
    }

    fn on_exit(&mut self, i: usize, exit: Exit) {
        let Some(live) = self.runs[i].take() else {
            return;
        };
        if let Some(p) = live.prober {
            p.abort();
        }
        let dir = self
            .ctx
            .layout
            .container_dir(&self.uid, &self.specs[i].name);
        let start_error = fs::read_to_string(dir.join("start-error")).unwrap_or_default();
        let code = exit.exit_code();
        let (reason, message) = if code == 128 && !start_error.is_empty() {
            ("StartError", Some(start_error))
        } else {
            let reason = if code == 0 { "Completed" } else { "Error" };
            (reason, self.termination_message(i, code))
        };
        let started_at = match &self.ctrs[i].state {
            RunState::Running { started_at, .. } => Some(started_at.clone()),
            _ => None,
        };
        let t = Terminated {
            exit_code: code,
            signal: exit.signal,
            reason: reason.into(),
            message,
            started_at,
            finished_at: now_time(),
            container_id: Some(format!("proc://{}", live.pid)),
        };
        tracing::info!(pod = %self.name, ns = %self.ns, container = %self.specs[i].name, code, signal = ?exit.signal, "container exited");
        self.finish(i, t);
    }

    /// Records an exit and decides about the restart.
    fn finish(&mut self, i: usize, t: Terminated) {
        let terminating =
            self.shutdown || self.gone || self.pod.metadata.deletion_timestamp.is_some();
        let restart =
            !terminating && model::should_restart(self.ctrs[i].kind, self.policy(), t.exit_code);
        let name = self.specs[i].name.clone();
        let c = &mut self.ctrs[i];
        c.ready = false;
        c.started = false;
        if !restart {
            c.state = RunState::Terminated(t);
            c.restart_at = None;
        } else {
            let now = Instant::now();
            let at = self.backoffs[i].next_start(self.ctx.backoff, now);
            c.restart_at = Some(at);
            if at > now {
                let delay = at - now;
                let message = format!(
                    "back-off {}s restarting failed container={name} pod={}_{}({})",
                    delay.as_secs(),
                    self.name,
                    self.ns,
                    self.uid
                );
                c.last_terminated = Some(t);
                c.state = RunState::Waiting {
                    reason: "CrashLoopBackOff".into(),
                    message: Some(message.clone()),
                };
                self.event(
                    EventKind::Warning,
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {name} in pod {}_{}({})",
                        self.name, self.ns, self.uid
                    ),
                    Some(&name),
                );
            } else {
                c.state = RunState::Terminated(t);
            }
        }
        let restarts = self.ctrs[i].restart_count;
        self.ctx
            .note_run(&self.ns, &self.name, &self.uid, &name, restarts, false);
    }

    /// The container's termination message: its termination-log file, else (with
    /// `FallbackToLogsOnError` and a failure) the end of its log.
    fn termination_message(&self, i: usize, code: i32) -> Option<String> {
        let spec = &self.specs[i];
        let dir = self.ctx.layout.container_dir(&self.uid, &spec.name);
        let text = fs::read(dir.join("termination-log")).unwrap_or_default();
        if !text.is_empty() {
            return Some(String::from_utf8_lossy(&text[..text.len().min(4096)]).into_owned());
        }
        if code != 0 && spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
        {
            let restart = self.ctrs[i].restart_count;
            let log = fs::read(
                self.ctx
                    .layout
                    .log_file(&self.ns, &self.name, &self.uid, &spec.name, restart),
            )
            .unwrap_or_default();
            let tail = &log[log.len().saturating_sub(2048)..];
            return Some(String::from_utf8_lossy(tail).into_owned());
        }
        None
    }

    /// SIGTERM now, SIGKILL after `grace` (at once when zero).
    fn kill(&mut self, i: usize, grace: Duration) {
        let Some(live) = &self.runs[i] else {
            return;
        };
        if grace.is_zero() {
            let _ = cgroup::kill_now(self.ctx.cgroups.container(&self.uid, &self.specs[i].name));
            return;
        }
        runtime::signal(live.pid, Signal::SIGTERM);
        let tx = self.tx.clone();
        let (index, run) = (i, live.run);
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = tx.send(Msg::Escalate { index, run });
        });
    }

    async fn write_status(&mut self) {
        let (ip, gw) = self.pod_context();
        let pod_ip = (!ip.is_empty()).then_some(ip);
        let now = now_time();
        let input = status::Input {
            pod: &self.pod,
            host_ip: &gw,
            pod_ip: pod_ip.as_deref(),
            start_time: &self.start_time,
            sandbox_ready: self.sandbox.as_ref().is_some_and(|s| s.ready),
            ctrs: &self.ctrs,
            now: &now,
        };
        let computed = status::compute(&input);
        if self.written.as_ref() == Some(&computed) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let body = serde_json::json!({ "status": computed });
        match api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(&body),
            )
            .await
        {
            Ok(p) => {
                self.written = Some(computed);
                self.status_retry_at = None;
                self.pod = Arc::new(p);
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                self.written = Some(computed);
            }
            Err(e) => {
                tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "writing pod status");
                self.status_retry_at = Some(Instant::now() + Duration::from_secs(1));
            }
        }
    }

    /// Stops every container (SIGTERM, SIGKILL after `grace`), removes the pod's sandbox,
    /// cgroups and files, and deletes the pod object unless the agent is shutting down.
    async fn terminate(&mut self, grace: Duration) {
        for i in 0..self.runs.len() {
            if self.runs[i].is_some() {
                if !grace.is_zero() {
                    let name = self.specs[i].name.clone();
                    self.event(
                        EventKind::Normal,
                        "Killing",
                        format!("Stopping container {name}"),
                        Some(&name),
                    );
                }
                self.kill(i, grace);
            }
        }
        // Every run reports its exit; the escalation timers guarantee it.
        let deadline = Instant::now() + grace + Duration::from_secs(30);
        while self.runs.iter().any(Option::is_some) {
            let msg = tokio::select! {
                m = self.rx.recv() => m,
                _ = tokio::time::sleep_until(deadline.into()) => None,
            };
            match msg {
                Some(Msg::Pod(p)) => self.pod = Arc::new(*p),
                Some(m @ (Msg::Exited { .. } | Msg::Escalate { .. })) => self.handle(m),
                Some(Msg::Shutdown) => {
                    for i in 0..self.runs.len() {
                        self.kill(i, Duration::ZERO);
                    }
                }
                Some(_) => {}
                None => {
                    tracing::error!(pod = %self.name, ns = %self.ns, "containers did not report their exit; killing the pod's cgroup");
                    let cg = self.ctx.cgroups.pod(&self.uid);
                    let _ = tokio::task::spawn_blocking(move || cgroup::kill(&cg)).await;
                    break;
                }
            }
        }
        self.release_sandbox();
        let cg = self.ctx.cgroups.pod(&self.uid);
        let dir = self.ctx.layout.pod_dir(&self.uid);
        let _ = tokio::task::spawn_blocking(move || {
            let _ = cgroup::kill(&cg);
            let _ = cgroup::remove_tree(&cg);
            let _ = fs::remove_dir_all(dir);
        })
        .await;
        if self.shutdown || self.gone {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&self.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "deleting the pod")
            }
        }
    }

    /// Removes the network namespace and returns the address (the status keeps showing it).
    fn release_sandbox(&mut self) {
        let Some(s) = self.sandbox.as_mut() else {
            return;
        };
        if !s.ready {
            return;
        }
        s.ready = false;
        let ip = s.ip;
        if let Err(e) = network::delete_pod(self.ctx.slot, &self.uid) {
            tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "removing the network namespace");
        }
        self.ctx.ipam.lock().expect("ipam").release(ip);
    }
}

/// Writes `spec` into `dir` (fresh scratch, empty start-error and termination log, the
/// container's cgroup) and returns the spec file's path.
fn prepare_run(spec: &RunSpec, dir: &std::path::Path) -> Result<PathBuf, String> {
    fn e(what: &'static str) -> impl Fn(std::io::Error) -> String {
        move |err| format!("{what}: {err}")
    }
    fs::create_dir_all(dir).map_err(e("container directory"))?;
    if spec.scratch.exists() {
        fs::remove_dir_all(&spec.scratch).map_err(e("old scratch"))?;
    }
    fs::create_dir_all(&spec.scratch).map_err(e("scratch"))?;
    let _ = fs::remove_file(&spec.start_error);
    let term = dir.join("termination-log");
    fs::write(&term, b"").map_err(e("termination log"))?;
    fs::set_permissions(&term, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .map_err(e("termination log"))?;
    if let Some(parent) = spec.log.parent() {
        fs::create_dir_all(parent).map_err(e("log directory"))?;
    }
    if spec.cgroup.exists() {
        let _ = cgroup::kill(&spec.cgroup);
    } else {
        fs::create_dir_all(&spec.cgroup).map_err(e("container cgroup"))?;
    }
    let path = dir.join("spec.json");
    fs::write(
        &path,
        serde_json::to_vec_pretty(spec).map_err(|err| err.to_string())?,
    )
    .map_err(e("spec"))?;
    Ok(path)
}

/// Live runs per container, for the kubelet endpoint's log streaming.
pub type RunRegistry = HashMap<(String, String), (String, HashMap<String, (i32, bool)>)>;
