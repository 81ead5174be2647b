//! Step 5, `update_status`: the pods plan of this pass and the status.
//!
//! Contract:
//! - The plan ([`crate::cluster::plan`]) is computed here, once, for both the status (its
//!   phase says what is pending) and the later steps (the handoff starts the switchover it
//!   asks for; `ensure_pods` carries out the rest).
//! - The status ([`crate::cluster::status`]) is written only when more than volatile numbers
//!   changed, conditional on the pass's resourceVersion (a stale view ends the pass); the
//!   cluster as stored replaces the pass's copy; a phase change is also an Event (`Healthy`,
//!   `Degraded`, …) with the reason.
//! - The `redis_cluster_*` gauges are updated. Never stops the pass.

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;
use kube::ResourceExt;

use crate::cluster::apply::{WriteError, Writer};
use crate::cluster::handoff::{self, Step as Handoff};
use crate::cluster::model::Invalid;
use crate::cluster::plan::{self, Plan};
use crate::cluster::steps::{self, handle_primary};
use crate::cluster::{Pass, status};
use crate::context::Context;
use crate::crd::{ClusterPhase, PrimaryUpdateMethod, RedisCluster, RedisClusterStatus};
use crate::metrics::phase_name;
use crate::quantity;

/// The step.
pub struct UpdateStatus;

/// Why it failed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StatusError(#[from] WriteError);

impl ReconcileError for StatusError {
    fn category(&self) -> &'static str {
        self.0.category()
    }
}

/// Why disruptions are suspended, if they are.
fn frozen(pass: &Pass) -> Option<String> {
    let m = &pass.model;
    if m.fencing.all {
        return Some("every instance is fenced (\"*\")".into());
    }
    if let Some(why) = &m.fencing.unreadable {
        return Some(why.clone());
    }
    None
}

/// The plan of this pass (see the module contract).
pub fn plan_of(pass: &Pass) -> Plan {
    let m = &pass.model;
    let st = &m.status;
    let inputs = handle_primary::inputs(pass, None);
    let stage_idle = st.target_primary.is_empty() || st.target_primary == st.current_primary;
    let primary_pod_missing = pass
        .members
        .get(&st.current_primary)
        .is_some_and(|x| x.pod.is_none());
    let hold = primary_pod_missing
        && (!stage_idle || inputs.automatic && handoff::candidate(&inputs).is_some());
    let p = plan::plan(&plan::Inputs {
        members: &pass.members,
        instances: m.instances,
        current: &st.current_primary,
        handoff: !stage_idle,
        target: &st.target_primary,
        hibernation: m.hibernation,
        hold_primary: hold,
        strategy: m.spec.primary_update_strategy,
        method: if m.replica_mode || m.sentinel() {
            PrimaryUpdateMethod::Restart
        } else {
            m.spec.primary_update_method
        },
        approved: m.approved,
        frozen: frozen(pass),
    });
    if m.sentinel() {
        sentinel_plan(p, &st.current_primary)
    } else {
        p
    }
}

/// Sentinel mode never hands the primary role over itself (Sentinel owns it): a planned
/// switchover (scale-down past the primary, a drain) becomes a graceful deletion of the
/// primary's pod, which the plan asks for only while an in-sync replica can take over;
/// Sentinel then fails over and the recreated pod joins as a replica.
fn sentinel_plan(mut p: Plan, current: &str) -> Plan {
    if let plan::Action::Switchover { why, .. } = p.action {
        p.action = plan::Action::Delete {
            pods: vec![current.to_owned()],
            why,
            primary: true,
        };
    }
    p
}

/// In words, what the handoff would do now (for the phase reason).
fn handoff_reason(pass: &Pass) -> Option<String> {
    let request = handle_primary::request(pass);
    let i = handle_primary::inputs(pass, request);
    match handoff::decide(&i, &pass.model.pod_name(0)) {
        Handoff::Watch(r) | Handoff::MarkFailing(r) | Handoff::Wait(r) => Some(r),
        Handoff::Delay { reason, .. } => {
            Some(format!("{reason}; failing over after failoverDelay"))
        }
        Handoff::StopPod { reason, .. } => Some(reason),
        _ => None,
    }
}

fn pvcs(pass: &Pass) -> (i32, Vec<String>, bool) {
    let m = &pass.model;
    let want = quantity::parse(&m.spec.storage.size.0);
    let mut healthy = 0;
    let mut dangling = Vec::new();
    let mut resizing = false;
    for (name, pvc) in &pass.seen.pvcs {
        let ordinal = name
            .strip_prefix(&format!("{}-data-", m.name))
            .and_then(|o| o.parse::<i32>().ok());
        let Some(o) = ordinal else { continue };
        if o >= m.instances {
            dangling.push(name.clone());
            continue;
        }
        let st = pvc.status.as_ref();
        if st.and_then(|s| s.phase.as_deref()) == Some("Bound") {
            healthy += 1;
        }
        let request = pvc
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .and_then(|q| quantity::parse(&q.0));
        let capacity = st
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .and_then(|q| quantity::parse(&q.0));
        let pending = pass
            .members
            .get(&m.pod_name(o))
            .is_some_and(|x| x.pod.as_ref().is_some_and(|p| p.resize_pending));
        if request < want || capacity.is_some_and(|c| request.is_some_and(|r| c < r)) || pending {
            resizing = true;
        }
    }
    (healthy, dangling, resizing && m.uses_pvcs())
}

/// The status this pass would write.
pub fn desired(pass: &Pass) -> RedisClusterStatus {
    let (healthy_pvc, dangling_pvc, resizing) = pvcs(pass);
    let empty = Plan {
        create: vec![],
        relabel: vec![],
        action: plan::Action::None,
    };
    let mut st = status::compute(&status::Inputs {
        model: &pass.model,
        members: &pass.members,
        plan: pass.plan.as_ref().unwrap_or(&empty),
        handoff: pass.handoff.as_deref(),
        blocked: pass.blocked.as_deref(),
        secrets: &pass.secrets,
        healthy_pvc,
        dangling_pvc,
        resizing,
        now: pass.now,
    });
    if pass.model.sentinel() {
        st.sentinel_ready_instances = steps::ensure_sentinels::ready_count(pass);
        if let Some(why) = pass
            .sentinel
            .as_ref()
            .filter(|_| st.phase == Some(ClusterPhase::Healthy))
        {
            st.phase = Some(ClusterPhase::Degraded);
            st.phase_reason = why.clone();
        }
    }
    st
}

/// Writes the status this pass computes; Events for a phase change.
pub async fn write(pass: &mut Pass) -> Result<bool, WriteError> {
    let desired = desired(pass);
    let live = pass.rc.status.clone();
    let stored = pass.writer().status(live.as_ref(), &desired).await?;
    let wrote = stored.is_some();
    let before = pass.model.status.phase;
    if wrote && desired.phase != before {
        let warning = matches!(
            desired.phase,
            Some(ClusterPhase::Degraded | ClusterPhase::FailingOver)
        );
        pass.writer()
            .event(
                warning,
                phase_name(desired.phase),
                desired.phase_reason.clone(),
            )
            .await;
    }
    let actual = pass.members.iter().filter(|x| x.pod.is_some()).count() as i32;
    pass.ctx.metrics.observe(
        &pass.model.namespace,
        &pass.model.name,
        pass.model.instances,
        actual,
        desired.phase,
    );
    if let Some(rc) = stored {
        // The pass's next write of the cluster is conditional on this resourceVersion.
        pass.rc = std::sync::Arc::new(rc);
        pass.confirmed = true;
    }
    pass.model.status = desired;
    Ok(wrote)
}

/// Records an invalid spec in the status (phase `Degraded`, `Ready` False `InvalidSpec`);
/// `false` when `rc` was older than the stored cluster (nothing written: read it again).
pub async fn invalid(ctx: &Context, rc: &RedisCluster, why: &Invalid) -> bool {
    let mut st = rc.status.clone().unwrap_or_default();
    st.phase = Some(ClusterPhase::Degraded);
    st.phase_reason = why.to_string();
    st.observed_generation = rc.metadata.generation.unwrap_or_default();
    kit::conditions::upsert(
        &mut st.conditions,
        kit::conditions::Desired::new(
            crate::crd::condition::READY,
            false,
            "InvalidSpec",
            why.to_string(),
        )
        .observed(rc.metadata.generation),
        jiff::Timestamp::now(),
    );
    let w = Writer::new(ctx, rc);
    match w.status(rc.status.as_ref(), &st).await {
        Ok(_) => true,
        Err(e) if e.is_stale() => {
            tracing::info!(error = %e, "recording the invalid spec");
            false
        }
        Err(e) => {
            tracing::warn!(cluster = %rc.name_any(), error = %e, "recording the invalid spec");
            true
        }
    }
}

/// The status of a RedisCluster being deleted while a finalizer holds it (a foreground
/// deletion waits for its children): phase `Deleting`, the rest as it was.
pub fn deleting_status(rc: &RedisCluster) -> RedisClusterStatus {
    let mut st = rc.status.clone().unwrap_or_default();
    st.phase = Some(ClusterPhase::Deleting);
    st.phase_reason =
        "the RedisCluster is being deleted: its pods, Services and Secrets go with it; its PVCs stay"
            .into();
    st
}

/// Records [`deleting_status`] (once: an equal status is not written). `false` when the
/// pass's copy was stale (look again); any other failure is only logged, the object is going.
pub async fn deleting(ctx: &Context, rc: &RedisCluster) -> bool {
    match Writer::new(ctx, rc)
        .status(rc.status.as_ref(), &deleting_status(rc))
        .await
    {
        Ok(_) => true,
        Err(e) if e.is_stale() => false,
        Err(e) => {
            tracing::info!(cluster = %rc.name_any(), error = %e, "recording the deletion");
            true
        }
    }
}

impl Step<Pass> for UpdateStatus {
    fn name(&self) -> &'static str {
        "update_status"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            pass.plan = Some(plan_of(pass));
            pass.handoff = handoff_reason(pass);
            write(pass).await.map_err(StatusError)?;
            Ok(Flow::Continue)
        })
    }
}

#[cfg(test)]
mod deleting_tests {
    use super::*;

    #[test]
    fn a_cluster_being_deleted_says_so_and_keeps_the_rest() {
        let rc: RedisCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": "demo", "namespace": "ns"},
            "spec": {"storage": {"size": "1Gi"}},
            "status": {"phase": "Healthy", "currentPrimary": "demo-0", "readyInstances": 3}
        }))
        .expect("cluster");
        let st = deleting_status(&rc);
        assert_eq!(st.phase, Some(ClusterPhase::Deleting));
        assert!(
            st.phase_reason.contains("being deleted"),
            "{}",
            st.phase_reason
        );
        assert_eq!(
            (st.current_primary.as_str(), st.ready_instances),
            ("demo-0", 3)
        );
        let rc = RedisCluster {
            status: Some(st.clone()),
            ..rc
        };
        assert_eq!(deleting_status(&rc), st, "written once");
    }
}
