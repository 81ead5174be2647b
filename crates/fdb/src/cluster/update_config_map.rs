//! UpdateConfigMap (reference §4 step 3, §8): creates or updates `<cluster>-config` with
//! server-side apply, and only when its data or labels differ from the desired ones, so a
//! converged cluster makes no write.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::{Patch, PatchParams};

use super::{FIELD_MANAGER, Pass, resources, step_error};

step_error!(UpdateConfigMapError, "updating the config map");

/// The step.
pub struct UpdateConfigMap;

/// Whether `live` must be rewritten to become `desired` (its data differs, or a desired label
/// or annotation is missing or different; extra keys are left alone).
pub fn needs_update(live: Option<&ConfigMap>, desired: &ConfigMap) -> bool {
    let Some(live) = live else { return true };
    let subset = |want: &Option<std::collections::BTreeMap<String, String>>,
                  have: &Option<std::collections::BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    live.data != desired.data
        || !subset(&desired.metadata.labels, &live.metadata.labels)
        || !subset(&desired.metadata.annotations, &live.metadata.annotations)
}

impl UpdateConfigMap {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, UpdateConfigMapError> {
        let desired = resources::config_map(&pass.cluster);
        let live = pass.config_map().await?;
        if needs_update(live.as_ref(), &desired) {
            let name = resources::config_map_name(&pass.cluster);
            let mut body = serde_json::to_value(&desired).map_err(kube::Error::SerdeError)?;
            body["apiVersion"] = "v1".into();
            body["kind"] = "ConfigMap".into();
            pass.api::<ConfigMap>()
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await?;
            tracing::info!(cluster = %pass.name(), config_map = %name, "config map updated");
        }
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for UpdateConfigMap {
    fn name(&self) -> &'static str {
        "update_config_map"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn cm(data: &[(&str, &str)], labels: &[(&str, &str)]) -> ConfigMap {
        let mut c = ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        };
        c.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        c
    }

    #[test]
    fn update_table() {
        let desired = cm(&[("a", "1")], &[("l", "x")]);
        let cases = [
            ("missing", None, true),
            ("equal", Some(cm(&[("a", "1")], &[("l", "x")])), false),
            (
                "extra label kept",
                Some(cm(&[("a", "1")], &[("l", "x"), ("o", "y")])),
                false,
            ),
            ("data differs", Some(cm(&[("a", "2")], &[("l", "x")])), true),
            ("label missing", Some(cm(&[("a", "1")], &[])), true),
        ];
        for (name, live, want) in cases {
            assert_eq!(needs_update(live.as_ref(), &desired), want, "{name}");
        }
    }
}
