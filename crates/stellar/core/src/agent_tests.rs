use serde_json::json;

use super::*;

#[test]
fn kinds_apply_in_ocms_order() {
    let mut kinds = vec![
        "ValidatingWebhookConfiguration",
        "Deployment",
        "Widget",
        "Service",
        "ConfigMap",
        "CustomResourceDefinition",
        "Namespace",
    ];
    kinds.sort_by_key(|k| apply_rank(k));
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ConfigMap",
            "CustomResourceDefinition",
            "Service",
            "Deployment",
            "Widget",
            "ValidatingWebhookConfiguration"
        ]
    );
}

#[test]
fn contains_ignores_server_defaults_only() {
    let live = json!({"spec": {"replicas": 1, "strategy": {"type": "RollingUpdate"},
                               "template": {"spec": {"containers": [{"name": "c", "image": "x", "imagePullPolicy": "Always"}]}}}});
    let cases = [
        (json!({"spec": {"replicas": 1}}), true),
        (json!({"spec": {"replicas": 1.0}}), true),
        (
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            true,
        ),
        (json!({"spec": {"replicas": 2}}), false),
        (
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "y"}]}}}}),
            false,
        ),
        (
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c"}, {"name": "d"}]}}}}),
            false,
        ),
        (json!({"spec": {"paused": true}}), false),
        (json!({"spec": {"paused": null}}), true),
    ];
    for (want, expect) in cases {
        assert_eq!(contains(&live, &want), expect, "{want}");
    }
}

#[test]
fn update_merges_metadata_and_keeps_the_resource_version() {
    let live = json!({"metadata": {"name": "x", "resourceVersion": "9", "finalizers": ["f"],
        "labels": {"a": "live", "b": "live"}, "annotations": {"deployment.kubernetes.io/revision": "1"},
        "ownerReferences": [{"uid": "1", "kind": "AppliedManifestWork"}]}, "spec": {"v": 1}});
    let manifest = json!({"metadata": {"name": "x", "labels": {"a": "want"},
        "ownerReferences": [{"uid": "2", "kind": "AppliedManifestWork"}]}, "spec": {"v": 2}});
    assert_eq!(
        merge_for_update(&live, &manifest),
        json!({"metadata": {"name": "x", "resourceVersion": "9", "finalizers": ["f"],
            "labels": {"a": "want", "b": "live"}, "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": [{"uid": "1", "kind": "AppliedManifestWork"}, {"uid": "2", "kind": "AppliedManifestWork"}]},
            "spec": {"v": 2}})
    );
}

#[test]
fn prune_deletes_only_what_one_applied_manifest_work_owns() {
    let o = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, u)| (k.to_string(), u.to_string()))
            .collect()
    };
    assert_eq!(
        prune(&o(&[("AppliedManifestWork", "me")]), "me"),
        Prune::Delete
    );
    assert_eq!(
        prune(
            &o(&[
                ("AppliedManifestWork", "me"),
                ("AppliedManifestWork", "other")
            ]),
            "me"
        ),
        Prune::Disown
    );
    assert_eq!(
        prune(
            &o(&[("AppliedManifestWork", "me"), ("ReplicaSet", "rs")]),
            "me"
        ),
        Prune::Delete
    );
    assert_eq!(
        prune(&o(&[("AppliedManifestWork", "me-")]), "me"),
        Prune::Disown
    );
    assert_eq!(
        prune(&o(&[("AppliedManifestWork", "other")]), "me"),
        Prune::Leave
    );
    assert_eq!(prune(&[], "me"), Prune::Leave);
}

#[test]
fn work_status_names_and_skipped_kinds() {
    assert_eq!(
        work_status_name("u1", "apps", "v1", "Deployment", "ns", "web"),
        "u1-appsv1-deployment-ns-web"
    );
    assert_eq!(
        work_status_name("u1", "", "v1", "Namespace", "", "ns"),
        "u1-v1-namespace--ns"
    );
    assert_eq!(
        work_status_name("u", "", "v1", "X", "n", &"a".repeat(300)).len(),
        253
    );
    assert!(status_skipped("", "configmaps"));
    assert!(status_skipped("rbac.authorization.k8s.io", "clusterroles"));
    assert!(!status_skipped("apps", "deployments"));
}
