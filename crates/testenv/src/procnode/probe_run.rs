//! The prober of one container run: startup first, then liveness and readiness side by side,
//! each on its own timer, with the state machines of [`super::probe`].
//!
//! Contract:
//! - Checks: `httpGet` (from the host to the pod's address or `host`; 200–399 passes;
//!   no proxies, certificates not verified, as the kubelet), `tcpSocket` (a connection opens),
//!   `exec` (the command runs inside the container's namespaces and cgroup, as the container's
//!   user, and exits 0). `grpc` probes are not supported and always fail, saying so.
//! - Every failed run records an `Unhealthy` Event; only verdict changes go to the pod
//!   worker ([`Verdict`]). A liveness or startup `Failure` ends the prober: the worker kills
//!   the container, and a restarted container gets a new prober.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::events::{self, Kind as EventKind};
use super::probe::{Kind, Timing, Tracker, Verdict as ProbeVerdict};
use super::spec::ExecSpec;

/// A verdict change, for the pod worker.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Which container (index in the worker's list).
    pub index: usize,
    /// Which run of it.
    pub run: u64,
    /// Which probe.
    pub kind: Kind,
    /// The new verdict.
    pub verdict: ProbeVerdict,
    /// The last check's message.
    pub message: String,
}

/// Where the checks go.
#[derive(Debug, Clone)]
pub struct Target {
    /// The pod's address.
    pub pod_ip: String,
    /// Named container ports.
    pub ports: BTreeMap<String, i32>,
    /// For exec checks: the container's init pid, cgroup, environment and credentials.
    pub exec: ExecSpec,
}

/// What the prober needs from the agent.
#[derive(Clone)]
pub struct Prober {
    /// For Events.
    pub client: kube::Client,
    /// For httpGet.
    pub http: reqwest::Client,
    /// The pod (for Events).
    pub pod: Arc<Pod>,
    /// The node (for Events).
    pub node: String,
    /// Container index and run.
    pub index: usize,
    /// See `index`.
    pub run: u64,
    /// Where verdicts go (the pod worker's inbox).
    pub tx: UnboundedSender<super::worker::Msg>,
}

/// Whether the container has any probe.
pub fn has_probes(c: &Container) -> bool {
    c.startup_probe.is_some() || c.liveness_probe.is_some() || c.readiness_probe.is_some()
}

impl Prober {
    /// Probes `container` (started at `started`) until a fatal verdict or until dropped.
    pub async fn run(self, container: Container, target: Target, started: Instant) {
        if let Some(p) = &container.startup_probe
            && !self
                .probe_loop(Kind::Startup, p, &container.name, &target, started)
                .await
        {
            return;
        }
        let readiness = async {
            if let Some(p) = &container.readiness_probe {
                self.probe_loop(Kind::Readiness, p, &container.name, &target, started)
                    .await;
            }
        };
        let liveness = async {
            if let Some(p) = &container.liveness_probe {
                self.probe_loop(Kind::Liveness, p, &container.name, &target, started)
                    .await;
            }
        };
        tokio::join!(readiness, liveness);
    }

    /// Runs one probe; returns true when it passed for good (startup) and false when it failed
    /// for good (startup, liveness). Readiness runs until dropped.
    async fn probe_loop(
        &self,
        kind: Kind,
        p: &Probe,
        name: &str,
        target: &Target,
        started: Instant,
    ) -> bool {
        let timing = Timing::of(p);
        let mut tracker = Tracker::new(kind, timing);
        tokio::time::sleep_until(started + timing.initial_delay).await;
        loop {
            let (passed, message) = check(p, &timing, target, &self.http).await;
            if !passed {
                events::record(
                    &self.client,
                    &self.pod,
                    &self.node,
                    EventKind::Warning,
                    "Unhealthy",
                    format!("{} probe failed: {message}", kind.title()),
                    Some(name),
                );
            }
            if let Some(v) = tracker.record(passed) {
                let _ = self.tx.send(super::worker::Msg::Probe(Verdict {
                    index: self.index,
                    run: self.run,
                    kind,
                    verdict: v,
                    message: message.clone(),
                }));
                match (kind, v) {
                    (Kind::Startup, ProbeVerdict::Success) => return true,
                    (Kind::Startup | Kind::Liveness, ProbeVerdict::Failure) => return false,
                    _ => {}
                }
            }
            tokio::time::sleep(timing.period).await;
        }
    }
}

fn port(p: &IntOrString, target: &Target) -> Result<i32, String> {
    match p {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => s
            .parse()
            .ok()
            .or_else(|| target.ports.get(s).copied())
            .ok_or_else(|| format!("port {s:?} is not a container port")),
    }
}

/// One check: (passed, message).
pub async fn check(
    p: &Probe,
    timing: &Timing,
    target: &Target,
    http: &reqwest::Client,
) -> (bool, String) {
    let result = if let Some(h) = &p.http_get {
        http_check(h, timing, target, http).await
    } else if let Some(t) = &p.tcp_socket {
        tcp_check(t, timing, target).await
    } else if let Some(e) = &p.exec {
        exec_check(e.command.clone().unwrap_or_default(), timing, target).await
    } else if p.grpc.is_some() {
        Err("gRPC probes are not supported on process-backed nodes".into())
    } else {
        Err("the probe names no handler".into())
    };
    match result {
        Ok(m) => (true, m),
        Err(m) => (false, m),
    }
}

async fn http_check(
    h: &k8s_openapi::api::core::v1::HTTPGetAction,
    timing: &Timing,
    target: &Target,
    http: &reqwest::Client,
) -> Result<String, String> {
    let port = port(&h.port, target)?;
    let host = h
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| target.pod_ip.clone());
    let scheme = h.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
    let path = h.path.clone().unwrap_or_else(|| "/".into());
    let path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let url = format!("{scheme}://{host}:{port}{path}");
    let mut req = http.get(&url).timeout(timing.timeout);
    for header in h.http_headers.iter().flatten() {
        req = req.header(header.name.as_str(), header.value.as_str());
    }
    match req.send().await {
        Ok(resp) if (200..400).contains(&resp.status().as_u16()) => Ok(String::new()),
        Ok(resp) => Err(format!(
            "HTTP probe failed with statuscode: {}",
            resp.status().as_u16()
        )),
        Err(e) => Err(format!("Get \"{url}\": {}", error_chain(&e))),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

async fn tcp_check(
    t: &k8s_openapi::api::core::v1::TCPSocketAction,
    timing: &Timing,
    target: &Target,
) -> Result<String, String> {
    let port = port(&t.port, target)?;
    let host = t
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| target.pod_ip.clone());
    match tokio::time::timeout(
        timing.timeout,
        tokio::net::TcpStream::connect((host.as_str(), port as u16)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(String::new()),
        Ok(Err(e)) => Err(format!("dial tcp {host}:{port}: {e}")),
        Err(_) => Err(format!("dial tcp {host}:{port}: i/o timeout")),
    }
}

/// Runs `spec` in its container with the `proc-node` executable `exe` (exec probes and the
/// tests' exec helper); (exit code, stdout + stderr).
pub async fn exec_in(exe: &std::path::Path, spec: &ExecSpec) -> Result<(i32, String), String> {
    let mut child = tokio::process::Command::new(exe)
        .args(["exec", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting the exec helper: {e}"))?;
    let json = serde_json::to_vec(spec).map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&json).await.map_err(|e| e.to_string())?;
    }
    let limit = Duration::from_millis(spec.timeout_ms) + Duration::from_secs(2);
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| "command timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code().unwrap_or(137), text))
}

async fn exec_check(argv: Vec<String>, timing: &Timing, target: &Target) -> Result<String, String> {
    let spec = ExecSpec {
        argv,
        timeout_ms: timing.timeout.as_millis() as u64,
        ..target.exec.clone()
    };
    match exec_in(std::path::Path::new("/proc/self/exe"), &spec).await {
        Ok((0, out)) => Ok(out),
        Ok((124, _)) => Err(format!("command {:?} timed out", spec.argv)),
        Ok((code, out)) => Err(format!(
            "command {:?} exited with {code}: {}",
            spec.argv,
            truncate(&out)
        )),
        Err(e) => Err(e),
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(1024).collect()
}

/// The exec context of a running container (init pid, cgroup, env, credentials).
pub fn exec_context(
    pid: i32,
    cgroup: PathBuf,
    env: Vec<(String, String)>,
    creds: &super::launch::Credentials,
    working_dir: String,
) -> ExecSpec {
    ExecSpec {
        pid,
        cgroup,
        argv: Vec::new(),
        env,
        working_dir,
        uid: creds.uid,
        gid: creds.gid,
        groups: creds.groups.clone(),
        timeout_ms: 1000,
    }
}
