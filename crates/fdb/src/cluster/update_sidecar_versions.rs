//! UpdateSidecarVersions (reference §4 step 15, §6): during a protocol-incompatible upgrade,
//! puts the target version's image into every pod's sidecar container, in place (an image
//! change is an allowed pod update; the pod is not recreated). The sidecar then copies the new
//! fdbserver into the shared volume (`bin/<version>/`), where the monitor configuration of the
//! upgrade points.
//!
//! Contract: nothing outside an incompatible upgrade; pods without a sidecar container, pods
//! being deleted and pods of groups whose resources are terminating are skipped; each pod
//! whose sidecar image differs gets one strategic-merge patch of that container's image. A
//! failed patch is returned as the step's error.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{FIELD_MANAGER, Pass, resources, step_error};
use crate::crd::condition;

step_error!(UpdateSidecarVersionsError, "updating sidecar versions");

/// The step.
pub struct UpdateSidecarVersions;

/// Whether `pod`'s sidecar must be moved to `image`.
pub fn needs_update(pod: &Pod, image: &str) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && resources::container_image(pod, resources::SIDECAR_CONTAINER)
            .is_some_and(|current| current != image)
}

impl UpdateSidecarVersions {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, UpdateSidecarVersionsError> {
        if !pass.cluster.is_being_upgraded_with_incompatible_version() {
            return Ok(Flow::Continue);
        }
        let image = resources::sidecar_image(&pass.cluster);
        let pods = pass.pods().await?;
        let api = pass.api::<Pod>();
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let groups = pass.status().process_groups.clone();
        for g in groups
            .iter()
            .filter(|g| !g.has_condition(condition::RESOURCES_TERMINATING))
        {
            let Some(pod) = pods.get(g.process_group_id.as_str()) else {
                continue;
            };
            if !needs_update(pod, &image) {
                continue;
            }
            let name = g.pod_name(&pass.name());
            let patch = json!({"spec": {"containers": [
                {"name": resources::SIDECAR_CONTAINER, "image": image}
            ]}});
            api.patch(&name, &params, &Patch::Strategic(&patch)).await?;
            tracing::info!(cluster = %pass.name(), pod = %name, %image, "sidecar image updated for the upgrade");
        }
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for UpdateSidecarVersions {
    fn name(&self) -> &'static str {
        "update_sidecar_versions"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{
        FoundationDBCluster, FoundationDBClusterSpec, ProcessClass, ProcessGroupId,
        ProcessGroupStatus,
    };

    #[test]
    fn only_pods_with_another_sidecar_image_are_updated() {
        let c = FoundationDBCluster::new(
            "c",
            FoundationDBClusterSpec {
                version: "7.1.57".into(),
                ..Default::default()
            },
        );
        let g = ProcessGroupStatus::new(
            ProcessGroupId::new("storage-1"),
            ProcessClass::new("storage"),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let pod = resources::pod(&c, &g, "h");
        let old = "foundationdb/fdb-kubernetes-monitor:7.1.57";
        let new = "foundationdb/fdb-kubernetes-monitor:7.3.63";
        assert!(!needs_update(&pod, old));
        assert!(needs_update(&pod, new));
        let mut bare = pod.clone();
        bare.spec
            .as_mut()
            .unwrap()
            .containers
            .retain(|c| c.name != resources::SIDECAR_CONTAINER);
        assert!(!needs_update(&bare, new), "no sidecar, nothing to update");
    }
}
