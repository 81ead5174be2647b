//! UpdatePodConfig (reference §4 step 16, §9), unified image: tells each pod about config-map
//! changes and records which pods have taken them.
//!
//! Contract:
//! - A pod whose `foundationdb.org/last-applied-config-map` is the desired hash of its
//!   class's config-map entries is current and left alone. Pods of groups whose resources are
//!   terminating, pods being deleted and pods without an IP are skipped.
//! - Otherwise the pod's monitor is asked whether it has loaded the desired configuration
//!   (its `launcher-current-configuration` annotation deep-equals the config map's entry;
//!   the cluster file needs nothing, the unified monitor does not watch it). Loaded ⇒ the
//!   pod's hash annotation is updated, `outdated-config-map-seen` removed and the group's
//!   `IncorrectConfigMap` cleared. Not loaded ⇒ `outdated-config-map-seen=<now>` is set
//!   (once; it makes the kubelet resync the mounted map) and the group gets
//!   `IncorrectConfigMap`.
//! - During a protocol-incompatible upgrade a pod is only current once its sidecar runs the
//!   target version's image too (the new fdbserver is staged in the shared volume; the
//!   unified image offers no other way to check it).
//! - Any pod not yet loaded ⇒ requeue after 15 s: a stop when a group newly became
//!   `IncorrectConfigMap` in this pass (so the bounce that follows takes every pod together),
//!   a delayed requeue otherwise. The status is written when a condition changed.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::{FIELD_MANAGER, Pass, monitor, resources, step_error};
use crate::crd::condition;

step_error!(UpdatePodConfigError, "updating pod configuration");

/// The step.
pub struct UpdatePodConfig;

/// What to do with one pod.
#[derive(Clone, Debug, PartialEq)]
pub enum PodConfigAction {
    /// Already current.
    Current,
    /// The monitor has loaded the configuration: record the hash.
    Record,
    /// Not loaded yet: poke the monitor (`true` when the annotation is not there yet).
    Poke(bool),
}

/// The pure decision for a pod whose class's desired hash is `hash` and desired monitor
/// configuration `conf` (JSON text). During an incompatible upgrade, `staged_image` is the
/// sidecar image that copies the new binaries: the pod is only synced once it runs it.
pub fn decide(pod: &Pod, hash: &str, conf: &str, staged_image: Option<&str>) -> PodConfigAction {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let current = annotations
        .get(resources::LAST_CONFIG_MAP_KEY)
        .map(String::as_str)
        == Some(hash);
    let staged = staged_image.is_none_or(|image| {
        resources::container_image(pod, resources::SIDECAR_CONTAINER).as_deref() == Some(image)
    });
    if current && staged {
        return PodConfigAction::Current;
    }
    if staged && monitor::configuration_current(pod, conf) {
        PodConfigAction::Record
    } else {
        PodConfigAction::Poke(!annotations.contains_key(monitor::OUTDATED_CONFIG_MAP_KEY))
    }
}

fn skipped(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_ref())
            .is_none()
}

impl UpdatePodConfig {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, UpdatePodConfigError> {
        let pods = pass.pods().await?;
        let desired = resources::config_map(&pass.cluster);
        let staged_image = pass
            .cluster
            .is_being_upgraded_with_incompatible_version()
            .then(|| resources::sidecar_image(&pass.cluster));
        let data = desired.data.clone().unwrap_or_default();
        let api = pass.api::<Pod>();
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let (now, mut waiting, mut newly, mut changed) = (pass.now, 0, false, false);
        let mut groups = pass.status().process_groups.clone();
        for group in &mut groups {
            if group.has_condition(condition::RESOURCES_TERMINATING) {
                continue;
            }
            let Some(pod) = pods.get(group.process_group_id.as_str()) else {
                continue;
            };
            if skipped(pod) {
                continue;
            }
            let hash = resources::config_map_hash(&desired, &group.process_class);
            let conf = data
                .get(&resources::monitor_conf_key(&group.process_class))
                .cloned()
                .unwrap_or_default();
            let annotations: Value = match decide(pod, &hash, &conf, staged_image.as_deref()) {
                PodConfigAction::Current => continue,
                PodConfigAction::Record => {
                    changed |= group.has_condition(condition::INCORRECT_CONFIG_MAP);
                    group.update_condition(condition::INCORRECT_CONFIG_MAP, false, now);
                    json!({resources::LAST_CONFIG_MAP_KEY: hash, monitor::OUTDATED_CONFIG_MAP_KEY: null})
                }
                PodConfigAction::Poke(first) => {
                    waiting += 1;
                    if !group.has_condition(condition::INCORRECT_CONFIG_MAP) {
                        (newly, changed) = (true, true);
                        group.update_condition(condition::INCORRECT_CONFIG_MAP, true, now);
                    }
                    if !first {
                        continue;
                    }
                    json!({monitor::OUTDATED_CONFIG_MAP_KEY: now.as_second().to_string()})
                }
            };
            let name = group.pod_name(&pass.name());
            let patch = json!({"metadata": {"annotations": annotations}});
            api.patch(&name, &params, &Patch::Merge(&patch)).await?;
            tracing::info!(cluster = %pass.name(), pod = %name, ?annotations, "pod configuration annotations updated");
        }
        if changed {
            pass.status().process_groups = groups;
            pass.write_status().await?;
        }
        Ok(match (waiting, newly) {
            (0, _) => Flow::Continue,
            (_, true) => Flow::stop(Duration::from_secs(15)),
            (_, false) => Flow::delay(Duration::from_secs(15)),
        })
    }
}

impl Step<Pass> for UpdatePodConfig {
    fn name(&self) -> &'static str {
        "update_pod_config"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        );
        p
    }

    #[test]
    fn decisions_table() {
        use PodConfigAction::*;
        let cm = resources::LAST_CONFIG_MAP_KEY;
        let loaded = monitor::LAUNCHER_CONFIGURATION_KEY;
        let seen = monitor::OUTDATED_CONFIG_MAP_KEY;
        #[rustfmt::skip]
        let cases: Vec<(&str, Pod, PodConfigAction)> = vec![
            ("hash current", pod(&[(cm, "h2")]), Current),
            ("hash current, whatever the monitor says", pod(&[(cm, "h2"), (loaded, r#"{"v":1}"#)]), Current),
            ("monitor loaded the new configuration", pod(&[(cm, "h1"), (loaded, r#"{"v":2}"#)]), Record),
            ("monitor still on the old one", pod(&[(cm, "h1"), (loaded, r#"{"v":1}"#)]), Poke(true)),
            ("already poked", pod(&[(cm, "h1"), (loaded, r#"{"v":1}"#), (seen, "5")]), Poke(false)),
            ("no monitor annotations at all", pod(&[]), Poke(true)),
        ];
        for (name, p, want) in cases {
            assert_eq!(decide(&p, "h2", r#"{"v":2}"#, None), want, "{name}");
        }
    }

    #[test]
    fn during_an_incompatible_upgrade_the_new_binaries_must_be_staged_too() {
        use PodConfigAction::*;
        let c = crate::crd::FoundationDBCluster::new(
            "c",
            crate::crd::FoundationDBClusterSpec {
                version: "7.1.57".into(),
                ..Default::default()
            },
        );
        let g = crate::crd::ProcessGroupStatus::new(
            crate::crd::ProcessGroupId::new("log-1"),
            crate::crd::ProcessClass::new("log"),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let mut p = resources::pod(&c, &g, "h2");
        p.metadata.annotations.as_mut().unwrap().insert(
            monitor::LAUNCHER_CONFIGURATION_KEY.into(),
            r#"{"v":2}"#.into(),
        );
        let new = "foundationdb/fdb-kubernetes-monitor:7.3.63";
        assert_eq!(
            decide(&p, "h2", r#"{"v":2}"#, Some(new)),
            Poke(true),
            "old sidecar"
        );
        for container in p.spec.as_mut().unwrap().containers.iter_mut() {
            if container.name == resources::SIDECAR_CONTAINER {
                container.image = Some(new.into());
            }
        }
        assert_eq!(decide(&p, "h2", r#"{"v":2}"#, Some(new)), Current);
        assert_eq!(decide(&p, "h1", r#"{"v":2}"#, Some(new)), Record);
    }
}
