//! AddPVCs (reference §4 step 11): creates the missing PVC of every stateful process group
//! unless the group is removed and excluded. A failed create is a delayed requeue.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::PostParams;

use super::{FIELD_MANAGER, Pass, resources, step_error};
use crate::crd::ProcessGroupStatus;

step_error!(AddPvcsError, "adding PVCs");

/// The step.
pub struct AddPvcs;

/// Whether `group` should have its resources (pod, PVC): not removed-and-excluded.
pub fn keeps_resources(group: &ProcessGroupStatus) -> bool {
    !(group.is_marked_for_removal() && group.is_excluded())
}

impl AddPvcs {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, AddPvcsError> {
        let existing = pass.pvcs().await?;
        let api = pass.api::<PersistentVolumeClaim>();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let mut flow = Flow::Continue;
        let groups = pass.status().process_groups.clone();
        for group in groups.iter().filter(|g| keeps_resources(g)) {
            if existing.contains_key(group.process_group_id.as_str()) {
                continue;
            }
            let Some(pvc) = resources::pvc(&pass.cluster, group) else {
                continue;
            };
            match api.create(&params, &pvc).await {
                Ok(_) => {}
                Err(e) if kit::errors::already_exists(&e) => {}
                Err(e) => {
                    tracing::warn!(cluster = %pass.name(), group = %group.process_group_id, error = %e, "creating a PVC failed");
                    flow = Flow::delay(Duration::from_secs(2));
                }
            }
        }
        Ok(flow)
    }
}

impl Step<Pass> for AddPvcs {
    fn name(&self) -> &'static str {
        "add_pvcs"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{ProcessClass, ProcessGroupId};
    use jiff::Timestamp;

    #[test]
    fn removed_and_excluded_groups_lose_their_resources() {
        let mut g = ProcessGroupStatus::new(
            ProcessGroupId::new("storage-1"),
            ProcessClass::new("storage"),
            Timestamp::UNIX_EPOCH,
        );
        assert!(keeps_resources(&g));
        g.mark_for_removal(Timestamp::UNIX_EPOCH);
        assert!(
            keeps_resources(&g),
            "removed but still draining: keep the pod"
        );
        g.set_exclude(Timestamp::UNIX_EPOCH);
        assert!(!keeps_resources(&g));
    }
}
