//! Benchmark (not a test): a 3-instance RedisCluster on the local plane's process-backed nodes
//! (real redis-server under this build's instance manager), the operator as its own process
//! under its own RBAC (deploy/redis/rbac) at its default poll interval, its API requests
//! counted on the way.
//!
//! ```bash
//! cargo run --release -p redis --example failover_bench -- --kills 20 --switchovers 5
//! ```
//!
//! Figures:
//! - **failover**: from the SIGKILL of the primary's redis-server (killed again whenever it
//!   runs, as a crashing Redis would be; its first restart is immediate) until a write is
//!   accepted by the new primary, p50/p95/max over `--kills` failovers. A prober writes (`SET`)
//!   every 20 ms to the pod `status.currentPrimary` names, as a client following the `-leader`
//!   Service would.
//! - **switchover**: `status.targetPrimary` set to a replica (what `kubectl redis promote`
//!   does); the longest time without an accepted write, and the time until the new primary
//!   accepts writes, over `--switchovers`.
//! - **footprint**: the operator's and each instance manager's (the container's PID 1, not
//!   redis-server) resident memory and CPU share over `--idle-seconds` of a converged cluster,
//!   and over `--load-seconds` under a writer (`SET` + `WAIT 1`, one connection).
//! - **operator requests** per minute in the idle window, writes apart (goal: no write).
//!
//! The harness (this process) is not measured: it polls the cluster every 100 ms during
//! handoffs.

#[path = "../tests/operator/data.rs"]
#[allow(dead_code)]
mod data;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nix::sys::signal::Signal;
use redis::crd::{ClusterPhase, RedisCluster};
use redis::instance::resp::{Conn, Value};
use serde_json::json;
use testenv::bench::{self, Counted, Operator};
use testenv::{TestNamespace, procnode};

const CLUSTER: &str = "bench";
const SA: &str = "redis-operator";
const DEPLOY_NAMESPACE: &str = "redis-operator-system";

#[derive(Parser)]
struct Args {
    /// Failovers to measure.
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Switchovers to measure.
    #[arg(long, default_value_t = 5)]
    switchovers: usize,
    /// Seconds of the idle window (footprint and requests of a converged cluster).
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Seconds under the writer.
    #[arg(long, default_value_t = 30)]
    load_seconds: u64,
    /// Longest wait for any one condition.
    #[arg(long, default_value_t = 300)]
    timeout_seconds: u64,
}

/// Accepted writes of the prober: when, and on which pod.
#[derive(Default)]
struct Accepted(Vec<(Instant, String)>);

/// Writes every 20 ms to the pod `status.currentPrimary` names, recording each accepted write.
fn prober(
    clusters: Api<RedisCluster>,
    pods: Api<Pod>,
    password: String,
) -> (Arc<Mutex<Accepted>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Accepted>> = Arc::default();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut conn: Option<(String, Conn)> = None;
        let mut n = 0u64;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await; // the prober's write interval
            let primary = match clusters.get(CLUSTER).await {
                Ok(c) => c.status.map(|s| s.current_primary).unwrap_or_default(),
                Err(_) => continue,
            };
            if conn.as_ref().is_none_or(|(p, _)| *p != primary) {
                conn = None;
                let Some(ip) = pod_ip(&pods, &primary).await else {
                    continue;
                };
                let Ok(mut c) = Conn::tcp(&format!("{ip}:6379"), Duration::from_millis(500)).await
                else {
                    continue;
                };
                c.set_timeout(Duration::from_millis(500));
                if c.command(&["AUTH", &password]).await.is_err() {
                    continue;
                }
                conn = Some((primary.clone(), c));
            }
            let Some((pod, c)) = conn.as_mut() else {
                continue;
            };
            n += 1;
            match c.command(&["SET", &format!("probe{n}"), "v"]).await {
                Ok(Value::Simple(s)) if s == "OK" => {
                    let pod = pod.clone();
                    out.lock().expect("seen").0.push((Instant::now(), pod));
                }
                Ok(_) => {}
                Err(_) => conn = None,
            }
        }
    });
    (seen, task)
}

async fn pod_ip(pods: &Api<Pod>, name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    let p = pods.get_opt(name).await.ok()??;
    p.status?.pod_ip.filter(|ip| !ip.is_empty())
}

/// The PID of the `redis` container's main process (the instance manager) of `pod`.
fn manager_pid(pod: &Pod) -> Option<i32> {
    let s = pod.status.as_ref()?.container_statuses.as_ref()?;
    let c = s.iter().find(|c| c.name == "redis")?;
    c.state.as_ref()?.running.as_ref()?;
    c.container_id
        .as_deref()?
        .strip_prefix("proc://")?
        .parse()
        .ok()
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cpu(pid: i32) -> f64 {
    bench::proc_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// Footprint over a window: RSS at its end (KiB) and CPU share (% of one core).
#[derive(Clone, Copy, Debug, Default)]
struct Footprint {
    rss_kib: f64,
    cpu_percent: f64,
}

/// Measures `pids` over `window`; one footprint per PID.
async fn footprint(pids: &[i32], window: Duration) -> Vec<Footprint> {
    let before: Vec<f64> = pids.iter().map(|p| cpu(*p)).collect();
    let start = Instant::now();
    tokio::time::sleep(window).await; // the measurement window itself
    let secs = start.elapsed().as_secs_f64();
    pids.iter()
        .zip(before)
        .map(|(p, b)| Footprint {
            rss_kib: rss_kib(*p) as f64,
            cpu_percent: (cpu(*p) - b) / secs * 100.0,
        })
        .collect()
}

fn percentile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

struct Bench {
    admin: kube::Client,
    ns: String,
    clusters: Api<RedisCluster>,
    pods: Api<Pod>,
    timeout: Duration,
    operator: Operator,
}

impl Bench {
    async fn status(&self) -> Option<redis::crd::RedisClusterStatus> {
        self.clusters.get(CLUSTER).await.ok()?.status
    }

    /// Waits until the cluster is Healthy with 3 ready instances; returns the primary.
    async fn healthy(&mut self) -> anyhow::Result<String> {
        let start = Instant::now();
        loop {
            self.operator.check_alive()?;
            if let Some(s) = self.status().await
                && s.phase == Some(ClusterPhase::Healthy)
                && s.ready_instances == 3
            {
                return Ok(s.current_primary);
            }
            anyhow::ensure!(
                start.elapsed() < self.timeout,
                "the cluster is not Healthy within {:?}: {:?}",
                self.timeout,
                self.status().await.map(|s| (s.phase, s.phase_reason))
            );
            tokio::time::sleep(Duration::from_millis(250)).await; // polling a condition with a deadline
        }
    }

    async fn manager_pids(&self) -> anyhow::Result<Vec<i32>> {
        let mut out = Vec::new();
        for n in 0..3 {
            let p = self.pods.get(&format!("{CLUSTER}-{n}")).await?;
            out.push(manager_pid(&p).ok_or_else(|| anyhow::anyhow!("no PID for {n}"))?);
        }
        Ok(out)
    }

    /// One failover: seconds from the first SIGKILL of `old`'s redis-server to a write
    /// accepted by the new primary.
    async fn failover(&mut self, old: &str, seen: &Mutex<Accepted>) -> anyhow::Result<f64> {
        let start = Instant::now();
        let mut kills = 0;
        loop {
            self.operator.check_alive()?;
            let killed = procnode::signal_command(
                &self.admin,
                &self.ns,
                old,
                "redis",
                "redis-server",
                Signal::SIGKILL,
            )
            .await
            .is_ok_and(|p| !p.is_empty());
            kills += usize::from(killed);
            let accepted = seen
                .lock()
                .expect("seen")
                .0
                .iter()
                .find(|(t, p)| *t > start && p != old)
                .map(|(t, _)| *t);
            if let Some(t) = accepted.filter(|_| kills > 0) {
                return Ok((t - start).as_secs_f64());
            }
            anyhow::ensure!(
                start.elapsed() < self.timeout,
                "no failover away from {old} within {:?}: {:?}",
                self.timeout,
                self.status().await.map(|s| (s.phase, s.phase_reason))
            );
            tokio::time::sleep(Duration::from_millis(100)).await; // the kill loop's pace
        }
    }

    /// One switchover from `old` to `to`: (longest time without an accepted write, time until
    /// `to` accepted one), in seconds.
    async fn switchover(
        &mut self,
        old: &str,
        to: &str,
        seen: &Mutex<Accepted>,
    ) -> anyhow::Result<(f64, f64)> {
        let now = jiff::Timestamp::now().to_string();
        let start = Instant::now();
        self.clusters
            .patch_status(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"targetPrimary": to, "targetPrimaryTimestamp": now}}),
                ),
            )
            .await?;
        let done = loop {
            self.operator.check_alive()?;
            let t = seen
                .lock()
                .expect("seen")
                .0
                .iter()
                .find(|(t, p)| *t > start && p == to)
                .map(|(t, _)| *t);
            if let Some(t) = t {
                break t;
            }
            anyhow::ensure!(
                start.elapsed() < self.timeout,
                "no switchover from {old} to {to} within {:?}",
                self.timeout
            );
            tokio::time::sleep(Duration::from_millis(100)).await; // polling a condition with a deadline
        };
        let s = seen.lock().expect("seen");
        let mut last =
            s.0.iter()
                .rev()
                .find(|(t, _)| *t <= start)
                .map_or(start, |(t, _)| *t);
        let mut gap = Duration::ZERO;
        for (t, _) in s.0.iter().filter(|(t, _)| *t > start && *t <= done) {
            gap = gap.max(*t - last);
            last = *t;
        }
        Ok((gap.as_secs_f64(), (done - start).as_secs_f64()))
    }
}

/// What must live as long as the run: the namespace, the RBAC binding, the image mapping.
type Guards = (
    TestNamespace,
    testenv::rbac::ClusterCleanup,
    procnode::ImageRegistration,
    PathBuf,
);

async fn setup(args: &Args) -> anyhow::Result<(Bench, Counted, Guards)> {
    let admin = testenv::client().await;
    for crd in redis::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let ns = TestNamespace::new(&admin, "redis-bench").await;
    let dir = testenv::workspace_root().join("deploy/redis/rbac");
    let rbac = testenv::rbac::install_rbac(&admin, &dir, DEPLOY_NAMESPACE, &ns.name).await?;
    let token = testenv::identity::service_account_token(&admin, &ns.name, SA).await?;
    let counted = Counted::start().await?;
    let work = std::env::temp_dir().join(format!("redis-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let kubeconfig = work.join("operator.kubeconfig");
    counted.kubeconfig(&kubeconfig, &token, &ns.name)?;
    let binary = bench::build_binary("redis", "redis-operator")?;
    let image = format!("ghcr.io/flotilla/redis-operator:{}", ns.name);
    let entry = procnode::ImageEntry {
        image: image.clone(),
        files: [("/redis-operator".to_string(), binary.display().to_string())].into(),
        entrypoint: vec!["/redis-operator".into()],
        ..procnode::ImageEntry::default()
    };
    let registration =
        procnode::register_image(&admin, &format!("redis-operator.{}", ns.name), &entry).await?;
    let probe = format!("127.0.0.1:{}", testenv::process::free_port()?);
    let flags = [
        "controller".to_owned(),
        "--leader-elect=false".to_owned(),
        "--pods-on-process-nodes".to_owned(),
        format!("--operator-image={image}"),
        format!("--watch-namespaces={}", ns.name),
        "--webhook-enabled=false".to_owned(),
        "--metrics-addr=127.0.0.1:0".to_owned(),
        format!("--probe-addr={probe}"),
    ];
    let mut operator = Operator::spawn(
        "redis-operator",
        &binary,
        &flags,
        &[],
        &kubeconfig,
        &work.join("operator.log"),
    )?;
    bench::wait_ready(&mut operator, &probe, Duration::from_secs(120)).await?;
    println!(
        "operator pid {} (log {}), namespace {}",
        operator.pid(),
        operator.log().display(),
        ns.name
    );
    let b = Bench {
        clusters: Api::namespaced(admin.clone(), &ns.name),
        pods: Api::namespaced(admin.clone(), &ns.name),
        ns: ns.name.clone(),
        admin,
        timeout: Duration::from_secs(args.timeout_seconds),
        operator,
    };
    Ok((b, counted, (ns, rbac, registration, work)))
}

async fn password(b: &Bench) -> anyhow::Result<String> {
    let s = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(b.admin.clone(), &b.ns)
        .get(&redis::names::auth_secret(CLUSTER))
        .await?;
    let v = s
        .data
        .and_then(|d| d.get("password").cloned())
        .ok_or_else(|| anyhow::anyhow!("no password"))?;
    Ok(String::from_utf8(v.0)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (mut b, counted, _guards) = setup(&args).await?;
    let rc: RedisCluster = serde_json::from_value(json!({
        "apiVersion": "redis.io/v1", "kind": "RedisCluster",
        "metadata": {"name": CLUSTER},
        "spec": {"instances": 3, "storage": {"size": "1Gi"}},
    }))?;
    let created = Instant::now();
    b.clusters.create(&PostParams::default(), &rc).await?;
    b.healthy().await?;
    println!("Healthy {:.1?} after creation", created.elapsed());
    let pw = password(&b).await?;

    // Converged: the operator's requests and everyone's footprint, idle.
    tokio::time::sleep(Duration::from_secs(10)).await; // let the first passes' Events settle
    counted.counts().reset();
    let op = b.operator.pid() as i32;
    let managers = b.manager_pids().await?;
    let pids: Vec<i32> = std::iter::once(op)
        .chain(managers.iter().copied())
        .collect();
    let idle = footprint(&pids, Duration::from_secs(args.idle_seconds)).await;
    let counts = counted.counts();
    let minutes = args.idle_seconds as f64 / 60.0;
    let requests = counts.total() as f64 / minutes;
    let writes = counts.writes() as f64 / minutes;
    println!("idle: {idle:?}; requests by verb {:?}", counts.by_verb());

    // Under a writer.
    let writer = data::Writer::start(b.clusters.clone(), b.pods.clone(), CLUSTER, pw.clone(), 1);
    writer.progress(10, b.timeout).await;
    let before = writer.acked();
    let load = footprint(&pids, Duration::from_secs(args.load_seconds)).await;
    let rate = (writer.acked() - before) as f64 / args.load_seconds as f64;
    writer.finish().await;
    println!("load: {load:?}; {rate:.0} acknowledged writes/s");

    let (seen, prober) = prober(b.clusters.clone(), b.pods.clone(), pw.clone());
    let mut failovers = Vec::new();
    for i in 0..args.kills {
        let old = b.healthy().await?;
        let secs = b.failover(&old, &seen).await?;
        let new = b
            .status()
            .await
            .map(|s| s.current_primary)
            .unwrap_or_default();
        println!("failover {}: {old} -> {new} in {secs:.2}s", i + 1);
        failovers.push(secs);
    }
    let mut gaps = Vec::new();
    let mut totals = Vec::new();
    for i in 0..args.switchovers {
        let old = b.healthy().await?;
        let to = (0..3)
            .map(|n| format!("{CLUSTER}-{n}"))
            .find(|p| *p != old)
            .unwrap_or_default();
        let (gap, total) = b.switchover(&old, &to, &seen).await?;
        println!(
            "switchover {}: {old} -> {to}: longest write gap {gap:.2}s, new primary writing after {total:.2}s",
            i + 1
        );
        gaps.push(gap);
        totals.push(total);
    }
    prober.abort();

    let mean = |f: &[Footprint], pick: fn(&Footprint) -> f64| {
        f.iter().map(pick).sum::<f64>() / f.len().max(1) as f64
    };
    println!(
        "\nRedis operator benchmark, load average {:?}",
        bench::load_average()
    );
    println!(
        "failover, SIGKILL to writes accepted again (n={}): p50 {:.1}s, p95 {:.1}s, max {:.1}s",
        failovers.len(),
        percentile(&failovers, 0.5),
        percentile(&failovers, 0.95),
        percentile(&failovers, 1.0)
    );
    println!(
        "switchover (n={}): write outage p50 {:.2}s, p95 {:.2}s; new primary writing after p50 {:.2}s",
        gaps.len(),
        percentile(&gaps, 0.5),
        percentile(&gaps, 0.95),
        percentile(&totals, 0.5)
    );
    for (what, f) in [("idle", &idle), ("under load", &load)] {
        println!(
            "{what}: operator {:.1} MiB, {:.2}% CPU; instance manager (mean of 3) {:.1} MiB, {:.2}% CPU",
            f[0].rss_kib / 1024.0,
            f[0].cpu_percent,
            mean(&f[1..], |x| x.rss_kib) / 1024.0,
            mean(&f[1..], |x| x.cpu_percent)
        );
    }
    println!(
        "operator requests once converged: {requests:.1}/min, of which writes {writes:.1}/min"
    );
    b.operator.stop();
    b.clusters.delete(CLUSTER, &Default::default()).await?;
    Ok(())
}
