//! The pods plan, pure: which pods to create, which role labels to fix, and the one
//! disruptive action of this pass (a deletion or a switchover) for hibernation, scaling, node
//! drains, PVC file-system resizes and rolling updates.
//!
//! Contract of [`plan`]:
//! - Missing pods of ordinals below `instances` are created (all at once), except while
//!   hibernated, and except the primary's own pod while a failover may still replace it
//!   (`hold_primary`), so a deleted primary is not resurrected behind a failover's back. During
//!   a handoff only pods that are neither the old nor the new primary are created.
//! - Role labels follow `status.currentPrimary` (the `-replica` Service and the PDBs select
//!   on them).
//! - At most one disruption at a time, in this order:
//!   1. hibernation: the primary first (its graceful stop waits for replicas), then every
//!      other pod;
//!   2. nothing else during a handoff;
//!   3. scale-down: pods of ordinals `>= instances`, highest first, one at a time; the primary
//!      is never removed: it first hands over to the most advanced in-sync replica that stays;
//!   4. a drain: a primary on a cordoned node hands over to an in-sync replica on a
//!      schedulable node;
//!   5. the rolling update (a changed spec hash, or a PVC waiting for a file-system resize):
//!      only when every wanted pod exists, none is being deleted and every one is Ready, with
//!      replicas in sync; stale replicas first, highest ordinal first, one at a time, each one
//!      back Ready and in sync before the next; then the primary: `supervised` waits for
//!      `redis.io/approve-primary-update: "true"`; a single instance or `primaryUpdateMethod:
//!      restart` recreates it in place; otherwise it hands over to the most advanced
//!      up-to-date in-sync replica and is replaced as a replica on a later pass.

use super::facts::{Member, Members};
use crate::crd::{PrimaryUpdateMethod, PrimaryUpdateStrategy};
use crate::names;

/// Why a pod is disrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Its spec changed (or its PVC needs a restart to grow).
    Update,
    /// Scale-down.
    ScaleDown,
    /// Its node is cordoned.
    Drain,
    /// Hibernation.
    Hibernate,
}

impl Why {
    /// In words.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Update => "rolling update",
            Why::ScaleDown => "scale-down",
            Why::Drain => "node drain",
            Why::Hibernate => "hibernation",
        }
    }
}

/// The disruptive action of this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to disrupt.
    None,
    /// Something is pending but must wait; why.
    Wait {
        /// What is pending.
        why: Why,
        /// What it waits for.
        reason: String,
    },
    /// Delete these pods.
    Delete {
        /// The pods.
        pods: Vec<String>,
        /// Why.
        why: Why,
        /// The primary is among them (a supervised approval is consumed).
        primary: bool,
    },
    /// Hand the primary role to `to` first.
    Switchover {
        /// The replica.
        to: String,
        /// Why.
        why: Why,
    },
    /// A supervised primary update waits for approval.
    AwaitApproval(String),
}

/// What [`plan`] reads.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// The instances.
    pub members: &'a Members,
    /// `instances`.
    pub instances: i32,
    /// `status.currentPrimary` (empty before the first primary is named).
    pub current: &'a str,
    /// A handoff is in progress (`targetPrimary` set and not `currentPrimary`).
    pub handoff: bool,
    /// `status.targetPrimary` (during a handoff).
    pub target: &'a str,
    /// Hibernation is on.
    pub hibernation: bool,
    /// Do not recreate the primary's missing pod (a failover may replace it).
    pub hold_primary: bool,
    /// `primaryUpdateStrategy`.
    pub strategy: PrimaryUpdateStrategy,
    /// `primaryUpdateMethod`.
    pub method: PrimaryUpdateMethod,
    /// `redis.io/approve-primary-update: "true"`.
    pub approved: bool,
    /// Disruptions other than hibernation are suspended (every instance fenced, maintenance
    /// with `reusePVC: false` recycling storage, replica mode's designated leader, …).
    pub frozen: Option<String>,
}

/// The plan of one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Ordinals to create.
    pub create: Vec<i32>,
    /// Pods whose `redis.io/role` label must change, and to what.
    pub relabel: Vec<(String, &'static str)>,
    /// The disruption.
    pub action: Action,
}

/// The role label `name` should carry.
pub fn role_of(current: &str, name: &str) -> &'static str {
    if name == current {
        names::role::PRIMARY
    } else {
        names::role::REPLICA
    }
}

/// The plan (see the module contract).
pub fn plan(i: &Inputs<'_>) -> Plan {
    Plan {
        create: creations(i),
        relabel: i
            .members
            .iter()
            .filter(|_| !i.current.is_empty())
            .filter_map(|m| {
                let p = m.pod.as_ref().filter(|p| !p.deleting)?;
                let want = role_of(i.current, &m.name);
                (p.role_label != want).then(|| (m.name.clone(), want))
            })
            .collect(),
        action: action(i),
    }
}

fn creations(i: &Inputs<'_>) -> Vec<i32> {
    if i.hibernation || i.current.is_empty() && i.members.iter().any(|m| m.pod.is_some()) {
        return Vec::new();
    }
    i.members
        .iter()
        .filter(|m| m.ordinal < i.instances && m.pod.is_none())
        .filter(|m| !(i.hold_primary && m.name == i.current))
        .filter(|m| !(i.handoff && (m.name == i.current || m.name == i.target)))
        .map(|m| m.ordinal)
        .collect()
}

fn action(i: &Inputs<'_>) -> Action {
    if i.hibernation {
        return hibernate(i);
    }
    if i.handoff || i.current.is_empty() {
        return Action::None;
    }
    if let Some(why) = &i.frozen {
        return Action::Wait {
            why: Why::Update,
            reason: why.clone(),
        };
    }
    if let Some(a) = scale_down(i) {
        return a;
    }
    if let Some(a) = drain(i) {
        return a;
    }
    rolling_update(i)
}

fn hibernate(i: &Inputs<'_>) -> Action {
    let live: Vec<&Member> = i.members.iter().filter(|m| m.pod_live()).collect();
    if live.is_empty() {
        return Action::None;
    }
    let primary = live.iter().find(|m| m.name == i.current);
    let pods: Vec<String> = match primary {
        Some(p) => vec![p.name.clone()],
        None if i.members.get(i.current).is_some_and(|m| m.pod.is_some()) => {
            return Action::Wait {
                why: Why::Hibernate,
                reason: format!("waiting for the primary {} to stop", i.current),
            };
        }
        None => live.iter().rev().map(|m| m.name.clone()).collect(),
    };
    Action::Delete {
        primary: primary.is_some(),
        pods,
        why: Why::Hibernate,
    }
}

/// The most advanced replica that is in sync with the primary and satisfies `ok`.
fn best_replica<'m>(i: &Inputs<'m>, ok: impl Fn(&Member) -> bool) -> Option<&'m Member> {
    let primary = i.members.get(i.current)?;
    let replid = primary.report()?.replication_id.clone();
    i.members
        .iter()
        .filter(|m| m.name != i.current && m.ordinal < i.instances && m.pod_live())
        .filter(|m| m.in_sync_with(primary.ip()))
        .filter(|m| m.report().is_some_and(|r| r.replication_id == replid))
        .filter(|m| ok(m))
        .max_by_key(|m| (m.report().map_or(0, |r| r.replication_offset), -m.ordinal))
}

fn scale_down(i: &Inputs<'_>) -> Option<Action> {
    let extra: Vec<&Member> = i
        .members
        .iter()
        .filter(|m| m.ordinal >= i.instances && m.pod.is_some())
        .collect();
    let last = extra.last()?;
    if extra
        .iter()
        .any(|m| m.pod.as_ref().is_some_and(|p| p.deleting))
    {
        return Some(Action::Wait {
            why: Why::ScaleDown,
            reason: "waiting for the removed instance's pod to go".into(),
        });
    }
    if extra.iter().any(|m| m.name == i.current) {
        return Some(match best_replica(i, |_| true) {
            Some(to) => Action::Switchover {
                to: to.name.clone(),
                why: Why::ScaleDown,
            },
            None => Action::Wait {
                why: Why::ScaleDown,
                reason: format!(
                    "the primary {} is beyond instances and no remaining replica is in sync to take over",
                    i.current
                ),
            },
        });
    }
    Some(Action::Delete {
        pods: vec![last.name.clone()],
        why: Why::ScaleDown,
        primary: false,
    })
}

fn drain(i: &Inputs<'_>) -> Option<Action> {
    let primary = i.members.get(i.current)?;
    if !primary.pod.as_ref().is_some_and(|p| p.node_cordoned) || !primary.is_master() {
        return None;
    }
    let to = best_replica(i, |m| {
        m.ready() && m.pod.as_ref().is_some_and(|p| !p.node_cordoned)
    });
    Some(match to {
        Some(to) => Action::Switchover {
            to: to.name.clone(),
            why: Why::Drain,
        },
        None => Action::Wait {
            why: Why::Drain,
            reason: format!(
                "the primary {}'s node is cordoned and no in-sync replica on a schedulable node can take over",
                i.current
            ),
        },
    })
}

fn rolling_update(i: &Inputs<'_>) -> Action {
    let wanted: Vec<&Member> = i
        .members
        .iter()
        .filter(|m| m.ordinal < i.instances)
        .collect();
    let stale: Vec<&Member> = wanted.iter().copied().filter(|m| !m.up_to_date()).collect();
    if stale.is_empty() {
        return Action::None;
    }
    let wait = |reason: String| Action::Wait {
        why: Why::Update,
        reason,
    };
    let primary = i.members.get(i.current);
    let primary_ip = primary.and_then(Member::ip);
    for m in &wanted {
        let Some(p) = m.pod.as_ref() else {
            return wait(format!("waiting for {} to be created", m.name));
        };
        if p.deleting {
            return wait(format!("waiting for {} to be replaced", m.name));
        }
        let in_sync = m.name == i.current || m.in_sync_with(primary_ip);
        if !p.ready || !in_sync {
            return wait(format!("waiting for {} to be Ready and in sync", m.name));
        }
    }
    if let Some(m) = stale.iter().rev().find(|m| m.name != i.current) {
        return Action::Delete {
            pods: vec![m.name.clone()],
            why: Why::Update,
            primary: false,
        };
    }
    // Only the primary is stale.
    if i.strategy == PrimaryUpdateStrategy::Supervised && !i.approved {
        return Action::AwaitApproval(format!(
            "every replica is updated; the primary {} waits for {}: \"true\"",
            i.current,
            names::ANN_APPROVE_PRIMARY_UPDATE
        ));
    }
    if wanted.len() == 1 || i.method == PrimaryUpdateMethod::Restart {
        return Action::Delete {
            pods: vec![i.current.to_owned()],
            why: Why::Update,
            primary: true,
        };
    }
    match best_replica(i, Member::up_to_date) {
        Some(to) => Action::Switchover {
            to: to.name.clone(),
            why: Why::Update,
        },
        None => wait(format!(
            "no up-to-date replica is in sync to take over from the primary {}",
            i.current
        )),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
