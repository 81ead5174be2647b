//! AddPods (reference §4 step 12): creates the missing pod of every process group unless the
//! group is removed and excluded (a removed group whose exclusion is not done gets its pod
//! back so a draining storage server can finish). The config map must exist first: its
//! hash goes into the pod's annotation. A failed create is a delayed requeue.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::PostParams;

use super::add_pvcs::keeps_resources;
use super::{FIELD_MANAGER, Pass, resources, step_error};

step_error!(AddPodsError, "adding pods");

/// The step.
pub struct AddPods;

impl AddPods {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, AddPodsError> {
        let Some(cm) = pass.config_map().await? else {
            return Ok(Flow::stop(Duration::from_secs(1)));
        };
        let existing = pass.pods().await?;
        let api = pass.api::<Pod>();
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
            let hash = resources::config_map_hash(&cm, &group.process_class);
            let pod = resources::pod(&pass.cluster, group, &hash);
            match api.create(&params, &pod).await {
                Ok(_) => {
                    tracing::info!(cluster = %pass.name(), group = %group.process_group_id, "pod created")
                }
                Err(e) if kit::errors::already_exists(&e) => {}
                Err(e) => {
                    tracing::warn!(cluster = %pass.name(), group = %group.process_group_id, error = %e, "creating a pod failed");
                    flow = Flow::delay(Duration::from_secs(2));
                }
            }
        }
        Ok(flow)
    }
}

impl Step<Pass> for AddPods {
    fn name(&self) -> &'static str {
        "add_pods"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}
