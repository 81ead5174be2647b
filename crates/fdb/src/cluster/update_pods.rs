//! UpdatePods (reference §4 step 24): recreates, in place, the pods whose spec is outdated and
//! that the pod update strategy does not replace (storage pods under the default
//! `ReplaceTransactionSystem`, every pod under `Delete`), one fault domain at a time. AddPods
//! then recreates each deleted pod for the same process group, with the same PVC and the new
//! spec. This is how storage pod-template changes and patch upgrades (a new version with the
//! same protocol: the image changes at once) roll out.
//!
//! Contract ([`plan`] is the pure decision):
//! - Nothing during a protocol-incompatible upgrade (delayed requeue, 5 s).
//! - Candidates: groups not marked for removal whose pod's `last-applied-spec` differs from
//!   the desired spec and that ReplaceMisconfiguredProcessGroups does not want to replace;
//!   pending pods are skipped.
//! - Waits (delayed requeue, 15 s) while a pod of a group is terminating (for less than
//!   `ignoreTerminatingPodsSeconds`), a pod was missing for less than 90 s, or a pod younger
//!   than 60 s has not reported its processes: a recreation is still in progress.
//! - Nothing while more zones than `maxZonesWithUnavailablePods` (unlimited) have an
//!   unavailable stateful pod.
//! - By `automationOptions.deletionMode`: `Zone` (default) the candidates of one fault
//!   domain (the group's `faultDomain`; the first in order), `ProcessGroup` one pod, `All`
//!   every candidate, `None` nothing (stop with a Warning Event `UpdatePodsDisabled`).
//!   In mode `Zone`, while a zone is in maintenance (or the status is unknown), zones other
//!   than that one holding storage pods are skipped.
//! - Then the database must have its desired fault tolerance (else stop, 15 s), the global
//!   lock is taken (not in mode `All`, as upstream). With `UseMaintenanceModeChecker` and
//!   mode `Zone` or `ProcessGroup`, when storage pods are among those to delete
//!   ([`maintenance_targets`]): another zone in maintenance ⇒ delayed requeue (15 s);
//!   otherwise their groups go on the operator's maintenance list (now) and their zone into
//!   maintenance for `maintenanceModeTimeSeconds` (600 s); MaintenanceModeChecker turns it
//!   off once they restarted. Then the pods are deleted (Event `RecreatingPods`) and the
//!   pass goes on with a delayed requeue (5 s).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::DeleteParams;

use super::fault_tolerance::has_desired_fault_tolerance;
use super::replace_misconfigured_process_groups::misconfiguration;
use super::{Pass, resources, step_error};
use crate::crd::{FoundationDBCluster, ProcessGroupStatus, condition};

step_error!(UpdatePodsError, "updating pods");

/// The step.
pub struct UpdatePods;

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// No pod needs recreating.
    Nothing,
    /// A recreation is in progress, or too many zones are unavailable.
    Wait(String),
    /// Deletion mode `None`: pods need recreating but the operator may not.
    Disabled(Vec<String>),
    /// Delete these groups' pods: `(group ID, pod name)`.
    Delete(Vec<(String, String)>),
}

fn pod_age(pod: &Pod, now: Timestamp) -> i64 {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| now.as_second() - t.0.as_second())
}

fn unavailable(g: &ProcessGroupStatus) -> bool {
    [
        condition::MISSING_POD,
        condition::POD_PENDING,
        condition::POD_FAILING,
        condition::MISSING_PROCESSES,
    ]
    .iter()
    .any(|c| g.has_condition(c))
}

/// The pure decision (see the module docs).
pub fn plan(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    pods: &BTreeMap<String, Pod>,
    pvcs: &BTreeMap<String, PersistentVolumeClaim>,
    now: Timestamp,
    maintenance_zone: &str,
) -> Plan {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let terminating_limit = cluster.ignore_terminating_pods().as_secs() as i64;
    let mut by_zone: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut storage_zones = std::collections::BTreeSet::new();
    let mut waits = Vec::new();
    let mut down_zones = std::collections::BTreeSet::new();
    for g in groups.iter().filter(|g| !g.is_marked_for_removal()) {
        let id = g.process_group_id.to_string();
        if g.process_class.is_stateful() && unavailable(g) {
            down_zones.insert(g.fault_domain.clone());
        }
        let Some(pod) = pods.get(&id) else {
            if g.condition_time(condition::MISSING_POD)
                .is_some_and(|t| now.as_second() - t < 90)
            {
                waits.push(format!("the pod of {id} is being recreated"));
            }
            continue;
        };
        if let Some(deleted) = &pod.metadata.deletion_timestamp {
            if now.as_second() - deleted.0.as_second() < terminating_limit {
                waits.push(format!("the pod of {id} is terminating"));
            }
            continue;
        }
        if g.has_condition(condition::MISSING_PROCESSES) && pod_age(pod, now) < 60 {
            waits.push(format!(
                "the pod of {id} has not reported its processes yet"
            ));
        }
        let current = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(resources::LAST_SPEC_KEY));
        let desired = resources::hash(&resources::pod_spec(cluster, g));
        if g.has_condition(condition::POD_PENDING)
            || current == Some(&desired)
            || misconfiguration(cluster, g, Some(pod), pvcs.get(&id)).is_some()
        {
            continue;
        }
        if g.process_class.as_str() == "storage" {
            storage_zones.insert(g.fault_domain.clone());
        }
        by_zone
            .entry(g.fault_domain.clone())
            .or_default()
            .push((id, g.pod_name(&name)));
    }
    if by_zone.is_empty() {
        return Plan::Nothing;
    }
    if !waits.is_empty() {
        return Plan::Wait(waits.join("; "));
    }
    if down_zones.len() as i64 > cluster.max_zones_with_unavailable_pods() {
        return Plan::Wait(format!("{} zones have unavailable pods", down_zones.len()));
    }
    let mut all = by_zone.values().flatten().cloned();
    match cluster.deletion_mode() {
        "None" => Plan::Disabled(all.map(|(id, _)| id).collect()),
        "All" => Plan::Delete(all.collect()),
        "ProcessGroup" => Plan::Delete(all.next().into_iter().collect()),
        _ => {
            // While another zone is in maintenance, a zone with storage pods waits.
            let blocked = |zone: &String| {
                !maintenance_zone.is_empty()
                    && zone != maintenance_zone
                    && storage_zones.contains(zone)
            };
            match by_zone.into_iter().find(|(zone, _)| !blocked(zone)) {
                Some((_, chosen)) => Plan::Delete(chosen),
                None => Plan::Wait(format!("zone {maintenance_zone} is in maintenance")),
            }
        }
    }
}

impl UpdatePods {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, UpdatePodsError> {
        if pass.cluster.is_being_upgraded_with_incompatible_version() {
            return Ok(Flow::delay(Duration::from_secs(5)));
        }
        let pods = pass.pods().await?;
        let pvcs = pass.pvcs().await?;
        let groups = pass.status().process_groups.clone();
        // Unknown maintenance state: assume some zone is in maintenance, as upstream.
        let zone = pass.db.as_ref().map_or("unknown".to_owned(), |db| {
            db.cluster.maintenance_zone.clone()
        });
        let chosen = match plan(&pass.cluster, &groups, &pods, &pvcs, pass.now, &zone) {
            Plan::Nothing => return Ok(Flow::Continue),
            Plan::Wait(why) => {
                tracing::info!(cluster = %pass.name(), %why, "pod updates wait");
                return Ok(Flow::delay(Duration::from_secs(15)));
            }
            Plan::Disabled(ids) => {
                let note = format!(
                    "pods of {} need recreating but automationOptions.deletionMode is None",
                    ids.join(" ")
                );
                pass.event(true, "UpdatePodsDisabled", note).await;
                return Ok(Flow::stop(Duration::from_secs(60)));
            }
            Plan::Delete(chosen) => chosen,
        };
        let tolerant = pass
            .db
            .as_ref()
            .is_some_and(|db| has_desired_fault_tolerance(db, &pass.cluster));
        if !tolerant {
            tracing::info!(cluster = %pass.name(), "pod updates wait for the desired fault tolerance");
            return Ok(Flow::stop(Duration::from_secs(15)));
        }
        if pass.cluster.deletion_mode() != "All"
            && let Err(e) = pass.take_lock().await
        {
            tracing::info!(cluster = %pass.name(), error = %e, "waiting for the lock");
            return Ok(Flow::delay(Duration::from_secs(10)));
        }
        if let Some(flow) = set_maintenance(pass, &groups, &chosen, &zone).await? {
            return Ok(flow);
        }
        let api = pass.api::<Pod>();
        for (id, pod) in &chosen {
            tracing::info!(cluster = %pass.name(), group = %id, %pod, "recreating a pod with an outdated spec");
            match api.delete(pod, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let names: Vec<&str> = chosen.iter().map(|(_, p)| p.as_str()).collect();
        let note = format!(
            "deleted {} to recreate them with the new spec",
            names.join(" ")
        );
        pass.event(false, "RecreatingPods", note).await;
        Ok(Flow::delay(Duration::from_secs(5)))
    }
}

/// The storage groups among `chosen` and their zone, when UpdatePods is to put that zone
/// in maintenance (`UseMaintenanceModeChecker`, deletion mode `Zone` or `ProcessGroup`, and
/// the zone known).
pub fn maintenance_targets(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    chosen: &[(String, String)],
) -> Option<(String, Vec<String>)> {
    if !cluster.use_maintenance_mode()
        || !matches!(cluster.deletion_mode(), "Zone" | "ProcessGroup")
    {
        return None;
    }
    let storage: Vec<&ProcessGroupStatus> = groups
        .iter()
        .filter(|g| g.process_class.as_str() == "storage")
        .filter(|g| {
            chosen
                .iter()
                .any(|(id, _)| g.process_group_id.as_str() == id)
        })
        .collect();
    // A group whose zone is not known yet cannot name a zone for maintenance.
    let zone = storage.first()?.fault_domain.clone();
    if zone.is_empty() {
        return None;
    }
    let ids = storage
        .iter()
        .map(|g| g.process_group_id.to_string())
        .collect();
    Some((zone, ids))
}

/// Records the storage groups about to go down in the maintenance list and puts their zone
/// in maintenance; `Some` (a delayed requeue) while another zone is in maintenance.
async fn set_maintenance(
    pass: &Pass,
    groups: &[ProcessGroupStatus],
    chosen: &[(String, String)],
    current: &str,
) -> Result<Option<Flow>, UpdatePodsError> {
    let Some((zone, ids)) = maintenance_targets(&pass.cluster, groups, chosen) else {
        return Ok(None);
    };
    if !current.is_empty() && current != zone {
        tracing::info!(cluster = %pass.name(), %current, %zone, "Pods need to be recreated: another zone is in maintenance");
        return Ok(Some(Flow::delay(Duration::from_secs(15))));
    }
    let admin = pass.admin();
    tracing::info!(cluster = %pass.name(), %zone, groups = ?ids, "setting maintenance mode");
    admin
        .set_processes_under_maintenance(&ids, pass.now.as_second())
        .await?;
    let secs = pass.cluster.maintenance_mode_time_seconds();
    admin.set_maintenance_zone(&zone, secs).await?;
    Ok(None)
}

impl Step<Pass> for UpdatePods {
    fn name(&self) -> &'static str {
        "update_pods"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
#[path = "update_pods_tests.rs"]
mod tests;
