//! The transport over the real WDS and ITS: ManifestWorks per object per destination with
//! upstream's names and labels, built-in transforms and CustomTransforms, template expansion
//! with property precedence and errors that keep the previous copy, no rewrite on a status
//! write, and cleanup when destinations, objects or the policy go.

mod support;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use stellar::api::Binding;
use stellar::ocm::ManifestWork;
use support::{ITS, WDS, create, unique, until};

async fn works(its: &kube::Client, binding: &str) -> Vec<ManifestWork> {
    let lp = ListParams::default().labels(&format!(
        "transport.kubestellar.io/originOwnerReferenceBindingKey={binding},transport.kubestellar.io/originWdsName={WDS}"
    ));
    Api::<ManifestWork>::all(its.clone())
        .list(&lp)
        .await
        .expect("list ManifestWorks")
        .items
}

fn find<'a>(ws: &'a [ManifestWork], ns: &str, kind: &str) -> Option<&'a ManifestWork> {
    ws.iter().find(|w| {
        w.namespace().as_deref() == Some(ns)
            && w.spec.workload.manifests[0]["kind"].as_str() == Some(kind)
    })
}

#[tokio::test]
async fn manifest_works_follow_bindings_with_transforms_and_templates() {
    support::start_controllers();
    let wds = support::client(WDS).await;
    let its = support::client(ITS).await;
    let id = unique("tr");
    let sel = format!("test.flotilla.dev/{id}");
    let (a, b) = (format!("{id}-a"), format!("{id}-b"));

    // Two WECs; `a` has a region label overridden by its property ConfigMap, `b` none yet.
    create(
        &its,
        json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": a, "labels": {sel.clone(): "yes", "region": "label-east"}},
        "spec": {"hubAcceptsClient": true}}),
    )
    .await
    .expect("mc a");
    create(
        &its,
        json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": b, "labels": {sel.clone(): "yes"}},
        "spec": {"hubAcceptsClient": true}}),
    )
    .await
    .expect("mc b");
    until("the customization-properties namespace", 30, || async {
        support::dynamic(&its, "", "v1", "Namespace", None)
            .get_opt("customization-properties")
            .await
            .expect("get")
            .map(|_| ())
    })
    .await;
    create(&its, json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": a, "namespace": "customization-properties"}, "data": {"region": "east"}}))
        .await.expect("properties");

    create(
        &wds,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": id}}),
    )
    .await
    .expect("ns");
    create(
        &wds,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": id, "labels": {"app": id, "drop-me": "x"},
                     "annotations": {"control.kubestellar.io/expand-templates": "true"}},
        "data": {"where": "{{ .clusterName }} in {{ .region }}"}}),
    )
    .await
    .expect("cm");
    create(
        &wds,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": id, "labels": {"app": id}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
    )
    .await
    .expect("deployment");
    create(&wds, json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
        "metadata": {"name": id},
        "spec": {"apiGroup": "", "resource": "configmaps", "remove": ["$.metadata.labels[\"drop-me\"]", "$"]}}))
        .await.expect("custom transform");
    create(&wds, json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": id},
        "spec": {"clusterSelectors": [{"matchLabels": {sel.clone(): "yes"}}],
                 "downsync": [{"objectSelectors": [{"matchLabels": {"app": id}}], "createOnly": true}]}}))
        .await.expect("policy");

    // `a` gets both objects, expanded with the ConfigMap's region; `b` only the Deployment,
    // and the Binding reports the template error for `b`.
    let ws = until(
        "ManifestWorks in a, the Deployment's in b, and b's error",
        60,
        || async {
            let ws = works(&its, &id).await;
            let bd = Api::<Binding>::all(wds.clone())
                .get_opt(&id)
                .await
                .expect("binding")?;
            let errs = bd.status.map(|s| s.errors).unwrap_or_default();
            (ws.len() == 3
                && find(&ws, &b, "Deployment").is_some()
                && errs
                    .iter()
                    .any(|e| e.contains(&b) && e.contains("\"region\"")))
            .then_some(ws)
        },
    )
    .await;
    let cm = find(&ws, &a, "ConfigMap").expect("cm in a");
    let bd = Api::<Binding>::all(wds.clone())
        .get(&id)
        .await
        .expect("binding");
    let obj_uid = support::dynamic(&wds, "", "v1", "ConfigMap", Some(&id))
        .get("web")
        .await
        .expect("cm")
        .uid()
        .expect("uid");
    assert_eq!(
        cm.name_any(),
        format!("{}-{WDS}-{obj_uid}", bd.uid().expect("uid"))
    );
    let m = &cm.spec.workload.manifests[0];
    assert_eq!(m["data"]["where"], json!(format!("{a} in east")));
    assert_eq!(
        m["metadata"]["labels"],
        json!({"app": id}),
        "CustomTransform removal"
    );
    assert!(m["metadata"].get("uid").is_none() && m["metadata"].get("resourceVersion").is_none());
    assert_eq!(
        cm.spec.manifest_configs[0]
            .update_strategy
            .as_ref()
            .map(|u| format!("{:?}", u.type_))
            .as_deref(),
        Some("CreateOnly")
    );
    let ct = until("the CustomTransform's status", 30, || async {
        let ct = support::dynamic(
            &wds,
            "control.kubestellar.io",
            "v1alpha1",
            "CustomTransform",
            None,
        )
        .get(&id)
        .await
        .expect("ct");
        (!ct.data["status"]["errors"].is_null()).then_some(ct)
    })
    .await;
    assert_eq!(
        ct.data["status"]["errors"],
        json!(["Error in spec.remove[1]: the path identifies the whole object"])
    );
    // Fixed: the error goes.
    let cts = support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "CustomTransform",
        None,
    );
    cts.patch(
        &id,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"remove": ["$.metadata.labels[\"drop-me\"]"]}})),
    )
    .await
    .expect("fix the CustomTransform");
    until("the CustomTransform's errors cleared", 30, || async {
        let ct = cts.get(&id).await.expect("ct");
        (ct.data["status"]["errors"].is_null()
            && ct.data["status"]["observedGeneration"] == json!(2))
        .then_some(())
    })
    .await;

    // A status write on the WDS Deployment changes the Binding but rewrites no ManifestWork.
    let dep = find(&ws, &a, "Deployment")
        .expect("deployment in a")
        .clone();
    let deps = support::dynamic(&wds, "apps", "v1", "Deployment", Some(&id));
    deps.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"replicas": 7}})),
    )
    .await
    .expect("status");
    let rv = deps
        .get("web")
        .await
        .expect("dep")
        .resource_version()
        .expect("rv");
    until(
        "the Binding to carry the new resourceVersion",
        30,
        || async {
            let bd = Api::<Binding>::all(wds.clone())
                .get(&id)
                .await
                .expect("binding");
            bd.spec
                .workload
                .namespace_scope
                .iter()
                .any(|o| o.object.resource == "deployments" && o.object.resource_version == rv)
                .then_some(())
        },
    )
    .await;
    // The next transport pass has run once the Binding's observedGeneration caught up.
    until("the transport to observe it", 30, || async {
        let bd = Api::<Binding>::all(wds.clone())
            .get(&id)
            .await
            .expect("binding");
        (bd.status.map(|s| s.observed_generation) == bd.metadata.generation).then_some(())
    })
    .await;
    let again = works(&its, &id).await;
    assert_eq!(
        find(&again, &a, "Deployment")
            .expect("dep")
            .resource_version(),
        dep.resource_version(),
        "no rewrite on a status write"
    );

    // The missing property arrives: b gets its copy and the error clears.
    let mcs = support::dynamic(
        &its,
        "cluster.open-cluster-management.io",
        "v1",
        "ManagedCluster",
        None,
    );
    mcs.patch(
        &b,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"region": "west"}}})),
    )
    .await
    .expect("label b");
    until("b's expanded copy and no errors", 60, || async {
        let ws = works(&its, &id).await;
        let ok = find(&ws, &b, "ConfigMap").is_some_and(|w| {
            w.spec.workload.manifests[0]["data"]["where"] == json!(format!("{b} in west"))
        });
        let bd = Api::<Binding>::all(wds.clone())
            .get(&id)
            .await
            .expect("binding");
        (ok && bd.status.is_some_and(|s| s.errors.is_empty())).then_some(())
    })
    .await;

    // A property ConfigMap change applies live (and wins over the label).
    let props = support::dynamic(
        &its,
        "",
        "v1",
        "ConfigMap",
        Some("customization-properties"),
    );
    props
        .patch(
            &a,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"region": "north"}})),
        )
        .await
        .expect("edit properties");
    until("a's copy re-expanded", 60, || async {
        let ws = works(&its, &id).await;
        find(&ws, &a, "ConfigMap")
            .is_some_and(|w| {
                w.spec.workload.manifests[0]["data"]["where"] == json!(format!("{a} in north"))
            })
            .then_some(())
    })
    .await;

    // A broken template: errors reported, previous copies stay.
    let cms = support::dynamic(&wds, "", "v1", "ConfigMap", Some(&id));
    cms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"where": "{{ .nope }}"}})),
    )
    .await
    .expect("break");
    until("the error for both WECs", 60, || async {
        let bd = Api::<Binding>::all(wds.clone())
            .get(&id)
            .await
            .expect("binding");
        let errs = bd.status.map(|s| s.errors).unwrap_or_default();
        (errs.len() == 2 && errs.iter().all(|e| e.contains("\"nope\""))).then_some(())
    })
    .await;
    let ws = works(&its, &id).await;
    assert_eq!(
        find(&ws, &a, "ConfigMap")
            .expect("kept")
            .spec
            .workload
            .manifests[0]["data"]["where"],
        json!(format!("{a} in north"))
    );
    let policy = Api::<stellar::api::BindingPolicy>::all(wds.clone());
    until("the error on the BindingPolicy", 30, || async {
        let p = policy.get(&id).await.expect("policy");
        p.status
            .is_some_and(|s| s.errors.iter().any(|e| e.contains("\"nope\"")))
            .then_some(())
    })
    .await;

    // b stops matching: its ManifestWorks go, a's stay.
    mcs.patch(
        &b,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {sel.clone(): "no"}}})),
    )
    .await
    .expect("unlabel b");
    until("b's ManifestWorks to go", 60, || async {
        let ws = works(&its, &id).await;
        (ws.len() == 2
            && ws
                .iter()
                .all(|w| w.namespace().as_deref() == Some(a.as_str())))
        .then_some(())
    })
    .await;

    // The policy goes: every ManifestWork goes.
    policy
        .delete(&id, &DeleteParams::default())
        .await
        .expect("delete policy");
    until("every ManifestWork to go", 60, || async {
        works(&its, &id).await.is_empty().then_some(())
    })
    .await;

    support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "CustomTransform",
        None,
    )
    .delete(&id, &DeleteParams::default())
    .await
    .expect("ct");
    support::dynamic(&wds, "", "v1", "Namespace", None)
        .delete(&id, &DeleteParams::default())
        .await
        .expect("ns");
    for n in [&a, &b] {
        mcs.delete(n, &DeleteParams::default()).await.expect("mc");
    }
}
