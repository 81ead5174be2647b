//! AddServices (reference §4 step 10): the headless service named like the cluster when DNS
//! names or `routing.headlessService` need it. Per-group services (public IPs from
//! services) are not built (docs/fdb.md).

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Service;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::PostParams;

use super::{FIELD_MANAGER, Pass, resources, step_error};

step_error!(AddServicesError, "adding services");

/// The step.
pub struct AddServices;

impl AddServices {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, AddServicesError> {
        if !pass.cluster.needs_headless_service() {
            return Ok(Flow::Continue);
        }
        let api = pass.api::<Service>();
        if api.get_opt(&pass.name()).await?.is_none() {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            match api
                .create(&params, &resources::headless_service(&pass.cluster))
                .await
            {
                Ok(_) => tracing::info!(cluster = %pass.name(), "headless service created"),
                Err(e) if kit::errors::already_exists(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for AddServices {
    fn name(&self) -> &'static str {
        "add_services"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}
