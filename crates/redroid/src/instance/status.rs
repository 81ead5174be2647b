//! The instance status: phase, podName, serviceName, adbAddress, Ready and Scheduled (reasons
//! of reference §3.2 plus IndexConflict / BaseLayerConflict / DataInUse / PodTerminating /
//! PodConflict), observedGeneration.
//!
//! Contract: [`compute`] is pure and deterministic (conditions keep lastTransitionTime unless
//! their status flips); overrides (`suspended`, `woken`) are carried over untouched, since
//! the operator only clears expired ones (elsewhere). [`write`] makes at most one status
//! patch, and none when nothing changed, and returns what it stored. [`transitions`] lists the Events a change deserves;
//! [`log_transition`] logs a phase or Ready-reason change at info.
//!
//! [`defer`]: the first status of an instance's generation that only says its Pod was created
//! and is starting (`Pending`, Ready reason `Pending`, Scheduled `PodCreated`) waits while
//! that Pod is younger than [`GRACE`]; a Pod that comes up within it costs one status write
//! (`Running`) instead of two. A status already describing the current generation, any other
//! phase or reason (a conflict, an unschedulable or failed Pod, a stop) and a Pod older than
//! the grace are written at once; the caller looks again when the grace ends, so the report
//! comes even if the Pod never changes.

use std::time::Duration;

use jiff::Timestamp;
use kit::conditions::{Desired, upsert};
use kube::ResourceExt;
use kube::api::Api;

use super::apply::PodState;
use super::cached_pod::{CachedContainerStatus, CachedPod};
use super::validate::{Block, Want};
use crate::context::Context;
use crate::crd::{InstancePhase, RedroidInstance, RedroidInstanceStatus};
use crate::names;

/// Writing the status failed.
#[derive(Debug, thiserror::Error)]
#[error("patch status of {name}: {source}")]
pub struct StatusError {
    name: String,
    source: kube::Error,
}

impl kit::reconcile::ReconcileError for StatusError {
    fn category(&self) -> &'static str {
        "patch_status"
    }
}

/// Everything the status is computed from.
pub struct Facts<'a> {
    /// The desired phase.
    pub want: &'a Want,
    /// Why the instance may not run, if so.
    pub block: Option<&'a Block>,
    /// What the Pod step left.
    pub pod: &'a PodState,
}

struct View {
    phase: InstancePhase,
    pod: Option<String>,
    adb: bool,
    ready: (bool, &'static str, String),
    scheduled: (bool, &'static str, String),
}

/// The desired status of `inst`.
pub fn compute(inst: &RedroidInstance, facts: &Facts, now: Timestamp) -> RedroidInstanceStatus {
    let addr = names::adb_address(
        &inst.name_any(),
        &inst.namespace().unwrap_or_default(),
        inst.spec.adb_port,
    );
    let v = view(facts, &addr);
    let generation = inst.metadata.generation;
    let mut status = inst.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.phase = Some(v.phase);
    status.service_name = Some(names::service_name(&inst.name_any()));
    status.adb_address = v.adb.then_some(addr);
    status.pod_name = v.pod;
    let (ok, reason, msg) = v.ready;
    upsert(
        &mut status.conditions,
        Desired::new("Ready", ok, reason, msg).observed(generation),
        now,
    );
    let (ok, reason, msg) = v.scheduled;
    upsert(
        &mut status.conditions,
        Desired::new("Scheduled", ok, reason, msg).observed(generation),
        now,
    );
    status
}

fn pending(reason: &'static str, msg: String) -> View {
    View {
        phase: InstancePhase::Pending,
        pod: None,
        adb: false,
        ready: (false, reason, msg.clone()),
        scheduled: (false, reason, msg),
    }
}

fn view(facts: &Facts, addr: &str) -> View {
    match (facts.pod, facts.block) {
        (PodState::Terminating(p), _) => View {
            pod: Some(p.clone()),
            ..pending(
                "PodTerminating",
                format!("Waiting for Pod {p:?} to terminate."),
            )
        },
        (PodState::Foreign(p), _) => pending(
            "PodConflict",
            format!(
                "Pod {p:?} carries this instance's labels but is controlled by another object; waiting for it to go."
            ),
        ),
        (_, Some(b)) => pending(b.reason(), b.message()),
        (PodState::Absent, _) => stopped(facts.want),
        (PodState::Created(p), _) => created(p),
        (PodState::Current(pod), _) => from_pod(pod, addr),
    }
}

fn stopped(want: &Want) -> View {
    let msg = match want {
        Want::StopSpec => "Instance is stopped by spec.suspend.".to_string(),
        Want::StopOverride(actor) => {
            format!("Instance is temporarily suspended by {actor:?} (status.suspended).")
        }
        Want::Run => "Instance is stopped.".to_string(),
    };
    let scheduled = (
        false,
        "Stopped",
        "Instance is stopped; no Pod is scheduled.".to_string(),
    );
    View {
        phase: InstancePhase::Stopped,
        pod: None,
        adb: false,
        ready: (false, "Stopped", msg),
        scheduled,
    }
}

fn created(p: &str) -> View {
    let ready = (
        false,
        "Pending",
        format!("Pod {p:?} is pending scheduling or startup."),
    );
    View {
        phase: InstancePhase::Pending,
        pod: Some(p.into()),
        adb: false,
        ready,
        scheduled: (true, "PodCreated", format!("Pod {p:?} was created.")),
    }
}

fn pod_condition<'a>(
    pod: &'a CachedPod,
    type_: &str,
) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn from_pod(pod: &CachedPod, addr: &str) -> View {
    let p = pod.name_any();
    let status = pod.status.as_ref();
    let scheduled = match pod_condition(pod, "PodScheduled").filter(|c| c.status == "False") {
        Some(c) => (
            false,
            "Unschedulable",
            format!(
                "Pod {p:?} cannot be scheduled: {}",
                c.message.clone().unwrap_or_default()
            ),
        ),
        None => (true, "PodCreated", format!("Pod {p:?} was created.")),
    };
    let base = View {
        phase: InstancePhase::Pending,
        pod: Some(p.clone()),
        adb: false,
        ready: created(&p).ready,
        scheduled,
    };
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Running")
            if status
                .and_then(|s| s.pod_ip.as_deref())
                .is_none_or(str::is_empty) =>
        {
            View {
                phase: InstancePhase::Running,
                ready: (
                    false,
                    "PodRunningNoADB",
                    format!("Pod {p:?} is running but has no IP yet; ADB is not reachable."),
                ),
                ..base
            }
        }
        Some("Running") => View {
            phase: InstancePhase::Running,
            adb: true,
            ready: (
                true,
                "Running",
                format!("Pod {p:?} is running; ADB available at {addr}."),
            ),
            ..base
        },
        Some("Failed") => {
            let scheduled = (
                true,
                "PodCreated",
                format!("Pod {p:?} was created but failed."),
            );
            View {
                phase: InstancePhase::Failed,
                ready: (
                    false,
                    "PodFailed",
                    format!("Pod {p:?} failed: {}", failure(pod)),
                ),
                scheduled,
                ..base
            }
        }
        Some("Succeeded") => View {
            phase: InstancePhase::Stopped,
            adb: false,
            ready: (
                false,
                "Stopped",
                format!("Pod {p:?} exited; delete it or toggle spec.suspend to start again."),
            ),
            ..base
        },
        _ => base,
    }
}

/// What went wrong in a failed Pod: each container that exited non-zero, else the Pod message.
pub fn failure(pod: &CachedPod) -> String {
    let status = pod.status.as_ref();
    let all = status.into_iter().flat_map(|s| {
        s.init_container_statuses
            .iter()
            .flatten()
            .chain(s.container_statuses.iter().flatten())
    });
    let parts: Vec<String> = all.filter_map(exited).collect();
    if !parts.is_empty() {
        return parts.join("; ");
    }
    match status.and_then(|s| s.message.clone()).filter(|m| !m.is_empty()) {
        Some(m) => m,
        None => "no container reported an exit code; inspect the Pod's events and logs (kubectl describe pod).".into(),
    }
}

fn exited(c: &CachedContainerStatus) -> Option<String> {
    let t = c
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .filter(|t| t.exit_code != 0)?;
    let mut s = format!("container {:?} exited with code {}", c.name, t.exit_code);
    if let Some(r) = t.reason.as_deref().filter(|r| !r.is_empty()) {
        s.push_str(&format!(" (reason: {r})"));
    }
    if let Some(m) = t.message.as_deref().filter(|m| !m.is_empty()) {
        s.push_str(&format!(": {m}"));
    }
    Some(s)
}

fn ready_reason(s: Option<&RedroidInstanceStatus>) -> Option<(String, String)> {
    let c = kit::conditions::get(&s?.conditions, "Ready")?;
    Some((c.reason.clone(), c.status.clone()))
}

/// How long an instance's first status for a generation may wait for its starting Pod.
pub const GRACE: Duration = Duration::from_secs(5);

/// How long the write of `new` for `inst` may still wait (see the module docs); `None`: write
/// now. `pod` is what the Pod step left, `now` the pass's clock.
pub fn defer(
    inst: &RedroidInstance,
    new: &RedroidInstanceStatus,
    pod: &PodState,
    now: Timestamp,
) -> Option<Duration> {
    let stored = inst.status.as_ref();
    if stored.is_some_and(|s| s.observed_generation == inst.metadata.generation) {
        return None;
    }
    let starting = new.phase == Some(InstancePhase::Pending)
        && kit::conditions::get(&new.conditions, "Ready").is_some_and(|c| c.reason == "Pending")
        && kit::conditions::get(&new.conditions, "Scheduled")
            .is_some_and(|c| c.status == "True" && c.reason == "PodCreated");
    if !starting {
        return None;
    }
    let age = match pod {
        PodState::Created(_) => Duration::ZERO,
        PodState::Current(p) => {
            let created = p.metadata.creation_timestamp.as_ref()?.0;
            let age = now.duration_since(created);
            // A Pod stamped ahead of this clock counts as just created.
            Duration::try_from(age).unwrap_or(Duration::ZERO)
        }
        _ => return None,
    };
    GRACE.checked_sub(age).filter(|left| !left.is_zero())
}

/// Events for the change from `old` to `new`: (warning, reason, note).
pub fn transitions(
    old: Option<&RedroidInstanceStatus>,
    new: &RedroidInstanceStatus,
) -> Vec<(bool, &'static str, String)> {
    let (before, after) = (ready_reason(old), ready_reason(Some(new)));
    if before == after {
        return Vec::new();
    }
    let msg = kit::conditions::get(&new.conditions, "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    match after.as_ref().map(|(r, s)| (r.as_str(), s.as_str())) {
        Some(("Running", "True")) => vec![(false, "InstanceReady", msg)],
        Some(("PodFailed", _)) => vec![(true, "InstanceFailed", msg)],
        Some(("IndexConflict", _)) => vec![(true, "IndexConflict", msg)],
        Some(("BaseLayerConflict", _)) => vec![(true, "BaseLayerConflict", msg)],
        Some(("DataInUse", _)) => vec![(false, "DataInUse", msg)],
        _ => Vec::new(),
    }
}

/// Logs, at info, a change of phase or of the Ready reason from `old` to `new`.
pub fn log_transition(
    inst: &RedroidInstance,
    old: Option<&RedroidInstanceStatus>,
    new: &RedroidInstanceStatus,
) {
    let phase = |s: Option<&RedroidInstanceStatus>| s.and_then(|s| s.phase).map(|p| p.as_str());
    let (before, after) = (ready_reason(old), ready_reason(Some(new)));
    if phase(old) == phase(Some(new)) && before == after {
        return;
    }
    let reason = after.map(|(r, _)| r).unwrap_or_default();
    let message = kit::conditions::get(&new.conditions, "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let (ns, name) = (inst.namespace().unwrap_or_default(), inst.name_any());
    let (from, to) = (phase(old).unwrap_or("-"), phase(Some(new)).unwrap_or("-"));
    let pod = new.pod_name.as_deref().unwrap_or("");
    if HELD_BACK.contains(&reason.as_str()) {
        tracing::info!(namespace = %ns, name = %name, from = %from, to = %to, pod = %pod, reason = %reason, message = %message, "instance held back");
    } else {
        tracing::info!(namespace = %ns, name = %name, from = %from, to = %to, pod = %pod, reason = %reason, message = %message, "instance phase changed");
    }
}

/// Ready reasons of an instance that wants to run but waits for others' data.
const HELD_BACK: [&str; 3] = ["IndexConflict", "BaseLayerConflict", "DataInUse"];

/// Patches the status when it differs; returns the instance as the write left it, or `None`
/// when nothing was written.
pub async fn write(
    ctx: &Context,
    inst: &RedroidInstance,
    desired: &RedroidInstanceStatus,
) -> Result<Option<RedroidInstance>, StatusError> {
    let api: Api<RedroidInstance> =
        Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    kit::status::write_status_if_changed(&api, inst, desired, names::FIELD_MANAGER)
        .await
        .map_err(|source| StatusError {
            name: inst.name_any(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn instance(status: Option<RedroidInstanceStatus>) -> RedroidInstance {
        let mut i: RedroidInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "redroid.isning.moe/v1alpha1",
            "kind": "RedroidInstance",
            "metadata": {"name": "a", "namespace": "n", "generation": 2},
            "spec": {"index": 0},
        }))
        .expect("instance");
        i.status = status;
        i
    }

    fn pod(age: Duration, phase: Option<&str>, now: Timestamp) -> PodState {
        let mut p = CachedPod::default();
        p.metadata.name = Some("a-pod-1".into());
        p.metadata.creation_timestamp = Some(Time(now - age));
        p.status = phase.map(|ph| super::super::cached_pod::CachedPodStatus {
            phase: Some(ph.into()),
            ..Default::default()
        });
        PodState::Current(Box::new(p))
    }

    fn desired(inst: &RedroidInstance, pod: &PodState, now: Timestamp) -> RedroidInstanceStatus {
        let facts = Facts {
            want: &Want::Run,
            block: None,
            pod,
        };
        compute(inst, &facts, now)
    }

    #[test]
    fn a_starting_pod_of_a_new_generation_waits_out_the_grace() {
        let now = Timestamp::now();
        let inst = instance(None);
        let created = PodState::Created("a-pod-1".into());
        assert_eq!(
            defer(&inst, &desired(&inst, &created, now), &created, now),
            Some(GRACE)
        );
        let young = pod(Duration::from_secs(2), Some("Pending"), now);
        assert_eq!(
            defer(&inst, &desired(&inst, &young, now), &young, now),
            Some(Duration::from_secs(3))
        );
        // An older generation's status is stale too: the new generation's start may wait.
        let stale = instance(Some(RedroidInstanceStatus {
            observed_generation: Some(1),
            ..Default::default()
        }));
        assert!(defer(&stale, &desired(&stale, &young, now), &young, now).is_some());
    }

    #[test]
    fn everything_else_is_written_at_once() {
        let now = Timestamp::now();
        let inst = instance(None);
        // Past the grace.
        let old = pod(GRACE, Some("Pending"), now);
        assert_eq!(defer(&inst, &desired(&inst, &old, now), &old, now), None);
        // Arrived.
        let running = pod(Duration::from_secs(1), Some("Running"), now);
        assert_eq!(
            defer(&inst, &desired(&inst, &running, now), &running, now),
            None
        );
        // Failed.
        let failed = pod(Duration::from_secs(1), Some("Failed"), now);
        assert_eq!(
            defer(&inst, &desired(&inst, &failed, now), &failed, now),
            None
        );
        // Stopped, terminating.
        let absent = PodState::Absent;
        let stop = compute(
            &inst,
            &Facts {
                want: &Want::StopSpec,
                block: None,
                pod: &absent,
            },
            now,
        );
        assert_eq!(defer(&inst, &stop, &absent, now), None);
        let terminating = PodState::Terminating("a-pod-0".into());
        assert_eq!(
            defer(&inst, &desired(&inst, &terminating, now), &terminating, now),
            None
        );
        // A status that describes this generation already is kept current.
        let current = instance(Some(RedroidInstanceStatus {
            observed_generation: Some(2),
            ..Default::default()
        }));
        let young = pod(Duration::from_secs(1), Some("Pending"), now);
        assert_eq!(
            defer(&current, &desired(&current, &young, now), &young, now),
            None
        );
    }
}
