//! Configuration roll-outs on the local control plane with kwok pods, the fake database and a
//! stand-in for each pod's `fdb-kubernetes-monitor` (`fdb::admin::fake_monitor`: it loads the
//! config map at start and again only when the operator pokes the pod, and a loaded
//! configuration reaches fdbserver only through a `kill`). The operator runs as its
//! ServiceAccount under `deploy/fdb/rbac`.
//!
//! - A knob change (storage `customParameters`) reaches every storage pod through the
//!   annotation protocol, then the storage processes are bounced with one `kill`, only once
//!   the minimum uptime has passed; a second change right after, handled by a restarted
//!   operator, waits a full minimum uptime after the first kill.
//! - A storage pod-template change recreates the storage pods in place (same process groups),
//!   one fault domain at a time, leaving the other classes alone.
//! - A patch upgrade replaces the transaction system, recreates the storage pods with the new
//!   image, and `runningVersion` follows.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fdb::crd::FoundationDBCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::{Harness, create, groups, ids, ready};

const MIN_UPTIME: i64 = 20;

fn kills(h: &Harness, name: &str) -> Vec<(i64, String)> {
    h.db(name)
        .timed_calls()
        .into_iter()
        .filter(|(_, c)| c.starts_with("kill"))
        .collect()
}

async fn patch_spec(h: &Harness, name: &str, spec: serde_json::Value) {
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .expect("patch the cluster");
}

fn knob(value: &str) -> serde_json::Value {
    json!({"processes": {"storage": {"customParameters": [format!("knob_max_trace_lines={value}")]}}})
}

/// Waits until every storage process runs `--knob_max_trace_lines=<value>` and the cluster is
/// reconciled again.
async fn knob_running(h: &Harness, name: &str, value: &str) -> FoundationDBCluster {
    let flag = format!("--knob_max_trace_lines={value}");
    let db = h.db(name);
    testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(240),
        move |c: &FoundationDBCluster| {
            let storage = ids(c, "storage");
            let running = db
                .processes()
                .iter()
                .filter(|p| storage.contains(&p.instance_id) && p.command_line.contains(&flag))
                .count();
            ready(c) && running == storage.len()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", h.db(name).calls()))
}

#[tokio::test]
async fn a_knob_change_bounces_storage_processes_once_after_the_minimum_uptime() {
    let h = Harness::start("fdb-bounce").await;
    let name = "knobs";
    h.simulate(name);
    let c = create(
        &h,
        name,
        json!({"minimumUptimeSecondsForBounce": MIN_UPTIME}),
    )
    .await;
    let storage = ids(&c, "storage");
    let db = h.db(name);
    let others: BTreeMap<String, String> = db
        .processes()
        .into_iter()
        .filter(|p| !storage.contains(&p.instance_id))
        .map(|p| (p.instance_id, p.command_line))
        .collect();

    patch_spec(&h, name, knob("1000")).await;
    let c = knob_running(&h, name, "1000").await;
    let first = kills(&h, name);
    assert_eq!(first.len(), 1, "one kill: {first:?}");
    let (kill_time, words) = &first[0];
    let killed: BTreeSet<String> = db
        .processes()
        .into_iter()
        .filter(|p| words.contains(&format!(" {}", p.address)))
        .map(|p| p.instance_id)
        .collect();
    assert_eq!(killed, storage, "only the storage processes are bounced");
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    for g in groups(&c)
        .iter()
        .filter(|g| g.process_class.as_str() == "storage")
    {
        let pod = pods.get(&g.pod_name(name)).await.unwrap();
        let seen = pod
            .annotations()
            .get("foundationdb.org/outdated-config-map-seen");
        assert!(seen.is_none(), "poke cleared once the pod took the config");
    }
    let now: BTreeMap<String, String> = db
        .processes()
        .into_iter()
        .filter(|p| !storage.contains(&p.instance_id))
        .map(|p| (p.instance_id, p.command_line))
        .collect();
    assert_eq!(now, others, "log and stateless processes untouched");
    // The processes had run at least the minimum uptime when they were killed: the cluster
    // was created less than that before the change, so the bounce waited.
    let created = db
        .timed_calls()
        .into_iter()
        .find(|(_, c)| c.starts_with("configure new"))
        .map(|(t, _)| t)
        .unwrap();
    assert!(
        kill_time - created >= MIN_UPTIME,
        "killed {}s after the processes' last recovery",
        kill_time - created
    );

    // A second change, handled by a new operator instance: it must not bounce again before
    // the processes it would kill have run the minimum uptime since the first kill.
    h.restart_operator();
    patch_spec(&h, name, knob("2000")).await;
    knob_running(&h, name, "2000").await;
    let all = kills(&h, name);
    assert_eq!(all.len(), 2, "one kill per change: {all:?}");
    assert!(
        all[1].0 - all[0].0 >= MIN_UPTIME,
        "second kill {}s after the first",
        all[1].0 - all[0].0
    );
    let events = event_reasons(&h).await;
    assert!(events.iter().any(|r| r == "BouncedProcesses"), "{events:?}");
}

async fn event_reasons(h: &Harness) -> Vec<String> {
    h.events()
        .await
        .into_iter()
        .map(|e| e.reason.unwrap_or_default())
        .collect()
}

/// Samples, every 100 ms, how many storage groups have no running pod at once.
fn watch_storage_down(h: &Harness, name: &str) -> Arc<Mutex<usize>> {
    let max = Arc::new(Mutex::new(0usize));
    let (api, max2, token) = (h.clusters(), max.clone(), h.token.clone());
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    let name = name.to_owned();
    tokio::spawn(async move {
        while !token.is_cancelled() {
            if let (Ok(c), Ok(list)) = (
                api.get(&name).await,
                pods.list(&ListParams::default()).await,
            ) {
                let running: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .filter_map(|p| p.labels().get(support::ID_LABEL).cloned())
                    .collect();
                let down = groups(&c)
                    .iter()
                    .filter(|g| g.process_class.as_str() == "storage" && !g.is_marked_for_removal())
                    .filter(|g| !running.contains(g.process_group_id.as_str()))
                    .count();
                let mut m = max2.lock().unwrap();
                *m = (*m).max(down);
            }
            tokio::time::sleep(Duration::from_millis(100)).await; // the sampling period
        }
    });
    max
}

async fn pod_uids(h: &Harness) -> BTreeMap<String, String> {
    Api::<Pod>::namespaced(h.client.clone(), &h.ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| Some((p.labels().get(support::ID_LABEL)?.clone(), p.uid()?)))
        .collect()
}

#[tokio::test]
async fn a_storage_pod_template_change_recreates_storage_pods_one_zone_at_a_time() {
    let h = Harness::start("fdb-update-pods").await;
    let name = "template";
    h.simulate(name);
    let c = create(&h, name, json!({})).await;
    let storage = ids(&c, "storage");
    let before = pod_uids(&h).await;
    let down = watch_storage_down(&h, name);
    patch_spec(
        &h,
        name,
        json!({"processes": {"storage": {"podTemplate": {"spec": {"containers": [
            {"name": "foundationdb", "env": [{"name": "ROLLOUT", "value": "2"}]}
        ]}}}}}),
    )
    .await;
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    let c = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(300),
        |c: &FoundationDBCluster| {
            ready(c)
                && c.status.as_ref().is_some_and(|s| {
                    s.generations.reconciled == c.metadata.generation.unwrap_or(-1)
                })
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", h.db(name).calls()));
    let after = pod_uids(&h).await;
    assert_eq!(
        ids(&c, "storage"),
        storage,
        "storage groups recreated, not replaced"
    );
    for id in &storage {
        assert_ne!(before.get(id), after.get(id), "{id}'s pod was recreated");
        let g = groups(&c)
            .into_iter()
            .find(|g| g.process_group_id.as_str() == id)
            .unwrap();
        let pod = pods.get(&g.pod_name(name)).await.unwrap();
        let env = pod.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap_or_default();
        assert!(
            env.iter().any(|e| e.name == "ROLLOUT"),
            "{id} has the new spec"
        );
    }
    for (id, uid) in &before {
        if !storage.contains(id) {
            assert_eq!(after.get(id), Some(uid), "{id} untouched");
        }
    }
    assert_eq!(*down.lock().unwrap(), 1, "one storage pod down at a time");
    let events = event_reasons(&h).await;
    let recreations = events.iter().filter(|r| *r == "RecreatingPods").count();
    assert!(recreations >= storage.len(), "{events:?}");
}

#[tokio::test]
async fn a_patch_upgrade_replaces_the_transaction_system_and_recreates_storage_by_zone() {
    // The database's recovery gates are not what this test is about: open them.
    let options = support::open_recovery_gates();
    let h = Harness::start_with("fdb-patch-upgrade", options).await;
    let name = "patch";
    h.simulate(name);
    let c = create(&h, name, json!({})).await;
    let (storage, logs) = (ids(&c, "storage"), ids(&c, "log"));
    let down = watch_storage_down(&h, name);
    patch_spec(&h, name, json!({"version": "7.1.63"})).await;
    let db = h.db(name);
    let c = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(540),
        move |c: &FoundationDBCluster| {
            let s = c.status.clone().unwrap_or_default();
            ready(c)
                && s.running_version == "7.1.63"
                && !groups(c).iter().any(|g| g.is_marked_for_removal())
                && db.processes().iter().all(|p| p.version == "7.1.63")
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", h.db(name).calls()));
    let db = h.db(name);
    assert_eq!(ids(&c, "storage"), storage, "storage recreated in place");
    assert!(ids(&c, "log").is_disjoint(&logs), "logs replaced");
    assert_eq!(*down.lock().unwrap(), 1, "one storage pod down at a time");
    assert!(
        !db.calls().iter().any(|c| c.starts_with("kill")),
        "a patch upgrade bounces nothing: {:?}",
        db.calls()
    );
}
