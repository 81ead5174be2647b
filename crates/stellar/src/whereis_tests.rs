use serde_json::json;

use super::*;

fn binding() -> Binding {
    serde_json::from_value(json!({
        "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "Binding",
        "metadata": {"name": "bp"},
        "spec": {
            "workload": {
                "clusterScope": [{"group": "", "version": "v1", "resource": "namespaces", "name": "demo", "resourceVersion": "1"}],
                "namespaceScope": [{"group": "apps", "version": "v1", "resource": "deployments", "namespace": "demo", "name": "web", "resourceVersion": "2"}]
            },
            "destinations": [{"clusterId": "wec1"}, {"clusterId": "wec2"}]
        }
    }))
    .expect("binding")
}

fn work(
    wec: &str,
    name: &str,
    manifests: serde_json::Value,
    status: serde_json::Value,
) -> ManifestWork {
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": wec,
                     "labels": {names::BINDING_LABEL: "bp", names::WDS_LABEL: "wds1"}},
        "spec": {"workload": {"manifests": manifests}},
        "status": status,
    }))
    .expect("work")
}

fn cond(t: &str, s: &str) -> serde_json::Value {
    json!({"type": t, "status": s, "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

#[test]
fn each_object_per_destination_with_its_work_and_conditions() {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}});
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "demo"}});
    let works = [
        // wec1: both objects in one wrapped ManifestWork; per-manifest status reported.
        work("wec1", "bp-wds1-0", json!([ns, dep]), json!({
            "conditions": [cond("Applied", "True")],
            "resourceStatus": {"manifests": [
                {"resourceMeta": {"ordinal": 0, "group": "", "version": "v1", "kind": "Namespace", "resource": "namespaces", "name": "demo", "namespace": ""},
                 "conditions": [cond("Applied", "True"), cond("Available", "True")]},
                {"resourceMeta": {"ordinal": 1, "group": "apps", "version": "v1", "kind": "Deployment", "resource": "deployments", "name": "web", "namespace": "demo"},
                 "conditions": [cond("Applied", "False"), cond("Available", "False")]}
            ]}
        })),
        // wec2: only the namespace so far, no status yet.
        work("wec2", "uid-ns", json!([ns]), json!({})),
        // A leftover of a Binding that is gone.
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "old", "namespace": "wec2", "labels": {names::BINDING_LABEL: "gone"}},
            "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "demo"}}]}},
        })).expect("work"),
    ];
    let got: Vec<(String, String, String, String, String, String)> = rows(&[binding()], &works)
        .into_iter()
        .map(|r| {
            (
                format!("{} {}", r.namespace, r.object),
                r.binding,
                r.wec,
                r.work,
                r.applied,
                r.available,
            )
        })
        .collect();
    let row = |o: &str, b: &str, w: &str, m: &str, a: &str, v: &str| {
        (
            o.to_owned(),
            b.to_owned(),
            w.to_owned(),
            m.to_owned(),
            a.to_owned(),
            v.to_owned(),
        )
    };
    assert_eq!(
        got,
        [
            row(
                "- namespaces/demo",
                "bp",
                "wec1",
                "bp-wds1-0",
                "True",
                "True"
            ),
            row(
                "- namespaces/demo",
                "bp",
                "wec2",
                "uid-ns",
                "Unknown",
                "Unknown"
            ),
            row(
                "demo configmaps/c",
                "gone",
                "wec2",
                "old",
                "Unknown",
                "Unknown"
            ),
            row(
                "demo deployments.apps/web",
                "bp",
                "wec1",
                "bp-wds1-0",
                "False",
                "False"
            ),
            row(
                "demo deployments.apps/web",
                "bp",
                "wec2",
                "-",
                "Pending",
                "Pending"
            ),
        ]
    );
    let t = table(&rows(&[binding()], &works));
    assert!(t.starts_with("NAMESPACE"), "{t}");
    assert_eq!(t.lines().count(), 6);
}

#[test]
fn display_plurals() {
    for (kind, want) in [
        ("ConfigMap", "configmaps"),
        ("NetworkPolicy", "networkpolicies"),
        ("Ingress", "ingresses"),
        ("Gateway", "gateways"),
    ] {
        assert_eq!(plural(kind), want);
    }
}
