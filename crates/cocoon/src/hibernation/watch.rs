//! What wakes a CocoonHibernation up besides its own changes: its pod.
//!
//! Contract:
//! - [`PodTriggers`] passes a pod event only when the pod is new, is deleted, or changed in
//!   what the state machine reads: its annotations (vk-cocoon's lifecycle, VM id, the
//!   hibernate request) or whether a container runs. Status heartbeats, condition timestamps
//!   and other churn do not trigger (upstream's predicate let every update through).
//! - [`referencing`] maps a pod to every CR in its namespace whose `spec.podRef.name` names
//!   it, looked up in the CR cache's index (never a scan of every CR).
//! - [`cr_fingerprint`] is the predicate of the CR watch: generation, deletion, finalizers,
//!   labels and annotations, but not the status. The controller's own status writes do not
//!   re-trigger it, so a `Failed` CR waits for a change (its pod, an edit) before it retries.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

use crate::cache::Hibernations;
use crate::crd::CocoonHibernation;
use crate::pods::state;

/// What of a pod the state machine reads, hashed.
pub fn pod_fingerprint(pod: &Pod) -> u64 {
    let mut h = DefaultHasher::new();
    let annotations: BTreeMap<_, _> = pod.annotations().iter().collect();
    annotations.hash(&mut h);
    state::container_running(pod).hash(&mut h);
    h.finish()
}

/// What of a CR should trigger a pass, hashed (see the module contract).
pub fn cr_fingerprint(cr: &CocoonHibernation) -> Option<u64> {
    let mut h = DefaultHasher::new();
    let m = &cr.metadata;
    m.generation.hash(&mut h);
    m.deletion_timestamp.is_some().hash(&mut h);
    m.finalizers.hash(&mut h);
    m.labels.hash(&mut h);
    m.annotations.hash(&mut h);
    Some(h.finish())
}

/// Filters a pod watch down to the events that matter (see the module contract).
#[derive(Debug, Default)]
pub struct PodTriggers {
    seen: HashMap<String, u64>,
    relisting: Option<HashSet<String>>,
}

impl PodTriggers {
    /// The pod to map to its CRs, if `event` matters.
    pub fn filter(&mut self, event: Event<Pod>) -> Option<Pod> {
        match event {
            Event::Init => {
                self.relisting = Some(HashSet::new());
                None
            }
            Event::InitApply(pod) => {
                if let Some(listed) = self.relisting.as_mut() {
                    listed.insert(key(&pod));
                }
                self.changed(pod)
            }
            Event::InitDone => {
                // Forget pods that went away while the watch was down.
                if let Some(listed) = self.relisting.take() {
                    self.seen.retain(|k, _| listed.contains(k));
                }
                None
            }
            Event::Apply(pod) => self.changed(pod),
            Event::Delete(pod) => {
                self.seen.remove(&key(&pod));
                Some(pod)
            }
        }
    }

    fn changed(&mut self, pod: Pod) -> Option<Pod> {
        let fp = pod_fingerprint(&pod);
        (self.seen.insert(key(&pod), fp) != Some(fp)).then_some(pod)
    }
}

// UID first: a pod deleted and recreated under the same name is new.
fn key(pod: &Pod) -> String {
    pod.uid()
        .unwrap_or_else(|| format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()))
}

/// The CRs in `pod`'s namespace whose podRef names it (an index lookup).
pub fn referencing(crs: &Hibernations, pod: &Pod) -> Vec<ObjectRef<CocoonHibernation>> {
    let key = (pod.namespace().unwrap_or_default(), pod.name_any());
    crs.refs(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).expect("pod yaml")
    }

    const BASE: &str = "metadata: {name: p, namespace: ns, uid: u1, annotations: {a: '1'}}";

    #[test]
    fn new_and_deleted_pods_trigger() {
        let mut t = PodTriggers::default();
        assert!(t.filter(Event::Apply(pod(BASE))).is_some(), "create");
        assert!(t.filter(Event::Apply(pod(BASE))).is_none(), "no change");
        assert!(t.filter(Event::Delete(pod(BASE))).is_some(), "delete");
        assert!(t.filter(Event::Apply(pod(BASE))).is_some(), "recreated");
    }

    #[test]
    fn only_annotation_and_running_changes_trigger() {
        let mut t = PodTriggers::default();
        t.filter(Event::Apply(pod(BASE)));
        let heartbeat = pod(&format!(
            "{BASE}\nstatus: {{phase: Pending, conditions: [{{type: Ready, status: 'False'}}]}}"
        ));
        assert!(t.filter(Event::Apply(heartbeat)).is_none(), "status churn");
        let labelled = pod(
            "metadata: {name: p, namespace: ns, uid: u1, labels: {x: y}, annotations: {a: '1'}}",
        );
        assert!(t.filter(Event::Apply(labelled)).is_none(), "labels");
        let annotated = pod("metadata: {name: p, namespace: ns, uid: u1, annotations: {a: '2'}}");
        assert!(t.filter(Event::Apply(annotated)).is_some(), "annotation");
        let running = pod(
            "metadata: {name: p, namespace: ns, uid: u1, annotations: {a: '2'}}\n\
             status: {containerStatuses: [{name: agent, image: x, imageID: '', ready: true, restartCount: 0, state: {running: {}}}]}",
        );
        assert!(
            t.filter(Event::Apply(running)).is_some(),
            "container running"
        );
    }

    #[test]
    fn relist_forgets_vanished_pods() {
        let mut t = PodTriggers::default();
        t.filter(Event::Apply(pod(BASE)));
        let other = pod("metadata: {name: q, namespace: ns, uid: u2}");
        t.filter(Event::Apply(other.clone()));
        t.filter(Event::Init);
        assert!(
            t.filter(Event::InitApply(other.clone())).is_none(),
            "unchanged on relist"
        );
        t.filter(Event::InitDone);
        assert_eq!(t.seen.len(), 1, "p vanished during the gap");
        assert!(
            t.filter(Event::Apply(pod(BASE))).is_some(),
            "p is new again"
        );
    }

    #[test]
    fn status_writes_do_not_change_the_cr_fingerprint() {
        let cr: CocoonHibernation = serde_yaml::from_str(
            "{apiVersion: cocoonset.cocoonstack.io/v1, kind: CocoonHibernation, \
             metadata: {name: c, namespace: ns, generation: 1}, \
             spec: {podRef: {name: p}, desire: Wake}}",
        )
        .expect("cr");
        let mut with_status = cr.clone();
        with_status.status = Some(crate::crd::CocoonHibernationStatus {
            phase: Some(crate::crd::HibernationPhase::Failed),
            ..Default::default()
        });
        assert_eq!(cr_fingerprint(&cr), cr_fingerprint(&with_status));
        let mut edited = cr.clone();
        edited.metadata.annotations = Some([("retry".to_owned(), "1".to_owned())].into());
        assert_ne!(cr_fingerprint(&cr), cr_fingerprint(&edited));
        let mut respec = cr.clone();
        respec.metadata.generation = Some(2);
        assert_ne!(cr_fingerprint(&cr), cr_fingerprint(&respec));
    }
}
