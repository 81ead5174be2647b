//! Step 6, `handle_primary`: carries out the handoff state machine
//! ([`crate::cluster::handoff`]) one step at a time: decide, act, re-observe what the act
//! changed, decide again, until it idles or waits (at most [`MAX_STEPS`] per pass).
//!
//! Contract:
//! - Every durable change is written before the next action depends on it: the intent
//!   (`targetPrimary`) and failure time in the status, the fences in the RedisCluster's
//!   annotations, both conditional on the pass's resourceVersion of the cluster, the Lease by
//!   compare-and-swap; a failed write ends the pass and the next one starts from what is
//!   stored.
//! - An action outside the RedisCluster (moving the Lease, deleting the old primary's pod,
//!   promoting, handing over, pointing `-leader`, aborting) is taken only once the pass's copy
//!   of the cluster is confirmed current ([`Pass::confirm_current`]): a pass working from a
//!   stale view (the cache behind a published promotion) ends instead of undoing it.
//! - After a command to an instance (promote, switchover) the instances it concerns are polled
//!   again before deciding; a refusal (409) is remembered for the next decision; a command
//!   without an answer is not repeated in the same pass.
//! - Events: `PrimaryFailing`, `PrimaryRecovered`, `FailoverStarted`, `Fenced`,
//!   `StoppingOldPrimary`, `FailoverCandidateElected`, `Promoted`, `LeaderServicePointed`,
//!   `FailoverCompleted`, `SwitchoverStarted`, `SwitchedOver`, `SwitchoverCompleted`,
//!   `FailoverAborted`, `SwitchoverAborted`, `FenceReleased`, `PrimaryNamed`,
//!   `PromotionRefused`; the `redis_failover_total` and `redis_switchover_total` counters.
//! - Requeues after a second while anything is under way.
//! - In replica mode nothing is handed off (every instance follows the external source); the
//!   step only names the designated leader of a new cluster (ordinal 0, `PrimaryNamed`), the
//!   instance `promote` makes primary.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;
use kube::ResourceExt;

use crate::cluster::apply::WriteError;
use crate::cluster::build::service;
use crate::cluster::handoff::{self, Inputs, PENDING, Request, Step as Handoff};
use crate::cluster::model::Fencing;
use crate::cluster::plan::Action;
use crate::cluster::steps::{poll_instances, update_status};
use crate::cluster::{FAST, Pass};
use crate::crd::ClusterMode;
use crate::instance_api::SwitchoverRequest;
use crate::instance_client::Answer;
use crate::names;

/// The step.
pub struct HandlePrimary;

/// Steps carried out in one pass at most.
pub const MAX_STEPS: usize = 16;
/// Grace period of an old primary's pod deleted because it cannot be confirmed stopped (its
/// data is being superseded; the kubelet's minimum).
pub const STOP_GRACE_SECONDS: u32 = 2;

/// Why it failed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct HandoffError(#[from] WriteError);

impl ReconcileError for HandoffError {
    fn category(&self) -> &'static str {
        self.0.category()
    }
}

fn ts(t: jiff::Timestamp) -> Time {
    Time(jiff::Timestamp::from_second(t.as_second()).unwrap_or(t))
}

/// The planned switchover the pods plan asks for.
pub fn request(pass: &Pass) -> Option<Request> {
    match pass.plan.as_ref().map(|p| &p.action) {
        Some(Action::Switchover { to, why }) => Some(Request {
            target: to.clone(),
            reason: why.as_str().to_owned(),
        }),
        _ => None,
    }
}

/// The decision's inputs from this pass.
pub fn inputs(pass: &Pass, request: Option<Request>) -> Inputs<'_> {
    let m = &pass.model;
    let st = &m.status;
    let leader = pass
        .seen
        .services
        .get(&names::leader_service(&m.name))
        .and_then(|s| {
            s.spec
                .as_ref()?
                .selector
                .as_ref()?
                .get(names::LABEL_INSTANCE)
        })
        .map(String::as_str);
    let primary_replid = pass
        .members
        .get(&st.current_primary)
        .filter(|x| x.is_master())
        .and_then(|x| x.report())
        .map(|r| r.replication_id.as_str())
        .or_else(|| {
            st.instances_status
                .get(&st.current_primary)
                .map(|s| s.replication_id.as_str())
        })
        .unwrap_or_default();
    Inputs {
        now: pass.now,
        current: &st.current_primary,
        target: &st.target_primary,
        target_since: st.target_primary_timestamp.as_ref().map(|t| t.0),
        failing_since: st
            .current_primary_failing_since_timestamp
            .as_ref()
            .map(|t| t.0),
        members: &pass.members,
        instances: m.instances,
        fencing: &m.fencing,
        operator_fenced: &m.operator_fenced,
        lease_holder: pass
            .seen
            .lease
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref()),
        leader,
        streak: pass.memory.streak,
        primary_replid,
        synced_replid: &st.synced_replication_id,
        failover_delay: Duration::from_secs(m.spec.failover_delay.max(0) as u64),
        max_lag: Duration::from_secs(m.spec.min_sync_replicas_max_lag.max(1) as u64),
        switchover_timeout: Duration::from_secs(m.spec.switchover_delay.max(1) as u64),
        automatic: !m.maintenance
            && !m.replica_mode
            && !m.hibernation
            && m.spec.mode == ClusterMode::Standalone,
        request,
        refused: pass
            .memory
            .refused
            .as_ref()
            .map(|(a, b)| (a.as_str(), b.as_str())),
    }
}

/// Writes the durable fields `change` sets, with the rest of the status recomputed.
async fn durable(
    pass: &mut Pass,
    change: impl FnOnce(&mut crate::crd::RedisClusterStatus),
) -> Result<(), WriteError> {
    change(&mut pass.model.status);
    pass.handoff = None;
    update_status::write(pass).await?;
    Ok(())
}

/// The fencing annotations after adding `add` and lifting the operator's own fences of
/// `remove`, from the annotations as they are now (pure).
pub fn refence(
    annotations: &std::collections::BTreeMap<String, String>,
    add: &[String],
    remove: &[String],
) -> Vec<(&'static str, Option<String>)> {
    let get = |k: &str| annotations.get(k).map(String::as_str);
    let fencing = Fencing::parse(
        names::ANN_FENCED_INSTANCES,
        get(names::ANN_FENCED_INSTANCES),
    );
    let operator = Fencing::parse(names::ANN_OPERATOR_FENCED, get(names::ANN_OPERATOR_FENCED));
    let mut user: BTreeSet<String> = fencing.pods.clone();
    let mut ours: BTreeSet<String> = operator.pods.clone();
    for p in add {
        if !fencing.fences(p) {
            ours.insert(p.clone());
        }
        user.insert(p.clone());
    }
    for p in remove {
        if ours.remove(p) {
            user.remove(p);
        }
    }
    let render =
        |all, set: &BTreeSet<String>| (all || !set.is_empty()).then(|| Fencing::render(all, set));
    vec![
        (names::ANN_FENCED_INSTANCES, render(fencing.all, &user)),
        (names::ANN_OPERATOR_FENCED, render(false, &ours)),
    ]
}

async fn fence(pass: &mut Pass, add: &[String], remove: &[String]) -> Result<(), WriteError> {
    let rc = pass
        .writer()
        .annotate_cluster(|ann| refence(ann, add, remove))
        .await?;
    pass.refresh(rc);
    Ok(())
}

async fn move_lease(pass: &mut Pass, from: Option<&str>, to: &str) -> Result<bool, WriteError> {
    let name = names::primary_lease(&pass.model.name);
    let live = pass.seen.lease.clone();
    let moved = pass
        .writer()
        .move_lease(&name, live.as_deref(), from, to)
        .await?;
    if moved {
        // The cache catches up later; this pass continues from what it wrote.
        let mut lease = live.map(|l| (*l).clone()).unwrap_or_default();
        lease.metadata.name = Some(name);
        lease
            .spec
            .get_or_insert_with(Default::default)
            .holder_identity = Some(to.to_owned());
        pass.seen.lease = Some(std::sync::Arc::new(lease));
    }
    Ok(moved)
}

/// What a step did.
enum Next {
    /// Decide again now.
    Again,
    /// Stop for this pass, requeue after this.
    Stop(Duration),
}

/// Whether `step` acts outside the RedisCluster (see the module contract).
fn acts_outside(step: &Handoff) -> bool {
    matches!(
        step,
        Handoff::StopPod { .. }
            | Handoff::MoveLease { .. }
            | Handoff::Promote { .. }
            | Handoff::HandOver { .. }
            | Handoff::PointLeader(_)
            | Handoff::Abort(_)
    )
}

async fn execute(pass: &mut Pass, step: Handoff) -> Result<Next, WriteError> {
    let now = pass.now;
    if acts_outside(&step) {
        pass.confirm_current().await?;
    }
    fn w(p: &Pass) -> crate::cluster::apply::Writer<'_> {
        p.writer()
    }
    match step {
        Handoff::Idle => return Ok(Next::Stop(Duration::ZERO)),
        Handoff::Watch(r) | Handoff::Wait(r) => {
            pass.handoff = Some(r);
            return Ok(Next::Stop(FAST));
        }
        Handoff::Delay { reason, remaining } => {
            // Confirmed failing: one Warning series however many passes the delay takes.
            w(pass).event(true, "PrimaryFailing", reason.clone()).await;
            pass.handoff = Some(reason);
            return Ok(Next::Stop(remaining.clamp(FAST, Duration::from_secs(5))));
        }
        Handoff::MarkFailing(r) => {
            // The first bad observation, not yet a confirmed failure: no Event (a missed poll
            // must not page anyone), the confirmed one gets `PrimaryFailing`/`FailoverStarted`.
            durable(pass, |s| {
                s.current_primary_failing_since_timestamp = Some(ts(now))
            })
            .await?;
            tracing::info!(reason = %r, "primary suspect; recorded when it was first seen failing");
        }
        Handoff::ClearFailing => {
            let since = pass
                .model
                .status
                .current_primary_failing_since_timestamp
                .clone();
            durable(pass, |s| s.current_primary_failing_since_timestamp = None).await?;
            let lasted = since.map(|t| now.duration_since(t.0).unsigned_abs());
            if lasted.is_some_and(|d| d >= crate::cluster::handoff::DETECTION_WINDOW) {
                let p = pass.model.status.current_primary.clone();
                w(pass)
                    .event(
                        false,
                        "PrimaryRecovered",
                        format!("primary {p} is healthy again"),
                    )
                    .await;
            }
        }
        Handoff::StartFailover(r) => {
            durable(pass, |s| {
                s.target_primary = PENDING.into();
                s.target_primary_timestamp = Some(ts(now));
                s.current_primary_failing_since_timestamp
                    .get_or_insert(ts(now));
            })
            .await?;
            w(pass).event(true, "FailoverStarted", r).await;
        }
        Handoff::StartSwitchover(req) => {
            let from = pass.model.status.current_primary.clone();
            durable(pass, |s| {
                s.target_primary = req.target.clone();
                s.target_primary_timestamp = Some(ts(now));
            })
            .await?;
            let note = format!(
                "switching over from {from} to {} ({})",
                req.target, req.reason
            );
            w(pass).event(false, "SwitchoverStarted", note).await;
            // A supervised primary update starts here: its approval is used up now, or it
            // would still be there (approving the next one) once the whole handover finished
            // within this pass.
            let update = matches!(
                pass.plan.as_ref().map(|p| &p.action),
                Some(Action::Switchover {
                    why: crate::cluster::plan::Why::Update,
                    ..
                })
            );
            let supervised = pass.model.spec.primary_update_strategy
                == crate::crd::PrimaryUpdateStrategy::Supervised;
            if update && supervised && pass.model.approved {
                crate::cluster::steps::ensure_pods::consume_approval(pass).await?;
            }
        }
        Handoff::Fence(pod) => {
            fence(pass, std::slice::from_ref(&pod), &[]).await?;
            let note = format!(
                "fenced the old primary {pod}: its instance manager keeps redis-server down"
            );
            w(pass).event(true, "Fenced", note).await;
        }
        Handoff::StopPod { pod, reason } => {
            w(pass)
                .delete::<Pod>(&pod, Some(STOP_GRACE_SECONDS))
                .await?;
            w(pass)
                .event(
                    true,
                    "StoppingOldPrimary",
                    format!("{reason}; deleting its pod"),
                )
                .await;
            pass.handoff = Some(format!("waiting for the old primary's pod {pod} to stop"));
            return Ok(Next::Stop(FAST));
        }
        Handoff::Elect { target, reason } => {
            durable(pass, |s| {
                s.target_primary = target.clone();
                s.target_primary_timestamp = Some(ts(now));
            })
            .await?;
            w(pass)
                .event(false, "FailoverCandidateElected", reason)
                .await;
        }
        Handoff::Abort(reason) => abort(pass, reason).await?,
        Handoff::MoveLease { from, to } => {
            if !move_lease(pass, from.as_deref(), &to).await? {
                pass.handoff = Some("the primary Lease changed meanwhile; looking again".into());
                return Ok(Next::Stop(FAST));
            }
        }
        Handoff::Promote {
            target,
            ip,
            request,
        } => {
            let Some(client) = pass.instances.clone() else {
                return Ok(Next::Stop(FAST));
            };
            match client.promote(&ip, &request).await {
                Ok(Answer::Done(msg)) => {
                    w(pass)
                        .event(false, "Promoted", format!("{target}: {msg}"))
                        .await;
                }
                Ok(Answer::Refused(why)) => {
                    w(pass)
                        .event(true, "PromotionRefused", format!("{target}: {why}"))
                        .await;
                    pass.memory.refused = Some((target.clone(), why));
                }
                Err(e) => {
                    pass.handoff = Some(format!("promoting {target}: {e}"));
                    poll_instances::repoll(pass, &[&target]).await;
                    return Ok(Next::Stop(FAST));
                }
            }
            poll_instances::repoll(pass, &[&target]).await;
        }
        Handoff::HandOver {
            from,
            from_ip,
            target,
            target_ip,
            timeout_ms,
        } => {
            let Some(client) = pass.instances.clone() else {
                return Ok(Next::Stop(FAST));
            };
            let req = SwitchoverRequest {
                target_ip,
                target_port: names::REDIS_PORT as u16,
                timeout_ms,
            };
            let res = client.switchover(&from_ip, &req).await;
            poll_instances::repoll(pass, &[&from, &target]).await;
            match res {
                Ok(Answer::Done(msg)) => {
                    w(pass)
                        .event(
                            false,
                            "SwitchedOver",
                            format!("{from} handed over to {target}: {msg}"),
                        )
                        .await;
                }
                Ok(Answer::Refused(why)) => pass.memory.refused = Some((from.clone(), why)),
                Err(e) => {
                    pass.handoff = Some(format!("switching over from {from} to {target}: {e}"));
                    return Ok(Next::Stop(FAST));
                }
            }
        }
        Handoff::PointLeader(target) => {
            let svc = service::leader(&pass.model, &target);
            let live = pass.seen.services.get(&svc.name_any()).cloned();
            w(pass).apply(&svc, live.as_deref()).await?;
            let mut updated = svc.clone();
            if let Some(l) = live {
                updated.metadata = l.metadata.clone();
            }
            pass.seen
                .services
                .insert(svc.name_any(), std::sync::Arc::new(updated));
            w(pass)
                .event(
                    false,
                    "LeaderServicePointed",
                    format!("{} now selects {target}", svc.name_any()),
                )
                .await;
        }
        Handoff::Publish(target) => publish(pass, target).await?,
        Handoff::Release(pods) => {
            fence(pass, &[], &pods).await?;
            let note = format!("released the operator's fence of {}", pods.join(", "));
            w(pass).event(false, "FenceReleased", note).await;
        }
    }
    Ok(Next::Again)
}

async fn abort(pass: &mut Pass, reason: String) -> Result<(), WriteError> {
    let current = pass.model.status.current_primary.clone();
    let failover =
        pass.model.status.target_primary == PENDING || pass.model.operator_fenced.fences(&current);
    let holder = pass
        .seen
        .lease
        .as_ref()
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.clone());
    if let Some(h) = holder.filter(|h| *h != current)
        && !move_lease(pass, Some(&h), &current).await?
    {
        return Ok(());
    }
    let now = pass.now;
    durable(pass, |s| {
        s.target_primary = current.clone();
        s.target_primary_timestamp = Some(ts(now));
    })
    .await?;
    if pass.model.operator_fenced.fences(&current) {
        fence(pass, &[], std::slice::from_ref(&current)).await?;
    }
    let reason_code = if failover {
        "FailoverAborted"
    } else {
        "SwitchoverAborted"
    };
    pass.writer().event(true, reason_code, reason).await;
    Ok(())
}

async fn publish(pass: &mut Pass, target: String) -> Result<(), WriteError> {
    let st = &pass.model.status;
    let before = st.current_primary.clone();
    let failover = st.target_primary == PENDING || pass.model.operator_fenced.fences(&before);
    let now = pass.now;
    durable(pass, |s| {
        s.current_primary = target.clone();
        s.target_primary = target.clone();
        s.current_primary_timestamp = Some(ts(now));
        s.current_primary_failing_since_timestamp = None;
        if s.target_primary_timestamp.is_none() {
            s.target_primary_timestamp = Some(ts(now));
        }
    })
    .await?;
    pass.memory.refused = None;
    let (ns, name) = (pass.model.namespace.clone(), pass.model.name.clone());
    let w = pass.writer();
    if before.is_empty() {
        w.event(
            false,
            "PrimaryNamed",
            format!("{target} is the first primary"),
        )
        .await;
    } else if failover {
        pass.ctx.metrics.failover(&ns, &name);
        w.event(
            false,
            "FailoverCompleted",
            format!("{target} is the primary (was {before})"),
        )
        .await;
    } else {
        pass.ctx.metrics.switchover(&ns, &name);
        w.event(
            false,
            "SwitchoverCompleted",
            format!("{target} is the primary (was {before})"),
        )
        .await;
    }
    Ok(())
}

impl Step<Pass> for HandlePrimary {
    fn name(&self) -> &'static str {
        "handle_primary"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            if pass.model.hibernation {
                return Ok(Flow::Continue);
            }
            if pass.model.replica_mode {
                // No failover or switchover in replica mode, but `promote` needs the
                // designated leader: a new replica cluster names ordinal 0, as a new cluster
                // names its first primary.
                if pass.model.status.current_primary.is_empty() {
                    let zero = pass.model.pod_name(0);
                    publish(pass, zero).await.map_err(HandoffError)?;
                }
                return Ok(Flow::Continue);
            }
            let zero = pass.model.pod_name(0);
            for _ in 0..MAX_STEPS {
                let req = request(pass);
                let step = handoff::decide(&inputs(pass, req), &zero);
                tracing::debug!(?step, "handoff");
                if !matches!(step, Handoff::Promote { .. } | Handoff::HandOver { .. }) {
                    // A refusal is acted on by the decision that follows it, then forgotten.
                    pass.memory.refused = None;
                }
                let kind = step.kind();
                let next = execute(pass, step).await.map_err(HandoffError)?;
                if let Some(hook) = &pass.ctx.settings.handoff_hook
                    && (hook.0)(pass.model.namespace.as_str(), kind)
                {
                    tracing::warn!(step = kind, "stopped by the handoff hook");
                    std::future::pending::<()>().await;
                }
                match next {
                    Next::Again => continue,
                    Next::Stop(d) if d.is_zero() => return Ok(Flow::Continue),
                    Next::Stop(d) => {
                        if pass.handoff.is_some() {
                            update_status::write(pass).await.map_err(HandoffError)?;
                        }
                        return Ok(Flow::delay(d));
                    }
                }
            }
            Ok(Flow::delay(FAST))
        })
    }
}
