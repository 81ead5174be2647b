//! The one pod watch and the dispatcher: every pod that carries `vm.cocoonstack.io/name` and
//! is bound to one of the simulator's nodes goes to the worker of its VM name (spawned on
//! first sight); pods elsewhere (unbound, or another simulator's) are none of its business.
//! Relists are turned into [`Msg::Resync`] so deletions missed while the watch was down are
//! still acted on. On the way out, after the workers stopped, every pod still held with the
//! simulator's finalizer is released, so nothing stays Terminating for a simulator that is
//! gone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cocoon::pods::state;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::nodes::Claimed;
use crate::patch::held;
use crate::steps::Shared;
use crate::worker::{self, Msg};

/// Routes events to per-VM workers.
struct Dispatcher {
    nodes: Claimed,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    workers: HashMap<String, mpsc::UnboundedSender<Msg>>,
    tasks: JoinSet<()>,
    listing: HashSet<String>,
}

impl Dispatcher {
    fn send(&mut self, vm: &str, msg: Msg) {
        if !self.workers.contains_key(vm) {
            let (tx, rx) = mpsc::unbounded_channel();
            let (shared, cancel) = (self.shared.clone(), self.cancel.clone());
            self.tasks
                .spawn(worker::run(vm.to_owned(), shared, cancel, rx));
            self.workers.insert(vm.to_owned(), tx);
        }
        if let Some(tx) = self.workers.get(vm) {
            let _ = tx.send(msg);
        }
    }

    fn pod(&mut self, pod: Pod, gone: bool) {
        if !self.nodes.owns(state::node_name(&pod)) {
            return;
        }
        let Some(vm) = state::vm_name(&pod).map(str::to_owned) else {
            return;
        };
        self.send(
            &vm,
            Msg::Pod {
                pod: Box::new(pod),
                gone,
            },
        );
    }

    fn event(&mut self, event: watcher::Event<Pod>, ready: &mut Option<oneshot::Sender<()>>) {
        match event {
            watcher::Event::Apply(p) => self.pod(p, false),
            watcher::Event::Delete(p) => self.pod(p, true),
            watcher::Event::Init => self.listing.clear(),
            watcher::Event::InitApply(p) => {
                self.listing.extend(p.metadata.uid.clone());
                self.pod(p, false);
            }
            watcher::Event::InitDone => {
                let alive = Arc::new(std::mem::take(&mut self.listing));
                for tx in self.workers.values() {
                    let _ = tx.send(Msg::Resync(alive.clone()));
                }
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
        }
    }

    fn kick(&mut self, vm: &str) {
        if let Some(tx) = self.workers.get(vm) {
            let _ = tx.send(Msg::Kick);
        }
    }
}

/// Watches pods (of `namespace`, or all) on `nodes` until `cancel` fires; `ready` fires after
/// the first complete listing. Waits for the workers to finish their current step, then
/// releases the pods still held, before returning.
pub(crate) async fn run(
    api: Api<Pod>,
    nodes: Claimed,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    mut kicks: mpsc::UnboundedReceiver<String>,
    ready: oneshot::Sender<()>,
) {
    let mut d = Dispatcher {
        nodes,
        shared,
        cancel: cancel.clone(),
        workers: HashMap::new(),
        tasks: JoinSet::new(),
        listing: HashSet::new(),
    };
    let mut ready = Some(ready);
    let mut events = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            Some(vm) = kicks.recv() => d.kick(&vm),
            ev = events.next() => match ev {
                Some(Ok(e)) => d.event(e, &mut ready),
                Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying"),
                None => break,
            },
        }
    }
    d.workers.clear();
    while d.tasks.join_next().await.is_some() {}
    release_all(&api, &d).await;
}

/// Releases every pod on the simulator's nodes that it still holds (best effort: logged).
async fn release_all(api: &Api<Pod>, d: &Dispatcher) {
    let pods = match api.list(&Default::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            tracing::warn!(error = %e, "could not list the pods to release");
            return;
        }
    };
    let mine = pods
        .iter()
        .filter(|p| d.nodes.owns(state::node_name(p)) && held(p));
    for pod in mine {
        if let Err(e) = d.shared.writer.release(pod).await {
            tracing::warn!(error = %e, "could not release a pod");
        }
    }
}
