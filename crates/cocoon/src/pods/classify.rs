//! Sorting a set's pods by role (reference §4.1 step 4). Pure.
//!
//! Contract: only pods whose controller owner reference carries the set's uid and that are not
//! being deleted are kept. Every kept pod is in `all` (by name); a `main` pod is the main (the
//! first by name if several), a `sub-agent` pod with an integer slot label ≥ 1 is a sub-agent
//! and a `toolbox` pod with a slot label is the toolbox of that name. Pods with an unknown
//! role or an unusable slot label are only in `all`, so the caller can still see and clean
//! them up.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::state;
use crate::crd::CocoonSet;
use crate::names::{self, Role};

/// A set's pods, by role.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Classified {
    /// The main agent (slot 0).
    pub main: Option<Pod>,
    /// Sub-agents by slot.
    pub subs: BTreeMap<i32, Pod>,
    /// Toolboxes by toolbox name.
    pub toolboxes: BTreeMap<String, Pod>,
    /// Every pod controlled by the set and not being deleted, by name.
    pub all: Vec<Pod>,
}

/// Classifies `pods` (typically those labelled with the set's name) for `set`.
pub fn classify(set: &CocoonSet, pods: Vec<Pod>) -> Classified {
    let uid = set.metadata.uid.as_deref().unwrap_or_default();
    let mut all: Vec<Pod> = pods
        .into_iter()
        .filter(|p| controlled_by(p, uid) && p.metadata.deletion_timestamp.is_none())
        .collect();
    all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut out = Classified::default();
    for pod in &all {
        let role = state::label(pod, names::LABEL_ROLE).and_then(Role::parse);
        let slot = state::label(pod, names::LABEL_SLOT);
        match (role, slot) {
            (Some(Role::Main), _) => {
                out.main.get_or_insert_with(|| pod.clone());
            }
            (Some(Role::SubAgent), Some(slot)) => {
                if let Some(slot) = slot.parse::<i32>().ok().filter(|s| *s >= 1) {
                    out.subs.entry(slot).or_insert_with(|| pod.clone());
                }
            }
            (Some(Role::Toolbox), Some(name)) => {
                out.toolboxes
                    .entry(name.to_owned())
                    .or_insert_with(|| pod.clone());
            }
            _ => {}
        }
    }
    out.all = all;
    out
}

/// Whether `pod`'s controller owner reference points at the object with `uid`.
pub fn controlled_by(pod: &Pod, uid: &str) -> bool {
    !uid.is_empty()
        && pod
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::build::tests::{pod, set};
    use crate::pods::build::{main_pod, sub_agent_pod, toolbox_pod};

    /// A pod owned (as controller) by `uid` with `role`/`slot` labels.
    fn owned(name: &str, role: &str, slot: &str, uid: &str) -> Pod {
        pod(&format!(
            r#"
metadata:
  name: {name}
  labels: {{cocoonset.cocoonstack.io/role: "{role}", cocoonset.cocoonstack.io/slot: "{slot}"}}
  ownerReferences:
    - {{apiVersion: cocoonset.cocoonstack.io/v1, kind: CocoonSet, name: demo, uid: {uid}, controller: true}}
"#
        ))
    }

    fn names_of(pods: &[Pod]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn classifies_by_role() {
        let s = set("agent: {image: img, replicas: 2}\ntoolboxes: [{name: db, image: pg}]");
        let tb = &s.spec.toolboxes.as_ref().unwrap()[0];
        let pods = vec![
            toolbox_pod(&s, tb),
            sub_agent_pod(&s, 2, "vk-ns-demo-0", None),
            main_pod(&s),
            sub_agent_pod(&s, 1, "vk-ns-demo-0", None),
        ];
        let c = classify(&s, pods);
        assert_eq!(
            c.main.as_ref().and_then(|p| p.metadata.name.as_deref()),
            Some("demo-0")
        );
        assert_eq!(c.subs.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(c.subs[&2].metadata.name.as_deref(), Some("demo-2"));
        assert_eq!(c.toolboxes.keys().collect::<Vec<_>>(), ["db"]);
        assert_eq!(names_of(&c.all), ["demo-0", "demo-1", "demo-2", "demo-db"]);
    }

    #[test]
    fn unknown_roles_and_bad_slots_are_only_in_all() {
        let s = set("agent: {image: img}");
        let pods = vec![
            owned("demo-x", "sidecar", "x", "uid-1"),
            owned("demo-y", "sub-agent", "y", "uid-1"),
            owned("demo-z", "sub-agent", "0", "uid-1"),
            owned("demo-w", "", "", "uid-1"),
        ];
        let c = classify(&s, pods);
        assert!(c.main.is_none() && c.subs.is_empty() && c.toolboxes.is_empty());
        assert_eq!(names_of(&c.all), ["demo-w", "demo-x", "demo-y", "demo-z"]);
    }

    #[test]
    fn keeps_only_pods_the_set_controls() {
        let s = set("agent: {image: img, replicas: 1}");
        let mut not_controller = owned("demo-1", "sub-agent", "1", "uid-1");
        not_controller.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
        let no_owner =
            pod(r#"{metadata: {name: demo-0, labels: {cocoonset.cocoonstack.io/role: main}}}"#);
        let pods = vec![
            owned("demo-0", "main", "0", "uid-other"),
            not_controller,
            no_owner,
            owned("demo-db", "toolbox", "db", "uid-2"),
        ];
        assert_eq!(classify(&s, pods), Classified::default());
        let mut unsaved = s.clone();
        unsaved.metadata.uid = None;
        assert!(
            classify(&unsaved, vec![main_pod(&s)]).all.is_empty(),
            "no uid owns nothing"
        );
    }

    #[test]
    fn skips_deleting_pods() {
        let s = set("agent: {image: img, replicas: 1}");
        let mut deleting = main_pod(&s);
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let c = classify(
            &s,
            vec![deleting, sub_agent_pod(&s, 1, "vk-ns-demo-0", None)],
        );
        assert!(c.main.is_none());
        assert_eq!(names_of(&c.all), ["demo-1"]);
    }

    #[test]
    fn duplicates_resolve_to_the_first_by_name() {
        let s = set("agent: {image: img}");
        let pods = vec![
            owned("demo-main-b", "main", "0", "uid-1"),
            owned("demo-main-a", "main", "0", "uid-1"),
        ];
        let c = classify(&s, pods);
        assert_eq!(
            c.main.unwrap().metadata.name.as_deref(),
            Some("demo-main-a")
        );
        assert_eq!(c.all.len(), 2);
    }
}
