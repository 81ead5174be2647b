use super::*;
use serde_json::json;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn clause(j: serde_json::Value) -> Clause {
    serde_json::from_value(j).expect("clause")
}

struct Obj {
    group: &'static str,
    resource: &'static str,
    namespace: &'static str,
    name: &'static str,
    labels: BTreeMap<String, String>,
    ns_labels: Option<BTreeMap<String, String>>,
}

impl Obj {
    fn facts(&self) -> ObjectFacts<'_> {
        ObjectFacts {
            group: self.group,
            resource: self.resource,
            namespace: self.namespace,
            name: self.name,
            labels: &self.labels,
            namespace_labels: self.ns_labels.as_ref(),
        }
    }
}

fn deployment() -> Obj {
    Obj {
        group: "apps",
        resource: "deployments",
        namespace: "nginx",
        name: "web",
        labels: labels(&[("app.kubernetes.io/name", "nginx")]),
        ns_labels: Some(labels(&[("env", "prod")])),
    }
}

fn cluster_role() -> Obj {
    Obj {
        group: "rbac.authorization.k8s.io",
        resource: "clusterroles",
        namespace: "",
        name: "reader",
        labels: BTreeMap::new(),
        ns_labels: None,
    }
}

#[test]
fn clause_criteria_follow_upstream_code() {
    let d = deployment();
    let cr = cluster_role();
    // (clause, matches the Deployment, matches the cluster-scoped ClusterRole)
    let cases = [
        (json!({"resources": ["*"]}), true, true),
        (json!({"apiGroup": "apps"}), true, false),
        (json!({"apiGroup": ""}), false, false),
        (
            json!({"apiGroup": "rbac.authorization.k8s.io"}),
            false,
            true,
        ),
        (
            json!({"resources": ["deployments", "services"]}),
            true,
            false,
        ),
        (json!({"resources": ["Deployments"]}), false, false),
        (json!({"namespaces": ["nginx"]}), true, false),
        (json!({"namespaces": ["*"]}), true, true),
        (json!({"namespaces": ["other"]}), false, false),
        (json!({"objectNames": ["web"]}), true, false),
        (json!({"objectNames": ["*"]}), true, true),
        (json!({"objectNames": ["we*"]}), false, false),
        (
            json!({"objectSelectors": [{"matchLabels": {"app.kubernetes.io/name": "nginx"}}]}),
            true,
            false,
        ),
        (
            json!({"objectSelectors": [{"matchLabels": {"x": "y"}}, {}]}),
            true,
            true,
        ),
        (
            json!({"objectSelectors": [{"matchLabels": {"x": "y"}}]}),
            false,
            false,
        ),
        (
            json!({"namespaceSelectors": [{"matchLabels": {"env": "prod"}}]}),
            true,
            false,
        ),
        (
            json!({"namespaceSelectors": [{"matchLabels": {"env": "dev"}}]}),
            false,
            false,
        ),
        // Any `{}` disables the namespace criterion, even for cluster-scoped objects.
        (
            json!({"namespaceSelectors": [{"matchLabels": {"env": "dev"}}, {}]}),
            true,
            true,
        ),
        // Every criterion must hold.
        (
            json!({"apiGroup": "apps", "objectNames": ["other"]}),
            false,
            false,
        ),
        (
            json!({"apiGroup": "apps", "resources": ["deployments"], "namespaces": ["nginx"], "objectNames": ["web"]}),
            true,
            false,
        ),
    ];
    for (c, want_d, want_cr) in cases {
        let cl = clause(c.clone());
        assert_eq!(clause_matches(&cl, &d.facts()), want_d, "deployment vs {c}");
        assert_eq!(
            clause_matches(&cl, &cr.facts()),
            want_cr,
            "clusterrole vs {c}"
        );
    }
}

#[test]
fn a_missing_namespace_fails_a_namespace_selector() {
    let mut d = deployment();
    d.ns_labels = None;
    let cl = clause(json!({"namespaceSelectors": [{"matchLabels": {"env": "prod"}}]}));
    assert!(!clause_matches(&cl, &d.facts()));
    assert!(needs_namespace_labels(&cl));
    assert!(!needs_namespace_labels(&clause(
        json!({"namespaceSelectors": [{}]})
    )));
}

#[test]
fn modulations_of_matching_clauses_merge() {
    let d = deployment();
    let clauses = vec![
        clause(json!({"apiGroup": "apps", "createOnly": true, "statusCollectors": ["a"]})),
        clause(
            json!({"resources": ["deployments"], "wantSingletonReportedState": true, "statusCollectors": ["b", "a"]}),
        ),
        // Does not match: its modulation must not leak in.
        clause(
            json!({"apiGroup": "", "wantMultiWECReportedState": true, "statusCollectors": ["c"]}),
        ),
    ];
    let m = test_object(&clauses, &d.facts()).expect("matched");
    assert!(m.create_only);
    assert!(m.want_singleton_reported_state);
    assert!(!m.want_multi_wec_reported_state);
    assert_eq!(m.status_collectors.iter().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(test_object(&clauses[2..], &d.facts()), None);
    assert_eq!(test_object(&[], &d.facts()), None);
}

#[test]
fn the_multi_wec_flag_has_upstreams_spelling() {
    let c = clause(json!({"resources": ["*"], "wantMultiWECReportedState": true}));
    assert!(c.modulation.want_multi_wec_reported_state);
    let back = serde_json::to_value(&c.modulation).expect("serialise");
    assert_eq!(back, json!({"wantMultiWECReportedState": true}));
}
