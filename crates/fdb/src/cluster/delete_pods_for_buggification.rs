//! DeletePodsForBuggification (reference §4 step 5): fault injection through
//! `spec.buggify`. A pod whose crash-loop or no-schedule state differs from what the spec
//! asks for is deleted at once, without any safety check, and AddPods recreates it from the
//! current spec (same process group, name and PVC).
//!
//! Contract:
//! - The pod builder ([`super::resources::pod_spec`]) honours the same rules: a group listed
//!   for a container in `crashLoopContainers` (`*` meaning every group; the deprecated
//!   `crashLoop` list counts for the main container, as upstream's spec normalisation does)
//!   gets that container's command and arguments replaced by `crash-loop`; a group in
//!   `noSchedule` gets a required node affinity on `foundationdb.org/no-schedule-allowed In
//!   (true)`, a label no node is meant to carry, so the pod stays Pending.
//! - [`decide`] is pure: over the groups in the status, except those with
//!   `ResourcesTerminating`, a pod is "in crash loop" when the main or sidecar container's
//!   first argument is `crash-loop`, and "in no-schedule" when a required node-affinity term
//!   has the no-schedule key. A mismatch with the spec recreates the pod.
//! - Any deletion records one `UpdatingPods` Event and stops the pass with an immediate
//!   requeue ("Pods need to be recreated"); a pod already gone is fine.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec,
};
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::DeleteParams;

use super::resources::{MAIN_CONTAINER, SIDECAR_CONTAINER};
use super::{Pass, step_error};
use crate::crd::{FoundationDBCluster, ProcessGroupStatus, condition};

step_error!(
    DeletePodsForBuggificationError,
    "recreating pods for buggification"
);

/// The node label a no-schedule pod requires (upstream's `NodeSelectorNoScheduleLabel`).
pub const NO_SCHEDULE_LABEL: &str = "foundationdb.org/no-schedule-allowed";
/// The command and argument of a crash-looping container.
pub const CRASH_LOOP: &str = "crash-loop";

/// The step.
pub struct DeletePodsForBuggification;

/// The groups each container crash-loops in, by container name (`*` kept as is).
pub fn crash_loop_targets(cluster: &FoundationDBCluster) -> BTreeMap<String, BTreeSet<String>> {
    let buggify = &cluster.spec.buggify;
    let mut targets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for c in &buggify.crash_loop_containers {
        let ids = targets.entry(c.container_name.clone()).or_default();
        ids.extend(c.targets.iter().map(ToString::to_string));
    }
    if !buggify.crash_loop.is_empty() {
        let ids = targets.entry(MAIN_CONTAINER.to_owned()).or_default();
        ids.extend(buggify.crash_loop.iter().map(ToString::to_string));
    }
    targets
}

/// Whether container `container` of group `id` is to crash-loop.
pub fn crash_loops(cluster: &FoundationDBCluster, container: &str, id: &str) -> bool {
    crash_loop_targets(cluster)
        .get(container)
        .is_some_and(|ids| ids.contains("*") || ids.contains(id))
}

/// Whether group `id`'s pod is to fail scheduling.
pub fn no_schedule(cluster: &FoundationDBCluster, id: &str) -> bool {
    cluster
        .spec
        .buggify
        .no_schedule
        .iter()
        .any(|g| g.as_str() == id)
}

/// Applies the buggify options of group `id` to its pod spec (see the module docs).
pub fn apply_to_pod_spec(cluster: &FoundationDBCluster, id: &str, spec: &mut PodSpec) {
    for c in spec.containers.iter_mut() {
        let ours = c.name == MAIN_CONTAINER || c.name == SIDECAR_CONTAINER;
        if ours && crash_loops(cluster, &c.name, id) {
            c.command = Some(vec![CRASH_LOOP.to_owned()]);
            c.args = Some(vec![CRASH_LOOP.to_owned()]);
        }
    }
    if no_schedule(cluster, id) {
        let affinity = spec.affinity.get_or_insert_with(Affinity::default);
        let node = affinity
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        node.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: NO_SCHEDULE_LABEL.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec!["true".to_owned()]),
                }]),
                ..NodeSelectorTerm::default()
            }],
        });
    }
}

/// Whether `pod`'s main or sidecar container runs `crash-loop`.
pub fn in_crash_loop(pod: &Pod) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        (c.name == MAIN_CONTAINER || c.name == SIDECAR_CONTAINER)
            && c.args
                .as_ref()
                .and_then(|a| a.first())
                .is_some_and(|a| a == CRASH_LOOP)
    })
}

/// Whether `pod` requires the no-schedule node label.
pub fn in_no_schedule(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|sel| {
            sel.node_selector_terms
                .iter()
                .flat_map(|t| t.match_expressions.iter().flatten())
                .any(|e| e.key == NO_SCHEDULE_LABEL)
        })
}

/// A pod to recreate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recreate {
    /// The process group.
    pub group: String,
    /// The pod's name.
    pub pod: String,
    /// What differs, for the log.
    pub reason: &'static str,
}

/// See the module docs; `pods` are by process-group ID.
pub fn decide(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    pods: &BTreeMap<String, Pod>,
) -> Vec<Recreate> {
    let mut out = Vec::new();
    for g in groups {
        if g.has_condition(condition::RESOURCES_TERMINATING) {
            continue;
        }
        let id = g.process_group_id.as_str();
        let Some(pod) = pods.get(id) else {
            continue;
        };
        let should_crash = [MAIN_CONTAINER, SIDECAR_CONTAINER]
            .iter()
            .any(|c| crash_loops(cluster, c, id));
        let reason = if should_crash != in_crash_loop(pod) {
            if should_crash {
                "crash loop requested"
            } else {
                "crash loop lifted"
            }
        } else if no_schedule(cluster, id) != in_no_schedule(pod) {
            if no_schedule(cluster, id) {
                "no-schedule requested"
            } else {
                "no-schedule lifted"
            }
        } else {
            continue;
        };
        out.push(Recreate {
            group: id.to_owned(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            reason,
        });
    }
    out
}

impl DeletePodsForBuggification {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, DeletePodsForBuggificationError> {
        let pods = pass.pods().await?;
        let groups = pass.status().process_groups.clone();
        let recreate = decide(&pass.cluster, &groups, &pods);
        if recreate.is_empty() {
            return Ok(Flow::Continue);
        }
        let api = pass.api::<Pod>();
        for r in &recreate {
            tracing::info!(cluster = %pass.name(), group = %r.group, pod = %r.pod, reason = r.reason, "deleting pod for buggification");
            match api.delete(&r.pod, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let names: Vec<&str> = recreate.iter().map(|r| r.pod.as_str()).collect();
        let note = format!("Recreating pods for buggification: {}", names.join(" "));
        pass.event(false, "UpdatingPods", note).await;
        tracing::info!(cluster = %pass.name(), "Pods need to be recreated");
        Ok(Flow::stop(Duration::from_secs(1)))
    }
}

impl Step<Pass> for DeletePodsForBuggification {
    fn name(&self) -> &'static str {
        "delete_pods_for_buggification"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
#[path = "delete_pods_for_buggification_tests.rs"]
mod tests;
