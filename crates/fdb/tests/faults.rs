//! Fault injection, maintenance mode and incompatible processes on the local control plane
//! with kwok pods and the fake database; the operator runs as its ServiceAccount under
//! `deploy/fdb/rbac`.
//!
//! - Putting one storage group into crash loop and one log group into no-schedule recreates
//!   exactly those two pods (DeletePodsForBuggification, before any safety gate): the first
//!   with `crash-loop` as its main container's command, the second with the no-schedule
//!   node affinity, so it stays Pending. Lifting both recreates the same two pods again,
//!   without either, and the cluster reconciles; every other pod keeps its UID throughout.
//! - With `UseMaintenanceModeChecker`, a storage pod-template change puts each storage
//!   pod's zone into maintenance (`maintenance on <zone> 600`) with its group on the
//!   operator's maintenance list before deleting the pod; once the new process runs,
//!   MaintenanceModeChecker turns maintenance off (`maintenance off`) before the next zone
//!   goes in, and a stale entry of a group that no longer exists is removed; the same
//!   through the real CLI client and the `fdb-sim` stand-in for fdbcli.
//! - A storage process that speaks an incompatible protocol (it leaves the process list and
//!   shows in `incompatible_connections`) gets its pod recreated, and only that one.
//! - A knob change bounces the storage processes except the one of the group in
//!   `buggify.ignoreDuringRestart`, which keeps its old command line.
//! - A group listed for removal and in `buggify.blockRemoval` is excluded and verified but
//!   keeps its pod; once unblocked, it is removed.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fdb::admin::AdminClient;
use fdb::cluster::delete_pods_for_buggification::{in_crash_loop, in_no_schedule};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::{Harness, create, ids};

async fn pods_by_group(h: &Harness) -> BTreeMap<String, Pod> {
    Api::<Pod>::namespaced(h.client.clone(), &h.ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some((p.labels().get(support::ID_LABEL)?.clone(), p)))
        .collect()
}

fn uids(pods: &BTreeMap<String, Pod>) -> BTreeMap<String, String> {
    pods.iter()
        .filter_map(|(id, p)| Some((id.clone(), p.uid()?)))
        .collect()
}

/// Waits until the pods of `changed` have new UIDs and satisfy `check`, and returns the
/// pods then.
async fn recreated(
    h: &Harness,
    before: &BTreeMap<String, String>,
    changed: &[&str],
    check: impl Fn(&BTreeMap<String, Pod>) -> bool,
) -> BTreeMap<String, Pod> {
    testenv::eventually(
        "the buggified pods recreated",
        Duration::from_secs(120),
        || async {
            let pods = pods_by_group(h).await;
            let new = changed.iter().all(|id| {
                pods.get(*id)
                    .and_then(|p| p.uid())
                    .is_some_and(|uid| before.get(*id) != Some(&uid))
            });
            (new && check(&pods)).then_some(pods)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn event_reasons(h: &Harness) -> Vec<String> {
    h.events()
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test]
async fn a_buggify_change_recreates_exactly_the_affected_pods() {
    let h = Harness::start("fdb-buggify").await;
    let name = "bug";
    h.simulate(name);
    let c = create(&h, name, json!({})).await;
    let storage = ids(&c, "storage").into_iter().next().unwrap();
    let log = ids(&c, "log").into_iter().next().unwrap();
    let start = uids(&pods_by_group(&h).await);

    let buggify = json!({"spec": {"buggify": {
        "crashLoopContainers": [{"containerName": "foundationdb", "targets": [storage]}],
        "noSchedule": [log],
    }}});
    h.clusters()
        .patch(name, &PatchParams::default(), &Patch::Merge(&buggify))
        .await
        .unwrap();
    let changed = [storage.as_str(), log.as_str()];
    let pods = recreated(&h, &start, &changed, |pods| {
        in_crash_loop(&pods[&storage]) && in_no_schedule(&pods[&log])
    })
    .await;
    let main = &pods[&storage].spec.as_ref().unwrap().containers[0];
    assert_eq!(main.command, Some(vec!["crash-loop".to_owned()]));
    assert!(!in_no_schedule(&pods[&storage]) && !in_crash_loop(&pods[&log]));
    // The no-schedule pod cannot be placed: no node carries the label.
    let pod_api = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    let pending = pod_api.get(&pods[&log].name_any()).await.unwrap();
    let phase = pending.status.and_then(|s| s.phase).unwrap_or_default();
    assert_eq!(phase, "Pending");
    let middle = uids(&pods);
    for (id, uid) in &start {
        if !changed.contains(&id.as_str()) {
            assert_eq!(middle.get(id), Some(uid), "{id} untouched");
        }
    }

    let lift = json!({"spec": {"buggify": null}});
    h.clusters()
        .patch(name, &PatchParams::default(), &Patch::Merge(&lift))
        .await
        .unwrap();
    let pods = recreated(&h, &middle, &changed, |pods| {
        !in_crash_loop(&pods[&storage]) && !in_no_schedule(&pods[&log])
    })
    .await;
    let c = h.reconciled(name, Duration::from_secs(180)).await;
    assert_eq!(ids(&c, "storage").len(), 3, "no group replaced");
    let end = uids(&pods_by_group(&h).await);
    assert_eq!(uids(&pods).len(), end.len());
    for (id, uid) in &start {
        if !changed.contains(&id.as_str()) {
            assert_eq!(end.get(id), Some(uid), "{id} untouched");
        }
    }
    let reasons = event_reasons(&h).await;
    assert!(reasons.iter().any(|r| r == "UpdatingPods"), "{reasons:?}");
}

/// The zone in maintenance and the groups on the maintenance list, as sampled.
type MaintenanceSamples = Arc<Mutex<Vec<(String, BTreeSet<String>)>>>;

/// Samples, every 100 ms, the zone in maintenance and the maintenance list, keeping each
/// change.
fn watch_maintenance(h: &Harness, name: &str) -> MaintenanceSamples {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (db, token, out) = (h.db(name), h.token.clone(), seen.clone());
    tokio::spawn(async move {
        while !token.is_cancelled() {
            let list: BTreeSet<String> = db
                .get_processes_under_maintenance()
                .await
                .map(|m| m.into_keys().collect())
                .unwrap_or_default();
            let now = (db.maintenance_zone(), list);
            {
                let mut v = out.lock().unwrap();
                if v.last() != Some(&now) {
                    v.push(now);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    seen
}

#[tokio::test]
async fn storage_updates_put_their_zone_in_maintenance_until_the_processes_restarted() {
    maintenance_rollout(Harness::start("fdb-maint").await).await;
}

/// The same through the real CLI client and `fdb-sim`: `maintenance on/off` as fdbcli
/// commands, the maintenance list as `getrange`/`set`/`clear` of the operator's keys.
#[tokio::test]
async fn maintenance_through_the_cli_path() {
    maintenance_rollout(Harness::start_cli("fdb-maint-cli", Default::default()).await).await;
}

async fn maintenance_rollout(h: Harness) {
    let name = "maint";
    h.simulate(name);
    let c = create(
        &h,
        name,
        json!({"automationOptions": {"maintenanceModeOptions": {"UseMaintenanceModeChecker": true}}}),
    )
    .await;
    let storage = ids(&c, "storage");
    let db = h.db(name);
    // A leftover of a group that is gone: stale.
    db.set_processes_under_maintenance(&["storage-99".to_owned()], db.now())
        .await
        .unwrap();
    let seen = watch_maintenance(&h, name);
    let template = json!({"spec": {"processes": {"storage": {"podTemplate": {"spec": {"containers": [
        {"name": "foundationdb", "env": [{"name": "ROLLOUT", "value": "2"}]}
    ]}}}}}});
    let before = uids(&pods_by_group(&h).await);
    h.clusters()
        .patch(name, &PatchParams::default(), &Patch::Merge(&template))
        .await
        .unwrap();
    // Reconciled with every storage pod recreated, and maintenance over.
    testenv::eventually(
        "storage pods recreated, maintenance off",
        Duration::from_secs(300),
        || {
            let (h, db, before, storage) = (&h, &db, &before, &storage);
            async move {
                let c = h.clusters().get(name).await.ok()?;
                let s = c.status.clone()?;
                let done = s.generations.reconciled == c.metadata.generation?;
                let now = uids(&pods_by_group(h).await);
                let all_new = storage
                    .iter()
                    .all(|id| now.get(id).is_some_and(|u| before.get(id) != Some(u)));
                let list = db.get_processes_under_maintenance().await.ok()?;
                (done && all_new && db.maintenance_zone().is_empty() && list.is_empty())
                    .then_some(())
            }
        },
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}: calls {:?}, seen {:?}",
            db.calls(),
            seen.lock().unwrap()
        )
    });
    let calls: Vec<String> = db
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("maintenance"))
        .collect();
    let ons: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("maintenance on"))
        .collect();
    assert_eq!(
        ons.len(),
        storage.len(),
        "one zone per storage pod: {calls:?}"
    );
    for pair in calls.chunks(2) {
        assert!(
            pair[0].starts_with("maintenance on ") && pair[0].ends_with(" 600"),
            "{calls:?}"
        );
        assert_eq!(
            pair.get(1).map(String::as_str),
            Some("maintenance off"),
            "{calls:?}"
        );
    }
    // Every storage group went on the list, while its zone was in maintenance.
    let seen = seen.lock().unwrap().clone();
    for id in &storage {
        assert!(
            seen.iter()
                .any(|(zone, list)| !zone.is_empty() && list.contains(id)),
            "{id} listed under maintenance: {seen:?}"
        );
    }
    assert!(
        seen.iter().any(|(_, list)| !list.contains("storage-99")),
        "the stale entry was removed: {seen:?}"
    );
    let reasons = event_reasons(&h).await;
    assert!(
        reasons.iter().any(|r| r == "MaintenanceModeReset"),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn a_process_with_an_incompatible_protocol_gets_its_pod_recreated() {
    let h = Harness::start("fdb-incompat").await;
    let name = "incompat";
    h.simulate(name);
    let c = create(&h, name, json!({})).await;
    let victim = ids(&c, "storage").into_iter().next().unwrap();
    let before = uids(&pods_by_group(&h).await);
    h.db(name).make_incompatible(&victim);
    let after = recreated(&h, &before, &[victim.as_str()], |_| true).await;
    let c = h.reconciled(name, Duration::from_secs(180)).await;
    assert!(
        ids(&c, "storage").contains(&victim),
        "recreated, not replaced"
    );
    let after = uids(&after);
    for (id, uid) in &before {
        if *id != victim {
            assert_eq!(after.get(id), Some(uid), "{id} untouched");
        }
    }
    let reasons = event_reasons(&h).await;
    assert!(
        reasons.iter().any(|r| r == "RemovedIncompatibleProcesses"),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn a_bounce_leaves_out_the_groups_ignored_during_restart() {
    let h = Harness::start("fdb-ignore-restart").await;
    let name = "ignore";
    h.simulate(name);
    let c = create(&h, name, json!({"minimumUptimeSecondsForBounce": 15})).await;
    let storage = ids(&c, "storage");
    let ignored = storage.iter().next().unwrap().clone();
    let db = h.db(name);
    let ignored_address = db
        .processes()
        .into_iter()
        .find(|p| p.instance_id == ignored)
        .map(|p| p.address)
        .unwrap();
    let knob = json!({"spec": {
        "buggify": {"ignoreDuringRestart": [ignored]},
        "processes": {"storage": {"customParameters": ["knob_max_trace_lines=1000"]}},
    }});
    h.clusters()
        .patch(name, &PatchParams::default(), &Patch::Merge(&knob))
        .await
        .unwrap();
    let flag = "--knob_max_trace_lines=1000";
    testenv::eventually(
        "the other storage processes bounced",
        Duration::from_secs(240),
        || {
            let (db, storage, ignored) = (&db, &storage, &ignored);
            async move {
                let running: BTreeSet<String> = db
                    .processes()
                    .into_iter()
                    .filter(|p| storage.contains(&p.instance_id) && p.command_line.contains(flag))
                    .map(|p| p.instance_id)
                    .collect();
                let others: BTreeSet<String> = storage
                    .iter()
                    .filter(|id| *id != ignored)
                    .cloned()
                    .collect();
                (running == others).then_some(())
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", db.calls()));
    let kills: Vec<String> = db
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("kill"))
        .collect();
    assert!(!kills.is_empty());
    for k in &kills {
        assert!(
            !k.contains(&format!(" {ignored_address}")),
            "{ignored} left out: {kills:?}"
        );
    }
    let still = db
        .processes()
        .into_iter()
        .find(|p| p.instance_id == ignored)
        .unwrap();
    assert!(
        !still.command_line.contains(flag),
        "{ignored} still runs its old command line"
    );
}

#[tokio::test]
async fn a_group_in_block_removal_is_excluded_but_keeps_its_pod_until_unblocked() {
    let h = Harness::start_with("fdb-block-removal", support::open_recovery_gates()).await;
    let name = "block";
    h.simulate(name);
    let c = create(&h, name, json!({})).await;
    let victim = ids(&c, "storage").into_iter().next().unwrap();
    let pod_name = support::groups(&c)
        .into_iter()
        .find(|g| g.process_group_id.as_str() == victim)
        .unwrap()
        .pod_name(name);
    let block = json!({"spec": {
        "processGroupsToRemove": [victim],
        "buggify": {"blockRemoval": [victim]},
    }});
    h.clusters()
        .patch(name, &PatchParams::default(), &Patch::Merge(&block))
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    // Excluded and verified (the pass that verified it goes on to the deletions)...
    testenv::eventually(
        "the blocked group excluded",
        Duration::from_secs(240),
        || {
            let (h, victim) = (&h, &victim);
            async move {
                let c = h.clusters().get(name).await.ok()?;
                let g = support::groups(&c)
                    .into_iter()
                    .find(|g| g.process_group_id.as_str() == victim)?;
                g.exclusion_timestamp.is_some().then_some(())
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", h.db(name).calls()));
    // ... and a later pass (one that saw a newer generation, so it started after that one
    // ended) still finds the group waiting to shrink, its pod kept.
    let bump = json!({"spec": {"automationOptions": {"ignoreMissingProcessesSeconds": 31}}});
    let bumped = h
        .clusters()
        .patch(name, &PatchParams::default(), &Patch::Merge(&bump))
        .await
        .unwrap();
    let generation = bumped.metadata.generation.unwrap_or_default();
    testenv::eventually(
        "a later pass keeps the blocked group's pod",
        Duration::from_secs(240),
        || {
            let (h, victim, pods, pod_name) = (&h, &victim, &pods, &pod_name);
            async move {
                let c = h.clusters().get(name).await.ok()?;
                let st = c.status.as_ref()?;
                (st.generations.needs_shrink >= generation).then_some(())?;
                let g = support::groups(&c)
                    .into_iter()
                    .find(|g| g.process_group_id.as_str() == victim)?;
                g.exclusion_timestamp.is_some().then_some(())?;
                let pod = pods.get_opt(pod_name).await.ok()??;
                pod.metadata.deletion_timestamp.is_none().then_some(())
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", h.db(name).calls()));
    assert_eq!(
        ids(&h.clusters().get(name).await.unwrap(), "storage").len(),
        4,
        "replacement added"
    );

    let unblock = json!({"spec": {"buggify": null}});
    h.clusters()
        .patch(name, &PatchParams::default(), &Patch::Merge(&unblock))
        .await
        .unwrap();
    let c = h.removals_done(name, Duration::from_secs(240)).await;
    assert!(
        !ids(&c, "storage").contains(&victim),
        "the group is gone once unblocked"
    );
    assert!(
        pods.get_opt(&pod_name).await.unwrap().is_none(),
        "and its pod"
    );
}
