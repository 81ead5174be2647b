//! Step 4, `poll_instances`: the facts of every data instance and its instance manager's
//! report, polled over HTTPS at the pod IP, all at once (upstream polled one after another,
//! 5 s each).
//!
//! Contract: a [`Member`] for every ordinal below `instances`, every data pod, and the pods
//! the status or the operator's fences name; a pod with an IP is polled (even while it is
//! being deleted: it may still serve); the failure streak of the current primary is updated
//! (a new primary starts a new streak). Never stops the pass; a poll failure is a fact.

use std::collections::BTreeSet;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use crate::cluster::Pass;
use crate::cluster::build::pod;
use crate::cluster::facts::{Member, Members, PodFacts, Poll};
use crate::cluster::handoff::{self, Streak};
use crate::names;

/// The step.
pub struct PollInstances;

fn resize_pending(pass: &Pass, ordinal: i32) -> bool {
    let Some(pvc) = pass
        .seen
        .pvcs
        .get(&names::pvc_name(&pass.model.name, ordinal))
    else {
        return false;
    };
    pvc.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "FileSystemResizePending" && c.status == "True")
        })
}

/// The members of the cluster, not polled yet.
pub fn members(pass: &Pass) -> Members {
    let m = &pass.model;
    let mut ordinals: BTreeSet<i32> = (0..m.instances).collect();
    let named = [&m.status.current_primary, &m.status.target_primary];
    for name in pass
        .seen
        .pods
        .keys()
        .chain(named)
        .chain(m.operator_fenced.pods.iter())
    {
        if let Some(o) = names::ordinal_of(&m.name, name) {
            ordinals.insert(o);
        }
    }
    let role = |n: &str| crate::cluster::plan::role_of(&m.status.current_primary, n);
    Members(
        ordinals
            .into_iter()
            .map(|o| {
                let name = m.pod_name(o);
                let pod = pass.seen.pods.get(&name).map(|p| {
                    let cordoned = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_ref())
                        .is_some_and(|n| pass.seen.cordoned.contains(n));
                    PodFacts {
                        resize_pending: resize_pending(pass, o),
                        ..PodFacts::of(p, cordoned)
                    }
                });
                let desired_hash = if o < m.instances {
                    let p = pod::pod(m, &pass.ctx.settings.pod, o, role(&name));
                    p.metadata
                        .annotations
                        .and_then(|a| a.get(names::ANN_SPEC_HASH).cloned())
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                let member = Member {
                    name,
                    ordinal: o,
                    pod,
                    poll: Poll::NotPolled,
                    desired_hash,
                };
                (o, member)
            })
            .collect(),
    )
}

/// Polls every member with an IP.
pub async fn poll(pass: &mut Pass) {
    let Some(client) = pass.instances.clone() else {
        return;
    };
    let targets: Vec<(i32, String)> = pass
        .members
        .iter()
        .filter_map(|x| x.ip().map(|ip| (x.ordinal, ip.to_owned())))
        .collect();
    let results = futures::future::join_all(targets.iter().map(|(o, ip)| {
        let client = client.clone();
        async move { (*o, client.status(ip).await) }
    }))
    .await;
    for (o, r) in results {
        if let Some(x) = pass.members.0.get_mut(&o) {
            x.poll = match r {
                Ok(report) => Poll::Report(Box::new(report)),
                Err(e) => Poll::Failed(e.to_string()),
            };
        }
    }
}

/// Polls the members named `names` again (after a command changed them).
pub async fn repoll(pass: &mut Pass, names: &[&str]) {
    let Some(client) = pass.instances.clone() else {
        return;
    };
    for n in names {
        let Some(x) = pass.members.get_mut(n) else {
            continue;
        };
        let Some(ip) = x.ip().map(str::to_owned) else {
            continue;
        };
        x.poll = match client.status(&ip).await {
            Ok(r) => Poll::Report(Box::new(r)),
            Err(e) => Poll::Failed(e.to_string()),
        };
    }
}

impl Step<Pass> for PollInstances {
    fn name(&self) -> &'static str {
        "poll_instances"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            pass.members = members(pass);
            poll(pass).await;
            let current = pass.model.status.current_primary.clone();
            let mem = &mut pass.memory;
            if mem.streak_of != current {
                mem.streak = Streak::default();
                mem.streak_of = current.clone();
            }
            let good = handoff::good(pass.members.get(&current));
            mem.streak = mem.streak.observe(good, pass.now);
            Ok(Flow::Continue)
        })
    }
}
