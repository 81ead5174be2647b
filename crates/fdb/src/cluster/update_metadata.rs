//! UpdateMetadata (reference §4 step 17, upstream's UpdateLabels): merges the desired labels
//! and annotations into existing pods and PVCs, so a label or annotation added to a class's
//! pod template or claim template (or the cluster's own labels) reaches objects created
//! before it.
//!
//! Contract:
//! - [`missing_metadata`] is the pure decision: the desired keys whose value is absent or
//!   different on the object. Keys the object has and the spec does not are never removed
//!   (as upstream). The hash annotations (`last-applied-spec`, `last-applied-config-map`) are
//!   not metadata: other steps own them.
//! - UpdateStatus sets `IncorrectPodMetadata` on a group whose pod misses desired metadata.
//! - Each object with something missing gets one merge patch of exactly those keys; a failed
//!   patch is a delayed requeue (5 s). Groups whose resources are terminating are skipped.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{FIELD_MANAGER, Pass, resources, step_error};
use crate::crd::condition;

step_error!(UpdateMetadataError, "updating metadata");

/// The step.
pub struct UpdateMetadata;

/// Labels and annotations to add or correct.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MissingMetadata {
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

fn missing(
    have: &Option<BTreeMap<String, String>>,
    want: &Option<BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let have = have.clone().unwrap_or_default();
    want.iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != resources::LAST_SPEC_KEY)
        .filter(|(k, _)| k.as_str() != resources::LAST_CONFIG_MAP_KEY)
        .filter(|(k, v)| have.get(*k) != Some(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What `current` lacks of `desired`'s labels and annotations, if anything.
pub fn missing_metadata(current: &ObjectMeta, desired: &ObjectMeta) -> Option<MissingMetadata> {
    let m = MissingMetadata {
        labels: missing(&current.labels, &desired.labels),
        annotations: missing(&current.annotations, &desired.annotations),
    };
    (!m.labels.is_empty() || !m.annotations.is_empty()).then_some(m)
}

impl UpdateMetadata {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, UpdateMetadataError> {
        let pods = pass.pods().await?;
        let pvcs = pass.pvcs().await?;
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let (pod_api, pvc_api) = (pass.api::<Pod>(), pass.api::<PersistentVolumeClaim>());
        let mut flow = Flow::Continue;
        let groups = pass.status().process_groups.clone();
        for g in groups
            .iter()
            .filter(|g| !g.has_condition(condition::RESOURCES_TERMINATING))
        {
            let id = g.process_group_id.as_str();
            let pod_fix = pods.get(id).and_then(|pod| {
                let want = resources::pod(&pass.cluster, g, "");
                Some((
                    pod.metadata.name.clone()?,
                    missing_metadata(&pod.metadata, &want.metadata)?,
                ))
            });
            let pvc_fix =
                pvcs.get(id)
                    .zip(resources::pvc(&pass.cluster, g))
                    .and_then(|(pvc, want)| {
                        Some((
                            pvc.metadata.name.clone()?,
                            missing_metadata(&pvc.metadata, &want.metadata)?,
                        ))
                    });
            for (is_pod, fix) in [(true, pod_fix), (false, pvc_fix)] {
                let Some((name, m)) = fix else { continue };
                let patch = json!({"metadata": {"labels": m.labels, "annotations": m.annotations}});
                let result = if is_pod {
                    pod_api
                        .patch(&name, &params, &Patch::Merge(&patch))
                        .await
                        .map(drop)
                } else {
                    pvc_api
                        .patch(&name, &params, &Patch::Merge(&patch))
                        .await
                        .map(drop)
                };
                match result {
                    Ok(()) => {
                        tracing::info!(cluster = %pass.name(), object = %name, ?m, "metadata updated")
                    }
                    Err(e) => {
                        tracing::warn!(cluster = %pass.name(), object = %name, error = %e, "updating metadata failed");
                        flow = Flow::delay(Duration::from_secs(5));
                    }
                }
            }
        }
        Ok(flow)
    }
}

impl Step<Pass> for UpdateMetadata {
    fn name(&self) -> &'static str {
        "update_metadata"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        ObjectMeta {
            labels: map(labels),
            annotations: map(annotations),
            ..ObjectMeta::default()
        }
    }

    type Pairs = Vec<(&'static str, &'static str)>;
    type Case = (&'static str, ObjectMeta, ObjectMeta, Option<(Pairs, Pairs)>);

    #[test]
    fn missing_metadata_table() {
        let hash = resources::LAST_SPEC_KEY;
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("all there", meta(&[("a", "1")], &[("n", "x")]), meta(&[("a", "1")], &[("n", "x")]), None),
            ("extra keys are kept, not reported", meta(&[("a", "1"), ("mine", "2")], &[]), meta(&[("a", "1")], &[]), None),
            ("new label", meta(&[("a", "1")], &[]), meta(&[("a", "1"), ("team", "db")], &[]), Some((vec![("team", "db")], vec![]))),
            ("changed annotation", meta(&[], &[("n", "x")]), meta(&[], &[("n", "y")]), Some((vec![], vec![("n", "y")]))),
            ("hash annotations are not metadata", meta(&[], &[(hash, "old")]), meta(&[], &[(hash, "new")]), None),
        ];
        for (name, current, desired, want) in cases {
            let want = want.map(|(l, a)| MissingMetadata {
                labels: l
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                annotations: a
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            });
            assert_eq!(missing_metadata(&current, &desired), want, "{name}");
        }
    }
}
