//! Reliability under chaos: the real `cocoon-operator` binary, as its own process under its
//! shipped RBAC, talks to the API server through the fault-injecting proxy (409, 429, 500,
//! 503, resets before and after applied writes, latency, cut watches, 410 Gone) and is
//! SIGKILLed and restarted every 2–8 s, while the `lifecycle` scenario (`flow`) runs against
//! a real OCI registry and the vk-cocoon simulator (which, like the registry, is not behind
//! the proxy: it plays the nodes). The invariants (`invariants`) are checked after every watch
//! event, the registry ones twice a second; at the end the faults stop, the state must
//! converge to the fault-free run's, the request rate must stay within bounds, and deletion
//! (itself under chaos) must release every finalizer and leave no pod behind.
//!
//! The suite runs the baseline and a small fixed set of seeds; `cargo xtask chaos --operator
//! cocoon --runs N` soaks, `--seed S` replays one seed (docs/testing.md).

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
use testenv::registry::RegistryServer;
use tokio_util::sync::CancellationToken;
use vksim::{SimConfig, Simulator};

const OPERATOR_SA: &str = "cocoon-operator";
const DEPLOY_NAMESPACE: &str = "cocoon-system";
/// The seeds the test suite runs (the soak runs many more).
const SUITE_SEEDS: &[u64] = &[1];
/// The scenario's limits (the shared hot-loop bounds: sets waiting on vk-cocoon are polled
/// every few seconds, and a converged operator polls none).
const BOUNDS: Bounds = Bounds::standard(Duration::from_secs(120), flow::STEP);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_converges_under_faults_and_kills() {
    let reports = scenario::soak(SUITE_SEEDS, run).await;
    scenario::assert_clean(&reports);
}

/// Everything one run sets up, torn down when dropped.
struct World {
    base: Base,
    registry: RegistryServer,
    sim: Option<Simulator>,
}

async fn world(seed: Option<u64>) -> anyhow::Result<World> {
    let setup = Setup {
        crds: cocoon::crd::crds(),
        prefix: "co-chaos",
        rbac: testenv::workspace_root().join("deploy/cocoon/rbac"),
        deploy_namespace: DEPLOY_NAMESPACE,
    };
    let base = Base::new(setup, seed).await?;
    let registry = RegistryServer::start().await?;
    let cfg = SimConfig {
        registry_url: registry.url(),
        registry_prefix: None,
        namespace: Some(base.ns.name.clone()),
        nodes: vksim::Nodes::default(),
        pool: vksim::DEFAULT_POOL.to_owned(),
    };
    let sim = Simulator::start(base.admin.clone(), cfg).await?;
    Ok(World {
        base,
        registry,
        sim: Some(sim),
    })
}

/// The observer (continuous checks over watch caches) and the registry prober.
struct Watching {
    obs: Observer,
    prober: (CancellationToken, tokio::task::JoinHandle<()>),
    stores: invariants::Stores,
}

async fn observe(w: &World, violations: &Violations) -> Watching {
    let mut obs = Observer::new();
    let (c, ns, all) = (&w.base.admin, &w.base.ns.name, watcher::Config::default);
    let stores = invariants::Stores {
        pods: obs.watch(Api::namespaced(c.clone(), ns), all()),
        sets: obs.watch(Api::namespaced(c.clone(), ns), all()),
        hibernations: obs.watch(Api::namespaced(c.clone(), ns), all()),
    };
    let mut memory = invariants::Memory::default();
    let (s, v) = (stores.clone(), violations.clone());
    obs.check(move || invariants::check(&s, &mut memory, &v));
    obs.ready().await;
    let stop = CancellationToken::new();
    let (token, s, v) = (stop.clone(), stores.clone(), violations.clone());
    let (client, ns, registry) = (
        w.base.admin.clone(),
        w.base.ns.name.clone(),
        w.registry.url(),
    );
    let task = tokio::spawn(async move {
        loop {
            invariants::snapshots(&s, &client, &ns, &registry, &v).await;
            tokio::select! {
                _ = token.cancelled() => break,
                _ = tokio::time::sleep(invariants::SNAPSHOT_PERIOD) => {} // the probing period
            }
        }
    });
    Watching {
        obs,
        prober: (stop, task),
        stores,
    }
}

async fn start_operator(w: &World, seed: Option<u64>) -> anyhow::Result<OperatorUnderTest> {
    let dir = w.base.dir(env!("CARGO_TARGET_TMPDIR"));
    let launch = Launch {
        binary: Path::new(env!("CARGO_BIN_EXE_cocoon-operator")),
        args: vec![
            "--leader-elect=true".into(),
            "--metrics-addr=127.0.0.1:0".into(),
            "--probe-addr=127.0.0.1:0".into(),
            "--log-level=info,kit::leader=debug".into(),
            format!("--oci-registry={}", w.registry.url()),
            format!("--watch-namespace={}", w.base.ns.name),
        ],
        env: Vec::new(),
        namespace: &w.base.ns.name,
        service_account: OPERATOR_SA,
        dir: &dir,
        plan: scenario::plan(seed),
    };
    OperatorUnderTest::start(&w.base.admin, launch).await
}

async fn run(seed: Option<u64>, baseline: Option<Arc<Value>>) -> (RunReport, Option<Value>) {
    let started = Instant::now();
    let mut w = world(seed)
        .await
        .expect("the scenario's namespace, registry, simulator and RBAC");
    let violations = Violations::new();
    let watching = observe(&w, &violations).await;
    let mut op = start_operator(&w, seed)
        .await
        .expect("the operator process");
    let registry = w.registry.url();
    let user = flow::User {
        client: w.base.admin.clone(),
        ns: w.base.ns.name.clone(),
        registry: registry.clone(),
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
    let Watching {
        obs,
        prober: (stop, task),
        stores,
    } = watching;
    obs.check_now();
    invariants::snapshots(
        &stores,
        &w.base.admin,
        &w.base.ns.name,
        &registry,
        &violations,
    )
    .await;
    stop.cancel();
    let _ = task.await;
    obs.stop().await;
    if let Some(sim) = w.sim.take() {
        sim.stop().await;
    }
    let state = driven.final_state.clone();
    let report = driven
        .finish(op, ("cocoon", "lifecycle", seed), started, &violations)
        .await;
    (report, state)
}
