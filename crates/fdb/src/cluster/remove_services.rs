//! RemoveServices (reference §4 step 26): deletes the headless service once the cluster no
//! longer needs it (no DNS names, no `routing.headlessService`), so `needsServiceUpdate`
//! converges. Per-group services leave with their process group (RemoveProcessGroups).

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Service;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::DeleteParams;

use super::{Pass, step_error};

step_error!(RemoveServicesError, "removing services");

/// The step.
pub struct RemoveServices;

impl RemoveServices {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, RemoveServicesError> {
        if pass.cluster.needs_headless_service() {
            return Ok(Flow::Continue);
        }
        let api = pass.api::<Service>();
        let name = pass.name();
        let Some(svc) = api.get_opt(&name).await? else {
            return Ok(Flow::Continue);
        };
        // Only our own headless service (owned by this cluster), never a user's of the same name.
        let ours = svc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| Some(&r.uid) == pass.cluster.metadata.uid.as_ref());
        if ours && svc.metadata.deletion_timestamp.is_none() {
            tracing::info!(cluster = %name, "deleting the headless service");
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for RemoveServices {
    fn name(&self) -> &'static str {
        "remove_services"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}
