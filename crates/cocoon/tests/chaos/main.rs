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

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Api;
use kube::runtime::watcher;
use serde_json::Value;
use testenv::chaos::scenario::{self, Launch, OperatorUnderTest, RunReport};
use testenv::chaos::{Bounds, Flow, Observer, Violations, drive};
use testenv::registry::RegistryServer;
use tokio_util::sync::CancellationToken;
use vksim::{SimConfig, Simulator};

const OPERATOR_SA: &str = "cocoon-operator";
const DEPLOY_NAMESPACE: &str = "cocoon-system";
/// The seeds the test suite runs (the soak runs many more).
const SUITE_SEEDS: &[u64] = &[1];
/// The scenario's limits.
const BOUNDS: Bounds = Bounds {
    quiet_window: Duration::from_secs(10),
    // Once converged, requests per second (reads and writes; watches excluded). A converged
    // operator renews its Lease (a GET and a PUT every 2 s: 1/s) and polls a set only while it
    // waits on the VM side (none is waiting once converged); a re-established watch may cost
    // one more pass. A requeue loop runs at tens per second.
    quiet: 2.5,
    // During the run, over any 5 s window: sets waiting on vk-cocoon are polled every few
    // seconds and every transition costs a pass of reads and a few writes; a reconcile that
    // requeues itself without waiting runs at hundreds.
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
    registry: RegistryServer,
    sim: Option<Simulator>,
    _rbac: testenv::rbac::ClusterCleanup,
}

async fn world(seed: Option<u64>) -> anyhow::Result<World> {
    let admin = testenv::client().await;
    for crd in cocoon::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let prefix = seed.map_or_else(|| "co-chaos-base".to_owned(), |s| format!("co-chaos-{s}"));
    let ns = testenv::TestNamespace::new(&admin, &prefix).await;
    let registry = RegistryServer::start().await?;
    let cfg = SimConfig {
        registry_url: registry.url(),
        registry_prefix: None,
        namespace: Some(ns.name.clone()),
        nodes: vksim::Nodes::default(),
        pool: vksim::DEFAULT_POOL.to_owned(),
    };
    let sim = Simulator::start(admin.clone(), cfg).await?;
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/cocoon/rbac");
    let rbac = testenv::rbac::install_rbac(&admin, &rbac, DEPLOY_NAMESPACE, &ns.name).await?;
    Ok(World {
        admin,
        ns,
        registry,
        sim: Some(sim),
        _rbac: rbac,
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
    let (c, ns, all) = (&w.admin, &w.ns.name, watcher::Config::default);
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
    let (client, ns, registry) = (w.admin.clone(), w.ns.name.clone(), w.registry.url());
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
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("chaos")
        .join(&w.ns.name);
    let launch = Launch {
        binary: Path::new(env!("CARGO_BIN_EXE_cocoon-operator")),
        args: vec![
            "--leader-elect=true".into(),
            "--metrics-addr=127.0.0.1:0".into(),
            "--probe-addr=127.0.0.1:0".into(),
            "--log-level=info,kit::leader=debug".into(),
            format!("--oci-registry={}", w.registry.url()),
            format!("--watch-namespace={}", w.ns.name),
        ],
        env: Vec::new(),
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
        state::capture(&self.client, &self.ns, &self.registry)
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
        client: w.admin.clone(),
        ns: w.ns.name.clone(),
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
    invariants::snapshots(&stores, &w.admin, &w.ns.name, &registry, &violations).await;
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
