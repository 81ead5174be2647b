//! Version changes and metadata on the local control plane with kwok pods, the fake database
//! and the monitor stand-in; the operator runs as its ServiceAccount under `deploy/fdb/rbac`.
//!
//! - A protocol-incompatible upgrade (7.1 → 7.3) is refused while an application client that
//!   cannot speak 7.3 is connected (Warning Event `UnsupportedClient` naming it); once it is
//!   gone the new binaries are staged by every pod's sidecar and every process is killed in
//!   one `kill` (twice), after which the pods are recreated or replaced with the new image
//!   and `runningVersion` is 7.3.63.
//! - A label added to a class's pod template reaches the existing pods without recreating them.

mod support;

use std::collections::{BTreeMap, BTreeSet};
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
    h.events()
        .await
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
async fn an_incompatible_upgrade_waits_for_old_clients_then_kills_everything_once() {
    // The recovery gates of the replacements that follow the upgrade are not the point here.
    let options = support::open_recovery_gates();
    let h = Harness::start_with("fdb-incompatible", options).await;
    let name = "upgrade";
    h.simulate(name);
    let c = create(&h, name, json!({"minimumUptimeSecondsForBounce": 5})).await;
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
    let old_processes: BTreeSet<String> = db.processes().into_iter().map(|p| p.address).collect();
    assert_eq!(old_processes.len(), 16);
    patch_spec(&h, name, json!({"version": "7.3.63"})).await;
    let note = wait_event(&h, "UnsupportedClient").await;
    assert!(note.contains("127.3.0.1:51234 (billing)"), "{note}");
    assert!(
        !note.contains("127.3.0.2"),
        "the operator's own log group is ignored: {note}"
    );
    let blocked = h.clusters().get(name).await.unwrap().status.unwrap();
    assert_eq!(blocked.running_version, "7.1.57");
    assert!(
        !db.calls().iter().any(|c| c.starts_with("kill")),
        "{:?}",
        db.calls()
    );

    // The old client goes away: the next pass (at most a minute later, the gate's requeue)
    // stages the new binaries on every pod and kills every process at once.
    db.set_clients(vec![]);
    let c2 = testenv::wait_for(&h.clusters(), name, Duration::from_secs(400), {
        let db = db.clone();
        move |c: &FoundationDBCluster| {
            let s = c.status.clone().unwrap_or_default();
            kit::conditions::is_true(&s.conditions, "Ready")
                && s.running_version == "7.3.63"
                && !s.process_groups.iter().any(|g| g.is_marked_for_removal())
                && db.processes().iter().all(|p| p.version == "7.3.63")
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", db.calls()));
    let kills: Vec<String> = db
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("kill"))
        .collect();
    assert_eq!(kills.len(), 1, "one simultaneous kill: {kills:?}");
    for address in &old_processes {
        assert!(
            kills[0].contains(address.as_str()),
            "{address} killed: {kills:?}"
        );
    }
    let ids = |c: &FoundationDBCluster, class: &str| {
        c.status
            .clone()
            .unwrap()
            .process_groups
            .into_iter()
            .filter(|g| g.process_class.as_str() == class)
            .map(|g| g.process_group_id.to_string())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        ids(&c2, "storage"),
        ids(&c, "storage"),
        "storage recreated in place"
    );
    let events = events(&h).await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "BouncedProcesses" && n.contains("upgrade to 7.3.63")),
        "{events:?}"
    );
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
