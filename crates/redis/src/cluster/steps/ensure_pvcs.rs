//! Step 9, `ensure_pvcs`: one PVC `<cluster>-data-<ordinal>` per wanted instance.
//!
//! Contract:
//! - Missing PVCs of ordinals below `instances` are created (not while hibernated: the kept
//!   ones wait); PVCs are never owned by the cluster and never deleted on scale-down (upstream's
//!   policy; they are listed in `status.danglingPVC` and reused on scale-up, where the
//!   instance resynchronises from the primary).
//! - A PVC whose request is below `spec.storage.size` is grown when its StorageClass allows
//!   volume expansion (Event `PVCResizeStarted`), or left with a Warning `PVCResizeFailed`
//!   naming the class; instances whose PVC then waits for a file-system resize are restarted
//!   by the rolling update.
//! - During node maintenance with `reusePVC: false`, the PVCs of instances whose pod is
//!   missing (never the primary's, once the pass's view of who it is is confirmed current)
//!   are deleted, so they come back on fresh storage.
//! - Nothing for emptyDir storage. Never stops the pass.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;
use kube::api::Api;

use crate::cluster::Pass;
use crate::cluster::apply::WriteError;
use crate::cluster::build::pvc;
use crate::names;
use crate::quantity;

/// The step.
pub struct EnsurePvcs;

/// Why it failed.
#[derive(Debug, thiserror::Error)]
pub enum PvcError {
    /// Writing a PVC.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Reading a StorageClass.
    #[error("reading StorageClass {name}: {source}")]
    ReadClass {
        /// The class.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError for PvcError {
    fn category(&self) -> &'static str {
        match self {
            PvcError::Write(e) => e.category(),
            PvcError::ReadClass { .. } => "read_failed",
        }
    }
}

fn request(p: &PersistentVolumeClaim) -> Option<i128> {
    p.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .and_then(|q| quantity::parse(&q.0))
}

/// Whether PVCs of `class` may grow (a class that does not exist may not).
async fn expandable(pass: &Pass, class: &str) -> Result<bool, PvcError> {
    let api: Api<StorageClass> = Api::all(pass.ctx.client.clone());
    let sc = api
        .get_opt(class)
        .await
        .map_err(|source| PvcError::ReadClass {
            name: class.to_owned(),
            source,
        })?;
    Ok(sc.and_then(|s| s.allow_volume_expansion).unwrap_or(false))
}

async fn resize(pass: &Pass, name: &str, live: &PersistentVolumeClaim) -> Result<(), PvcError> {
    let size = &pass.model.spec.storage.size.0;
    let class = live
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    let w = pass.writer();
    if class.is_empty() || !expandable(pass, &class).await? {
        let note = format!(
            "PVC {name} cannot grow to {size}: StorageClass {class:?} does not allow volume expansion"
        );
        w.event(true, "PVCResizeFailed", note).await;
        return Ok(());
    }
    w.resize_pvc(name, size).await?;
    w.event(
        false,
        "PVCResizeStarted",
        format!("PVC {name} grows to {size}"),
    )
    .await;
    Ok(())
}

impl Step<Pass> for EnsurePvcs {
    fn name(&self) -> &'static str {
        "ensure_pvcs"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            // Owned: a recycle confirms the pass's view first, which needs the pass.
            let m = &pass.model.clone();
            if !m.uses_pvcs() {
                return Ok(Flow::Continue);
            }
            let want = quantity::parse(&m.spec.storage.size.0);
            let recycle = m.maintenance && !m.reuse_pvc;
            for o in 0..m.instances {
                let name = names::pvc_name(&m.name, o);
                let pod_missing = pass
                    .members
                    .get(&m.pod_name(o))
                    .is_none_or(|x| x.pod.is_none());
                match pass.seen.pvcs.get(&name) {
                    None if !m.hibernation => {
                        pass.writer().create(&pvc::pvc(m, o)).await?;
                    }
                    None => {}
                    Some(_)
                        if recycle && pod_missing && m.pod_name(o) != m.status.current_primary =>
                    {
                        // Never the primary's: not from a stale view of who it is.
                        pass.confirm_current().await?;
                        pass.writer()
                            .delete::<PersistentVolumeClaim>(&name, None)
                            .await?;
                        let note = format!(
                            "deleted PVC {name} during maintenance (reusePVC: false): the instance comes back on fresh storage"
                        );
                        pass.writer().event(false, "PVCRecycled", note).await;
                    }
                    Some(live) if request(live) < want => resize(pass, &name, live).await?,
                    Some(_) => {}
                }
            }
            Ok(Flow::Continue)
        })
    }
}
