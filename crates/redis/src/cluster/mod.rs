//! The RedisCluster controller.
//!
//! Contract of [`reconcile`]: one pass is this list of named steps, in the seed's order
//! (global resources → secrets → services → status poll → status update → reachability →
//! PVCs → pods), with the primary handoff between the status update and the reachability
//! gate as upstream's failover is:
//!
//! 1. `ensure_global_resources`: the instance managers' ServiceAccount, Role and RoleBinding;
//!    the PodDisruptionBudgets.
//! 2. `ensure_secrets`: the generated auth Secret, the instance API's CA, serving certificate
//!    and token; the resourceVersions of the referenced Secrets.
//! 3. `ensure_services`: `-leader`, `-replica`, `-any`; the connection Secret.
//! 4. `poll_instances`: every data pod's instance manager over HTTPS, at once.
//!    (Sentinel mode: `ensure_sentinels`, the Sentinel pods and Service, and following the
//!    Sentinels' answer instead of failing over.)
//! 5. `update_status`: the pods plan, phase, conditions and per-instance status (written only
//!    when it differs).
//! 6. `handle_primary`: failover, switchover, fencing and the Lease ([`handoff`]).
//! 7. `finish_replica_promotion`: replica mode's `promote`, once the leader is a primary.
//! 8. `check_reachability`: no disruption while a wanted instance does not answer.
//! 9. `ensure_pvcs`: create, grow, recycle during maintenance.
//! 10. `ensure_pods`: create, relabel, delete (hibernation, scale-down, rolling update).
//!
//! Paused (`redis.io/reconciliationLoop: "disabled"`, CloudNativePG's
//! `cnpg.io/reconciliationLoop`): a pass does nothing but announce the pause once (Warning
//! `ReconciliationDisabled`); no child, status or failover is touched until the annotation is
//! removed or `"enabled"` (Event `ReconciliationResumed`). A deletion is still followed.
//!
//! The pure decisions are [`handoff`], [`plan`] and [`status`]; the only writer is [`apply`].
//! A converged cluster's pass makes no write: children are applied only when they differ,
//! status only when more than volatile numbers changed, Events only when something is done.
//! Passes requeue after the poll interval (the instances' state is polled, not watched), and
//! every second while the primary is suspect or a handoff is under way.
//!
//! A pass works from the watch cache's copy of the RedisCluster, which can be older than the
//! stored object (the previous pass's status write not seen yet). Its writes of the
//! RedisCluster are conditional on the copy's `resourceVersion` and carry the stored one
//! forward ([`apply`]), and before an action a stale view must not take it confirms the copy
//! is current ([`Pass::confirm_current`]). A pass that finds its view stale is not an error:
//! it ends, and the next pass starts after [`REREAD`] from the cache again (no Warning, no
//! back-off).

pub mod apply;
pub mod build;
pub mod facts;
pub mod handoff;
pub mod model;
pub mod observe;
pub mod plan;
pub mod run;
pub mod status;
pub mod steps;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kit::pipeline::Pipeline;
use kit::reconcile::{Outcome, ReconcileError};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::context::{Context, Memory};
use crate::crd::RedisCluster;
use crate::instance_client::Instances;
use facts::Members;
use model::Model;
use observe::{Caches, Observed};

/// Requeue while something is in motion.
pub const FAST: Duration = Duration::from_secs(1);
/// The longest a pass waits for the watch caches' first lists.
pub const CACHE_WAIT: Duration = Duration::from_secs(5);
/// When a pass that found the caches incomplete is tried again.
pub const CACHE_RETRY: Duration = Duration::from_secs(10);
/// When a pass that found its view of the RedisCluster stale is followed by the next one.
pub const REREAD: Duration = Duration::from_millis(500);

/// One pass's working state, handed from step to step.
pub struct Pass {
    /// The operator context.
    pub ctx: Arc<Context>,
    /// The RedisCluster as last read or written: its `resourceVersion` is the precondition
    /// of the pass's next write of it.
    pub rc: Arc<RedisCluster>,
    /// Whether `rc` is known to be the stored object (read back, or written by this pass).
    pub confirmed: bool,
    /// Its validated model.
    pub model: Model,
    /// Its children.
    pub seen: Observed,
    /// The pass's clock.
    pub now: Timestamp,
    /// The instances (after `poll_instances`).
    pub members: Members,
    /// The cluster's instance API client (after `ensure_secrets`).
    pub instances: Option<Arc<dyn Instances>>,
    /// resourceVersions of the referenced Secrets.
    pub secrets: BTreeMap<String, String>,
    /// What blocks the cluster (a missing Secret), in words.
    pub blocked: Option<String>,
    /// The pods plan (after `update_status`).
    pub plan: Option<plan::Plan>,
    /// What the handoff does or waits for.
    pub handoff: Option<String>,
    /// Sentinel mode: what following the Sentinels waits for, in words (after
    /// `ensure_sentinels`).
    pub sentinel: Option<String>,
    /// What the cluster's passes remember.
    pub memory: Memory,
}

impl Pass {
    /// Replaces the cluster after a write of it that returned it: its `resourceVersion` is
    /// the precondition of the pass's next write (the status this pass computed is kept).
    pub fn refresh(&mut self, rc: RedisCluster) {
        let status = self.model.status.clone();
        if let Ok(m) = Model::of(&rc) {
            self.model = Model { status, ..m };
        }
        self.rc = Arc::new(rc);
        self.confirmed = true;
    }

    /// Makes sure the pass's copy of the RedisCluster is the stored one before an action a
    /// stale view must not take: one read from the API server per pass, none once the pass
    /// wrote the cluster. [`apply::WriteError::Stale`] when it is not.
    pub async fn confirm_current(&mut self) -> Result<(), apply::WriteError> {
        if !self.confirmed {
            self.writer().confirm_current().await?;
            self.confirmed = true;
        }
        Ok(())
    }

    /// The writer of this pass.
    pub fn writer(&self) -> apply::Writer<'_> {
        apply::Writer::new(&self.ctx, &self.rc)
    }
}

/// A failed pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A step failed.
    #[error(transparent)]
    Step(#[from] kit::pipeline::PipelineError),
    /// The spec cannot be acted on.
    #[error("invalid RedisCluster: {0}")]
    Invalid(#[from] model::Invalid),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Step(e) => e.category(),
            Error::Invalid(_) => "invalid_spec",
        }
    }

    fn is_permanent(&self) -> bool {
        matches!(self, Error::Invalid(_))
    }
}

/// The steps, in order.
pub fn pipeline() -> Pipeline<Pass> {
    Pipeline::new()
        .step(steps::ensure_global_resources::EnsureGlobalResources)
        .step(steps::ensure_secrets::EnsureSecrets)
        .step(steps::ensure_services::EnsureServices)
        .step(steps::poll_instances::PollInstances)
        .step(steps::ensure_sentinels::EnsureSentinels)
        .step(steps::update_status::UpdateStatus)
        .step(steps::handle_primary::HandlePrimary)
        .step(steps::finish_replica_promotion::FinishReplicaPromotion)
        .step(steps::check_reachability::CheckReachability)
        .step(steps::ensure_pvcs::EnsurePvcs)
        .step(steps::ensure_pods::EnsurePods)
}

/// What [`reconcile`] gets.
pub struct Reconciler {
    /// The operator context.
    pub ctx: Arc<Context>,
    /// The watch caches.
    pub caches: Caches,
    /// The steps.
    pub pipeline: Pipeline<Pass>,
}

/// One pass over `rc` (see the module contract).
pub async fn reconcile(rc: Arc<RedisCluster>, r: Arc<Reconciler>) -> Result<Action, Error> {
    let ctx = &r.ctx;
    let uid = rc.uid().unwrap_or_default();
    let ns = rc.namespace().unwrap_or_default();
    if rc.metadata.deletion_timestamp.is_some() {
        // Children go with their owner references; PVCs stay (upstream's policy). A deletion a
        // finalizer holds (foreground) shows phase `Deleting` meanwhile.
        if !steps::update_status::deleting(ctx, &rc).await {
            return Ok(Action::requeue(REREAD));
        }
        ctx.forget(&uid);
        ctx.metrics.forget(&ns, &rc.name_any());
        ctx.backoff.forget(&*rc);
        return Ok(Action::await_change());
    }
    if paused(&rc) {
        let mut memory = ctx.memory(&uid);
        if !memory.paused {
            tracing::info!(cluster = %rc.name_any(), "reconciliation disabled by annotation");
            let note = format!(
                "{}: \"disabled\": the operator changes nothing for this cluster (no pod created \
                 or deleted, no failover, no status) until the annotation is removed or \"enabled\"",
                crate::names::ANN_RECONCILIATION_LOOP
            );
            apply::Writer::new(ctx, &rc)
                .event(true, "ReconciliationDisabled", note)
                .await;
            memory.paused = true;
            ctx.remember(&uid, memory);
        }
        return Ok(Action::await_change());
    }
    if let Err(missing) = r.caches.ready(CACHE_WAIT).await {
        // Never an unbounded wait: a watch the API refuses (the operator's RBAC or the
        // namespace going away) never lists, and a pass waiting on it would never end.
        tracing::warn!(caches = ?missing, "watch caches incomplete; trying again later");
        return Ok(Action::requeue(CACHE_RETRY));
    }
    let started = Instant::now();
    let model = match Model::of(&rc) {
        Ok(m) => m,
        Err(e) => {
            if !steps::update_status::invalid(ctx, &rc, &e).await {
                return Ok(Action::requeue(REREAD));
            }
            return Err(e.into());
        }
    };
    let mut pass = Pass {
        ctx: ctx.clone(),
        seen: r.caches.observe(&model),
        memory: ctx.memory(&uid),
        model,
        rc: rc.clone(),
        confirmed: false,
        now: Timestamp::now(),
        members: Members::default(),
        instances: None,
        secrets: BTreeMap::new(),
        blocked: None,
        plan: None,
        handoff: None,
        sentinel: None,
    };
    if pass.memory.paused {
        pass.memory.paused = false;
        let note = format!(
            "{} is no longer \"disabled\": reconciling again",
            crate::names::ANN_RECONCILIATION_LOOP
        );
        pass.writer()
            .event(false, "ReconciliationResumed", note)
            .await;
    }
    let report = r.pipeline.run(&mut pass).await;
    ctx.remember(&uid, pass.memory.clone());
    ctx.metrics
        .reconciled(&ns, &rc.name_any(), started.elapsed().as_secs_f64());
    let outcome = reread_if_stale(report.into_result())?;
    let poll = Outcome::RequeueAfter(ctx.settings.poll_interval);
    Ok(ctx.backoff.succeeded(&*rc, outcome.sooner(poll)))
}

/// Whether `redis.io/reconciliationLoop: disabled` pauses the controller for `rc`.
pub fn paused(rc: &RedisCluster) -> bool {
    rc.annotations()
        .get(crate::names::ANN_RECONCILIATION_LOOP)
        .is_some_and(|v| v == "disabled")
}

/// A pass that ended on a stale view of the cluster is not a failure: it is followed by the
/// next one after [`REREAD`] (no Warning, no back-off); anything else as it is.
pub fn reread_if_stale(
    result: Result<Outcome, kit::pipeline::PipelineError>,
) -> Result<Outcome, kit::pipeline::PipelineError> {
    match result {
        Err(e) if e.category() == apply::STALE_VIEW => {
            tracing::info!(error = %e, "stale view of the cluster; reading it again");
            Ok(Outcome::RequeueAfter(REREAD))
        }
        other => other,
    }
}

/// Retry policy: transient errors back off per object, an invalid spec waits for a change.
pub fn error_policy(rc: Arc<RedisCluster>, err: &Error, r: Arc<Reconciler>) -> Action {
    r.ctx.backoff.failed(&*rc, err)
}

#[cfg(test)]
mod tests {
    use kit::pipeline::PipelineError;

    use super::*;
    use crate::cluster::apply::WriteError;
    use crate::cluster::steps::{handle_primary::HandoffError, update_status::StatusError};

    fn failed(step: &'static str, e: WriteError, handoff: bool) -> Result<Outcome, PipelineError> {
        let source = if handoff {
            HandoffError::from(e).into()
        } else {
            StatusError::from(e).into()
        };
        Err(PipelineError { step, source })
    }

    fn stale() -> WriteError {
        WriteError::Stale {
            name: "demo".into(),
            read: "41".into(),
        }
    }

    #[test]
    fn only_disabled_pauses_the_controller() {
        let rc = |ann: serde_json::Value| -> RedisCluster {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "redis.io/v1", "kind": "RedisCluster",
                "metadata": {"name": "demo", "annotations": ann},
                "spec": {"storage": {"size": "1Gi"}},
            }))
            .expect("cluster")
        };
        assert!(paused(&rc(
            serde_json::json!({"redis.io/reconciliationLoop": "disabled"})
        )));
        for ann in [
            serde_json::json!({}),
            serde_json::json!({"redis.io/reconciliationLoop": "enabled"}),
            serde_json::json!({"cnpg.io/reconciliationLoop": "disabled"}),
        ] {
            assert!(!paused(&rc(ann.clone())), "{ann}");
        }
    }

    #[test]
    fn a_stale_view_rereads_soon_and_other_results_pass_through() {
        for handoff in [false, true] {
            assert_eq!(
                reread_if_stale(failed("s", stale(), handoff)).ok(),
                Some(Outcome::RequeueAfter(REREAD))
            );
        }
        let read = WriteError::Read {
            kind: "RedisCluster".into(),
            name: "demo".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        let err = reread_if_stale(failed("s", read, true)).expect_err("a failure");
        assert_eq!(err.category(), "read_failed");
        let ok = Ok(Outcome::RequeueAfter(FAST));
        assert_eq!(reread_if_stale(ok).ok(), Some(Outcome::RequeueAfter(FAST)));
    }
}
