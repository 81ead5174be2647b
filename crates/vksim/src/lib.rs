//! A stand-in for vk-cocoon, the virtual-kubelet provider that runs cocoon VMs (test support).
//!
//! vk-cocoon cannot run here (it needs KVM hypervisors and real nodes), yet the cocoon
//! operator is defined by its conversation with it through pod annotations
//! (`cocoon::names`, reference §3 and §7). This crate plays vk-cocoon's side of that
//! conversation against the local control plane's kwok nodes, so the operator's end-to-end
//! tests and the demo exercise the real operator against the real API server and a real OCI
//! registry.
//!
//! A simulator is vk-cocoon on the nodes it owns ([`Nodes`]: named, or selected by label;
//! the local plane's kwok nodes by default): it labels only those with its pool (and refuses to
//! start on one already in another pool) and plays only the pods bound to them, so simulators
//! with different pools and nodes coexist.
//!
//! What it plays, for every pod carrying `vm.cocoonstack.io/name` once it is bound to one of
//! its nodes (kwok marks such pods Running/Ready and gives them a 127.1.x.y IP):
//! - hold: the pod gets the finalizer [`HOLD_FINALIZER`] first, so that once it is deleted it
//!   stays Terminating until the simulator has torn its VM down (a real vk-cocoon runs
//!   DeletePod, `:latest` push included, before it releases the pod; kwok would otherwise
//!   remove a deleted pod at once);
//! - create (once kwok has started the pod): lifecycle `creating`, then the VM (restored from
//!   the registry's `<vm>:hibernate` when `restore-from-hibernate=true`, or from a node-local
//!   snapshot kept by an earlier `keep-snapshot-on-delete=true` delete on the same node), then
//!   `vm.cocoonstack.io/id`, `vm.cocoonstack.io/ip` (the pod IP) and `ready`; a missing tag is
//!   lifecycle `failed`. A pod that already carries an id (static toolbox) is adopted as is;
//! - hibernate (`hibernate=true`, VM live): `hibernating`, push `<vm>:hibernate`, drop id/ip,
//!   `hibernated`; wake (flag gone, VM hibernated): `creating`, pull, id/ip, `ready`. The
//!   `:hibernate` tag is never deleted (the operator does that);
//! - every lifecycle write carries `lifecycle-observed-generation` = the pod's generation
//!   stamp in the same patch; a new stamp re-publishes the state; a `failed` state is sticky
//!   while its generation is current;
//! - delete: push `<vm>:latest` as the snapshot policy says (always / main-only: slot 0 main /
//!   never) unless the VM is hibernated; keep the node-local snapshot on request; then release
//!   the pod (remove [`HOLD_FINALIZER`]). A failed push is logged and the pod released anyway.
//!   When the simulator stops, it releases every pod it still holds.
//! - faults ([`Faults`]) and counters ([`Stats`]) for tests and benchmarks.
//!
//! Pods of one VM name are handled one event at a time, different VMs concurrently (see
//! `worker`). Writes are JSON merge patches of the pod's annotations (field manager
//! [`FIELD_MANAGER`]); a pod that is gone mid-transition simply ends it.
//!
//! What it does not: no VMs, disks, networks or guest agents; snapshots are a few bytes naming
//! the VM; node-local snapshots are only remembered in memory (lost when the simulator stops);
//! no VNC ports, no pod status writes (kwok owns pod status), no node heartbeats, no
//! `fork-from` cloning or image pulls. The repository of a VM is `[<registry_prefix>/]<vm>`.

mod error;
mod faults;
mod machine;
mod nodes;
mod patch;
mod snapshots;
mod stats;
mod steps;
mod watch;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use error::SimError;
pub use faults::Faults;
pub use nodes::{KWOK_NODES, Nodes};
pub use patch::{FIELD_MANAGER, HOLD_FINALIZER};
pub use stats::Stats;

/// How long [`Simulator::start`] waits for the first complete pod listing.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The pool a simulator labels its nodes with unless told otherwise.
pub const DEFAULT_POOL: &str = "default";

/// Where the simulator works.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The OCI registry (`http://127.0.0.1:port`; credentials may ride in the URL).
    pub registry_url: String,
    /// Path prefix of the repositories (`"cocoon"` → `cocoon/<vm>`).
    pub registry_prefix: Option<String>,
    /// Only pods of this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// The nodes this simulator is vk-cocoon on; only pods bound to them are played.
    pub nodes: Nodes,
    /// The pool its nodes are labelled with (`cocoonstack.io/pool`).
    pub pool: String,
}

impl Default for SimConfig {
    /// No registry yet; all namespaces; the kwok nodes in pool [`DEFAULT_POOL`].
    fn default() -> Self {
        SimConfig {
            registry_url: String::new(),
            registry_prefix: None,
            namespace: None,
            nodes: Nodes::default(),
            pool: DEFAULT_POOL.to_owned(),
        }
    }
}

/// A running simulator: one pod watch and a worker per VM.
pub struct Simulator {
    nodes: Vec<String>,
    faults: Faults,
    counters: Arc<stats::Counters>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
    // Dropping the simulator (say, a test that panicked) stops it too.
    _stop_on_drop: DropGuard,
}

impl Simulator {
    /// Claims its nodes (labelling them with the pool), then starts watching pods; returns
    /// once the watch has listed them all.
    pub async fn start(client: kube::Client, cfg: SimConfig) -> anyhow::Result<Simulator> {
        let claimed = nodes::claim(&client, &cfg.nodes, &cfg.pool).await?;
        let counters = Arc::new(stats::Counters::default());
        let snapshots =
            snapshots::Snapshots::new(&cfg.registry_url, cfg.registry_prefix, counters.clone())?;
        let (kick_tx, kick_rx) = mpsc::unbounded_channel();
        let faults = Faults::new(kick_tx);
        let shared = Arc::new(steps::Shared {
            writer: patch::Writer::new(client.clone(), counters.clone()),
            snapshots,
            faults: faults.clone(),
            counters: counters.clone(),
        });
        let api: Api<Pod> = match &cfg.namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        };
        let cancel = CancellationToken::new();
        let (ready_tx, ready_rx) = oneshot::channel();
        let owned = claimed.names();
        let task = tokio::spawn(watch::run(
            api,
            claimed,
            shared,
            cancel.clone(),
            kick_rx,
            ready_tx,
        ));
        let sim = Simulator {
            nodes: owned,
            faults,
            counters,
            _stop_on_drop: cancel.clone().drop_guard(),
            cancel,
            task,
        };
        match tokio::time::timeout(START_TIMEOUT, ready_rx).await {
            Ok(Ok(())) => Ok(sim),
            _ => {
                sim.stop().await;
                anyhow::bail!("the pod watch did not list pods within {START_TIMEOUT:?}")
            }
        }
    }

    /// The nodes it owns, sorted.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// A handle to arm and clear faults.
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// The counters now.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// Stops the watch and the workers (each finishes the step it is in), then releases the
    /// pods it still holds.
    pub async fn stop(self) {
        self.cancel.cancel();
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "simulator task ended abnormally");
        }
    }
}
