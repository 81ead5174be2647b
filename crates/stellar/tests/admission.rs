//! Admission across the real spaces: upstream's manifests apply unchanged in the WDS and the
//! ITS, and bad input is rejected by the API server with a message that says what is wrong.

mod support;

use serde_json::{Value, json};
use support::{ITS, WDS, create, dynamic, unique};

fn policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
           "metadata": {"name": name}, "spec": spec})
}

fn collector(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "StatusCollector",
           "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn binding_policies_are_validated_as_upstream() {
    let wds = support::client(WDS).await;
    let api = dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    );
    let ok = unique("bp-ok");
    let stored = create(
        &wds,
        policy(
            &ok,
            json!({"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                   "downsync": [{"objectSelectors": [{"matchLabels": {"app.kubernetes.io/name": "nginx"}}],
                                 "wantSingletonReportedState": true, "wantMultiWECReportedState": true,
                                 "createOnly": true, "statusCollectors": ["c"]},
                                {"resources": ["*"]}]}),
        ),
    )
    .await
    .expect("upstream's policy is accepted");
    assert_eq!(
        stored["spec"]["downsync"][0]["wantMultiWECReportedState"],
        true
    );
    let cases = [
        // upstream's cr-validation cases
        (
            json!({"downsync": [{"createOnly": true}]}),
            "\"spec.downsync[0]\" must validate at least one schema (anyOf)",
        ),
        (json!({"junk": 1}), "unknown field \"spec.junk\""),
        (
            json!({"downsync": [{"resources": ["*"]}], "wantSingletonReportedState": true}),
            "unknown field \"spec.wantSingletonReportedState\"",
        ),
        (
            json!({"clusterSelectors": [{"matchLabels": {"region": "east west"}}]}),
            "spec.clusterSelectors[0].matchLabels.region in body should match",
        ),
        (
            json!({"clusterSelectors": [{"matchExpressions": [{"key": "region", "operator": "Has"}]}]}),
            "spec.clusterSelectors[0].matchExpressions[0].operator in body should match '^(In|NotIn|Exists|DoesNotExist)$'",
        ),
    ];
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let err = create(&wds, policy(&format!("{ok}-bad{i}"), spec.clone()))
            .await
            .expect_err("must be rejected");
        assert!(err.contains(want), "{spec}: expected {want:?} in {err:?}");
    }
    api.delete(&ok, &Default::default()).await.expect("delete");
}

#[tokio::test]
async fn status_collectors_refuse_what_cannot_be_computed() {
    let wds = support::client(WDS).await;
    let api = dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "StatusCollector",
        None,
    );
    let ok = unique("sc-ok");
    create(
        &wds,
        collector(
            &ok,
            json!({"filter": "obj.spec.replicas == returned.status.availableReplicas",
                   "groupBy": [{"name": "ready", "def": "returned.status.readyReplicas"}],
                   "combinedFields": [{"name": "count", "type": "COUNT"},
                                      {"name": "sum", "type": "SUM", "subject": "returned.status.availableReplicas"}],
                   "limit": 10}),
        ),
    )
    .await
    .expect("a valid collector is accepted");
    let cases = [
        (
            json!({"select": [{"name": "a", "def": "1"}]}),
            "spec.limit: Required value",
        ),
        (
            json!({"limit": -1}),
            "spec.limit in body should be greater than or equal to 0",
        ),
        (
            json!({"limit": 1, "combinedFields": [{"name": "c", "type": "MEDIAN", "subject": "1"}]}),
            "type must be one of COUNT, SUM, AVG, MIN, MAX",
        ),
        (
            json!({"limit": 1, "combinedFields": [{"name": "c", "type": "COUNT", "subject": "1"}]}),
            "a COUNT has no subject",
        ),
        (
            json!({"limit": 1, "combinedFields": [{"name": "c", "type": "SUM"}]}),
            "SUM, AVG, MIN and MAX need a subject",
        ),
        (
            json!({"limit": 1, "groupBy": [{"name": "g", "def": "1"}]}),
            "groupBy must be empty when combinedFields is",
        ),
        (
            json!({"limit": 1, "select": [{"name": "a", "def": "1"}], "combinedFields": [{"name": "c", "type": "COUNT"}]}),
            "select must be empty when combinedFields is not",
        ),
    ];
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let err = create(&wds, collector(&format!("{ok}-bad{i}"), spec.clone()))
            .await
            .expect_err("must be rejected");
        assert!(err.contains(want), "{spec}: expected {want:?} in {err:?}");
    }
    api.delete(&ok, &Default::default()).await.expect("delete");
}

#[tokio::test]
async fn ocm_objects_apply_in_the_its() {
    let its = support::client(ITS).await;
    let mcs = dynamic(
        &its,
        "cluster.open-cluster-management.io",
        "v1",
        "ManagedCluster",
        None,
    );
    let name = unique("mc");
    let mc = create(
        &its,
        json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
               "metadata": {"name": name, "labels": {"location-group": "edge"}},
               "spec": {"hubAcceptsClient": true}}),
    )
    .await
    .expect("ManagedCluster");
    assert_eq!(mc["spec"]["leaseDurationSeconds"], 60, "OCM's default");
    mcs.delete(&name, &Default::default())
        .await
        .expect("delete");

    let mws = dynamic(
        &its,
        "work.open-cluster-management.io",
        "v1",
        "ManifestWork",
        Some("default"),
    );
    let mw = unique("mw");
    let stored = create(
        &its,
        json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
               "metadata": {"name": mw, "namespace": "default"},
               "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                    "metadata": {"name": "c", "namespace": "n"},
                                                    "data": {"k": "v"}}]},
                        "deleteOption": {},
                        "manifestConfigs": [{"resourceIdentifier": {"resource": "configmaps", "name": "c", "namespace": "n"},
                                             "updateStrategy": {"type": "CreateOnly"}}]}}),
    )
    .await
    .expect("ManifestWork");
    assert_eq!(
        stored["spec"]["deleteOption"]["propagationPolicy"],
        "Foreground"
    );
    assert_eq!(
        stored["spec"]["manifestConfigs"][0]["feedbackScrapeType"],
        "Poll"
    );
    assert_eq!(stored["spec"]["workload"]["manifests"][0]["data"]["k"], "v");
    let err = create(
        &its,
        json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
               "metadata": {"name": format!("{mw}-bad"), "namespace": "default"},
               "spec": {"manifestConfigs": [{"resourceIdentifier": {"resource": "configmaps", "name": "c"},
                                             "updateStrategy": {"type": "Replace"}}]}}),
    )
    .await
    .expect_err("unknown strategy");
    assert!(err.contains("Unsupported value: \"Replace\""), "{err}");
    mws.delete(&mw, &Default::default()).await.expect("delete");
}
