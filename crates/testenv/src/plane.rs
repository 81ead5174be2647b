//! The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! kwok, built from pinned upstream modules and started as plain processes on 127.0.0.1, plus
//! our process-backed node agent (`proc-node`, [`crate::procnode`]).
//!
//! Contract:
//! - [`up`] is idempotent: under an exclusive file lock it reuses a healthy running plane, and
//!   otherwise stops whatever is left of an old one and starts a new one. Several test binaries
//!   may call it at once; exactly one starts the plane, the others wait for the lock and reuse it.
//! - Every listener binds 127.0.0.1 (the agent: its gateway address in 127.<2+slot>.255.254);
//!   kwok pods get 127.1.x.y addresses, process-backed pods 127.<2+slot>.x.y, so nothing ever
//!   dials outside loopback.
//! - The kubeconfig is written to [`kubeconfig_path`] (`<plane dir>/kubeconfig`).
//! - [`down`] stops only the processes it recorded (the agent first, which kills every pod
//!   process and removes its network namespaces; then, should the agent have died, whatever
//!   is left in its cgroups and namespaces) and removes the plane directory.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};

use crate::pki::Pki;
use crate::process::{Proc, free_port, spawn, wait_until};
use crate::versions::Versions;

/// Number of fake nodes, each in its own `topology.kubernetes.io/zone`.
pub const NODES: usize = 3;
/// Zones of the fake nodes, in node order.
pub const ZONES: [&str; NODES] = ["zone-a", "zone-b", "zone-c"];

/// Bumped whenever the way the plane is started changes, so `up` replaces an older plane.
pub const PLANE_REVISION: u32 = 5;

/// Service cluster IP range: a /16 so thousands of Services fit (benchmarks). The addresses are
/// API objects only; nothing ever dials them.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

/// What is recorded about a running plane.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// [`PLANE_REVISION`] of the code that started it.
    #[serde(default)]
    pub revision: u32,
    /// Versions it was started with.
    pub kubernetes: String,
    /// Directory holding the upstream binaries.
    pub bin_dir: PathBuf,
    /// https://127.0.0.1:<port>
    pub api_port: u16,
    /// etcd client port.
    pub etcd_port: u16,
    /// The components, in start order.
    pub procs: Vec<Proc>,
    /// The pod network slot of the process-backed nodes (see [`crate::procnode::network`]).
    #[serde(default)]
    pub pod_network_slot: Option<u8>,
}

/// Result of [`up`].
#[derive(Debug, Clone)]
pub struct Up {
    /// The running plane.
    pub state: State,
    /// True when an already running plane was reused.
    pub reused: bool,
    /// Wall time spent in `up`.
    pub took: Duration,
}

/// Root of Flotilla's caches: `$FLOTILLA_CACHE`, else `$HOME/.cache/flotilla`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("FLOTILLA_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into()))
                .join(".cache/flotilla")
        })
}

/// The plane's directory: `$FLOTILLA_PLANE_DIR`, else `<cache>/plane`.
pub fn plane_dir() -> PathBuf {
    std::env::var_os("FLOTILLA_PLANE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("plane"))
}

/// Where the admin kubeconfig of the local plane is written.
pub fn kubeconfig_path() -> PathBuf {
    plane_dir().join("kubeconfig")
}

fn state_path() -> PathBuf {
    plane_dir().join("state.json")
}

fn lock() -> anyhow::Result<File> {
    lock_dir(&plane_dir())
}

/// Creates `dir` and holds an exclusive lock on `<dir>/.lock` until the file is dropped.
pub fn lock_dir(dir: &Path) -> anyhow::Result<File> {
    fs::create_dir_all(dir)?;
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".lock"))?;
    f.lock()?;
    Ok(f)
}

/// Reads the recorded state, if any.
pub fn read_state() -> Option<State> {
    serde_json::from_slice(&fs::read(state_path()).ok()?).ok()
}

/// Builds (or finds in the cache) the upstream binaries and returns their directory.
pub fn ensure_binaries() -> anyhow::Result<PathBuf> {
    let script = crate::workspace_root().join("crates/testenv/upstream/build.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed ({}); see its output above",
            script.display(),
            out.status
        );
    }
    let dir = String::from_utf8(out.stdout)?
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string();
    anyhow::ensure!(
        Path::new(&dir).join("kube-apiserver").exists(),
        "build.sh printed no bin dir: {dir:?}"
    );
    Ok(PathBuf::from(dir))
}

/// Starts the plane, or reuses a healthy running one. Safe to call from several processes and
/// from inside or outside a tokio runtime.
pub fn up() -> anyhow::Result<Up> {
    std::thread::spawn(up_blocking)
        .join()
        .map_err(|_| anyhow::anyhow!("testenv up panicked"))?
}

fn up_blocking() -> anyhow::Result<Up> {
    let start = Instant::now();
    let _lock = lock()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Some(state) = read_state() {
        let healthy = state.procs.iter().all(Proc::alive)
            && state.kubernetes == Versions::pinned().kubernetes
            && state.revision == PLANE_REVISION
            && rt.block_on(readyz(&kubeconfig_path())).is_ok();
        if healthy {
            return Ok(Up {
                state,
                reused: true,
                took: start.elapsed(),
            });
        }
        tracing::info!("stopping the remains of an unhealthy or outdated plane");
        stop(&state);
    }
    let bin = ensure_binaries()?;
    crate::packages::ensure(
        "/usr/sbin/ip",
        "iproute2",
        "pod networks of the process-backed nodes",
    )?;
    let agent = crate::procnode::build_agent()?;
    clean_dir()?;
    let state = start_plane(&bin, &agent, &rt)?;
    fs::write(state_path(), serde_json::to_vec_pretty(&state)?)?;
    Ok(Up {
        state,
        reused: false,
        took: start.elapsed(),
    })
}

/// Stops a running plane and removes its directory. Returns false when nothing was running.
pub fn down() -> anyhow::Result<bool> {
    let _lock = lock()?;
    let state = read_state();
    if let Some(s) = &state {
        stop(s);
    }
    clean_dir()?;
    Ok(state.is_some())
}

fn stop(state: &State) {
    // Reverse start order: the agent (it kills every pod process), kwok and controllers first,
    // etcd last.
    for p in state.procs.iter().rev() {
        p.stop(Duration::from_secs(15));
    }
    if let Some(slot) = state.pod_network_slot
        && let Err(e) = crate::procnode::clean_slot(slot)
    {
        tracing::warn!(error = %e, "cleaning up after the process-backed node agent");
    }
}

fn clean_dir() -> anyhow::Result<()> {
    clean_dir_at(&plane_dir())
}

/// Removes everything in `dir` except its `.lock`.
pub fn clean_dir_at(dir: &Path) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == ".lock" {
            continue;
        }
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?
        } else {
            fs::remove_file(entry.path())?
        }
    }
    Ok(())
}

fn start_plane(bin: &Path, agent: &Path, rt: &tokio::runtime::Runtime) -> anyhow::Result<State> {
    let dir = plane_dir();
    let logs = dir.join("logs");
    let pki = Pki::generate(&dir.join("pki"))?;
    let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
    let kc = kubeconfig_path();
    write_kubeconfig(&kc, &pki, api_port)?;
    let s = |p: PathBuf| p.display().to_string();
    let mut procs = Vec::new();
    let mut slot = None;
    let mut state = State {
        revision: PLANE_REVISION,
        kubernetes: Versions::pinned().kubernetes,
        bin_dir: bin.to_path_buf(),
        api_port,
        etcd_port,
        procs: Vec::new(),
        pod_network_slot: None,
    };
    let result = (|| -> anyhow::Result<()> {
        procs.push(spawn(
            "etcd",
            &bin.join("etcd"),
            &etcd_args(&dir.join("etcd"), etcd_port, peer_port),
            &logs,
        )?);
        wait_etcd(etcd_port)?;
        let mut api_args = apiserver_args(&pki, etcd_port, api_port);
        api_args.extend([
            // `kubectl logs` of process-backed pods: the agent's kubelet endpoint.
            format!(
                "--kubelet-client-certificate={}",
                s(pki.kubelet_client_crt())
            ),
            format!("--kubelet-client-key={}", s(pki.kubelet_client_key())),
            format!("--kubelet-certificate-authority={}", s(pki.ca_crt())),
            "--kubelet-preferred-address-types=InternalIP".into(),
        ]);
        procs.push(spawn(
            "kube-apiserver",
            &bin.join("kube-apiserver"),
            &api_args,
            &logs,
        )?);
        rt.block_on(wait_readyz(&kc, Duration::from_secs(120)))?;
        procs.push(spawn(
            "kube-controller-manager",
            &bin.join("kube-controller-manager"),
            &kcm_args(&pki, &kc, None),
            &logs,
        )?);
        procs.push(spawn(
            "kube-scheduler",
            &bin.join("kube-scheduler"),
            &scheduler_args(&kc),
            &logs,
        )?);
        procs.push(spawn(
            "kwok",
            &bin.join("kwok"),
            &kwok_args(bin, &kc, "127.1.0.0/16"),
            &logs,
        )?);
        let agent = spawn(
            crate::procnode::AGENT,
            agent,
            &[
                "agent".into(),
                format!("--plane-dir={}", s(dir.clone())),
                format!("--api-port={api_port}"),
            ],
            &logs,
        )?;
        procs.push(agent.clone());
        let ready = crate::procnode::wait_ready(&dir, &agent, Duration::from_secs(60))?;
        slot = Some(ready.slot);
        rt.block_on(create_nodes_and_wait(
            &kc,
            NODES,
            crate::procnode::NODES.len(),
            Duration::from_secs(120),
        ))
    })();
    state.procs = procs;
    state.pod_network_slot = slot;
    if let Err(e) = result {
        let tail = log_tails(&logs);
        stop(&state);
        anyhow::bail!("the local control plane did not start: {e:#}\n{tail}");
    }
    Ok(state)
}

/// The last lines of every log in `logs`, for a start-up failure message.
pub fn log_tails(logs: &Path) -> String {
    let mut out = String::new();
    for entry in fs::read_dir(logs).into_iter().flatten().flatten() {
        let text = fs::read_to_string(entry.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        out.push_str(&format!(
            "--- {} (last lines) ---\n{tail}\n",
            entry.path().display()
        ));
    }
    out
}

/// Writes an admin kubeconfig for the apiserver on `127.0.0.1:<port>` to `path`.
pub fn write_kubeconfig(path: &Path, pki: &Pki, port: u16) -> anyhow::Result<()> {
    let d = |p: PathBuf| p.display().to_string();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: flotilla\n  cluster:\n    server: https://127.0.0.1:{port}\n    \
         certificate-authority: {}\nusers:\n- name: flotilla-admin\n  user:\n    client-certificate: {}\n    \
         client-key: {}\ncontexts:\n- name: flotilla\n  context:\n    cluster: flotilla\n    user: flotilla-admin\n    \
         namespace: default\ncurrent-context: flotilla\n",
        d(pki.ca_crt()),
        d(pki.admin_crt()),
        d(pki.admin_key()),
    );
    fs::write(path, text)?;
    Ok(())
}

/// An admin client for the plane's kubeconfig.
pub async fn admin_client() -> anyhow::Result<kube::Client> {
    client_for(&kubeconfig_path()).await
}

/// A client for the kubeconfig at `path`.
pub async fn client_for(path: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

/// `/readyz` of the apiserver behind the kubeconfig at `path` answers `ok`.
pub async fn readyz(path: &Path) -> anyhow::Result<()> {
    let client = client_for(path).await?;
    let body = client
        .request_text(http::Request::get("/readyz").body(Vec::new())?)
        .await?;
    anyhow::ensure!(body.trim() == "ok", "readyz: {body}");
    Ok(())
}

/// Waits until [`readyz`] succeeds, or fails after `timeout`.
pub async fn wait_readyz(path: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match readyz(path).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                anyhow::bail!("kube-apiserver not ready after {timeout:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await, // poll with a deadline
        }
    }
}

/// Waits until etcd on `port` accepts connections.
pub fn wait_etcd(port: u16) -> anyhow::Result<()> {
    wait_until(
        "etcd to accept connections",
        Duration::from_secs(30),
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    )
}

/// etcd on 127.0.0.1 with its data in `data` (test data: no fsync, no metrics listener).
pub fn etcd_args(data: &Path, client_port: u16, peer_port: u16) -> Vec<String> {
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    vec![
        "--name=flotilla".into(),
        format!("--data-dir={}", data.display()),
        "--log-level=warn".into(),
        "--unsafe-no-fsync".into(),
        format!("--listen-client-urls={etcd_url}"),
        format!("--advertise-client-urls={etcd_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=flotilla={peer_url}"),
        "--listen-metrics-urls=".into(),
    ]
}

/// kube-apiserver on `127.0.0.1:<api_port>` backed by the etcd on `etcd_port`, with the PKI's
/// serving certificate, client-certificate auth and `Node,RBAC` authorization.
pub fn apiserver_args(pki: &Pki, etcd_port: u16, api_port: u16) -> Vec<String> {
    let s = |p: PathBuf| p.display().to_string();
    vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={api_port}"),
        "--advertise-address=127.0.0.1".into(),
        "--endpoint-reconciler-type=none".into(),
        format!("--tls-cert-file={}", s(pki.apiserver_crt())),
        format!("--tls-private-key-file={}", s(pki.apiserver_key())),
        format!("--client-ca-file={}", s(pki.ca_crt())),
        "--authorization-mode=Node,RBAC".into(),
        "--allow-privileged=true".into(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", s(pki.sa_pub())),
        format!("--service-account-signing-key-file={}", s(pki.sa_key())),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--profiling=false".into(),
    ]
}

/// kube-controller-manager against the kubeconfig `kc`, serving nothing; `controllers` limits
/// it to a list (`--controllers`), `None` runs the defaults.
pub fn kcm_args(pki: &Pki, kc: &Path, controllers: Option<&str>) -> Vec<String> {
    let s = |p: PathBuf| p.display().to_string();
    let mut args = vec![
        format!("--kubeconfig={}", kc.display()),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        format!("--service-account-private-key-file={}", s(pki.sa_key())),
        format!("--root-ca-file={}", s(pki.ca_crt())),
        format!("--cluster-signing-cert-file={}", s(pki.ca_crt())),
        format!("--cluster-signing-key-file={}", s(pki.ca_key())),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--profiling=false".into(),
    ];
    if let Some(c) = controllers {
        args.push(format!("--controllers={c}"));
    }
    args
}

/// kube-scheduler against the kubeconfig `kc`, serving nothing.
pub fn scheduler_args(kc: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kc.display()),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        "--profiling=false".into(),
    ]
}

/// kwok against the kubeconfig `kc`, managing only nodes annotated `kwok.x-k8s.io/node=fake`,
/// giving pods addresses from `cidr` (loopback), with the plane's stages.
pub fn kwok_args(bin: &Path, kc: &Path, cidr: &str) -> Vec<String> {
    let stages = bin.join("stages");
    let mut args = vec![
        format!("--kubeconfig={}", kc.display()),
        // Only its own nodes: the process-backed nodes belong to our agent.
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
        "--node-lease-duration-seconds=40".into(),
        format!("--cidr={cidr}"),
        "--node-ip=127.0.0.1".into(),
        "--server-address=".into(),
    ];
    for stage in [
        "node/fast/node-initialize.yaml",
        "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "pod/fast/pod-ready.yaml",
        "pod/fast/pod-complete.yaml",
        "pod/fast/pod-delete.yaml",
        "pod/chaos/pod-container-running-failed.yaml",
        // Dynamic provisioning for the default StorageClass `kwok-volume` (created with the
        // nodes): PVCs bind, and their PVs go away with them.
        "volume/fast/pvc-provision.yaml",
        "volume/fast/pv-bind.yaml",
        "volume/fast/pv-delete.yaml",
        "volume/fast/pvc-delete.yaml",
    ] {
        args.push(format!("--config={}", stages.join(stage).display()));
    }
    args
}

/// What every node offers: kwok's defaults plus ephemeral-storage.
fn node_capacity() -> serde_json::Value {
    serde_json::json!({"cpu": "1k", "memory": "1Ti", "pods": "1M", "ephemeral-storage": "10Ti"})
}

/// The kwok node `kwok-node-<i>` in zone [`ZONES`]`[i]`, pod CIDR `127.1.<i>.0/24`.
pub fn node(i: usize) -> anyhow::Result<Node> {
    let name = format!("kwok-node-{i}");
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "topology.kubernetes.io/region": "local",
                "topology.kubernetes.io/zone": ZONES[i],
            },
        },
        // Pods on this node get 127.1.<i>.x: loopback only, never a routable address.
        "spec": {"podCIDR": format!("127.1.{i}.0/24"), "podCIDRs": [format!("127.1.{i}.0/24")]},
        // kwok keeps a capacity given at creation (its defaults have no ephemeral-storage, so
        // a pod requesting disk, like a cocoon VM with `storage`, would never schedule).
        "status": {"capacity": node_capacity(), "allocatable": node_capacity()},
    }))?)
}

/// Creates `kwok_nodes` kwok nodes and the default StorageClass on the apiserver behind `kc`,
/// then waits until `kwok_nodes + other_nodes` nodes are Ready and the `default`
/// ServiceAccount exists.
pub async fn create_nodes_and_wait(
    kc: &Path,
    kwok_nodes: usize,
    other_nodes: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let client = client_for(kc).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..kwok_nodes {
        match nodes.create(&PostParams::default(), &node(i)?).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    create_storage_class(&client).await?;
    let deadline = Instant::now() + timeout;
    let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
    loop {
        let ready = nodes
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|n| node_ready(n))
            .count();
        let sa = sas.get_opt("default").await?.is_some();
        let want = kwok_nodes + other_nodes;
        if ready >= want && sa {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "after {timeout:?}: {ready}/{want} nodes Ready, default ServiceAccount present: {sa}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await; // poll with a deadline
    }
}

/// Name of the default StorageClass, provisioned by kwok's volume stages.
pub const STORAGE_CLASS: &str = "kwok-volume";

async fn create_storage_class(client: &kube::Client) -> anyhow::Result<()> {
    let sc: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "kwok.x-k8s.io/volume",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))?;
    match Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// True when the node's Ready condition is True.
pub fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What `status` reports.
#[derive(Debug, Clone)]
pub struct Status {
    /// Recorded state, if a plane was started.
    pub state: Option<State>,
    /// (component, alive)
    pub components: Vec<(String, i32, bool)>,
    /// apiserver /readyz answered ok.
    pub api_ready: bool,
}

/// Reports which components run and whether the API answers.
pub fn status() -> Status {
    let state = read_state();
    let components = state
        .iter()
        .flat_map(|s| s.procs.iter())
        .map(|p| (p.name.clone(), p.pid, p.alive()))
        .collect();
    let api_ready = state.is_some()
        && std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(readyz(&kubeconfig_path())).is_ok())
        })
        .join()
        .ok()
        .and_then(Result::ok)
        .unwrap_or(false);
    Status {
        state,
        components,
        api_ready,
    }
}
