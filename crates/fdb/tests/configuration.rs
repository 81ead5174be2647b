//! A database configuration change waits while data distribution is unhealthy: a storage pod
//! failed (kwok's failing stage) takes its process with it, so its data is a replica short;
//! a change of `databaseConfiguration.logs` made meanwhile is deferred (Event
//! `ConfigurationChangeDeferred` naming the data distribution state, no `configure` sent)
//! until the failed pod has been deleted and recreated and its process is back, and then
//! applied once.

mod support;

use std::time::Duration;

use fdb::cluster::Options;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::{Harness, open_recovery_gates};

const FAIL_LABEL: &str = "pod-container-running-failed.stage.kwok.x-k8s.io";

async fn event_notes(h: &Harness, reason: &str) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.client.clone(), &h.ns.name)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_configuration_change_waits_for_healthy_data_distribution() {
    let options = Options {
        minimum_age_for_terminal_pod_deletion: Duration::from_secs(30),
        ..open_recovery_gates()
    };
    let h = Harness::start_with("fdb-config-gate", options).await;
    let name = "sample";
    h.simulate(name);
    let db = h.db(name);
    // Lost data is never re-replicated: only the process coming back heals it.
    db.set_heal_reads(u32::MAX);
    let c = support::create(&h, name, json!({})).await;
    // The last recovery (`configure new`) counts as long ago: only the data gates the change.
    db.advance(600);
    let storage = support::groups(&c)
        .into_iter()
        .find(|g| g.process_class.as_str() == "storage")
        .expect("a storage group");
    let pod = storage.pod_name(name);
    Api::<Pod>::namespaced(h.client.clone(), &h.ns.name)
        .patch(
            &pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {FAIL_LABEL: "true"}}})),
        )
        .await
        .expect("fail the storage pod");
    testenv::eventually("the storage process gone", Duration::from_secs(60), || {
        let gone = !db
            .processes()
            .iter()
            .any(|p| p.instance_id == storage.process_group_id.0);
        async move { gone.then_some(()) }
    })
    .await
    .expect("process gone");

    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"databaseConfiguration": {"logs": 4}}})),
        )
        .await
        .expect("change the configuration");
    let note = testenv::eventually("the change deferred", Duration::from_secs(60), || {
        let h = &h;
        async move {
            event_notes(h, "ConfigurationChangeDeferred")
                .await
                .into_iter()
                .find(|n| n.contains("data distribution is healthy_repartitioning"))
        }
    })
    .await
    .expect("deferred");
    assert_eq!(
        note,
        "not safe yet: data distribution is healthy_repartitioning"
    );
    let configures = |db: &fdb::admin::fake::FakeDatabase| {
        db.calls()
            .into_iter()
            .filter(|c| c.starts_with("configure") && !c.starts_with("configure new"))
            .count()
    };
    assert_eq!(configures(&db), 0, "{:?}", db.calls());
    assert_eq!(db.configuration().expect("configured").role_counts.logs, 3);

    // The failed pod is deleted and recreated; its process is back and the change goes through.
    let after = h.reconciled(name, Duration::from_secs(240)).await;
    assert_eq!(db.configuration().expect("configured").role_counts.logs, 4);
    assert_eq!(configures(&db), 1, "{:?}", db.calls());
    assert!(
        db.processes()
            .iter()
            .any(|p| p.instance_id == storage.process_group_id.0),
        "the failed group's process is back"
    );
    assert!(after.status.unwrap_or_default().health.healthy);
}
