//! The RedroidInstance controller against the real local control plane: each test gets its
//! own namespace and runs the controller in-process, scoped to it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use redroid::context::{Context, Settings};
use redroid::crd::{InstancePhase, RedroidInstance};
use redroid::names;
use serde_json::{Value, json};
use testenv::TestNamespace;
use tokio_util::sync::CancellationToken;

const T: Duration = Duration::from_secs(30);

struct Env {
    client: Client,
    ns: TestNamespace,
    token: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Env {
    async fn new(prefix: &str) -> Self {
        Self::with_client(prefix, testenv::client().await).await
    }

    async fn with_client(prefix: &str, client: Client) -> Self {
        let admin = testenv::client().await;
        for crd in redroid::crd::crds() {
            testenv::install_crd(&admin, crd)
                .await
                .expect("install CRD");
        }
        let ns = TestNamespace::new(&admin, prefix).await;
        for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
            testenv::bound_claim(&admin, &ns.name, claim)
                .await
                .expect("bound claim");
        }
        let mut env = Env {
            client,
            ns,
            token: CancellationToken::new(),
            task: None,
        };
        env.start();
        env
    }

    fn ctx(&self) -> Arc<Context> {
        Arc::new(Context::new(
            self.client.clone(),
            Settings {
                kmsg_tools_image: "kmsg:test".into(),
                ..Settings::default()
            },
        ))
    }

    fn start(&mut self) {
        self.token = CancellationToken::new();
        let rc = kit::controller::RunContext {
            client: self.client.clone(),
            metrics: kit::metrics::Metrics::new(),
            readiness: kit::health::Readiness::new(),
            shutdown: self.token.clone(),
            metrics_addr: ([127, 0, 0, 1], 0).into(),
            probe_addr: ([127, 0, 0, 1], 0).into(),
        };
        let (ctx, ns) = (self.ctx(), self.ns.name.clone());
        self.task = Some(tokio::spawn(async move {
            redroid::instance::run(ctx, rc, Some(ns))
                .await
                .expect("controller");
        }));
    }

    async fn stop(&mut self) {
        self.token.cancel();
        if let Some(t) = self.task.take() {
            t.await.expect("controller task");
        }
    }

    fn instances(&self) -> Api<RedroidInstance> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }
    fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    async fn create(&self, name: &str, spec: Value) -> RedroidInstance {
        let obj: RedroidInstance = serde_json::from_value(json!({
            "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("instance");
        self.instances()
            .create(&PostParams::default(), &obj)
            .await
            .expect("create instance")
    }

    async fn patch_spec(&self, name: &str, spec: Value) {
        let p = Patch::Merge(json!({"spec": spec}));
        self.instances()
            .patch(name, &PatchParams::default(), &p)
            .await
            .expect("patch spec");
    }

    async fn patch_status(&self, name: &str, status: Value) {
        let p = Patch::Merge(json!({"status": status}));
        self.instances()
            .patch_status(name, &PatchParams::default(), &p)
            .await
            .expect("patch status");
    }

    async fn wait_phase(&self, name: &str, phase: InstancePhase) -> RedroidInstance {
        testenv::wait_for(&self.instances(), name, T, move |i: &RedroidInstance| {
            phase_of(i) == Some(phase)
        })
        .await
        .expect("phase")
    }

    async fn instance_pods(&self, name: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("{}={name}", names::INSTANCE_LABEL));
        self.pods().list(&lp).await.expect("list pods").items
    }

    /// Waits until an Event about `name` has `reason`. The controller publishes its Events in
    /// the background (`apply::event`), so one may land a moment after the status a test
    /// waited for; on timeout, fails showing the reasons there are.
    async fn wait_event_reason(&self, name: &str, reason: &str) {
        let what = format!("a {reason} Event about {name}");
        let got = testenv::eventually(&what, T, || async {
            let r = self.event_reasons(name).await;
            r.iter().any(|x| x == reason).then_some(())
        })
        .await;
        if let Err(e) = got {
            panic!("{e}: {:?}", self.event_reasons(name).await);
        }
    }

    async fn event_reasons(&self, name: &str) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns.name);
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        api.list(&lp)
            .await
            .expect("events")
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

fn phase_of(i: &RedroidInstance) -> Option<InstancePhase> {
    i.status.as_ref().and_then(|s| s.phase)
}

fn ready(i: &RedroidInstance) -> (String, String, String) {
    let c = i
        .status
        .as_ref()
        .and_then(|s| kit::conditions::get(&s.conditions, "Ready").cloned())
        .expect("Ready condition");
    (c.status, c.reason, c.message)
}

fn cond(i: &RedroidInstance, t: &str) -> (String, String, String) {
    let c = i
        .status
        .as_ref()
        .and_then(|s| kit::conditions::get(&s.conditions, t).cloned())
        .expect("condition");
    (c.status, c.reason, c.message)
}

#[tokio::test]
async fn running_instance_gets_pod_service_and_status() {
    let env = Env::new("ri-run").await;
    env.create("android-0", json!({"index": 3, "extraArgs": ["androidboot.x=$(FOO)"], "extraEnv": [{"name": "FOO", "value": "1"}]})).await;
    let inst = env.wait_phase("android-0", InstancePhase::Running).await;
    let status = inst.status.clone().expect("status");
    let pod_name = status.pod_name.clone().expect("podName");
    assert!(pod_name.starts_with("android-0-pod-"), "{pod_name}");
    assert_eq!(
        status.adb_address.as_deref(),
        Some(format!("android-0.{}.svc.cluster.local:5555", env.ns.name).as_str())
    );
    assert_eq!(status.observed_generation, inst.metadata.generation);
    assert_eq!(ready(&inst).0, "True");
    assert_eq!(ready(&inst).1, "Running");
    assert_eq!(
        (
            cond(&inst, "Scheduled").0.as_str(),
            cond(&inst, "Scheduled").1.as_str()
        ),
        ("True", "PodCreated")
    );

    let pod = env.pods().get(&pod_name).await.expect("pod");
    let labels = pod.labels();
    assert_eq!(
        labels.get(names::COMPONENT_LABEL).map(String::as_str),
        Some("instance")
    );
    assert_eq!(
        labels.get(names::INSTANCE_INDEX_LABEL).map(String::as_str),
        Some("3")
    );
    assert_eq!(
        labels.get(names::MANAGED_BY_LABEL).map(String::as_str),
        Some("redroid-operator")
    );
    assert!(
        pod.annotations()
            .contains_key(names::POD_TEMPLATE_HASH_ANNOTATION)
    );
    assert_eq!(pod.owner_references()[0].uid, inst.uid().expect("uid"));
    let spec = pod.spec.expect("pod spec");
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    let init = spec.init_containers.expect("init");
    assert_eq!(
        (init.len(), init[0].name.as_str(), init[0].image.as_deref()),
        (1, "kmsg-tools", Some("kmsg:test"))
    );
    let c = &spec.containers[0];
    assert_eq!(
        (c.name.as_str(), c.image.as_deref()),
        ("redroid", Some("redroid/redroid:16.0.0-latest"))
    );
    assert!(format!("{:?}", c.readiness_probe).contains("sys.boot_completed"));
    let args = c.args.clone().expect("args");
    assert_eq!(
        args.last().map(String::as_str),
        Some("androidboot.x=$(FOO)")
    );
    let env_names: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert_eq!(env_names, ["INSTANCE_INDEX", "FOO"]);
    let mounts: Vec<&str> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect();
    assert!(
        mounts.starts_with(&["/data-base", "/data-diff/3", "/dev/dri"]),
        "{mounts:?}"
    );

    let svc = env.services().get("android-0").await.expect("service");
    let sspec = svc.spec.expect("service spec");
    assert_eq!(sspec.type_.as_deref(), Some("ClusterIP"));
    let selector = sspec.selector.expect("selector");
    assert_eq!(
        selector.get(names::COMPONENT_LABEL).map(String::as_str),
        Some("instance")
    );
    assert_eq!(
        selector.get(names::INSTANCE_LABEL).map(String::as_str),
        Some("android-0")
    );
    let ports = sspec.ports.expect("ports");
    assert_eq!(
        (ports.len(), ports[0].name.as_deref(), ports[0].port),
        (1, Some("adb"), 5555)
    );
    let reasons = testenv::eventually("CreatedPod and InstanceReady events", T, || async {
        let r = env.event_reasons("android-0").await;
        (r.iter().any(|x| x == "CreatedPod") && r.iter().any(|x| x == "InstanceReady")).then_some(r)
    })
    .await;
    reasons.expect("events");
}

#[tokio::test]
async fn suspend_and_overrides_follow_the_four_level_priority() {
    let env = Env::new("ri-suspend").await;
    env.create("a", json!({"index": 0, "suspend": true})).await;
    let inst = env.wait_phase("a", InstancePhase::Stopped).await;
    assert!(env.instance_pods("a").await.is_empty());
    assert!(ready(&inst).2.contains("spec.suspend"));
    assert_eq!(
        (
            cond(&inst, "Scheduled").0.as_str(),
            cond(&inst, "Scheduled").1.as_str()
        ),
        ("False", "Stopped")
    );
    assert!(
        inst.status
            .as_ref()
            .and_then(|s| s.pod_name.clone())
            .is_none()
    );
    env.services()
        .get("a")
        .await
        .expect("service exists while suspended");

    // woken beats spec.suspend
    env.patch_status("a", json!({"woken": {"actor": "manual", "reason": "test"}}))
        .await;
    env.wait_phase("a", InstancePhase::Running).await;
    assert_eq!(env.instance_pods("a").await.len(), 1);

    // back to spec.suspend; then a temporary suspend by a task
    env.patch_status("a", json!({"woken": null})).await;
    env.wait_phase("a", InstancePhase::Stopped).await;
    assert!(
        env.instance_pods("a").await.is_empty(),
        "Stopped only once the pod is gone"
    );
    env.patch_spec("a", json!({"suspend": false})).await;
    env.wait_phase("a", InstancePhase::Running).await;
    env.patch_status(
        "a",
        json!({"suspended": {"actor": "task/my-task", "reason": "t"}}),
    )
    .await;
    let inst = env.wait_phase("a", InstancePhase::Stopped).await;
    assert!(
        ready(&inst).2.contains("task/my-task"),
        "{:?}",
        ready(&inst)
    );
    assert!(!inst.spec.suspend, "spec untouched");
    env.wait_event_reason("a", "DeletedPod").await;
}

#[tokio::test]
async fn expired_override_ends_on_time_without_any_other_event() {
    let env = Env::new("ri-expiry").await;
    env.create("a", json!({"index": 0})).await;
    // Running first, so the override below is seen by a controller already following the
    // instance (on a loaded machine a first pass could come after a short override ended,
    // and the instance would never stop).
    env.wait_phase("a", InstancePhase::Running).await;
    // Whole seconds: metav1.Time stores no fraction.
    let until =
        jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 8).expect("until");
    env.patch_status(
        "a",
        json!({"suspended": {"actor": "manual", "until": until.to_string()}}),
    )
    .await;
    env.wait_phase("a", InstancePhase::Stopped).await;
    let inst = env.wait_phase("a", InstancePhase::Running).await;
    assert!(
        inst.status
            .as_ref()
            .and_then(|s| s.suspended.clone())
            .is_none(),
        "expired override cleared"
    );
    assert!(jiff::Timestamp::now() >= until);
    env.wait_event_reason("a", "SuspendedExpired").await;
}

#[tokio::test]
async fn later_instance_on_the_same_index_waits_for_the_earlier_one() {
    let env = Env::new("ri-conflict").await;
    env.create("first", json!({"index": 1})).await;
    env.wait_phase("first", InstancePhase::Running).await;
    env.create("second", json!({"index": 1})).await;
    let second = testenv::wait_for(&env.instances(), "second", T, move |i: &RedroidInstance| {
        i.status.as_ref().is_some_and(|s| {
            kit::conditions::get(&s.conditions, "Ready")
                .is_some_and(|c| c.reason == "IndexConflict")
        })
    })
    .await
    .expect("IndexConflict");
    assert_eq!(phase_of(&second), Some(InstancePhase::Pending));
    assert!(ready(&second).2.contains("first"), "{:?}", ready(&second));
    assert!(env.instance_pods("second").await.is_empty());
    // A different index on the same PVC is fine.
    env.create("third", json!({"index": 2})).await;
    env.wait_phase("third", InstancePhase::Running).await;

    env.instances()
        .delete("first", &DeleteParams::default())
        .await
        .expect("delete first");
    env.wait_phase("second", InstancePhase::Running).await;
    assert_eq!(env.instance_pods("second").await.len(), 1);
}

#[tokio::test]
async fn data_sidecar_keeps_the_instance_down_until_it_finishes() {
    let env = Env::new("ri-datainuse").await;
    let sidecar: Pod = serde_json::from_value(json!({
        "metadata": {"name": "task-job-pod", "labels": {names::INSTANCE_LABEL: "a", names::SIDECAR_LABEL: "true", names::COMPONENT_LABEL: "task", "job-name": "task-a"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]},
    }))
    .expect("pod");
    env.pods()
        .create(&PostParams::default(), &sidecar)
        .await
        .expect("sidecar");
    env.create("a", json!({"index": 0})).await;
    let inst = testenv::wait_for(&env.instances(), "a", T, move |i: &RedroidInstance| {
        i.status.as_ref().is_some_and(|s| {
            kit::conditions::get(&s.conditions, "Ready").is_some_and(|c| c.reason == "DataInUse")
        })
    })
    .await
    .expect("DataInUse");
    assert!(ready(&inst).2.contains("task-a"), "{:?}", ready(&inst));
    assert!(
        env.instance_pods("a")
            .await
            .iter()
            .all(|p| p.name_any() == "task-job-pod")
    );
    env.pods()
        .delete("task-job-pod", &DeleteParams::default())
        .await
        .expect("delete sidecar");
    env.wait_phase("a", InstancePhase::Running).await;
}

#[tokio::test]
async fn operator_never_writes_spec() {
    let env = Env::new("ri-nospec").await;
    env.create("a", json!({"index": 0})).await;
    env.wait_phase("a", InstancePhase::Running).await;
    env.patch_status("a", json!({"suspended": {"actor": "manual"}}))
        .await;
    let inst = env.wait_phase("a", InstancePhase::Stopped).await;
    assert_eq!(inst.metadata.generation, Some(1));
    for m in inst
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(names::FIELD_MANAGER))
    {
        assert_eq!(
            m.subresource.as_deref(),
            Some("status"),
            "operator wrote outside status: {m:?}"
        );
        let fields = m
            .fields_v1
            .as_ref()
            .map(|f| f.0.clone())
            .unwrap_or_default();
        assert!(fields.get("f:spec").is_none(), "{fields}");
    }
}

#[tokio::test]
async fn pod_is_adopted_after_an_operator_restart() {
    let mut env = Env::new("ri-adopt").await;
    env.create("a", json!({"index": 0})).await;
    let before = env
        .wait_phase("a", InstancePhase::Running)
        .await
        .status
        .and_then(|s| s.pod_name);
    env.stop().await;
    env.start();
    // A change the new controller must react to, proving it reconciled.
    env.patch_spec("a", json!({"service": {"annotations": {"x": "1"}}}))
        .await;
    testenv::wait_for(&env.services(), "a", T, |s: &Service| {
        s.annotations().contains_key("x")
    })
    .await
    .expect("service updated");
    let pods = env.instance_pods("a").await;
    assert_eq!(pods.len(), 1);
    assert_eq!(Some(pods[0].name_any()), before);
}

#[tokio::test]
async fn spec_change_recreates_the_pod() {
    let env = Env::new("ri-recreate").await;
    env.create("a", json!({"index": 0})).await;
    let old = env
        .wait_phase("a", InstancePhase::Running)
        .await
        .status
        .and_then(|s| s.pod_name)
        .expect("pod");
    env.patch_spec("a", json!({"image": "redroid/redroid:12.0.0-latest"}))
        .await;
    let inst = testenv::wait_for(&env.instances(), "a", T, move |i: &RedroidInstance| {
        phase_of(i) == Some(InstancePhase::Running)
            && i.status
                .as_ref()
                .and_then(|s| s.pod_name.clone())
                .is_some_and(|p| p != old)
    })
    .await
    .expect("new pod running");
    let pods = env.instance_pods("a").await;
    assert_eq!(pods.len(), 1);
    assert_eq!(
        Some(pods[0].name_any()),
        inst.status.and_then(|s| s.pod_name)
    );
    let image = pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.containers[0].image.clone());
    assert_eq!(image.as_deref(), Some("redroid/redroid:12.0.0-latest"));
}

#[tokio::test]
async fn failed_pod_reports_container_and_exit_code() {
    let env = Env::new("ri-failed").await;
    env.create("a", json!({"index": 0})).await;
    let pod = env
        .wait_phase("a", InstancePhase::Running)
        .await
        .status
        .and_then(|s| s.pod_name)
        .expect("pod");
    let chaos = "pod-container-running-failed.stage.kwok.x-k8s.io";
    let p = json!({"metadata": {"labels": {chaos: "true"}, "annotations": {
        format!("{chaos}/exit-code"): "137", format!("{chaos}/reason"): "OOMKilled", format!("{chaos}/container-name"): "redroid"}}});
    env.pods()
        .patch(&pod, &PatchParams::default(), &Patch::Merge(p))
        .await
        .expect("chaos label");
    let inst = env.wait_phase("a", InstancePhase::Failed).await;
    let (status, reason, message) = ready(&inst);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "PodFailed"));
    assert!(
        message.contains("137") && message.contains("\"redroid\""),
        "{message}"
    );
    assert!(cond(&inst, "Scheduled").2.contains("failed"));
}

#[tokio::test]
async fn service_follows_spec_and_keeps_foreign_annotations() {
    let env = Env::new("ri-svc").await;
    let spec = json!({"index": 0, "adbPort": 6000, "baseMode": true,
        "service": {"type": "NodePort", "nodePort": 30655, "annotations": {"a": "1", "b": "2"}}});
    env.create("a", spec).await;
    let inst = env.wait_phase("a", InstancePhase::Running).await;
    assert!(
        inst.status
            .as_ref()
            .and_then(|s| s.adb_address.clone())
            .is_some_and(|a| a.ends_with(":6000"))
    );
    let svc = env.services().get("a").await.expect("svc");
    let port = &svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .expect("ports")[0];
    assert_eq!((port.port, port.node_port), (6000, Some(30655)));
    let pod = &env.instance_pods("a").await[0];
    let c = &pod.spec.as_ref().expect("spec").containers[0];
    assert!(
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/data")
    );
    assert!(
        c.args
            .iter()
            .flatten()
            .any(|a| a == "androidboot.use_redroid_overlayfs=0")
    );
    let foreign = Patch::Merge(json!({"metadata": {"annotations": {"foreign": "yes"}}}));
    env.services()
        .patch("a", &PatchParams::default(), &foreign)
        .await
        .expect("foreign annotation");
    env.patch_spec("a", json!({"service": {"annotations": {"b": null}}}))
        .await;
    let svc = testenv::wait_for(&env.services(), "a", T, |s: &Service| {
        !s.annotations().contains_key("b")
    })
    .await
    .expect("b removed");
    assert_eq!(svc.annotations().get("a").map(String::as_str), Some("1"));
    assert_eq!(
        svc.annotations().get("foreign").map(String::as_str),
        Some("yes")
    );
}

#[tokio::test]
async fn legacy_finalizer_is_removed_on_deletion() {
    let env = Env::new("ri-finalizer").await;
    env.create("a", json!({"index": 0})).await;
    env.wait_phase("a", InstancePhase::Running).await;
    let p = Patch::Merge(json!({"metadata": {"finalizers": [names::LEGACY_INSTANCE_FINALIZER]}}));
    env.instances()
        .patch("a", &PatchParams::default(), &p)
        .await
        .expect("add finalizer");
    env.instances()
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    testenv::wait_deleted(&env.instances(), "a", T)
        .await
        .expect("instance gone");
}

#[tokio::test]
async fn converged_reconcile_makes_zero_writes() {
    let (client, counts) = testenv::counting_client().await;
    let env = Env::with_client("ri-noop", client).await;
    env.create(
        "a",
        json!({"index": 0, "service": {"annotations": {"x": "1"}}}),
    )
    .await;
    env.wait_phase("a", InstancePhase::Running).await;
    let r = Arc::new(redroid::instance::Reconciler::new(env.ctx()));
    // Settle: the running controller and a direct pass may still be converging.
    testenv::eventually("a pass with no writes", T, || async {
        let inst = Arc::new(env.instances().get("a").await.ok()?);
        counts.reset();
        redroid::instance::reconcile(inst, r.clone()).await.ok()?;
        (counts.writes() == 0).then_some(())
    })
    .await
    .expect("converged");
    let inst = Arc::new(env.instances().get("a").await.expect("get"));
    counts.reset();
    redroid::instance::reconcile(inst, r.clone())
        .await
        .expect("reconcile");
    assert_eq!(counts.writes(), 0, "{:?}", counts.by_verb());
}

// Passes that start before the Pod and Service caches are synced wait for them; kube-runtime
// wakes only one waiter of a store, so passes waiting side by side used to hang for good (the
// instance never got a status). Instances created the moment the controller starts hit that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_created_at_start_up_are_all_reconciled() {
    const N: i32 = 12;
    let env = Env::new("ri-startup").await;
    // All at once, while the controller is still listing.
    let names: Vec<String> = (0..N).map(|i| format!("a{i}")).collect();
    let creates = names
        .iter()
        .zip(0..N)
        .map(|(name, i)| env.create(name, json!({"index": i})));
    futures::future::join_all(creates).await;
    for name in &names {
        env.wait_phase(name, InstancePhase::Running).await;
    }
}

fn reason_is(i: &RedroidInstance, reason: &str) -> bool {
    i.status.as_ref().is_some_and(|s| {
        kit::conditions::get(&s.conditions, "Ready").is_some_and(|c| c.reason == reason)
    })
}

// Issue item 10: the wake-up of a blocked instance used to come from a separate watch that can
// arrive before the controller's instance cache drops the deleted peer; the blocked instance
// then re-read the stale cache, stayed blocked and had no timed retry. Several pairs at once
// and several rounds load the controller so the two orderings both happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_instance_starts_every_time_its_peer_is_deleted() {
    const PAIRS: i32 = 4;
    const ROUNDS: i32 = 4;
    // Well below the controller's timed backstop: the start must come from the deletion.
    const START: Duration = Duration::from_secs(15);
    let env = Env::new("ri-conflict-race").await;
    for round in 0..ROUNDS {
        let index = |p: i32| 10 + round * PAIRS + p;
        for p in 0..PAIRS {
            env.create(&format!("first-{round}-{p}"), json!({"index": index(p)}))
                .await;
        }
        for p in 0..PAIRS {
            env.wait_phase(&format!("first-{round}-{p}"), InstancePhase::Running)
                .await;
            env.create(&format!("second-{round}-{p}"), json!({"index": index(p)}))
                .await;
        }
        for p in 0..PAIRS {
            testenv::wait_for(
                &env.instances(),
                &format!("second-{round}-{p}"),
                T,
                |i: &RedroidInstance| reason_is(i, "IndexConflict"),
            )
            .await
            .expect("IndexConflict");
        }
        // `kubectl delete --wait=false`, all at once.
        for p in 0..PAIRS {
            env.instances()
                .delete(&format!("first-{round}-{p}"), &DeleteParams::default())
                .await
                .expect("delete first");
        }
        for p in 0..PAIRS {
            let name = format!("second-{round}-{p}");
            testenv::wait_for(&env.instances(), &name, START, |i: &RedroidInstance| {
                phase_of(i) == Some(InstancePhase::Running)
            })
            .await
            .unwrap_or_else(|e| panic!("round {round}: {name} never started: {e}"));
        }
    }
}

// A deleted peer no longer wins the conflict, but its Pod still runs on the shared layer until
// garbage collection removes it: the blocked instance starts only once that Pod is gone.
#[tokio::test]
async fn deleted_peer_pod_still_holds_the_layer_until_it_is_gone() {
    const HOLD: &str = "flotilla.test/hold";
    let env = Env::new("ri-conflict-pod").await;
    env.create("first", json!({"index": 4})).await;
    let pod = env
        .wait_phase("first", InstancePhase::Running)
        .await
        .status
        .and_then(|s| s.pod_name)
        .expect("pod");
    env.create("second", json!({"index": 4})).await;
    testenv::wait_for(&env.instances(), "second", T, |i: &RedroidInstance| {
        reason_is(i, "IndexConflict")
    })
    .await
    .expect("IndexConflict");
    // Keep first's Pod around after its instance is gone.
    let hold = Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}}));
    env.pods()
        .patch(&pod, &PatchParams::default(), &hold)
        .await
        .expect("hold pod");
    env.instances()
        .delete("first", &DeleteParams::default())
        .await
        .expect("delete first");
    testenv::wait_deleted(&env.instances(), "first", T)
        .await
        .expect("first gone");
    let waiting = testenv::wait_for(&env.instances(), "second", T, move |i: &RedroidInstance| {
        reason_is(i, "IndexConflict") && ready(i).2.contains("waiting for Pod")
    })
    .await
    .expect("second waits for first's Pod");
    assert!(ready(&waiting).2.contains(&pod), "{:?}", ready(&waiting));
    assert!(env.instance_pods("second").await.is_empty());
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    env.pods()
        .patch(&pod, &PatchParams::default(), &release)
        .await
        .expect("release pod");
    env.wait_phase("second", InstancePhase::Running).await;
}

// Issue item 11: names a RedroidInstance may have but a Service may not (a leading digit, more
// than 63 characters) were refused with InvalidSpec. They run now, with a derived Service
// named in status.serviceName and the ADB address, and label values cut to 63 characters.
#[tokio::test]
async fn names_that_are_not_service_names_still_run() {
    let env = Env::new("ri-names").await;
    let long = format!("android-{}", "x".repeat(70));
    for (name, index) in [("0android", 0), (long.as_str(), 1), ("android-1", 2)] {
        env.create(name, json!({"index": index})).await;
        let inst = env.wait_phase(name, InstancePhase::Running).await;
        let status = inst.status.clone().expect("status");
        let service = names::service_name(name);
        assert_eq!(status.service_name.as_deref(), Some(service.as_str()));
        assert_eq!(
            status.adb_address,
            Some(format!("{service}.{}.svc.cluster.local:5555", env.ns.name))
        );
        assert_eq!(name == "android-1", service == name, "{name} -> {service}");
        let svc = env.services().get(&service).await.expect("service");
        assert_eq!(svc.owner_references()[0].uid, inst.uid().expect("uid"));
        let label = names::instance_label(name);
        assert!(label.len() <= 63);
        let selector = svc.spec.and_then(|s| s.selector).expect("selector");
        assert_eq!(selector.get(names::INSTANCE_LABEL), Some(&label));
        let pod = status.pod_name.expect("pod");
        assert!(pod.len() <= 63, "{pod}");
        let pods = env.instance_pods(&label).await;
        assert_eq!(
            pods.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
            [pod],
            "the Service selects exactly the instance Pod"
        );
    }
}

// Issue item 12: a baseMode instance writes the shared PVC that overlays mount as their
// read-only lower layer; the later one waits with BaseLayerConflict, whichever it is.
#[tokio::test]
async fn base_mode_and_overlays_on_one_shared_pvc_never_run_together() {
    let env = Env::new("ri-basemode").await;
    env.create("base-a", json!({"index": 0, "baseMode": true}))
        .await;
    env.wait_phase("base-a", InstancePhase::Running).await;
    env.create("overlay-c", json!({"index": 2})).await;
    let waiting = testenv::wait_for(&env.instances(), "overlay-c", T, |i: &RedroidInstance| {
        reason_is(i, "BaseLayerConflict")
    })
    .await
    .expect("overlay waits");
    assert_eq!(phase_of(&waiting), Some(InstancePhase::Pending));
    let msg = ready(&waiting).2;
    assert!(
        msg.contains("base-a") && msg.contains("lower layer"),
        "{msg}"
    );
    assert!(env.instance_pods("overlay-c").await.is_empty());
    // Another base is no conflict.
    testenv::bound_claim(&env.client, &env.ns.name, "other-base")
        .await
        .expect("claim");
    env.create(
        "elsewhere",
        json!({"index": 3, "sharedDataPVC": "other-base"}),
    )
    .await;
    env.wait_phase("elsewhere", InstancePhase::Running).await;
    // Leaving baseMode frees the overlay, once base-a's baseMode Pod is gone.
    env.patch_spec("base-a", json!({"baseMode": false})).await;
    env.wait_phase("overlay-c", InstancePhase::Running).await;
    env.wait_phase("base-a", InstancePhase::Running).await;
    // And a later baseMode instance waits for the running overlays.
    env.create("base-b", json!({"index": 9, "baseMode": true}))
        .await;
    testenv::wait_for(&env.instances(), "base-b", T, |i: &RedroidInstance| {
        reason_is(i, "BaseLayerConflict")
    })
    .await
    .expect("base waits");
    assert!(env.instance_pods("base-b").await.is_empty());
    env.wait_event_reason("overlay-c", "BaseLayerConflict")
        .await;
}

#[tokio::test]
async fn an_instance_without_spec_is_reported_invalid_and_others_still_run() {
    let env = Env::new("ri-nospec").await;
    testenv::admission::Kind::new(
        &env.client,
        &env.ns.name,
        "redroid.isning.moe",
        "v1alpha1",
        "RedroidInstance",
    )
    .create_without_spec("bare")
    .await
    .expect("the schema accepts an object without spec, as upstream's does");
    env.create("fine", json!({"index": 3})).await;
    env.wait_phase("fine", InstancePhase::Running).await;
    let bare = testenv::wait_for(&env.instances(), "bare", T, |i: &RedroidInstance| {
        reason_is(i, "InvalidSpec")
    })
    .await
    .expect("bare is reported");
    let (_, _, message) = ready(&bare);
    assert!(message.contains("spec.image"), "{message}");
    let pods = env
        .pods()
        .list(&ListParams::default().labels(&format!("{}=bare", names::INSTANCE_LABEL)))
        .await
        .expect("pods");
    assert!(pods.items.is_empty(), "nothing runs for it");
    assert!(
        env.services().get_opt("bare").await.expect("get").is_none(),
        "no Service either"
    );
}

// Issue 13: the operator deletes a deleted instance's Pod itself, not leaving it to the
// garbage collector (whose request budget is shared with the whole cluster), and with no
// finalizer: the instance is gone at once. To tell the two apart, the Pod gets a second
// owner that stays: the garbage collector then only drops the dangling reference and keeps
// the Pod, so only the operator can be the one deleting it.
#[tokio::test]
async fn deleting_an_instance_deletes_its_pod_without_a_finalizer() {
    let env = Env::new("ri-delete").await;
    env.create("a", json!({"index": 0})).await;
    let pod = env
        .wait_phase("a", InstancePhase::Running)
        .await
        .status
        .and_then(|s| s.pod_name)
        .expect("pod");
    let keeper: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "keeper"}})).expect("configmap");
    let keeper = Api::namespaced(env.client.clone(), &env.ns.name)
        .create(&PostParams::default(), &keeper)
        .await
        .expect("create keeper");
    let mut owners = env
        .pods()
        .get(&pod)
        .await
        .expect("pod")
        .owner_references()
        .to_vec();
    owners.push(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "keeper".into(),
            uid: keeper.uid().expect("uid"),
            ..Default::default()
        },
    );
    let p = Patch::Merge(json!({"metadata": {"ownerReferences": owners}}));
    env.pods()
        .patch(&pod, &PatchParams::default(), &p)
        .await
        .expect("second owner");
    let inst = env.instances().get("a").await.expect("instance");
    assert!(inst.finalizers().is_empty(), "{:?}", inst.finalizers());
    env.instances()
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    testenv::wait_deleted(&env.instances(), "a", T)
        .await
        .expect("instance gone");
    testenv::wait_deleted(&env.pods(), &pod, T)
        .await
        .expect("the operator deleted the Pod");
}
