//! Shared by the process-backed node tests: pods placed on those nodes, waits on their status,
//! and the image mapping of this build's test binaries.

#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;
use testenv::procnode::{self, ImageEntry};

/// The default deadline.
pub const T: Duration = Duration::from_secs(60);

/// The test image standing for plain Debian userland (`sh`, `python3`, `curl` of the host).
pub const DEBIAN: &str = "debian:bookworm";

/// Creates pod `name` from `spec` (JSON of a PodSpec), placed on a process-backed node.
pub async fn create(
    client: &kube::Client,
    ns: &str,
    name: &str,
    mut spec: serde_json::Value,
) -> Pod {
    let placement = procnode::placement();
    spec["tolerations"] = placement["tolerations"].clone();
    spec["nodeSelector"] = placement["nodeSelector"].clone();
    spec.as_object_mut()
        .expect("spec object")
        .entry("terminationGracePeriodSeconds")
        .or_insert(json!(2));
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod");
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

/// A one-container spec running `script` with `sh -c` in the Debian image.
pub fn sh(script: &str) -> serde_json::Value {
    json!({"containers": [{"name": "main", "image": DEBIAN, "command": ["sh", "-c", script]}]})
}

/// The status of container `name` (app or init).
pub fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let s = pod.status.as_ref()?;
    s.container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
}

/// The pod's condition `type_` is True.
pub fn condition(pod: &Pod, type_: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// The pod's phase.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Waits until the pod is Running and Ready.
pub async fn ready(api: &Api<Pod>, name: &str) -> Pod {
    testenv::wait_for(api, name, T, |p| {
        phase(p) == "Running" && condition(p, "Ready")
    })
    .await
    .expect("pod Running and Ready")
}

/// Waits until the pod reaches `want`.
pub async fn reach(api: &Api<Pod>, name: &str, want: &'static str) -> Pod {
    testenv::wait_for(api, name, T, move |p| phase(p) == want)
        .await
        .expect("phase")
}

/// Waits until the log of the container's current run contains `text`; returns the log.
pub async fn log_contains(api: &Api<Pod>, name: &str, container: &str, text: &str) -> String {
    testenv::eventually(
        &format!("{name}/{container} logging {text:?}"),
        T,
        || async {
            let pod = api.get(name).await.ok()?;
            let log = procnode::logs(&pod, container, false).ok()?;
            log.contains(text).then_some(log)
        },
    )
    .await
    .expect("log line")
}

/// Maps image `ghcr.io/flotilla/kube-whoami:<tag>` to this build's `kube-whoami` (until the
/// guard is dropped).
pub async fn register_whoami(
    client: &kube::Client,
    tag: &str,
) -> (String, procnode::ImageRegistration) {
    let image = format!("ghcr.io/flotilla/kube-whoami:{tag}");
    let entry = ImageEntry {
        image: image.clone(),
        files: [(
            "/kube-whoami".to_string(),
            env!("CARGO_BIN_EXE_kube-whoami").to_string(),
        )]
        .into(),
        entrypoint: vec!["/kube-whoami".into()],
        ..ImageEntry::default()
    };
    let guard = procnode::register_image(client, &format!("kube-whoami.{tag}"), &entry)
        .await
        .expect("register image");
    (image, guard)
}

/// The container's host pid, from its `proc://<pid>` container id.
pub fn pid(pod: &Pod, name: &str) -> i32 {
    container(pod, name)
        .and_then(|c| c.container_id.as_deref())
        .and_then(|id| id.strip_prefix("proc://"))
        .and_then(|p| p.parse().ok())
        .expect("a proc:// container id")
}

/// True while host process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}
