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
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodStatus, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::agent::Ctx;
use super::backoff::BackOff;
use super::envvars::Objects;
use super::events::{self, Kind as EventKind};
use super::model::{self, Ctr, CtrKind, RestartPolicy};
use super::probe::{Kind as ProbeKind, Verdict as ProbeVerdict};
use super::probe_run::Verdict;
use super::runtime::Exit;
use super::status;
mod containers;
mod sandbox;

use super::{cgroup, tokens};

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
}

/// Live runs per container, for the kubelet endpoint's log streaming.
pub type RunRegistry = HashMap<(String, String), (String, HashMap<String, (i32, bool)>)>;
