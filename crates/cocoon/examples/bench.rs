//! Benchmark (not a test): N CocoonSets, each 1 main + 2 sub-agents + 1 toolbox, through
//! create → all Running, suspend → all Suspended, unsuspend → all Running on the local plane.
//!
//! ```bash
//! cargo run --release -p cocoon --example cocoon-bench -- --sets 200 --idle-seconds 60
//! ```
//!
//! - The operator runs in this process (both controllers, leader election off, watching only
//!   the bench's fresh namespace) through a client that counts its API requests by verb.
//! - vk-cocoon is played by the `vksim` binary, built first with this profile and run
//!   as a child process, so its memory and CPU are not in the figures below.
//! - A fresh `docker-registry` holds the snapshots; its request count covers the operator
//!   (manifest probes) and the simulator (pushes and pulls) together.
//! - This process also creates and patches the sets (a separate, uncounted admin client) and
//!   lists them every 2 s, so peak RSS and CPU seconds are the operator's plus that harness.
//!
//! Each phase ends when every set reports the phase for its current generation, then waits for
//! the operator's queue to drain (no request for 5 s, at most 60 s); its requests are counted
//! until then. Last, the operator's requests are counted over `--idle-seconds` (goal: zero
//! writes). At the end the sets, then the namespace, are deleted while the operator still runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use cocoon::crd::{CocoonSet, CocoonSetPhase};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testenv::registry::RegistryServer;
use testenv::{RequestCounts, TestNamespace};
use tokio_util::sync::CancellationToken;

/// Sets created or patched at once by the harness.
const PARALLEL_WRITES: usize = 16;
/// The operator's queue counts as drained after this long without a request.
const QUIET: Duration = Duration::from_secs(5);
/// Longest wait for the queue to drain after a phase.
const MAX_SETTLE: Duration = Duration::from_secs(60);

#[derive(Parser)]
struct Args {
    /// Number of CocoonSets (each 4 VMs).
    #[arg(long, default_value_t = 200)]
    sets: usize,
    /// Seconds to watch for writes after the last phase.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Give up a phase after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
}

/// What one phase measured.
struct Phase {
    name: &'static str,
    reached: Duration,
    settled: Duration,
    cpu: f64,
    peak_rss_kib: u64,
    requests: BTreeMap<String, u64>,
    registry: u64,
}

/// What the phases share.
struct Bench {
    sets: Api<CocoonSet>,
    counts: RequestCounts,
    registry: RegistryServer,
    n: usize,
    timeout: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let sim_binary = build_simulator()?;
    let admin = testenv::client().await;
    for crd in cocoon::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let ns = TestNamespace::new(&admin, "cocoon-bench").await;
    let registry = RegistryServer::start().await?;
    let mut sim = Simulator::start(&sim_binary, &registry.url(), &ns.name).await?;
    let (client, counts) = testenv::counting_client().await;
    let stop = CancellationToken::new();
    let flags = operator_flags(&registry.url(), &ns.name)?;
    let operator = tokio::spawn(cocoon::run::run_with_client(flags, client, stop.clone()));

    let bench = Bench {
        sets: Api::namespaced(admin.clone(), &ns.name),
        counts,
        registry,
        n: args.sets,
        timeout: Duration::from_secs(args.timeout_seconds),
    };
    let result = bench.run(&args, &sim).await;
    let cleaned = cleanup(&admin, &bench.sets, &ns.name, bench.timeout).await;
    stop.cancel();
    let _ = operator.await;
    println!("  simulator: {}", sim.stop());
    match cleaned {
        Ok((sets, namespace)) => println!(
            "  cleanup: all sets finalized in {:.1}s, then namespace {} deleted in {:.1}s",
            sets.as_secs_f64(),
            ns.name,
            namespace.as_secs_f64()
        ),
        Err(e) => println!("  cleanup of namespace {} unfinished: {e:#}", ns.name),
    }
    result
}

/// The operator's flags: no leader election, ephemeral ports, quiet logs, this registry and
/// namespace only.
fn operator_flags(registry: &str, namespace: &str) -> anyhow::Result<cocoon::run::Flags> {
    Ok(cocoon::run::Flags::try_parse_from([
        "cocoon-operator",
        "--leader-elect=false",
        "--metrics-addr=127.0.0.1:0",
        "--probe-addr=127.0.0.1:0",
        "--log-level=warn",
        &format!("--oci-registry={registry}"),
        &format!("--watch-namespace={namespace}"),
    ])?)
}

impl Bench {
    async fn run(&self, args: &Args, sim: &Simulator) -> anyhow::Result<()> {
        let cpu0 = testenv::process::cpu_seconds();
        let mut phases = Vec::new();
        let start = Instant::now();
        self.create_sets().await?;
        phases.push(
            self.finish("create", start, CocoonSetPhase::Running)
                .await?,
        );
        let start = Instant::now();
        self.set_suspend(true).await?;
        phases.push(
            self.finish("suspend", start, CocoonSetPhase::Suspended)
                .await?,
        );
        let start = Instant::now();
        self.set_suspend(false).await?;
        phases.push(
            self.finish("unsuspend", start, CocoonSetPhase::Running)
                .await?,
        );

        self.counts.reset();
        let registry0 = self.registry.requests();
        tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await; // the idle measurement window
        let (idle_total, idle_writes) = (self.counts.total(), self.counts.writes());
        let idle_registry = self.registry.requests() - registry0;

        self.report_header(sim);
        report_phases(&phases, cpu0);
        println!(
            "  total: CPU {:.2}s, peak RSS {:.1} MiB",
            testenv::process::cpu_seconds() - cpu0,
            testenv::process::peak_rss_kib() as f64 / 1024.0
        );
        println!(
            "  idle {}s after converging: {idle_total} operator requests ({idle_writes} writes), \
             {idle_registry} registry requests",
            args.idle_seconds
        );
        println!(
            "  write requests per minute converged: {:.1}",
            idle_writes as f64 * 60.0 / args.idle_seconds.max(1) as f64
        );
        Ok(())
    }

    fn report_header(&self, sim: &Simulator) {
        println!(
            "\ncocoon benchmark: {} CocoonSets (1 main + 2 sub-agents + 1 toolbox each, {} VMs) \
             on the local control plane",
            self.n,
            self.n * 4
        );
        println!(
            "  vksim runs as a child process (pid {}): its memory and CPU are not counted",
            sim.child.id()
        );
    }

    /// Creates the sets, `PARALLEL_WRITES` at a time.
    async fn create_sets(&self) -> anyhow::Result<()> {
        futures::stream::iter(0..self.n)
            .map(|i| async move {
                let set: CocoonSet = serde_json::from_value(json!({
                    "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonSet",
                    "metadata": {"name": format!("set-{i}")},
                    "spec": {
                        "agent": {"image": "ghcr.io/cocoonstack/ubuntu:24.04", "replicas": 2},
                        "toolboxes": [{"name": "db", "image": "postgres-16"}],
                    },
                }))?;
                self.sets.create(&PostParams::default(), &set).await?;
                anyhow::Ok(())
            })
            .buffer_unordered(PARALLEL_WRITES)
            .try_collect::<()>()
            .await
    }

    /// Sets `spec.suspend` on every set, `PARALLEL_WRITES` at a time.
    async fn set_suspend(&self, suspend: bool) -> anyhow::Result<()> {
        let patch = Patch::Merge(json!({"spec": {"suspend": suspend}}));
        futures::stream::iter(0..self.n)
            .map(|i| {
                let patch = &patch;
                async move {
                    let name = format!("set-{i}");
                    self.sets
                        .patch(&name, &PatchParams::default(), patch)
                        .await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(PARALLEL_WRITES)
            .try_collect::<()>()
            .await
    }

    /// Waits until every set is in `target`, lets the queue drain, and takes the phase's
    /// figures (then resets the request counts for the next phase).
    async fn finish(
        &self,
        name: &'static str,
        start: Instant,
        target: CocoonSetPhase,
    ) -> anyhow::Result<Phase> {
        self.wait_all(target, start).await?;
        let reached = start.elapsed();
        let settled = self.settle().await;
        let phase = Phase {
            name,
            reached,
            settled,
            cpu: testenv::process::cpu_seconds(),
            peak_rss_kib: testenv::process::peak_rss_kib(),
            requests: self.counts.by_verb(),
            registry: self.registry.requests(),
        };
        self.counts.reset();
        eprintln!(
            "{name}: all {} sets {} after {:.1}s",
            self.n,
            target.as_str(),
            reached.as_secs_f64()
        );
        Ok(phase)
    }

    /// Polls the sets until all report `target` for their current generation.
    async fn wait_all(&self, target: CocoonSetPhase, start: Instant) -> anyhow::Result<()> {
        loop {
            let list = self.sets.list(&ListParams::default()).await?;
            let done = list.items.iter().filter(|s| in_phase(s, target)).count();
            if done == self.n {
                return Ok(());
            }
            anyhow::ensure!(
                start.elapsed() < self.timeout,
                "only {done}/{} sets {} within {:?}",
                self.n,
                target.as_str(),
                self.timeout
            );
            tokio::time::sleep(Duration::from_secs(2)).await; // benchmark sampling interval
        }
    }

    /// Waits until the operator made no request for `QUIET` (at most `MAX_SETTLE`).
    async fn settle(&self) -> Duration {
        let start = Instant::now();
        let mut last = (self.counts.total(), Instant::now());
        while last.1.elapsed() < QUIET && start.elapsed() < MAX_SETTLE {
            tokio::time::sleep(Duration::from_millis(500)).await; // benchmark sampling interval
            if self.counts.total() != last.0 {
                last = (self.counts.total(), Instant::now());
            }
        }
        start.elapsed()
    }
}

fn in_phase(set: &CocoonSet, target: CocoonSetPhase) -> bool {
    let generation = set.metadata.generation;
    set.status.as_ref().is_some_and(|s| {
        s.phase == Some(target) && s.observed_generation.is_none_or(|g| Some(g) >= generation)
    })
}

/// One line per phase; CPU seconds and registry requests are the phase's share (the phase
/// keeps cumulative marks), peak RSS is the high-water mark at the phase's end.
fn report_phases(phases: &[Phase], cpu0: f64) {
    println!(
        "  {:<10} {:>10} {:>8} {:>7} {:>9} {:>10}  operator API requests",
        "phase", "all there", "drained", "CPU s", "registry", "peak RSS"
    );
    let (mut cpu, mut registry) = (cpu0, 0);
    for p in phases {
        let verbs: Vec<String> = p.requests.iter().map(|(v, n)| format!("{v} {n}")).collect();
        let total: u64 = p.requests.values().sum();
        println!(
            "  {:<10} {:>9.1}s {:>+7.1}s {:>7.2} {:>9} {:>6.1} MiB  {total} ({})",
            p.name,
            p.reached.as_secs_f64(),
            p.settled.as_secs_f64(),
            p.cpu - cpu,
            p.registry - registry,
            p.peak_rss_kib as f64 / 1024.0,
            verbs.join(", ")
        );
        (cpu, registry) = (p.cpu, p.registry);
    }
}

/// The `vksim` child process.
struct Simulator {
    child: Child,
    log: PathBuf,
}

impl Simulator {
    /// Starts it for `namespace` and waits until its pod watch has listed (its log says so).
    async fn start(
        binary: &std::path::Path,
        registry: &str,
        namespace: &str,
    ) -> anyhow::Result<Self> {
        let log = std::env::temp_dir().join(format!("cocoon-bench-{}-sim.log", std::process::id()));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(binary)
            .args([
                "--registry",
                registry,
                "--namespace",
                namespace,
                "--nodes",
                "selector:type=kwok",
                "--pool",
                "default",
            ])
            .env("KUBECONFIG", testenv::kubeconfig_path())
            .env("RUST_LOG", "info,kube=warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        let mut sim = Simulator { child, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !sim.log_text().contains("vksim running") {
            if let Some(status) = sim.child.try_wait()? {
                anyhow::bail!("vksim exited ({status}): {}", sim.log_text());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "vksim did not start: {}",
                sim.log.display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await; // polling its log, with a deadline
        }
        Ok(sim)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops it (SIGTERM, SIGKILL after 15 s) and returns the counters it logged on the way out.
    fn stop(&mut self) -> String {
        testenv::process::stop_child(&mut self.child, Duration::from_secs(15));
        let text = self.log_text();
        let stats = text
            .lines()
            .rev()
            .find_map(|l| l.split_once("stats=").map(|(_, s)| s.to_owned()));
        stats.unwrap_or_else(|| format!("no stats logged; see {}", self.log.display()))
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Builds `vksim` with this example's profile (and the example itself, so features
/// resolve as for this build and nothing is rebuilt); returns the binary's path.
fn build_simulator() -> anyhow::Result<PathBuf> {
    let mut cmd = testenv::cargo::command();
    cmd.args([
        "build",
        "-p",
        "cocoon",
        "--example",
        "bench",
        "-p",
        "vksim",
        "--bin",
        "vksim",
    ]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(out.status.success(), "building vksim failed");
    String::from_utf8(out.stdout)?
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "vksim")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| anyhow::anyhow!("cargo reported no vksim executable"))
}

/// Deletes every set and waits until the operator has finalized them all (pods gone, tags
/// collected), then deletes the namespace and waits until it is gone. Sets first: deleting
/// the namespace outright would race the namespace controller's pod deletions against the
/// operator, which recreates the pods of sets not yet marked for deletion.
async fn cleanup(
    admin: &kube::Client,
    sets: &Api<CocoonSet>,
    ns: &str,
    timeout: Duration,
) -> anyhow::Result<(Duration, Duration)> {
    let start = Instant::now();
    sets.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    while !sets.list(&ListParams::default()).await?.items.is_empty() {
        anyhow::ensure!(
            start.elapsed() < timeout,
            "sets still there after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await; // polling a condition with a deadline
    }
    let sets_gone = start.elapsed();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces.delete(ns, &DeleteParams::default()).await?;
    testenv::wait_deleted(&namespaces, ns, timeout).await?;
    Ok((sets_gone, start.elapsed() - sets_gone))
}
