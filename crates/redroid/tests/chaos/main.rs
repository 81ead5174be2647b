//! Reliability under chaos: the real `redroid-operator` binary, as its own process under its
//! shipped RBAC, talks to the API server through the fault-injecting proxy (409, 429, 500,
//! 503, resets before and after applied writes, latency, cut watches, 410 Gone) and is
//! SIGKILLed and restarted every 2–8 s, while the `lifecycle` scenario (`flow`) runs. The
//! invariants (`invariants`) are checked after every watch event; at the end the faults stop,
//! the state must converge to the fault-free run's, the request rate must stay within bounds,
//! and deletion (itself under chaos) must release every finalizer and leave no child behind.
//!
//! The suite runs the baseline and a small fixed set of seeds; `cargo xtask chaos --operator
//! redroid --runs N` soaks, `--seed S` replays one seed (docs/testing.md).

mod flow;
mod invariants;
mod state;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Api;
use kube::runtime::watcher;
use serde_json::Value;
use testenv::chaos::scenario::{self, Launch, OperatorUnderTest, RunReport};
use testenv::chaos::{Bounds, Flow, Observer, Violations, drive};

const OPERATOR_SA: &str = "redroid-operator";
const DEPLOY_NAMESPACE: &str = "redroid-system";
/// The seeds the test suite runs (the soak runs many more).
const SUITE_SEEDS: &[u64] = &[1, 2];
/// The scenario's limits.
const BOUNDS: Bounds = Bounds {
    quiet_window: Duration::from_secs(10),
    // Once converged, requests per second (reads and writes; watches excluded). A converged
    // operator renews its Lease (a GET and a PUT every 2 s: 1/s); a watch re-established after
    // the last cut may trigger one more pass (five reads and a write): 1.6/s over the window.
    // A requeue loop runs at tens per second.
    quiet: 2.5,
    // During the run, over any 5 s window. The fault-free run peaks at about 45/s while the
    // scenario creates or deletes seven objects at once (each costs one pass of reads and a
    // few writes); a reconcile that requeues itself without waiting runs at hundreds.
    peak: 80.0,
    converge: Duration::from_secs(120),
    teardown: flow::STEP,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_converges_under_faults_and_kills() {
    let reports = scenario::soak(SUITE_SEEDS, run).await;
    scenario::assert_clean(&reports);
}

/// Everything one run sets up, torn down when dropped.
struct World {
    admin: kube::Client,
    ns: testenv::TestNamespace,
    _rbac: testenv::rbac::ClusterCleanup,
}

async fn world(seed: Option<u64>) -> anyhow::Result<World> {
    let admin = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let prefix = seed.map_or_else(|| "rd-chaos-base".to_owned(), |s| format!("rd-chaos-{s}"));
    let ns = testenv::TestNamespace::new(&admin, &prefix).await;
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/redroid/rbac");
    let rbac = testenv::rbac::install_rbac(&admin, &rbac, DEPLOY_NAMESPACE, &ns.name).await?;
    for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
        testenv::bound_claim(&admin, &ns.name, claim).await?;
    }
    Ok(World {
        admin,
        ns,
        _rbac: rbac,
    })
}

async fn observe(w: &World, violations: &Violations) -> Observer {
    let mut obs = Observer::new();
    let (c, ns, all) = (&w.admin, &w.ns.name, watcher::Config::default);
    let stores = invariants::Stores {
        pods: obs.watch(Api::namespaced(c.clone(), ns), all()),
        services: obs.watch(Api::namespaced(c.clone(), ns), all()),
        instances: obs.watch(Api::namespaced(c.clone(), ns), all()),
        tasks: obs.watch(Api::namespaced(c.clone(), ns), all()),
        jobs: obs.watch(Api::namespaced(c.clone(), ns), all()),
    };
    let mut memory = invariants::Memory::default();
    let v = violations.clone();
    obs.check(move || invariants::check(&stores, &mut memory, &v));
    obs.ready().await;
    obs
}

async fn start_operator(w: &World, seed: Option<u64>) -> anyhow::Result<OperatorUnderTest> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("chaos")
        .join(&w.ns.name);
    let launch = Launch {
        binary: Path::new(env!("CARGO_BIN_EXE_redroid-operator")),
        args: [
            "--leader-elect=true",
            "--metrics-addr=127.0.0.1:0",
            "--probe-addr=127.0.0.1:0",
            "--log-level=info,kit::leader=debug",
        ]
        .map(String::from)
        .to_vec(),
        env: vec![("WATCH_NAMESPACES".into(), w.ns.name.clone())],
        namespace: &w.ns.name,
        service_account: OPERATOR_SA,
        dir: &dir,
        plan: scenario::plan(seed),
    };
    OperatorUnderTest::start(&w.admin, launch).await
}

impl Flow for flow::User {
    fn run(&self) -> impl Future<Output = anyhow::Result<()>> {
        flow::run(self)
    }
    fn capture(&self) -> impl Future<Output = anyhow::Result<Value>> {
        state::capture(&self.client, &self.ns)
    }
    fn settled(&self, state: &Value) -> bool {
        flow::settled(state)
    }
    fn teardown(&self) -> impl Future<Output = anyhow::Result<()>> {
        flow::teardown(self)
    }
    fn leftovers(&self) -> impl Future<Output = anyhow::Result<Vec<(&'static str, String)>>> {
        flow::leftovers(self)
    }
}

async fn run(seed: Option<u64>, baseline: Option<Arc<Value>>) -> (RunReport, Option<Value>) {
    let started = Instant::now();
    let w = world(seed)
        .await
        .expect("the scenario's namespace, RBAC and volumes");
    let violations = Violations::new();
    let obs = observe(&w, &violations).await;
    let mut op = start_operator(&w, seed)
        .await
        .expect("the operator process");
    let user = flow::User {
        client: w.admin.clone(),
        ns: w.ns.name.clone(),
    };
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
        .finish(op, ("redroid", "lifecycle", seed), started, &violations)
        .await;
    (report, state)
}
