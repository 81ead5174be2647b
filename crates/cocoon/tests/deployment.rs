//! The shipped Deployment (deploy/cocoon/manager) really running: two replicas of the freshly
//! built `cocoon-operator` as pods on the plane's process-backed nodes, under the
//! ServiceAccount of deploy/cocoon/rbac (in-cluster configuration), with a real registry on
//! the nodes' gateway address and the vk-cocoon simulator. One replica leads; the sample
//! CocoonSet comes up; after the leader's pod is deleted another replica takes over and
//! suspends the set (every VM snapshotted through the registry), never two leaders at once.

use std::path::PathBuf;
use std::time::Duration;

use cocoon::crd::{CocoonSet, CocoonSetPhase};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use testenv::deployed::{self, LeaderWatch, OperatorDeployment};
use testenv::procnode;
use testenv::registry::RegistryServer;
use vksim::{SimConfig, Simulator};

const DEPLOY_NAMESPACE: &str = "cocoon-system";
const DEPLOYMENT: &str = "cocoon-operator";
const SELECTOR: &str = "app.kubernetes.io/name=cocoon-operator,app.kubernetes.io/component=manager";
const REPOSITORY: &str = "ghcr.io/flotilla/cocoon-operator";
const POOL: &str = "default";
const SET: &str = "demo";
const T: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    testenv::workspace_root()
}

/// The test kustomization (tests/deploy), in `ns`, running this build's binary on `registry`.
async fn deploy(
    admin: &kube::Client,
    ns: &str,
    registry: &str,
) -> anyhow::Result<procnode::ImageRegistration> {
    OperatorDeployment {
        crate_dir: "crates/cocoon",
        repository: REPOSITORY,
        binary: "cocoon-operator",
        binary_path: env!("CARGO_BIN_EXE_cocoon-operator"),
        // Tests share the plane: this operator watches this test's namespace only; JSON logs,
        // whose leadership lines the test reads.
        env: &[
            ("OCI_REGISTRY", registry),
            ("WATCH_NAMESPACE", ns),
            ("LOG_FORMAT", "json"),
        ],
    }
    .apply(admin, ns)
    .await
}

async fn reach(sets: &Api<CocoonSet>, phase: CocoonSetPhase) -> CocoonSet {
    testenv::wait_for(sets, SET, T, move |s: &CocoonSet| {
        let generation = s.metadata.generation;
        s.status.as_ref().is_some_and(|st| {
            st.phase == Some(phase) && st.observed_generation.is_none_or(|g| Some(g) >= generation)
        })
    })
    .await
    .unwrap_or_else(|e| panic!("CocoonSet {SET} reaching {}: {e:#}", phase.as_str()))
}

#[tokio::test]
async fn the_deployment_runs_two_replicas_elects_one_leader_and_hands_over() {
    let admin = testenv::client().await;
    for crd in cocoon::crd::crds() {
        testenv::install_crd(&admin, crd).await.expect("CRD");
    }
    let ns = testenv::TestNamespace::new(&admin, "cc-deployment").await;
    let _rbac = testenv::rbac::install_rbac(
        &admin,
        &repo().join("deploy/cocoon/rbac"),
        DEPLOY_NAMESPACE,
        &ns.name,
    )
    .await
    .expect("RBAC");
    // The registry listens where both the pods and this process reach it.
    testenv::registry::ensure_installed().expect("docker-registry");
    let registry = RegistryServer::start_at(procnode::gateway().expect("gateway"))
        .await
        .expect("registry");
    // The simulator labels its (kwok) nodes into the pool the sample set asks for.
    let sim_config = SimConfig {
        registry_url: registry.url(),
        namespace: Some(ns.name.clone()),
        pool: POOL.to_owned(),
        ..SimConfig::default()
    };
    let _sim = Simulator::start(admin.clone(), sim_config)
        .await
        .expect("simulator");
    let _mapping = deploy(&admin, &ns.name, &registry.url())
        .await
        .expect("deploy");

    let lease = cocoon::run::LEASE_NAME;
    let (_, leader) = deployed::replicas_and_leader(&admin, &ns.name, DEPLOYMENT, 2, lease, T)
        .await
        .expect("2 replicas on process-backed nodes, one leading");
    let watch = LeaderWatch::start(admin.clone(), &ns.name, lease, SELECTOR, 8080);

    // The leader brings the sample CocoonSet up.
    let mut sample =
        testenv::kustomize::files(&repo().join("deploy/cocoon/samples")).expect("samples");
    sample.retain(|o| {
        o.metadata.name.as_deref() == Some(SET) && testenv::rbac::kind(o) == "CocoonSet"
    });
    testenv::kustomize::set_namespace(&mut sample, &ns.name);
    testenv::kustomize::apply_all(&admin, &sample, "flotilla-e2e")
        .await
        .expect("apply the sample");
    let sets: Api<CocoonSet> = Api::namespaced(admin.clone(), &ns.name);
    reach(&sets, CocoonSetPhase::Running).await;

    // The leader's pod goes; another replica takes over and carries on: it suspends the set,
    // which needs the registry (every VM's snapshot is pushed, then checked by the operator).
    let (old, other) = deployed::delete_leader(&admin, &ns.name, lease, &leader, T)
        .await
        .expect("handover");
    sets.patch(
        SET,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .expect("suspend");
    reach(&sets, CocoonSetPhase::Suspended).await;
    assert!(
        registry.requests() > 0,
        "the operator and the simulator used the registry"
    );
    // The new leader's own metric says so too (sampled at 100 ms intervals).
    testenv::eventually("the new leader's metric to report leading", T, || async {
        watch.saw_sole_leader(&other).then_some(())
    })
    .await
    .expect("the new leader reports leading");
    let samples = watch.stop().await;

    let pods_api: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    let new = pods_api.get(&other).await.expect("new leader");
    deployed::assert_clean_handover(&samples, &old, &new, "manager");
}
