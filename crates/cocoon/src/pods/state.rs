//! Reading a pod's state as vk-cocoon reports it (pure; no client).

use k8s_openapi::api::core::v1::Pod;

use crate::names::{self, lifecycle};

/// An annotation of `pod`, if present and not empty.
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// A label of `pod`, if present and not empty.
pub fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The VM name the operator assigned (`vm.cocoonstack.io/name`).
pub fn vm_name(pod: &Pod) -> Option<&str> {
    annotation(pod, names::ANN_VM_NAME)
}

/// The VM id vk-cocoon reported.
pub fn vm_id(pod: &Pod) -> Option<&str> {
    annotation(pod, names::ANN_VM_ID)
}

/// The VM IP vk-cocoon reported.
pub fn vm_ip(pod: &Pod) -> Option<&str> {
    annotation(pod, names::ANN_VM_IP)
}

/// The lifecycle state vk-cocoon reported (lower case).
pub fn lifecycle_state(pod: &Pod) -> Option<&str> {
    annotation(pod, names::ANN_LIFECYCLE_STATE)
}

/// The generation stamp vk-cocoon saw with its lifecycle state (0 when absent or garbage).
pub fn lifecycle_generation(pod: &Pod) -> i64 {
    annotation(pod, names::ANN_LIFECYCLE_GENERATION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The lifecycle message vk-cocoon wrote.
pub fn lifecycle_message(pod: &Pod) -> Option<&str> {
    annotation(pod, names::ANN_LIFECYCLE_MESSAGE)
}

/// The set generation stamped on the pod (0 when absent or garbage).
pub fn generation_stamp(pod: &Pod) -> i64 {
    annotation(pod, names::ANN_GENERATION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Whether the hibernate annotation asks for hibernation (`"true"`).
pub fn hibernate_requested(pod: &Pod) -> bool {
    annotation(pod, names::ANN_HIBERNATE) == Some("true")
}

/// Whether `key` is `"true"` on the pod.
pub fn flag(pod: &Pod, key: &str) -> bool {
    annotation(pod, key) == Some("true")
}

/// Whether the operator manages this VM (agents and non-static toolboxes).
pub fn is_managed(pod: &Pod) -> bool {
    flag(pod, names::ANN_MANAGED)
}

/// The pod phase (`Pending`, `Running`, …), empty when unknown.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether the pod's `Ready` condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// The pod condition of `type_`.
pub fn condition<'a>(
    pod: &'a Pod,
    type_: &str,
) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether the VM is beyond recovery as is: pod phase `Failed` or lifecycle `failed`.
pub fn is_terminal(pod: &Pod) -> bool {
    phase(pod) == "Failed" || lifecycle_state(pod) == Some(lifecycle::FAILED)
}

/// Whether some container of the pod is running.
pub fn container_running(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

/// Whether the VM is live: vk-cocoon reported a VM id and a container runs.
pub fn vm_live(pod: &Pod) -> bool {
    vm_id(pod).is_some() && container_running(pod)
}

/// Whether the VM is verifiably hibernated for set generation `generation`: lifecycle
/// `hibernated` written for that generation or a later one. (The registry tag is checked
/// separately: a tag alone proves nothing, it may be left from an earlier round.)
pub fn hibernated_for(pod: &Pod, generation: i64) -> bool {
    lifecycle_state(pod) == Some(lifecycle::HIBERNATED) && lifecycle_generation(pod) >= generation
}

/// Whether the pod's VM still needs its `:hibernate` snapshot: flagged for hibernation (the
/// snapshot may be on its way), hibernated, or restoring from it and not live yet (a failed
/// restore needs it no more). Only a live, unflagged VM can do without it.
pub fn needs_snapshot(pod: &Pod) -> bool {
    hibernate_requested(pod)
        || lifecycle_state(pod) == Some(lifecycle::HIBERNATED)
        || (flag(pod, names::ANN_RESTORE) && !vm_live(pod) && !is_terminal(pod))
}

/// The node the pod is bound to.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// The scheduler's message when the pod is unschedulable (`PodScheduled` False, reason
/// `Unschedulable`).
pub fn unschedulable(pod: &Pod) -> Option<String> {
    let c = condition(pod, "PodScheduled")?;
    (c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
        .then(|| c.message.clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).expect("pod yaml")
    }

    #[test]
    fn hibernated_needs_the_current_generation() {
        let p = pod(r#"
metadata:
  annotations:
    vm.cocoonstack.io/lifecycle-state: hibernated
    vm.cocoonstack.io/lifecycle-observed-generation: "3"
"#);
        assert!(hibernated_for(&p, 3));
        assert!(hibernated_for(&p, 2));
        assert!(!hibernated_for(&p, 4));
        let stale = pod("metadata: {annotations: {vm.cocoonstack.io/lifecycle-state: ready}}");
        assert!(!hibernated_for(&stale, 0));
    }

    #[test]
    fn only_a_live_unflagged_vm_does_without_its_snapshot() {
        let live = r#"{annotations: {vm.cocoonstack.io/id: "vm-1"ANN}}
status: {phase: Running, containerStatuses: [{name: agent, image: x, imageID: "", ready: true, restartCount: 0, state: {running: {}}}]}"#;
        let with = |ann: &str| pod(&format!("metadata: {}", live.replace("ANN", ann)));
        assert!(!needs_snapshot(&with("")));
        let restored = with(", vm.cocoonstack.io/restore-from-hibernate: 'true'");
        assert!(!needs_snapshot(&restored), "restored and live");
        assert!(needs_snapshot(&with(
            ", vm.cocoonstack.io/hibernate: 'true'"
        )));
        let hibernated =
            pod("metadata: {annotations: {vm.cocoonstack.io/lifecycle-state: hibernated}}");
        assert!(needs_snapshot(&hibernated));
        let restoring =
            pod("metadata: {annotations: {vm.cocoonstack.io/restore-from-hibernate: 'true'}}");
        assert!(needs_snapshot(&restoring), "restoring, not live yet");
        let failed = pod(r#"
metadata: {annotations: {vm.cocoonstack.io/restore-from-hibernate: 'true'}}
status: {phase: Failed}
"#);
        assert!(!needs_snapshot(&failed));
        let booting = pod("metadata: {annotations: {}}");
        assert!(!needs_snapshot(&booting), "a fresh boot never used it");
    }

    #[test]
    fn terminal_and_live() {
        let failed = pod("status: {phase: Failed}");
        assert!(is_terminal(&failed));
        let lf = pod("metadata: {annotations: {vm.cocoonstack.io/lifecycle-state: failed}}");
        assert!(is_terminal(&lf));
        let live = pod(r#"
metadata: {annotations: {vm.cocoonstack.io/id: "vm-1"}}
status: {phase: Running, containerStatuses: [{name: agent, image: x, imageID: "", ready: true, restartCount: 0, state: {running: {}}}]}
"#);
        assert!(vm_live(&live));
        assert!(!is_terminal(&live));
        let empty_id = pod(r#"metadata: {annotations: {vm.cocoonstack.io/id: ""}}"#);
        assert!(!vm_live(&empty_id));
    }
}
