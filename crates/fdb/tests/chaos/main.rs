//! Reliability under chaos: the real `fdb-operator` binary, as its own process under its
//! shipped RBAC with leader election on, talks to the API server through the fault-injecting
//! proxy (409, 429, 500, 503, resets before and after applied writes, latency, cut watches,
//! 410 Gone) and is SIGKILLed and restarted every 2–8 s, while the `lifecycle` scenario
//! (`flow`) creates a cluster, scales its storage down (exclusion before removal) and changes a
//! knob (a bounce). The database is the simulator behind the operator's real CLI path: the
//! operator runs `fdbcli` from a `$FDB_BINARY_DIR` of `fdb-sim` front ends, served from this
//! test process, whose processes follow the pods (not behind the proxy: it plays the
//! database and the pods' monitors).
//!
//! Checked throughout: no pod goes while its process still holds data
//! (`pod_gone_holding_data`), `configure new` runs at most once (`configured_twice`), no
//! process group ID appears twice in the status (`duplicate_process_group`). At the end the
//! faults stop, the state must converge to the fault-free run's (which includes one `configure
//! new`, one bounce and an empty exclusion list), the request rate must stay within bounds, and
//! deletion (itself under chaos) must leave no pod behind.
//!
//! The suite runs the baseline and a small fixed set of seeds; `cargo xtask chaos --operator
//! fdb --runs N` soaks, `--seed S` replays one seed (docs/testing.md).

mod flow;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fdb::admin::fake::FakeDatabase;
use fdb::crd::FoundationDBCluster;
use fdb::sim::follow::{CLASS_LABEL, CLUSTER_LABEL, ID_LABEL};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use serde_json::Value;
use testenv::chaos::scenario::{self, Launch, OperatorUnderTest, RunReport};
use testenv::chaos::{Base, Bounds, Observer, Setup, Violations, drive};
use tokio_util::sync::CancellationToken;

const OPERATOR_SA: &str = "fdb-kubernetes-operator-controller-manager";
const DEPLOY_NAMESPACE: &str = "fdb-operator-system";
/// The seeds the test suite runs (the soak runs many more).
const SUITE_SEEDS: &[u64] = &[1];
/// The scenario's limits (the shared hot-loop bounds: a cluster being reconciled is requeued
/// every 10–15 s, a converged one is not).
const BOUNDS: Bounds = Bounds::standard(Duration::from_secs(180), flow::STEP);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_converges_under_faults_and_kills() {
    let reports = scenario::soak(SUITE_SEEDS, run).await;
    scenario::assert_clean(&reports);
}

/// Everything one run sets up, torn down when dropped.
struct World {
    base: Base,
    /// `$FDB_BINARY_DIR` of the `fdb-sim` front ends.
    binary_dir: PathBuf,
    /// The simulated database of the scenario's cluster.
    db: FakeDatabase,
    /// Stops the simulator's server and the pod follower.
    token: CancellationToken,
}

impl Drop for World {
    fn drop(&mut self) {
        self.token.cancel();
        let _ = std::fs::remove_dir_all(&self.binary_dir);
    }
}

async fn world(seed: Option<u64>, violations: &Violations) -> anyhow::Result<World> {
    let setup = Setup {
        crds: fdb::crd::crds(),
        prefix: "fdb-chaos",
        rbac: testenv::workspace_root().join("deploy/fdb/rbac"),
        deploy_namespace: DEPLOY_NAMESPACE,
    };
    let base = Base::new(setup, seed).await?;
    // A short path: the front ends reach the server over a Unix socket in this directory.
    let binary_dir = std::env::temp_dir().join(format!("fdb-sim-{}", base.ns.name));
    let _ = std::fs::remove_dir_all(&binary_dir);
    let exe = Path::new(env!("CARGO_BIN_EXE_fdb-sim"));
    let socket = fdb::sim::install(&binary_dir, exe, &[fdb::sim::follow::DEFAULT_VERSION])?;
    let listener = tokio::net::UnixListener::bind(&socket)?;
    // Excluded processes keep their data for a few status reads, so kills land while it moves.
    let registry = fdb::sim::server::Registry::new().with_drain_reads(4);
    let token = CancellationToken::new();
    tokio::spawn(fdb::sim::server::serve(
        listener,
        registry.clone(),
        token.clone(),
    ));
    let db = registry.database(flow::CLUSTER);
    tokio::spawn(follow(
        base.admin.clone(),
        base.ns.name.clone(),
        db.clone(),
        violations.clone(),
        token.clone(),
    ));
    Ok(World {
        base,
        binary_dir,
        db,
        token,
    })
}

/// Plays the pods' monitors and the database's processes: every 200 ms the processes follow
/// the pods, and the database's clock moves 5 s (so the recovery and uptime gates, counted in
/// the database's time, open within seconds). While the cluster lives, a pod that is gone
/// while its process still holds data is a violation.
async fn follow(
    admin: kube::Client,
    ns: String,
    db: FakeDatabase,
    violations: Violations,
    token: CancellationToken,
) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let configs: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let clusters: Api<FoundationDBCluster> = Api::namespaced(admin, &ns);
    let cm_name = format!("{}-config", flow::CLUSTER);
    let lp = ListParams::default().labels(&format!("{CLUSTER_LABEL}={}", flow::CLUSTER));
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    while !token.is_cancelled() {
        tick.tick().await;
        let live = match clusters.get_opt(flow::CLUSTER).await {
            Ok(Some(c)) => c.metadata.deletion_timestamp.is_none(),
            Ok(None) => false,
            Err(_) => continue,
        };
        let Ok(mut list) = pods.list(&lp).await else {
            continue;
        };
        if live {
            for id in fdb::sim::follow::gone_holding_data(&db, &list.items) {
                violations.record(
                    "pod_gone_holding_data",
                    format!("the pod of {id} is gone while its process holds data"),
                );
            }
        }
        fdb::sim::follow::play_monitors(&pods, &configs, &cm_name, &mut list.items).await;
        db.sync_pods(
            &list.items,
            CLASS_LABEL,
            ID_LABEL,
            fdb::sim::follow::DEFAULT_VERSION,
        );
        db.advance(5);
    }
}

/// The continuous checks: one `configure new` at most, and no process group ID twice.
fn observe(w: &World, violations: &Violations) -> Observer {
    let mut obs = Observer::new();
    let clusters: Store<FoundationDBCluster> = obs.watch(
        Api::namespaced(w.base.admin.clone(), &w.base.ns.name),
        watcher::Config::default(),
    );
    let (v, db) = (violations.clone(), w.db.clone());
    obs.check(move || {
        let configures = flow::configure_new_calls(&db);
        if configures > 1 {
            v.record(
                "configured_twice",
                format!("`configure new` ran {configures} times"),
            );
        }
        for c in clusters.state() {
            let mut seen = BTreeSet::new();
            for g in c.status.iter().flat_map(|s| &s.process_groups) {
                if !seen.insert(g.process_group_id.to_string()) {
                    v.record(
                        "duplicate_process_group",
                        format!("{} twice in the status", g.process_group_id),
                    );
                }
            }
        }
    });
    obs
}

async fn start_operator(w: &World, seed: Option<u64>) -> anyhow::Result<OperatorUnderTest> {
    let dir = w.base.dir(env!("CARGO_TARGET_TMPDIR"));
    let ns = &w.base.ns.name;
    let launch = Launch {
        binary: Path::new(env!("CARGO_BIN_EXE_fdb-operator")),
        args: vec![
            "--enable-leader-election".into(),
            format!("--lease-namespace={ns}"),
            format!("--watch-namespace={ns}"),
            format!("--fdb-binary-dir={}", w.binary_dir.display()),
            "--minimum-recovery-time-for-exclusion=0".into(),
            "--minimum-recovery-time-for-inclusion=0".into(),
            "--metrics-addr=127.0.0.1:0".into(),
            "--probe-addr=127.0.0.1:0".into(),
            "--zap-log-level=info,fdb=debug,kit::leader=debug".into(),
        ],
        env: Vec::new(),
        namespace: ns,
        service_account: OPERATOR_SA,
        dir: &dir,
        plan: scenario::plan(seed),
    };
    OperatorUnderTest::start(&w.base.admin, launch).await
}

async fn run(seed: Option<u64>, baseline: Option<Arc<Value>>) -> (RunReport, Option<Value>) {
    let started = Instant::now();
    let violations = Violations::new();
    let w = world(seed, &violations)
        .await
        .expect("the scenario's namespace, RBAC and simulated database");
    let mut obs = observe(&w, &violations);
    obs.ready().await;
    let mut op = start_operator(&w, seed)
        .await
        .expect("the operator process");
    let user = flow::User::new(w.base.admin.clone(), w.base.ns.name.clone(), w.db.clone());
    let driven = drive(
        &mut op,
        &user,
        seed,
        baseline.as_deref(),
        &violations,
        BOUNDS,
    )
    .await;
    obs.check_now();
    obs.stop().await;
    let state = driven.final_state.clone();
    let report = driven
        .finish(op, ("fdb", "lifecycle", seed), started, &violations)
        .await;
    (report, state)
}
