//! The watch caches the controllers read instead of the API server, and the in-memory
//! bookkeeping that keeps reading them safe.
//!
//! Contract:
//! - [`SetPods`]: the pods carrying a set label, indexed by `(namespace, set name)`
//!   ([`kit::index`]), managed fields stripped ([`strip_pod`]); kept by the CocoonSet
//!   controller's pod watch. [`Hibernations`]: the CocoonHibernations indexed by
//!   `(namespace, podRef.name)`, kept by the CocoonHibernation controller's watch and read by
//!   both controllers (restore intent, holds, the pods a pod event wakes, siblings on delete).
//! - [`Expectations`]: the pods a set's passes created that its pod cache has not shown yet.
//!   A cache that has listed and then shown every such pod holds every pod the set owns (a
//!   pod created before the list is in it, one created after is expected until seen), so a
//!   deleted set may wait on the cache alone; while one is still expected, the caller asks the
//!   API server instead ([`Expectations::reset_from_list`] then keeps only what the list has
//!   and the cache lacks: a pod created and deleted during a watch gap is no longer waited for).
//!   It also remembers deletions sent and not yet shown, so a pass on a lagging cache does not
//!   send them again ([`Expectations::delete_once`]).
//!   A pass of a set with a create younger than [`CREATE_WAIT`] still unseen does not run
//!   ([`Expectations::awaiting`]): the pod's watch event starts the next pass, which then sees
//!   it, instead of a pass on the lagging cache creating it again (an AlreadyExists and a GET
//!   per pod). An older unseen create (a pod created and deleted in a watch gap) no longer
//!   holds the set back.
//! - [`HibernateTags`]: `<vm>:hibernate` confirmed present for a pod (uid) at a set generation,
//!   so a suspended set's verification probes each VM once per round, not once per pass.
//!   Forgotten whenever this operator deletes the tag.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kit::index::{Indexed, IndexedWriter};
use kube::ResourceExt;

use crate::crd::CocoonHibernation;
use crate::names;

/// `(namespace, set name)`.
pub type SetKey = (String, String);
/// `(namespace, pod name)`.
pub type PodKey = (String, String);
/// How long a set's passes wait for the cache to show a pod they created.
pub const CREATE_WAIT: Duration = Duration::from_secs(10);
/// Set pods by set.
pub type SetPods = Indexed<Pod, SetKey>;
/// CocoonHibernations by the pod they name.
pub type Hibernations = Indexed<CocoonHibernation, PodKey>;

/// A store of set pods and its writer (see the module contract).
pub fn set_pods() -> (SetPods, IndexedWriter<Pod, SetKey>) {
    kit::index::store(|p: &Pod| {
        let ns = p.namespace().unwrap_or_default();
        p.labels()
            .get(names::LABEL_SET)
            .map(|set| (ns, set.clone()))
            .into_iter()
            .collect()
    })
}

/// A store of CocoonHibernations and its writer (see the module contract).
pub fn hibernations() -> (Hibernations, IndexedWriter<CocoonHibernation, PodKey>) {
    kit::index::store(|cr: &CocoonHibernation| {
        vec![(
            cr.namespace().unwrap_or_default(),
            cr.spec.pod_ref.name.clone(),
        )]
    })
}

/// What no controller reads of a cached pod: its managed fields.
pub fn strip_pod(pod: &mut Pod) {
    pod.managed_fields_mut().clear();
}

/// The uid of the set that controls `pod`, if any.
fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Pods created but not yet seen by the cache, per set uid, and pods whose deletion was
/// sent but is not in the cache yet (see the module contract).
#[derive(Default)]
pub struct Expectations(
    Mutex<HashMap<String, HashMap<String, Instant>>>,
    Mutex<HashSet<String>>,
);

impl Expectations {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Instant>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn deleting(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.1.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A deletion of `pod` is about to be sent: `false` when one was sent already and the
    /// cache has not shown the pod terminating (or gone) since.
    pub fn delete_once(&self, pod: &Pod) -> bool {
        pod.uid().is_none_or(|uid| self.deleting().insert(uid))
    }

    /// A pass of set `set_uid` created `pod`.
    pub fn created(&self, set_uid: &str, pod: &Pod) {
        if let Some(uid) = pod.uid() {
            self.map()
                .entry(set_uid.to_owned())
                .or_default()
                .insert(uid, Instant::now());
        }
    }

    /// The deletion of `pod` failed: the next pass sends it again.
    pub fn delete_failed(&self, pod: &Pod) {
        if let Some(uid) = pod.uid() {
            self.deleting().remove(&uid);
        }
    }

    /// The pod watch showed `pod` (created, changed or deleted; `gone` for a deletion).
    pub fn observed(&self, pod: &Pod, gone: bool) {
        if (gone || pod.metadata.deletion_timestamp.is_some())
            && let Some(uid) = pod.uid()
        {
            self.deleting().remove(&uid);
        }
        let (Some(set), Some(uid)) = (controller_uid(pod), pod.uid()) else {
            return;
        };
        let mut map = self.map();
        if let Some(pending) = map.get_mut(set) {
            pending.remove(&uid);
            if pending.is_empty() {
                map.remove(set);
            }
        }
    }

    /// Crosses off the pods of `set_uid` in `cached`; when the cache shows every pod, forgets
    /// the set. The newest creation still unseen, if any.
    fn newest_unseen<'p>(
        &self,
        set_uid: &str,
        cached: impl IntoIterator<Item = &'p Pod>,
    ) -> Option<Instant> {
        let mut map = self.map();
        let pending = map.get_mut(set_uid)?;
        for uid in cached.into_iter().filter_map(|p| p.uid()) {
            pending.remove(&uid);
        }
        let newest = pending.values().max().copied();
        if newest.is_none() {
            map.remove(set_uid);
        }
        newest
    }

    /// Whether a pod of `set_uid` is still expected, after crossing off those in `cached`.
    pub fn pending(&self, set_uid: &str, cached: &[Arc<Pod>]) -> bool {
        self.newest_unseen(set_uid, cached.iter().map(|p| &**p))
            .is_some()
    }

    /// How long a pass of `set_uid` should still wait for the cache to show a pod it created
    /// less than [`CREATE_WAIT`] ago (after crossing off those in `cached`); `None`: run.
    pub fn awaiting<'p>(
        &self,
        set_uid: &str,
        cached: impl IntoIterator<Item = &'p Pod>,
    ) -> Option<Duration> {
        let newest = self.newest_unseen(set_uid, cached)?;
        CREATE_WAIT
            .checked_sub(newest.elapsed())
            .filter(|d| !d.is_zero())
    }

    /// After a live list of the set's pods: expect only those the list has and `cached`
    /// lacks.
    pub fn reset_from_list(&self, set_uid: &str, listed: &[Pod], cached: &[Arc<Pod>]) {
        let seen: HashSet<String> = cached.iter().filter_map(|p| p.uid()).collect();
        let mut map = self.map();
        let created = map.remove(set_uid).unwrap_or_default();
        let missing: HashMap<String, Instant> = listed
            .iter()
            .filter_map(|p| p.uid())
            .filter(|u| !seen.contains(u))
            .map(|u| {
                let at = created.get(&u).copied().unwrap_or_else(Instant::now);
                (u, at)
            })
            .collect();
        if missing.is_empty() {
            map.remove(set_uid);
        } else {
            map.insert(set_uid.to_owned(), missing);
        }
    }

    /// The set is gone.
    pub fn forget(&self, set_uid: &str) {
        self.map().remove(set_uid);
    }
}

/// `<vm>:hibernate` tags confirmed present, by VM (see the module contract).
#[derive(Default)]
pub struct HibernateTags(Mutex<HashMap<String, (String, i64)>>);

impl HibernateTags {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, i64)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the tag of `vm` was confirmed for pod `pod_uid` at `generation`.
    pub fn confirmed(&self, vm: &str, pod_uid: &str, generation: i64) -> bool {
        self.map()
            .get(vm)
            .is_some_and(|(uid, g)| uid == pod_uid && *g == generation)
    }

    /// The tag of `vm` is present, seen for pod `pod_uid` at `generation`.
    pub fn record(&self, vm: &str, pod_uid: &str, generation: i64) {
        self.map()
            .insert(vm.to_owned(), (pod_uid.to_owned(), generation));
    }

    /// This operator deleted (or is deleting) the tag of `vm`.
    pub fn forget(&self, vm: &str) {
        self.map().remove(vm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, owner: &str) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {
            "name": uid, "namespace": "ns", "uid": uid,
            "ownerReferences": [{"apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonSet",
                                 "name": "s", "uid": owner, "controller": true}],
        }}))
        .expect("pod")
    }

    #[test]
    fn a_created_pod_is_expected_until_the_cache_shows_it() {
        let e = Expectations::default();
        e.created("set", &pod("a", "set"));
        e.created("set", &pod("b", "set"));
        assert!(e.pending("set", &[]));
        e.observed(&pod("a", "set"), false);
        assert!(e.pending("set", &[]), "b not seen yet");
        assert!(
            !e.pending("set", &[Arc::new(pod("b", "set"))]),
            "b in the cache (its event came before the create returned)"
        );
        assert!(!e.pending("other", &[]));
    }

    #[test]
    fn a_pass_waits_only_for_a_recent_unseen_create() {
        let e = Expectations::default();
        assert_eq!(e.awaiting("set", []), None);
        e.created("set", &pod("a", "set"));
        let wait = e.awaiting("set", []).expect("a is not in the cache yet");
        assert!(wait <= CREATE_WAIT && wait > CREATE_WAIT / 2, "{wait:?}");
        assert_eq!(e.awaiting("set", &[pod("a", "set")]), None);
        // A create the cache never showed stops holding the set back after CREATE_WAIT.
        e.created("set", &pod("b", "set"));
        e.map()
            .get_mut("set")
            .unwrap()
            .insert("b".into(), Instant::now() - CREATE_WAIT);
        assert_eq!(e.awaiting("set", []), None);
        assert!(
            e.pending("set", &[]),
            "a deleted set still asks the API server"
        );
    }

    #[test]
    fn a_live_list_keeps_only_what_the_cache_lacks() {
        let e = Expectations::default();
        e.created("set", &pod("gone", "set"));
        e.created("set", &pod("late", "set"));
        let listed = [pod("late", "set"), pod("old", "set")];
        e.reset_from_list("set", &listed, &[Arc::new(pod("old", "set"))]);
        assert!(e.pending("set", &[]), "late is still expected");
        e.observed(&pod("late", "set"), false);
        assert!(
            !e.pending("set", &[]),
            "gone was created and deleted in a gap"
        );
        e.created("set", &pod("x", "set"));
        e.forget("set");
        assert!(!e.pending("set", &[]));
    }

    #[test]
    fn a_deletion_is_sent_once_until_the_cache_shows_it() {
        let e = Expectations::default();
        let p = pod("a", "set");
        assert!(e.delete_once(&p));
        assert!(!e.delete_once(&p), "the cache still shows it running");
        e.observed(&p, false);
        assert!(!e.delete_once(&p), "an unrelated update");
        e.observed(&p, true);
        assert!(
            e.delete_once(&p),
            "gone and back (a fresh uid would be new anyway)"
        );
    }

    #[test]
    fn a_tag_is_confirmed_per_pod_and_generation_until_forgotten() {
        let t = HibernateTags::default();
        t.record("vm", "pod-1", 3);
        assert!(t.confirmed("vm", "pod-1", 3));
        assert!(!t.confirmed("vm", "pod-1", 4), "a new round probes again");
        assert!(!t.confirmed("vm", "pod-2", 3), "a new pod probes again");
        t.forget("vm");
        assert!(!t.confirmed("vm", "pod-1", 3));
    }
}
