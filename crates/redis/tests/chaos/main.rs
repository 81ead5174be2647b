//! Reliability under chaos: the real `redis-operator controller`, as its own process under its
//! shipped RBAC with leader election on, talks to the API server through the fault-injecting
//! proxy (409, 429, 500, 503, resets before and after applied writes, latency, cut watches,
//! 410 Gone) and is SIGKILLed and restarted every 2–8 s, while the `failover` scenario
//! (`flow`) runs real Redis on the process-backed nodes (the instance managers talk to the API
//! server directly: they are the pods, not the operator). Checked throughout: no sampled
//! moment with two instances accepting writes, no write a replica acknowledged lost, no data
//! PVC of a wanted instance deleted; at the end the faults stop, the state must converge to
//! the fault-free run's, the request rate must stay within bounds, and deletion (itself under
//! chaos) must release the finalizer and leave no pod behind.
//!
//! The suite runs the baseline and a small fixed set of seeds; `cargo xtask chaos --operator
//! redis --runs N` soaks, `--seed S` replays one seed (docs/testing.md).

#[path = "../operator/mod.rs"]
mod operator;

mod flow;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use redis::crd::RedisCluster;
use serde_json::Value;
use testenv::chaos::scenario::{self, Launch, OperatorUnderTest, RunReport};
use testenv::chaos::{Base, Bounds, Observer, Setup, Violations, drive};

/// The seeds the test suite runs (the soak runs many more).
const SUITE_SEEDS: &[u64] = &[1];
/// The scenario's limits (the shared hot-loop bounds: the instance status poll goes to the
/// pods, not the API server; a failover or a scale-down is a handful of writes).
const BOUNDS: Bounds = Bounds::standard(Duration::from_secs(180), flow::STEP);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_converges_under_faults_and_kills() {
    let reports = scenario::soak(SUITE_SEEDS, run).await;
    scenario::assert_clean(&reports);
}

/// Everything one run sets up, torn down when dropped.
struct World {
    base: Base,
    image: String,
    _image: testenv::procnode::ImageRegistration,
}

async fn world(seed: Option<u64>) -> anyhow::Result<World> {
    let setup = Setup {
        crds: redis::crd::crds(),
        prefix: "rc-chaos",
        rbac: testenv::workspace_root().join("deploy/redis/rbac"),
        deploy_namespace: operator::DEPLOY_NAMESPACE,
    };
    let base = Base::new(setup, seed).await?;
    let (admin, ns) = (&base.admin, &base.ns.name);
    // This build's binary is the operator image the data pods' init container copies from.
    let image = format!("ghcr.io/flotilla/redis-operator:{ns}");
    let entry = testenv::procnode::ImageEntry {
        image: image.clone(),
        files: [(
            "/redis-operator".to_string(),
            env!("CARGO_BIN_EXE_redis-operator").to_string(),
        )]
        .into(),
        entrypoint: vec!["/redis-operator".into()],
        ..testenv::procnode::ImageEntry::default()
    };
    let registration =
        testenv::procnode::register_image(admin, &format!("redis-operator.{ns}"), &entry).await?;
    Ok(World {
        base,
        image,
        _image: registration,
    })
}

/// The continuous check over watch caches: a data PVC of an instance the spec still wants is
/// never deleted while the cluster lives.
fn observe(w: &World, violations: &Violations) -> Observer {
    let mut obs = Observer::new();
    let (c, ns) = (&w.base.admin, &w.base.ns.name);
    let pvcs: Store<PersistentVolumeClaim> =
        obs.watch(Api::namespaced(c.clone(), ns), watcher::Config::default());
    let clusters: Store<RedisCluster> =
        obs.watch(Api::namespaced(c.clone(), ns), watcher::Config::default());
    let v = violations.clone();
    obs.check(move || pvc_deleted_while_needed(&pvcs, &clusters, &v));
    obs
}

fn pvc_deleted_while_needed(
    pvcs: &Store<PersistentVolumeClaim>,
    clusters: &Store<RedisCluster>,
    v: &Violations,
) {
    for rc in clusters.state() {
        if rc.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let prefix = format!("{}-data-", rc.name_any());
        for pvc in pvcs.state() {
            let ordinal = pvc
                .name_any()
                .strip_prefix(&prefix)
                .and_then(|n| n.parse::<i32>().ok());
            if pvc.metadata.deletion_timestamp.is_some()
                && ordinal.is_some_and(|n| n < rc.spec.instances)
            {
                v.record(
                    "pvc_deleted_while_needed",
                    format!(
                        "PVC {} while spec.instances is {}",
                        pvc.name_any(),
                        rc.spec.instances
                    ),
                );
            }
        }
    }
}

async fn start_operator(w: &World, seed: Option<u64>) -> anyhow::Result<OperatorUnderTest> {
    let dir = w.base.dir(env!("CARGO_TARGET_TMPDIR"));
    let launch = Launch {
        binary: Path::new(env!("CARGO_BIN_EXE_redis-operator")),
        args: vec![
            "controller".into(),
            "--leader-elect=true".into(),
            format!("--lease-namespace={}", w.base.ns.name),
            format!("--watch-namespaces={}", w.base.ns.name),
            "--webhook-enabled=false".into(),
            "--pods-on-process-nodes".into(),
            format!("--operator-image={}", w.image),
            "--metrics-addr=127.0.0.1:0".into(),
            "--probe-addr=127.0.0.1:0".into(),
            "--log-level=info,redis=debug,kit::leader=debug".into(),
        ],
        env: Vec::new(),
        namespace: &w.base.ns.name,
        service_account: operator::SA,
        dir: &dir,
        plan: scenario::plan(seed),
    };
    OperatorUnderTest::start(&w.base.admin, launch).await
}

async fn run(seed: Option<u64>, baseline: Option<Arc<Value>>) -> (RunReport, Option<Value>) {
    let started = Instant::now();
    let w = world(seed)
        .await
        .expect("the scenario's namespace, operator image and RBAC");
    let violations = Violations::new();
    let mut obs = observe(&w, &violations);
    obs.ready().await;
    let mut op = start_operator(&w, seed)
        .await
        .expect("the operator process");
    let user = flow::User::new(
        w.base.admin.clone(),
        w.base.ns.name.clone(),
        violations.clone(),
    );
    let driven = drive(
        &mut op,
        &user,
        seed,
        baseline.as_deref(),
        &violations,
        BOUNDS,
    )
    .await;
    // A flow that stopped early still has its writer and sampler running: what they saw
    // counts too.
    if let Err(e) = user.finish_data().await {
        tracing::warn!(error = %format!("{e:#}"), "the data-plane check could not run");
    }
    obs.check_now();
    obs.stop().await;
    let state = driven.final_state.clone();
    let report = driven
        .finish(op, ("redis", "failover", seed), started, &violations)
        .await;
    (report, state)
}
