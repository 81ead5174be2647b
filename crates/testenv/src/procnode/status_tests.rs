//! Table tests of the pod phase and conditions.

use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::procnode::model::{Ctr, CtrKind, RunState, Terminated};

fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).expect("time"))
}

fn pod(policy: &str, phase: Option<&str>) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"restartPolicy": policy, "containers": [{"name": "a"}]},
        "status": {"phase": phase},
    }))
    .expect("pod")
}

/// A container in a named state: new, running, ready, exited-0, exited-1, restarting.
fn ctr(kind: CtrKind, name: &str, state: &str) -> Ctr {
    let mut c = Ctr::new(name, kind, "img", "ContainerCreating");
    let exit = |code| Terminated {
        exit_code: code,
        signal: None,
        reason: if code == 0 { "Completed" } else { "Error" }.into(),
        message: None,
        started_at: Some(at(1)),
        finished_at: at(2),
        container_id: Some("proc://9".into()),
    };
    let running = RunState::Running {
        started_at: at(1),
        container_id: "proc://9".into(),
    };
    match state {
        "new" => {}
        "running" => {
            c.state = running;
            c.started = true;
        }
        "ready" => {
            c.state = running;
            c.started = true;
            c.ready = true;
        }
        "exited-0" => c.state = RunState::Terminated(exit(0)),
        "exited-1" => c.state = RunState::Terminated(exit(1)),
        "restarting" => {
            c.state = RunState::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: None,
            };
            c.last_terminated = Some(exit(1));
            c.restart_at = Some(Instant::now());
            c.restart_count = 1;
        }
        other => panic!("unknown state {other}"),
    }
    c
}

#[test]
fn phases_follow_the_kubelet() {
    use CtrKind::*;
    // (restart policy, previous phase, containers, expected phase)
    type Case<'a> = (&'a str, Option<&'a str>, &'a [(CtrKind, &'a str)], &'a str);
    let cases: &[Case] = &[
        ("Always", None, &[(App, "new")], "Pending"),
        ("Always", None, &[(App, "running")], "Running"),
        ("Always", None, &[(App, "running"), (App, "new")], "Pending"),
        ("Always", None, &[(App, "restarting")], "Running"),
        (
            "Always",
            None,
            &[(Init, "running"), (App, "new")],
            "Pending",
        ),
        (
            "Always",
            None,
            &[(Init, "exited-0"), (App, "running")],
            "Running",
        ),
        ("Never", None, &[(Init, "exited-1"), (App, "new")], "Failed"),
        (
            "OnFailure",
            None,
            &[(Init, "restarting"), (App, "new")],
            "Pending",
        ),
        ("Never", None, &[(App, "exited-0")], "Succeeded"),
        (
            "Never",
            None,
            &[(App, "exited-0"), (App, "exited-1")],
            "Failed",
        ),
        (
            "Never",
            None,
            &[(App, "exited-0"), (App, "running")],
            "Running",
        ),
        ("OnFailure", None, &[(App, "exited-0")], "Succeeded"),
        ("OnFailure", None, &[(App, "restarting")], "Running"),
        ("Always", None, &[(Sidecar, "new"), (App, "new")], "Pending"),
        (
            "Always",
            None,
            &[(Sidecar, "running"), (App, "running")],
            "Running",
        ),
        // Terminal phases stick.
        ("Always", Some("Failed"), &[(App, "running")], "Failed"),
        ("Always", Some("Succeeded"), &[(App, "new")], "Succeeded"),
    ];
    for (i, (policy, previous, spec, want)) in cases.iter().enumerate() {
        let ctrs: Vec<Ctr> = spec
            .iter()
            .enumerate()
            .map(|(j, (k, s))| ctr(*k, &format!("c{j}"), s))
            .collect();
        assert_eq!(phase(&pod(policy, *previous), &ctrs), *want, "case {i}");
    }
}

fn status_of(pod: &Pod, ctrs: &[Ctr], now: i64) -> PodStatus {
    compute(&Input {
        pod,
        host_ip: "127.2.255.254",
        pod_ip: Some("127.2.0.2"),
        start_time: &at(0),
        sandbox_ready: true,
        ctrs,
        now: &at(now),
    })
}

fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
    s.conditions
        .as_ref()
        .and_then(|c| c.iter().find(|c| c.type_ == t))
        .unwrap_or_else(|| panic!("no {t} condition"))
}

#[test]
fn ready_follows_containers_and_gates() {
    use CtrKind::*;
    let p = pod("Always", None);
    let s = status_of(&p, &[ctr(App, "a", "running"), ctr(App, "b", "ready")], 5);
    assert_eq!(cond(&s, "Ready").status, "False");
    assert_eq!(
        cond(&s, "ContainersReady").reason.as_deref(),
        Some("ContainersNotReady")
    );
    assert_eq!(
        cond(&s, "ContainersReady").message.as_deref(),
        Some("containers with unready status: [a]")
    );
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert_eq!(cond(&s, "PodScheduled").status, "True");
    assert_eq!(s.pod_ip.as_deref(), Some("127.2.0.2"));

    let s = status_of(&p, &[ctr(App, "a", "ready")], 5);
    assert_eq!(cond(&s, "Ready").status, "True");

    // A readiness gate without its condition keeps the pod unready.
    let mut gated = pod("Always", None);
    gated.spec.as_mut().expect("spec").readiness_gates = Some(vec![
        serde_json::from_value(serde_json::json!({"conditionType": "example.com/lb"}))
            .expect("gate"),
    ]);
    let s = status_of(&gated, &[ctr(App, "a", "ready")], 5);
    assert_eq!(cond(&s, "ContainersReady").status, "True");
    assert_eq!(cond(&s, "Ready").status, "False");
    assert_eq!(
        cond(&s, "Ready").reason.as_deref(),
        Some("ReadinessGatesNotReady")
    );

    // Init containers not done: not initialised, named in the message.
    let s = status_of(
        &p,
        &[ctr(Init, "setup", "running"), ctr(App, "a", "new")],
        5,
    );
    assert_eq!(cond(&s, "Initialized").status, "False");
    assert_eq!(
        cond(&s, "Initialized").message.as_deref(),
        Some("containers with incomplete status: [setup]")
    );
    assert_eq!(s.init_container_statuses.as_ref().map(Vec::len), Some(1));

    // A finished pod is not ready, with the kubelet's reason.
    let s = status_of(&pod("Never", None), &[ctr(App, "a", "exited-0")], 5);
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
}

#[test]
fn transition_times_move_only_with_the_status() {
    use CtrKind::*;
    let mut p = pod("Always", None);
    let first = status_of(&p, &[ctr(App, "a", "running")], 10);
    p.status = Some(first.clone());
    // Same verdicts later: nothing moves, so the status is equal and nothing is written.
    let again = status_of(&p, &[ctr(App, "a", "running")], 20);
    assert_eq!(first, again);
    // Ready flips: only Ready and ContainersReady move.
    let ready = status_of(&p, &[ctr(App, "a", "ready")], 30);
    assert_eq!(cond(&ready, "Ready").last_transition_time, Some(at(30)));
    assert_eq!(
        cond(&ready, "Initialized").last_transition_time,
        Some(at(10))
    );
}

#[test]
fn container_statuses_carry_states_and_restarts() {
    use CtrKind::*;
    let s = status_of(&pod("Always", None), &[ctr(App, "a", "restarting")], 5);
    let c = &s.container_statuses.as_ref().expect("statuses")[0];
    assert_eq!(c.restart_count, 1);
    assert!(!c.ready);
    let waiting = c
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .expect("waiting");
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    let last = c
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("last state");
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
}
