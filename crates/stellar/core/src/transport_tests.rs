use super::*;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn clean_strips_metadata_status_and_last_applied() {
    let mut o = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "n", "uid": "u", "resourceVersion": "7",
                     "generation": 3, "managedFields": [], "finalizers": ["f"],
                     "ownerReferences": [], "generateName": "w-", "selfLink": "x",
                     "creationTimestamp": "2020-01-01T00:00:00Z",
                     "labels": {"app": "web"},
                     "annotations": {LAST_APPLIED: "{}", "keep": "me"}},
        "spec": {"replicas": 2}, "status": {"replicas": 2}});
    clean(&mut o);
    assert_eq!(
        o,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "n",
                            "creationTimestamp": "2020-01-01T00:00:00Z",
                            "labels": {"app": "web"}, "annotations": {"keep": "me"}},
               "spec": {"replicas": 2}})
    );
}

#[test]
fn services_and_jobs_are_cleaned_as_upstream() {
    let cases = [
        (
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                   "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ipFamilies": ["IPv4"],
                            "sessionAffinity": "None", "ports": [{"port": 80, "nodePort": 30001}]}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                   "spec": {"ports": [{"port": 80}]}}),
        ),
        (
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "h", "annotations": {"control.kubestellar.io/preserve": "nodeport"}},
                   "spec": {"clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 80, "nodePort": 30001}]}}),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "h", "annotations": {"control.kubestellar.io/preserve": "nodeport"}},
                   "spec": {"clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 80, "nodePort": 30001}]}}),
        ),
        (
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": "j", "labels": {"controller-uid": "x", "a": "b"},
                                "annotations": {"batch.kubernetes.io/job-tracking": ""}},
                   "spec": {"selector": {}, "suspend": false,
                            "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "x"}}}}}),
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": "j", "labels": {"a": "b"}, "annotations": {}},
                   "spec": {"template": {"metadata": {"labels": {}}}}}),
        ),
    ];
    for (mut input, want) in cases {
        clean(&mut input);
        assert_eq!(input, want);
    }
}

#[test]
fn custom_transform_paths_are_upstreams_subset() {
    let ok = [
        ("$.metadata.labels", vec!["metadata", "labels"]),
        ("$.spec[\"a.b/c\"]", vec!["spec", "a.b/c"]),
        ("$[\"x\\\"y\"]", vec!["x\"y"]),
    ];
    for (p, want) in ok {
        assert_eq!(parse_path(p).expect(p), want, "{p}");
    }
    for bad in [
        "$", "metadata", "$.a[*]", "$.a[0]", "$..a", "$.1a", "$.a b", "$[\"x",
    ] {
        assert!(parse_path(bad).is_err(), "{bad} should be rejected");
    }
    assert_eq!(
        remove_errors(&["$.ok".into(), "$".into()]),
        ["Error in spec.remove[1]: the path identifies the whole object"]
    );
}

#[test]
fn remove_path_removes_only_through_maps() {
    let mut o = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "list": [{"x": 1}]});
    remove_path(
        &mut o,
        &parse_path("$.metadata.labels[\"a\"]").expect("path"),
    );
    remove_path(&mut o, &parse_path("$.list.x").expect("path"));
    remove_path(&mut o, &parse_path("$.missing.deep").expect("path"));
    assert_eq!(
        o,
        json!({"metadata": {"labels": {"b": "2"}}, "list": [{"x": 1}]})
    );
}

#[test]
fn properties_precedence_and_identifier_keys() {
    let p = properties(
        "wec1",
        &map(&[
            ("region", "label"),
            ("zone", "label"),
            ("topology.k8s.io/zone", "x"),
        ]),
        &map(&[("region", "annotation"), ("clusterName", "renamed")]),
        &map(&[("region", "configmap"), ("1bad", "x"), ("if", "x")]),
    );
    assert_eq!(
        p,
        map(&[
            ("clusterName", "renamed"),
            ("region", "configmap"),
            ("zone", "label")
        ])
    );
}

#[test]
fn template_expansion() {
    let props = map(&[("clusterName", "wec1"), ("region", "east")]);
    let cases: [(&str, Result<&str, &str>); 6] = [
        ("plain", Ok("plain")),
        (
            "cluster {{ .clusterName }} in {{.region}}",
            Ok("cluster wec1 in east"),
        ),
        ("a  {{- .region -}}  b", Ok("aeastb")),
        ("{{ .nope }}", Err("map has no entry for key \"nope\"")),
        ("{{ printf \"%s\" .region }}", Err("unsupported action")),
        ("{{ .region", Err("unclosed action")),
    ];
    for (input, want) in cases {
        match (expand_string(input, &props), want) {
            (Ok(got), Ok(w)) => assert_eq!(got, w, "{input}"),
            (Err(got), Err(w)) => assert!(got.contains(w), "{input}: {got}"),
            (got, w) => panic!("{input}: got {got:?}, want {w:?}"),
        }
    }
    let obj = json!({"metadata": {"name": "x", "labels": {"{{ .k }}": "{{ .region }}"}}, "n": 1,
                     "l": ["{{ .clusterName }}"]});
    assert_eq!(
        expand(&obj, &props).expect("expands"),
        json!({"metadata": {"name": "x", "labels": {"{{ .k }}": "east"}}, "n": 1, "l": ["wec1"]})
    );
    let errs = expand(&json!({"a": "{{ .x }}", "b": "{{ .y }}"}), &props).expect_err("errors");
    assert_eq!(errs.len(), 2);
}

#[test]
fn manifest_work_shape_and_hash() {
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}});
    assert_eq!(
        manifest_work_name("b-uid", "wds1", "o-uid"),
        "b-uid-wds1-o-uid"
    );
    let plain = manifest_work_spec(&obj, "", "configmaps", false);
    assert_eq!(plain, json!({"workload": {"manifests": [obj]}}));
    let co = manifest_work_spec(&obj, "", "configmaps", true);
    assert_eq!(
        co["manifestConfigs"],
        json!([{"resourceIdentifier": {"group": "", "resource": "configmaps", "namespace": "n", "name": "c"},
                "updateStrategy": {"type": "CreateOnly"}}])
    );
    assert_eq!(content_hash(&plain), content_hash(&plain.clone()));
    assert_ne!(content_hash(&plain), content_hash(&co));
}
