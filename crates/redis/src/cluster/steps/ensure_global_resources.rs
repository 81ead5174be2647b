//! Step 1, `ensure_global_resources`: the instance managers' ServiceAccount, Role and
//! RoleBinding `<cluster>` (read-only on their own cluster), and the PodDisruptionBudgets
//! (CloudNativePG's primary/replicas split, none when disabled, during maintenance or while
//! hibernated).
//!
//! Contract: each object is applied only when it differs; a RoleBinding whose immutable
//! `roleRef` was changed is deleted and recreated; the cluster's PDBs that are no longer wanted
//! (including upstream's single `<cluster>-pdb`) are deleted. Never stops the pass.

use futures::future::BoxFuture;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;
use kube::ResourceExt;

use crate::cluster::Pass;
use crate::cluster::apply::WriteError;
use crate::cluster::build::{pdb, rbac};

/// The step.
pub struct EnsureGlobalResources;

/// Why it failed.
#[derive(Debug, thiserror::Error)]
pub enum GlobalError {
    /// Writing the instance managers' identity.
    #[error("writing the instance managers' RBAC: {0}")]
    Rbac(#[source] WriteError),
    /// Writing a PodDisruptionBudget.
    #[error("writing the PodDisruptionBudgets: {0}")]
    Pdb(#[source] WriteError),
}

impl ReconcileError for GlobalError {
    fn category(&self) -> &'static str {
        match self {
            GlobalError::Rbac(_) => "rbac_write_failed",
            GlobalError::Pdb(_) => "pdb_write_failed",
        }
    }
}

async fn rbac(pass: &Pass) -> Result<(), WriteError> {
    let w = pass.writer();
    let m = &pass.model;
    let seen = &pass.seen;
    w.apply(&rbac::service_account(m), seen.account.as_deref())
        .await?;
    w.apply(&rbac::role(m), seen.role.as_deref()).await?;
    let binding = rbac::role_binding(m);
    let live = seen.binding.as_deref();
    if live.is_some_and(|l| l.role_ref != binding.role_ref) {
        w.delete::<RoleBinding>(&binding.name_any(), None).await?;
        w.apply(&binding, None).await?;
    } else {
        w.apply(&binding, live).await?;
    }
    Ok(())
}

async fn pdbs(pass: &Pass) -> Result<(), WriteError> {
    let w = pass.writer();
    let desired = pdb::desired(&pass.model);
    for p in &desired {
        let live = pass.seen.pdbs.get(&p.name_any());
        w.apply(p, live.map(|l| &**l)).await?;
    }
    let legacy = crate::names::pdb_name(&pass.model.name);
    for (name, live) in &pass.seen.pdbs {
        let ours = live
            .owner_references()
            .iter()
            .any(|o| o.uid == pass.model.uid);
        let wanted = desired.iter().any(|d| &d.name_any() == name);
        if !wanted && (ours || *name == legacy) {
            w.delete::<PodDisruptionBudget>(name, None).await?;
        }
    }
    Ok(())
}

impl Step<Pass> for EnsureGlobalResources {
    fn name(&self) -> &'static str {
        "ensure_global_resources"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            rbac(pass).await.map_err(GlobalError::Rbac)?;
            pdbs(pass).await.map_err(GlobalError::Pdb)?;
            Ok(Flow::Continue)
        })
    }
}
