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

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Api;
use kube::runtime::watcher;
use serde_json::Value;
use testenv::chaos::scenario::{self, Launch, OperatorUnderTest, RunReport};
use testenv::chaos::{Base, Bounds, Observer, Setup, Violations, drive};

const OPERATOR_SA: &str = "redroid-operator";
const DEPLOY_NAMESPACE: &str = "redroid-system";
/// The seeds the test suite runs (the soak runs many more).
const SUITE_SEEDS: &[u64] = &[1, 2];
/// The scenario's limits (the shared hot-loop bounds: the fault-free run peaks at about
/// 45 requests/s while the scenario creates or deletes seven objects at once).
const BOUNDS: Bounds = Bounds::standard(Duration::from_secs(120), flow::STEP);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_converges_under_faults_and_kills() {
    let reports = scenario::soak(SUITE_SEEDS, run).await;
    scenario::assert_clean(&reports);
}

/// Everything one run sets up (the base and the instances' volumes), torn down when dropped.
async fn world(seed: Option<u64>) -> anyhow::Result<Base> {
    let setup = Setup {
        crds: redroid::crd::crds(),
        prefix: "rd-chaos",
        rbac: testenv::workspace_root().join("deploy/redroid/rbac"),
        deploy_namespace: DEPLOY_NAMESPACE,
    };
    let base = Base::new(setup, seed).await?;
    for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
        testenv::bound_claim(&base.admin, &base.ns.name, claim).await?;
    }
    Ok(base)
}

async fn observe(w: &Base, violations: &Violations) -> Observer {
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

async fn start_operator(w: &Base, seed: Option<u64>) -> anyhow::Result<OperatorUnderTest> {
    let dir = w.dir(env!("CARGO_TARGET_TMPDIR"));
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
