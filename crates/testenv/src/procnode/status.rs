//! The pod status a kubelet would report, computed from the worker's container records.
//!
//! Contract:
//! - Phase follows the kubelet's `getPhase`: `Pending` until every regular init container
//!   succeeded (and sidecars started) and no app container is still waiting for its first run;
//!   `Running` while any app container runs or will restart; `Succeeded` when every app
//!   container exited 0 for good; `Failed` when they all finished for good and one failed, or
//!   an init container failed under `restartPolicy: Never`. A terminal phase never changes.
//! - Conditions `PodReadyToStartContainers`, `Initialized`, `ContainersReady` and `Ready` are
//!   recomputed; `PodScheduled` is kept (or set True for pods bound without the scheduler).
//!   A condition's `lastTransitionTime` only moves when its status changes.
//! - Container statuses carry state, last state, restart count, `ready` and `started`.
//! - Pure: `now` is passed in, so equal inputs give equal statuses and the worker writes only
//!   when something changed.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::model::{Ctr, CtrKind, RestartPolicy, RunState, Terminated};

/// Everything the status is computed from.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// The pod as last seen (spec, readiness gates, previous conditions and phase).
    pub pod: &'a Pod,
    /// The node's address.
    pub host_ip: &'a str,
    /// The pod's address, once its sandbox exists.
    pub pod_ip: Option<&'a str>,
    /// When the worker accepted the pod.
    pub start_time: &'a Time,
    /// The sandbox (network namespace, volumes) is ready.
    pub sandbox_ready: bool,
    /// Init containers (incl. sidecars) first, then app containers, in spec order.
    pub ctrs: &'a [Ctr],
    /// Now.
    pub now: &'a Time,
}

/// The pod phase.
pub fn phase(pod: &Pod, ctrs: &[Ctr]) -> &'static str {
    let previous = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if let Some(p @ ("Succeeded" | "Failed")) = previous {
        return if p == "Succeeded" {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    let policy = RestartPolicy::parse(pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()));
    let mut pending_init = 0;
    let mut failed_init = 0;
    for c in ctrs.iter().filter(|c| c.kind != CtrKind::App) {
        match c.kind {
            CtrKind::Sidecar if !(c.running() && c.started) => pending_init += 1,
            CtrKind::Init if c.running() => pending_init += 1,
            CtrKind::Init => match c.last_exit() {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) if c.succeeded() => {}
                _ => pending_init += 1,
            },
            _ => {}
        }
    }
    let apps: Vec<&Ctr> = ctrs.iter().filter(|c| c.kind == CtrKind::App).collect();
    let any_app_ran = apps.iter().any(|c| c.ever_ran());
    if failed_init > 0 && policy == RestartPolicy::Never {
        return "Failed";
    }
    if (pending_init > 0 || failed_init > 0) && !any_app_ran {
        return "Pending";
    }
    let running = apps.iter().filter(|c| c.running()).count();
    let waiting = apps.iter().filter(|c| !c.ever_ran()).count();
    let stopped: Vec<&&Ctr> = apps
        .iter()
        .filter(|c| !c.running() && c.ever_ran())
        .collect();
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped.iter().any(|c| c.restart_at.is_some()) {
        return "Running"; // restarting
    }
    if stopped
        .iter()
        .all(|c| c.last_exit().is_some_and(|t| t.exit_code == 0))
    {
        "Succeeded"
    } else {
        "Failed"
    }
}

/// The status the kubelet would write.
pub fn compute(input: &Input<'_>) -> PodStatus {
    let pod = input.pod;
    let phase = phase(pod, input.ctrs);
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let previous = pod.status.as_ref();
    let mut conditions = Vec::new();
    let mut put = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        conditions.push(condition(previous, input.now, type_, ok, reason, message));
    };
    let scheduled = previous
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    put("PodReadyToStartContainers", input.sandbox_ready, None, None);
    let initialized = initialized(input.ctrs);
    put(
        "Initialized",
        initialized,
        (!initialized).then_some("ContainersNotInitialized"),
        (!initialized).then(|| {
            unready_message("incomplete", input.ctrs, |c| {
                c.kind != CtrKind::App && !done_initializing(c)
            })
        }),
    );
    let unready = |c: &Ctr| (c.kind == CtrKind::App || c.kind == CtrKind::Sidecar) && !c.ready;
    let all_ready = !terminal && !input.ctrs.iter().any(unready);
    let (reason, message) = if terminal {
        (Some("PodCompleted"), None)
    } else if all_ready {
        (None, None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(unready_message("unready", input.ctrs, unready)),
        )
    };
    put("ContainersReady", all_ready, reason, message.clone());
    let gates_missing = readiness_gates_missing(pod);
    let ready = all_ready && gates_missing.is_empty();
    let (reason, message) = match (all_ready, gates_missing.is_empty()) {
        (true, false) => (
            Some("ReadinessGatesNotReady"),
            Some(format!(
                "corresponding condition of pod readiness gate \"{}\" does not exist.",
                gates_missing[0]
            )),
        ),
        _ => (reason, message),
    };
    put("Ready", ready, reason, message);
    match scheduled {
        Some(c) => conditions.push(c.clone()),
        None => conditions.push(condition(
            previous,
            input.now,
            "PodScheduled",
            true,
            None,
            None,
        )),
    }
    let statuses = |kinds: &[CtrKind]| {
        Some(
            input
                .ctrs
                .iter()
                .filter(|c| kinds.contains(&c.kind))
                .map(container_status)
                .collect::<Vec<_>>(),
        )
        .filter(|v| !v.is_empty())
    };
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(input.host_ip.into()),
        host_ips: Some(vec![HostIP {
            ip: input.host_ip.into(),
        }]),
        pod_ip: input.pod_ip.map(str::to_owned),
        pod_ips: input.pod_ip.map(|ip| vec![PodIP { ip: ip.into() }]),
        start_time: Some(input.start_time.clone()),
        init_container_statuses: statuses(&[CtrKind::Init, CtrKind::Sidecar]),
        container_statuses: statuses(&[CtrKind::App]),
        qos_class: previous.and_then(|s| s.qos_class.clone()),
        ..PodStatus::default()
    }
}

/// Initialized: every regular init container succeeded and every sidecar started, or an app
/// container has run already (a restarting sidecar does not un-initialise a pod).
fn initialized(ctrs: &[Ctr]) -> bool {
    ctrs.iter().any(|c| c.kind == CtrKind::App && c.ever_ran())
        || ctrs
            .iter()
            .filter(|c| c.kind != CtrKind::App)
            .all(done_initializing)
}

fn done_initializing(c: &Ctr) -> bool {
    match c.kind {
        CtrKind::Sidecar => c.running() && c.started,
        _ => c.succeeded(),
    }
}

fn unready_message(what: &str, ctrs: &[Ctr], pick: impl Fn(&Ctr) -> bool) -> String {
    let names: Vec<&str> = ctrs
        .iter()
        .filter(|c| pick(c))
        .map(|c| c.name.as_str())
        .collect();
    format!("containers with {what} status: [{}]", names.join(" "))
}

fn readiness_gates_missing(pod: &Pod) -> Vec<String> {
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .map(|g| {
            g.iter()
                .map(|g| g.condition_type.clone())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    gates
        .into_iter()
        .filter(|g| {
            !conditions.is_some_and(|cs| cs.iter().any(|c| &c.type_ == g && c.status == "True"))
        })
        .collect()
}

fn condition(
    previous: Option<&PodStatus>,
    now: &Time,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let before = previous
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_));
    let since = match before {
        Some(b) if b.status == status => b
            .last_transition_time
            .clone()
            .unwrap_or_else(|| now.clone()),
        _ => now.clone(),
    };
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(str::to_owned),
        message,
        last_transition_time: Some(since),
        ..PodCondition::default()
    }
}

fn terminated(t: &Terminated) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: t.started_at.clone(),
        finished_at: Some(t.finished_at.clone()),
        container_id: t.container_id.clone(),
    }
}

fn container_status(c: &Ctr) -> ContainerStatus {
    let (state, container_id) = match &c.state {
        RunState::Waiting { reason, message } => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..ContainerState::default()
            },
            c.last_terminated
                .as_ref()
                .and_then(|t| t.container_id.clone()),
        ),
        RunState::Running {
            started_at,
            container_id,
        } => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(started_at.clone()),
                }),
                ..ContainerState::default()
            },
            Some(container_id.clone()),
        ),
        RunState::Terminated(t) => (
            ContainerState {
                terminated: Some(terminated(t)),
                ..ContainerState::default()
            },
            t.container_id.clone(),
        ),
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone().unwrap_or_default(),
        container_id,
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: c.last_terminated.as_ref().map(terminated),
            ..ContainerState::default()
        }),
        restart_count: c.restart_count,
        ready: c.ready && c.running(),
        started: Some(c.running() && c.started),
        ..ContainerStatus::default()
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
