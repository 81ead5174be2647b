//! Step 7, `finish_replica_promotion`: replica mode's `promote`. The designated leader
//! (`status.currentPrimary`) promotes itself once `spec.replicaMode.promote` is set (its
//! instance manager does); when it answers as a primary, the operator turns replica mode off
//! in the spec (`enabled: false`, `promote: false`, as upstream) and the cluster carries on as
//! a standalone cluster whose replicas follow the leader. Event `ReplicaClusterPromoted`.
//!
//! Contract: one spec patch, once; never stops the pass.

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;

use crate::cluster::Pass;
use crate::cluster::apply::WriteError;

/// The step.
pub struct FinishReplicaPromotion;

/// Why it failed.
#[derive(Debug, thiserror::Error)]
#[error("finishing the replica-mode promotion: {0}")]
pub struct PromotionError(#[from] WriteError);

impl ReconcileError for PromotionError {
    fn category(&self) -> &'static str {
        self.0.category()
    }
}

impl Step<Pass> for FinishReplicaPromotion {
    fn name(&self) -> &'static str {
        "finish_replica_promotion"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            let m = &pass.model;
            if !(m.replica_mode && m.promote) {
                return Ok(Flow::Continue);
            }
            let leader = m.status.current_primary.clone();
            if !pass.members.get(&leader).is_some_and(|x| x.is_master()) {
                pass.handoff = Some(format!(
                    "waiting for the designated leader {leader} to promote itself"
                ));
                return Ok(Flow::delay(crate::cluster::FAST));
            }
            let spec = serde_json::json!({"replicaMode": {"enabled": false, "promote": false}});
            let rc = pass
                .writer()
                .patch_spec(spec)
                .await
                .map_err(PromotionError)?;
            pass.refresh(rc);
            let note = format!(
                "{leader} was promoted; replica mode is off and the other instances follow it"
            );
            pass.writer()
                .event(false, "ReplicaClusterPromoted", note)
                .await;
            Ok(Flow::Continue)
        })
    }
}
