use super::*;
use crate::ocm::{ManifestWork, UpdateStrategyType};
use kube::CustomResourceExt;
use serde_json::Value as Json;

fn schema(crd: &CustomResourceDefinition) -> Json {
    serde_json::to_value(&crd.spec.versions[0].schema).expect("schema")["openAPIV3Schema"].clone()
}

#[test]
fn names_scopes_and_short_names_are_upstreams() {
    let table: Vec<(String, String, Vec<String>)> = crate::crds()
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap_or_default(),
                c.spec.scope.clone(),
                c.spec.names.short_names.clone().unwrap_or_default(),
            )
        })
        .collect();
    let want = [
        (
            "bindingpolicies.control.kubestellar.io",
            "Cluster",
            vec!["bp"],
        ),
        ("bindings.control.kubestellar.io", "Cluster", vec!["bdg"]),
        (
            "customtransforms.control.kubestellar.io",
            "Cluster",
            vec!["ct"],
        ),
        (
            "statuscollectors.control.kubestellar.io",
            "Cluster",
            vec!["sc"],
        ),
        (
            "combinedstatuses.control.kubestellar.io",
            "Namespaced",
            vec!["cs"],
        ),
        (
            "workstatuses.control.kubestellar.io",
            "Namespaced",
            vec!["ws", "wss"],
        ),
        (
            "managedclusters.cluster.open-cluster-management.io",
            "Cluster",
            vec!["mcl", "mcls"],
        ),
        (
            "manifestworks.work.open-cluster-management.io",
            "Namespaced",
            vec![],
        ),
        (
            "appliedmanifestworks.work.open-cluster-management.io",
            "Cluster",
            vec![],
        ),
    ];
    assert_eq!(table.len(), want.len());
    for ((name, scope, short), (wn, ws, wsh)) in table.iter().zip(want) {
        assert_eq!((name.as_str(), scope.as_str()), (wn, ws));
        assert_eq!(short, &wsh, "{name}");
    }
    assert_eq!(
        CustomTransform::crd().spec.names.categories,
        Some(vec!["all".to_string()])
    );
}

#[test]
fn a_downsync_clause_must_test_something_and_cluster_selectors_are_checked() {
    let s = schema(&binding_policy_crd());
    let spec = &s["properties"]["spec"]["properties"];
    let any_of = spec["downsync"]["items"]["anyOf"]
        .as_array()
        .expect("anyOf");
    assert_eq!(any_of.len(), 6);
    assert_eq!(any_of[0], json!({"required": ["apiGroup"]}));
    let sel = &spec["clusterSelectors"]["items"];
    assert_eq!(sel["x-kubernetes-map-type"], "atomic");
    assert_eq!(
        sel["properties"]["matchExpressions"]["items"]["properties"]["operator"]["pattern"],
        OPERATOR
    );
    // apiGroup is a plain string, as upstream's (an explicit null is pruned, meaning "any").
    assert_eq!(
        spec["downsync"]["items"]["properties"]["apiGroup"],
        json!({"type": "string", "description": "`apiGroup` is the API group of the referenced object, empty string for the core API group.\n`nil` matches every API group."})
    );
}

#[test]
fn combined_and_work_status_keep_their_fields_at_the_root() {
    let cs = schema(&CombinedStatus::crd());
    assert!(cs["properties"].get("spec").is_none());
    assert_eq!(cs["properties"]["results"]["type"], "array");
    let ws = schema(&WorkStatus::crd());
    assert!(ws["properties"]["statusDetails"].is_object());
    assert_eq!(
        ws["properties"]["status"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(
        ws["properties"]["status"]["x-kubernetes-map-type"],
        "atomic"
    );
    assert_eq!(
        ws["properties"]["spec"]["properties"]["sourceRef"]["required"],
        json!(["group", "namespace"])
    );
}

#[test]
fn binding_lists_are_maps_keyed_as_upstream() {
    let s = schema(&kit::crdschema::crd::<Binding>());
    let spec = &s["properties"]["spec"]["properties"];
    assert_eq!(
        spec["destinations"]["x-kubernetes-list-map-keys"],
        json!(["clusterId"])
    );
    assert_eq!(
        spec["workload"]["properties"]["namespaceScope"]["x-kubernetes-list-map-keys"],
        json!(["group", "resource", "namespace", "name"])
    );
    let item = &spec["workload"]["properties"]["namespaceScope"]["items"];
    assert_eq!(
        item["required"],
        json!([
            "group",
            "name",
            "namespace",
            "resource",
            "resourceVersion",
            "version"
        ])
    );
}

#[test]
fn upstream_documents_round_trip() {
    let bp: BindingPolicy = serde_yaml::from_str(
        "apiVersion: control.kubestellar.io/v1alpha1\nkind: BindingPolicy\nmetadata: {name: nginx}\n\
         spec:\n  clusterSelectors:\n  - matchLabels: {location-group: edge}\n  downsync:\n  \
         - objectSelectors:\n    - matchLabels: {app.kubernetes.io/name: nginx}\n    createOnly: true\n    \
         wantSingletonReportedState: true\n    statusCollectors: [a]\n  - apiGroup: \"\"\n    resources: [namespaces]\n",
    )
    .expect("upstream policy parses");
    assert_eq!(bp.spec.downsync.len(), 2);
    assert!(bp.spec.downsync[0].modulation.create_only);
    assert_eq!(bp.spec.downsync[0].test.api_group, None);
    assert_eq!(bp.spec.downsync[1].test.api_group.as_deref(), Some(""));
    let back = serde_json::to_value(&bp.spec).expect("serialise");
    assert_eq!(back["downsync"][1]["apiGroup"], "");
    assert!(back["downsync"][0].get("apiGroup").is_none());

    let mw: ManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "w", "namespace": "cluster1"},
        "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}]},
                 "manifestConfigs": [{"resourceIdentifier": {"group": "", "resource": "configmaps", "name": "c", "namespace": "n"},
                                      "updateStrategy": {"type": "CreateOnly"}}]}
    }))
    .expect("manifestwork parses");
    assert_eq!(
        mw.spec.manifest_configs[0]
            .update_strategy
            .as_ref()
            .map(|u| u.type_),
        Some(UpdateStrategyType::CreateOnly)
    );
}
