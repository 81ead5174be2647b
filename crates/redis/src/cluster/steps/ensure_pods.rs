//! Step 10, `ensure_pods`: carries out the pass's pods plan ([`crate::cluster::plan`]).
//!
//! Contract:
//! - Missing pods are created whole from the builder (owned by the cluster, labelled with the
//!   role `status.currentPrimary` gives them), one Event `CreatedPod` each; a pod that already
//!   exists (a cache behind) is left alone.
//! - Role labels are fixed with a merge patch of that one label.
//! - The plan's deletion is carried out once the pass's view of the cluster is confirmed
//!   current ([`Pass::confirm_current`]) (graceful: the instance manager's `SHUTDOWN` waits for
//!   replicas); when it replaces the primary under a supervised strategy the approval
//!   annotation is consumed. A switchover is not done here: the handoff step started it.
//! - A pass that created or deleted requeues soon, to follow the pods.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;

use crate::cluster::apply::WriteError;
use crate::cluster::build::pod;
use crate::cluster::plan::{Action, Why, role_of};
use crate::cluster::{FAST, Pass};
use crate::crd::PrimaryUpdateStrategy;
use crate::names;

/// The step.
pub struct EnsurePods;

/// Why it failed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct PodsError(#[from] WriteError);

impl ReconcileError for PodsError {
    fn category(&self) -> &'static str {
        self.0.category()
    }
}

async fn delete(
    pass: &mut Pass,
    pods: &[String],
    why: Why,
    primary: bool,
) -> Result<(), WriteError> {
    // The plan comes from the pass's view of the cluster (who is primary): not from a stale one.
    pass.confirm_current().await?;
    for p in pods {
        pass.writer().delete::<Pod>(p, None).await?;
        let note = format!("deleted pod {p} ({})", why.as_str());
        pass.writer().event(false, "DeletedPod", note).await;
    }
    let m = &pass.model;
    let supervised = m.spec.primary_update_strategy == PrimaryUpdateStrategy::Supervised;
    if primary && why == Why::Update && supervised && m.approved {
        consume_approval(pass).await?;
    }
    Ok(())
}

/// Removes `redis.io/approve-primary-update` (it approved one primary update).
pub async fn consume_approval(pass: &mut Pass) -> Result<(), WriteError> {
    let rc = pass
        .writer()
        .annotate_cluster(|_| vec![(names::ANN_APPROVE_PRIMARY_UPDATE, None)])
        .await?;
    pass.refresh(rc);
    let note = "the primary update was approved and started; the approval is consumed".to_owned();
    pass.writer().event(false, "ApprovalConsumed", note).await;
    Ok(())
}

impl Step<Pass> for EnsurePods {
    fn name(&self) -> &'static str {
        "ensure_pods"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            let Some(plan) = pass.plan.clone() else {
                return Ok(Flow::Continue);
            };
            let m = &pass.model;
            let current = m.status.current_primary.clone();
            let mut moved = false;
            for o in &plan.create {
                let name = m.pod_name(*o);
                let p = pod::pod(m, &pass.ctx.settings.pod, *o, role_of(&current, &name));
                if pass.writer().create(&p).await.map_err(PodsError)? {
                    pass.writer()
                        .event(false, "CreatedPod", format!("created pod {name}"))
                        .await;
                    moved = true;
                }
            }
            for (name, role) in &plan.relabel {
                pass.writer()
                    .label_pod(name, role)
                    .await
                    .map_err(PodsError)?;
            }
            match &plan.action {
                Action::Delete { pods, why, primary } => {
                    delete(pass, pods, *why, *primary)
                        .await
                        .map_err(PodsError)?;
                    moved = true;
                }
                Action::Switchover { why, .. } if *why == Why::Update => {
                    let m = &pass.model;
                    let supervised =
                        m.spec.primary_update_strategy == PrimaryUpdateStrategy::Supervised;
                    let started = !m.status.target_primary.is_empty()
                        && m.status.target_primary != m.status.current_primary;
                    if supervised && m.approved && started {
                        consume_approval(pass).await.map_err(PodsError)?;
                    }
                }
                _ => {}
            }
            Ok(if moved {
                Flow::delay(FAST)
            } else {
                Flow::Continue
            })
        })
    }
}
