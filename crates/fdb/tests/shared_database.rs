//! Two operator instances sharing one database, on the local control plane with kwok pods and
//! the fake database; each instance runs in its own namespace as its own ServiceAccount under
//! `deploy/fdb/rbac`, with its own controller and database clients, as two Kubernetes
//! clusters' operators share one FoundationDB cluster (the instances run in this test's
//! process: what they share is the database, which is all they share in production too).
//!
//! Cluster `dc1` (process-group prefix `dc1`) creates and configures the database; cluster
//! `dc2` (prefix `dc2`) joins it through `seedConnectionString` and never runs `configure new`.
//! Both use the global lock (`lockOptions.disableLocks: false`). A protocol-incompatible
//! upgrade (7.1 → 7.3) of both then needs the pending-upgrade records: each instance
//! registers its own process groups and waits until every process in the database is
//! registered, and the one that holds the lock then kills every process of both clusters in a
//! single `kill`. Both clusters end Ready on 7.3.63 with the same storage groups, every process of
//! the database runs it, and the pending-upgrade records are cleared.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use fdb::admin::LockClient;
use fdb::crd::FoundationDBCluster;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::{Harness, create};

const TARGET: &str = "7.3.63";

/// The spec of a cluster of prefix `prefix` that takes the lock for global operations.
fn locked(prefix: &str) -> serde_json::Value {
    json!({
        "processGroupIDPrefix": prefix,
        "lockOptions": {"disableLocks": false},
        "minimumUptimeSecondsForBounce": 5,
    })
}

/// Waits until cluster `name` of `h` is Ready on the target version with no removal left.
async fn upgraded(h: &Harness, name: &str, db: &fdb::admin::fake::FakeDatabase) {
    testenv::wait_for(&h.clusters(), name, Duration::from_secs(600), {
        move |c: &FoundationDBCluster| {
            let s = c.status.clone().unwrap_or_default();
            kit::conditions::is_true(&s.conditions, "Ready")
                && s.running_version == TARGET
                && !s.process_groups.iter().any(|g| g.is_marked_for_removal())
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", db.calls()));
}

#[tokio::test]
async fn two_instances_on_one_database_join_it_and_upgrade_it_with_one_kill() {
    // The recovery gates of the pod recreations that follow the upgrade are not the point.
    let options = support::open_recovery_gates();
    let a = Harness::start_with("fdb-shared-a", options.clone()).await;
    let db = a.db("dc1");
    let b = Harness::start_on("fdb-shared-b", options, "dc2", db.clone()).await;
    support::simulate_clusters(&[(&a, "dc1"), (&b, "dc2")], db.clone());

    // 1. dc1 creates the database; dc2 joins it by its connection string.
    let c1 = create(&a, "dc1", locked("dc1")).await;
    let connection_string = c1.status.clone().unwrap().connection_string;
    let mut spec = locked("dc2");
    spec["seedConnectionString"] = json!(connection_string);
    let c2 = create(&b, "dc2", spec).await;
    let configure_new = db
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("configure new"))
        .count();
    assert_eq!(configure_new, 1, "dc2 joined: {:?}", db.calls());
    let ids = |c: &FoundationDBCluster| -> BTreeSet<String> {
        support::groups(c)
            .into_iter()
            .map(|g| g.process_group_id.to_string())
            .collect()
    };
    let (ids1, ids2) = (ids(&c1), ids(&c2));
    assert!(ids1.iter().all(|id| id.starts_with("dc1-")), "{ids1:?}");
    assert!(ids2.iter().all(|id| id.starts_with("dc2-")), "{ids2:?}");
    let both: BTreeSet<String> = ids1.union(&ids2).cloned().collect();
    testenv::eventually(
        "every group's process in the database",
        Duration::from_secs(120),
        || async {
            let running: BTreeSet<String> =
                db.processes().into_iter().map(|p| p.instance_id).collect();
            (running == both).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", db.processes()));
    for (h, name) in [(&a, "dc1"), (&b, "dc2")] {
        let s = h
            .reconciled(name, Duration::from_secs(120))
            .await
            .status
            .unwrap();
        assert_eq!(s.connection_string, db.connection_string(), "{name}");
    }

    // 2. The incompatible upgrade of both clusters.
    let old: BTreeSet<String> = db.processes().into_iter().map(|p| p.address).collect();
    assert_eq!(old.len(), both.len());
    for (h, name) in [(&a, "dc1"), (&b, "dc2")] {
        h.clusters()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"version": TARGET}})),
            )
            .await
            .expect("patch the version");
    }
    upgraded(&a, "dc1", &db).await;
    upgraded(&b, "dc2", &db).await;
    testenv::eventually(
        "every process of the database on the target version",
        Duration::from_secs(120),
        || async {
            db.processes()
                .iter()
                .all(|p| p.version == TARGET)
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", db.processes()));

    // One kill for the whole database, with every process of both clusters in it.
    let kills: Vec<String> = db
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("kill"))
        .collect();
    assert_eq!(kills.len(), 1, "one simultaneous kill: {kills:?}");
    for address in &old {
        assert!(kills[0].contains(address.as_str()), "{address}: {kills:?}");
    }
    let pending = db
        .lock_client("dc9", 60)
        .get_pending_upgrades(TARGET)
        .await
        .expect("read the pending upgrades");
    assert!(pending.is_empty(), "cleared after the kill: {pending:?}");
    // The new image recreates the storage pods in place (same groups, same volumes; the
    // transaction system is replaced, upstream's default strategy): a storage pod is deleted
    // while its process holds data there, on purpose, so the harness's record of such pods is
    // no measure here; the storage groups are.
    for (h, name, before) in [(&a, "dc1", &c1), (&b, "dc2", &c2)] {
        let c = h.clusters().get(name).await.expect("read the cluster");
        assert_eq!(
            support::storage_groups(&c),
            support::storage_groups(before),
            "{name}: storage recreated in place"
        );
    }
}
