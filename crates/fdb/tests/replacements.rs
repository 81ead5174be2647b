//! Pods and process groups that go bad, on the local control plane with kwok pods and the fake
//! database (processes follow the pods, as upstream's mock does): a pod stuck in phase Failed
//! is deleted and recreated for the same group; a group failed for longer than the failure
//! time is replaced and removed only after its exclusion; a pod-spec change of the
//! transaction system replaces log groups one at a time within `maxConcurrentReplacements`; a
//! group whose node carries a configured taint gains `NodeTaintDetected` and
//! `NodeTaintReplacing` and is replaced, and the conditions clear with the taint.
//!
//! Pods are made to fail with kwok's chaos stage (the label
//! `pod-container-running-failed.stage.kwok.x-k8s.io=true` turns a running pod Failed).
//! The operator runs as its ServiceAccount under `deploy/fdb/rbac`.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fdb::cluster::Options;
use fdb::crd::FoundationDBCluster;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Harness, create, groups, ids, ready, storage_groups};

const FAIL_LABEL: &str = "pod-container-running-failed.stage.kwok.x-k8s.io";

fn pods(h: &Harness) -> Api<Pod> {
    Api::namespaced(h.client.clone(), &h.ns.name)
}

async fn fail_pod(h: &Harness, pod: &str) {
    pods(h)
        .patch(
            pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {FAIL_LABEL: "true"}}})),
        )
        .await
        .expect("label the pod to fail");
}

async fn event_reasons(h: &Harness) -> Vec<(String, String)> {
    h.events()
        .await
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A `ReplacingProcessGroup` Event names group `id` and `condition`, and no pod went while its
/// process held data.
async fn replaced_for(h: &Harness, id: &str, condition: &str) {
    let events = event_reasons(h).await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "ReplacingProcessGroup" && n.contains(id) && n.contains(condition)),
        "{events:?}"
    );
    let violations = h.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
}

#[tokio::test]
async fn a_pod_stuck_in_phase_failed_is_deleted_and_recreated_for_the_same_group() {
    let options = Options {
        minimum_age_for_terminal_pod_deletion: Duration::from_secs(5),
        ..Options::default()
    };
    let h = Harness::start_with("fdb-terminal", options).await;
    let name = "terminal";
    h.simulate(name);
    let c = create(&h, name, json!({})).await;
    let before: Vec<String> = groups(&c)
        .iter()
        .map(|g| g.process_group_id.to_string())
        .collect();
    let group = groups(&c)
        .into_iter()
        .find(|g| g.process_class.as_str() == "stateless")
        .expect("a stateless group");
    let pod_name = group.pod_name(name);
    let old = pods(&h).get(&pod_name).await.unwrap();
    fail_pod(&h, &pod_name).await;
    testenv::eventually("the pod failed", Duration::from_secs(60), || async {
        let p = pods(&h).get_opt(&pod_name).await.ok()??;
        let failed = p.status?.phase.as_deref() == Some("Failed");
        (failed || p.metadata.uid != old.metadata.uid).then_some(())
    })
    .await
    .unwrap();
    let recreated = testenv::eventually(
        "a new pod of the same name running",
        Duration::from_secs(120),
        || async {
            let p = pods(&h).get_opt(&pod_name).await.ok()??;
            let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
            (p.metadata.uid != old.metadata.uid && running).then_some(p)
        },
    )
    .await
    .unwrap();
    assert!(
        !recreated.labels().contains_key(FAIL_LABEL),
        "the pod is the operator's own again"
    );
    let c = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(120),
        |c: &FoundationDBCluster| {
            ready(c)
                && !groups(c)
                    .iter()
                    .any(|g| !g.process_group_conditions.is_empty())
        },
    )
    .await
    .expect("reconciled again");
    let after: Vec<String> = groups(&c)
        .iter()
        .map(|g| g.process_group_id.to_string())
        .collect();
    assert_eq!(before, after, "the same process groups, nothing replaced");
    let events = event_reasons(&h).await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "DeletedTerminalPod" && n.contains(&pod_name)),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_group_failed_longer_than_the_failure_time_is_replaced_and_removed_after_exclusion() {
    // Failed pods stay (no terminal-pod deletion within the test), so the group keeps failing.
    let options = Options {
        minimum_age_for_terminal_pod_deletion: Duration::from_secs(3600),
        ..Options::default()
    };
    let h = Harness::start_with("fdb-replace-failed", options).await;
    let name = "failing";
    h.simulate(name);
    let db = h.db(name);
    db.set_drain_reads(3);
    let c = create(&h, name, json!({})).await;
    // Only now: a shorter failure time from the start would also replace groups whose pods
    // are slow to come up (their conditions date from the group's creation, as upstream's).
    // 15 s is longer than a new group takes to report here.
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"automationOptions": {"replacements": {
                "failureDetectionTimeSeconds": 15
            }}}})),
        )
        .await
        .unwrap();
    db.advance(700);
    let cs =
        fdb::crd::ConnectionString::parse(&c.status.clone().unwrap().connection_string).unwrap();
    let coordinator_ips: BTreeSet<String> = cs
        .coordinators
        .iter()
        .map(|a| a.split(':').next().unwrap().to_owned())
        .collect();
    let group = groups(&c)
        .into_iter()
        .find(|g| {
            g.process_class.as_str() == "storage"
                && !g.addresses.iter().any(|a| coordinator_ips.contains(a))
        })
        .expect("a storage group that does not coordinate");
    let id = group.process_group_id.to_string();
    let before = storage_groups(&c);
    fail_pod(&h, &group.pod_name(name)).await;

    // Marked for removal once failed for 15 s, with a replacement added.
    let watched = id.clone();
    let marked = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(120),
        move |c: &FoundationDBCluster| {
            groups(c)
                .iter()
                .any(|g| g.process_group_id.as_str() == watched && g.is_marked_for_removal())
        },
    )
    .await
    .expect("the failed group is marked for removal");
    let g = groups(&marked)
        .into_iter()
        .find(|g| g.process_group_id.as_str() == id)
        .unwrap();
    assert!(!g.exclusion_skipped, "it has an address: excluded first");
    assert!(g.has_condition("PodFailing"), "{g:?}");
    // Excluded, verified, its pod deleted; the include waits for the recovery gate.
    h.excluded_and_gone(name, &id, Duration::from_secs(240))
        .await;
    db.advance(700);
    let c = h.removals_done(name, Duration::from_secs(240)).await;
    let after = storage_groups(&c);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(!after.contains(&id));
    assert_eq!(after.difference(&before).count(), 1, "one replacement");
    let calls = db.calls();
    let at = |want: &str| {
        calls
            .iter()
            .position(|c| c == want)
            .unwrap_or_else(|| panic!("no {want:?} in {calls:?}"))
    };
    // Its process went with the failed pod, so the `exclude no_wait` round may not run (a group
    // of the class missing its processes for under 5 minutes sets the budget to 0, as
    // upstream's); the verification's blocking `exclude` then excludes it.
    let first = calls
        .iter()
        .position(|c| c.starts_with("exclude ") && c.contains(&id))
        .expect("an exclude");
    let verified = at(&format!("exclude locality_instance_id:{id}"));
    let include = calls
        .iter()
        .position(|c| c.starts_with("include ") && c.contains(&id))
        .expect("include");
    assert!(first <= verified && verified < include, "{calls:?}");
    replaced_for(&h, &id, "PodFailing").await;
}

#[tokio::test]
async fn a_transaction_system_spec_change_replaces_log_groups_one_at_a_time() {
    // The database's recovery gates are not what this test is about: open them.
    let options = support::open_recovery_gates();
    let h = Harness::start_with("fdb-replace-misconfigured", options).await;
    let name = "respec";
    h.simulate(name);
    h.db(name).set_drain_reads(2);
    let c = create(
        &h,
        name,
        json!({"automationOptions": {"maxConcurrentReplacements": 1}}),
    )
    .await;
    let (logs, storage, stateless) = (ids(&c, "log"), ids(&c, "storage"), ids(&c, "stateless"));
    assert_eq!(logs.len(), 4);

    // Watch how many groups are marked and not yet excluded at any moment.
    let in_flight = Arc::new(Mutex::new(0usize));
    let watcher = {
        let (api, in_flight, token) = (h.clusters(), in_flight.clone(), h.token.clone());
        tokio::spawn(async move {
            while !token.is_cancelled() {
                if let Ok(c) = api.get(name).await {
                    let n = groups(&c)
                        .iter()
                        .filter(|g| g.is_marked_for_removal() && !g.is_excluded())
                        .count();
                    let mut max = in_flight.lock().unwrap();
                    *max = (*max).max(n);
                }
                tokio::time::sleep(Duration::from_millis(100)).await; // the sampling period
            }
        })
    };
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"processes": {"log": {"podTemplate": {"spec": {
                "containers": [{"name": "foundationdb", "resources": {"requests": {"cpu": "200m"}}}]
            }}}}}})),
        )
        .await
        .unwrap();
    let old = logs.clone();
    let c = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(540),
        move |c: &FoundationDBCluster| {
            let now = ids(c, "log");
            ready(c) && now.len() == 4 && now.is_disjoint(&old)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", h.db(name).calls()));
    watcher.abort();
    assert_eq!(ids(&c, "storage"), storage, "storage pods are not replaced");
    assert_eq!(
        ids(&c, "stateless"),
        stateless,
        "stateless pods are not replaced"
    );
    assert_eq!(
        *in_flight.lock().unwrap(),
        1,
        "one replacement in flight at a time"
    );
    for id in ids(&c, "log") {
        let g = groups(&c)
            .into_iter()
            .find(|g| g.process_group_id.as_str() == id)
            .unwrap();
        let pod = pods(&h).get(&g.pod_name(name)).await.unwrap();
        let main = &pod.spec.unwrap().containers[0];
        let cpu = main
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("cpu"))
            .map(|q| q.0.clone());
        assert_eq!(cpu.as_deref(), Some("200m"), "{id}");
    }
    let events = event_reasons(&h).await;
    let replaced = events
        .iter()
        .filter(|(r, _)| r == "ReplacingMisconfiguredProcessGroup")
        .count();
    assert!(replaced >= 4, "{events:?}");
    let violations = h.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
}

/// Adds (`on`) or removes the taint `key` (effect PreferNoSchedule, so nothing is evicted and
/// other tests' pods may still land there) on the shared node `node`.
async fn set_taint(h: &Harness, node: &str, key: &str, on: bool) {
    let nodes: Api<Node> = Api::all(h.client.clone());
    testenv::eventually(
        "the node's taints written",
        Duration::from_secs(30),
        || async {
            let mut n = nodes.get(node).await.ok()?;
            let spec = n.spec.get_or_insert_with(Default::default);
            let taints = spec.taints.get_or_insert_with(Vec::new);
            taints.retain(|t| t.key != key);
            if on {
                taints.push(Taint {
                    key: key.into(),
                    effect: "PreferNoSchedule".into(),
                    ..Taint::default()
                });
            }
            // A conflict (another writer) retries with a fresh copy.
            nodes.replace(node, &PostParams::default(), &n).await.ok()
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_group_on_a_tainted_node_is_replaced_and_the_condition_clears_with_the_taint() {
    let h = Harness::start_with("fdb-taint", Options::default()).await;
    let name = "tainted";
    h.simulate(name);
    let db = h.db(name);
    db.set_drain_reads(3);
    // The taint key is the namespace's own, so no other test's cluster or node reacts to it.
    let key = format!("flotilla.test/{}", h.ns.name);
    // Each pod is its own fault domain here (the scheduler packs the pods onto few of the three
    // kwok nodes), so every group of the tainted node is a tainted fault domain: the guard
    // (maxFaultDomainsWithTaintedProcessGroups, default 10 %) is opened to all of them, and
    // maxConcurrentReplacements (1) still replaces one at a time.
    let c = create(
        &h,
        name,
        json!({
            "automationOptions": {"replacements": {
                "taintReplacementOptions": [{"key": key, "durationInSeconds": 1}],
                "taintReplacementTimeSeconds": 2,
                "maxFaultDomainsWithTaintedProcessGroups": "100%",
            }},
        }),
    )
    .await;
    db.advance(700);
    let before: BTreeSet<String> = groups(&c)
        .iter()
        .map(|g| g.process_group_id.to_string())
        .collect();
    let group = groups(&c)
        .into_iter()
        .find(|g| g.process_class.as_str() == "storage")
        .expect("a storage group");
    let node = pods(&h)
        .get(&group.pod_name(name))
        .await
        .unwrap()
        .spec
        .and_then(|s| s.node_name)
        .expect("scheduled");
    let on_node: BTreeSet<String> = pods(&h)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
        .filter_map(|p| {
            p.labels()
                .get("foundationdb.org/fdb-process-group-id")
                .cloned()
        })
        .collect();
    assert!(
        on_node.contains(group.process_group_id.as_str()),
        "{on_node:?}"
    );
    set_taint(&h, &node, &key, true).await;

    // NodeTaintDetected at once, NodeTaintReplacing after the option's second, then marked for
    // removal after taintReplacementTimeSeconds.
    let watched = on_node.clone();
    let detected = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(120),
        move |c: &FoundationDBCluster| {
            groups(c).iter().any(|g| {
                watched.contains(g.process_group_id.as_str())
                    && g.has_condition("NodeTaintDetected")
            })
        },
    )
    .await
    .expect("NodeTaintDetected on a group of the tainted node");
    for g in groups(&detected) {
        if !on_node.contains(g.process_group_id.as_str()) {
            assert!(
                !g.has_condition("NodeTaintDetected"),
                "only groups on the tainted node: {g:?}"
            );
        }
    }
    let watched = on_node.clone();
    let marked = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(120),
        move |c: &FoundationDBCluster| {
            groups(c)
                .iter()
                .any(|g| watched.contains(g.process_group_id.as_str()) && g.is_marked_for_removal())
        },
    )
    .await
    .expect("a group of the tainted node is marked for removal");
    // Untaint at once: the other groups of that node must not follow.
    set_taint(&h, &node, &key, false).await;
    let replaced: Vec<_> = groups(&marked)
        .into_iter()
        .filter(|g| g.is_marked_for_removal())
        .collect();
    assert_eq!(replaced.len(), 1, "one at a time: {replaced:?}");
    let replaced = replaced[0].clone();
    let id = replaced.process_group_id.to_string();
    assert!(replaced.has_condition("NodeTaintReplacing"), "{replaced:?}");
    assert!(
        !replaced.exclusion_skipped,
        "it has an address: excluded first"
    );

    // The replacement comes up, the group is excluded and removed; the taint conditions of the
    // node's other groups go with the taint. The database's clock runs fast from here (15 s
    // every 250 ms), so the recovery-age gates of exclusion and inclusion (a replaced
    // coordinator means a recovery) open within seconds instead of minutes.
    let clock = db.clone();
    let ticker = tokio::spawn(async move {
        loop {
            clock.advance(15);
            tokio::time::sleep(Duration::from_millis(250)).await; // the clock's tick, not a wait
        }
    });
    h.excluded_and_gone(name, &id, Duration::from_secs(240))
        .await;
    let c = h.removals_done(name, Duration::from_secs(240)).await;
    ticker.abort();
    let after: BTreeSet<String> = groups(&c)
        .iter()
        .map(|g| g.process_group_id.to_string())
        .collect();
    assert!(!after.contains(&id), "{after:?}");
    assert_eq!(
        before.difference(&after).count(),
        1,
        "only {id} replaced: {after:?}"
    );
    assert_eq!(after.len(), before.len(), "{after:?}");
    for g in groups(&c) {
        assert!(
            !g.has_condition("NodeTaintDetected") && !g.has_condition("NodeTaintReplacing"),
            "cleared with the taint: {g:?}"
        );
    }
    replaced_for(&h, &id, "NodeTaintReplacing").await;
}
