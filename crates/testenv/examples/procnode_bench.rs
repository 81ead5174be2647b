//! Benchmark of the process-backed nodes on the running plane:
//!
//! 1. start-up latency: pods created one after another, the time from the create call until
//!    the pod is `Running` and until it is `Ready`, for a trivial process (`sleep infinity`, no
//!    probe) and for a tiny HTTP server with an httpGet readiness probe (period 1 s);
//! 2. the agent with N running pods: its RSS, and its CPU while the pods start and while they
//!    idle (plus the shims' RSS, one per container).
//!
//! ```text
//! cargo run -p testenv --example procnode_bench -- [--pods 50] [--serial 20] [--idle 60]
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pod(name: &str, container: serde_json::Value) -> Pod {
    let placement = testenv::procnode::placement();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"tolerations": placement["tolerations"], "nodeSelector": placement["nodeSelector"],
                 "terminationGracePeriodSeconds": 1, "containers": [container]},
    }))
    .expect("pod")
}

fn sleeper() -> serde_json::Value {
    json!({"name": "main", "image": "debian:bookworm", "command": ["sleep", "infinity"]})
}

fn web() -> serde_json::Value {
    json!({"name": "main", "image": "debian:bookworm", "command": ["python3", "-m", "http.server", "8080"],
           "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}})
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// (create → Running, create → Ready) of one pod.
async fn startup(api: &Api<Pod>, name: &str, container: serde_json::Value) -> (Duration, Duration) {
    let start = Instant::now();
    api.create(&PostParams::default(), &pod(name, container))
        .await
        .expect("create");
    let mut to_running = None;
    loop {
        let p = api.get(name).await.expect("get");
        if to_running.is_none() && running(&p) {
            to_running = Some(start.elapsed());
        }
        if ready(&p) {
            return (
                to_running.unwrap_or_else(|| start.elapsed()),
                start.elapsed(),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await; // polling at 10 ms resolution
    }
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:>6.0} ms  p90 {:>6.0} ms  max {:>6.0} ms",
        at(0.5).as_secs_f64() * 1e3,
        at(0.9).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3
    )
}

/// (RSS KiB, peak RSS KiB, CPU seconds) of process `pid`.
fn usage(pid: i32) -> (u64, u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |f: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(f))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        rest.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        field("VmRSS:"),
        field("VmHWM:"),
        (ticks(11) + ticks(12)) / 100.0,
    )
}

/// (PSS KiB, private dirty KiB) of process `pid`: its fair share of memory, and what only it uses.
fn pss(pid: i32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |f: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(f))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("Pss:"), field("Private_Dirty:"))
}

/// (shims, their RSS, PSS and private dirty memory together, KiB).
fn shims(slot: u8) -> (usize, u64, u64, u64) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mount = info
        .lines()
        .find(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|r| r.starts_with("cgroup2 "))
        })
        .and_then(|l| l.split_whitespace().nth(4))
        .unwrap_or("/sys/fs/cgroup")
        .to_string();
    let procs = std::fs::read_to_string(format!("{mount}/flotilla-{slot}/shims/cgroup.procs"))
        .unwrap_or_default();
    let pids: Vec<i32> = procs.lines().filter_map(|l| l.parse().ok()).collect();
    let rss = pids.iter().map(|p| usage(*p).0).sum();
    let pss_total = pids.iter().map(|p| pss(*p).0).sum();
    let private = pids.iter().map(|p| pss(*p).1).sum();
    (pids.len(), rss, pss_total, private)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pods = arg("--pods", 50) as usize;
    let serial = arg("--serial", 20) as usize;
    let idle = arg("--idle", 60);
    let client = testenv::client().await;
    let state = testenv::plane::read_state().expect("plane state");
    let agent = state
        .procs
        .iter()
        .find(|p| p.name == testenv::procnode::AGENT)
        .expect("agent")
        .pid;
    let slot = state.pod_network_slot.expect("slot");
    let ns = testenv::TestNamespace::new(&client, "procnode-bench").await;
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);

    println!(
        "== start-up latency, {serial} pods one after another (create → Running, create → Ready)"
    );
    let mut results: BTreeMap<&str, (Vec<Duration>, Vec<Duration>)> = BTreeMap::new();
    for i in 0..serial {
        for (kind, container) in [
            ("sleep infinity, no probe", sleeper()),
            ("http.server, httpGet readiness 1 s", web()),
        ] {
            let name = format!(
                "s{i}-{}",
                if kind.starts_with("sleep") {
                    "sleep"
                } else {
                    "web"
                }
            );
            let (r, y) = startup(&api, &name, container).await;
            let e = results.entry(kind).or_default();
            e.0.push(r);
            e.1.push(y);
            api.delete(&name, &Default::default()).await?;
        }
    }
    for (kind, (r, y)) in results {
        println!(
            "{kind}:\n  to Running: {}\n  to Ready:   {}",
            percentiles(r),
            percentiles(y)
        );
    }
    testenv::eventually(
        "the start-up pods to go",
        Duration::from_secs(120),
        || async {
            api.list(&Default::default())
                .await
                .ok()
                .filter(|l| l.items.is_empty())
                .map(|_| ())
        },
    )
    .await?;

    println!("\n== the agent with {pods} running pods");
    let (rss0, _, cpu0) = usage(agent);
    let start = Instant::now();
    for i in 0..pods {
        api.create(&PostParams::default(), &pod(&format!("p{i}"), sleeper()))
            .await?;
    }
    testenv::eventually(
        "every pod Running and Ready",
        Duration::from_secs(300),
        || async {
            let list = api.list(&Default::default()).await.ok()?;
            (list.items.len() == pods && list.items.iter().all(|p| running(p) && ready(p)))
                .then_some(())
        },
    )
    .await?;
    let ramp = start.elapsed();
    let (rss1, _, cpu1) = usage(agent);
    println!(
        "{pods} pods Running and Ready {:.1} s after the first create; agent CPU during the ramp: {:.2} s",
        ramp.as_secs_f64(),
        cpu1 - cpu0
    );
    tokio::time::sleep(Duration::from_secs(idle)).await; // the measurement window
    let (rss2, hwm, cpu2) = usage(agent);
    let (count, shim_rss, shim_pss, shim_private) = shims(slot);
    let (agent_pss, agent_private) = pss(agent);
    println!(
        "agent RSS: {rss0} KiB before, {rss1} KiB after the ramp, {rss2} KiB after {idle} s idle \
         (peak {hwm} KiB; PSS {agent_pss} KiB, private dirty {agent_private} KiB)"
    );
    println!(
        "agent CPU while {pods} pods idle: {:.3} s in {idle} s = {:.2} % of one core",
        cpu2 - cpu1,
        (cpu2 - cpu1) / idle as f64 * 100.0
    );
    println!(
        "shims: {count} processes, together RSS {shim_rss} KiB (mostly the agent's executable, \
         shared), PSS {shim_pss} KiB, private dirty {shim_private} KiB ({} KiB each)",
        shim_private / count.max(1) as u64
    );
    Ok(())
}
