//! The shipped Deployment (deploy/cocoon/manager) really running: two replicas of the freshly
//! built `cocoon-operator` as pods on the plane's process-backed nodes, under the
//! ServiceAccount of deploy/cocoon/rbac (in-cluster configuration), with a real registry on
//! the nodes' gateway address and the vk-cocoon simulator. One replica leads; the sample
//! CocoonSet comes up; after the leader's pod is deleted another replica takes over and
//! suspends the set (every VM snapshotted through the registry), never two leaders at once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cocoon::crd::{CocoonSet, CocoonSetPhase};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use testenv::deployed::{self, LeaderWatch};
use testenv::procnode::{self, ImageEntry};
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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test kustomization (tests/deploy), in `ns`, running this build's binary on `registry`.
async fn deploy(
    admin: &kube::Client,
    ns: &str,
    registry: &str,
) -> anyhow::Result<procnode::ImageRegistration> {
    let image = format!("{REPOSITORY}:{ns}");
    let entry = ImageEntry {
        image: image.clone(),
        files: [(
            "/cocoon-operator".to_string(),
            env!("CARGO_BIN_EXE_cocoon-operator").to_string(),
        )]
        .into(),
        entrypoint: vec!["/cocoon-operator".into()],
        ..ImageEntry::default()
    };
    let mapping = procnode::register_image(admin, &format!("cocoon-operator.{ns}"), &entry).await?;
    let mut objs =
        testenv::kustomize::render(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/deploy"))?;
    testenv::kustomize::set_namespace(&mut objs, ns);
    testenv::kustomize::set_image(&mut objs, REPOSITORY, &image);
    testenv::kustomize::set_env(&mut objs, "manager", "OCI_REGISTRY", registry);
    // Tests share the plane: this operator watches this test's namespace only.
    testenv::kustomize::set_env(&mut objs, "manager", "WATCH_NAMESPACE", ns);
    // JSON logs, whose leadership lines the test reads.
    testenv::kustomize::set_env(&mut objs, "manager", "LOG_FORMAT", "json");
    testenv::kustomize::apply_all(admin, &objs, "flotilla-e2e").await?;
    Ok(mapping)
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

    let pods = deployed::wait_available(&admin, &ns.name, DEPLOYMENT, 2, T)
        .await
        .expect("2 replicas ready");
    for p in &pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert!(
            procnode::NODES.contains(&node.as_str()),
            "{node} is a process-backed node"
        );
    }
    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let lease = cocoon::run::LEASE_NAME;
    let leader = testenv::eventually("a leader", T, || async {
        deployed::holder(&admin, &ns.name, lease)
            .await
            .filter(|h| names.contains(h))
    })
    .await
    .expect("leader elected");
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
    let pods_api: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    let old = pods_api.get(&leader).await.expect("leader pod");
    pods_api
        .delete(&leader, &DeleteParams::default())
        .await
        .expect("delete the leader");
    let other = testenv::eventually("another replica to take over", T, || async {
        deployed::holder(&admin, &ns.name, lease)
            .await
            .filter(|h| *h != leader)
    })
    .await
    .expect("handover");
    testenv::wait_deleted(&pods_api, &leader, T)
        .await
        .expect("the old leader's pod is gone");
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

    let both = deployed::two_leaders(&samples);
    assert!(
        both.is_empty(),
        "two pods reported leading at once: {both:?}"
    );
    assert!(
        samples.iter().any(|s| s.leading == [leader.clone()]),
        "the first leader was seen leading"
    );
    assert!(
        samples.iter().any(|s| s.leading == [other.clone()]),
        "the second leader was seen leading"
    );
    let log = |p: &Pod| procnode::logs(p, "manager", false).unwrap_or_default();
    let first = deployed::leadership(&log(&old));
    let second = deployed::leadership(&log(&pods_api.get(&other).await.expect("new leader")));
    let released = first
        .last()
        .and_then(|(_, end)| *end)
        .expect("the old leader released the Lease");
    let acquired = second
        .last()
        .map(|(start, _)| *start)
        .expect("the new leader acquired it");
    assert!(
        released < acquired,
        "released at {released}, acquired at {acquired}"
    );
}
