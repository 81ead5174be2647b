//! The local control plane behaves like Kubernetes: scheduling, kwok-run pods on loopback
//! addresses, Jobs, CronJobs, garbage collection and namespace deletion.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testenv::{TestNamespace, client, eventually, wait_deleted, wait_for};

const T: Duration = Duration::from_secs(90);

fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

#[tokio::test]
async fn up_is_idempotent_and_reuses_the_running_plane() {
    let _ = client().await;
    let again = testenv::up().expect("second up");
    assert!(
        again.reused,
        "a healthy plane must be reused, not restarted"
    );
    let status = testenv::status();
    assert!(status.api_ready);
    assert!(
        status.components.iter().all(|(_, _, alive)| *alive),
        "{:?}",
        status.components
    );
    let names: Vec<_> = status
        .components
        .iter()
        .map(|(n, _, _)| n.as_str())
        .collect();
    for c in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ] {
        assert!(names.contains(&c), "{c} missing from {names:?}");
    }
}

#[tokio::test]
async fn three_ready_nodes_in_distinct_zones() {
    let c = client().await;
    let nodes = Api::<Node>::all(c)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let ready: Vec<_> = nodes
        .iter()
        .filter(|n| testenv::plane::node_ready(n))
        .collect();
    assert!(
        ready.len() >= 3,
        "expected 3 Ready nodes, got {}",
        ready.len()
    );
    let zones: BTreeSet<_> = ready
        .iter()
        .filter_map(|n| {
            n.metadata
                .labels
                .as_ref()?
                .get("topology.kubernetes.io/zone")
                .cloned()
        })
        .collect();
    assert!(zones.len() >= 3, "zones: {zones:?}");
}

#[tokio::test]
async fn a_pod_is_scheduled_and_runs_with_a_loopback_ip() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "plane-pod").await;
    let pods: Api<Pod> = Api::namespaced(c, &ns.name);
    let pod = from(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "img.invalid/x:1"}]}}),
    );
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let p = wait_for(&pods, "p", T, |p: &Pod| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await
    .unwrap();
    let node = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    assert!(
        node.starts_with("kwok-node-"),
        "scheduled by kube-scheduler onto a kwok node, got {node:?}"
    );
    let ip: std::net::IpAddr = p.status.unwrap().pod_ip.expect("pod IP").parse().unwrap();
    assert!(ip.is_loopback(), "pod IPs must be loopback, got {ip}");
}

#[tokio::test]
async fn a_job_completes_and_succeeds() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "plane-job").await;
    let jobs: Api<Job> = Api::namespaced(c, &ns.name);
    let job = from(
        json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "img.invalid/x:1"}]}}}}),
    );
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let j = wait_for(&jobs, "j", T, |j: &Job| {
        j.status.as_ref().and_then(|s| s.succeeded) == Some(1)
    })
    .await
    .unwrap();
    let complete = j.status.unwrap().conditions.unwrap_or_default();
    assert!(
        complete
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True"),
        "{complete:?}"
    );
}

#[tokio::test]
async fn a_cronjob_creates_a_job() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "plane-cron").await;
    let crons: Api<CronJob> = Api::namespaced(c.clone(), &ns.name);
    let cron = from(
        json!({"metadata": {"name": "cj"}, "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "img.invalid/x:1"}]}}}}}}),
    );
    crons.create(&PostParams::default(), &cron).await.unwrap();
    // The schedule fires at the next minute boundary: allow just over a minute.
    let jobs: Api<Job> = Api::namespaced(c, &ns.name);
    let job = eventually(
        "a Job owned by the CronJob",
        Duration::from_secs(130),
        || async {
            jobs.list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|j| {
                    j.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "CronJob" && o.name == "cj")
                })
        },
    )
    .await
    .unwrap();
    assert!(job.metadata.name.unwrap().starts_with("cj-"));
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_dependents() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "plane-gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(c, &ns.name);
    let owner = cms
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "owner"}})),
        )
        .await
        .unwrap();
    let uid = owner.metadata.uid.unwrap();
    let dep = from(
        json!({"metadata": {"name": "dependent", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}}),
    );
    cms.create(&PostParams::default(), &dep).await.unwrap();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    wait_deleted(&cms, "dependent", T).await.unwrap();
}

#[tokio::test]
async fn deleting_a_namespace_finishes() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "plane-ns").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let pod = from(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "img.invalid/x:1"}]}}),
    );
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for(&pods, "p", T, |p: &Pod| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await
    .unwrap();
    let nss: Api<Namespace> = Api::all(c);
    nss.delete(&ns.name, &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&nss, &ns.name, T).await.unwrap();
}

#[tokio::test]
async fn a_claim_is_provisioned_by_the_default_storage_class_and_cleaned_up_with_it() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "plane-pvc").await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), &ns.name);
    let pvc = from(json!({"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}));
    pvcs.create(&PostParams::default(), &pvc).await.unwrap();
    let bound = wait_for(&pvcs, "data", T, |p: &PersistentVolumeClaim| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    })
    .await
    .unwrap();
    let spec = bound.spec.unwrap();
    assert_eq!(
        spec.storage_class_name.as_deref(),
        Some(testenv::plane::STORAGE_CLASS)
    );
    let pv_name = spec.volume_name.expect("bound to a volume");

    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let pod = from(json!({"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "img.invalid/x:1", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}));
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for(&pods, "p", T, |p: &Pod| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await
    .unwrap();

    pods.delete("p", &DeleteParams::default()).await.unwrap();
    wait_deleted(&pods, "p", T).await.unwrap();
    pvcs.delete("data", &DeleteParams::default()).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(c);
    wait_deleted(&pvs, &pv_name, T).await.unwrap();
}

#[tokio::test]
async fn concurrent_ups_share_one_plane() {
    let _ = client().await;
    // Each call opens and locks the plane's lock file on its own, as separate test binaries do.
    let handles: Vec<_> = (0..3).map(|_| std::thread::spawn(testenv::up)).collect();
    let ups: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("up"))
        .collect();
    let ports: BTreeSet<_> = ups.iter().map(|u| u.state.api_port).collect();
    assert_eq!(ports.len(), 1, "one plane, one API port: {ports:?}");
    assert!(ups.iter().all(|u| u.reused));
}

#[tokio::test]
async fn a_dropped_test_namespace_goes_away_even_with_finalizers_left_behind() {
    use k8s_openapi::api::coordination::v1::Lease;
    let c = client().await;
    let ns = TestNamespace::new(&c, "plane-drop").await;
    let name = ns.name.clone();
    // What an operator that stopped before its objects were deleted leaves behind.
    let lease = from(json!({"metadata": {"name": "l", "finalizers": ["flotilla.dev/held"]}}));
    Api::<Lease>::namespaced(c.clone(), &name)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    drop(ns);
    wait_deleted(&Api::<Namespace>::all(c), &name, Duration::from_secs(120))
        .await
        .unwrap();
}
