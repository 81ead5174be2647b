//! The simulator against the real local control plane (kwok nodes) and a real OCI registry:
//! bare pods carrying the cocoon annotations, driven through vk-cocoon's lifecycle.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cocoon::names::{self, lifecycle};
use cocoon::pods::state;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use testenv::registry::{RegistryServer, pull_tag, push_tag, tag_exists};
use testenv::{TestNamespace, eventually, wait_for};
use vksim::{HOLD_FINALIZER, Nodes, SimConfig, Simulator, Stats};

const TIMEOUT: Duration = Duration::from_secs(60);
const PREFIX: &str = "cocoon";

struct Env {
    ns: TestNamespace,
    pods: Api<Pod>,
    registry: RegistryServer,
    sim: Simulator,
}

impl Env {
    async fn new(prefix: &str) -> Env {
        let client = testenv::client().await;
        let ns = TestNamespace::new(&client, prefix).await;
        let registry = RegistryServer::start().await.expect("registry");
        let cfg = SimConfig {
            registry_url: registry.url(),
            registry_prefix: Some(PREFIX.into()),
            namespace: Some(ns.name.clone()),
            nodes: Nodes::default(),
            pool: "default".into(),
        };
        let sim = Simulator::start(client.clone(), cfg)
            .await
            .expect("simulator");
        let pods = Api::namespaced(client, &ns.name);
        Env {
            ns,
            pods,
            registry,
            sim,
        }
    }

    fn vm(&self, suffix: &str) -> String {
        format!("vk-{}-demo-{suffix}", self.ns.name)
    }

    /// Creates pod `demo-<suffix>` (VM `vk-<ns>-demo-<suffix>`) with `extra` annotations.
    async fn create(&self, suffix: &str, role: &str, extra: Value) -> String {
        let name = format!("demo-{suffix}");
        let mut annotations = json!({
            names::ANN_VM_NAME: self.vm(suffix),
            names::ANN_GENERATION: "1",
            names::ANN_MANAGED: "true",
        });
        let extra = extra.as_object().cloned().unwrap_or_default();
        annotations.as_object_mut().expect("map").extend(extra);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {names::LABEL_SET: "demo", names::LABEL_ROLE: role},
                "annotations": annotations,
            },
            "spec": {
                "nodeSelector": {names::NODE_POOL: "default"},
                "tolerations": [{"key": names::TAINT_PROVIDER, "operator": "Exists"}],
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": names::CONTAINER_NAME, "image": names::PLACEHOLDER_IMAGE}],
            },
        }))
        .expect("pod");
        self.pods
            .create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        name
    }

    async fn annotate(&self, name: &str, annotations: Value) {
        let body = json!({"metadata": {"annotations": annotations}});
        let params = PatchParams::default();
        self.pods
            .patch(name, &params, &Patch::Merge(&body))
            .await
            .expect("annotate pod");
    }

    /// Waits for lifecycle `want` written for generation `generation`.
    async fn lifecycle(&self, name: &str, want: &'static str, generation: i64) -> Pod {
        wait_for(&self.pods, name, TIMEOUT, move |p: &Pod| {
            state::lifecycle_state(p) == Some(want) && state::lifecycle_generation(p) == generation
        })
        .await
        .unwrap_or_else(|e| panic!("{name} never became {want}@{generation}: {e:#}"))
    }

    async fn tag(&self, vm: &str, tag: &str) -> bool {
        let repo = format!("{PREFIX}/{vm}");
        tag_exists(&self.registry.url(), None, &repo, tag)
            .await
            .expect("probe tag")
    }

    async fn stats_reach(&self, what: &str, cond: impl Fn(&Stats) -> bool) -> Stats {
        let sim = &self.sim;
        eventually(what, TIMEOUT, || {
            let s = sim.stats();
            std::future::ready(cond(&s).then_some(s))
        })
        .await
        .expect("simulator counters")
    }

    async fn delete(&self, name: &str) {
        self.pods
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete pod");
        testenv::wait_deleted(&self.pods, name, TIMEOUT)
            .await
            .expect("pod gone");
    }
}

/// Records the distinct lifecycle states a pod goes through (a watch, ready before return).
async fn record(pods: &Api<Pod>, name: &str) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(pods.clone(), cfg).boxed();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let out = seen.clone();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        while let Some(Ok(ev)) = events.next().await {
            if let watcher::Event::InitDone = ev
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
            let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev else {
                continue;
            };
            let Some(s) = state::lifecycle_state(&p) else {
                continue;
            };
            let mut v = out.lock().expect("lock");
            if v.last().map(String::as_str) != Some(s) {
                v.push(s.to_owned());
            }
        }
    });
    rx.await.expect("recorder listed");
    seen
}

/// Waits until the recorded states are exactly `want` (the recorder may lag a little).
async fn expect_states(seen: &Arc<Mutex<Vec<String>>>, want: &[&str]) {
    let r = eventually("lifecycle history", TIMEOUT, || {
        let v = seen.lock().expect("lock").clone();
        std::future::ready((v == want).then_some(()))
    })
    .await;
    let got = seen.lock().expect("lock").clone();
    assert!(r.is_ok(), "lifecycle history {got:?}, want {want:?}");
}

#[tokio::test]
async fn the_default_simulator_owns_the_kwok_nodes_in_pool_default() {
    let env = Env::new("vksim-nodes").await;
    let client = testenv::client().await;
    let nodes: Api<Node> = Api::all(client);
    let list = nodes
        .list(&ListParams::default().labels(vksim::KWOK_NODES))
        .await
        .expect("nodes");
    let mut kwok: Vec<String> = list
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    kwok.sort();
    assert!(!kwok.is_empty());
    assert_eq!(env.sim.nodes(), kwok.as_slice(), "exactly the kwok nodes");
    for n in list.items {
        let labels = n.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get(names::NODE_POOL).map(String::as_str),
            Some("default")
        );
    }
    // A pod on one of its nodes is held (its deletion will wait for the teardown).
    let name = env.create("0", "main", json!({})).await;
    let ready = env.lifecycle(&name, lifecycle::READY, 1).await;
    assert!(held(&ready), "{:?}", ready.metadata.finalizers);
    // Stopping releases what it holds: nothing stays Terminating for a simulator that is gone.
    let Env { sim, pods, .. } = env;
    sim.stop().await;
    let released = pods.get(&name).await.expect("pod");
    assert!(!held(&released), "{:?}", released.metadata.finalizers);
}

fn held(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == HOLD_FINALIZER)
}

#[tokio::test]
async fn create_hibernate_wake_and_restamp() {
    let env = Env::new("vksim-life").await;
    let name = "demo-0".to_owned();
    let seen = record(&env.pods, &name).await;
    env.create("0", "main", json!({})).await;
    let ready = env.lifecycle(&name, lifecycle::READY, 1).await;
    let first_id = state::vm_id(&ready).expect("vm id").to_owned();
    assert!(first_id.starts_with("vm-"), "{first_id}");
    let pod_ip = ready.status.as_ref().and_then(|s| s.pod_ip.as_deref());
    assert!(
        pod_ip.is_some_and(|ip| ip.starts_with("127.1.")),
        "{pod_ip:?}"
    );
    assert_eq!(state::vm_ip(&ready), pod_ip, "the VM takes the pod's IP");
    expect_states(&seen, &["creating", "ready"]).await;

    env.annotate(&name, json!({names::ANN_HIBERNATE: "true"}))
        .await;
    let hibernated = env.lifecycle(&name, lifecycle::HIBERNATED, 1).await;
    assert_eq!(state::vm_id(&hibernated), None);
    assert_eq!(state::vm_ip(&hibernated), None);
    let vm = env.vm("0");
    assert!(env.tag(&vm, names::TAG_HIBERNATE).await);
    let repo = format!("{PREFIX}/{vm}");
    let snapshot = pull_tag(&env.registry.url(), None, &repo, names::TAG_HIBERNATE).await;
    let snapshot = String::from_utf8(snapshot.expect("pull").expect("tag")).expect("utf8");
    assert!(snapshot.contains(&vm), "{snapshot}");

    env.annotate(&name, json!({names::ANN_HIBERNATE: null}))
        .await;
    let woken = env.lifecycle(&name, lifecycle::READY, 1).await;
    assert_ne!(state::vm_id(&woken), Some(first_id.as_str()), "a new VM");
    assert!(
        env.tag(&vm, names::TAG_HIBERNATE).await,
        "the simulator never drops the tag"
    );
    let want = [
        "creating",
        "ready",
        "hibernating",
        "hibernated",
        "creating",
        "ready",
    ];
    expect_states(&seen, &want).await;

    env.annotate(&name, json!({names::ANN_GENERATION: "2"}))
        .await;
    let restamped = env.lifecycle(&name, lifecycle::READY, 2).await;
    assert_eq!(state::vm_id(&restamped), state::vm_id(&woken), "same VM");
    let s = env.sim.stats();
    assert_eq!((s.vms_created, s.vms_hibernated, s.vms_woken), (1, 1, 1));
    assert_eq!((s.tags_pushed, s.tags_pulled), (1, 1));
}

#[tokio::test]
async fn delete_pushes_latest_as_the_snapshot_policy_says() {
    let env = Env::new("vksim-delete").await;
    let policy = |p: &str| json!({names::ANN_SNAPSHOT_POLICY: p});
    let cases = [
        ("0", "main", policy("main-only"), true),
        ("1", "sub-agent", policy("main-only"), false),
        ("2", "sub-agent", json!({}), true),
        ("3", "sub-agent", policy("always"), true),
        ("4", "sub-agent", policy("never"), false),
    ];
    for (suffix, role, extra, _) in &cases {
        let name = env.create(suffix, role, extra.clone()).await;
        env.lifecycle(&name, lifecycle::READY, 1).await;
    }
    // A hibernated VM has nothing left to push.
    let hib = env.create("5", "sub-agent", policy("always")).await;
    env.lifecycle(&hib, lifecycle::READY, 1).await;
    env.annotate(&hib, json!({names::ANN_HIBERNATE: "true"}))
        .await;
    env.lifecycle(&hib, lifecycle::HIBERNATED, 1).await;

    for (suffix, ..) in &cases {
        env.delete(&format!("demo-{suffix}")).await;
    }
    env.delete(&hib).await;
    env.stats_reach("six VMs removed", |s| s.vms_deleted == 6)
        .await;
    for (suffix, _, _, pushed) in &cases {
        let vm = env.vm(suffix);
        assert_eq!(env.tag(&vm, names::TAG_LATEST).await, *pushed, "{vm}");
    }
    assert!(!env.tag(&env.vm("5"), names::TAG_LATEST).await);
    assert_eq!(
        env.sim.stats().tags_pushed,
        3 + 1,
        "three :latest and one :hibernate"
    );
}

#[tokio::test]
async fn restore_from_the_registry_and_from_a_kept_node_local_snapshot() {
    let env = Env::new("vksim-restore").await;
    let vm = env.vm("0");
    let seen = record(&env.pods, "demo-0").await;
    let name = env
        .create("0", "main", json!({names::ANN_RESTORE: "true"}))
        .await;
    let failed = env.lifecycle(&name, lifecycle::FAILED, 1).await;
    let message = state::lifecycle_message(&failed).expect("message");
    assert!(message.contains("not found"), "{message}");

    // Sticky for its generation: an unrelated update changes nothing.
    env.annotate(&name, json!({"example.com/poke": "1"})).await;
    let repo = format!("{PREFIX}/{vm}");
    push_tag(
        &env.registry.url(),
        None,
        &repo,
        names::TAG_HIBERNATE,
        b"snap",
    )
    .await
    .expect("push");
    env.annotate(&name, json!({names::ANN_GENERATION: "2"}))
        .await;
    let ready = env.lifecycle(&name, lifecycle::READY, 2).await;
    let node = state::node_name(&ready).expect("bound").to_owned();
    let s = env.sim.stats();
    assert_eq!((s.tags_pulled, s.failures, s.vms_created), (2, 1, 1));
    expect_states(&seen, &["creating", "failed", "creating", "ready"]).await;

    // Keep the node-local snapshot on delete, then come back on the same node: no pull.
    env.annotate(&name, json!({names::ANN_KEEP_SNAPSHOT: "true"}))
        .await;
    env.delete(&name).await;
    env.stats_reach("VM removed", |s| s.vms_deleted == 1).await;
    let name = create_on(&env, "0", &node).await;
    env.lifecycle(&name, lifecycle::READY, 1).await;
    let s = env.sim.stats();
    assert_eq!(
        (s.tags_pulled, s.vms_created),
        (2, 2),
        "restored from the node"
    );
}

/// Creates pod `demo-<suffix>` bound to `node` (no restore flag).
async fn create_on(env: &Env, suffix: &str, node: &str) -> String {
    let name = format!("demo-{suffix}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {names::LABEL_ROLE: "main"},
            "annotations": {names::ANN_VM_NAME: env.vm(suffix), names::ANN_GENERATION: "1"},
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": names::CONTAINER_NAME, "image": names::PLACEHOLDER_IMAGE}],
        },
    }))
    .expect("pod");
    env.pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    name
}

#[tokio::test]
async fn stall_holds_a_vm_until_cleared() {
    let env = Env::new("vksim-stall").await;
    let faults = env.sim.faults();
    faults.stall(&env.vm("0"));
    let stalled = env.create("0", "main", json!({})).await;
    let other = env.create("1", "sub-agent", json!({})).await;
    env.lifecycle(&other, lifecycle::READY, 1).await;
    let pod = env.pods.get(&stalled).await.expect("get");
    assert!(state::node_name(&pod).is_some(), "bound");
    assert_eq!(
        state::lifecycle_state(&pod),
        None,
        "a stalled VM is left alone"
    );
    faults.clear(&env.vm("0"));
    env.lifecycle(&stalled, lifecycle::READY, 1).await;
}

#[tokio::test]
async fn create_failure_is_sticky_until_a_new_generation() {
    let env = Env::new("vksim-failcreate").await;
    let vm = env.vm("0");
    let faults = env.sim.faults();
    faults.fail_create(&vm, "no capacity on the hypervisor");
    let seen = record(&env.pods, "demo-0").await;
    let name = env.create("0", "main", json!({})).await;
    let failed = env.lifecycle(&name, lifecycle::FAILED, 1).await;
    assert_eq!(
        state::lifecycle_message(&failed),
        Some("no capacity on the hypervisor")
    );
    assert_eq!(state::vm_id(&failed), None);
    // Clearing the fault (a kick) and an unrelated update leave the failure standing.
    faults.clear(&vm);
    env.annotate(&name, json!({"example.com/poke": "1"})).await;
    env.annotate(&name, json!({names::ANN_GENERATION: "2"}))
        .await;
    let ready = env.lifecycle(&name, lifecycle::READY, 2).await;
    assert!(state::vm_id(&ready).is_some());
    assert_eq!(state::lifecycle_message(&ready), None);
    expect_states(&seen, &["creating", "failed", "creating", "ready"]).await;
    let s = env.sim.stats();
    assert_eq!((s.failures, s.vms_created), (1, 1));
}

#[tokio::test]
async fn failed_hibernation_keeps_the_vm_and_drops_the_tag() {
    let env = Env::new("vksim-failhib").await;
    let vm = env.vm("0");
    let name = env.create("0", "main", json!({})).await;
    let ready = env.lifecycle(&name, lifecycle::READY, 1).await;
    env.sim
        .faults()
        .fail_next_hibernate(&vm, "vm remove failed");
    env.annotate(&name, json!({names::ANN_HIBERNATE: "true"}))
        .await;
    let failed = env.lifecycle(&name, lifecycle::FAILED, 1).await;
    assert_eq!(state::lifecycle_message(&failed), Some("vm remove failed"));
    assert_eq!(state::vm_id(&failed), state::vm_id(&ready), "VM still live");
    assert!(
        !env.tag(&vm, names::TAG_HIBERNATE).await,
        "pushed tag deleted again"
    );
    let s = env.sim.stats();
    assert_eq!((s.tags_pushed, s.tags_deleted, s.vms_hibernated), (1, 1, 0));

    // The fault was one-shot: the next generation retries and succeeds.
    env.annotate(&name, json!({names::ANN_GENERATION: "2"}))
        .await;
    let hibernated = env.lifecycle(&name, lifecycle::HIBERNATED, 2).await;
    assert_eq!(state::vm_id(&hibernated), None);
    assert!(env.tag(&vm, names::TAG_HIBERNATE).await);
}

#[tokio::test]
async fn a_deleted_pod_stays_terminating_until_its_latest_snapshot_is_pushed() {
    let env = Env::new("vksim-hold").await;
    let vm = env.vm("0");
    let name = env.create("0", "main", json!({})).await;
    env.lifecycle(&name, lifecycle::READY, 1).await;
    // vk-cocoon is slow to tear the VM down (stalled), as a real snapshot push can be.
    env.sim.faults().stall(&vm);
    env.pods
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete pod");
    // A barrier: a pod the simulator does not hold (no VM name), deleted after ours, is gone
    // once kwok has handled the deletions; ours is still there, Terminating.
    let bystander: Pod = serde_json::from_value(json!({
        "metadata": {"name": "bystander"},
        "spec": {
            "nodeSelector": {names::NODE_POOL: "default"},
            "tolerations": [{"key": names::TAINT_PROVIDER, "operator": "Exists"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": names::PLACEHOLDER_IMAGE}],
        },
    }))
    .expect("pod");
    env.pods
        .create(&PostParams::default(), &bystander)
        .await
        .expect("create bystander");
    wait_for(&env.pods, "bystander", TIMEOUT, |p: &Pod| {
        state::phase(p) == "Running"
    })
    .await
    .expect("bystander running");
    env.delete("bystander").await;
    let terminating = env.pods.get(&name).await.expect("still there");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert!(!env.tag(&vm, names::TAG_LATEST).await, "nothing pushed yet");
    // Once the teardown runs, the push comes first and only then does the pod go.
    env.sim.faults().clear(&vm);
    testenv::wait_deleted(&env.pods, &name, TIMEOUT)
        .await
        .expect("pod released");
    assert!(
        env.tag(&vm, names::TAG_LATEST).await,
        ":latest pushed before the pod went"
    );
}

/// Nodes of one test, like the plane's kwok nodes but without `type=kwok` (so no simulator
/// claims them by default) and tainted for vk-cocoon pods only; deleted when dropped.
struct TestNodes {
    names: Vec<String>,
}

impl TestNodes {
    async fn create(client: &kube::Client, ns: &str, count: usize) -> TestNodes {
        let api: Api<Node> = Api::all(client.clone());
        let names: Vec<String> = (0..count).map(|i| format!("{ns}-node-{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            let capacity =
                json!({"cpu": "1k", "memory": "1Ti", "pods": "1M", "ephemeral-storage": "10Ti"});
            // Loopback pod addresses only, away from the plane's 127.1.0-2.x.
            let cidr = format!("127.1.{}.0/24", 200 + i);
            let node: Node = serde_json::from_value(json!({
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {"kubernetes.io/hostname": name, "flotilla.dev/test": ns},
                },
                "spec": {
                    "podCIDR": cidr, "podCIDRs": [cidr],
                    "taints": [{"key": names::TAINT_PROVIDER, "value": "cocoon", "effect": "NoSchedule"}],
                },
                "status": {"capacity": capacity, "allocatable": capacity},
            }))
            .expect("node");
            api.create(&PostParams::default(), &node)
                .await
                .expect("create node");
        }
        let nodes = TestNodes { names };
        for name in &nodes.names {
            wait_for(&api, name, TIMEOUT, |n: &Node| {
                let ready = n
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let not_ready = n
                    .spec
                    .iter()
                    .flat_map(|s| s.taints.iter().flatten())
                    .any(|t| t.key == "node.kubernetes.io/not-ready");
                ready && !not_ready
            })
            .await
            .unwrap_or_else(|e| panic!("node {name} never became Ready: {e:#}"));
        }
        nodes
    }
}

impl Drop for TestNodes {
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.names);
        // A runtime of its own: drop may run while the test's runtime is blocked or gone.
        let deleting = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let api: Api<Node> = Api::all(testenv::client().await);
                for name in names {
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
            });
        });
        let _ = deleting.join();
    }
}

/// Creates pod `name` for VM `vk-<ns>-<name>` in `pool` (scheduled by the pool's selector).
async fn create_in_pool(pods: &Api<Pod>, ns: &str, name: &str, pool: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {names::ANN_VM_NAME: format!("vk-{ns}-{name}"), names::ANN_GENERATION: "1"},
        },
        "spec": {
            "nodeSelector": {names::NODE_POOL: pool},
            "tolerations": [{"key": names::TAINT_PROVIDER, "operator": "Exists"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": names::CONTAINER_NAME, "image": names::PLACEHOLDER_IMAGE}],
        },
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

#[tokio::test]
async fn two_simulators_with_different_pools_own_only_their_nodes() {
    let client = testenv::client().await;
    let ns = TestNamespace::new(&client, "vksim-two").await;
    let registry = RegistryServer::start().await.expect("registry");
    let nodes = TestNodes::create(&client, &ns.name, 2).await;
    let node_api: Api<Node> = Api::all(client.clone());
    let kwok_pools = || async {
        let list = node_api
            .list(&ListParams::default().labels(vksim::KWOK_NODES))
            .await
            .expect("kwok nodes");
        list.items
            .iter()
            .map(|n| (n.metadata.name.clone(), vksim_pool(n)))
            .collect::<Vec<_>>()
    };
    let shared_before = kwok_pools().await;
    let start = |node: &str, pool: &str| {
        let cfg = SimConfig {
            registry_url: registry.url(),
            registry_prefix: None,
            namespace: Some(ns.name.clone()),
            nodes: Nodes::Named(vec![node.to_owned()]),
            pool: pool.to_owned(),
        };
        Simulator::start(client.clone(), cfg)
    };
    let (pool_a, pool_b) = (format!("{}-a", ns.name), format!("{}-b", ns.name));
    let sim_a = start(&nodes.names[0], &pool_a).await.expect("simulator a");
    let sim_b = start(&nodes.names[1], &pool_b).await.expect("simulator b");
    assert_eq!(sim_a.nodes(), &nodes.names[..1]);
    assert_eq!(sim_b.nodes(), &nodes.names[1..]);
    for (node, pool) in [(&nodes.names[0], &pool_a), (&nodes.names[1], &pool_b)] {
        let n = node_api.get(node).await.expect("node");
        assert_eq!(vksim_pool(&n).as_deref(), Some(pool.as_str()), "{node}");
    }
    assert_eq!(
        kwok_pools().await,
        shared_before,
        "the shared kwok nodes are untouched"
    );
    // A third simulator asked to take a's node into b's pool refuses instead of fighting.
    let err = start(&nodes.names[0], &pool_b)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("is in pool"), "{err:#}");
    let n = node_api.get(&nodes.names[0]).await.expect("node");
    assert_eq!(
        vksim_pool(&n).as_deref(),
        Some(pool_a.as_str()),
        "still a's"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    create_in_pool(&pods, &ns.name, "in-a", &pool_a).await;
    create_in_pool(&pods, &ns.name, "in-b", &pool_b).await;
    for (name, node) in [("in-a", &nodes.names[0]), ("in-b", &nodes.names[1])] {
        let pod = wait_for(&pods, name, TIMEOUT, |p: &Pod| {
            state::lifecycle_state(p) == Some(lifecycle::READY)
        })
        .await
        .unwrap_or_else(|e| panic!("{name} never ready: {e:#}"));
        assert_eq!(state::node_name(&pod), Some(node.as_str()), "{name}");
    }
    // Each simulator played exactly the pod on its own node.
    assert_eq!(sim_a.stats().vms_created, 1);
    assert_eq!(sim_b.stats().vms_created, 1);
    for name in ["in-a", "in-b"] {
        pods.delete(name, &DeleteParams::default())
            .await
            .expect("delete");
        testenv::wait_deleted(&pods, name, TIMEOUT)
            .await
            .expect("gone");
    }
    assert_eq!(
        (sim_a.stats().vms_deleted, sim_b.stats().vms_deleted),
        (1, 1)
    );
    assert_eq!(
        (sim_a.stats().tags_pushed, sim_b.stats().tags_pushed),
        (1, 1)
    );
    sim_a.stop().await;
    sim_b.stop().await;
}

fn vksim_pool(node: &Node) -> Option<String> {
    node.metadata
        .labels
        .as_ref()?
        .get(names::NODE_POOL)
        .cloned()
}
