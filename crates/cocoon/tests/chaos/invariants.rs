//! The cocoon invariants, checked after every watch event the scenario's observer applies
//! (and every 250 ms; the registry ones every [`SNAPSHOT_PERIOD`]), never only at the end:
//!
//! - `two_mains`: at most one unfinished main Pod (role `main`) per set, and at most one
//!   unfinished Pod per VM name, at any moment.
//! - `wake_from_older_generation`: a Pod created to restore a VM from its snapshot
//!   (`restore-from-hibernate=true`, a new UID for the VM name) only after the VM's previous
//!   Pod was last seen `hibernated` for its own current generation stamp, i.e. the snapshot
//!   in the registry is this round's, not one left from an earlier round.
//! - `snapshot_deleted_while_needed` ([`snapshots`]): a `<vm>:hibernate` tag is absent while
//!   something still needs it: a Pod whose VM is `hibernated`, a Pod restoring from it (not
//!   yet live), a released set (`hibernated-on-node`) whose main is not live, a
//!   CocoonHibernation that is `Hibernated`. An absent tag is only reported when a fresh read
//!   of the needing object after the probe shows it unchanged (same resourceVersion), so a
//!   stale cache never raises a false alarm.
//! - `child_without_owner`: a Pod of a set without an owner reference.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cocoon::crd::{CocoonHibernation, CocoonSet, HibernationPhase};
use cocoon::names;
use cocoon::pods::state;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use testenv::chaos::Violations;

/// How often the registry is probed for the snapshots that are needed.
pub const SNAPSHOT_PERIOD: Duration = Duration::from_millis(500);

/// The stores the checks read.
#[derive(Clone)]
pub struct Stores {
    pub pods: Store<Pod>,
    pub sets: Store<CocoonSet>,
    pub hibernations: Store<CocoonHibernation>,
}

/// The last Pod seen for a VM name.
struct LastPod {
    uid: String,
    /// `hibernated` for its own current generation stamp.
    hibernated_current: bool,
}

/// The checks' memory across events.
#[derive(Default)]
pub struct Memory {
    vms: BTreeMap<String, LastPod>,
}

/// Runs every check that reads only the watch caches once.
pub fn check(s: &Stores, mem: &mut Memory, v: &Violations) {
    let pods = s.pods.state();
    two_mains(&pods, v);
    wake_from_older_generation(&pods, mem, v);
    child_without_owner(&pods, v);
}

fn unfinished(p: &Pod) -> bool {
    !state::is_terminal(p)
}

fn two_mains(pods: &[Arc<Pod>], v: &Violations) {
    let mut mains: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut by_vm: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for p in pods.iter().filter(|p| unfinished(p)) {
        if state::label(p, names::LABEL_ROLE) == Some(names::Role::Main.as_str())
            && let Some(set) = state::label(p, names::LABEL_SET)
        {
            mains.entry(set).or_default().push(p.name_any());
        }
        if let Some(vm) = state::vm_name(p) {
            by_vm.entry(vm).or_default().push(p.name_any());
        }
    }
    for (set, pods) in mains.into_iter().filter(|(_, p)| p.len() > 1) {
        v.record("two_mains", format!("set {set}: mains {pods:?}"));
    }
    for (vm, pods) in by_vm.into_iter().filter(|(_, p)| p.len() > 1) {
        v.record("two_mains", format!("VM {vm}: pods {pods:?}"));
    }
}

fn wake_from_older_generation(pods: &[Arc<Pod>], mem: &mut Memory, v: &Violations) {
    for p in pods {
        let (Some(vm), Some(uid)) = (state::vm_name(p), p.uid()) else {
            continue;
        };
        let hibernated_current = state::hibernated_for(p, state::generation_stamp(p));
        match mem.vms.get_mut(vm) {
            Some(last) if last.uid == uid => last.hibernated_current = hibernated_current,
            previous => {
                if let Some(last) = previous
                    && state::flag(p, names::ANN_RESTORE)
                    && !last.hibernated_current
                {
                    v.record(
                        "wake_from_older_generation",
                        format!(
                            "pod {} restores VM {vm} though its previous pod was not hibernated for its current generation",
                            p.name_any()
                        ),
                    );
                }
                mem.vms.insert(
                    vm.to_owned(),
                    LastPod {
                        uid,
                        hibernated_current,
                    },
                );
            }
        }
    }
}

fn child_without_owner(pods: &[Arc<Pod>], v: &Violations) {
    for p in pods {
        if state::label(p, names::LABEL_SET).is_some() && p.owner_references().is_empty() {
            v.record("child_without_owner", format!("Pod {}", p.name_any()));
        }
    }
}

/// Something that needs a `:hibernate` tag, and how to read it again.
enum Need {
    Pod(String),
    Set(String),
    Hibernation(String),
}

/// One pass of `snapshot_deleted_while_needed` over the caches, probing `registry`.
pub async fn snapshots(s: &Stores, client: &Client, ns: &str, registry: &str, v: &Violations) {
    let mut needs: Vec<(String, Need, Option<String>)> = Vec::new();
    for p in s.pods.state() {
        let (Some(vm), None) = (state::vm_name(&p), &p.metadata.deletion_timestamp) else {
            continue;
        };
        let hibernated = state::lifecycle_state(&p) == Some(names::lifecycle::HIBERNATED);
        let restoring = state::flag(&p, names::ANN_RESTORE)
            && !state::vm_live(&p)
            && state::lifecycle_state(&p) != Some(names::lifecycle::FAILED);
        if hibernated || restoring {
            needs.push((vm.to_owned(), Need::Pod(p.name_any()), p.resource_version()));
        }
    }
    for set in s.sets.state() {
        if set.metadata.deletion_timestamp.is_none()
            && set
                .annotations()
                .contains_key(names::ANN_HIBERNATED_ON_NODE)
        {
            let vm = names::agent_vm_name(ns, &set.name_any(), 0);
            needs.push((vm, Need::Set(set.name_any()), set.resource_version()));
        }
    }
    for h in s.hibernations.state() {
        let st = h.status.as_ref();
        if h.metadata.deletion_timestamp.is_none()
            && st.and_then(|s| s.phase) == Some(HibernationPhase::Hibernated)
            && let Some(vm) = st.and_then(|s| s.vm_name.clone())
        {
            needs.push((vm, Need::Hibernation(h.name_any()), h.resource_version()));
        }
    }
    for (vm, need, rv) in needs {
        match testenv::registry::tag_exists(registry, None, &vm, names::TAG_HIBERNATE).await {
            Ok(false) => {}
            _ => continue,
        }
        if let Some(what) = still_needs(client, ns, &need, rv.as_deref()).await {
            v.record(
                "snapshot_deleted_while_needed",
                format!(
                    "{vm}:{} is gone while {what} needs it",
                    names::TAG_HIBERNATE
                ),
            );
        }
    }
}

/// Reads the needing object again: `Some(description)` when it is unchanged since the cache's
/// `rv` (so it needed the tag all along, the probe included).
async fn still_needs(client: &Client, ns: &str, need: &Need, rv: Option<&str>) -> Option<String> {
    let same = |now: Option<String>| now.is_some() && now.as_deref() == rv;
    match need {
        Need::Pod(name) => {
            let p = Api::<Pod>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await
                .ok()??;
            same(p.resource_version()).then(|| {
                format!(
                    "pod {name} (lifecycle {:?}, restore {})",
                    state::lifecycle_state(&p),
                    state::flag(&p, names::ANN_RESTORE)
                )
            })
        }
        Need::Set(name) => {
            let set = Api::<CocoonSet>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await
                .ok()??;
            let main = Api::<Pod>::namespaced(client.clone(), ns)
                .get_opt(&names::agent_pod_name(name, 0))
                .await
                .ok()?;
            let main_live = main.as_ref().is_some_and(state::vm_live);
            (same(set.resource_version()) && !main_live)
                .then(|| format!("released set {name} (its main is not live)"))
        }
        Need::Hibernation(name) => {
            let h = Api::<CocoonHibernation>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await
                .ok()??;
            same(h.resource_version()).then(|| format!("CocoonHibernation {name} (Hibernated)"))
        }
    }
}
