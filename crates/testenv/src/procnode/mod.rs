//! Process-backed nodes: three more nodes of the local plane whose pods are real host
//! processes, run by our own agent (`proc-node`, started by [`crate::up`]) acting as their
//! kubelet. See docs/testenv.md and docs/adr/0005-process-backed-nodes.md.
//!
//! Contract for users (tests, the demo):
//! - Nodes [`NODES`] (`proc-node-0..2`, zones `zone-a..c`) carry the taint
//!   `flotilla.dev/process-node=true:NoSchedule` and the label `flotilla.dev/process-node=true`.
//!   A pod lands there only if it tolerates the taint; add the nodeSelector too so it cannot
//!   land on a kwok node instead: [`place`] / [`placement`] do both.
//! - Images are mapped to host programs ([`images`] module doc, [`register_image`]); an
//!   unmapped image leaves the container waiting in `ErrImagePull`.
//! - Pods get addresses `127.<2+slot>.<node>.x`, reachable from the host; from inside a pod,
//!   the host is [`gateway`] (127.0.0.1 is the pod's own loopback).
//! - Helpers act on a running container: [`signal`], [`freeze`], [`thaw`], [`exec`], and read
//!   its output: [`logs`].
//!
//! The agent's parts: `agent` (process), `worker` (one per pod), `model`/`status`/`probe`/
//! `backoff`/`envvars`/`expand`/`projection`/`launch`/`images` (pure decisions, table-tested),
//! `network`, `cgroup`, `volumes`, `tokens`, `runtime`/`shim`/`init`/`enter` (processes),
//! `node`, `events`, `kubelet_server`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec, Toleration};
use kube::api::{Api, Patch, PatchParams};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

mod agent;
mod atomic;
mod backoff;
mod cgroup;
mod enter;
mod envvars;
mod events;
mod expand;
pub mod images;
mod init;
mod kubelet_server;
mod launch;
mod layout;
mod model;
pub mod network;
mod node;
mod probe;
mod probe_run;
mod projection;
mod quantity;
mod runtime;
mod shim;
mod spec;
mod status;
mod tokens;
mod volumes;
mod worker;

pub use images::ImageEntry;
pub use layout::Layout;

use crate::plane;

/// The process-backed nodes, in zone order (`zone-a`, `zone-b`, `zone-c`).
pub const NODES: [&str; 3] = ["proc-node-0", "proc-node-1", "proc-node-2"];
/// Taint key (value `true`, effect `NoSchedule`) on every process-backed node.
pub const TAINT: &str = "flotilla.dev/process-node";
/// Label (value `true`) on every process-backed node.
pub const LABEL: &str = "flotilla.dev/process-node";
/// Name of the agent's executable.
pub const AGENT: &str = "proc-node";

/// What the agent writes to `<plane>/procnode/ready.json` once its nodes are registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// The pod network slot.
    pub slot: u8,
    /// The agent's pid.
    pub pid: u32,
    /// The gateway address.
    pub gateway: String,
}

/// Entry point of the `proc-node` executable; returns the exit code.
pub fn main(args: Vec<String>) -> i32 {
    #[derive(clap::Parser)]
    #[command(name = AGENT, about = "Flotilla's process-backed node agent")]
    enum Cli {
        /// Run the agent (started by `cargo xtask up`).
        Agent(agent::Args),
        /// Internal: a container's shim.
        Shim { spec: PathBuf },
        /// Internal: a container's init.
        Init { spec: PathBuf },
        /// Internal: run a process in a container (`-` reads the spec from stdin).
        Exec { spec: PathBuf },
    }
    let cli = match <Cli as clap::Parser>::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return 2;
        }
    };
    match cli {
        Cli::Agent(a) => agent::main(a),
        Cli::Shim { spec } => shim::main(&spec),
        Cli::Init { spec } => init::main(&spec),
        Cli::Exec { spec } => enter::main(&spec),
    }
}

/// Installs what the process-backed nodes need on the host when missing: iproute2 (`ip`, for
/// the pod networks) and redis-tools (the `redis` image's host programs).
pub fn ensure_host_packages() -> anyhow::Result<()> {
    crate::packages::ensure(
        "/usr/sbin/ip",
        "iproute2",
        "pod networks of the process-backed nodes",
    )?;
    crate::packages::ensure(
        "/usr/bin/redis-check-rdb",
        "redis-tools",
        "the redis image on process-backed nodes",
    )
}

/// The toleration of the process-backed nodes' taint.
pub fn toleration() -> Toleration {
    Toleration {
        key: Some(TAINT.into()),
        operator: Some("Equal".into()),
        value: Some("true".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    }
}

/// `tolerations` and `nodeSelector` that put a pod on a process-backed node, as JSON to merge
/// into a pod spec (or a pod template's spec).
pub fn placement() -> serde_json::Value {
    serde_json::json!({
        "tolerations": [{"key": TAINT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        "nodeSelector": {LABEL: "true"},
    })
}

/// Adds the toleration and the nodeSelector to `spec`.
pub fn place(spec: &mut PodSpec) {
    spec.tolerations
        .get_or_insert_with(Vec::new)
        .push(toleration());
    spec.node_selector
        .get_or_insert_with(BTreeMap::new)
        .insert(LABEL.into(), "true".into());
}

/// The running plane's pod network slot, from its state.
pub fn slot() -> anyhow::Result<u8> {
    plane::read_state()
        .and_then(|s| s.pod_network_slot)
        .ok_or_else(|| {
            anyhow::anyhow!("no process-backed nodes recorded: start the plane with cargo xtask up")
        })
}

/// The host's address as pods see it (where host services that pods dial must listen).
pub fn gateway() -> anyhow::Result<std::net::Ipv4Addr> {
    Ok(network::gateway(slot()?))
}

/// The running agent's executable (for the exec helper).
fn agent_executable() -> anyhow::Result<PathBuf> {
    plane::read_state()
        .and_then(|s| s.procs.into_iter().find(|p| p.name == AGENT))
        .map(|p| PathBuf::from(p.binary))
        .ok_or_else(|| anyhow::anyhow!("the {AGENT} agent is not recorded in the plane's state"))
}

/// Builds the agent (`cargo build -p testenv --bin proc-node`) and returns its path;
/// `FLOTILLA_PROC_NODE=<path>` skips the build.
pub fn build_agent() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("FLOTILLA_PROC_NODE") {
        return Ok(PathBuf::from(p));
    }
    let manifest = crate::workspace_root().join("Cargo.toml");
    let manifest = manifest.to_string_lossy();
    let args = [
        "--quiet",
        "-p",
        "testenv",
        "--bin",
        AGENT,
        "--manifest-path",
        &manifest,
    ];
    crate::cargo::build_executable(&args, AGENT)
}

/// A container of a pod on a process-backed node, as the helpers find it.
struct Found {
    uid: String,
    pid: i32,
    cgroup: PathBuf,
}

async fn find(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
) -> anyhow::Result<Found> {
    let p = Api::<Pod>::namespaced(client.clone(), ns).get(pod).await?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let statuses = p.status.as_ref().into_iter().flat_map(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
    });
    let status = statuses
        .into_iter()
        .find(|s| s.name == container)
        .ok_or_else(|| anyhow::anyhow!("pod {ns}/{pod} reports no container {container}"))?;
    let running = status
        .state
        .as_ref()
        .and_then(|s| s.running.as_ref())
        .is_some();
    let pid: i32 = status
        .container_id
        .as_deref()
        .and_then(|id| id.strip_prefix("proc://"))
        .and_then(|p| p.parse().ok())
        .filter(|_| running)
        .ok_or_else(|| anyhow::anyhow!("container {container} of {ns}/{pod} is not running"))?;
    let cgroup = cgroup::Subtree::of(slot()?)?.container(&uid, container);
    // Guard against pid reuse: the process must still be in that container's cgroup.
    anyhow::ensure!(
        cgroup::procs(&cgroup).contains(&pid),
        "process {pid} is no longer container {container} of {ns}/{pod}"
    );
    Ok(Found { uid, pid, cgroup })
}

/// Sends `sig` to the container's main process (its PID 1; SIGKILL kills the container).
pub async fn signal(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
    sig: Signal,
) -> anyhow::Result<i32> {
    let f = find(client, ns, pod, container).await?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(f.pid), sig)?;
    Ok(f.pid)
}

/// Sends `sig` to the processes of the container whose command name is `comm`: their
/// `/proc/<pid>/comm` (as `pkill -x` matches it) or the first word of their command line (a
/// process started under another `argv[0]`, or one that rewrites its title as redis-server
/// does), e.g. a child the container's main process supervises; returns their PIDs (empty:
/// none runs now).
pub async fn signal_command(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
    comm: &str,
    sig: Signal,
) -> anyhow::Result<Vec<i32>> {
    let f = find(client, ns, pod, container).await?;
    let mut out = Vec::new();
    for pid in cgroup::procs(&f.cgroup) {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv0 = String::from_utf8_lossy(&cmdline);
        let argv0 = argv0.split(['\0', ' ']).next().unwrap_or_default();
        let argv0 = argv0.rsplit('/').next().unwrap_or_default();
        if name.trim_end() == comm || argv0 == comm {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)?;
            out.push(pid);
        }
    }
    Ok(out)
}

/// Freezes every process of the container (a stall: it keeps its sockets but answers
/// nothing); [`thaw`] resumes it.
pub async fn freeze(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
) -> anyhow::Result<()> {
    let f = find(client, ns, pod, container).await?;
    cgroup::freeze(&f.cgroup, true)?;
    Ok(())
}

/// Resumes a frozen container.
pub async fn thaw(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
) -> anyhow::Result<()> {
    let f = find(client, ns, pod, container).await?;
    cgroup::freeze(&f.cgroup, false)?;
    Ok(())
}

/// Is the container frozen?
pub async fn frozen(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
) -> anyhow::Result<bool> {
    let f = find(client, ns, pod, container).await?;
    Ok(cgroup::frozen(&f.cgroup))
}

/// Runs `argv` inside the running container (its namespaces, user, environment and working
/// directory), like `kubectl exec`; returns the exit code and stdout + stderr.
pub async fn exec(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
    argv: &[&str],
) -> anyhow::Result<(i32, String)> {
    let f = find(client, ns, pod, container).await?;
    let layout = Layout::new(&plane::plane_dir());
    let run: spec::RunSpec = serde_json::from_slice(&std::fs::read(
        layout.container_dir(&f.uid, container).join("spec.json"),
    )?)?;
    let spec = spec::ExecSpec {
        pid: f.pid,
        cgroup: f.cgroup,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: run.env,
        working_dir: run.working_dir,
        uid: run.uid,
        gid: run.gid,
        groups: run.groups,
        timeout_ms: 60_000,
    };
    probe_run::exec_in(&agent_executable()?, &spec)
        .await
        .map_err(|e| anyhow::anyhow!(e))
}

/// The output (stdout and stderr, interleaved) of a container's run: the current one, or
/// with `previous` the one before (after a restart), as `kubectl logs [--previous]`.
pub fn logs(pod: &Pod, container: &str, previous: bool) -> anyhow::Result<String> {
    let status = pod.status.as_ref().into_iter().flat_map(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
    });
    let restarts = status
        .into_iter()
        .find(|s| s.name == container)
        .map(|s| s.restart_count)
        .unwrap_or(0);
    let run = if previous { restarts - 1 } else { restarts };
    anyhow::ensure!(run >= 0, "container {container} has no previous run");
    let layout = Layout::new(&plane::plane_dir());
    let m = &pod.metadata;
    let file = layout.log_file(
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default(),
        container,
        run,
    );
    Ok(String::from_utf8_lossy(&std::fs::read(&file).unwrap_or_default()).into_owned())
}

/// Adds (or replaces) entry `key` of the image mapping in ConfigMap
/// `kube-system/procnode-images`; the agent picks it up at once. The entry is removed when the
/// returned guard is dropped (keep it for the test's lifetime).
pub async fn register_image(
    client: &kube::Client,
    key: &str,
    entry: &ImageEntry,
) -> anyhow::Result<ImageRegistration> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), images::CONFIG_MAP.0);
    let value = serde_yaml::to_string(entry)?;
    let body = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": images::CONFIG_MAP.1, "namespace": images::CONFIG_MAP.0},
        "data": {key: value},
    });
    // Server-side apply with a field manager per key: entries of concurrent tests never clash.
    let params = PatchParams::apply(&format!("procnode-image-{}", short(key))).force();
    api.patch(images::CONFIG_MAP.1, &params, &Patch::Apply(&body))
        .await?;
    Ok(ImageRegistration(key.to_owned()))
}

/// Removes its image mapping entry when dropped, through kubectl (like `TestNamespace`), so the
/// removal outlives the test's runtime.
#[derive(Debug)]
pub struct ImageRegistration(String);

impl Drop for ImageRegistration {
    fn drop(&mut self) {
        let Some(state) = plane::read_state() else {
            return;
        };
        let patch = serde_json::json!({"data": {&self.0: null}}).to_string();
        let _ = Command::new(state.bin_dir.join("kubectl"))
            .arg(format!(
                "--kubeconfig={}",
                plane::kubeconfig_path().display()
            ))
            .args([
                "-n",
                images::CONFIG_MAP.0,
                "patch",
                "configmap",
                images::CONFIG_MAP.1,
            ])
            .args(["--type=merge", "-p", &patch])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }
}

fn short(key: &str) -> String {
    let k: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    k.chars().take(100).collect()
}

/// Waits until the agent of `plane_dir` reports ready (or the deadline passes, or it dies).
pub fn wait_ready(
    plane_dir: &Path,
    agent: &crate::process::Proc,
    timeout: std::time::Duration,
) -> anyhow::Result<Ready> {
    let file = Layout::new(plane_dir).ready_file();
    let mut ready = None;
    crate::process::wait_until("the process-backed node agent", timeout, || {
        ready = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Ready>(&b).ok());
        ready.is_some() || !agent.alive()
    })?;
    ready.ok_or_else(|| anyhow::anyhow!("the {AGENT} agent exited during start-up"))
}

/// Stops what a dead agent of `slot` may have left: its containers (cgroups) and network
/// namespaces. Skipped when another live agent holds the slot.
pub fn clean_slot(slot: u8) -> anyhow::Result<()> {
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(format!("/run/flotilla/pod-network-{slot}.lock"));
    let Ok(lock) = lock else {
        return Ok(());
    };
    if lock.try_lock().is_err() {
        return Ok(());
    }
    cgroup::Subtree::of(slot)?.remove()?;
    network::clean(slot)?;
    Ok(())
}
