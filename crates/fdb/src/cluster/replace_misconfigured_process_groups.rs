//! ReplaceMisconfiguredProcessGroups (reference §4 step 7): a process group whose pod or PVC
//! can only be fixed by a new group is marked for removal; AddProcessGroups adds the
//! replacement and the usual exclude-before-remove path follows.
//!
//! Contract:
//! - During a protocol-incompatible upgrade nothing is marked (delayed requeue, 5 s).
//! - [`misconfiguration`] is pure and names the first reason, in upstream's order:
//!   the PVC's spec hash (`foundationdb.org/last-applied-spec`) or name differs from the
//!   desired PVC's (only while the pod exists); the group's ID does not follow the cluster's
//!   `processGroupIDPrefix`; the pod runs another number of fdbserver processes than the
//!   class's `storageServersPerPod` / `logServersPerPod` (its `<CLASS>_SERVERS_PER_POD`
//!   variable, 1 without); with `replaceInstancesWhenResourcesChange`, the desired CPU or
//!   memory requests (summed over containers, and over init containers) exceed the pod's;
//!   and, only when the pod's spec hash differs from the desired one: the node selector
//!   changed, or the pod update strategy replaces this class (`Replace`: every class;
//!   `ReplaceTransactionSystem`, the default: log and stateless classes; `Delete`: none).
//! - [`choose`] walks the groups in status order with the budget
//!   `automationOptions.maxConcurrentReplacements` (unlimited) minus the groups marked and
//!   not yet excluded, and stops when it is spent.
//! - Marked groups are written to the status at once, each with a
//!   `ReplacingMisconfiguredProcessGroup` Event giving the reason (a Flotilla addition);
//!   the pass goes on.
//!
//! Not checked, because this operator does not build what they compare: the public-IP
//! source (per-group services), image type (the unified image only), IP family and
//! security-context changes.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim, Pod};
use kit::pipeline::{Flow, Step, StepResult};
use kube::ResourceExt;

use super::resources::{self, LAST_SPEC_KEY};
use super::{Pass, step_error};
use crate::crd::{FoundationDBCluster, ProcessGroupId, ProcessGroupStatus};

step_error!(
    ReplaceMisconfiguredError,
    "replacing misconfigured process groups"
);

/// The step.
pub struct ReplaceMisconfiguredProcessGroups;

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> &'a str {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map_or("", String::as_str)
}

fn pvc_reason(
    cluster: &FoundationDBCluster,
    group: &ProcessGroupStatus,
    pvc: &PersistentVolumeClaim,
) -> Option<String> {
    let owned = !cluster
        .spec
        .label_config
        .filter_on_owner_references
        .unwrap_or(false)
        || pvc
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == cluster.metadata.uid.as_ref());
    if !owned {
        return None;
    }
    let desired = resources::pvc(cluster, group)?;
    let want = annotation(&desired.metadata, LAST_SPEC_KEY);
    let have = annotation(&pvc.metadata, LAST_SPEC_KEY);
    if want != have {
        return Some(format!(
            "the PVC spec changed (hash {have:?}, desired {want:?})"
        ));
    }
    if pvc.name_any() != desired.name_any() {
        return Some(format!(
            "the PVC name changed from {} to {}",
            pvc.name_any(),
            desired.name_any()
        ));
    }
    None
}

/// Parses a Kubernetes quantity (`100m`, `1.5`, `128Mi`, `1G`, `2e3`) into its value.
pub fn quantity(text: &str) -> Option<f64> {
    let units: [(&str, f64); 14] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    let text = text.trim();
    for (suffix, factor) in units {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    if let Some(number) = text.strip_suffix('E') {
        return number.parse::<f64>().ok().map(|n| n * 1e18);
    }
    text.parse().ok()
}

/// Summed CPU and memory requests of `containers`.
fn requests(containers: &[Container]) -> (f64, f64) {
    let mut sum = (0.0, 0.0);
    for c in containers {
        let Some(req) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) else {
            continue;
        };
        let get = |k: &str| req.get(k).and_then(|q| quantity(&q.0)).unwrap_or(0.0);
        sum.0 += get("cpu");
        sum.1 += get("memory");
    }
    sum
}

fn grew(desired: &[Container], current: &[Container]) -> bool {
    let (d, c) = (requests(desired), requests(current));
    d.0 > c.0 || d.1 > c.1
}

/// Why `group` must be replaced, if it must (see the module docs).
pub fn misconfiguration(
    cluster: &FoundationDBCluster,
    group: &ProcessGroupStatus,
    pod: Option<&Pod>,
    pvc: Option<&PersistentVolumeClaim>,
) -> Option<String> {
    if group.is_marked_for_removal() {
        return None;
    }
    if let (Some(pvc), Some(_)) = (pvc, pod)
        && let Some(reason) = pvc_reason(cluster, group, pvc)
    {
        return Some(reason);
    }
    let pod = pod?;
    if let Some(n) = group.process_group_id.number() {
        let want = cluster.process_group_id(&group.process_class, n);
        if want != group.process_group_id {
            return Some(format!("the process group ID should be {want}"));
        }
    }
    let have = resources::servers_per_pod(pod, &group.process_class);
    let want = cluster.desired_servers_per_pod(&group.process_class);
    if have != want {
        return Some(format!("the servers per pod changed from {have} to {want}"));
    }
    let desired = resources::pod_spec(cluster, group);
    let current = pod.spec.clone().unwrap_or_default();
    if cluster.spec.replace_instances_when_resources_change == Some(true)
        && (grew(&desired.containers, &current.containers)
            || grew(
                desired.init_containers.as_deref().unwrap_or_default(),
                current.init_containers.as_deref().unwrap_or_default(),
            ))
    {
        return Some("the CPU or memory requests increased".into());
    }
    if annotation(&pod.metadata, LAST_SPEC_KEY) == resources::hash(&desired) {
        return None;
    }
    let selector = |s: &Option<BTreeMap<String, String>>| s.clone().unwrap_or_default();
    if selector(&desired.node_selector) != selector(&current.node_selector) {
        return Some("the node selector changed".into());
    }
    if cluster.needs_replacement_for_class(&group.process_class) {
        return Some(format!(
            "the pod spec changed and the pod update strategy {} replaces {} pods",
            cluster.pod_update_strategy(),
            group.process_class
        ));
    }
    None
}

/// The groups to mark, with their reasons, within the budget (see the module docs).
pub fn choose(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    pods: &BTreeMap<String, Pod>,
    pvcs: &BTreeMap<String, PersistentVolumeClaim>,
) -> Vec<(ProcessGroupId, String)> {
    let in_flight = groups
        .iter()
        .filter(|g| g.is_marked_for_removal() && !g.is_excluded())
        .count() as i64;
    let mut budget = cluster
        .max_concurrent_replacements()
        .saturating_sub(in_flight);
    let mut chosen = Vec::new();
    for g in groups {
        if budget <= 0 {
            break;
        }
        let id = g.process_group_id.as_str();
        if let Some(reason) = misconfiguration(cluster, g, pods.get(id), pvcs.get(id)) {
            chosen.push((g.process_group_id.clone(), reason));
            budget -= 1;
        }
    }
    chosen
}

impl ReplaceMisconfiguredProcessGroups {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, ReplaceMisconfiguredError> {
        if pass.cluster.is_being_upgraded_with_incompatible_version() {
            return Ok(Flow::delay(Duration::from_secs(5)));
        }
        let pods = pass.pods().await?;
        let pvcs = pass.pvcs().await?;
        let groups = pass.status().process_groups.clone();
        let chosen = choose(&pass.cluster, &groups, &pods, &pvcs);
        if chosen.is_empty() {
            return Ok(Flow::Continue);
        }
        let now = pass.now;
        for g in &mut pass.status().process_groups {
            if chosen.iter().any(|(id, _)| *id == g.process_group_id) {
                g.mark_for_removal(now);
            }
        }
        pass.write_status().await?;
        for (id, reason) in chosen {
            tracing::info!(cluster = %pass.name(), group = %id, %reason, "replacing a misconfigured process group");
            let note = format!("Replacing process group {id}: {reason}");
            pass.event(false, "ReplacingMisconfiguredProcessGroup", note)
                .await;
        }
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for ReplaceMisconfiguredProcessGroups {
    fn name(&self) -> &'static str {
        "replace_misconfigured_process_groups"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
#[path = "replace_misconfigured_process_groups_tests.rs"]
mod tests;
