//! The RedisCluster controller's objects on kwok nodes, where pods are scheduled and marked
//! Running but nothing runs in them: what the operator creates and owns, the status it writes
//! while no instance answers, scaling, and that a stable cluster costs it no write. The
//! operator runs under its own ServiceAccount and RBAC (deploy/redis/rbac).

mod operator;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use operator::Env;
use redis::crd::{ClusterPhase, RedisCluster};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

async fn names<K>(api: &Api<K>, selector: &str) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut n: Vec<String> = api
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list")
        .items
        .iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .map(|o| o.name_any())
        .collect();
    n.sort();
    n
}

fn owned_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    rc: &RedisCluster,
) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| Some(&o.uid) == rc.metadata.uid.as_ref() && o.controller == Some(true))
}

async fn pods_are(env: &Env, want: &[&str]) {
    let api: Api<Pod> = env.api();
    let want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
    testenv::eventually(&format!("pods {want:?}"), T, || async {
        let got = names(&api, "redis.io/cluster=demo").await;
        (got == want).then_some(())
    })
    .await
    .expect("pods");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_creates_owns_and_scales_the_children() {
    // Without leader election: its Lease renewals (a GET and an UPDATE every 2 s) are the only
    // writes a converged operator makes, and they are not the cluster controller's.
    let env = Env::start("rc-objects", &["--leader-elect=false"]).await;
    env.create(
        "demo",
        json!({"instances": 3, "storage": {"size": "1Gi"}, "connectionSecret": {"name": "demo-conn"}}),
    )
    .await;
    let rc = env
        .wait("demo", T, |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.current_primary == "demo-0")
        })
        .await;
    pods_are(&env, &["demo-0", "demo-1", "demo-2"]).await;
    // The primary is chosen in the first pass, the children follow over several: what is
    // read below without waiting exists once the operator stops writing.
    operator::settled(&env.counts, T).await;

    // Pods: owned, labelled by role, on the contract's template.
    let pods: Api<Pod> = env.api();
    for (name, role) in [
        ("demo-0", "primary"),
        ("demo-1", "replica"),
        ("demo-2", "replica"),
    ] {
        let p = pods.get(name).await.expect("pod");
        assert!(owned_by(&p.metadata, &rc), "{name} owned");
        assert_eq!(p.labels()["redis.io/role"], role, "{name}");
        assert_eq!(p.labels()["redis.io/instance"], name);
        assert!(p.annotations().contains_key("redis.io/spec-hash"));
        let spec = p.spec.expect("spec");
        assert_eq!(spec.service_account_name.as_deref(), Some("demo"));
        assert_eq!(spec.init_containers.expect("init")[0].name, "copy-manager");
    }
    // PVCs: one per instance, labelled, never owned (data outlives the cluster).
    let pvcs: Api<PersistentVolumeClaim> = env.api();
    assert_eq!(
        names(&pvcs, "redis.io/cluster=demo").await,
        ["demo-data-0", "demo-data-1", "demo-data-2"]
    );
    for p in pvcs.list(&ListParams::default()).await.expect("pvcs").items {
        assert!(
            p.metadata.owner_references.is_none(),
            "{} not owned",
            p.name_any()
        );
    }
    // Services: the leader pinned to the primary by its instance label.
    let services: Api<Service> = env.api();
    let leader = services.get("demo-leader").await.expect("leader");
    assert!(owned_by(&leader.metadata, &rc));
    let sel = leader.spec.and_then(|s| s.selector).expect("selector");
    assert_eq!(sel["redis.io/instance"], "demo-0");
    for (svc, key, value) in [
        ("demo-replica", "redis.io/role", "replica"),
        ("demo-any", "redis.io/workload", "data"),
    ] {
        let s = services.get(svc).await.expect(svc);
        assert!(owned_by(&s.metadata, &rc));
        assert_eq!(
            s.spec.and_then(|s| s.selector).expect("selector")[key],
            value
        );
    }
    // PDBs: CloudNativePG's split.
    let pdbs: Api<PodDisruptionBudget> = env.api();
    let min = |p: &PodDisruptionBudget| match p.spec.as_ref().and_then(|s| s.min_available.clone())
    {
        Some(IntOrString::Int(n)) => n,
        other => panic!("{other:?}"),
    };
    let primary = pdbs.get("demo-primary").await.expect("primary pdb");
    assert_eq!(min(&primary), 1);
    assert!(owned_by(&primary.metadata, &rc));
    assert_eq!(
        min(&pdbs.get("demo-replicas").await.expect("replicas pdb")),
        1
    );
    // The instance managers' identity, read-only, owned.
    let sa: Api<ServiceAccount> = env.api();
    assert!(owned_by(&sa.get("demo").await.expect("sa").metadata, &rc));
    let role = env.api::<Role>().get("demo").await.expect("role");
    assert!(owned_by(&role.metadata, &rc));
    for rule in role.rules.expect("rules") {
        assert!(
            rule.verbs
                .iter()
                .all(|v| ["get", "list", "watch"].contains(&v.as_str()))
        );
    }
    assert!(owned_by(
        &env.api::<RoleBinding>()
            .get("demo")
            .await
            .expect("rb")
            .metadata,
        &rc
    ));
    // Secrets: the generated password (and the spec pointing at it), the instance API's PKI
    // and token, the connection Secret.
    let secrets: Api<Secret> = env.api();
    for s in [
        "demo-auth",
        "demo-instance-ca",
        "demo-instance-tls",
        "demo-instance-token",
        "demo-conn",
    ] {
        let got = secrets.get(s).await.unwrap_or_else(|e| panic!("{s}: {e}"));
        assert!(owned_by(&got.metadata, &rc), "{s} owned");
    }
    let rc = env
        .wait("demo", T, |c| {
            c.spec
                .auth_secret
                .as_ref()
                .is_some_and(|a| a.name == "demo-auth")
        })
        .await;
    let conn = secrets.get("demo-conn").await.expect("conn");
    let data: BTreeMap<String, String> = conn
        .data
        .expect("data")
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    assert_eq!(data["host"], format!("demo-leader.{}.svc", env.ns.name));
    assert!(data["url"].starts_with("redis://default:"));
    // The primary Lease names the primary.
    let lease = env.api::<Lease>().get("demo-primary").await.expect("lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("demo-0")
    );
    // Nothing answers on kwok: never Healthy, and the status says why.
    let st = rc.status.clone().expect("status");
    assert_ne!(st.phase, Some(ClusterPhase::Healthy));
    assert!(!st.phase_reason.is_empty());
    assert_eq!(
        st.observed_generation,
        rc.metadata.generation.unwrap_or_default()
    );
    assert!(
        st.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False")
    );

    // A stable cluster costs the operator no write: once it has settled (a 5 s window
    // without writes), a 30 s window has none either.
    operator::settled(&env.counts, T).await;
    env.counts.reset();
    tokio::time::sleep(Duration::from_secs(30)).await; // the measurement window itself
    let by_verb = env.counts.by_verb();
    assert_eq!(
        env.counts.writes(),
        0,
        "writes of a stable cluster: {by_verb:?}"
    );

    // Scale up: the new ordinals, their PVCs and the replicas PDB follow.
    env.clusters()
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"instances": 5}})),
        )
        .await
        .expect("scale up");
    pods_are(&env, &["demo-0", "demo-1", "demo-2", "demo-3", "demo-4"]).await;
    testenv::eventually("replicas PDB of 5", T, || async {
        let p = pdbs.get("demo-replicas").await.ok()?;
        (min(&p) == 3).then_some(())
    })
    .await
    .expect("pdb");

    // Scale down: the highest ordinals go, one at a time; their PVCs stay (dangling).
    env.clusters()
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"instances": 2}})),
        )
        .await
        .expect("scale down");
    pods_are(&env, &["demo-0", "demo-1"]).await;
    let rc = env
        .wait("demo", T, |c| {
            c.status.as_ref().is_some_and(|s| s.dangling_pvc.len() == 3)
        })
        .await;
    let st = rc.status.expect("status");
    assert_eq!(
        st.dangling_pvc,
        ["demo-data-2", "demo-data-3", "demo-data-4"]
    );
    assert_eq!(st.current_primary, "demo-0");
    testenv::eventually("no replicas PDB below 3 instances", T, || async {
        pdbs.get_opt("demo-replicas")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .expect("pdb gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_instance_gets_a_primary_and_only_the_primary_budget() {
    let env = Env::start("rc-single", &[]).await;
    env.create("one", json!({"storage": {"size": "1Gi"}})).await;
    let rc = env
        .wait("one", T, |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.current_primary == "one-0")
        })
        .await;
    assert_eq!(rc.spec.instances, 1);
    pods_are_named(&env, "one", &["one-0"]).await;
    let pdbs: Api<PodDisruptionBudget> = env.api();
    testenv::eventually("the primary PDB", T, || async {
        pdbs.get_opt("one-primary").await.ok()?.map(|_| ())
    })
    .await
    .expect("primary pdb");
    assert!(pdbs.get_opt("one-replicas").await.expect("get").is_none());
}

async fn pods_are_named(env: &Env, cluster: &str, want: &[&str]) {
    let api: Api<Pod> = env.api();
    let want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
    let sel = format!("redis.io/cluster={cluster}");
    testenv::eventually(&format!("pods {want:?}"), T, || async {
        (names(&api, &sel).await == want).then_some(())
    })
    .await
    .expect("pods");
}

/// A pass whose Secret cache is behind the API server (a restarted operator, a cut watch)
/// must not replace the instance API's CA, serving certificate or token: the pods already
/// use them, and new ones would lock the operator out of every instance until the mounted
/// Secrets caught up. Found by the chaos scenario (401s, then `BadSignature`, for minutes).
#[tokio::test]
async fn a_pass_that_misses_the_instance_secrets_in_its_cache_keeps_them() {
    use kit::pipeline::Step;
    use redis::cluster::Pass;
    use redis::cluster::steps::ensure_secrets::EnsureSecrets;
    use redis::instance_api;
    use std::sync::Arc;

    let mut env = Env::start("rc-stale-secrets", &["--leader-elect=false"]).await;
    env.create("demo", json!({"instances": 1, "storage": {"size": "1Gi"}}))
        .await;
    let secrets = env.api::<Secret>();
    let names = [
        instance_api::ca_secret("demo"),
        instance_api::server_secret("demo"),
        instance_api::token_secret("demo"),
    ];
    let read = || async {
        let mut out = BTreeMap::new();
        for n in &names {
            // A digest of the data, so a failure prints names and digests, not key material.
            use std::hash::{Hash, Hasher};
            let data = secrets.get_opt(n).await.ok()??.data?;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            serde_json::to_string(&data).ok()?.hash(&mut h);
            out.insert(n.clone(), h.finish());
        }
        Some(out)
    };
    let before = testenv::eventually("the instance API's Secrets", operator::T, read)
        .await
        .expect("Secrets");
    env.kill_operator().await;

    // One pass of the step with an empty Secret cache, as the admin.
    let rc = env.clusters().get("demo").await.expect("cluster");
    let ctx = redis::context::Context::new(
        env.admin.clone(),
        redis::context::Settings::default(),
        Arc::new(redis::instance_client::https::HttpsConnector::default()),
        redis::metrics::RedisMetrics::register(&kit::metrics::Metrics::new()),
    );
    let mut pass = Pass {
        ctx: Arc::new(ctx),
        model: redis::cluster::model::Model::of(&rc).expect("model"),
        rc: Arc::new(rc),
        confirmed: false,
        seen: Default::default(),
        now: jiff::Timestamp::now(),
        members: Default::default(),
        instances: None,
        secrets: Default::default(),
        blocked: None,
        plan: None,
        handoff: None,
        sentinel: None,
        memory: Default::default(),
    };
    EnsureSecrets.run(&mut pass).await.expect("the step");
    assert_eq!(
        read().await.expect("Secrets"),
        before,
        "the material is unchanged"
    );
    assert!(
        pass.instances.is_some(),
        "a client built from the live material"
    );
}

/// `spec.storage.size` grown: PVCs of an expandable StorageClass are grown in place
/// (`PVCResizeStarted`), those of a class without `allowVolumeExpansion` are left as they are
/// with a `PVCResizeFailed` Warning naming the class; nothing is deleted or recreated.
#[tokio::test]
async fn a_larger_storage_size_grows_expandable_pvcs_and_reports_the_others() {
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::{DeleteParams, PostParams};

    let env = Env::start("rc-resize", &["--leader-elect=false"]).await;
    let class = format!("expandable-{}", env.ns.name);
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": class},
        "provisioner": "kwok.x-k8s.io/volume",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": true,
    }))
    .expect("class");
    let classes: Api<StorageClass> = Api::all(env.admin.clone());
    classes
        .create(&PostParams::default(), &sc)
        .await
        .expect("create the class");
    // kwok provisions only its own class: the expandable one gets a pre-bound volume (the
    // control plane's PV controller binds it), as a static provisioner would.
    let pv_name = format!("grow-{}", env.ns.name);
    let pv: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": format!("/tmp/{pv_name}")},
            "claimRef": {"namespace": env.ns.name, "name": "grow-data-0"},
        },
    }))
    .expect("pv");
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(env.admin.clone());
    pvs.create(&PostParams::default(), &pv)
        .await
        .expect("create the volume");
    env.create(
        "grow",
        json!({"instances": 1, "storage": {"size": "1Gi", "storageClassName": class}}),
    )
    .await;
    env.create(
        "fixed",
        json!({"instances": 1, "storage": {"size": "1Gi", "storageClassName": testenv::plane::STORAGE_CLASS}}),
    )
    .await;
    let pvcs: Api<PersistentVolumeClaim> = env.api();
    let request = |p: &PersistentVolumeClaim| {
        p.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
    };
    let bound = |p: &PersistentVolumeClaim| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    };
    let mut uids = BTreeMap::new();
    for pvc in ["grow-data-0", "fixed-data-0"] {
        let p = testenv::wait_for(&pvcs, pvc, T, bound)
            .await
            .unwrap_or_else(|e| panic!("{pvc} bound: {e}"));
        uids.insert(pvc, p.uid());
    }
    for name in ["grow", "fixed"] {
        env.patch(name, json!({"spec": {"storage": {"size": "2Gi"}}}))
            .await;
    }
    let grown = testenv::wait_for(&pvcs, "grow-data-0", T, move |p| {
        request(p).as_deref() == Some("2Gi")
    })
    .await
    .expect("grow-data-0 grown");
    assert_eq!(grown.uid(), uids["grow-data-0"], "grown in place");
    env.wait_event("grow", "PVCResizeStarted").await;
    let warned = env.wait_event("fixed", "PVCResizeFailed").await;
    assert!(
        warned
            .iter()
            .any(|n| n.contains(testenv::plane::STORAGE_CLASS)),
        "the Warning names the class: {warned:?}"
    );
    let fixed = pvcs.get("fixed-data-0").await.expect("fixed-data-0");
    assert_eq!(request(&fixed).as_deref(), Some("1Gi"));
    assert_eq!(fixed.uid(), uids["fixed-data-0"]);
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
}

/// A deletion that a finalizer holds (here the test's own; a foreground deletion waits the
/// same way for the children to go) shows phase `Deleting` with its reason until it ends.
#[tokio::test]
async fn a_cluster_whose_deletion_is_held_says_it_is_deleting() {
    let env = Env::start("rc-deleting", &["--leader-elect=false"]).await;
    env.create("demo", json!({"instances": 1, "storage": {"size": "1Gi"}}))
        .await;
    env.wait("demo", T, |c| {
        c.status.as_ref().is_some_and(|s| s.phase.is_some())
    })
    .await;
    env.patch(
        "demo",
        json!({"metadata": {"finalizers": ["test.redis.io/hold"]}}),
    )
    .await;
    env.clusters()
        .delete("demo", &Default::default())
        .await
        .expect("delete");
    let rc = env
        .wait("demo", T, |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.phase == Some(ClusterPhase::Deleting))
        })
        .await;
    let st = rc.status.expect("status");
    assert!(
        st.phase_reason.contains("being deleted"),
        "{}",
        st.phase_reason
    );
    env.patch("demo", json!({"metadata": {"finalizers": null}}))
        .await;
    testenv::eventually("demo gone", T, || async {
        env.clusters()
            .get_opt("demo")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .expect("gone");
}

/// `redis.io/reconciliationLoop: "disabled"` pauses the controller for the cluster: one
/// Warning `ReconciliationDisabled`, then nothing — a scale-up is not carried out, not even
/// recorded (`observedGeneration` stays), and a deleted pod is not recreated — until the
/// annotation goes (`ReconciliationResumed`), when both are. The status names the Services
/// and the instances (CloudNativePG's `writeService`, `readService`, `instanceNames`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_is_left_alone_until_the_annotation_goes() {
    use std::time::Instant;
    let env = Env::start("rc-pause", &["--leader-elect=false"]).await;
    env.create("demo", json!({"instances": 2, "storage": {"size": "1Gi"}}))
        .await;
    let rc = env
        .wait("demo", T, |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.instance_names == ["demo-0", "demo-1"])
        })
        .await;
    let st = rc.status.expect("status");
    assert_eq!(
        (st.write_service.as_str(), st.read_service.as_str()),
        ("demo-leader", "demo-any")
    );
    pods_are(&env, &["demo-0", "demo-1"]).await;

    let ann = |v: serde_json::Value| json!({"metadata": {"annotations": {redis::names::ANN_RECONCILIATION_LOOP: v}}});
    env.patch("demo", ann(json!("disabled"))).await;
    let notes = env.wait_event("demo", "ReconciliationDisabled").await;
    assert!(notes[0].contains("no failover"), "{notes:?}");
    let paused = env.patch("demo", json!({"spec": {"instances": 3}})).await;
    let generation = paused.metadata.generation.expect("generation");
    let pods: Api<Pod> = env.api();
    pods.delete("demo-1", &Default::default())
        .await
        .expect("delete demo-1");
    pods_are(&env, &["demo-0"]).await;
    // Longer than several poll intervals (2 s in these tests): look every 0.5 s.
    let window = Instant::now() + Duration::from_secs(10);
    while Instant::now() < window {
        assert_eq!(names(&pods, "redis.io/cluster=demo").await, ["demo-0"]);
        let st = env
            .clusters()
            .get("demo")
            .await
            .expect("cluster")
            .status
            .expect("status");
        assert!(st.observed_generation < generation, "{st:?}");
        tokio::time::sleep(Duration::from_millis(500)).await; // the sampling pace
    }

    env.patch("demo", ann(serde_json::Value::Null)).await;
    env.wait_event("demo", "ReconciliationResumed").await;
    pods_are(&env, &["demo-0", "demo-1", "demo-2"]).await;
    env.wait("demo", T, move |c| {
        c.status.as_ref().is_some_and(|s| {
            s.observed_generation == generation
                && s.instance_names == ["demo-0", "demo-1", "demo-2"]
        })
    })
    .await;
}
