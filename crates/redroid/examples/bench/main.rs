//! Benchmark (not a test): N RedroidInstances to Running and back to nothing, for the
//! operator, for other builds of it (the Go original, an older Flotilla), and for the floor:
//! the same writes done by plain clients with no operator in between. Every figure is also
//! printed as a ratio to the floor (times) or to the first compared build (the rest), measured
//! in the same run.
//!
//! ```bash
//! cargo run --release -p redroid --example redroid-bench -- --instances 1000 --runs 3 \
//!   --compare go=/path/to/redroid-operator/manager \
//!   --compare-rbac go=/path/to/redroid-operator/charts/redroid-operator/templates/clusterrole.yaml
//! ```
//!
//! How each system is measured, on a fresh namespace with the two PVCs bound:
//! - An operator runs as its own process (`--leader-elect=false`, `--watch-namespaces` the
//!   namespace, controller-runtime's flag names, which Flotilla accepts too) under the
//!   ServiceAccount `redroid-operator` of that namespace, bound to its own RBAC: ours is
//!   `deploy/redroid/rbac`, another build's is the ClusterRole of `--compare-rbac` (an
//!   upstream Helm template works as shipped). Its API requests go through a counting proxy;
//!   CPU seconds and peak RSS are read from `/proc/<pid>`, so the harness is not in them.
//! - Create: `kubectl create -f` of N instances `{index: i}`; the clock runs until every
//!   instance reports `Running`. Then the operator's queue drains (no request for 10 s) and its
//!   requests are counted over `--idle-seconds`.
//! - Delete: one collection delete of the instances; the clock runs until no Pod is left in
//!   the namespace (and then until no instance is left: a finalizer left behind shows here).
//!   "collection call" is when the API server answered that delete (it deletes the objects
//!   one after another before it answers), for the floor and the operator alike.
//! - The floor: the same `kubectl create`, while a plain client watching the instances creates
//!   each one's Pod and Service (built by the operator's own builders) and writes its status
//!   once, `--floor-concurrency` at a time; the clock runs until every Pod is Running. Its
//!   delete is one collection delete of the Pods.
//!
//! Systems run one after another in each run, in an order rotated from run to run; with
//! `--runs` above 1 the medians of every figure and of every same-run ratio follow.

mod floor;
mod watch;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use redroid::crd::RedroidInstance;
use testenv::RequestCounts;
use testenv::bench::{Counted, Operator, Table, Unit};

/// The ServiceAccount every operator runs as (in its run's namespace).
const SERVICE_ACCOUNT: &str = "redroid-operator";
/// The operator's queue counts as drained after this long without a request.
const QUIET: Duration = Duration::from_secs(10);
/// Longest wait for the queue to drain.
const MAX_SETTLE: Duration = Duration::from_secs(120);

#[derive(Parser, Clone)]
struct Args {
    /// Number of RedroidInstances.
    #[arg(long, default_value_t = 1000)]
    instances: usize,
    /// Runs; with more than one, medians follow.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Seconds to count requests once converged.
    #[arg(long, default_value_t = 20)]
    idle_seconds: u64,
    /// Give up a phase after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_seconds: u64,
    /// Flotilla's operator binary (default: built from this workspace, this profile).
    #[arg(long)]
    flotilla_binary: Option<PathBuf>,
    /// Another build to measure, `NAME=BINARY` (repeatable).
    #[arg(long)]
    compare: Vec<String>,
    /// The RBAC of a compared build, `NAME=FILE` with a ClusterRole (default: ours).
    #[arg(long)]
    compare_rbac: Vec<String>,
    /// Skip the floor.
    #[arg(long)]
    no_floor: bool,
    /// Skip Flotilla's own operator (measure only the compared builds and the floor).
    #[arg(long)]
    no_flotilla: bool,
    /// Writes the floor's client keeps in flight.
    #[arg(long, default_value_t = 16)]
    floor_concurrency: usize,
}

/// What is measured.
#[derive(Clone, Debug)]
enum System {
    Floor,
    Operator {
        name: String,
        binary: PathBuf,
        rbac: Option<PathBuf>,
    },
}

impl System {
    fn name(&self) -> &str {
        match self {
            System::Floor => "floor",
            System::Operator { name, .. } => name,
        }
    }
}

/// The figures of one system in one run.
#[derive(Clone, Debug, Default)]
struct Figures {
    running: f64,
    writes_done: Option<f64>,
    deleted: f64,
    delete_returned: f64,
    instances_gone: Option<f64>,
    cpu_create: Option<f64>,
    cpu_delete: Option<f64>,
    peak_rss_kib: Option<f64>,
    requests: Option<RequestCounts>,
    delete_requests: Option<RequestCounts>,
    idle_requests: Option<f64>,
}

/// What every measurement shares.
struct Bench {
    args: Args,
    admin: kube::Client,
    counted: Counted,
    instances_file: PathBuf,
    logs: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let systems = systems(&args)?;
    let admin = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let logs = std::env::temp_dir().join(format!("redroid-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    let bench = Bench {
        instances_file: logs.join("instances.yaml"),
        counted: Counted::start().await?,
        args: args.clone(),
        admin,
        logs,
    };
    let mut tables = Vec::new();
    for run in 0..args.runs {
        let mut order = systems.clone();
        order.rotate_left(run % systems.len());
        let load = testenv::bench::load_average();
        eprintln!(
            "run {}: {} (load average {:.2} {:.2} {:.2})",
            run + 1,
            order
                .iter()
                .map(System::name)
                .collect::<Vec<_>>()
                .join(", "),
            load.0,
            load.1,
            load.2
        );
        let mut figures = Vec::new();
        for system in &order {
            let f = bench.measure(system).await?;
            eprintln!("  {}: {f:?}", system.name());
            figures.push((system.name().to_owned(), f));
        }
        figures.sort_by_key(|(name, _)| systems.iter().position(|s| s.name() == name));
        let table = bench.table(&figures);
        let load = testenv::bench::load_average();
        println!(
            "\nredroid benchmark, run {} of {}: {} instances (load average {:.2} {:.2} {:.2} at its end)",
            run + 1,
            args.runs,
            args.instances,
            load.0,
            load.1,
            load.2
        );
        print!("{}", table.render());
        print_requests(&figures);
        tables.push(table);
    }
    if tables.len() > 1 {
        println!(
            "\nredroid benchmark: medians of {} runs, {} instances (ratios: medians of the same-run ratios)",
            tables.len(),
            args.instances
        );
        print!("{}", Table::median(&tables).render());
    }
    println!("  operator logs: {}", bench.logs.display());
    Ok(())
}

/// The systems to measure, in their column order: the floor, Flotilla, then the compared builds.
fn systems(args: &Args) -> anyhow::Result<Vec<System>> {
    let mut out = Vec::new();
    if !args.no_floor {
        out.push(System::Floor);
    }
    if !args.no_flotilla {
        let binary = match &args.flotilla_binary {
            Some(b) => b.clone(),
            None => testenv::bench::build_binary("redroid", "redroid-operator")?,
        };
        out.push(System::Operator {
            name: "flotilla".into(),
            binary,
            rbac: None,
        });
    }
    let rbac = pairs(&args.compare_rbac)?;
    for (name, binary) in pairs(&args.compare)? {
        let rbac = rbac.iter().find(|(n, _)| *n == name).map(|(_, f)| f.into());
        out.push(System::Operator {
            name,
            binary: binary.into(),
            rbac,
        });
    }
    anyhow::ensure!(!out.is_empty(), "nothing to measure");
    Ok(out)
}

fn pairs(list: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    list.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| anyhow::anyhow!("expected NAME=VALUE, got {s:?}"))
        })
        .collect()
}

impl Bench {
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.args.timeout_seconds)
    }

    async fn measure(&self, system: &System) -> anyhow::Result<Figures> {
        let ns = format!("rbench-{}-{}", system.name(), std::process::id() % 100_000);
        let ns = format!("{ns}-{}", Instant::now().elapsed().as_nanos() % 10_000);
        self.namespace(&ns).await?;
        write_instances(&self.instances_file, &ns, self.args.instances)?;
        let result = match system {
            System::Floor => floor::measure(self, &ns).await,
            System::Operator { name, binary, rbac } => {
                self.operator(&ns, name, binary, rbac.as_deref()).await
            }
        };
        self.drop_namespace(&ns).await?;
        result
    }

    async fn namespace(&self, ns: &str) -> anyhow::Result<()> {
        let obj: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(self.admin.clone())
            .create(&PostParams::default(), &obj)
            .await?;
        for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
            testenv::bound_claim(&self.admin, ns, claim).await?;
        }
        Ok(())
    }

    /// Deletes the namespace and waits until it is gone, so the next system starts on a
    /// quiet plane.
    async fn drop_namespace(&self, ns: &str) -> anyhow::Result<()> {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        api.delete(ns, &DeleteParams::default()).await?;
        testenv::wait_deleted(&api, ns, self.timeout()).await
    }

    async fn operator(
        &self,
        ns: &str,
        name: &str,
        binary: &Path,
        rbac: Option<&Path>,
    ) -> anyhow::Result<Figures> {
        let _binding = match rbac {
            None => {
                let dir = testenv::workspace_root().join("deploy/redroid/rbac");
                testenv::rbac::install_rbac(&self.admin, &dir, "redroid-system", ns).await?
            }
            Some(file) => {
                let rules = testenv::bench::rules_of(&std::fs::read_to_string(file)?)?;
                let role = format!("redroid-bench-{name}");
                testenv::bench::grant_rules(&self.admin, ns, SERVICE_ACCOUNT, &role, rules).await?
            }
        };
        let token = testenv::service_account_token(&self.admin, ns, SERVICE_ACCOUNT).await?;
        let kubeconfig = self.logs.join(format!("{ns}.kubeconfig"));
        self.counted.kubeconfig(&kubeconfig, &token, ns)?;
        let probe = format!("127.0.0.1:{}", testenv::process::free_port()?);
        let args = vec![
            "--leader-elect=false".to_owned(),
            "--metrics-bind-address=127.0.0.1:0".to_owned(),
            format!("--health-probe-bind-address={probe}"),
            format!("--watch-namespaces={ns}"),
        ];
        let log = self.logs.join(format!("{ns}.log"));
        let mut op = Operator::spawn(name, binary, &args, &[], &kubeconfig, &log)?;
        testenv::bench::wait_ready(&mut op, &probe, Duration::from_secs(60)).await?;
        let counts = self.counted.counts();
        let figures = self.drive(&mut op, ns, &counts).await;
        op.stop();
        figures
    }

    async fn drive(
        &self,
        op: &mut Operator,
        ns: &str,
        counts: &RequestCounts,
    ) -> anyhow::Result<Figures> {
        let n = self.args.instances;
        let instances: Api<RedroidInstance> = Api::namespaced(self.admin.clone(), ns);
        counts.reset();
        let cpu0 = op.cpu_seconds();
        let start = Instant::now();
        let running = watch::count_instances_running(instances.clone(), n);
        create_instances(&self.instances_file)?;
        tokio::time::timeout(self.timeout(), running).await??;
        let running = start.elapsed().as_secs_f64();
        let cpu_create = op.cpu_seconds() - cpu0;
        op.check_alive()?;
        settle(counts).await;
        let requests = snapshot(counts);
        counts.reset();
        tokio::time::sleep(Duration::from_secs(self.args.idle_seconds)).await; // the idle window
        let idle = counts.total() as f64 * 60.0 / self.args.idle_seconds.max(1) as f64;

        counts.reset();
        let cpu1 = op.cpu_seconds();
        let start = Instant::now();
        // The API server deletes a collection one object after another and gives up on the
        // request after its timeout (60 s), leaving the rest: at N = 5000 the call is repeated
        // until it completes.
        let deadline = start + self.timeout();
        while let Err(e) = instances
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
        {
            anyhow::ensure!(Instant::now() < deadline, "collection delete: {e}");
            eprintln!(
                "  collection delete cut after {:.1}s ({e}); again",
                start.elapsed().as_secs_f64()
            );
        }
        let delete_returned = start.elapsed().as_secs_f64();
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), ns);
        watch::until_empty(&pods, self.timeout()).await?;
        let deleted = start.elapsed().as_secs_f64();
        let cpu_delete = op.cpu_seconds() - cpu1;
        watch::until_empty(&instances, self.timeout()).await?;
        let instances_gone = start.elapsed().as_secs_f64();
        let delete_requests = snapshot(counts);
        Ok(Figures {
            running,
            writes_done: None,
            deleted,
            delete_returned,
            instances_gone: Some(instances_gone),
            cpu_create: Some(cpu_create),
            cpu_delete: Some(cpu_delete),
            peak_rss_kib: Some(op.peak_rss_kib() as f64),
            requests: Some(requests),
            delete_requests: Some(delete_requests),
            idle_requests: Some(idle),
        })
    }

    /// One run's table: times as ratios to the floor, the rest to the first operator after
    /// Flotilla (the original), or none.
    fn table(&self, figures: &[(String, Figures)]) -> Table {
        let names: Vec<&str> = figures.iter().map(|(n, _)| n.as_str()).collect();
        let mut t = Table::new(&names);
        let floor = names.iter().position(|n| *n == "floor");
        let flotilla = names.iter().position(|n| *n == "flotilla");
        // The reference for operator-only figures: the first build compared with Flotilla.
        let original = names.iter().position(|n| *n != "floor" && *n != "flotilla");
        let n = self.args.instances as f64;
        let col = |f: fn(&Figures) -> Option<f64>| -> Vec<Option<f64>> {
            figures.iter().map(|(_, x)| f(x)).collect()
        };
        t.row(
            "all Running",
            Unit::Seconds,
            &col(|f| Some(f.running)),
            floor,
        );
        t.row(
            "floor: writes done",
            Unit::Seconds,
            &col(|f| f.writes_done),
            None,
        );
        t.row(
            "delete: Pods gone",
            Unit::Seconds,
            &col(|f| Some(f.deleted)),
            floor,
        );
        t.row(
            "delete: collection call",
            Unit::Seconds,
            &col(|f| Some(f.delete_returned)),
            floor,
        );
        t.row(
            "delete: instances gone",
            Unit::Seconds,
            &col(|f| f.instances_gone),
            floor,
        );
        t.row(
            "CPU create→Running",
            Unit::Seconds,
            &col(|f| f.cpu_create),
            original,
        );
        let per = figures
            .iter()
            .map(|(_, f)| f.cpu_create.map(|c| c * 1000.0 / n))
            .collect::<Vec<_>>();
        t.row("CPU ms per instance", Unit::Count, &per, original);
        t.row(
            "CPU delete",
            Unit::Seconds,
            &col(|f| f.cpu_delete),
            original,
        );
        t.row("peak RSS", Unit::Kib, &col(|f| f.peak_rss_kib), original);
        let writes = figures
            .iter()
            .map(|(_, f)| f.requests.as_ref().map(|c| c.writes() as f64 / n))
            .collect::<Vec<_>>();
        t.row("writes per instance", Unit::Count, &writes, original);
        let reqs = figures
            .iter()
            .map(|(_, f)| f.requests.as_ref().map(|c| c.total() as f64))
            .collect::<Vec<_>>();
        t.row("requests to drained", Unit::Count, &reqs, original);
        let dreqs = figures
            .iter()
            .map(|(_, f)| f.delete_requests.as_ref().map(|c| c.total() as f64))
            .collect::<Vec<_>>();
        t.row("requests during delete", Unit::Count, &dreqs, original);
        t.row(
            "requests/min converged",
            Unit::Count,
            &col(|f| f.idle_requests),
            None,
        );
        let _ = flotilla;
        t
    }
}

fn snapshot(counts: &RequestCounts) -> RequestCounts {
    counts.snapshot()
}

/// Waits until no request came for [`QUIET`] (at most [`MAX_SETTLE`]).
async fn settle(counts: &RequestCounts) {
    let start = Instant::now();
    let mut last = (counts.total(), Instant::now());
    while last.1.elapsed() < QUIET && start.elapsed() < MAX_SETTLE {
        tokio::time::sleep(Duration::from_millis(500)).await; // benchmark sampling interval
        if counts.total() != last.0 {
            last = (counts.total(), Instant::now());
        }
    }
}

fn print_requests(figures: &[(String, Figures)]) {
    for (name, f) in figures {
        for (what, counts) in [("create", &f.requests), ("delete", &f.delete_requests)] {
            let Some(c) = counts else { continue };
            let by: Vec<String> = c
                .by_resource()
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            println!("  {name} requests ({what}): {}", by.join(", "));
        }
    }
}

fn write_instances(file: &Path, ns: &str, n: usize) -> anyhow::Result<()> {
    let mut yaml = String::new();
    for i in 0..n {
        yaml.push_str(&format!(
            "---\napiVersion: redroid.isning.moe/v1alpha1\nkind: RedroidInstance\nmetadata: {{name: android-{i}, namespace: {ns}}}\nspec: {{index: {i}}}\n"
        ));
    }
    std::fs::write(file, yaml)?;
    Ok(())
}

/// `kubectl create -f` of the instances, as a user would.
fn create_instances(file: &Path) -> anyhow::Result<()> {
    let state = testenv::plane::read_state().ok_or_else(|| anyhow::anyhow!("no plane"))?;
    let status = std::process::Command::new(state.bin_dir.join("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            testenv::kubeconfig_path().display()
        ))
        .args(["create", "-f", &file.display().to_string(), "-o", "name"])
        .stdout(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "kubectl create failed");
    Ok(())
}
