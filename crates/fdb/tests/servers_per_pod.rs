//! Several fdbserver processes per pod (`storageServersPerPod`, `logServersPerPod`), on the
//! local control plane with kwok pods and the fake database, whose processes follow the pods
//! as upstream's mock does (one per pod and server its monitor starts): each storage and log
//! pod runs two processes reporting `process_id` `<group>-1` and `<group>-2` at ports 4501 and
//! 4503, the status records the counts; going back to one storage server per pod replaces the
//! storage groups, each excluded with all its processes before its pod goes, one fault domain
//! at a time, and leaves one process per storage pod. The operator runs as its ServiceAccount
//! under `deploy/fdb/rbac`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fdb::admin::AdminClient;
use fdb::admin::fake::FakeDatabase;
use fdb::crd::FoundationDBCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::{Harness, create, groups, ids, ready};

/// Each process group's processes in the database's status json: `(process_id, address)`.
async fn processes_by_group(db: &FakeDatabase) -> BTreeMap<String, BTreeSet<(String, String)>> {
    let status = db.get_status().await.expect("status json");
    let mut by_group: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for p in status.cluster.processes.values() {
        let id = p.locality.get("instance_id").cloned().unwrap_or_default();
        let process_id = p.locality.get("process_id").cloned().unwrap_or_default();
        by_group
            .entry(id)
            .or_default()
            .insert((process_id, p.address.clone()));
    }
    by_group
}

/// The processes group `id`, whose pod has IP `ip`, runs with `n` per pod.
fn expected(id: &str, ip: &str, n: u32) -> BTreeSet<(String, String)> {
    (1..=n)
        .map(|i| (format!("{id}-{i}"), format!("{ip}:{}", 4499 + 2 * i)))
        .collect()
}

/// The IP of group `id`'s pod.
async fn pod_ip(h: &Harness, c: &FoundationDBCluster, id: &str) -> String {
    let name = c.metadata.name.clone().unwrap();
    let g = groups(c)
        .into_iter()
        .find(|g| g.process_group_id.as_str() == id)
        .unwrap();
    let pod = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name)
        .get(&g.pod_name(&name))
        .await
        .unwrap();
    pod.status.and_then(|s| s.pod_ip).expect("a pod IP")
}

/// Waits until every group of `classes` runs exactly `n` processes at its pod's ports.
async fn runs(h: &Harness, name: &str, classes: &[(&str, u32)]) -> FoundationDBCluster {
    let db = h.db(name);
    testenv::eventually(
        "every pod runs its servers",
        Duration::from_secs(120),
        || async {
            let c = h.clusters().get(name).await.ok()?;
            let seen = processes_by_group(&db).await;
            for (class, n) in classes {
                for id in ids(&c, class) {
                    let ip = pod_ip(h, &c, &id).await;
                    if seen.get(&id) != Some(&expected(&id, &ip, *n)) {
                        return None;
                    }
                }
            }
            Some(c)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", db.processes()))
}

#[tokio::test]
async fn storage_and_log_pods_run_several_servers_and_a_change_replaces_the_storage_groups() {
    let h = Harness::start_with("fdb-spp", support::open_recovery_gates()).await;
    let name = "spp";
    h.simulate(name);
    let db = h.db(name);
    db.set_drain_reads(2);
    create(
        &h,
        name,
        json!({
            "storageServersPerPod": 2,
            "logServersPerPod": 2,
            "automationOptions": {"waitBetweenRemovalsSeconds": 3},
        }),
    )
    .await;
    let c = runs(&h, name, &[("storage", 2), ("log", 2), ("stateless", 1)]).await;
    let status = c.status.clone().unwrap();
    assert_eq!(status.storage_servers_per_disk, vec![2]);
    assert_eq!(status.log_servers_per_disk, vec![2]);
    assert!(ready(&c), "reconciled and Ready");
    let old_storage = ids(&c, "storage");
    let logs = ids(&c, "log");
    assert!(old_storage.len() >= 2, "{old_storage:?}");

    // Back to one storage server per pod: the storage groups are replaced.
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"storageServersPerPod": 1}})),
        )
        .await
        .unwrap();
    let old = old_storage.clone();
    testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(480),
        move |c: &FoundationDBCluster| {
            let s = c.status.clone().unwrap_or_default();
            let now = ids(c, "storage");
            ready(c)
                && now.len() == old.len()
                && now.is_disjoint(&old)
                && s.generations.reconciled == c.metadata.generation.unwrap_or(-1)
                && !groups(c).iter().any(|g| g.is_marked_for_removal())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", db.calls()));
    let c = runs(&h, name, &[("storage", 1), ("log", 2), ("stateless", 1)]).await;
    assert_eq!(ids(&c, "log"), logs, "the log groups are not replaced");
    assert_eq!(
        c.status.clone().unwrap().storage_servers_per_disk,
        vec![1],
        "no pod runs two storage servers any more"
    );

    // Every old group was excluded before its pod went: no pod went while one of its
    // processes held data, and its exclusion was verified with a blocking exclude.
    let violations = h.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
    let calls = db.calls();
    for id in &old_storage {
        let verified = format!("exclude locality_instance_id:{id}");
        assert!(calls.contains(&verified), "{verified:?} in {calls:?}");
    }

    // One fault domain (here: one pod) at a time.
    let events = h.events().await;
    let mut removals: Vec<(i64, String)> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("RemovingProcessGroup"))
        .filter_map(|e| {
            let note = e.note.clone().unwrap_or_default();
            let id = old_storage
                .iter()
                .find(|id| note.contains(&format!("of {id} verified")))?;
            let at = e.event_time.as_ref()?.0.as_millisecond();
            Some((at, id.clone()))
        })
        .collect();
    removals.sort();
    let removed: BTreeSet<&String> = removals.iter().map(|(_, id)| id).collect();
    assert_eq!(removed.len(), old_storage.len(), "{removals:?}");
    // No two removed together: each fault domain's removal is its own pass. The pace itself
    // (waitBetweenRemovalsSeconds, counted from the previous group's ResourcesTerminating
    // time while that group is still listed) is tested by cluster_lifecycle's
    // `removals_go_one_fault_domain_at_a_time_with_the_wait_between`; here a removed group can
    // leave the list before the next pass, and CI saw two removals 1.5 s apart with a 3 s wait.
    for pair in removals.windows(2) {
        assert!(
            pair[1].0 > pair[0].0,
            "two fault domains removed at once: {removals:?}"
        );
    }
    let replaced = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ReplacingMisconfiguredProcessGroup"))
        .filter(|e| {
            e.note
                .as_deref()
                .is_some_and(|n| n.contains("servers per pod changed from 2 to 1"))
        })
        .count();
    assert_eq!(replaced, old_storage.len(), "{events:?}");
}
