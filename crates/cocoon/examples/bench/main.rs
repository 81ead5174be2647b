//! Benchmark (not a test): N CocoonSets, each 1 main + 2 sub-agents + 1 toolbox, through
//! create → all Running, suspend → all Suspended, unsuspend → all Running, delete → all gone,
//! on the local plane, for the operator and for the floor (the same phases with no operator
//! logic in between, see `floor`), measured in the same run; every figure of the operator is
//! also printed as a ratio to the floor's.
//!
//! ```bash
//! cargo run --release -p cocoon --example cocoon-bench -- --sets 200
//! ```
//!
//! - Each system gets a fresh namespace and its own `vksim` child process (built first with
//!   this profile; its memory and CPU are not in the figures) on the plane's kwok nodes; one
//!   `docker-registry` serves both, its access log counted per phase by client, method, kind
//!   of path and status.
//! - The operator runs in this process (both controllers, leader election off, watching only
//!   its namespace) through a client that counts its API requests by verb and resource; its
//!   start-up (the first lists and watches) is counted apart. The floor's plain client is
//!   counted the same way.
//! - The harness (an uncounted admin client) creates the sets and patches `spec.suspend`, 16
//!   at a time, and deletes them with one collection delete. A phase's time runs until every
//!   set reports the phase for its current generation (delete: until no set is left), seen
//!   through one watch. Then the system drains (no API or registry request for 5 s, at most
//!   60 s); its requests are counted until then. CPU seconds are this process's (harness
//!   included).
//! - With `--runs` above 1 the systems alternate (the order rotates) and the medians of every
//!   figure and of every same-run ratio follow.

mod floor;
mod harness;
mod operator;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use cocoon::crd::CocoonSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams};
use testenv::RequestCounts;
use testenv::bench::{Table, Unit};
use testenv::registry::RegistryServer;

#[derive(Parser, Clone)]
struct Args {
    /// Number of CocoonSets (each 4 VMs).
    #[arg(long, default_value_t = 200)]
    sets: usize,
    /// Runs; with more than one, medians follow.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Seconds to count the operator's requests once converged (after unsuspend).
    #[arg(long, default_value_t = 30)]
    idle_seconds: u64,
    /// Give up a phase after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// Writes the floor's client keeps in flight.
    #[arg(long, default_value_t = 16)]
    floor_concurrency: usize,
    /// Skip the floor.
    #[arg(long)]
    no_floor: bool,
}

/// The phases, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseSpec {
    Create,
    Suspend,
    Unsuspend,
    Delete,
}

impl PhaseSpec {
    const ALL: [PhaseSpec; 4] = [
        PhaseSpec::Create,
        PhaseSpec::Suspend,
        PhaseSpec::Unsuspend,
        PhaseSpec::Delete,
    ];

    fn name(self) -> &'static str {
        match self {
            PhaseSpec::Create => "create",
            PhaseSpec::Suspend => "suspend",
            PhaseSpec::Unsuspend => "unsuspend",
            PhaseSpec::Delete => "delete",
        }
    }
}

/// What one phase of one system measured.
#[derive(Clone, Debug)]
pub struct PhaseFigures {
    spec: PhaseSpec,
    /// Seconds until every set was there.
    time: f64,
    /// Seconds from there until drained.
    settled: f64,
    /// CPU seconds of this process from the phase's start until drained.
    cpu: f64,
    /// API requests by `"<verb> <resource>"`.
    requests: BTreeMap<String, u64>,
    /// Registry requests by `"<client> <METHOD> <kind> <status>"`.
    registry: BTreeMap<String, u64>,
}

impl PhaseFigures {
    fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    fn writes(&self) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| {
                !k.starts_with("get ") && !k.starts_with("list ") && !k.starts_with("watch ")
            })
            .map(|(_, n)| n)
            .sum()
    }

    fn reads(&self) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| k.starts_with("get ") || k.starts_with("list "))
            .map(|(_, n)| n)
            .sum()
    }

    fn registry_total(&self) -> u64 {
        self.registry.values().sum()
    }

    /// Registry requests of the operator's (or the floor's) own client.
    fn registry_own(&self) -> u64 {
        self.registry
            .iter()
            .filter(|(k, _)| k.starts_with("flotilla-cocoon "))
            .map(|(_, n)| n)
            .sum()
    }
}

/// The figures of one system in one run.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    phases: Vec<PhaseFigures>,
    /// The operator's start-up requests (lists and watches) by `"<verb> <resource>"`.
    startup: Option<BTreeMap<String, u64>>,
    /// Operator requests per minute once converged.
    idle_per_minute: Option<f64>,
    /// The simulator's counters.
    simulator: String,
}

/// What every measurement shares.
pub struct Bench {
    args: Args,
    admin: kube::Client,
    registry: RegistryServer,
    sim_binary: PathBuf,
    logs: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let sim_binary = harness::build_simulator()?;
    let admin = testenv::client().await;
    for crd in cocoon::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let logs = std::env::temp_dir().join(format!("cocoon-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    let bench = Bench {
        registry: RegistryServer::start().await?,
        args: args.clone(),
        admin,
        sim_binary,
        logs,
    };
    let mut systems = vec!["flotilla"];
    if !args.no_floor {
        systems.insert(0, "floor");
    }
    let mut tables = Vec::new();
    for run in 0..args.runs {
        let mut order = systems.clone();
        let len = order.len();
        order.rotate_left(run % len);
        let load = testenv::bench::load_average();
        eprintln!(
            "run {}: {} (load average {:.2} {:.2} {:.2})",
            run + 1,
            order.join(", "),
            load.0,
            load.1,
            load.2
        );
        let mut figures = Vec::new();
        for system in &order {
            let f = bench.measure(system).await?;
            figures.push((system.to_string(), f));
        }
        figures.sort_by_key(|(name, _)| systems.iter().position(|s| s == name));
        let table = table(&figures, args.sets);
        let load = testenv::bench::load_average();
        println!(
            "\ncocoon benchmark, run {} of {}: {} CocoonSets ({} VMs), load average {:.2} {:.2} {:.2} at its end",
            run + 1,
            args.runs,
            args.sets,
            args.sets * 4,
            load.0,
            load.1,
            load.2
        );
        print!("{}", table.render());
        print_details(&figures);
        tables.push(table);
    }
    if tables.len() > 1 {
        println!(
            "\ncocoon benchmark: medians of {} runs, {} CocoonSets (ratios: medians of the same-run ratios)",
            tables.len(),
            args.sets
        );
        print!("{}", Table::median(&tables).render());
    }
    println!("  logs: {}", bench.logs.display());
    Ok(())
}

impl Bench {
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.args.timeout_seconds)
    }

    /// A registry client like the operator's.
    fn registry_client(&self) -> anyhow::Result<cocoon::registry::SharedRegistry> {
        let settings = cocoon::registry::RegistrySettings {
            oci_registry: Some(self.registry.url()),
            oci_username: None,
            oci_password: None,
            oci_ca_cert: None,
            docker_config: None,
            epoch_url: String::new(),
            epoch_token: None,
            epoch_ca_cert: None,
        };
        Ok(settings.build()?)
    }

    /// One system, in a fresh namespace with its own simulator; the namespace is deleted
    /// (and waited for) afterwards.
    async fn measure(&self, system: &str) -> anyhow::Result<Figures> {
        let ns = testenv::TestNamespace::new(&self.admin, &format!("cbench-{system}")).await;
        let name = ns.name.clone();
        std::mem::forget(ns); // deleted below, and waited for
        let log = self.logs.join(format!("{name}-vksim.log"));
        let mut sim =
            harness::Simulator::start(&self.sim_binary, &self.registry.url(), &name, log).await?;
        let result = match system {
            "floor" => floor::measure(self, &name).await,
            _ => operator::measure(self, &name).await,
        };
        let stats = sim.stop();
        let namespaces: Api<Namespace> = Api::all(self.admin.clone());
        namespaces.delete(&name, &DeleteParams::default()).await?;
        testenv::wait_deleted(&namespaces, &name, self.timeout()).await?;
        let mut figures = result?;
        figures.simulator = stats;
        Ok(figures)
    }

    /// Runs one phase: `action` (the harness's writes and whatever the system does for them)
    /// while `done` watches for its end; then drains and takes the figures.
    async fn phase(
        &self,
        spec: PhaseSpec,
        counts: &RequestCounts,
        done: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
        action: impl std::future::Future<Output = anyhow::Result<()>>,
    ) -> anyhow::Result<PhaseFigures> {
        counts.reset();
        let registry0 = self.registry.requests_by();
        let cpu0 = testenv::process::cpu_seconds();
        let start = Instant::now();
        let done = tokio::spawn(done);
        action.await?;
        tokio::time::timeout(self.timeout(), done)
            .await
            .map_err(|_| {
                anyhow::anyhow!("{} not done within {:?}", spec.name(), self.timeout())
            })???;
        let time = start.elapsed().as_secs_f64();
        let settled = harness::settle(counts, &self.registry).await.as_secs_f64();
        let mut registry = self.registry.requests_by();
        for (k, v) in registry0 {
            if let Some(n) = registry.get_mut(&k) {
                *n -= v;
            }
        }
        registry.retain(|_, n| *n > 0);
        let figures = PhaseFigures {
            spec,
            time,
            settled,
            cpu: testenv::process::cpu_seconds() - cpu0,
            requests: counts.by_resource(),
            registry,
        };
        eprintln!(
            "  {}: {} in {:.1}s (+{:.1}s to drain), {} API requests, {} registry requests",
            spec.name(),
            spec.name(),
            time,
            settled,
            figures.total(),
            figures.registry_total()
        );
        Ok(figures)
    }
}

/// The sets' API for the harness.
pub fn sets(bench: &Bench, ns: &str) -> Api<CocoonSet> {
    Api::namespaced(bench.admin.clone(), ns)
}

/// One run's table: every figure of a phase, the operator's as a ratio to the floor's.
fn table(figures: &[(String, Figures)], n: usize) -> Table {
    let names: Vec<&str> = figures.iter().map(|(n, _)| n.as_str()).collect();
    let mut t = Table::new(&names);
    let floor = names.iter().position(|n| *n == "floor");
    for (i, spec) in PhaseSpec::ALL.iter().enumerate() {
        let col = |f: fn(&PhaseFigures) -> f64| -> Vec<Option<f64>> {
            figures
                .iter()
                .map(|(_, x)| x.phases.get(i).map(f))
                .collect()
        };
        let p = spec.name();
        t.row(
            &format!("{p}: time"),
            Unit::Seconds,
            &col(|f| f.time),
            floor,
        );
        t.row(
            &format!("{p}: then drained in"),
            Unit::Seconds,
            &col(|f| f.settled),
            None,
        );
        t.row(
            &format!("{p}: API requests"),
            Unit::Count,
            &col(|f| f.total() as f64),
            floor,
        );
        t.row(
            &format!("{p}: API reads (get+list)"),
            Unit::Count,
            &col(|f| f.reads() as f64),
            floor,
        );
        t.row(
            &format!("{p}: API writes"),
            Unit::Count,
            &col(|f| f.writes() as f64),
            floor,
        );
        t.row(
            &format!("{p}: writes per set"),
            Unit::Count,
            &figures
                .iter()
                .map(|(_, x)| x.phases.get(i).map(|f| f.writes() as f64 / n as f64))
                .collect::<Vec<_>>(),
            floor,
        );
        t.row(
            &format!("{p}: registry (own)"),
            Unit::Count,
            &col(|f| f.registry_own() as f64),
            floor,
        );
        t.row(
            &format!("{p}: registry (all)"),
            Unit::Count,
            &col(|f| f.registry_total() as f64),
            floor,
        );
        t.row(&format!("{p}: CPU"), Unit::Seconds, &col(|f| f.cpu), floor);
    }
    let idle: Vec<Option<f64>> = figures.iter().map(|(_, f)| f.idle_per_minute).collect();
    t.row("requests/min converged", Unit::Count, &idle, None);
    t
}

/// Requests by verb and resource and registry requests by client, method, kind and status,
/// per system and phase.
fn print_details(figures: &[(String, Figures)]) {
    for (name, f) in figures {
        if let Some(startup) = &f.startup {
            println!("  {name} start-up: {}", join(startup));
        }
        for p in &f.phases {
            println!("  {name} {}: API {}", p.spec.name(), join(&p.requests));
            println!("  {name} {}: registry {}", p.spec.name(), join(&p.registry));
        }
        println!("  {name} simulator: {}", f.simulator);
    }
}

fn join(map: &BTreeMap<String, u64>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
