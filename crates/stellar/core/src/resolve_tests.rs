use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn policy(j: Value) -> Policy {
    Policy {
        cluster_selectors: serde_json::from_value(j["clusterSelectors"].clone())
            .unwrap_or_default(),
        clauses: serde_json::from_value(j["downsync"].clone()).unwrap_or_default(),
    }
}

fn obj(group: &str, resource: &str, ns: &str, name: &str) -> ObjRef {
    ObjRef {
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

fn info(rv: &str, l: &[(&str, &str)]) -> ObjInfo {
    ObjInfo {
        uid: format!("uid-{rv}"),
        resource_version: rv.into(),
        labels: labels(l),
    }
}

fn inventory() -> BTreeMap<String, Labels> {
    [
        (
            "cluster1",
            labels(&[("location-group", "edge"), ("region", "east")]),
        ),
        (
            "cluster2",
            labels(&[("location-group", "edge"), ("region", "west")]),
        ),
        ("cluster3", labels(&[("location-group", "core")])),
    ]
    .into_iter()
    .map(|(n, l)| (n.to_string(), l))
    .collect()
}

#[test]
fn destinations_follow_the_live_inventory() {
    let inv = inventory();
    let sel = |j: Value| -> Vec<LabelSelector> { serde_json::from_value(j).expect("selectors") };
    let names = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(destinations(&sel(json!([])), &inv)),
        Vec::<String>::new()
    );
    assert_eq!(
        names(destinations(&sel(json!([{}])), &inv)),
        ["cluster1", "cluster2", "cluster3"]
    );
    assert_eq!(
        names(destinations(
            &sel(json!([{"matchLabels": {"location-group": "edge"}}])),
            &inv
        )),
        ["cluster1", "cluster2"]
    );
    // Selectors OR: matchLabels in one, matchExpressions in another.
    assert_eq!(
        names(destinations(
            &sel(json!([{"matchLabels": {"region": "east"}},
                        {"matchExpressions": [{"key": "location-group", "operator": "In", "values": ["core"]}]}])),
            &inv
        )),
        ["cluster1", "cluster3"]
    );
}

#[test]
fn resolution_and_binding_spec_have_upstreams_shape_and_order() {
    let p = policy(json!({
        "clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
        "downsync": [
            {"objectSelectors": [{"matchLabels": {"app.kubernetes.io/name": "nginx"}}], "wantSingletonReportedState": true},
            {"apiGroup": "", "resources": ["namespaces"], "objectNames": ["nginx"]},
            {"apiGroup": "apps", "objectSelectors": [{"matchLabels": {"app.kubernetes.io/name": "nginx"}}], "createOnly": true, "statusCollectors": ["sc"]},
        ]
    }));
    let mut objects = BTreeMap::new();
    let nginx = [("app.kubernetes.io/name", "nginx")];
    objects.insert(
        obj("apps", "deployments", "nginx", "web"),
        info("12", &nginx),
    );
    objects.insert(
        obj("apps", "deployments", "nginx", "other"),
        info("13", &[]),
    );
    objects.insert(obj("", "namespaces", "", "nginx"), info("5", &[]));
    objects.insert(obj("", "namespaces", "", "kube-system"), info("6", &[]));
    objects.insert(obj("", "configmaps", "nginx", "cfg"), info("7", &nginx));
    let res = resolve(&p, &inventory(), &BTreeMap::new(), &objects);
    let spec = binding_spec(&res);
    assert_eq!(
        spec,
        json!({
            "workload": {
                "clusterScope": [
                    {"group": "", "version": "v1", "resource": "namespaces", "name": "nginx", "resourceVersion": "5"},
                ],
                "namespaceScope": [
                    {"group": "", "version": "v1", "resource": "configmaps", "namespace": "nginx", "name": "cfg",
                     "resourceVersion": "7", "wantSingletonReportedState": true},
                    {"group": "apps", "version": "v1", "resource": "deployments", "namespace": "nginx", "name": "web",
                     "resourceVersion": "12", "createOnly": true, "statusCollectors": ["sc"], "wantSingletonReportedState": true},
                ],
            },
            "destinations": [{"clusterId": "cluster1"}, {"clusterId": "cluster2"}],
        })
    );
    // Nothing selected, no cluster: an empty workload and no destinations.
    let none = resolve(
        &policy(json!({"downsync": [{"objectNames": ["x"]}]})),
        &inventory(),
        &BTreeMap::new(),
        &objects,
    );
    assert_eq!(binding_spec(&none), json!({"workload": {}}));
}

#[test]
fn namespace_selectors_read_the_namespace_index() {
    let p = policy(json!({"downsync": [{"namespaceSelectors": [{"matchLabels": {"team": "a"}}]}]}));
    let mut objects = BTreeMap::new();
    objects.insert(obj("", "configmaps", "a1", "x"), info("1", &[]));
    objects.insert(obj("", "configmaps", "b1", "x"), info("2", &[]));
    objects.insert(obj("", "configmaps", "gone", "x"), info("3", &[]));
    let namespaces: BTreeMap<String, Labels> = [
        ("a1".to_string(), labels(&[("team", "a")])),
        ("b1".to_string(), labels(&[("team", "b")])),
    ]
    .into_iter()
    .collect();
    let res = resolve(&p, &BTreeMap::new(), &namespaces, &objects);
    let names: Vec<_> = res.objects.keys().map(|r| r.namespace.as_str()).collect();
    assert_eq!(names, ["a1"]);
}

#[test]
fn upstreams_exclusions_are_not_watched() {
    let lw = vec!["list".to_string(), "watch".to_string(), "get".to_string()];
    let none: Vec<String> = vec![];
    assert!(watched("apps", "deployments", &lw, &none));
    assert!(watched("", "configmaps", &lw, &none));
    assert!(!watched("", "events", &lw, &none));
    assert!(!watched("", "nodes", &lw, &none));
    assert!(!watched("coordination.k8s.io", "leases", &lw, &none));
    assert!(!watched(
        "control.kubestellar.io",
        "bindingpolicies",
        &lw,
        &none
    ));
    assert!(!watched("", "pods/status", &lw, &none));
    assert!(!watched("", "bindings", &["create".to_string()], &none));
    let only_apps = vec!["apps".to_string()];
    assert!(watched("apps", "deployments", &lw, &only_apps));
    assert!(!watched("", "configmaps", &lw, &only_apps));
    assert!(watched(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        &lw,
        &only_apps
    ));
}

#[test]
fn singleton_return_counts_only_qualified_wecs() {
    let web = obj("apps", "deployments", "n", "web");
    let single = |dests: &[&str], singleton: bool| Resolution {
        destinations: dests.iter().map(|d| d.to_string()).collect(),
        objects: [(
            web.clone(),
            (
                "1".to_string(),
                Modulation {
                    want_singleton_reported_state: singleton,
                    ..Default::default()
                },
            ),
        )]
        .into(),
    };
    // One policy sends it to two WECs without singleton, another to one WEC with singleton:
    // one qualified WEC, no error (issue #3478).
    let mut all: BTreeMap<String, Resolution> = BTreeMap::new();
    all.insert("wide".into(), single(&["cluster1", "cluster2"], false));
    all.insert("one".into(), single(&["cluster1"], true));
    assert_eq!(singleton_error("one", &all), None);
    assert_eq!(singleton_error("wide", &all), None);
    // Singleton to two WECs: an error naming the object.
    all.insert("two".into(), single(&["cluster1", "cluster2"], true));
    let e = singleton_error("two", &all).expect("error");
    assert!(e.contains("apps/deployments n/web: 2 WECs"), "{e}");
    // No WEC at all is wrong too.
    let mut none = BTreeMap::new();
    none.insert("p".to_string(), single(&[], true));
    assert!(
        singleton_error("p", &none)
            .expect("error")
            .contains(": 0 WECs")
    );
    assert_eq!(singleton_error("missing", &none), None);
}
