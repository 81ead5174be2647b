//! The binding controller across the real WDS and ITS: a policy's Binding follows the live
//! inventory (ManagedClusters relabelled), the objects (relabelled, deleted), the policy
//! (edited, deleted), and resources that come and go with their CRDs.

mod support;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use stellar::api::{Binding, BindingPolicy};
use stellar::ocm::ManagedCluster;
use support::{ITS, WDS, create, unique, until};

async fn binding(wds: &kube::Client, name: &str) -> Option<Binding> {
    Api::<Binding>::all(wds.clone())
        .get_opt(name)
        .await
        .expect("get Binding")
}

fn objects(b: &Binding) -> Vec<String> {
    let w = &b.spec.workload;
    w.cluster_scope
        .iter()
        .map(|o| format!("{}/{}", o.object.resource, o.object.name))
        .chain(w.namespace_scope.iter().map(|o| {
            format!(
                "{}/{}/{}",
                o.object.resource, o.object.namespace, o.object.name
            )
        }))
        .collect()
}

fn dests(b: &Binding) -> Vec<String> {
    b.spec
        .destinations
        .iter()
        .map(|d| d.cluster_id.clone())
        .collect()
}

async fn label(api: &Api<kube::api::DynamicObject>, name: &str, labels: Value) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": labels}})),
    )
    .await
    .expect("label");
}

#[tokio::test]
async fn a_binding_follows_inventory_objects_and_policy() {
    support::start_controllers();
    let wds = support::client(WDS).await;
    let its = support::client(ITS).await;
    let id = unique("bind");
    let sel = format!("test.flotilla.dev/{id}");

    // Two WECs in the inventory, one selected.
    let mcs: Api<ManagedCluster> = Api::all(its.clone());
    for (n, on) in [("a", "yes"), ("b", "no")] {
        create(
            &its,
            json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": format!("{id}-{n}"), "labels": {sel.clone(): on}},
            "spec": {"hubAcceptsClient": true}}),
        )
        .await
        .expect("ManagedCluster");
    }
    create(
        &wds,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": id}}),
    )
    .await
    .expect("ns");
    for n in ["web", "other"] {
        let app = if n == "web" { "nginx" } else { "x" };
        create(
            &wds,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": n, "namespace": id, "labels": {"app": app}}, "data": {"k": "v"}}),
        )
        .await
        .expect("ConfigMap");
    }
    create(&wds, json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": id},
        "spec": {"clusterSelectors": [{"matchLabels": {sel.clone(): "yes"}}],
                 "downsync": [{"namespaces": [id], "objectSelectors": [{"matchLabels": {"app": "nginx"}}],
                               "createOnly": true},
                              {"apiGroup": "", "resources": ["namespaces"], "objectNames": [id]}]}}))
        .await.expect("policy");

    let cm_web = format!("configmaps/{id}/web");
    let ns_obj = format!("namespaces/{id}");
    let b = until("the Binding", 30, || async {
        binding(&wds, &id)
            .await
            .filter(|b| objects(b) == [ns_obj.clone(), cm_web.clone()])
    })
    .await;
    assert_eq!(dests(&b), [format!("{id}-a")]);
    assert!(b.spec.workload.namespace_scope[0].modulation.create_only);
    assert!(!b.spec.workload.cluster_scope[0].modulation.create_only);
    let owner = &b.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("BindingPolicy", Some(true))
    );
    let p = Api::<BindingPolicy>::all(wds.clone())
        .get(&id)
        .await
        .expect("policy");
    assert!(
        p.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"bindingpolicy.kubestellar.io/kscontroller".to_string())
    );

    // WEC relabelled: destinations follow.
    let mc_api = support::dynamic(
        &its,
        "cluster.open-cluster-management.io",
        "v1",
        "ManagedCluster",
        None,
    );
    label(&mc_api, &format!("{id}-b"), json!({sel.clone(): "yes"})).await;
    label(&mc_api, &format!("{id}-a"), json!({sel.clone(): "no"})).await;
    until("destinations to follow the labels", 30, || async {
        binding(&wds, &id)
            .await
            .filter(|b| dests(b) == [format!("{id}-b")])
    })
    .await;

    // Object relabelled: it leaves; the other one comes in.
    let cms = support::dynamic(&wds, "", "v1", "ConfigMap", Some(&id));
    label(&cms, "web", json!({"app": "x"})).await;
    label(&cms, "other", json!({"app": "nginx"})).await;
    let cm_other = format!("configmaps/{id}/other");
    until("the objects to follow their labels", 30, || async {
        binding(&wds, &id)
            .await
            .filter(|b| objects(b) == [ns_obj.clone(), cm_other.clone()])
    })
    .await;

    // Object deleted: it leaves.
    cms.delete("other", &DeleteParams::default())
        .await
        .expect("delete");
    until("the deleted object to leave", 30, || async {
        binding(&wds, &id)
            .await
            .filter(|b| objects(b) == [ns_obj.clone()])
    })
    .await;

    // Policy edited: no clusters at all.
    let policies = support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    );
    policies
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterSelectors": null}})),
        )
        .await
        .expect("edit policy");
    until("no destinations", 30, || async {
        binding(&wds, &id)
            .await
            .filter(|b| b.spec.destinations.is_empty())
    })
    .await;

    // Policy deleted: Binding and policy go.
    policies
        .delete(&id, &DeleteParams::default())
        .await
        .expect("delete policy");
    until("the policy and its Binding to go", 30, || async {
        let gone_b = binding(&wds, &id).await.is_none();
        let gone_p = Api::<BindingPolicy>::all(wds.clone())
            .get_opt(&id)
            .await
            .expect("get")
            .is_none();
        (gone_b && gone_p).then_some(())
    })
    .await;

    for n in ["a", "b"] {
        mcs.delete(&format!("{id}-{n}"), &DeleteParams::default())
            .await
            .expect("delete mc");
    }
    support::dynamic(&wds, "", "v1", "Namespace", None)
        .delete(&id, &DeleteParams::default())
        .await
        .expect("delete ns");
}

#[tokio::test]
async fn resources_are_watched_while_their_crd_is_served() {
    support::start_controllers();
    let wds = support::client(WDS).await;
    let id = unique("crd");
    let group = format!("{id}.example.com");
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Cluster",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    testenv::install_crd(&wds, serde_json::from_value(crd).expect("crd"))
        .await
        .expect("install");
    create(
        &wds,
        json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1"}}),
    )
    .await
    .expect("widget");
    create(
        &wds,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": id}, "spec": {"downsync": [{"apiGroup": group}]}}),
    )
    .await
    .expect("policy");
    until("the custom resource in the Binding", 60, || async {
        binding(&wds, &id)
            .await
            .filter(|b| objects(b) == ["widgets/w1"])
    })
    .await;
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(wds.clone())
        .delete(&format!("widgets.{group}"), &DeleteParams::default()).await.expect("delete CRD");
    until("the custom resource to leave with its CRD", 60, || async {
        binding(&wds, &id).await.filter(|b| objects(b).is_empty())
    })
    .await;
    support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    )
    .delete(&id, &DeleteParams::default())
    .await
    .expect("delete policy");
}
