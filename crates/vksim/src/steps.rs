//! Executing one [`Step`] of the machine: the lifecycle annotation writes and registry calls
//! vk-cocoon makes for it, in its order. Every lifecycle write carries the pod's current
//! generation stamp in the same patch. Returns the patched pod to decide the next step on, or
//! `None` when there is nothing more to do for this event (pod gone, delete handled).

use std::sync::Arc;

use cocoon::names::{self, lifecycle};
use cocoon::pods::state;
use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};

use crate::error::SimError;
use crate::faults::Faults;
use crate::machine::{Runtime, Source, Step, Vm, state_of};
use crate::patch::{Annotations, Writer};
use crate::snapshots::{Snapshots, payload};
use crate::stats::{Counter, Counters};

/// What every worker shares.
pub(crate) struct Shared {
    pub writer: Writer,
    pub snapshots: Snapshots,
    pub faults: Faults,
    pub counters: Arc<Counters>,
}

/// One step's working set: the VM name, its memory for this pod, and the node-local snapshot.
pub(crate) struct Exec<'a> {
    pub shared: &'a Shared,
    pub vm_name: &'a str,
    pub vm: &'a mut Vm,
    /// The node holding this VM's kept node-local snapshot, if any.
    pub local: &'a mut Option<String>,
}

type Next = Result<Option<Pod>, SimError>;

impl Exec<'_> {
    /// Runs `step` against `pod`.
    pub(crate) async fn run(&mut self, step: Step, pod: Pod) -> Next {
        match step {
            Step::Nothing => Ok(None),
            Step::Publish => self.publish(&pod).await,
            Step::Create(source) => self.boot(pod, source, Counter::Created).await,
            Step::Wake(source) => self.boot(pod, source, Counter::Woken).await,
            Step::Hibernate { fail } => self.hibernate(pod, fail).await,
            Step::FailCreate(message) => self.fail_create(pod, &message).await,
            Step::Hold => self.shared.writer.hold(&pod).await,
            Step::Delete {
                push_latest,
                keep_local,
            } => self.delete(pod, push_latest, keep_local).await,
            Step::Release => {
                self.shared.writer.release(&pod).await?;
                tracing::debug!(vm = self.vm_name, "pod released");
                Ok(None)
            }
        }
    }

    async fn write(&self, pod: &Pod, changes: Annotations) -> Next {
        self.shared.writer.annotate(pod, changes).await
    }

    async fn publish(&mut self, pod: &Pod) -> Next {
        let changes = Annotations::lifecycle(state_of(&self.vm.runtime), stamp(pod), None);
        let changes = match &self.vm.runtime {
            Runtime::Live { id, ip } => changes.vm(Some((id, ip))),
            Runtime::Hibernated => changes.vm(None),
            Runtime::Absent => changes,
        };
        self.vm.failed_at = None;
        self.write(pod, changes).await
    }

    /// `creating` → restore the disk from `source` → VM id/ip and `ready`.
    async fn boot(&mut self, pod: Pod, source: Source, counter: Counter) -> Next {
        let creating = Annotations::lifecycle(lifecycle::CREATING, stamp(&pod), None);
        let Some(pod) = self.write(&pod, creating).await? else {
            return Ok(None);
        };
        if let Err(message) = self.restore(source).await {
            return self.fail(&pod, &message).await;
        }
        let seq = self.shared.counters.next_sequence();
        let id = vm_id(self.vm_name, seq);
        let ip = pod_ip(&pod).unwrap_or_else(|| fallback_ip(self.vm_name));
        self.vm.runtime = Runtime::Live {
            id: id.clone(),
            ip: ip.clone(),
        };
        self.vm.failed_at = None;
        self.shared.counters.bump(counter);
        tracing::info!(vm = self.vm_name, %id, %ip, ?source, "VM running");
        let ready = Annotations::lifecycle(lifecycle::READY, stamp(&pod), None);
        self.write(&pod, ready.vm(Some((&id, &ip)))).await
    }

    async fn restore(&mut self, source: Source) -> Result<(), String> {
        match source {
            Source::Fresh => Ok(()),
            Source::Local => {
                *self.local = None;
                Ok(())
            }
            Source::Registry => {
                let repo = self.shared.snapshots.repo(self.vm_name);
                match self
                    .shared
                    .snapshots
                    .pull(self.vm_name, names::TAG_HIBERNATE)
                    .await
                {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err(format!(
                        "restore {repo}: tag {} not found in the registry",
                        names::TAG_HIBERNATE
                    )),
                    Err(e) => Err(format!("restore {repo}: {e}")),
                }
            }
        }
    }

    /// `hibernating` → push `:hibernate` → id/ip removed and `hibernated`; with `fail`, the
    /// pushed tag is deleted again and the VM stays live with lifecycle `failed`.
    async fn hibernate(&mut self, pod: Pod, fail: Option<String>) -> Next {
        let hibernating = Annotations::lifecycle(lifecycle::HIBERNATING, stamp(&pod), None);
        let Some(pod) = self.write(&pod, hibernating).await? else {
            return Ok(None);
        };
        let seq = self.shared.counters.next_sequence();
        let bytes = payload(self.vm_name, names::TAG_HIBERNATE, seq);
        let snapshots = &self.shared.snapshots;
        if let Err(e) = snapshots
            .push(self.vm_name, names::TAG_HIBERNATE, &bytes)
            .await
        {
            return self.fail(&pod, &format!("hibernate: {e}")).await;
        }
        if let Some(message) = fail {
            self.shared.faults.consume_hibernate(self.vm_name);
            if let Err(e) = snapshots.delete(self.vm_name, names::TAG_HIBERNATE).await {
                tracing::warn!(vm = self.vm_name, error = %e, "could not drop the pushed tag");
            }
            return self.fail(&pod, &message).await;
        }
        self.vm.runtime = Runtime::Hibernated;
        self.vm.failed_at = None;
        self.shared.counters.bump(Counter::Hibernated);
        tracing::info!(vm = self.vm_name, "VM hibernated");
        let done = Annotations::lifecycle(lifecycle::HIBERNATED, stamp(&pod), None);
        self.write(&pod, done.vm(None)).await
    }

    async fn fail_create(&mut self, pod: Pod, message: &str) -> Next {
        let creating = Annotations::lifecycle(lifecycle::CREATING, stamp(&pod), None);
        match self.write(&pod, creating).await? {
            Some(pod) => self.fail(&pod, message).await,
            None => Ok(None),
        }
    }

    /// Lifecycle `failed` with `message`, sticky for the pod's current generation stamp.
    async fn fail(&mut self, pod: &Pod, message: &str) -> Next {
        let generation = stamp(pod);
        self.vm.failed_at = Some(generation);
        self.shared.counters.bump(Counter::Failed);
        tracing::warn!(vm = self.vm_name, generation, message, "VM failed");
        let failed = Annotations::lifecycle(lifecycle::FAILED, generation, Some(message));
        self.write(pod, failed).await
    }

    /// Pod deleted: `:latest` if asked, VM removed, node-local snapshot kept or dropped. The
    /// pod is released by the next step ([`Step::Release`]): only now may it go.
    async fn delete(&mut self, pod: Pod, push_latest: bool, keep_local: bool) -> Next {
        if push_latest {
            let seq = self.shared.counters.next_sequence();
            let bytes = payload(self.vm_name, names::TAG_LATEST, seq);
            let push = self
                .shared
                .snapshots
                .push(self.vm_name, names::TAG_LATEST, &bytes);
            if let Err(e) = push.await {
                tracing::warn!(vm = self.vm_name, error = %e, "could not push the latest snapshot");
            }
        }
        let node = state::node_name(&pod).map(str::to_owned);
        let had_vm = self.vm.runtime != Runtime::Absent;
        if keep_local && had_vm {
            *self.local = node;
        } else if *self.local == node {
            *self.local = None;
        }
        if had_vm {
            self.shared.counters.bump(Counter::Deleted);
        }
        tracing::info!(vm = self.vm_name, push_latest, keep_local, "VM removed");
        self.vm.runtime = Runtime::Absent;
        self.vm.deleted = true;
        Ok(Some(pod))
    }
}

/// The pod's generation stamp.
fn stamp(pod: &Pod) -> i64 {
    state::generation_stamp(pod)
}

/// A VM id: `vm-` and 12 hex digits of a hash of the VM name and a sequence number.
pub(crate) fn vm_id(vm: &str, sequence: u64) -> String {
    let digest = Sha256::digest(format!("{vm}/{sequence}").as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("vm-{hex}")
}

fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// A loopback address for a VM whose pod has no IP yet (127.2.x.y; kwok pods use 127.1.x.y).
pub(crate) fn fallback_ip(vm: &str) -> String {
    let digest = Sha256::digest(vm.as_bytes());
    format!("127.2.{}.{}", digest[0], digest[1].max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_fallback_ips_are_stable_and_distinct() {
        assert_eq!(vm_id("vk-a-b-0", 1), vm_id("vk-a-b-0", 1));
        assert_ne!(vm_id("vk-a-b-0", 1), vm_id("vk-a-b-0", 2));
        assert_eq!(vm_id("vk-a-b-0", 1).len(), "vm-".len() + 12);
        let ip = fallback_ip("vk-a-b-0");
        assert!(ip.starts_with("127.2."), "{ip}");
        assert_eq!(ip, fallback_ip("vk-a-b-0"));
    }
}
