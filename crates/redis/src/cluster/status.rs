//! The RedisCluster status, pure: phase, `phaseReason`, conditions and the per-instance map
//! from this pass's observations and the durable fields the handoff owns.
//!
//! Contract:
//! - [`compute`] keeps the durable handoff fields (`currentPrimary`, `targetPrimary`, their
//!   timestamps, `currentPrimaryFailingSinceTimestamp`) as the model has them; only the handoff
//!   executor changes them.
//! - The phase tells the truth: two instances reporting `master`, or a `master` that is not
//!   `currentPrimary`, is `Degraded` with a reason naming them, never `Healthy`, and `Ready` is
//!   then False. `Healthy` needs every wanted instance's pod Ready, the current primary running
//!   as the only primary, and every replica in sync with it.
//! - Numbers that move by themselves (replication offsets, replica lag, link-down seconds,
//!   `lastSeenAt`) are *volatile*: [`needs_write`] ignores them, so a converged cluster whose
//!   replication offsets tick costs no status write; they are refreshed whenever the status is
//!   written for another reason.
//! - Conditions move `lastTransitionTime` only when their status changes (`kit::conditions`).
//! - `syncedReplicationID` moves to the current primary's replication ID once a replica is seen
//!   in sync with it under that ID, and otherwise keeps its value: the failover's candidates
//!   are judged against it ([`super::handoff`]).
//! - `bootstrapCompleted` of a cluster bootstrapped from a backup turns true the first time the
//!   cluster is `Healthy` (or `Replicating`) and never back: the first primary's restore is
//!   over ([`super::build::pod`] stops adding the restore init container).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kit::conditions::{self, Desired};

use super::facts::{Member, Members};
use super::handoff::PENDING;
use super::model::Model;
use super::plan::{Action, Plan, Why};
use crate::crd::{ClusterPhase, InstanceStatus, RedisClusterStatus, condition};

/// What [`compute`] reads besides the model.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// The validated cluster (with the durable status).
    pub model: &'a Model,
    /// The instances.
    pub members: &'a Members,
    /// The pods plan of this pass.
    pub plan: &'a Plan,
    /// What the handoff is doing or waiting for, in words.
    pub handoff: Option<&'a str>,
    /// Something the cluster waits for before anything else (a missing Secret), in words.
    pub blocked: Option<&'a str>,
    /// resourceVersion of each referenced Secret.
    pub secrets: &'a BTreeMap<String, String>,
    /// Bound PVCs in use.
    pub healthy_pvc: i32,
    /// PVCs of the cluster no wanted instance uses.
    pub dangling_pvc: Vec<String>,
    /// A PVC grows or waits for a file-system resize.
    pub resizing: bool,
    /// This pass's clock.
    pub now: Timestamp,
}

/// The status to write.
pub fn compute(i: &Inputs<'_>) -> RedisClusterStatus {
    let m = i.model;
    let old = &m.status;
    let (phase, reason) = phase(i);
    let mut s = RedisClusterStatus {
        phase: Some(phase),
        phase_reason: reason.clone(),
        observed_generation: m.generation.unwrap_or_default(),
        instances_status: instances(i),
        secrets_resource_version: i.secrets.clone(),
        healthy_pvc: i.healthy_pvc,
        dangling_pvc: i.dangling_pvc.clone(),
        ..old.clone()
    };
    s.write_service = crate::names::leader_service(&m.name);
    s.read_service = crate::names::any_service(&m.name);
    s.instance_names = i
        .members
        .iter()
        .filter(|x| x.pod.is_some())
        .map(|x| x.name.clone())
        .collect();
    s.ready_instances = i
        .members
        .iter()
        .filter(|x| x.ordinal < m.instances && x.running() && x.ready())
        .count() as i32;
    s.instances = i.members.iter().filter(|x| x.report().is_some()).count() as i32;
    if let Some(id) = synced(i) {
        s.synced_replication_id = id;
    }
    // The bootstrap restore is over once the cluster runs (its first primary served from the
    // restored data); from then on a recreated pod 0 resynchronises instead of restoring.
    let running = matches!(phase, ClusterPhase::Healthy | ClusterPhase::Replicating);
    s.bootstrap_completed |= running && super::build::pod::bootstraps(m);
    s.conditions = conditions(i, phase, &reason);
    s
}

/// The current primary's replication ID, when a replica is in sync with it under that ID.
fn synced(i: &Inputs<'_>) -> Option<String> {
    let p = primary_ok(i)?;
    let id = &p.report()?.replication_id;
    i.members
        .iter()
        .filter(|x| x.name != p.name)
        .any(|x| x.in_sync_with(p.ip()) && x.report().is_some_and(|r| &r.replication_id == id))
        .then(|| id.clone())
}

fn primary_ok<'m>(i: &Inputs<'m>) -> Option<&'m Member> {
    let p = i.members.get(&i.model.status.current_primary)?;
    (p.is_master() && p.report().is_some_and(|r| !r.fenced)).then_some(p)
}

fn split_brain(i: &Inputs<'_>) -> Option<String> {
    let current = &i.model.status.current_primary;
    let masters = i.members.masters();
    if i.model.replica_mode {
        return None;
    }
    match masters.as_slice() {
        [] | [_] if masters.iter().all(|x| &x.name == current) => None,
        [one] => Some(format!(
            "{} reports role master but currentPrimary is {current}",
            one.name
        )),
        many => Some(format!(
            "split brain: {} all report role master",
            many.iter()
                .map(|x| x.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The first wanted instance that is not fine, in words.
fn problem(i: &Inputs<'_>) -> Option<String> {
    let m = i.model;
    let primary_ip = primary_ok(i).and_then(Member::ip);
    for x in i.members.iter().filter(|x| x.ordinal < m.instances) {
        let Some(p) = &x.pod else {
            return Some(format!("{} has no pod", x.name));
        };
        if p.deleting {
            return Some(format!("{} is being replaced", x.name));
        }
        if !x.running() {
            return Some(format!("{} is not running Redis", x.name));
        }
        if !p.ready {
            return Some(format!("{} is not Ready", x.name));
        }
        if m.replica_mode {
            if !x.in_sync_with(None) {
                return Some(format!("{} is not replicating from the source", x.name));
            }
        } else if x.name != m.status.current_primary && !x.in_sync_with(primary_ip) {
            return Some(format!("{} is not in sync with the primary", x.name));
        }
    }
    None
}

fn phase(i: &Inputs<'_>) -> (ClusterPhase, String) {
    use ClusterPhase::*;
    let m = i.model;
    let st = &m.status;
    let handoff = |d: &str| i.handoff.map_or_else(|| d.to_owned(), str::to_owned);
    if m.hibernation {
        let live = i.members.iter().any(Member::pod_live);
        let why = if live {
            "hibernating: stopping the pods (the primary first); PVCs are kept"
        } else {
            "hibernated: every pod deleted, PVCs kept"
        };
        return (Hibernating, why.into());
    }
    // A cluster that was never Healthy is still being created, whatever it waits for.
    let creating = matches!(st.phase, None | Some(Creating));
    if let Some(b) = i.blocked {
        return (if creating { Creating } else { Degraded }, b.to_owned());
    }
    if st.current_primary.is_empty() {
        return (Creating, "naming the first primary".into());
    }
    let target = st.target_primary.as_str();
    if target == PENDING || (!target.is_empty() && target != st.current_primary) {
        let fenced = m.operator_fenced.fences(&st.current_primary);
        if target == PENDING || fenced {
            let d = format!("failing over from {}", st.current_primary);
            return (FailingOver, handoff(&d));
        }
        let d = format!("switching over from {} to {target}", st.current_primary);
        return (Updating, handoff(&d));
    }
    if let Some(sb) = split_brain(i) {
        return (Degraded, sb);
    }
    if m.replica_mode {
        let all = i
            .members
            .iter()
            .filter(|x| x.ordinal < m.instances)
            .all(|x| x.is_replica() && x.report().is_some_and(|r| r.master_link_status == "up"));
        return match all {
            true => (
                Replicating,
                "every instance replicates from the source".into(),
            ),
            false => (
                if creating { Creating } else { Degraded },
                problem(i).unwrap_or_else(|| {
                    "waiting for the instances to replicate from the source".into()
                }),
            ),
        };
    }
    if primary_ok(i).is_none() {
        let why = i.handoff.map_or_else(
            || format!("primary {} is not available", st.current_primary),
            str::to_owned,
        );
        return (if creating { Creating } else { Degraded }, why);
    }
    match &i.plan.action {
        Action::AwaitApproval(why) => return (WaitingForUser, why.clone()),
        Action::Switchover { to, why } => {
            let p = if *why == Why::ScaleDown {
                Scaling
            } else {
                Updating
            };
            return (p, format!("{}: switching over to {to}", why.as_str()));
        }
        Action::Delete { pods, why, .. } if *why != Why::Hibernate => {
            let p = if *why == Why::ScaleDown {
                Scaling
            } else {
                Updating
            };
            return (
                p,
                format!("{}: replacing {}", why.as_str(), pods.join(", ")),
            );
        }
        Action::Wait { why, reason } if *why != Why::Hibernate => {
            let p = if *why == Why::ScaleDown {
                Scaling
            } else {
                Updating
            };
            return (p, format!("{}: {reason}", why.as_str()));
        }
        _ => {}
    }
    if !i.plan.create.is_empty() && !creating {
        return (Scaling, "creating instances".into());
    }
    match problem(i) {
        None => (Healthy, "every instance is Ready and in sync".into()),
        Some(p) if creating => (Creating, p),
        Some(p) => (Degraded, p),
    }
}

fn conditions(
    i: &Inputs<'_>,
    phase: ClusterPhase,
    reason: &str,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let m = i.model;
    let mut c = m.status.conditions.clone();
    let g = m.generation;
    let now = i.now;
    let mut set = |d: Desired| {
        conditions::upsert(&mut c, d.observed(g), now);
    };
    let primary = primary_ok(i);
    let sb = split_brain(i);
    let current = &m.status.current_primary;
    let (avail, avail_reason, avail_msg) = match (primary, &sb) {
        (Some(p), _) => (
            true,
            "PrimaryRunning",
            format!("{} runs as the primary", p.name),
        ),
        (None, _) if m.replica_mode => (
            false,
            "ReplicaMode",
            "replica mode: every instance follows the external source; none takes writes until replicaMode.promote".into(),
        ),
        (None, _) if current.is_empty() => (false, "NoPrimary", "no primary is named yet".into()),
        (None, _) => (
            false,
            "PrimaryUnavailable",
            format!("the primary {current} is not running as a primary"),
        ),
    };
    set(Desired::new(
        condition::PRIMARY_AVAILABLE,
        avail,
        avail_reason,
        avail_msg,
    ));
    let failing = phase == ClusterPhase::FailingOver;
    let ready = avail && sb.is_none() && !failing && !m.hibernation;
    let (r, msg) = match (ready, &sb) {
        (true, _) => (
            "ClusterReady",
            format!("{current} accepts writes; {reason}"),
        ),
        (false, Some(sb)) => ("SplitBrain", sb.clone()),
        (false, None) => (phase_reason_code(phase), reason.to_owned()),
    };
    set(Desired::new(condition::READY, ready, r, msg));
    let primary_ip = primary.and_then(Member::ip);
    let replicas: Vec<&Member> = i
        .members
        .iter()
        .filter(|x| x.ordinal < m.instances && &x.name != current)
        .collect();
    let lagging: Vec<&str> = replicas
        .iter()
        .filter(|x| !x.in_sync_with(primary_ip))
        .map(|x| x.name.as_str())
        .collect();
    let (rh, rh_reason, rh_msg) = if replicas.is_empty() {
        (
            false,
            "NoReplicas",
            "the cluster has no replicas".to_owned(),
        )
    } else if lagging.is_empty() {
        (
            true,
            "ReplicasInSync",
            "every replica is in sync with the primary".into(),
        )
    } else {
        (
            false,
            "ReplicasNotInSync",
            format!("not in sync: {}", lagging.join(", ")),
        )
    };
    set(Desired::new(
        condition::REPLICATION_HEALTHY,
        rh,
        rh_reason,
        rh_msg,
    ));
    let mut toggle = |type_: &str, on: bool, yes: (&str, &str), no: (&str, &str)| {
        let present = conditions::get(&c, type_).is_some();
        if on || present {
            let (r, msg) = if on { yes } else { no };
            conditions::upsert(&mut c, Desired::new(type_, on, r, msg).observed(g), now);
        }
    };
    toggle(
        condition::REPLICA_MODE,
        m.replica_mode,
        (
            "ReplicaModeEnabled",
            "every instance replicates from the external source",
        ),
        (
            "ReplicaClusterPromoted",
            "the designated leader was promoted; replica mode is off",
        ),
    );
    let waiting = matches!(i.plan.action, Action::AwaitApproval(_));
    toggle(
        condition::PRIMARY_UPDATE_WAITING,
        waiting,
        (
            "AwaitingApproval",
            "set redis.io/approve-primary-update: \"true\" to update the primary",
        ),
        ("NotWaiting", "no primary update waits for approval"),
    );
    toggle(
        condition::HIBERNATED,
        m.hibernation,
        (
            "Hibernated",
            "redis.io/hibernation is on: pods deleted, PVCs kept",
        ),
        ("Resumed", "hibernation is off"),
    );
    toggle(
        condition::MAINTENANCE_IN_PROGRESS,
        m.maintenance,
        (
            "MaintenanceInProgress",
            "node maintenance: no PodDisruptionBudgets, no automatic failover",
        ),
        ("MaintenanceOver", "no node maintenance in progress"),
    );
    toggle(
        condition::PVC_RESIZE_IN_PROGRESS,
        i.resizing,
        ("ResizeInProgress", "a PVC is growing to spec.storage.size"),
        ("ResizeComplete", "every PVC has its requested size"),
    );
    c
}

fn phase_reason_code(p: ClusterPhase) -> &'static str {
    match p {
        ClusterPhase::Creating => "Creating",
        ClusterPhase::Healthy => "Healthy",
        ClusterPhase::Degraded => "Degraded",
        ClusterPhase::Replicating => "Replicating",
        ClusterPhase::FailingOver => "FailingOver",
        ClusterPhase::Scaling => "Scaling",
        ClusterPhase::Updating => "Updating",
        ClusterPhase::WaitingForUser => "WaitingForUser",
        ClusterPhase::Deleting => "Deleting",
        ClusterPhase::Hibernating => "Hibernating",
    }
}

fn instances(i: &Inputs<'_>) -> BTreeMap<String, InstanceStatus> {
    let primary_offset = primary_ok(i)
        .and_then(Member::report)
        .map(|r| r.replication_offset);
    let seen = Some(Time(
        Timestamp::from_second(i.now.as_second()).unwrap_or(i.now),
    ));
    let old = &i.model.status.instances_status;
    i.members
        .iter()
        // A wanted instance whose pod is gone (deleted by a failover, being recreated) keeps
        // its entry: the failover still needs the replication ID its primary had.
        .filter(|x| x.pod.is_some() || (x.ordinal < i.model.instances && old.contains_key(&x.name)))
        .map(|x| {
            let ready = x.ready();
            // The instance manager answered (redis-server may not run).
            let answered = x.report().and_then(|_| seen.clone());
            let st = match x.report().filter(|_| x.running()) {
                // What redis-server said when it last ran: the failover compares the
                // replicas' replication ID with the one of the primary that stopped.
                None => match old.get(&x.name) {
                    Some(old) => InstanceStatus {
                        role: old.role.clone(),
                        ready,
                        replication_offset: old.replication_offset,
                        replication_id: old.replication_id.clone(),
                        last_seen_at: answered.or_else(|| old.last_seen_at.clone()),
                        ..InstanceStatus::default()
                    },
                    None => InstanceStatus {
                        ready,
                        last_seen_at: answered,
                        ..InstanceStatus::default()
                    },
                },
                Some(r) => InstanceStatus {
                    role: r.role.clone(),
                    connected: true,
                    ready,
                    replication_offset: r.replication_offset,
                    replica_lag_bytes: match (r.role.as_str(), primary_offset) {
                        ("slave", Some(p)) => (p - r.replication_offset).max(0),
                        _ => 0,
                    },
                    replication_id: r.replication_id.clone(),
                    connected_replicas: r.connected_replicas,
                    master_link_status: r.master_link_status.clone(),
                    master_sync_in_progress: r.master_sync_in_progress,
                    link_down_since_seconds: r.master_link_down_since_seconds,
                    last_seen_at: seen.clone(),
                    ..InstanceStatus::default()
                },
            };
            (x.name.clone(), st)
        })
        .collect()
}

/// `s` without its volatile numbers (see the module contract).
fn masked(s: &RedisClusterStatus) -> RedisClusterStatus {
    let mut s = s.clone();
    for v in s.instances_status.values_mut() {
        v.replication_offset = 0;
        v.replica_lag_bytes = 0;
        v.link_down_since_seconds = 0;
        v.last_seen_at = None;
    }
    s
}

/// Whether writing `desired` over `live` changes anything but volatile numbers.
pub fn needs_write(live: Option<&RedisClusterStatus>, desired: &RedisClusterStatus) -> bool {
    let live = live.cloned().unwrap_or_default();
    let a = serde_json::to_value(masked(&live)).ok();
    let b = serde_json::to_value(masked(desired)).unwrap_or_default();
    kit::status::differs(a.as_ref(), &b)
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
