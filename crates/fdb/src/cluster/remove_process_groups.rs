//! RemoveProcessGroups (reference §4 step 25): removes groups marked for removal only after
//! their exclusion is verified, and includes them again only once every resource is gone.
//! - Verification ([`classify`]): a group whose exclusion is not recorded yet is looked up in
//!   the status (trusted only with at most one active generation and no
//!   storage/log/configuration/replication error message): not excluded, in progress
//!   (excluded but some process still holds a role), fully excluded, or missing. Missing
//!   and fully excluded groups are confirmed with a *blocking* `exclude`; only a confirmed
//!   group gets `exclusionTimestamp`. A current coordinator is never removed.
//! - Nothing removable while exclusions are pending ⇒ stop (15 s).
//! - Removal: only while the database has its desired fault tolerance
//!   ([`super::fault_tolerance`]; else stop, 30 s), delete the pod, the PVC and the per-group
//!   service of every excluded group (a pod annotated
//!   `foundationdb.org/isolate-process-group=true` is kept). A group whose objects still exist
//!   stays (ResourcesTerminating) and is not included.
//! - Inclusion: groups with nothing left whose exclusion is still in the database are
//!   included in one batch, behind the gates (last recovery at least
//!   `--minimum-recovery-time-for-inclusion`, 600 s, and recovery state `fully_recovered` or
//!   `all_logs_recruited`) and the lock; then they leave the status. Groups needing no
//!   include leave it directly. A failed or deferred include is a delayed requeue (60 s).
//! - Groups in `buggify.blockRemoval` are excluded (and verified) but their resources are
//!   never deleted while listed ([`removable`]); nothing else removable ⇒ continue.
//! - Pace ([`choose`], upstream's `removalMode` and `waitBetweenRemovalsSeconds`): groups whose
//!   resources are already going (`ResourcesTerminating`) are always processed; new ones are
//!   taken by `removalMode`: `Zone` (default) the fault domain with the most removable groups
//!   (ties by name; groups without a fault domain share one), `ProcessGroup` one group,
//!   `All` every one, `None` none. Unless the mode is `All`, nothing is deleted or included
//!   until `waitBetweenRemovalsSeconds` (default 60) have passed since the newest
//!   `ResourcesTerminating` timestamp (stop, with the time left), so zones are not removed
//!   faster than Kubernetes deletes their pods.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::DeleteParams;

use super::exclude_processes::targets;
use super::fault_tolerance::has_desired_fault_tolerance;
use super::{Pass, step_error};
use crate::admin::FdbStatus;
use crate::crd::{
    ConnectionString, FoundationDBCluster, ProcessAddress, ProcessGroupStatus, condition,
};

step_error!(RemoveProcessGroupsError, "removing process groups");

/// Annotation that keeps a pod from being deleted.
pub const ISOLATE_KEY: &str = "foundationdb.org/isolate-process-group";

/// The step.
pub struct RemoveProcessGroups;

/// Where a removed group's exclusion stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exclusion {
    /// Not excluded (or the status cannot be trusted).
    NotExcluded,
    /// Excluded, but a process still holds a role (data is draining).
    InProgress,
    /// Every process excluded and without roles.
    Excluded,
    /// No process of the group in the status.
    Missing,
}

/// Classifies `id`'s exclusion from `db` (see the module docs).
pub fn classify(id: &str, db: &FdbStatus) -> Exclusion {
    let untrusted = db.cluster.recovery_state.active_generations > 1
        || db.cluster.messages.iter().any(|m| {
            matches!(
                m.name.as_str(),
                "storage_servers_error"
                    | "log_servers_error"
                    | "unreadable_configuration"
                    | "full_replication_timeout"
            )
        });
    if untrusted {
        return Exclusion::NotExcluded;
    }
    let processes: Vec<_> = db
        .cluster
        .processes
        .values()
        .filter(|p| p.instance_id() == Some(id))
        .collect();
    if processes.is_empty() {
        Exclusion::Missing
    } else if processes.iter().all(|p| p.excluded && p.roles.is_empty()) {
        Exclusion::Excluded
    } else if processes.iter().any(|p| p.excluded) {
        Exclusion::InProgress
    } else {
        Exclusion::NotExcluded
    }
}

/// Whether `group`'s processes include a current coordinator.
pub fn is_coordinator(group: &ProcessGroupStatus, connection_string: &str, db: &FdbStatus) -> bool {
    let coordinators: BTreeSet<String> = ConnectionString::parse(connection_string)
        .map(|c| c.coordinators.into_iter().collect())
        .unwrap_or_default();
    db.cluster.processes.values().any(|p| {
        p.instance_id() == Some(group.process_group_id.as_str())
            && coordinators.contains(&p.address)
    }) || group.addresses.iter().any(|ip| {
        coordinators
            .iter()
            .any(|c| ProcessAddress::parse(c).is_ok_and(|a| &a.host == ip))
    })
}

/// Whether any of `groups` still has an object this step would delete now (one not being
/// deleted already). Only then does the fault-tolerance gate apply.
pub fn needs_deletions(
    groups: &[ProcessGroupStatus],
    pods: &BTreeMap<String, Pod>,
    pvcs: &BTreeMap<String, PersistentVolumeClaim>,
    services: &BTreeMap<String, Service>,
) -> bool {
    groups.iter().any(|g| {
        let id = g.process_group_id.as_str();
        let live = |m: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>| {
            m.is_some_and(|m| m.deletion_timestamp.is_none())
        };
        live(pods.get(id).map(|p| &p.metadata))
            || live(pvcs.get(id).map(|p| &p.metadata))
            || live(services.get(id).map(|s| &s.metadata))
    })
}

/// The groups whose resources may go: marked for removal, exclusion verified, and not in
/// `buggify.blockRemoval`.
pub fn removable(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
) -> Vec<ProcessGroupStatus> {
    let blocked = &cluster.spec.buggify.block_removal;
    groups
        .iter()
        .filter(|g| g.is_marked_for_removal() && g.is_excluded())
        .filter(|g| !blocked.contains(&g.process_group_id))
        .cloned()
        .collect()
}

/// The zone of groups without a fault domain (upstream's).
pub const UNKNOWN_ZONE: &str = "foundationdb.org/unknown";

/// What [`choose`] decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Pace {
    /// Process these groups now (`zone`: the fault domain the new ones come from, if any).
    Remove {
        /// The fault domain of the groups taken anew (`None`: only terminating ones, or mode
        /// `All`).
        zone: Option<String>,
        /// The groups, terminating ones first, each sorted by ID.
        groups: Vec<ProcessGroupStatus>,
    },
    /// Wait this long: a removal was started less than `waitBetweenRemovalsSeconds` ago.
    Wait(Duration),
}

/// Which of the `removable` groups this pass processes, at `now` (seconds), by `mode` and
/// `wait_between` seconds (see the module docs). An unknown mode (the CRD's enum admits none)
/// counts as `Zone`.
pub fn choose(mode: &str, wait_between: i64, removable: &[ProcessGroupStatus], now: i64) -> Pace {
    let mut terminating: Vec<ProcessGroupStatus> = Vec::new();
    let mut zones: BTreeMap<String, Vec<ProcessGroupStatus>> = BTreeMap::new();
    let mut newest = 0;
    for g in removable {
        match g.condition_time(condition::RESOURCES_TERMINATING) {
            Some(t) if t > 0 => {
                newest = newest.max(t);
                terminating.push(g.clone());
            }
            _ => {
                let zone = if g.fault_domain.is_empty() {
                    UNKNOWN_ZONE.to_owned()
                } else {
                    g.fault_domain.clone()
                };
                zones.entry(zone).or_default().push(g.clone());
            }
        }
    }
    if mode != "All" && newest > 0 {
        let allowed_from = newest.saturating_add(wait_between.max(0));
        if now < allowed_from {
            let left = u64::try_from(allowed_from - now).unwrap_or(1);
            return Pace::Wait(Duration::from_secs(left));
        }
    }
    let by_id = |v: &mut Vec<ProcessGroupStatus>| {
        v.sort_by(|a, b| a.process_group_id.cmp(&b.process_group_id));
    };
    by_id(&mut terminating);
    let (zone, mut fresh) = match mode {
        "All" => (None, zones.into_values().flatten().collect()),
        "None" => (None, Vec::new()),
        "ProcessGroup" => match zones.into_iter().next() {
            Some((zone, mut groups)) => {
                by_id(&mut groups);
                groups.truncate(1);
                (Some(zone), groups)
            }
            None => (None, Vec::new()),
        },
        _ => {
            // The fault domain with the most removable groups; the first by name on a tie.
            let most = zones
                .iter()
                .max_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| b.0.cmp(a.0)))
                .map(|(zone, _)| zone.clone());
            match most.and_then(|z| zones.remove_entry(&z)) {
                Some((zone, groups)) => (Some(zone), groups),
                None => (None, Vec::new()),
            }
        }
    };
    by_id(&mut fresh);
    terminating.extend(fresh);
    Pace::Remove {
        zone,
        groups: terminating,
    }
}

impl RemoveProcessGroups {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, RemoveProcessGroupsError> {
        let groups = pass.status().process_groups.clone();
        let removed: Vec<ProcessGroupStatus> = groups
            .iter()
            .filter(|g| g.is_marked_for_removal())
            .cloned()
            .collect();
        if removed.is_empty() {
            return Ok(Flow::Continue);
        }
        let by_locality = pass.cluster.use_localities_for_exclusion();
        let cs = pass.status().connection_string.clone();
        let now = pass.now;
        // 1. Verify exclusions of groups not yet recorded as excluded.
        let pending: Vec<&ProcessGroupStatus> =
            removed.iter().filter(|g| !g.is_excluded()).collect();
        if !pending.is_empty() {
            let Some(db) = pass.db.clone() else {
                return Ok(Flow::delay(Duration::from_secs(15)));
            };
            if !pass.safe_for_destructive_steps() {
                return Ok(Flow::delay(Duration::from_secs(15)));
            }
            let mut confirmed = Vec::new();
            for g in &pending {
                let id = g.process_group_id.as_str();
                match classify(id, &db) {
                    Exclusion::Excluded | Exclusion::Missing => {
                        if is_coordinator(g, &cs, &db) {
                            tracing::info!(cluster = %pass.name(), group = %id, "not removing a coordinator");
                            continue;
                        }
                        let t = targets(g, by_locality);
                        if t.is_empty() {
                            continue;
                        }
                        match pass.admin().exclude(&t, false).await {
                            Ok(()) => confirmed.push(g.process_group_id.clone()),
                            Err(e) => {
                                tracing::info!(cluster = %pass.name(), group = %id, error = %e, "exclusion not confirmed yet")
                            }
                        }
                    }
                    state => {
                        tracing::debug!(cluster = %pass.name(), group = %id, ?state, "exclusion not complete")
                    }
                }
            }
            if !confirmed.is_empty() {
                for g in &mut pass.status().process_groups {
                    if confirmed.contains(&g.process_group_id) {
                        g.set_exclude(now);
                    }
                }
                pass.write_status().await?;
            }
            let none_excluded = !pass
                .status()
                .process_groups
                .iter()
                .any(|g| g.is_marked_for_removal() && g.is_excluded());
            if none_excluded {
                return Ok(Flow::stop(Duration::from_secs(15)));
            }
        }
        // 2. Delete the resources of excluded groups.
        let pods = pass.pods().await?;
        let pvcs = pass.pvcs().await?;
        let services = pass.services().await?;
        let now_groups = pass.status().process_groups.clone();
        let excluded = removable(&pass.cluster, &now_groups);
        if excluded.is_empty() {
            tracing::info!(cluster = %pass.name(), "every excluded group is in buggify.blockRemoval");
            return Ok(Flow::Continue);
        }
        let mode = pass.cluster.removal_mode().to_owned();
        let wait_between = pass.cluster.wait_between_removals_seconds();
        let excluded = match choose(&mode, wait_between, &excluded, now.as_second()) {
            Pace::Wait(left) => {
                tracing::info!(cluster = %pass.name(), ?left, wait_between, "not allowed to remove process groups yet: the last removal started less than waitBetweenRemovalsSeconds ago");
                return Ok(Flow::stop(left));
            }
            Pace::Remove { groups, .. } if groups.is_empty() => {
                tracing::info!(cluster = %pass.name(), %mode, "removal mode takes no process group");
                return Ok(Flow::Continue);
            }
            Pace::Remove { zone, groups } => {
                if let Some(zone) = zone {
                    tracing::info!(cluster = %pass.name(), %mode, %zone, groups = ?groups.iter().map(|g| g.process_group_id.as_str()).collect::<Vec<_>>(), "removing process groups");
                }
                groups
            }
        };
        if needs_deletions(&excluded, &pods, &pvcs, &services)
            && !pass
                .db
                .as_ref()
                .is_some_and(|db| has_desired_fault_tolerance(db, &pass.cluster))
        {
            tracing::info!(cluster = %pass.name(), "removal deferred: the database does not have its desired fault tolerance");
            return Ok(Flow::stop(Duration::from_secs(30)));
        }
        let mut gone = Vec::new();
        for g in &excluded {
            let id = g.process_group_id.as_str();
            let mut left = false;
            if let Some(pod) = pods.get(id) {
                left = true;
                let isolated = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ISOLATE_KEY))
                    .is_some_and(|v| v == "true");
                if !isolated && pod.metadata.deletion_timestamp.is_none() {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    tracing::info!(cluster = %pass.name(), group = %id, pod = %name, "deleting pod of removed group");
                    let note = if g.exclusion_skipped {
                        format!("{id} is removed without exclusion: deleting its resources")
                    } else {
                        format!("exclusion of {id} verified: deleting its resources")
                    };
                    pass.event(false, "RemovingProcessGroup", note).await;
                    delete(pass.api::<Pod>(), &name).await?;
                }
            }
            if let Some(pvc) = pvcs.get(id) {
                left = true;
                if pvc.metadata.deletion_timestamp.is_none() {
                    let name = pvc.metadata.name.clone().unwrap_or_default();
                    delete(pass.api::<PersistentVolumeClaim>(), &name).await?;
                }
            }
            if let Some(svc) = services.get(id) {
                left = true;
                if svc.metadata.deletion_timestamp.is_none() {
                    let name = svc.metadata.name.clone().unwrap_or_default();
                    delete(pass.api::<Service>(), &name).await?;
                }
            }
            if !left {
                gone.push(g.clone());
            }
        }
        if gone.is_empty() {
            return Ok(Flow::delay(Duration::from_secs(5)));
        }
        // 3. Include, in one batch, whatever is still excluded; then drop the groups.
        let exclusions: BTreeSet<String> = match pass.admin().get_exclusions().await {
            Ok(e) => e.into_iter().collect(),
            Err(e) => {
                tracing::info!(cluster = %pass.name(), error = %e, "reading exclusions failed");
                return Ok(Flow::delay(Duration::from_secs(60)));
            }
        };
        let mut include: BTreeMap<String, ProcessAddress> = BTreeMap::new();
        for g in &gone {
            let mut t = targets(g, true);
            if !by_locality || g.process_class.is_log_process() {
                t.extend(targets(g, false));
            }
            for a in t.into_iter().filter(|a| exclusions.contains(&a.host)) {
                include.insert(a.host.clone(), a);
            }
        }
        if !include.is_empty() {
            let recovery_ok = pass.db.as_ref().is_some_and(|db| {
                matches!(
                    db.cluster.recovery_state.name.as_str(),
                    "fully_recovered" | "all_logs_recruited"
                )
            });
            if !pass.safe_for_destructive_steps()
                || !recovery_ok
                || !pass.recovered_for(pass.ctx.options.minimum_recovery_time_for_inclusion)
            {
                tracing::info!(cluster = %pass.name(), "inclusion deferred until the last recovery is old enough");
                return Ok(Flow::delay(Duration::from_secs(60)));
            }
            if let Err(e) = pass.take_lock().await {
                tracing::info!(cluster = %pass.name(), error = %e, "waiting for the lock");
                return Ok(Flow::delay(Duration::from_secs(60)));
            }
            let batch: Vec<ProcessAddress> = include.into_values().collect();
            tracing::info!(cluster = %pass.name(), addresses = ?batch.iter().map(|a| a.host.clone()).collect::<Vec<_>>(), "including");
            if let Err(e) = pass.admin().include(&batch).await {
                tracing::warn!(cluster = %pass.name(), error = %e, "include failed");
                return Ok(Flow::delay(Duration::from_secs(60)));
            }
            pass.event(
                false,
                "IncludedProcesses",
                format!(
                    "included {}",
                    batch
                        .iter()
                        .map(|a| a.host.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            )
            .await;
        }
        let ids: BTreeSet<_> = gone.iter().map(|g| g.process_group_id.clone()).collect();
        pass.status()
            .process_groups
            .retain(|g| !ids.contains(&g.process_group_id));
        pass.write_status().await?;
        pass.db = pass.admin().get_status().await.ok();
        Ok(Flow::Continue)
    }
}

async fn delete<K>(api: kube::Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

impl Step<Pass> for RemoveProcessGroups {
    fn name(&self) -> &'static str {
        "remove_process_groups"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::status::{ProcessInfo, ProcessRoleInfo, StatusMessage};
    use crate::crd::{ProcessClass, ProcessGroupId};

    fn process(id: &str, excluded: bool, roles: &[&str]) -> ProcessInfo {
        ProcessInfo {
            address: "127.1.0.1:4501".into(),
            excluded,
            locality: [("instance_id".to_string(), id.to_string())].into(),
            roles: roles
                .iter()
                .map(|r| ProcessRoleInfo {
                    role: r.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn status(p: Option<ProcessInfo>) -> FdbStatus {
        let mut s = FdbStatus::default();
        s.cluster.recovery_state.active_generations = 1;
        if let Some(p) = p {
            s.cluster.processes.insert("1".into(), p);
        }
        s
    }

    #[test]
    fn classification_table() {
        let mut untrusted = status(Some(process("storage-1", true, &[])));
        untrusted.cluster.messages.push(StatusMessage {
            name: "storage_servers_error".into(),
            ..Default::default()
        });
        let mut recovering = status(Some(process("storage-1", true, &[])));
        recovering.cluster.recovery_state.active_generations = 2;
        let cases = [
            (
                "not excluded",
                status(Some(process("storage-1", false, &["storage"]))),
                Exclusion::NotExcluded,
            ),
            (
                "draining",
                status(Some(process("storage-1", true, &["storage"]))),
                Exclusion::InProgress,
            ),
            (
                "drained",
                status(Some(process("storage-1", true, &[]))),
                Exclusion::Excluded,
            ),
            ("missing", status(None), Exclusion::Missing),
            ("storage error message", untrusted, Exclusion::NotExcluded),
            ("two generations", recovering, Exclusion::NotExcluded),
        ];
        for (name, db, want) in cases {
            assert_eq!(classify("storage-1", &db), want, "{name}");
        }
    }

    #[test]
    fn removals_are_paced_by_mode_and_the_wait_between() {
        let t = |s: i64| jiff::Timestamp::from_second(s).unwrap();
        // (id, zone, terminating since)
        let g = |id: &str, zone: &str, terminating: Option<i64>| {
            let mut g = ProcessGroupStatus::new(
                ProcessGroupId::new(id),
                ProcessClass::new("storage"),
                t(0),
            );
            g.fault_domain = zone.into();
            g.mark_for_removal(t(0));
            g.set_exclude(t(0));
            if let Some(s) = terminating {
                g.update_condition(condition::RESOURCES_TERMINATING, true, t(s));
            }
            g
        };
        let fresh = [
            g("storage-1", "z1", None),
            g("storage-2", "z2", None),
            g("storage-3", "z2", None),
            g("storage-4", "", None),
        ];
        let ids = |pace: Pace| match pace {
            Pace::Remove { zone, groups } => (
                zone,
                groups
                    .iter()
                    .map(|g| g.process_group_id.to_string())
                    .collect::<Vec<_>>(),
            ),
            Pace::Wait(d) => panic!("waits {d:?}"),
        };
        // Zone: the fault domain with the most groups; All: every one; ProcessGroup: one;
        // None: nothing new.
        assert_eq!(
            ids(choose("Zone", 60, &fresh, 1000)),
            (
                Some("z2".into()),
                vec!["storage-2".into(), "storage-3".into()]
            )
        );
        assert_eq!(ids(choose("All", 60, &fresh, 1000)).1.len(), 4);
        assert_eq!(
            ids(choose("ProcessGroup", 60, &fresh, 1000)),
            (Some(UNKNOWN_ZONE.into()), vec!["storage-4".into()]),
            "the first zone by name (groups without a fault domain share one)"
        );
        assert_eq!(ids(choose("None", 60, &fresh, 1000)), (None, vec![]));
        // A tie goes to the first zone by name.
        let tie = [g("storage-5", "zb", None), g("storage-6", "za", None)];
        assert_eq!(ids(choose("Zone", 60, &tie, 1000)).0, Some("za".to_owned()));
        // A zone terminating since 970: the next waits until 1030 unless the mode is All;
        // terminating groups are always processed, first.
        let mixed = [
            g("storage-7", "z3", Some(970)),
            g("storage-8", "z3", Some(950)),
            g("storage-9", "z4", None),
        ];
        assert_eq!(
            choose("Zone", 60, &mixed, 1000),
            Pace::Wait(Duration::from_secs(30))
        );
        assert_eq!(
            choose("None", 60, &mixed, 1000),
            Pace::Wait(Duration::from_secs(30))
        );
        assert_eq!(
            ids(choose("All", 60, &mixed, 1000)).1,
            ["storage-7", "storage-8", "storage-9"]
        );
        assert_eq!(
            ids(choose("Zone", 60, &mixed, 1030)),
            (
                Some("z4".into()),
                vec!["storage-7".into(), "storage-8".into(), "storage-9".into()]
            )
        );
        assert_eq!(
            ids(choose("None", 60, &mixed, 1030)).1,
            ["storage-7", "storage-8"],
            "None still finishes what is terminating"
        );
        assert_eq!(
            ids(choose("Zone", 0, &mixed, 970)).0,
            Some("z4".to_owned()),
            "no wait with waitBetweenRemovalsSeconds 0"
        );
    }

    #[test]
    fn blocked_removals_keep_their_resources() {
        let t = jiff::Timestamp::UNIX_EPOCH;
        let g = |id: &str, removed: bool, excluded: bool| {
            let mut g =
                ProcessGroupStatus::new(ProcessGroupId::new(id), ProcessClass::new("storage"), t);
            if removed {
                g.mark_for_removal(t);
            }
            if excluded {
                g.set_exclude(t);
            }
            g
        };
        let groups = [
            g("storage-1", true, true),
            g("storage-2", true, true),
            g("storage-3", true, false),
            g("storage-4", false, false),
        ];
        let cluster = |blocked: serde_json::Value| -> FoundationDBCluster {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apps.foundationdb.org/v1beta2",
                "kind": "FoundationDBCluster",
                "metadata": {"name": "c"},
                "spec": {"version": "7.1.57", "buggify": {"blockRemoval": blocked}},
            }))
            .unwrap()
        };
        let ids = |blocked| -> Vec<String> {
            removable(&cluster(blocked), &groups)
                .iter()
                .map(|g| g.process_group_id.to_string())
                .collect()
        };
        assert_eq!(ids(serde_json::json!([])), ["storage-1", "storage-2"]);
        assert_eq!(ids(serde_json::json!(["storage-1"])), ["storage-2"]);
        assert!(ids(serde_json::json!(["storage-1", "storage-2"])).is_empty());
    }

    #[test]
    fn coordinators_are_recognised_by_process_or_pod_ip() {
        let db = status(Some(process("log-1", false, &["coordinator"])));
        let mut g = ProcessGroupStatus::new(
            ProcessGroupId::new("log-1"),
            ProcessClass::new("log"),
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert!(is_coordinator(&g, "d:g@127.1.0.1:4501", &db));
        assert!(!is_coordinator(&g, "d:g@127.1.0.2:4501", &db));
        g.process_group_id = ProcessGroupId::new("log-2");
        g.addresses = vec!["127.1.0.2".into()];
        assert!(is_coordinator(&g, "d:g@127.1.0.2:4501", &db));
    }

    #[test]
    fn the_fault_tolerance_gate_applies_only_to_objects_still_to_delete() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let g = ProcessGroupStatus::new(
            ProcessGroupId::new("storage-1"),
            ProcessClass::new("storage"),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let pod = |deleting: bool| {
            let mut p = Pod::default();
            if deleting {
                p.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
            }
            BTreeMap::from([("storage-1".to_string(), p)])
        };
        let pvc = BTreeMap::from([("storage-1".to_string(), PersistentVolumeClaim::default())]);
        let (no_pod, no_pvc) = (BTreeMap::<String, Pod>::new(), BTreeMap::new());
        let no_svc = BTreeMap::<String, Service>::new();
        let groups = std::slice::from_ref(&g);
        let cases = [
            (
                "a live pod",
                needs_deletions(groups, &pod(false), &no_pvc, &no_svc),
                true,
            ),
            (
                "a pod already deleting",
                needs_deletions(groups, &pod(true), &no_pvc, &no_svc),
                false,
            ),
            (
                "a live PVC",
                needs_deletions(groups, &pod(true), &pvc, &no_svc),
                true,
            ),
            (
                "nothing left",
                needs_deletions(groups, &no_pod, &no_pvc, &no_svc),
                false,
            ),
            (
                "no group",
                needs_deletions(&[], &pod(false), &pvc, &no_svc),
                false,
            ),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
    }
}
