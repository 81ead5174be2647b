//! The shipped Deployment (deploy/redis/manager) really running: two replicas of the freshly
//! built `redis-operator controller` as pods on the plane's process-backed nodes, under the
//! ServiceAccount of deploy/redis/rbac (in-cluster configuration), leader election on, the
//! admission webhook server up in both. One replica leads and brings the sample cluster up
//! with real Redis. Then the leader's process is SIGKILLed (no release: the Lease must expire)
//! while the cluster is scaled up, and later the leader's pod is deleted (a graceful release)
//! while it is scaled down: each time a replica takes over and finishes the change, and no two
//! replicas ever lead at once.

mod operator;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use nix::sys::signal::Signal;
use operator::Env;
use redis::crd::RedisCluster;
use serde_json::json;
use testenv::deployed::{self, LeaderWatch, OperatorDeployment};
use testenv::procnode;

const DEPLOYMENT: &str = "redis-operator";
const SELECTOR: &str = "app.kubernetes.io/name=redis-operator,app.kubernetes.io/component=manager";
const REPOSITORY: &str = "ghcr.io/flotilla/redis-operator";
const METRICS_PORT: u16 = 9090;
const CLUSTER: &str = "cache";
const T: Duration = Duration::from_secs(180);

fn repo() -> PathBuf {
    testenv::workspace_root()
}

/// Scales the sample cluster to `n` and waits until it is Healthy with `n` ready instances.
async fn scale(env: &Env, n: i32) -> RedisCluster {
    env.clusters()
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"instances": n}})),
        )
        .await
        .expect("scale");
    env.healthy(CLUSTER, n).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_deployment_elects_one_leader_and_a_killed_or_deleted_leader_is_replaced() {
    let env = Env::new("rc-deployment").await;
    let ns = env.ns.name.clone();
    // The data pods' init container copies the instance manager from the operator's own image.
    let image = format!("{REPOSITORY}:{ns}");
    let _mapping = OperatorDeployment {
        crate_dir: "crates/redis",
        repository: REPOSITORY,
        binary: "redis-operator",
        binary_path: env!("CARGO_BIN_EXE_redis-operator"),
        // Tests share the plane: this operator watches this test's namespace only; JSON logs,
        // whose leadership lines the test reads.
        env: &[
            ("WATCH_NAMESPACES", &ns),
            ("PODS_ON_PROCESS_NODES", "true"),
            ("RELATED_IMAGE_OPERATOR", &image),
            ("LOG_FORMAT", "json"),
        ],
    }
    .apply(&env.admin, &ns)
    .await
    .expect("deploy");

    let lease = redis::names::LEASE_NAME;
    let (_, leader) = deployed::replicas_and_leader(&env.admin, &ns, DEPLOYMENT, 2, lease, T)
        .await
        .expect("2 replicas on process-backed nodes, one leading");
    let watch = LeaderWatch::start(env.admin.clone(), &ns, lease, SELECTOR, METRICS_PORT);

    // The leader brings the sample cluster up, as the user applies it.
    let mut sample =
        testenv::kustomize::files(&repo().join("deploy/redis/samples")).expect("samples");
    sample.retain(|o| {
        o.metadata.name.as_deref() == Some(CLUSTER) && testenv::rbac::kind(o) == "RedisCluster"
    });
    testenv::kustomize::set_namespace(&mut sample, &ns);
    testenv::kustomize::apply_all(&env.admin, &sample, "flotilla-e2e")
        .await
        .expect("apply the sample");
    env.healthy(CLUSTER, 3).await;

    // SIGKILL: the leader cannot release the Lease. Its container restarts; whichever replica
    // holds the Lease once it expired finishes the scale-up.
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), &ns);
    let restarts = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.iter().find(|c| c.name == "manager"))
            .map_or(0, |c| c.restart_count)
    };
    let before = restarts(&pods.get(&leader).await.expect("leader pod"));
    procnode::signal(&env.admin, &ns, &leader, "manager", Signal::SIGKILL)
        .await
        .expect("kill the leader's process");
    scale(&env, 4).await;
    testenv::wait_for(&pods, &leader, T, move |p: &Pod| restarts(p) > before)
        .await
        .expect("the killed container was restarted");

    // A graceful handover: the leader's pod is deleted, it releases the Lease, another
    // replica acquires it and finishes the scale-down.
    let leader = deployed::holder(&env.admin, &ns, lease)
        .await
        .expect("a leader after the kill");
    let (old, other) = deployed::delete_leader(&env.admin, &ns, lease, &leader, T)
        .await
        .expect("handover");
    scale(&env, 3).await;
    testenv::eventually("the new leader's metric to report leading", T, || async {
        watch.saw_sole_leader(&other).then_some(())
    })
    .await
    .expect("the new leader reports leading");
    let samples = watch.stop().await;
    let new = pods.get(&other).await.expect("new leader");
    deployed::assert_clean_handover(&samples, &old, &new, "manager");
}
