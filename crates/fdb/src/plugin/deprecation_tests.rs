use serde_json::json;

use super::*;

fn cluster(spec: serde_json::Value) -> FoundationDBCluster {
    serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
        "metadata": {"name": "c1"}, "spec": spec,
    }))
    .expect("cluster")
}

const CHANGES: Options = Options {
    use_future_defaults: false,
    only_show_changes: true,
};

#[test]
fn only_changes_carries_crash_loop_into_the_main_containers_entry() {
    let c = cluster(json!({"version": "7.1.57", "buggify": {
    "crashLoop": ["storage-1", "log-1"],
    "crashLoopContainers": [
        {"containerName": "foundationdb-kubernetes-sidecar", "targets": ["storage-2"]},
        {"containerName": "foundationdb", "targets": ["log-1"]},
    ]}}));
    let spec = normalize(&c, CHANGES);
    assert_eq!(
        spec["buggify"]["crashLoopContainers"],
        json!([
            {"containerName": "foundationdb-kubernetes-sidecar", "targets": ["storage-2"]},
            {"containerName": "foundationdb", "targets": ["log-1", "storage-1"]},
        ])
    );
    assert_eq!(
        spec["buggify"]["crashLoop"],
        json!(["storage-1", "log-1"]),
        "kept, as upstream"
    );
    // Nothing else is written out.
    assert!(spec.get("processes").is_none_or(|p| p == &json!({})));
}

#[test]
fn a_spec_without_deprecated_fields_has_no_deprecation() {
    let c = cluster(json!({"version": "7.1.57", "buggify": {"noSchedule": ["storage-1"]}}));
    let f = report(&c, CHANGES, false);
    assert_eq!(
        f,
        Finding {
            text: "Cluster c1 has no deprecation\n".into(),
            deprecated: false
        }
    );
    assert_eq!(report(&c, CHANGES, true).text, "", "no spec printed");
}

#[test]
fn a_crash_loop_is_reported_as_a_diff() {
    let c = cluster(json!({"version": "7.1.57", "buggify": {"crashLoop": ["storage-1"]}}));
    let f = report(&c, CHANGES, false);
    assert!(f.deprecated);
    assert!(
        f.text.starts_with(
            "Cluster c1 has deprecations\n  buggify:\n    crashLoop:\n    - storage-1\n\
             +   crashLoopContainers:\n+   - containerName: foundationdb\n+     targets:\n\
             +     - storage-1\n"
        ),
        "{}",
        f.text
    );
    assert!(!f.text.lines().any(|l| l.starts_with('-')), "{}", f.text);
    let spec = report(&c, CHANGES, true);
    assert!(spec.deprecated);
    assert!(spec.text.starts_with("---\n"), "{}", spec.text);
    assert!(spec.text.contains("buggify:\n"), "{}", spec.text);
    assert!(
        spec.text.contains("\n  crashLoopContainers:\n"),
        "{}",
        spec.text
    );
}

#[test]
fn all_defaults_fill_in_resources_and_image_configs() {
    let c = cluster(json!({"version": "7.1.57", "processes": {
        "storage": {"podTemplate": {"spec": {"containers": [
            {"name": "foundationdb", "resources": {"requests": {"cpu": "2"}}}]}}}}}));
    let opts = Options {
        use_future_defaults: false,
        only_show_changes: false,
    };
    let spec = normalize(&c, opts);
    let general = &spec["processes"]["general"]["podTemplate"]["spec"];
    assert_eq!(
        general["containers"],
        json!([
            {"name": "foundationdb", "resources": {
                "requests": {"cpu": "1", "memory": "8Gi"},
                "limits": {"cpu": "1", "memory": "8Gi"}}},
            {"name": "foundationdb-kubernetes-sidecar", "resources": {
                "requests": {"cpu": "100m", "memory": "256Mi"},
                "limits": {"cpu": "100m", "memory": "256Mi"}}},
        ])
    );
    assert!(general.get("initContainers").is_none(), "unified image");
    let storage = &spec["processes"]["storage"]["podTemplate"]["spec"]["containers"][0];
    assert_eq!(
        storage["resources"],
        json!({"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}),
        "set requests are kept, limits follow them"
    );
    assert_eq!(
        spec["mainContainer"]["imageConfigs"],
        json!([{"baseImage": "foundationdb/fdb-kubernetes-monitor"}])
    );
    assert!(spec.get("imageType").is_none(), "not a future default");
}

#[test]
fn split_image_defaults_add_the_init_container_and_sidecar_image() {
    let c = cluster(json!({"version": "7.1.57", "imageType": "split",
        "mainContainer": {"imageConfigs": [{"baseImage": "foundationdb/foundationdb"}]}}));
    let spec = normalize(
        &c,
        Options {
            use_future_defaults: true,
            only_show_changes: false,
        },
    );
    assert_eq!(spec["imageType"], "split", "set, kept");
    let general = &spec["processes"]["general"]["podTemplate"]["spec"];
    assert_eq!(
        general["initContainers"][0]["name"],
        "foundationdb-kubernetes-init"
    );
    assert_eq!(
        spec["mainContainer"]["imageConfigs"],
        json!([{"baseImage": "foundationdb/foundationdb"}]),
        "present exactly: not added again"
    );
    assert_eq!(
        spec["sidecarContainer"]["imageConfigs"],
        json!([{"baseImage": "foundationdb/foundationdb-kubernetes-sidecar", "tagSuffix": "-1"}])
    );
    assert_eq!(spec["automationOptions"]["useLocalitiesForExclusion"], true);
    assert_eq!(spec["routing"]["useDNSInClusterFile"], true);
}

#[test]
fn future_defaults_set_only_unset_fields() {
    let c = cluster(json!({"version": "7.1.57",
        "automationOptions": {"useLocalitiesForExclusion": false}}));
    let spec = normalize(
        &c,
        Options {
            use_future_defaults: true,
            only_show_changes: false,
        },
    );
    assert_eq!(spec["imageType"], "unified");
    assert_eq!(
        spec["automationOptions"]["useLocalitiesForExclusion"],
        false
    );
    assert_eq!(spec["routing"]["useDNSInClusterFile"], true);
}

#[test]
fn minimal_yaml_sorts_keys_and_drops_empty_maps() {
    let v = json!({"b": {"c": {}}, "a": [{}], "d": {"e": 1, "f": {}}});
    assert_eq!(minimal_yaml(&v), "a:\n- {}\nd:\n  e: 1\n");
}

#[test]
fn line_diff_marks_changes_and_shortens_long_shared_runs() {
    let a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
    let b = "1\n2\n3\n4\n5\n6\n7\nx\n8\n9\n";
    assert_eq!(
        line_diff(a, b),
        "  ... // 4 identical lines\n  5\n  6\n  7\n+ x\n  8\n  9\n"
    );
    assert_eq!(line_diff("a\nb\n", "a\nc\n"), "  a\n- b\n+ c\n");
}
