//! One worker per VM name: the pods of a VM (normally one at a time; a replacement pod may
//! overlap its predecessor) are handled strictly in event order, different VMs concurrently.
//!
//! Events queue up while a transition runs; consecutive updates of the same pod collapse to
//! the newest. An event older than one already handled (lower resourceVersion — the local
//! etcd-backed API server issues increasing integers) is skipped, so a write is never decided
//! on stale annotations. A stalled VM keeps its queue until the stall is cleared.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use cocoon::pods::state;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::SimError;
use crate::machine::{Step, Vm, decide};
use crate::steps::{Exec, Shared};

/// Most steps one event may take (a new pod flagged for hibernation: create, hibernate).
const MAX_STEPS: usize = 8;
/// Attempts at an event whose writes fail for a transient reason.
const MAX_ATTEMPTS: u32 = 5;

/// What the watch tells a worker.
#[derive(Debug)]
pub(crate) enum Msg {
    /// A pod of this VM was added or changed (`gone: false`), or deleted (`gone: true`).
    Pod { pod: Box<Pod>, gone: bool },
    /// The watch relisted: these pod uids exist; any other pod this worker knows is gone.
    Resync(Arc<HashSet<String>>),
    /// Faults were cleared: look at the pods again.
    Kick,
}

/// What the worker remembers about one pod.
struct Entry {
    vm: Vm,
    last: Pod,
    resource_version: Option<u64>,
}

struct Worker {
    vm_name: String,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    pods: HashMap<String, Entry>,
    local: Option<String>,
    pending: VecDeque<(Pod, bool)>,
}

/// Runs the worker of `vm_name` until its channel closes or `cancel` fires.
pub(crate) async fn run(
    vm_name: String,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    mut rx: mpsc::UnboundedReceiver<Msg>,
) {
    let mut w = Worker {
        vm_name,
        shared,
        cancel: cancel.clone(),
        pods: HashMap::new(),
        local: None,
        pending: VecDeque::new(),
    };
    loop {
        let msg = tokio::select! {
            _ = cancel.cancelled() => return,
            m = rx.recv() => match m { Some(m) => m, None => return },
        };
        w.accept(msg);
        while let Ok(m) = rx.try_recv() {
            w.accept(m);
        }
        w.drain().await;
    }
}

impl Worker {
    fn accept(&mut self, msg: Msg) {
        match msg {
            Msg::Pod { pod, gone } => self.enqueue(*pod, gone),
            Msg::Resync(alive) => {
                let vanished: Vec<Pod> = (self.pods.iter())
                    .filter(|(uid, _)| !alive.contains(*uid))
                    .map(|(_, e)| e.last.clone())
                    .collect();
                vanished.into_iter().for_each(|p| self.enqueue(p, true));
            }
            Msg::Kick if self.pending.is_empty() => {
                let known: Vec<Pod> = self.pods.values().map(|e| e.last.clone()).collect();
                known.into_iter().for_each(|p| self.enqueue(p, false));
            }
            Msg::Kick => {}
        }
    }

    fn enqueue(&mut self, pod: Pod, gone: bool) {
        if let Some((last, false)) = self.pending.back_mut()
            && !gone
            && last.metadata.uid == pod.metadata.uid
        {
            *last = pod;
            return;
        }
        self.pending.push_back((pod, gone));
    }

    async fn drain(&mut self) {
        while !self.cancel.is_cancelled() && !self.shared.faults.get(&self.vm_name).stalled {
            let Some((pod, gone)) = self.pending.pop_front() else {
                return;
            };
            self.handle(pod, gone).await;
        }
    }

    /// Takes steps for one event until the machine says there is nothing left to do.
    async fn handle(&mut self, pod: Pod, gone: bool) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let rv = resource_version(&pod);
        let entry = self.pods.entry(uid.clone()).or_insert_with(|| Entry {
            vm: Vm::from_pod(&pod),
            last: pod.clone(),
            resource_version: None,
        });
        if !gone && rv.is_some() && rv < entry.resource_version {
            return; // an older picture of the pod than one already acted on
        }
        entry.resource_version = rv;
        entry.last = pod.clone();
        self.steps(&uid, pod, gone).await;
        if gone {
            self.pods.remove(&uid);
        }
    }

    async fn steps(&mut self, uid: &str, mut pod: Pod, gone: bool) {
        let mut attempts = 0;
        for _ in 0..MAX_STEPS {
            let Some(step) = self.next_step(uid, &pod, gone) else {
                return;
            };
            match self.execute(uid, step, pod.clone()).await {
                Ok(Some(next)) => pod = next,
                Ok(None) => return,
                Err(e) => {
                    attempts += 1;
                    let (vm, category) = (&self.vm_name, e.category());
                    tracing::warn!(%vm, error = %e, category, attempts, "step failed");
                    if attempts >= MAX_ATTEMPTS || !self.backoff(attempts).await {
                        return;
                    }
                }
            }
        }
    }

    /// The machine's next step for `pod`; `None` when there is nothing (more) to do.
    fn next_step(&self, uid: &str, pod: &Pod, gone: bool) -> Option<Step> {
        let entry = self.pods.get(uid)?;
        let faults = self.shared.faults.get(&self.vm_name);
        let node = state::node_name(pod);
        let local_here = node.is_some() && self.local.as_deref() == node;
        let step = decide(&entry.vm, pod, gone, local_here, &faults);
        (step != Step::Nothing && !self.cancel.is_cancelled()).then_some(step)
    }

    /// Runs `step`, remembering the patched pod it returns.
    async fn execute(&mut self, uid: &str, step: Step, pod: Pod) -> Result<Option<Pod>, SimError> {
        let Some(entry) = self.pods.get_mut(uid) else {
            return Ok(None);
        };
        tracing::debug!(vm = %self.vm_name, ?step, "step");
        let mut exec = Exec {
            shared: &self.shared,
            vm_name: &self.vm_name,
            vm: &mut entry.vm,
            local: &mut self.local,
        };
        let next = exec.run(step, pod).await?;
        if let Some(p) = &next {
            entry.resource_version = resource_version(p);
            entry.last = p.clone();
        }
        Ok(next)
    }

    /// Waits before retrying; false when the simulator stops meanwhile.
    async fn backoff(&self, attempts: u32) -> bool {
        let delay = Duration::from_millis(200 * u64::from(attempts));
        tokio::select! {
            _ = self.cancel.cancelled() => false,
            _ = tokio::time::sleep(delay) => true, // retry pacing, not synchronisation
        }
    }
}

fn resource_version(pod: &Pod) -> Option<u64> {
    pod.metadata.resource_version.as_deref()?.parse().ok()
}
