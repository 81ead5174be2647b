//! What both systems share: the harness's own writes to the sets (an admin client that is not
//! counted), the watches that say when a phase is done, settling, and the `vksim` child.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cocoon::crd::{CocoonSet, CocoonSetPhase};
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use testenv::RequestCounts;
use testenv::registry::RegistryServer;

/// Sets created or patched at once by the harness.
pub const PARALLEL_WRITES: usize = 16;
/// A system counts as drained after this long without an API or registry request.
const QUIET: Duration = Duration::from_secs(5);
/// Longest wait for the drain after a phase.
const MAX_SETTLE: Duration = Duration::from_secs(60);

/// The set `set-<i>` the benchmark creates: 1 main + 2 sub-agents + 1 toolbox.
pub fn set_object(i: usize) -> anyhow::Result<CocoonSet> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonSet",
        "metadata": {"name": format!("set-{i}")},
        "spec": {
            "agent": {"image": "ghcr.io/cocoonstack/ubuntu:24.04", "replicas": 2},
            "toolboxes": [{"name": "db", "image": "postgres-16"}],
        },
    }))?)
}

/// Creates the `n` sets, [`PARALLEL_WRITES`] at a time, handing each created set (uid,
/// generation) to `created`.
pub async fn create_sets(
    sets: &Api<CocoonSet>,
    n: usize,
    created: impl Fn(CocoonSet) + Sync,
) -> anyhow::Result<()> {
    let created = &created;
    futures::stream::iter(0..n)
        .map(|i| async move {
            let set = sets.create(&PostParams::default(), &set_object(i)?).await?;
            created(set);
            anyhow::Ok(())
        })
        .buffer_unordered(PARALLEL_WRITES)
        .try_collect::<()>()
        .await
}

/// Sets `spec.suspend` on the `n` sets, [`PARALLEL_WRITES`] at a time, handing each patched
/// set (its new generation) to `patched`.
pub async fn set_suspend(
    sets: &Api<CocoonSet>,
    n: usize,
    suspend: bool,
    patched: impl Fn(CocoonSet) + Sync,
) -> anyhow::Result<()> {
    let patch = Patch::Merge(json!({"spec": {"suspend": suspend}}));
    let (patch, patched) = (&patch, &patched);
    futures::stream::iter(0..n)
        .map(|i| async move {
            let name = format!("set-{i}");
            let set = sets.patch(&name, &PatchParams::default(), patch).await?;
            patched(set);
            anyhow::Ok(())
        })
        .buffer_unordered(PARALLEL_WRITES)
        .try_collect::<()>()
        .await
}

/// One collection delete of every set.
pub async fn delete_sets(sets: &Api<CocoonSet>) -> anyhow::Result<()> {
    sets.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Ok(())
}

/// Whether `set` reports `target` for its current generation.
pub fn in_phase(set: &CocoonSet, target: CocoonSetPhase) -> bool {
    let generation = set.metadata.generation;
    set.status.as_ref().is_some_and(|s| {
        s.phase == Some(target) && s.observed_generation.is_some_and(|g| Some(g) >= generation)
    })
}

/// Resolves once `n` sets report `target` for their current generation (one watch).
pub async fn until_all(
    sets: Api<CocoonSet>,
    n: usize,
    target: CocoonSetPhase,
) -> anyhow::Result<()> {
    let mut done: HashSet<String> = HashSet::new();
    let mut events = std::pin::pin!(watcher(sets, watcher::Config::default()).default_backoff());
    while let Some(event) = events.try_next().await? {
        match event {
            watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                if in_phase(&s, target) {
                    done.insert(s.name_any());
                } else {
                    done.remove(&s.name_any());
                }
            }
            watcher::Event::Delete(s) => {
                done.remove(&s.name_any());
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
        if done.len() >= n {
            return Ok(());
        }
    }
    anyhow::bail!("the watch of the sets ended")
}

/// Resolves once no set is left (one watch).
pub async fn until_no_sets(sets: Api<CocoonSet>) -> anyhow::Result<()> {
    let mut left: HashSet<String> = HashSet::new();
    let mut listed = false;
    let mut events = std::pin::pin!(watcher(sets, watcher::Config::default()).default_backoff());
    while let Some(event) = events.try_next().await? {
        match event {
            watcher::Event::Init => left.clear(),
            watcher::Event::InitApply(s) | watcher::Event::Apply(s) => {
                left.insert(s.name_any());
            }
            watcher::Event::Delete(s) => {
                left.remove(&s.name_any());
            }
            watcher::Event::InitDone => listed = true,
        }
        if listed && left.is_empty() {
            return Ok(());
        }
    }
    anyhow::bail!("the watch of the sets ended")
}

/// Waits until neither `counts` nor the registry moved for [`QUIET`] (at most
/// [`MAX_SETTLE`]); returns how long that took.
pub async fn settle(counts: &RequestCounts, registry: &RegistryServer) -> Duration {
    let start = Instant::now();
    let total = || counts.total() + registry.requests();
    let mut last = (total(), Instant::now());
    while last.1.elapsed() < QUIET && start.elapsed() < MAX_SETTLE {
        tokio::time::sleep(Duration::from_millis(500)).await; // benchmark sampling interval
        if total() != last.0 {
            last = (total(), Instant::now());
        }
    }
    start.elapsed()
}

/// The `vksim` child process of one system's namespace.
pub struct Simulator {
    child: Child,
    log: PathBuf,
}

impl Simulator {
    /// Starts it for `namespace` and waits until its pod watch has listed (its log says so).
    pub async fn start(
        binary: &Path,
        registry: &str,
        namespace: &str,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
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
    pub fn stop(&mut self) -> String {
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
pub fn build_simulator() -> anyhow::Result<PathBuf> {
    let mut args = vec![
        "-p",
        "cocoon",
        "--example",
        "cocoon-bench",
        "-p",
        "vksim",
        "--bin",
        "vksim",
    ];
    if !cfg!(debug_assertions) {
        args.push("--release");
    }
    testenv::cargo::build_executable(&args, "vksim")
}
