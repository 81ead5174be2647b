//! Picking the right pods for `logs` and copying their logs to the output.
//!
//! Contract: instance logs come only from instance Pods (`component=instance` and the instance
//! label — never a task pod, which carries the same instance label), preferring the pod in
//! `status.podName`; task logs come from the newest Job of the task, every init container
//! first and then every container of each of its pods.

use std::io::Write;

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::LogParams;
use kube::core::Resource;

use super::error::PluginError;
use crate::names;

/// Label selector of an instance's own Pods.
pub fn instance_pod_selector(instance: &str) -> String {
    format!(
        "{}={},{}={}",
        names::COMPONENT_LABEL,
        names::COMPONENT_INSTANCE,
        names::INSTANCE_LABEL,
        names::instance_label(instance)
    )
}

/// The instance pod to read: the one in `status.podName`, else the newest not being deleted.
pub fn pick_instance_pod<'a>(pods: &'a [Pod], status_pod: Option<&str>) -> Option<&'a Pod> {
    if let Some(wanted) = status_pod
        && let Some(p) = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(wanted))
    {
        return Some(p);
    }
    let live = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none());
    live.max_by(|a, b| created(*a).cmp(&created(*b)))
}

/// The newest Job by creation time (name breaks ties, so the choice is stable).
pub fn newest_job(jobs: &[Job]) -> Option<&Job> {
    jobs.iter().max_by(|a, b| {
        created(*a)
            .cmp(&created(*b))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    })
}

fn created<K: Resource>(k: &K) -> Option<jiff::Timestamp> {
    k.meta().creation_timestamp.as_ref().map(|t| t.0)
}

/// Every container of a pod in the order `task logs` prints them: init containers first.
pub fn containers_in_order(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone());
    init.chain(spec.containers.iter().map(|c| c.name.clone()))
        .collect()
}

/// Copies one container's log to `out`, line by line (following it when `params.follow`).
pub async fn copy_logs(
    api: &Api<Pod>,
    pod: &str,
    params: &LogParams,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    let action = || {
        format!(
            "read logs of pod {pod:?}{}",
            params
                .container
                .as_ref()
                .map(|c| format!(" container {c:?}"))
                .unwrap_or_default()
        )
    };
    let stream = api
        .log_stream(pod, params)
        .await
        .map_err(|e| PluginError::Api {
            action: action(),
            source: e,
        })?;
    let mut lines = stream.lines();
    while let Some(line) = lines
        .try_next()
        .await
        .map_err(|e| PluginError::io(action(), e))?
    {
        writeln!(out, "{line}").map_err(|e| PluginError::io("write output", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, created: &str, deleting: bool) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"initContainers": [{"name": "kmsg-tools"}], "containers": [{"name": "redroid"}, {"name": "b"}]}
        }))
        .unwrap();
        if deleting {
            p.metadata.deletion_timestamp = p.metadata.creation_timestamp.clone();
        }
        p
    }

    #[test]
    fn the_status_pod_wins_then_the_newest_live_one() {
        let pods = [
            pod("old", "2026-01-01T00:00:00Z", false),
            pod("new", "2026-01-02T00:00:00Z", true),
        ];
        assert_eq!(
            pick_instance_pod(&pods, Some("new"))
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("new")
        );
        assert_eq!(
            pick_instance_pod(&pods, Some("gone"))
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("old")
        );
        assert_eq!(
            pick_instance_pod(&pods, None)
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("old")
        );
        assert!(pick_instance_pod(&[], Some("x")).is_none());
    }

    #[test]
    fn instance_logs_select_only_instance_pods() {
        assert_eq!(
            instance_pod_selector("android-0"),
            "redroid.isning.moe/component=instance,redroid.isning.moe/instance=android-0"
        );
    }

    #[test]
    fn newest_job_and_container_order() {
        let jobs: Vec<Job> = [
            "2026-01-01T00:00:00Z",
            "2026-03-01T00:00:00Z",
            "2026-02-01T00:00:00Z",
        ]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": format!("j{i}"), "creationTimestamp": t}}),
            )
            .unwrap()
        })
        .collect();
        assert_eq!(
            newest_job(&jobs).unwrap().metadata.name.as_deref(),
            Some("j1")
        );
        assert_eq!(
            containers_in_order(&pod("p", "2026-01-01T00:00:00Z", false)),
            ["kmsg-tools", "redroid", "b"]
        );
    }
}
