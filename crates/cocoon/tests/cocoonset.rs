//! CocoonSet end to end: the real operator on the local control plane, with a real OCI
//! registry and the vk-cocoon simulator playing the VM side (`tests/support`).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use cocoon::cocoonset::progress;
use cocoon::crd::{CocoonSet, CocoonSetPhase};
use cocoon::names;
use cocoon::pods::state;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Env, T};

/// Creates CocoonSet `name` with `spec` (merged over a minimal agent).
async fn create_set(env: &Env, name: &str, spec: Value) -> CocoonSet {
    let mut full = json!({"agent": {"image": "ghcr.io/cocoonstack/ubuntu:24.04"}});
    merge(&mut full, spec);
    let set: CocoonSet = serde_json::from_value(json!({
        "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonSet",
        "metadata": {"name": name}, "spec": full,
    }))
    .expect("cocoonset");
    env.api::<CocoonSet>()
        .create(&PostParams::default(), &set)
        .await
        .expect("create cocoonset")
}

fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p,
    }
}

async fn patch_spec(env: &Env, name: &str, spec: Value) {
    let patch = Patch::Merge(json!({ "spec": spec }));
    env.api::<CocoonSet>()
        .patch(name, &PatchParams::default(), &patch)
        .await
        .expect("patch cocoonset");
}

fn phase(set: &CocoonSet) -> Option<CocoonSetPhase> {
    set.status.as_ref().and_then(|s| s.phase)
}

/// Waits until set `name` satisfies `cond`.
async fn wait_set(
    env: &Env,
    name: &str,
    what: &str,
    cond: impl Fn(&CocoonSet) -> bool + Clone + Send + 'static,
) -> CocoonSet {
    wait_set_within(env, name, what, T, cond).await
}

async fn wait_set_within(
    env: &Env,
    name: &str,
    what: &str,
    within: Duration,
    cond: impl Fn(&CocoonSet) -> bool + Clone + Send + 'static,
) -> CocoonSet {
    testenv::wait_for(&env.api::<CocoonSet>(), name, within, cond)
        .await
        .unwrap_or_else(|e| panic!("CocoonSet {name}: {what}: {e:#}"))
}

/// Waits until set `name` is in `want` for its current generation. An in-between phase is
/// reported only once the move has taken `progress::GRACE`, so its wait is that much longer.
async fn wait_phase(env: &Env, name: &str, want: CocoonSetPhase) -> CocoonSet {
    let within = if progress::transitional(want) {
        T + progress::GRACE
    } else {
        T
    };
    wait_set_within(env, name, want.as_str(), within, move |s| {
        phase(s) == Some(want)
            && s.status.as_ref().and_then(|st| st.observed_generation) == s.metadata.generation
    })
    .await
}

/// The set's pods by name.
async fn pods_of(env: &Env, set: &str) -> BTreeMap<String, Pod> {
    let lp = ListParams::default().labels(&format!("{}={set}", names::LABEL_SET));
    let pods = env.api::<Pod>().list(&lp).await.expect("list pods");
    pods.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.name_any(), p))
        .collect()
}

/// Waits until the set's live pods are exactly `names`.
async fn wait_pod_names(env: &Env, set: &str, want: &[&str]) -> BTreeMap<String, Pod> {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    testenv::eventually(&format!("pods of {set} = {want:?}"), T, || async {
        let pods = pods_of(env, set).await;
        (pods.keys().cloned().collect::<Vec<_>>() == want).then_some(pods)
    })
    .await
    .expect("pod names")
}

/// Whether the status shows a VM id for every agent and toolbox (vk-cocoon reported them).
fn all_vms_reported(set: &CocoonSet) -> bool {
    set.status.as_ref().is_some_and(|s| {
        s.agents.len() as i32 == s.desired_agents
            && s.toolboxes.len() as i32 == s.desired_toolboxes
            && s.agents.iter().all(|a| !a.vm_id.is_empty())
            && s.toolboxes.iter().all(|t| !t.vm_id.is_empty())
    })
}

fn vm_of(env: &Env, set: &str, suffix: &str) -> String {
    format!("vk-{}-{set}-{suffix}", env.ns.name)
}

#[tokio::test]
async fn a_set_comes_up_with_main_sub_agents_and_toolbox() {
    let env = Env::start("cset-up").await;
    let spec =
        json!({"agent": {"replicas": 2}, "toolboxes": [{"name": "db", "image": "postgres"}]});
    create_set(&env, "demo", spec).await;
    let set = wait_set(&env, "demo", "Running with every VM id reported", |s| {
        phase(s) == Some(CocoonSetPhase::Running) && all_vms_reported(s)
    })
    .await;
    let status = set.status.expect("status");
    assert_eq!((status.ready_agents, status.desired_agents), (3, 3));
    assert_eq!((status.ready_toolboxes, status.desired_toolboxes), (1, 1));
    let slots: Vec<i32> = status.agents.iter().map(|a| a.slot).collect();
    assert_eq!(slots, [0, 1, 2]);
    assert!(
        status.toolboxes.iter().all(|t| !t.ip.is_empty()),
        "{:?}",
        status.toolboxes
    );
    assert_eq!(status.agents[1].forked_from, vm_of(&env, "demo", "0"));
    assert!(kit::conditions::is_true(&status.conditions, "Ready"));
    let pods = pods_of(&env, "demo").await;
    let main = &pods["demo-0"];
    assert_eq!(state::label(main, names::LABEL_ROLE), Some("main"));
    assert_eq!(
        state::vm_name(main),
        Some(vm_of(&env, "demo", "0").as_str())
    );
    let sub = &pods["demo-1"];
    assert_eq!(
        state::node_name(sub),
        state::node_name(main),
        "sub-agents share the main's node"
    );
    let db = &pods["demo-db"];
    assert_eq!(state::vm_name(db), Some(vm_of(&env, "demo", "db").as_str()));
    assert_eq!(state::label(db, names::LABEL_SLOT), Some("db"));
}

#[tokio::test]
async fn suspend_and_unsuspend_round_trip() {
    let env = Env::start("cset-suspend").await;
    let spec = json!({"agent": {"replicas": 1}, "toolboxes": [{"name": "db"}]});
    create_set(&env, "demo", spec).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    patch_spec(&env, "demo", json!({"suspend": true})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Suspended).await;
    let pods = pods_of(&env, "demo").await;
    for (name, pod) in &pods {
        assert!(state::hibernate_requested(pod), "{name} flagged");
        assert_eq!(state::lifecycle_state(pod), Some("hibernated"), "{name}");
        assert!(
            env.tag_exists(state::vm_name(pod).expect("vm"), "hibernate")
                .await
        );
    }
    patch_spec(&env, "demo", json!({"suspend": false})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let pods = testenv::eventually("VMs live again", T, || async {
        let pods = pods_of(&env, "demo").await;
        pods.values().all(state::vm_live).then_some(pods)
    })
    .await
    .expect("woken");
    for (name, pod) in &pods {
        let key_present = pod.annotations().contains_key(names::ANN_HIBERNATE);
        assert!(!key_present, "{name}: unsuspend deletes the hibernate key");
    }
    // Un-suspend never drops tags: the lifecycle gate is what makes a stale one harmless.
    assert!(env.tag_exists(&vm_of(&env, "demo", "0"), "hibernate").await);
}

#[tokio::test]
async fn a_stale_snapshot_tag_is_not_taken_for_hibernation() {
    let env = Env::start("cset-stale").await;
    create_set(&env, "demo", json!({})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let vm = vm_of(&env, "demo", "0");
    testenv::registry::push_tag(&env.registry_url, None, &vm, "hibernate", b"old round")
        .await
        .expect("push stale tag");
    env.sim.faults().stall(&vm);
    patch_spec(&env, "demo", json!({"suspend": true})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Suspending).await;
    // Several polls later it is still Suspending: the tag alone proves nothing.
    let passes = support::set_passes(&env.operator);
    testenv::eventually("three more passes", T, || async {
        (support::set_passes(&env.operator) >= passes + 3.0).then_some(())
    })
    .await
    .expect("passes");
    let set = env.api::<CocoonSet>().get("demo").await.expect("get");
    assert_eq!(phase(&set), Some(CocoonSetPhase::Suspending));
    env.sim.faults().clear(&vm);
    wait_phase(&env, "demo", CocoonSetPhase::Suspended).await;
}

#[tokio::test]
async fn scale_sub_agents_and_toolboxes_up_and_down() {
    let env = Env::start("cset-scale").await;
    create_set(&env, "demo", json!({"agent": {"replicas": 1}})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let spec = json!({"agent": {"replicas": 3}, "toolboxes": [{"name": "db"}, {"name": "cache"}]});
    patch_spec(&env, "demo", spec).await;
    let names = [
        "demo-0",
        "demo-1",
        "demo-2",
        "demo-3",
        "demo-cache",
        "demo-db",
    ];
    wait_pod_names(&env, "demo", &names).await;
    let set = wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    assert_eq!(set.status.as_ref().map(|s| s.desired_agents), Some(4));
    patch_spec(
        &env,
        "demo",
        json!({"agent": {"replicas": 1}, "toolboxes": [{"name": "db"}]}),
    )
    .await;
    wait_pod_names(&env, "demo", &["demo-0", "demo-1", "demo-db"]).await;
    let set = wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let status = set.status.expect("status");
    assert_eq!((status.desired_agents, status.desired_toolboxes), (2, 1));
    assert_eq!(status.toolboxes.len(), 1);
}

#[tokio::test]
async fn a_spec_change_recreates_drifted_pods_and_restamps_generation() {
    let env = Env::start("cset-drift").await;
    create_set(&env, "demo", json!({"agent": {"replicas": 1}})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let before = pods_of(&env, "demo").await;
    patch_spec(
        &env,
        "demo",
        json!({"agent": {"image": "ghcr.io/cocoonstack/ubuntu:26.04"}}),
    )
    .await;
    let set = wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let generation = set.metadata.generation.expect("generation").to_string();
    let after = testenv::eventually("pods rebuilt with the new image", T, || async {
        let pods = pods_of(&env, "demo").await;
        let rebuilt = pods.len() == 2
            && pods.values().all(|p| {
                state::annotation(p, names::ANN_IMAGE) == Some("ghcr.io/cocoonstack/ubuntu:26.04")
            });
        rebuilt.then_some(pods)
    })
    .await
    .expect("rebuilt");
    for (name, pod) in &after {
        assert_ne!(pod.uid(), before[name].uid(), "{name} recreated");
        assert_eq!(
            state::annotation(pod, names::ANN_GENERATION),
            Some(generation.as_str())
        );
    }
}

#[tokio::test]
async fn failed_sub_agents_are_rebuilt_then_dead_lettered_and_toolboxes_rebuilt() {
    let env = Env::start("cset-fail").await;
    let sub_vm = vm_of(&env, "demo", "1");
    let db_vm = vm_of(&env, "demo", "db");
    env.sim
        .faults()
        .fail_create(&sub_vm, "clone: base image corrupt");
    create_set(
        &env,
        "demo",
        json!({"agent": {"replicas": 1}, "toolboxes": [{"name": "db"}]}),
    )
    .await;
    env.wait_event("demo", "SubAgentRebuilding").await;
    let dead = testenv::wait_for(
        &env.api::<Pod>(),
        "demo-1",
        std::time::Duration::from_secs(120),
        |p: &Pod| state::flag(p, names::ANN_DEAD_LETTER),
    )
    .await
    .expect("dead-lettered");
    assert!(state::is_terminal(&dead));
    let events = env.wait_event("demo", "SubAgentDeadLetter").await;
    let note = events[0].note.clone().unwrap_or_default();
    assert!(note.contains("slot 1 exhausted 4 rebuilds"), "{note}");
    let rebuilds = env
        .operator
        .metric("cocoon_operator_subagent_rebuild_total", &[]);
    assert_eq!(rebuilds, 4.0);
    // A spec change gives the dead-lettered slot a fresh budget and a new pod.
    env.sim.faults().clear(&sub_vm);
    patch_spec(&env, "demo", json!({"agent": {"probePort": 22}})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    // A failed toolbox is rebuilt at once, without back-off or dead-letter.
    let old = env.api::<Pod>().get("demo-db").await.expect("db");
    env.sim.faults().fail_create(&db_vm, "boom");
    env.api::<Pod>()
        .delete("demo-db", &Default::default())
        .await
        .expect("delete db");
    testenv::eventually("db rebuilt after failing", T, || async {
        let db = env.api::<Pod>().get_opt("demo-db").await.ok().flatten()?;
        (db.uid() != old.uid() && state::is_terminal(&db)).then_some(())
    })
    .await
    .expect("failed db");
    env.sim.faults().clear(&db_vm);
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
}

#[tokio::test]
async fn a_failed_main_is_parked_until_the_spec_changes() {
    let env = Env::start("cset-main").await;
    let main_vm = vm_of(&env, "demo", "0");
    env.sim
        .faults()
        .fail_create(&main_vm, "no space left on device");
    create_set(&env, "demo", json!({})).await;
    let set = wait_phase(&env, "demo", CocoonSetPhase::Failed).await;
    let ready = kit::conditions::get(&set.status.as_ref().expect("status").conditions, "Ready")
        .expect("Ready")
        .clone();
    assert_eq!(ready.reason, "PodLifecycleFailed");
    assert!(
        ready.message.contains("no space left on device"),
        "{}",
        ready.message
    );
    let events = env.wait_event("demo", "PodLifecycleFailed").await;
    assert_eq!(
        support::occurrences(&events),
        1,
        "one Event, not one per pass"
    );
    let uid = env.api::<Pod>().get("demo-0").await.expect("main").uid();
    env.sim.faults().clear(&main_vm);
    patch_spec(
        &env,
        "demo",
        json!({"agent": {"image": "ghcr.io/cocoonstack/ubuntu:26.04"}}),
    )
    .await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let main = env.api::<Pod>().get("demo-0").await.expect("main");
    assert_ne!(main.uid(), uid, "rebuilt after the spec change");
}

#[tokio::test]
async fn deletion_removes_exactly_the_tags_the_policy_says() {
    let env = Env::start("cset-gc").await;
    let spec = json!({"snapshotPolicy": "main-only", "agent": {"replicas": 1}, "toolboxes": [{"name": "db"}]});
    create_set(&env, "demo", spec).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let (main, sub, db) = (
        vm_of(&env, "demo", "0"),
        vm_of(&env, "demo", "1"),
        vm_of(&env, "demo", "db"),
    );
    for vm in [&main, &sub, &db] {
        testenv::registry::push_tag(&env.registry_url, None, vm, "hibernate", b"h")
            .await
            .expect("push");
    }
    // A `:latest` left from a time the policy was `always`.
    testenv::registry::push_tag(&env.registry_url, None, &sub, "latest", b"l")
        .await
        .expect("push");
    env.api::<CocoonSet>()
        .delete("demo", &Default::default())
        .await
        .expect("delete");
    testenv::wait_deleted(&env.api::<CocoonSet>(), "demo", T)
        .await
        .expect("set gone");
    for vm in [&main, &sub, &db] {
        assert!(
            !env.tag_exists(vm, "hibernate").await,
            "{vm}:hibernate collected"
        );
    }
    // main-only keeps the main's final snapshot (vk-cocoon pushes it as the pod goes).
    env.wait_tag(&main, "latest", true).await;
    assert!(
        !env.tag_exists(&sub, "latest").await,
        "a sub-agent's stale :latest is collected"
    );
    assert!(!env.tag_exists(&db, "latest").await);
    assert!(pods_of(&env, "demo").await.is_empty());
}

#[tokio::test]
async fn policy_never_drops_latest_and_always_keeps_it() {
    let env = Env::start("cset-gc2").await;
    create_set(&env, "keep", json!({"snapshotPolicy": "always"})).await;
    create_set(&env, "drop", json!({"snapshotPolicy": "never"})).await;
    wait_phase(&env, "keep", CocoonSetPhase::Running).await;
    wait_phase(&env, "drop", CocoonSetPhase::Running).await;
    let drop_vm = vm_of(&env, "drop", "0");
    testenv::registry::push_tag(&env.registry_url, None, &drop_vm, "latest", b"l")
        .await
        .expect("push");
    for set in ["keep", "drop"] {
        env.api::<CocoonSet>()
            .delete(set, &Default::default())
            .await
            .expect("delete");
    }
    for set in ["keep", "drop"] {
        testenv::wait_deleted(&env.api::<CocoonSet>(), set, T)
            .await
            .expect("gone");
    }
    // vk-cocoon pushes `:latest` as it tears the VM down (asynchronously); `always` keeps it.
    env.wait_tag(&vm_of(&env, "keep", "0"), "latest", true)
        .await;
    assert!(!env.tag_exists(&drop_vm, "latest").await);
}

#[tokio::test]
async fn registry_down_fails_closed_and_deletion_still_completes() {
    let mut env = Env::start("cset-regdown").await;
    create_set(&env, "demo", json!({})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    env.create_cr("demo-0", "demo-0", cocoon::crd::Desire::Hibernate)
        .await;
    env.wait_phase("demo-0", cocoon::crd::HibernationPhase::Hibernated)
        .await;
    env.stop_registry();
    // The hibernated main's pod is lost. Rebuilding it needs the registry (restore or fresh
    // boot?); with the registry down the operator must not guess: no pod is created.
    env.api::<Pod>()
        .delete("demo-0", &Default::default())
        .await
        .expect("delete main");
    let errors = || {
        env.operator.metric(
            "flotilla_reconcile_errors_by_category_total",
            &[("controller", "cocoonset"), ("category", "registry_failed")],
        )
    };
    testenv::eventually("two failed probes", T, || async {
        (errors() >= 2.0).then_some(())
    })
    .await
    .expect("registry errors counted");
    let main = env.api::<Pod>().get_opt("demo-0").await.expect("get main");
    assert!(
        main.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "no main created while the registry is down"
    );
    // Deletion does not wait for the registry: the leak is reported, the set goes.
    env.api::<CocoonSet>()
        .delete("demo", &Default::default())
        .await
        .expect("delete");
    testenv::wait_deleted(&env.api::<CocoonSet>(), "demo", T)
        .await
        .expect("deletion completes");
    let events = env.wait_event("demo", "RegistryCleanupFailed").await;
    assert!(
        events[0]
            .note
            .as_deref()
            .unwrap_or("")
            .contains(":hibernate")
    );
}

#[tokio::test]
async fn release_policy_frees_the_seat_and_wakes_from_the_snapshot() {
    let env = Env::start("cset-release").await;
    create_set(&env, "solo", json!({"hibernatePolicy": "release"})).await;
    wait_phase(&env, "solo", CocoonSetPhase::Running).await;
    let node = state::node_name(&pods_of(&env, "solo").await["solo-0"]).map(str::to_owned);
    patch_spec(&env, "solo", json!({"suspend": true})).await;
    let set = wait_set(&env, "solo", "Suspended with no pods", |s| {
        phase(s) == Some(CocoonSetPhase::Suspended)
    })
    .await;
    wait_pod_names(&env, "solo", &[]).await;
    let vm = vm_of(&env, "solo", "0");
    assert!(
        env.tag_exists(&vm, "hibernate").await,
        "release keeps the snapshot"
    );
    assert_eq!(
        set.annotations().get(names::ANN_HIBERNATED_ON_NODE),
        node.as_ref()
    );
    patch_spec(&env, "solo", json!({"suspend": false})).await;
    wait_phase(&env, "solo", CocoonSetPhase::Running).await;
    let main = env
        .wait_pod("solo-0", "restored VM live", state::vm_live)
        .await;
    assert!(
        state::flag(&main, names::ANN_RESTORE),
        "restored, not fresh-booted"
    );
    env.wait_tag(&vm, "hibernate", false).await;
    let set = env.api::<CocoonSet>().get("solo").await.expect("get");
    assert!(
        !set.annotations()
            .contains_key(names::ANN_HIBERNATED_ON_NODE)
    );
    let woken = env
        .operator
        .metric("cocoon_operator_slot_release_wake_total", &[]);
    assert_eq!(woken, 1.0);
}

#[tokio::test]
async fn node_name_migrates_the_main_through_a_snapshot() {
    let env = Env::start("cset-migrate").await;
    create_set(&env, "demo", json!({})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let main = pods_of(&env, "demo").await.remove("demo-0").expect("main");
    let from = state::node_name(&main).expect("scheduled").to_owned();
    let to = ["kwok-node-0", "kwok-node-1", "kwok-node-2"]
        .into_iter()
        .find(|n| *n != from)
        .expect("another node");
    patch_spec(&env, "demo", json!({"nodeName": to})).await;
    wait_set(&env, "demo", "Migrating", |s| {
        phase(s) == Some(CocoonSetPhase::Migrating)
    })
    .await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let moved = env
        .wait_pod("demo-0", "live on the target", state::vm_live)
        .await;
    assert_eq!(state::node_name(&moved), Some(to));
    assert_ne!(moved.uid(), main.uid());
    assert!(
        state::flag(&moved, names::ANN_RESTORE),
        "restored from the snapshot"
    );
    env.wait_tag(&vm_of(&env, "demo", "0"), "hibernate", false)
        .await;
}

/// A pass whose pod cache is behind the registry (the main shown live and unflagged while its
/// VM already hibernated and pushed this round's snapshot, as after a cut watch) must not take
/// that snapshot for a stale tag and drop it: the VM's only copy. Seen in the chaos scenario.
#[tokio::test]
async fn a_pass_with_a_stale_cache_never_drops_the_snapshot_being_migrated() {
    use cocoon::cocoonset::{Reconciler, reconcile};
    use kube::runtime::watcher;
    use std::sync::Arc;

    let mut env = Env::start("cset-stale-tag").await;
    create_set(&env, "demo", json!({})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let stale = env.wait_pod("demo-0", "live", state::vm_live).await;
    let from = state::node_name(&stale).expect("scheduled").to_owned();
    let to = ["kwok-node-0", "kwok-node-1", "kwok-node-2"]
        .into_iter()
        .find(|n| *n != from)
        .expect("another node");
    // The operator is stopped so that only the pass below acts. The migration is under way:
    // the main is flagged and its VM hibernates, pushing this round's snapshot.
    env.operator.stop().await;
    patch_spec(&env, "demo", json!({"nodeName": to})).await;
    let flag = json!({"metadata": {"annotations": {names::ANN_HIBERNATE: "true"}}});
    env.api::<Pod>()
        .patch("demo-0", &PatchParams::default(), &Patch::Merge(&flag))
        .await
        .expect("flag the main");
    let vm = vm_of(&env, "demo", "0");
    env.wait_tag(&vm, "hibernate", true).await;
    env.wait_pod("demo-0", "hibernated", |p| {
        state::lifecycle_state(p) == Some(names::lifecycle::HIBERNATED)
    })
    .await;

    // One pass that sees the set as it is but the main as it was before the flag.
    let (pods, mut writer) = cocoon::cache::set_pods();
    writer.apply(&watcher::Event::Init);
    writer.apply(&watcher::Event::InitApply(stale));
    writer.apply(&watcher::Event::InitDone);
    let (crs, mut cr_writer) = cocoon::cache::hibernations();
    cr_writer.apply(&watcher::Event::Init);
    cr_writer.apply(&watcher::Event::InitDone);
    let registry = env
        .operator
        .flags()
        .registry_settings()
        .build()
        .expect("registry");
    let metrics = cocoon::metrics::CocoonMetrics::register(&kit::metrics::Metrics::new());
    let ctx = cocoon::context::Context::new(env.client.clone(), registry, metrics);
    let r = Arc::new(Reconciler {
        ctx: Arc::new(ctx),
        pods,
        crs,
    });
    let set = env.api::<CocoonSet>().get("demo").await.expect("set");
    reconcile(Arc::new(set), r).await.expect("the pass");
    assert!(
        env.tag_exists(&vm, "hibernate").await,
        "the snapshot of the hibernated main survives a pass with a stale cache"
    );

    // The real operator then finishes the migration from that snapshot.
    env.operator.restart().await;
    let moved = env
        .wait_pod("demo-0", "restored and live", |p| {
            state::vm_live(p) && state::flag(p, names::ANN_RESTORE)
        })
        .await;
    assert_eq!(state::node_name(&moved), Some(to));
    env.wait_tag(&vm, "hibernate", false).await;
}

#[tokio::test]
async fn operator_restarted_mid_suspend_converges() {
    let mut env = Env::start("cset-restart").await;
    create_set(&env, "demo", json!({"agent": {"replicas": 1}})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let vm = vm_of(&env, "demo", "1");
    env.sim.faults().stall(&vm);
    patch_spec(&env, "demo", json!({"suspend": true})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Suspending).await;
    env.operator.restart().await;
    env.sim.faults().clear(&vm);
    wait_phase(&env, "demo", CocoonSetPhase::Suspended).await;
}

#[tokio::test]
async fn a_converged_set_is_left_alone() {
    let env = Env::start("cset-quiet").await;
    create_set(&env, "demo", json!({"agent": {"replicas": 1}})).await;
    let set = wait_set(&env, "demo", "converged", |s| {
        phase(s) == Some(CocoonSetPhase::Running) && all_vms_reported(s)
    })
    .await;
    let rv = set.resource_version();
    let pods: Vec<Option<String>> = pods_of(&env, "demo")
        .await
        .values()
        .map(|p| p.resource_version())
        .collect();
    // A pass over a converged set, triggered by a label change on one of its pods, writes
    // nothing: not the set, not its status, not the other pods.
    let passes = support::set_passes(&env.operator);
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}));
    env.api::<Pod>()
        .patch("demo-1", &PatchParams::default(), &relabel)
        .await
        .expect("label");
    testenv::eventually("a pass after the pod change", T, || async {
        (support::set_passes(&env.operator) > passes).then_some(())
    })
    .await
    .expect("pass");
    let after = env.api::<CocoonSet>().get("demo").await.expect("get");
    assert_eq!(after.resource_version(), rv, "no write to the set");
    let now: Vec<Option<String>> = pods_of(&env, "demo")
        .await
        .values()
        .map(|p| p.resource_version())
        .collect();
    assert_eq!(now[0], pods[0], "no write to the main pod");
}

#[tokio::test]
async fn unsuspend_leaves_a_pod_held_by_a_cocoonhibernation_asleep() {
    let env = Env::start("cset-held").await;
    create_set(&env, "demo", json!({"agent": {"replicas": 1}})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    env.create_cr("demo-1", "demo-1", cocoon::crd::Desire::Hibernate)
        .await;
    env.wait_phase("demo-1", cocoon::crd::HibernationPhase::Hibernated)
        .await;
    patch_spec(&env, "demo", json!({"suspend": true})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Suspended).await;
    patch_spec(&env, "demo", json!({"suspend": false})).await;
    env.wait_pod("demo-0", "main awake", state::vm_live).await;
    let sub = env.api::<Pod>().get("demo-1").await.expect("sub");
    assert!(
        state::hibernate_requested(&sub),
        "the CocoonHibernation still holds demo-1"
    );
    assert_eq!(state::lifecycle_state(&sub), Some("hibernated"));
}

#[tokio::test]
async fn a_lost_pod_of_a_hibernated_vm_is_rebuilt_from_its_snapshot() {
    let env = Env::start("cset-restore").await;
    create_set(&env, "demo", json!({"agent": {"replicas": 1}})).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    env.create_cr("demo-1", "demo-1", cocoon::crd::Desire::Hibernate)
        .await;
    env.wait_phase("demo-1", cocoon::crd::HibernationPhase::Hibernated)
        .await;
    let old = env.api::<Pod>().get("demo-1").await.expect("sub").uid();
    env.api::<Pod>()
        .delete("demo-1", &Default::default())
        .await
        .expect("delete sub");
    let rebuilt = env
        .wait_pod("demo-1", "rebuilt with restore intent", |p| {
            state::flag(p, names::ANN_RESTORE)
        })
        .await;
    assert_ne!(rebuilt.uid(), old);
    // Waking it (the CR's job) then restores the VM from the snapshot, not from the image.
    env.set_desire("demo-1", cocoon::crd::Desire::Wake).await;
    env.wait_phase("demo-1", cocoon::crd::HibernationPhase::Active)
        .await;
    env.wait_tag(&vm_of(&env, "demo", "1"), "hibernate", false)
        .await;
}

#[tokio::test]
async fn deletion_waits_for_terminating_pods_before_collecting_tags() {
    let env = Env::start("cset-gc-wait").await;
    let spec = json!({"snapshotPolicy": "never", "agent": {"replicas": 1}});
    create_set(&env, "demo", spec).await;
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let (main, sub) = (vm_of(&env, "demo", "0"), vm_of(&env, "demo", "1"));
    for (vm, tag) in [(&main, "hibernate"), (&sub, "hibernate"), (&sub, "latest")] {
        testenv::registry::push_tag(&env.registry_url, None, vm, tag, b"s")
            .await
            .expect("push");
    }
    // Someone else holds the sub-agent's pod: it stays Terminating after vk-cocoon let go.
    const HOLD: &str = "test.flotilla.dev/hold";
    let pods = env.api::<Pod>();
    let sub_pod = pods.get("demo-1").await.expect("demo-1");
    kit::finalizers::add(&pods, &sub_pod, HOLD)
        .await
        .expect("hold demo-1");
    env.api::<CocoonSet>()
        .delete("demo", &Default::default())
        .await
        .expect("delete");
    testenv::wait_deleted(&env.api::<Pod>(), "demo-0", T)
        .await
        .expect("main gone");
    let only_ours = |p: &Pod| {
        p.metadata.deletion_timestamp.is_some()
            && p.metadata.finalizers.as_deref() == Some(&[HOLD.to_owned()][..])
    };
    env.wait_pod("demo-1", "terminating, held only by the test", only_ours)
        .await;
    // Passes after that point (the deletion of demo-0 and the 5 s backstop trigger them) see
    // only the terminating demo-1, and must keep waiting for it.
    let passes = support::set_passes(&env.operator);
    testenv::eventually("two more passes", T, || async {
        (support::set_passes(&env.operator) >= passes + 2.0).then_some(())
    })
    .await
    .expect("passes");
    let set = env.api::<CocoonSet>().get_opt("demo").await.expect("get");
    assert!(
        set.is_some_and(|s| s
            .finalizers()
            .iter()
            .any(|f| f == names::COCOONSET_FINALIZER)),
        "the set waits while a pod of it is terminating"
    );
    for (vm, tag) in [(&main, "hibernate"), (&sub, "hibernate"), (&sub, "latest")] {
        assert!(
            env.tag_exists(vm, tag).await,
            "{vm}:{tag} kept while a pod terminates"
        );
    }
    // The pod really goes: now the tags are collected and the set is gone.
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    env.api::<Pod>()
        .patch("demo-1", &PatchParams::default(), &release)
        .await
        .expect("release demo-1");
    testenv::wait_deleted(&env.api::<CocoonSet>(), "demo", T)
        .await
        .expect("set gone");
    for (vm, tag) in [(&main, "hibernate"), (&sub, "hibernate"), (&sub, "latest")] {
        assert!(!env.tag_exists(vm, tag).await, "{vm}:{tag} collected");
    }
}

#[tokio::test]
async fn a_toolbox_name_taken_by_a_foreign_pod_is_reported() {
    let env = Env::start("cset-collide").await;
    // Not this set's pod, under the name its toolbox `db` needs.
    env.create_pod("demo-db", false).await;
    let spec = json!({"toolboxes": [{"name": "db"}, {"name": "cache"}]});
    create_set(&env, "demo", spec).await;
    let want = "pod demo-db exists and is not this set's toolbox (rename or delete it)";
    wait_set(&env, "demo", "Ready says NameCollision", move |s| {
        s.status
            .as_ref()
            .and_then(|st| kit::conditions::get(&st.conditions, "Ready"))
            .is_some_and(|c| {
                c.status == "False" && c.reason == "NameCollision" && c.message == want
            })
    })
    .await;
    let events = env.wait_event("demo", "NameCollision").await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    assert_eq!(events[0].note.as_deref(), Some(want));
    // The other toolbox is not held up by the collision.
    env.wait_pod("demo-cache", "toolbox cache created", |p| {
        p.metadata.owner_references.is_some()
    })
    .await;
    // Once the name is free the set takes it (the foreign pod is not watched: a periodic look).
    env.api::<Pod>()
        .delete("demo-db", &Default::default())
        .await
        .expect("delete the foreign pod");
    testenv::wait_deleted(&env.api::<Pod>(), "demo-db", T)
        .await
        .expect("foreign pod gone");
    wait_phase(&env, "demo", CocoonSetPhase::Running).await;
    let db = env.api::<Pod>().get("demo-db").await.expect("toolbox db");
    assert_eq!(
        state::label(&db, names::LABEL_ROLE),
        Some(names::Role::Toolbox.as_str())
    );
    assert_eq!(
        support::occurrences(&env.events("demo", "NameCollision").await),
        1
    );
}

#[tokio::test]
async fn a_set_without_spec_is_reported_invalid_and_others_still_converge() {
    let env = Env::start("cset-nospec").await;
    testenv::admission::Kind::new(
        &env.client,
        &env.ns.name,
        "cocoonset.cocoonstack.io",
        "v1",
        "CocoonSet",
    )
    .create_without_spec("bare")
    .await
    .expect("the schema accepts an object without spec, as upstream's does");
    create_set(&env, "fine", json!({})).await;
    wait_set(&env, "fine", "Running beside a set without spec", |s| {
        phase(s) == Some(CocoonSetPhase::Running)
    })
    .await;
    let bare = wait_set(&env, "bare", "Ready False InvalidSpec", |s| {
        s.status
            .as_ref()
            .and_then(|st| kit::conditions::get(&st.conditions, "Ready"))
            .is_some_and(|c| c.status == "False" && c.reason == "InvalidSpec")
    })
    .await;
    let ready = kit::conditions::get(&bare.status.expect("status").conditions, "Ready")
        .expect("Ready")
        .clone();
    assert!(
        ready.message.contains("spec.agent.image is required"),
        "{ready:?}"
    );
    assert!(
        pods_of(&env, "bare").await.is_empty(),
        "nothing is built for it"
    );
}
