//! The FoundationDB pods' own identity, on the local control plane: the ServiceAccount, Role
//! and RoleBinding of `deploy/fdb/samples/cluster.yaml`, applied as written, let a token of
//! that ServiceAccount do to its own pod exactly what `fdb-kubernetes-monitor` does
//! (apple/foundationdb `fdbkubernetesmonitor/kubernetes.go`: a cache of its pod, listed and
//! watched by a field selector on its name, reads of its metadata, server-side applies of its
//! `launcher-*` annotations as field manager `fdb-kubernetes-monitor`), sees the operator's
//! poke (`outdated-config-map-seen`) through its watch, and nothing more: no update, no
//! delete, no nodes.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::WatchEvent;
use kube::core::params::WatchParams;
use serde_json::json;
use testenv::TestNamespace;

const MONITOR_CONFIGURATION: &str = "foundationdb.org/launcher-current-configuration";
const MONITOR_ENVIRONMENT: &str = "foundationdb.org/launcher-environment";
const POKE: &str = "foundationdb.org/outdated-config-map-seen";

/// The sample's objects for the pods' identity, namespaced into `ns` and otherwise as written.
fn pod_identity(ns: &str) -> Vec<DynamicObject> {
    let path = testenv::workspace_root().join("deploy/fdb/samples/cluster.yaml");
    let text = std::fs::read_to_string(&path).expect("read the sample");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a Kubernetes object"))
        .filter(|o: &DynamicObject| {
            ["ServiceAccount", "Role", "RoleBinding"].contains(&testenv::rbac::kind(o))
        })
        .map(|mut o| {
            o.metadata.namespace = Some(ns.to_owned());
            o
        })
        .collect()
}

fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what} should be forbidden: {other:?}"),
    }
}

#[tokio::test]
async fn the_samples_pod_identity_lets_the_monitor_annotate_its_own_pod_and_no_more() {
    let admin = testenv::client().await;
    let ns = TestNamespace::new(&admin, "fdb-monitor-rbac").await;
    let objects = pod_identity(&ns.name);
    let kinds: Vec<&str> = objects.iter().map(testenv::rbac::kind).collect();
    assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding"]);
    for o in &objects {
        testenv::rbac::apply(&admin, o, "flotilla-e2e-rbac")
            .await
            .expect("apply the sample's pod identity");
    }
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sample-storage-1"},
        "spec": {
            "serviceAccountName": "fdb-kubernetes",
            "containers": [{"name": "foundationdb", "image": "foundationdb/fdb-kubernetes-monitor:7.1.67"}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the pod");
    let monitor = testenv::service_account_client(&admin, &ns.name, "fdb-kubernetes")
        .await
        .expect("a token of the pods' ServiceAccount");
    let own = Api::<Pod>::namespaced(monitor.clone(), &ns.name);

    // The cache of its own pod: a list and a watch restricted to its name.
    let selector = "metadata.name=sample-storage-1";
    let listed = own
        .list(&ListParams::default().fields(selector))
        .await
        .expect("list its pod");
    assert_eq!(listed.items.len(), 1);
    let version = listed.metadata.resource_version.clone().unwrap_or_default();
    let mut watch = own
        .watch(&WatchParams::default().fields(selector), &version)
        .await
        .expect("watch its pod")
        .boxed();

    // The operator pokes the pod; the monitor sees it through its watch.
    let poke = json!({"metadata": {"annotations": {POKE: "1700000000"}}});
    pods.patch(
        "sample-storage-1",
        &PatchParams::default(),
        &Patch::Merge(&poke),
    )
    .await
    .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = watch.try_next().await.expect("the watch stays open") {
            if let WatchEvent::Modified(p) = event
                && p.metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key(POKE)
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the poke reached the monitor's watch");

    // It reads its metadata and applies its annotations, as upstream's monitor does.
    own.get("sample-storage-1").await.expect("get its pod");
    let annotations = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sample-storage-1", "annotations": {
            MONITOR_CONFIGURATION: r#"{"version":"7.1.67","arguments":[]}"#,
            MONITOR_ENVIRONMENT: r#"{"BINARY_DIR":"/usr/bin"}"#,
        }},
    });
    own.patch(
        "sample-storage-1",
        &PatchParams::apply("fdb-kubernetes-monitor").force(),
        &Patch::Apply(&annotations),
    )
    .await
    .expect("apply its annotations");
    let written = pods.get("sample-storage-1").await.unwrap();
    let got = written.metadata.annotations.unwrap_or_default();
    assert_eq!(got[MONITOR_ENVIRONMENT], r#"{"BINARY_DIR":"/usr/bin"}"#);
    assert_eq!(got[POKE], "1700000000", "the operator's poke is kept");

    // And nothing more.
    let mut replaced = own.get("sample-storage-1").await.unwrap();
    replaced
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("x".into(), "y".into());
    forbidden(
        own.replace("sample-storage-1", &PostParams::default(), &replaced)
            .await,
        "update",
    );
    forbidden(
        own.delete("sample-storage-1", &DeleteParams::default())
            .await,
        "delete",
    );
    forbidden(own.create(&PostParams::default(), &pod).await, "create");
    forbidden(
        Api::<Node>::all(monitor).list(&ListParams::default()).await,
        "listing nodes",
    );
}
