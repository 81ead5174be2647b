//! Version changes and metadata on the local control plane with kwok pods, the fake database
//! and the monitor stand-in; the operator runs as its ServiceAccount under `deploy/fdb/rbac`.
//!
//! - A protocol-incompatible upgrade (7.1 → 7.3) is refused while an application client that
//!   cannot speak 7.3 is connected (Warning Event `UnsupportedClient` naming it); once it is
//!   gone the operator says it cannot perform the upgrade (`IncompatibleUpgradeNotSupported`,
//!   not built yet) and touches nothing: no kill, no pod deleted, no group replaced.
//! - A label added to a class's pod template reaches the existing pods without recreating them.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use fdb::admin::status::{ConnectedClient, SupportedVersion};
use fdb::crd::FoundationDBCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::{Harness, create};

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

async fn events(h: &Harness) -> Vec<(String, String)> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.client.clone(), &h.ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

async fn wait_event(h: &Harness, reason: &str) -> String {
    testenv::eventually(
        &format!("event {reason}"),
        Duration::from_secs(120),
        || async {
            events(h)
                .await
                .into_iter()
                .find(|(r, _)| r == reason)
                .map(|(_, note)| note)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", h.db("upgrade").calls()))
}

async fn pods(h: &Harness) -> BTreeMap<String, String> {
    Api::<Pod>::namespaced(h.client.clone(), &h.ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| Some((p.name_any(), p.uid()?)))
        .collect()
}

#[tokio::test]
async fn an_incompatible_upgrade_waits_for_old_clients_and_is_then_refused_without_harm() {
    let h = Harness::start("fdb-incompatible").await;
    let name = "upgrade";
    h.simulate(name);
    let c = create(&h, name, json!({})).await;
    let before = pods(&h).await;
    let db = h.db(name);
    let client = |address: &str, group: &str| ConnectedClient {
        address: address.into(),
        log_group: group.into(),
    };
    db.set_clients(vec![SupportedVersion {
        client_version: "7.1.57".into(),
        protocol_version: "fdb00b071010000".into(),
        max_protocol_clients: vec![
            client("127.3.0.1:51234", "billing"),
            client("127.3.0.2:40000", "fdb-kubernetes-operator"),
        ],
        ..SupportedVersion::default()
    }]);
    patch_spec(&h, name, json!({"version": "7.3.63"})).await;
    let note = wait_event(&h, "UnsupportedClient").await;
    assert!(note.contains("127.3.0.1:51234 (billing)"), "{note}");
    assert!(
        !note.contains("127.3.0.2"),
        "the operator's own log group is ignored: {note}"
    );

    db.set_clients(vec![]);
    // A status change makes the next pass come sooner than the 60 s requeue.
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test/nudge": "1"}}})),
        )
        .await
        .unwrap();
    let note = wait_event(&h, "IncompatibleUpgradeNotSupported").await;
    assert!(note.contains("7.1.57") && note.contains("7.3.63"), "{note}");
    let now = h.clusters().get(name).await.unwrap();
    let status = now.status.clone().unwrap();
    assert_eq!(status.running_version, "7.1.57");
    assert!(!kit::conditions::is_true(&status.conditions, "Ready"));
    assert!(
        !db.calls().iter().any(|c| c.starts_with("kill")),
        "{:?}",
        db.calls()
    );
    assert_eq!(pods(&h).await, before, "no pod deleted or added");
    let ids = |c: &FoundationDBCluster| {
        c.status
            .clone()
            .unwrap()
            .process_groups
            .into_iter()
            .map(|g| g.process_group_id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&now), ids(&c), "no group replaced");
}

#[tokio::test]
async fn a_label_added_to_the_pod_template_reaches_existing_pods_in_place() {
    let h = Harness::start("fdb-metadata").await;
    let name = "labels";
    h.simulate(name);
    create(&h, name, json!({})).await;
    let before = pods(&h).await;
    patch_spec(
        &h,
        name,
        json!({"processes": {"general": {"podTemplate": {"metadata": {"labels": {"team": "storage-eng"}}}}}}),
    )
    .await;
    let api = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    testenv::eventually("every pod labelled", Duration::from_secs(120), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|p| p.labels().get("team").map(String::as_str) == Some("storage-eng"))
            .then_some(())
    })
    .await
    .unwrap();
    h.reconciled(name, Duration::from_secs(60)).await;
    assert_eq!(pods(&h).await, before, "the same pods, not recreated");
}
