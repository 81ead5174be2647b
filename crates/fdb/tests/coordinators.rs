//! A coordinator lost for good, on the local control plane with kwok pods and the fake
//! database (processes follow the pods); the operator runs as its ServiceAccount under
//! `deploy/fdb/rbac`.
//!
//! A coordinator's process goes and stays gone (its group put into `buggify.noSchedule`: the
//! pod is recreated and stays Pending, so no process runs for it). The cluster reports that it
//! needs new coordinators, but no `coordinators` change is issued while the last recovery is
//! younger than `--minimum-uptime-for-coordinator-change-with-missing-process` (an hour here,
//! on the fake's clock), over whole passes; once the database's clock passes the gate, exactly
//! one change is issued, to three coordinators without the lost one.

mod support;

use std::time::Duration;

use fdb::cluster::Options;
use fdb::crd::{ConnectionString, FoundationDBCluster};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::{Harness, create};

const GATE: f64 = 3600.0;

fn coordinator_changes(calls: &[String]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.starts_with("coordinators "))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_lost_coordinator_is_replaced_only_after_the_recovery_age_gate() {
    let options = Options {
        minimum_recovery_time_for_missing_coordinator_change: GATE,
        ..support::open_recovery_gates()
    };
    let h = Harness::start_with("fdb-coordinator-loss", options).await;
    let name = "lost";
    h.simulate(name);
    let db = h.db(name);
    let c = create(&h, name, json!({})).await;
    let status = c.status.clone().unwrap();
    let old = ConnectionString::parse(&status.connection_string).unwrap();
    let lost_address = old.coordinators[0].clone();
    let lost_ip = lost_address.split(':').next().unwrap().to_owned();
    let group = status
        .process_groups
        .iter()
        .find(|g| g.addresses.contains(&lost_ip))
        .expect("the coordinator's group")
        .process_group_id
        .to_string();
    let calls = db.calls().len();

    // The coordinator's pod is recreated unschedulable: its process is gone for good.
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"buggify": {"noSchedule": [group]}}})),
        )
        .await
        .unwrap();
    testenv::eventually(
        "the coordinator's process gone and the cluster asking for new coordinators",
        Duration::from_secs(120),
        || async {
            let gone = !db.processes().iter().any(|p| p.address == lost_address);
            let c = h.clusters().get(name).await.ok()?;
            let s = c.status?;
            (gone && s.needs_new_coordinators).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: processes {:?}", db.processes()));
    // Two whole passes later, the gate (an hour since the last recovery) still holds.
    h.bump(name, json!({"minimumUptimeSecondsForBounce": 601}))
        .await;
    h.bump(name, json!({"minimumUptimeSecondsForBounce": 602}))
        .await;
    assert_eq!(
        coordinator_changes(&db.calls()[calls..]),
        Vec::<String>::new(),
        "no coordinator change before the recovery-age gate"
    );

    // The database's clock passes the gate: one change, without the lost coordinator.
    db.advance(GATE as i64 + 60);
    let c = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(120),
        move |c: &FoundationDBCluster| {
            let s = c.status.clone().unwrap_or_default();
            ConnectionString::parse(&s.connection_string)
                .is_ok_and(|cs| cs.generation_id != old.generation_id)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", db.calls()));
    let new = ConnectionString::parse(&c.status.unwrap().connection_string).unwrap();
    assert_eq!(new.coordinators.len(), 3, "{new:?}");
    assert!(!new.coordinators.contains(&lost_address), "{new:?}");
    // Settled: two more whole passes, still the one change.
    h.bump(name, json!({"minimumUptimeSecondsForBounce": 603}))
        .await;
    h.bump(name, json!({"minimumUptimeSecondsForBounce": 604}))
        .await;
    let changes = coordinator_changes(&db.calls()[calls..]);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(!changes[0].contains(&lost_address), "{changes:?}");
}
