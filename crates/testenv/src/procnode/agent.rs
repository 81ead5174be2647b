//! The agent process (`proc-node agent`): the kubelet of the three process-backed nodes.
//!
//! Contract:
//! - Start-up: take a pod network slot, clear what an earlier agent of that slot left
//!   (cgroups, network namespaces, pod directories), build the fabric, serve the apiserver
//!   proxy and the kubelet endpoint on the gateway address, register the nodes, fill the
//!   Secret and ConfigMap caches, then watch the pods bound to each node (one field-selected
//!   watch per node) and run one [`Worker`] per pod. Once the nodes are registered it writes
//!   `<plane>/procnode/ready.json` ([`super::Ready`]), which `up` waits for.
//! - Secret and ConfigMap changes reach the workers of their namespace; changes of
//!   ConfigMap `kube-system/procnode-images` reload the image table; a deleted
//!   PersistentVolume takes its data directory with it.
//! - SIGTERM or SIGINT: every container is killed (no grace: the plane is going down), the
//!   network namespaces, cgroups and pod directories are removed, and the process exits 0.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, Pod, Secret};
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

use super::backoff;
use super::cgroup::Subtree;
use super::images::{self, Table};
use super::layout::Layout;
use super::network::{self, Ipam, Slot};
use super::worker::{Msg, RunRegistry, Worker};
use super::{NODES, Ready, kubelet_server, node};

/// `proc-node agent` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The plane's directory (kubeconfig, PKI, logs; the agent's files go to `procnode/`).
    #[arg(long)]
    pub plane_dir: PathBuf,
    /// The apiserver's port on 127.0.0.1.
    #[arg(long)]
    pub api_port: u16,
    /// First crash-loop back-off delay, seconds (the kubelet's is 10).
    #[arg(long, default_value_t = 10)]
    pub backoff_initial: u64,
    /// Longest crash-loop back-off delay, seconds (the kubelet's is 300).
    #[arg(long, default_value_t = 300)]
    pub backoff_max: u64,
}

struct WorkerHandle {
    tx: UnboundedSender<Msg>,
    ns: String,
    node: usize,
    join: tokio::task::JoinHandle<()>,
}

/// What every worker shares.
pub struct Ctx {
    /// Admin client of the plane.
    pub client: kube::Client,
    /// The agent's directories.
    pub layout: Layout,
    /// The pod network slot.
    pub slot: u8,
    /// The agent's cgroups.
    pub cgroups: Subtree,
    /// Every Secret.
    pub secrets: Store<Secret>,
    /// Every ConfigMap.
    pub config_maps: Store<ConfigMap>,
    /// The image mapping.
    pub images: RwLock<Table>,
    /// Pod addresses.
    pub ipam: Mutex<Ipam>,
    /// Crash-loop back-off.
    pub backoff: backoff::Policy,
    /// Client of httpGet probes.
    pub http: reqwest::Client,
    runs: Mutex<RunRegistry>,
    workers: Mutex<HashMap<String, WorkerHandle>>,
}

impl Ctx {
    /// Records the current run of a container (for log streaming).
    pub fn note_run(
        &self,
        ns: &str,
        pod: &str,
        uid: &str,
        container: &str,
        restart: i32,
        running: bool,
    ) {
        let mut runs = self.runs.lock().expect("runs");
        let entry = runs
            .entry((ns.to_string(), pod.to_string()))
            .or_insert_with(|| (uid.to_string(), HashMap::new()));
        if entry.0 != uid {
            *entry = (uid.to_string(), HashMap::new());
        }
        entry.1.insert(container.to_string(), (restart, running));
    }

    /// Forgets a pod's runs (it is gone).
    pub fn forget_pod(&self, ns: &str, pod: &str, uid: &str) {
        let mut runs = self.runs.lock().expect("runs");
        if runs
            .get(&(ns.to_string(), pod.to_string()))
            .is_some_and(|e| e.0 == uid)
        {
            runs.remove(&(ns.to_string(), pod.to_string()));
        }
    }

    /// (pod uid, restart count, running) of a container.
    pub fn run_of(&self, ns: &str, pod: &str, container: &str) -> Option<(String, i32, bool)> {
        let runs = self.runs.lock().expect("runs");
        let (uid, ctrs) = runs.get(&(ns.to_string(), pod.to_string()))?;
        ctrs.get(container)
            .map(|(r, running)| (uid.clone(), *r, *running))
    }
}

/// Runs the agent; returns the process exit code.
pub fn main(args: Args) -> i32 {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let slot = match Slot::acquire() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "no pod network slot");
            return 1;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "tokio runtime");
            return 1;
        }
    };
    match rt.block_on(run(args, slot.index)) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "the agent failed");
            let _ = Subtree::of(slot.index).and_then(|s| s.remove());
            let _ = network::clean(slot.index);
            1
        }
    }
}

async fn run(args: Args, slot: u8) -> anyhow::Result<()> {
    let layout = Layout::new(&args.plane_dir);
    fs::create_dir_all(&layout.root)?;
    let _ = fs::remove_file(layout.ready_file());
    let _ = fs::remove_dir_all(layout.root.join("pods"));
    let cgroups = Subtree::of(slot)?;
    cgroups.reset()?;
    tokio::task::spawn_blocking(move || network::setup_fabric(slot)).await??;
    let client = {
        let kc = kube::config::Kubeconfig::read_from(args.plane_dir.join("kubeconfig"))?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        kube::Client::try_from(cfg)?
    };
    let proxy = tokio::net::TcpListener::bind((network::gateway(slot), 443)).await?;
    tokio::spawn(network::serve_apiserver_proxy(proxy, args.api_port));
    node::register(&client, slot).await?;
    let stop = CancellationToken::new();
    tokio::spawn(node::heartbeat(client.clone(), slot, stop.clone()));

    let (secrets, secrets_writer) = reflector::store::<Secret>();
    let (config_maps, cm_writer) = reflector::store::<ConfigMap>();
    let http = reqwest::Client::builder()
        .no_proxy()
        .danger_accept_invalid_certs(true)
        .pool_max_idle_per_host(0)
        .user_agent(format!(
            "kube-probe/{}",
            crate::Versions::pinned().kubernetes.trim_start_matches('v')
        ))
        .build()?;
    let bin_dir = std::env::current_exe()?
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        layout: layout.clone(),
        slot,
        cgroups,
        secrets: secrets.clone(),
        config_maps: config_maps.clone(),
        images: RwLock::new(Table {
            extra: Vec::new(),
            bin_dir,
        }),
        ipam: Mutex::new(Ipam::default()),
        backoff: backoff::Policy {
            initial: Duration::from_secs(args.backoff_initial),
            max: Duration::from_secs(args.backoff_max),
        },
        http,
        runs: Mutex::new(HashMap::new()),
        workers: Mutex::new(HashMap::new()),
    });
    tokio::spawn(watch_objects::<Secret>(ctx.clone(), secrets_writer));
    tokio::spawn(watch_objects::<ConfigMap>(ctx.clone(), cm_writer));
    secrets.wait_until_ready().await?;
    config_maps.wait_until_ready().await?;
    reload_images(&ctx);
    tokio::spawn(watch_volumes(ctx.clone()));
    let kubelet = kubelet_server::bind(&args.plane_dir.join("pki"), slot).await?;
    tokio::spawn(kubelet_server::serve(kubelet, ctx.clone()));
    for (i, node) in NODES.iter().enumerate() {
        tokio::spawn(watch_pods(ctx.clone(), i, node));
    }
    let ready = Ready {
        slot,
        pid: std::process::id(),
        gateway: network::gateway(slot).to_string(),
    };
    fs::write(layout.ready_file(), serde_json::to_vec(&ready)?)?;
    tracing::info!(slot, gateway = %ready.gateway, "process-backed nodes ready");

    wait_for_signal().await;
    tracing::info!("stopping: killing every container");
    stop.cancel();
    shutdown(&ctx).await;
    let _ = fs::remove_file(layout.ready_file());
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn shutdown(ctx: &Arc<Ctx>) {
    let handles: Vec<WorkerHandle> = ctx
        .workers
        .lock()
        .expect("workers")
        .drain()
        .map(|(_, h)| h)
        .collect();
    for h in &handles {
        let _ = h.tx.send(Msg::Shutdown);
    }
    for h in handles {
        let _ = tokio::time::timeout(Duration::from_secs(8), h.join).await;
    }
    let cgroups = ctx.cgroups.clone();
    let slot = ctx.slot;
    let pods = ctx.layout.root.join("pods");
    let _ = tokio::task::spawn_blocking(move || {
        if let Err(e) = cgroups.remove() {
            tracing::warn!(error = %e, "removing cgroups");
        }
        if let Err(e) = network::clean(slot) {
            tracing::warn!(error = %e, "removing network namespaces");
        }
        let _ = fs::remove_dir_all(pods);
    })
    .await;
}

/// Keeps a cache of `K` and tells the workers of a namespace when something in it changed.
async fn watch_objects<K>(ctx: Arc<Ctx>, writer: reflector::store::Writer<K>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::all(ctx.client.clone());
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let Ok(event) = event else { continue };
        let namespace = match &event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => o.meta().namespace.clone(),
            watcher::Event::InitDone => None,
            _ => continue,
        };
        let is_image_map = match &event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                let m = o.meta();
                K::kind(&()) == "ConfigMap"
                    && m.namespace.as_deref() == Some(images::CONFIG_MAP.0)
                    && m.name.as_deref() == Some(images::CONFIG_MAP.1)
            }
            watcher::Event::InitDone => K::kind(&()) == "ConfigMap",
            _ => false,
        };
        if is_image_map {
            reload_images(&ctx);
        }
        let workers = ctx.workers.lock().expect("workers");
        for h in workers.values() {
            if namespace.as_ref().is_none_or(|ns| *ns == h.ns) {
                let _ = h.tx.send(Msg::Sources);
            }
        }
    }
}

fn reload_images(ctx: &Ctx) {
    let cm = ctx
        .config_maps
        .get(&reflector::ObjectRef::new(images::CONFIG_MAP.1).within(images::CONFIG_MAP.0));
    let data = cm.and_then(|c| c.data.clone()).unwrap_or_default();
    let (extra, errors) = images::parse_entries(&data);
    for e in errors {
        tracing::warn!(entry = %e, "ignoring an unreadable image mapping entry");
    }
    ctx.images.write().expect("images").extra = extra;
}

/// Removes the data directory of every PersistentVolume that no longer exists.
async fn watch_volumes(ctx: Arc<Ctx>) {
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut listed = HashSet::new();
    while let Ok(Some(event)) = stream.try_next().await {
        match event {
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitApply(pv) => {
                listed.insert(pv.metadata.name.unwrap_or_default());
            }
            watcher::Event::InitDone => {
                for entry in fs::read_dir(ctx.layout.pv_root())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    if !listed.contains(&*entry.file_name().to_string_lossy()) {
                        let _ = fs::remove_dir_all(entry.path());
                    }
                }
            }
            watcher::Event::Delete(pv) => {
                let name = pv.metadata.name.unwrap_or_default();
                if !name.is_empty() {
                    tracing::info!(pv = %name, "persistent volume deleted: removing its data");
                    let _ = fs::remove_dir_all(ctx.layout.pv_dir(&name));
                }
            }
            watcher::Event::Apply(_) => {}
        }
    }
}

/// Runs a worker for every pod bound to node `index`.
async fn watch_pods(ctx: Arc<Ctx>, index: usize, node: &'static str) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let stream = watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut listed = HashSet::new();
    let mut done: HashSet<String> = HashSet::new();
    while let Some(event) = stream.next().await {
        let Ok(event) = event else { continue };
        match event {
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitApply(pod) => {
                listed.insert(pod.metadata.uid.clone().unwrap_or_default());
                dispatch(&ctx, index, pod, &mut done);
            }
            watcher::Event::Apply(pod) => dispatch(&ctx, index, pod, &mut done),
            watcher::Event::Delete(pod) => {
                let uid = pod.metadata.uid.unwrap_or_default();
                if let Some(h) = ctx.workers.lock().expect("workers").get(&uid) {
                    let _ = h.tx.send(Msg::Deleted);
                }
            }
            watcher::Event::InitDone => {
                let workers = ctx.workers.lock().expect("workers");
                for (uid, h) in workers.iter().filter(|(_, h)| h.node == index) {
                    if !listed.contains(uid) {
                        let _ = h.tx.send(Msg::Deleted);
                    }
                }
            }
        }
    }
}

fn dispatch(ctx: &Arc<Ctx>, index: usize, pod: Pod, done: &mut HashSet<String>) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut workers = ctx.workers.lock().expect("workers");
    workers.retain(|u, h| {
        if h.tx.is_closed() {
            done.insert(u.clone());
            false
        } else {
            true
        }
    });
    if let Some(h) = workers.get(&uid) {
        let _ = h.tx.send(Msg::Pod(Box::new(pod)));
        return;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    // A finished pod from before this agent, or one whose worker already ended, is not rerun.
    if done.contains(&uid) || matches!(phase, Some("Succeeded" | "Failed")) {
        return;
    }
    let (tx, rx) = unbounded_channel();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    tracing::info!(pod = pod.metadata.name.as_deref().unwrap_or_default(), %ns, node = NODES[index], "accepted pod");
    let worker = Worker::new(ctx.clone(), pod, index, rx, tx.clone());
    let join = tokio::spawn(worker.run());
    workers.insert(
        uid,
        WorkerHandle {
            tx,
            ns,
            node: index,
            join,
        },
    );
}
