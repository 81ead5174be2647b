//! Node taints (reference §4 step 8, upstream's `updateTaintCondition`): a process group whose
//! pod runs on a node carrying a taint named in
//! `automationOptions.replacements.taintReplacementOptions` gains `NodeTaintDetected`, and,
//! once that taint has been there longer than the option's `durationInSeconds`,
//! `NodeTaintReplacing`, which ReplaceFailedProcessGroups acts on after
//! `taintReplacementTimeSeconds` (guarded by `maxFaultDomainsWithTaintedProcessGroups`).
//!
//! Contract:
//! - [`update_conditions`] is pure and follows upstream's
//!   `checkIfNodeHasTaintsAndUpdateConditions`: per node taint with a key, the option with
//!   exactly that key applies, else the `*` option; options with an empty key are ignored. The first match sets `NodeTaintDetected` (now, or
//!   the taint's `timeAdded` when older); a group already `NodeTaintReplacing` keeps it; a
//!   group detected longer than the option's duration becomes `NodeTaintReplacing`. No
//!   matching taint, or no options at all, clears both conditions.
//! - Only groups with a pod that is scheduled and past `Pending` are checked (upstream's order);
//!   a node the operator cannot see (deleted, or not readable) leaves the conditions as they
//!   are and is logged, where upstream fails the whole status update.
//! - [`NodeTaints`] is the node cache the operator's watcher fills (taints only; the rest of
//!   each Node is dropped). Without it (a pass run outside the operator) or for a node it has
//!   not seen yet, the node is read from the API.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock, PoisonError};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::crd::{FoundationDBCluster, ProcessGroupStatus, TaintReplacementOption, condition};

/// The operator's node cache, set once its watcher starts.
#[derive(Default)]
pub struct NodeTaints {
    store: OnceLock<Store<Node>>,
    /// The taints last seen per node, to wake clusters only when they change.
    seen: Mutex<HashMap<String, Vec<Taint>>>,
}

impl NodeTaints {
    /// Uses `store` (the operator's node reflector) from now on.
    pub fn set_store(&self, store: Store<Node>) {
        let _ = self.store.set(store);
    }

    /// Whether `node`'s taints differ from the last ones seen (the first sighting of a node
    /// with taints counts as a change).
    pub fn changed(&self, node: &Node) -> bool {
        let taints = taints_of(node);
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let before = seen.insert(node.name_any(), taints.clone());
        before.unwrap_or_default() != taints
    }

    /// The taints of each node in `names` that can be seen: from the cache, else read from the
    /// API. A node that is gone or unreadable is left out (and logged).
    pub async fn lookup(
        &self,
        client: &kube::Client,
        names: &BTreeSet<String>,
    ) -> BTreeMap<String, Vec<Taint>> {
        let mut out = BTreeMap::new();
        let api: Api<Node> = Api::all(client.clone());
        for name in names {
            if let Some(node) = self.store.get().and_then(|s| s.get(&ObjectRef::new(name))) {
                out.insert(name.clone(), taints_of(&node));
                continue;
            }
            match api.get_opt(name).await {
                Ok(Some(node)) => {
                    out.insert(name.clone(), taints_of(&node));
                }
                Ok(None) => {
                    tracing::info!(node = %name, "node not found; taint conditions left as they are")
                }
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "reading the node failed; taint conditions left as they are")
                }
            }
        }
        out
    }
}

/// A node's taints.
fn taints_of(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// What the node cache keeps of a Node: its name and taints.
pub fn strip(node: &mut Node) {
    let meta = node.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
    node.status = None;
    if let Some(spec) = node.spec.as_mut() {
        spec.pod_cidr = None;
        spec.pod_cidrs = None;
        spec.provider_id = None;
        spec.config_source = None;
    }
}

/// Whether a cluster reacts to node taints at all.
pub fn enabled(cluster: &FoundationDBCluster) -> bool {
    !cluster
        .spec
        .automation_options
        .replacements
        .taint_replacement_options
        .is_empty()
}

/// The option that applies to a taint with key `key`: the exact key, else `*`.
fn option_for<'a>(
    options: &'a [TaintReplacementOption],
    key: &str,
) -> Option<&'a TaintReplacementOption> {
    let usable = || {
        options
            .iter()
            .filter(|o| !o.key.is_empty() && o.duration_in_seconds >= 0)
    };
    usable()
        .find(|o| o.key == key)
        .or_else(|| usable().find(|o| o.key == "*"))
}

/// See the module docs. `taints` are the taints of the group's node.
pub fn update_conditions(
    group: &mut ProcessGroupStatus,
    options: &[TaintReplacementOption],
    taints: &[Taint],
    now: Timestamp,
) {
    let mut matched = false;
    for taint in taints.iter().filter(|t| !t.key.is_empty()) {
        let Some(option) = option_for(options, &taint.key) else {
            continue;
        };
        matched = true;
        if !group.has_condition(condition::NODE_TAINT_DETECTED) {
            group.update_condition(condition::NODE_TAINT_DETECTED, true, now);
            tracing::info!(group = %group.process_group_id, taint = %taint.key, effect = %taint.effect, "node taint detected");
        }
        let Some(mut detected) = group.condition_time(condition::NODE_TAINT_DETECTED) else {
            // A removed and excluded group gains no new condition.
            return;
        };
        if let Some(added) = taint.time_added.as_ref().map(|t| t.0.as_second())
            && added < detected
        {
            group.set_condition_time(condition::NODE_TAINT_DETECTED, added);
            detected = added;
        }
        if group.has_condition(condition::NODE_TAINT_REPLACING) {
            return;
        }
        if now.as_second() - detected > option.duration_in_seconds {
            group.update_condition(condition::NODE_TAINT_REPLACING, true, now);
            tracing::info!(group = %group.process_group_id, taint = %taint.key, since = detected, duration = option.duration_in_seconds, "node taint replacing");
        }
    }
    if !matched {
        clear(group, now);
    }
}

/// The node of a pod the taint check applies to: scheduled and past `Pending`.
pub fn checked_node(pod: &k8s_openapi::api::core::v1::Pod) -> Option<&str> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase.is_none_or(|p| p == "Pending") {
        return None;
    }
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// Drops both taint conditions.
pub fn clear(group: &mut ProcessGroupStatus, now: Timestamp) {
    group.update_condition(condition::NODE_TAINT_DETECTED, false, now);
    group.update_condition(condition::NODE_TAINT_REPLACING, false, now);
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::crd::{ProcessClass, ProcessGroupId};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn group() -> ProcessGroupStatus {
        let mut g = ProcessGroupStatus::new(
            ProcessGroupId::new("storage-1"),
            ProcessClass::new("storage"),
            at(1_000),
        );
        g.process_group_conditions.clear();
        g
    }

    fn option(key: &str, secs: i64) -> TaintReplacementOption {
        TaintReplacementOption {
            key: key.into(),
            duration_in_seconds: secs,
        }
    }

    fn taint(key: &str, added: Option<i64>) -> Taint {
        Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            time_added: added.map(|s| Time(at(s))),
            value: None,
        }
    }

    fn kinds(g: &ProcessGroupStatus) -> Vec<(&str, i64)> {
        g.process_group_conditions
            .iter()
            .map(|c| (c.kind.as_str(), c.timestamp))
            .collect()
    }

    #[test]
    fn a_matching_taint_is_detected_then_replacing_after_its_duration() {
        let mut g = group();
        let opts = [option("example.com/maintenance", 60)];
        let taints = [taint("example.com/maintenance", None)];
        update_conditions(&mut g, &opts, &taints, at(2_000));
        assert_eq!(kinds(&g), [("NodeTaintDetected", 2_000)]);
        update_conditions(&mut g, &opts, &taints, at(2_060));
        assert_eq!(
            kinds(&g),
            [("NodeTaintDetected", 2_000)],
            "not past 60 s yet"
        );
        update_conditions(&mut g, &opts, &taints, at(2_061));
        assert_eq!(
            kinds(&g),
            [("NodeTaintDetected", 2_000), ("NodeTaintReplacing", 2_061)]
        );
        update_conditions(&mut g, &opts, &taints, at(3_000));
        assert_eq!(
            kinds(&g),
            [("NodeTaintDetected", 2_000), ("NodeTaintReplacing", 2_061)],
            "a second pass changes nothing"
        );
    }

    #[test]
    fn an_older_time_added_moves_detection_back_and_can_replace_at_once() {
        let mut g = group();
        let opts = [option("k", 600)];
        update_conditions(&mut g, &opts, &[taint("k", Some(1_000))], at(2_000));
        assert_eq!(
            kinds(&g),
            [("NodeTaintDetected", 1_000), ("NodeTaintReplacing", 2_000)]
        );
    }

    #[test]
    fn an_exact_key_wins_over_the_wildcard() {
        let mut g = group();
        let opts = [option("*", 0), option("k", 3_600)];
        update_conditions(&mut g, &opts, &[taint("k", None)], at(2_000));
        update_conditions(&mut g, &opts, &[taint("k", None)], at(2_010));
        assert_eq!(
            kinds(&g),
            [("NodeTaintDetected", 2_000)],
            "the exact key's hour applies, not the wildcard's 0 s"
        );
        let mut other = group();
        update_conditions(&mut other, &opts, &[taint("other", None)], at(2_000));
        update_conditions(&mut other, &opts, &[taint("other", None)], at(2_001));
        assert_eq!(
            kinds(&other),
            [("NodeTaintDetected", 2_000), ("NodeTaintReplacing", 2_001)],
            "any other key falls to the wildcard"
        );
    }

    #[test]
    fn unmatched_or_vanished_taints_clear_both_conditions() {
        let mut g = group();
        let opts = [option("k", 0)];
        update_conditions(&mut g, &opts, &[taint("k", Some(1_000))], at(2_000));
        assert_eq!(g.process_group_conditions.len(), 2);
        update_conditions(&mut g, &opts, &[taint("unrelated", None)], at(2_100));
        assert!(kinds(&g).is_empty(), "{:?}", kinds(&g));
        update_conditions(&mut g, &opts, &[taint("k", None)], at(2_200));
        update_conditions(&mut g, &opts, &[], at(2_300));
        assert!(kinds(&g).is_empty());
    }

    #[test]
    fn options_without_a_key_and_taints_without_a_key_are_ignored() {
        let mut g = group();
        update_conditions(&mut g, &[option("", 0)], &[taint("k", None)], at(2_000));
        assert!(kinds(&g).is_empty());
        update_conditions(&mut g, &[option("*", 0)], &[taint("", None)], at(2_000));
        assert!(kinds(&g).is_empty());
    }

    #[test]
    fn other_conditions_are_kept() {
        let mut g = group();
        g.update_condition(condition::POD_FAILING, true, at(1_500));
        update_conditions(&mut g, &[option("k", 0)], &[], at(2_000));
        assert_eq!(kinds(&g), [("PodFailing", 1_500)]);
    }
}
