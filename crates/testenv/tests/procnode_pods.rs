//! Pods on process-backed nodes behave as under a kubelet: status, init containers, probes,
//! restarts with back-off, logs, termination with grace, and the fault helpers.

mod procnode_support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, LogParams};
use nix::sys::signal::Signal;
use procnode_support::*;
use serde_json::json;
use testenv::procnode;
use testenv::{TestNamespace, client};

#[tokio::test]
async fn a_running_pod_reports_status_like_a_kubelet() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-status").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    create(&c, &ns.name, "web", json!({"containers": [{"name": "web", "image": DEBIAN,
        "command": ["python3", "-m", "http.server", "8080"],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
        "startupProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1, "failureThreshold": 30}}]}))
    .await;
    let p = ready(&api, "web").await;
    let s = p.status.clone().expect("status");
    let ip = s.pod_ip.clone().expect("podIP");
    assert!(ip.starts_with("127."), "{ip}");
    assert_eq!(s.pod_ips.as_ref().map(|v| v[0].ip.clone()), Some(ip));
    assert!(s.start_time.is_some() && s.host_ip.is_some());
    for t in [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodReadyToStartContainers",
    ] {
        assert!(condition(&p, t), "{t} True");
    }
    let cs = container(&p, "web").expect("container status");
    assert!(cs.ready && cs.started == Some(true) && cs.restart_count == 0);
    assert!(cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
    assert!(
        cs.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("proc://"))
    );
    // kubectl logs goes through the apiserver to the agent's kubelet endpoint.
    let logs = api
        .logs("web", &LogParams::default())
        .await
        .expect("logs through the apiserver");
    assert!(logs.contains("GET / HTTP/1.1"), "{logs}");
}

#[tokio::test]
async fn init_containers_run_first_in_order_and_must_succeed() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-init").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let step = |name: &str, script: &str| {
        json!({"name": name, "image": DEBIAN, "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "work", "mountPath": "/work"}]})
    };
    create(&c, &ns.name, "ordered", json!({
        "volumes": [{"name": "work", "emptyDir": {}}],
        "initContainers": [step("first", "echo first >> /work/order"), step("second", "sleep 1; echo second >> /work/order")],
        "containers": [step("main", "cat /work/order; echo main-started; sleep infinity")],
    }))
    .await;
    ready(&api, "ordered").await;
    let log = log_contains(&api, "ordered", "main", "main-started").await;
    assert!(
        log.starts_with("first\nsecond\n"),
        "init containers ran in order: {log:?}"
    );
    let p = api.get("ordered").await.expect("pod");
    for name in ["first", "second"] {
        let t = container(&p, name)
            .and_then(|s| s.state.clone()?.terminated)
            .expect("terminated");
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    }

    // A failing init container under restartPolicy Never fails the pod; the app never starts.
    create(&c, &ns.name, "broken", json!({"restartPolicy": "Never",
        "initContainers": [{"name": "setup", "image": DEBIAN, "command": ["sh", "-c", "exit 3"]}],
        "containers": [{"name": "main", "image": DEBIAN, "command": ["sh", "-c", "echo should-not-run"]}]}))
    .await;
    let p = reach(&api, "broken", "Failed").await;
    let t = container(&p, "setup")
        .and_then(|s| s.state.clone()?.terminated)
        .expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    let main = container(&p, "main")
        .and_then(|s| s.state.clone()?.waiting)
        .expect("main waiting");
    assert_eq!(main.reason.as_deref(), Some("PodInitializing"));
    assert!(!condition(&p, "Initialized"));
}

#[tokio::test]
async fn restart_policies_and_crash_loop_back_off() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-restart").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    create(&c, &ns.name, "never-ok", json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": DEBIAN, "command": ["true"]}]})).await;
    create(&c, &ns.name, "never-fail", json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": DEBIAN, "command": ["sh", "-c", "exit 7"]}]})).await;
    create(&c, &ns.name, "onfailure", json!({"restartPolicy": "OnFailure", "containers": [{"name": "main", "image": DEBIAN,
        "command": ["sh", "-c", "if [ -e /data/once ]; then echo second-run; exit 0; fi; touch /data/once; exit 1"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}], "volumes": [{"name": "data", "emptyDir": {}}]})).await;
    create(&c, &ns.name, "crashloop", json!({"containers": [{"name": "main", "image": DEBIAN, "command": ["sh", "-c", "echo crashing; exit 2"]}]})).await;

    let p = reach(&api, "never-ok", "Succeeded").await;
    let t = container(&p, "main")
        .and_then(|s| s.state.clone()?.terminated)
        .expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    let p = reach(&api, "never-fail", "Failed").await;
    assert_eq!(
        container(&p, "main")
            .and_then(|s| s.state.clone()?.terminated)
            .map(|t| t.exit_code),
        Some(7)
    );
    let p = reach(&api, "onfailure", "Succeeded").await;
    assert_eq!(
        container(&p, "main").map(|s| s.restart_count),
        Some(1),
        "one restart after the failure"
    );
    assert!(
        procnode::logs(&p, "main", false)
            .expect("log")
            .contains("second-run")
    );

    // Always: restarted at once, then after a back-off (10 s), with CrashLoopBackOff meanwhile.
    let p = testenv::wait_for(&api, "crashloop", T, |p: &Pod| {
        container(p, "main").is_some_and(|s| {
            s.restart_count >= 1
                && s.state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.as_deref())
                    == Some("CrashLoopBackOff")
        })
    })
    .await
    .expect("CrashLoopBackOff");
    let s = container(&p, "main").expect("status");
    let last = s
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .expect("last state");
    assert_eq!(last.exit_code, 2);
    assert_eq!(phase(&p), "Running");
    assert!(
        procnode::logs(&p, "main", true)
            .expect("previous log")
            .contains("crashing")
    );
}

#[tokio::test]
async fn a_liveness_failure_restarts_the_container_and_bumps_restart_count() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-live").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    create(&c, &ns.name, "live", json!({"containers": [{"name": "main", "image": DEBIAN,
        "command": ["sh", "-c", "touch /tmp/healthy; echo run-$(date +%s%N); exec sleep infinity"],
        "livenessProbe": {"exec": {"command": ["test", "-e", "/tmp/healthy"]}, "periodSeconds": 1, "failureThreshold": 2}}]}))
    .await;
    let p = ready(&api, "live").await;
    let first = pid(&p, "main");
    // Break the health check from inside the container.
    let (code, _) = procnode::exec(&c, &ns.name, "live", "main", &["rm", "/tmp/healthy"])
        .await
        .expect("exec");
    assert_eq!(code, 0);
    let p = testenv::wait_for(&api, "live", T, |p: &Pod| {
        container(p, "main").is_some_and(|s| s.restart_count == 1 && s.ready)
    })
    .await
    .expect("restarted");
    assert_ne!(pid(&p, "main"), first, "a new process");
    assert!(!alive(first), "the old process is gone");
    let last = container(&p, "main")
        .and_then(|s| s.last_state.clone()?.terminated)
        .expect("last state");
    // `sleep` as PID 1 ignores SIGTERM: it was SIGKILLed after the grace period.
    assert_eq!((last.exit_code, last.signal), (137, Some(9)));
    // The node records its Events fire-and-forget (`procnode::events`): the failed probes'
    // `Unhealthy` is waited for, not read once when the restart is seen.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(c.clone(), &ns.name);
    let reasons = || async {
        events
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect::<Vec<_>>()
    };
    let seen = testenv::eventually("an Unhealthy event", T, || async {
        reasons()
            .await
            .iter()
            .any(|r| r == "Unhealthy")
            .then_some(())
    })
    .await;
    if let Err(e) = seen {
        panic!("{e}: Unhealthy event; reasons: {:?}", reasons().await);
    }
}

#[tokio::test]
async fn deletion_sends_sigterm_honours_the_grace_period_then_sigkills() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-term").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    // Traps SIGTERM and keeps running; a child process too (killed with its PID namespace).
    create(&c, &ns.name, "stubborn", json!({"terminationGracePeriodSeconds": 4, "containers": [{"name": "main", "image": DEBIAN,
        "command": ["sh", "-c", "trap 'echo got-SIGTERM' TERM; sleep 1000 & echo started; while true; do sleep 0.2; done"]}]}))
    .await;
    // Exits on SIGTERM at once.
    create(&c, &ns.name, "polite", json!({"terminationGracePeriodSeconds": 30, "containers": [{"name": "main", "image": DEBIAN,
        "command": ["sh", "-c", "trap 'exit 0' TERM; echo started; while true; do sleep 0.2; done"]}]}))
    .await;
    ready(&api, "stubborn").await;
    ready(&api, "polite").await;
    log_contains(&api, "stubborn", "main", "started").await;
    let stubborn = api.get("stubborn").await.expect("pod");
    let main_pid = pid(&stubborn, "main");
    let children = descendants(main_pid);
    assert!(!children.is_empty(), "the container has a child process");

    let start = Instant::now();
    api.delete("stubborn", &DeleteParams::default())
        .await
        .expect("delete");
    log_contains(&api, "stubborn", "main", "got-SIGTERM").await;
    testenv::wait_deleted(&api, "stubborn", T)
        .await
        .expect("deleted");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(4),
        "grace honoured: gone after {took:?}"
    );
    assert!(took < Duration::from_secs(20), "SIGKILL followed: {took:?}");
    assert!(!alive(main_pid), "main process gone");
    for child in children {
        assert!(!alive(child), "child {child} gone too");
    }

    let start = Instant::now();
    api.delete("polite", &DeleteParams::default())
        .await
        .expect("delete");
    testenv::wait_deleted(&api, "polite", T)
        .await
        .expect("deleted");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "no need to wait the 30 s grace"
    );
}

fn descendants(pid: i32) -> Vec<i32> {
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let direct: Vec<i32> = children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    direct
        .iter()
        .flat_map(|c| std::iter::once(*c).chain(descendants(*c)))
        .collect()
}

#[tokio::test]
async fn helpers_kill_freeze_and_thaw_a_container() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-faults").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    create(&c, &ns.name, "victim", json!({"containers": [{"name": "main", "image": DEBIAN,
        "command": ["python3", "-m", "http.server", "8080"],
        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1}}]}))
    .await;
    ready(&api, "victim").await;

    // Freeze: the process stalls (probes time out, so it turns unready), thaw: it recovers.
    procnode::freeze(&c, &ns.name, "victim", "main")
        .await
        .expect("freeze");
    assert!(
        procnode::frozen(&c, &ns.name, "victim", "main")
            .await
            .expect("frozen?")
    );
    testenv::wait_for(&api, "victim", T, |p: &Pod| !condition(p, "Ready"))
        .await
        .expect("unready while frozen");
    procnode::thaw(&c, &ns.name, "victim", "main")
        .await
        .expect("thaw");
    ready(&api, "victim").await;

    // A crash: SIGKILL; the container restarts and reports how it died.
    let before = pid(&api.get("victim").await.expect("pod"), "main");
    procnode::signal(&c, &ns.name, "victim", "main", Signal::SIGKILL)
        .await
        .expect("kill");
    let p = testenv::wait_for(&api, "victim", T, |p: &Pod| {
        container(p, "main").is_some_and(|s| s.restart_count == 1)
    })
    .await
    .expect("restarted");
    let last = container(&p, "main")
        .and_then(|s| s.last_state.clone()?.terminated)
        .expect("last state");
    assert_eq!(
        (last.exit_code, last.signal, last.reason.as_deref()),
        (137, Some(9), Some("Error"))
    );
    assert!(!alive(before));
}
