//! The shipped Deployment (deploy/redroid/manager) really running: two replicas of the freshly
//! built `redroid-operator` as pods on the plane's process-backed nodes, under the
//! ServiceAccount of deploy/redroid/rbac (in-cluster configuration), passing their probes,
//! electing one leader through the Lease, converging the samples, and handing leadership to
//! the other replica when the leader's pod is deleted, with never two leaders at once.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use redroid::crd::{InstancePhase, RedroidInstance, RedroidTask};
use testenv::deployed::{self, LeaderWatch, OperatorDeployment};
use testenv::procnode;

const DEPLOY_NAMESPACE: &str = "redroid-system";
const DEPLOYMENT: &str = "redroid-operator";
const SELECTOR: &str =
    "app.kubernetes.io/name=redroid-operator,app.kubernetes.io/component=manager";
const REPOSITORY: &str = "ghcr.io/flotilla/redroid-operator";
const T: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    testenv::workspace_root()
}

/// The test kustomization (tests/deploy), in `ns`, running this build's binary.
async fn deploy(admin: &kube::Client, ns: &str) -> anyhow::Result<procnode::ImageRegistration> {
    OperatorDeployment {
        crate_dir: "crates/redroid",
        repository: REPOSITORY,
        binary: "redroid-operator",
        binary_path: env!("CARGO_BIN_EXE_redroid-operator"),
        // Tests share the plane: this operator watches this test's namespace only.
        env: &[("WATCH_NAMESPACES", ns)],
    }
    .apply(admin, ns)
    .await
}

async fn converged(admin: &kube::Client, ns: &str, instances: &[&str]) -> anyhow::Result<()> {
    let api: Api<RedroidInstance> = Api::namespaced(admin.clone(), ns);
    for name in instances {
        testenv::wait_for(&api, name, T, |i: &RedroidInstance| {
            i.status.as_ref().and_then(|s| s.phase) == Some(InstancePhase::Running)
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn the_deployment_runs_two_replicas_elects_one_leader_and_hands_over() {
    let admin = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&admin, crd).await.expect("CRD");
    }
    let ns = testenv::TestNamespace::new(&admin, "rd-deployment").await;
    let _rbac = testenv::rbac::install_rbac(
        &admin,
        &repo().join("deploy/redroid/rbac"),
        DEPLOY_NAMESPACE,
        &ns.name,
    )
    .await
    .expect("RBAC");
    let _mapping = deploy(&admin, &ns.name).await.expect("deploy");

    // Two replicas pass their probes on the process-backed nodes, and one of them leads.
    let lease = redroid::run::LEASE_NAME;
    let (_, leader) = deployed::replicas_and_leader(&admin, &ns.name, DEPLOYMENT, 2, lease, T)
        .await
        .expect("2 replicas on process-backed nodes, one leading");
    let watch = LeaderWatch::start(admin.clone(), &ns.name, lease, SELECTOR, 8080);

    // The leader converges the samples.
    let mut samples: Vec<DynamicObject> =
        testenv::kustomize::files(&repo().join("deploy/redroid/samples")).expect("samples");
    testenv::kustomize::set_namespace(&mut samples, &ns.name);
    testenv::kustomize::apply_all(&admin, &samples, "flotilla-e2e")
        .await
        .expect("apply samples");
    converged(&admin, &ns.name, &["android-0", "android-1"])
        .await
        .expect("instances Running");
    let tasks: Api<RedroidTask> = Api::namespaced(admin.clone(), &ns.name);
    testenv::wait_for(&tasks, "install-apps", T, |t: &RedroidTask| {
        t.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
    })
    .await
    .expect("one-shot task Complete");

    // Deleting the leader's pod hands the Lease to another replica, which carries on: the
    // standby, or the Deployment's replacement pod when it starts first (here pods start in a
    // fraction of a second, within the standby's 2 s retry period).
    let (old, other) = deployed::delete_leader(&admin, &ns.name, lease, &leader, T)
        .await
        .expect("handover");
    let mut more: Vec<DynamicObject> =
        testenv::kustomize::files(&repo().join("deploy/redroid/samples")).expect("samples");
    more.retain(|o| o.metadata.name.as_deref() == Some("android-1"));
    let extra = more.first_mut().expect("android-1 sample");
    extra.metadata.name = Some("android-2".into());
    extra.metadata.namespace = Some(ns.name.clone());
    extra.data["spec"]["index"] = 2.into();
    testenv::kustomize::apply_all(&admin, &more, "flotilla-e2e")
        .await
        .expect("a new instance");
    converged(&admin, &ns.name, &["android-2"])
        .await
        .expect("the new leader reconciles");
    // The new leader's own metric says so too (sampled at 100 ms intervals).
    testenv::eventually("the new leader's metric to report leading", T, || async {
        watch.saw_sole_leader(&other).then_some(())
    })
    .await
    .expect("the new leader reports leading");
    let samples = watch.stop().await;

    // Never two leaders: neither in any sample of the pods' own metrics, nor in the
    // leadership intervals their logs record.
    let pods_api: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    let new = pods_api.get(&other).await.expect("new leader");
    deployed::assert_clean_handover(&samples, &old, &new, "manager");
}
