//! The shipped Deployment (deploy/redroid/manager) really running: two replicas of the freshly
//! built `redroid-operator` as pods on the plane's process-backed nodes, under the
//! ServiceAccount of deploy/redroid/rbac (in-cluster configuration), passing their probes,
//! electing one leader through the Lease, converging the samples, and handing leadership to
//! the other replica when the leader's pod is deleted, with never two leaders at once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject};
use redroid::crd::{InstancePhase, RedroidInstance, RedroidTask};
use testenv::deployed::{self, LeaderWatch};
use testenv::procnode::{self, ImageEntry};

const DEPLOY_NAMESPACE: &str = "redroid-system";
const DEPLOYMENT: &str = "redroid-operator";
const SELECTOR: &str =
    "app.kubernetes.io/name=redroid-operator,app.kubernetes.io/component=manager";
const REPOSITORY: &str = "ghcr.io/flotilla/redroid-operator";
const T: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test kustomization (tests/deploy), in `ns`, running this build's binary.
async fn deploy(admin: &kube::Client, ns: &str) -> anyhow::Result<procnode::ImageRegistration> {
    let image = format!("{REPOSITORY}:{ns}");
    let entry = ImageEntry {
        image: image.clone(),
        files: [(
            "/redroid-operator".to_string(),
            env!("CARGO_BIN_EXE_redroid-operator").to_string(),
        )]
        .into(),
        entrypoint: vec!["/redroid-operator".into()],
        ..ImageEntry::default()
    };
    let mapping =
        procnode::register_image(admin, &format!("redroid-operator.{ns}"), &entry).await?;
    let mut objs =
        testenv::kustomize::render(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/deploy"))?;
    testenv::kustomize::set_namespace(&mut objs, ns);
    testenv::kustomize::set_image(&mut objs, REPOSITORY, &image);
    // Tests share the plane: this operator watches this test's namespace only.
    testenv::kustomize::set_env(&mut objs, "manager", "WATCH_NAMESPACES", ns);
    testenv::kustomize::apply_all(admin, &objs, "flotilla-e2e").await?;
    Ok(mapping)
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

fn leader_log(pod: &Pod) -> String {
    procnode::logs(pod, "manager", false).unwrap_or_default()
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
    let lease = redroid::run::LEASE_NAME;
    let leader = testenv::eventually("a leader", T, || async {
        deployed::holder(&admin, &ns.name, lease)
            .await
            .filter(|h| names.contains(h))
    })
    .await
    .expect("leader elected");
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
    let first = deployed::leadership(&leader_log(&old));
    let second = deployed::leadership(&leader_log(
        &pods_api.get(&other).await.expect("new leader"),
    ));
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
