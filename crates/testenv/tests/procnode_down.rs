//! No process of a process-backed pod outlives `down`: a second plane of its own (another
//! plane directory, hence another pod network slot) is started in a child process, given
//! pods with children, grandchildren and a daemonised process, and stopped.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

const CHILD: &str = "FLOTILLA_PROCNODE_DOWN_CHILD";

#[test]
fn no_process_outlives_down() {
    let dir = testenv::plane::cache_dir().join(format!("plane-down-test-{}", std::process::id()));
    let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "down_in_a_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FLOTILLA_PLANE_DIR", &dir)
        .env(CHILD, "1")
        .status()
        .expect("run the child");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.success(),
        "the child plane's check failed (see its output above)"
    );
}

/// Runs only in the child process, on its own plane.
#[test]
fn down_in_a_child_process() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let up = testenv::up().expect("a plane of our own");
    let slot = up.state.pod_network_slot.expect("process-backed nodes");
    let agent = up
        .state
        .procs
        .iter()
        .find(|p| p.name == testenv::procnode::AGENT)
        .expect("agent recorded")
        .pid;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let pids = rt.block_on(run_pods());
    let cgroup = cgroup_root(slot);
    let mut all = procs_below(&cgroup);
    all.push(agent);
    for p in &pids {
        assert!(
            all.contains(p),
            "container process {p} is in the agent's cgroups"
        );
    }
    assert!(
        all.len() >= pids.len() + 3,
        "shims and children counted: {all:?}"
    );
    drop(rt);

    assert!(testenv::down().expect("down"), "a plane was running");
    for p in &all {
        assert!(!alive(*p), "process {p} outlived down");
    }
    assert!(!cgroup.exists(), "cgroups removed: {}", cgroup.display());
    let prefix = format!("flotilla{slot}-");
    let netns: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(netns.is_empty(), "network namespaces left: {netns:?}");
    assert!(
        !std::path::Path::new(&format!("/sys/class/net/flotilla{slot}")).exists(),
        "host link removed"
    );
}

/// Starts pods whose processes fork in every way; returns their containers' main pids.
async fn run_pods() -> Vec<i32> {
    let client = testenv::plane::admin_client().await.expect("client");
    let api: Api<Pod> = Api::namespaced(client, "default");
    let scripts = [
        "sleep 1000 & sleep 1000 & wait",
        "(setsid sleep 1000 &); exec sleep 1000",
        "trap '' TERM; sh -c 'sleep 1000 & wait' & wait",
    ];
    let placement = testenv::procnode::placement();
    for (i, script) in scripts.iter().enumerate() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("forker-{i}")},
            "spec": {
                "tolerations": placement["tolerations"], "nodeSelector": placement["nodeSelector"],
                "containers": [{"name": "main", "image": "debian:bookworm", "command": ["sh", "-c", script]}],
            },
        }))
        .expect("pod");
        api.create(&PostParams::default(), &pod)
            .await
            .expect("create");
    }
    let mut pids = Vec::new();
    for i in 0..scripts.len() {
        let p = testenv::wait_for(
            &api,
            &format!("forker-{i}"),
            Duration::from_secs(60),
            |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"),
        )
        .await
        .expect("running");
        let id = p
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c[0].container_id.clone())
            .expect("container id");
        pids.push(id.trim_start_matches("proc://").parse().expect("pid"));
    }
    pids
}

fn cgroup_root(slot: u8) -> std::path::PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mount = info
        .lines()
        .find(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|r| r.starts_with("cgroup2 "))
        })
        .and_then(|l| l.split_whitespace().nth(4))
        .expect("cgroup2 mounted");
    std::path::Path::new(mount).join(format!("flotilla-{slot}"))
}

fn procs_below(dir: &std::path::Path) -> Vec<i32> {
    let mut out: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(procs_below(&entry.path()));
        }
    }
    out
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}
