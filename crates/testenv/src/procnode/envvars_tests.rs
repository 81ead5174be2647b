//! Table tests of environment resolution.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use serde_json::json;

use super::*;

#[derive(Default)]
struct Fake {
    cms: HashMap<String, Arc<ConfigMap>>,
    secrets: HashMap<String, Arc<Secret>>,
}

impl Objects for Fake {
    fn config_map(&self, name: &str) -> Option<Arc<ConfigMap>> {
        self.cms.get(name).cloned()
    }
    fn secret(&self, name: &str) -> Option<Arc<Secret>> {
        self.secrets.get(name).cloned()
    }
}

fn fake() -> Fake {
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "cfg"}, "data": {"mode": "fast", "level": "3"}}),
    )
    .expect("cm");
    // "czNjcjN0" is base64 of "s3cr3t".
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "creds"}, "data": {"password": "czNjcjN0"}}),
    )
    .expect("secret");
    Fake {
        cms: HashMap::from([("cfg".into(), Arc::new(cm))]),
        secrets: HashMap::from([("creds".into(), Arc::new(secret))]),
    }
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "shop", "uid": "u-1",
                     "labels": {"app": "web"}, "annotations": {"team": "a"}},
        "spec": {"nodeName": "proc-node-1", "serviceAccountName": "web", "containers": [{"name": "c"}]},
    }))
    .expect("pod")
}

fn container(env: serde_json::Value) -> Container {
    serde_json::from_value(json!({"name": "c", "env": env, "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}})).expect("container")
}

fn run(env: serde_json::Value) -> Result<BTreeMap<String, String>, String> {
    let p = pod();
    let ctx = PodContext {
        pod: &p,
        pod_ip: "127.2.1.7",
        host_ip: "127.2.255.254",
        node_cpu: 2.0,
        node_memory: 1024.0,
    };
    resolve(
        &container(env),
        &ctx,
        &fake(),
        &service_env("127.2.255.254"),
    )
}

#[test]
fn values_and_sources_resolve_like_the_kubelet() {
    let env = run(json!([
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['team']"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
        {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {"name": "URL", "value": "http://$(IP):8080/$(NAME)?$(UNDEFINED)&$$(NAME)"},
        {"name": "API", "value": "$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
        {"name": "LATER", "value": "$(DEFINED_AFTER)"},
        {"name": "DEFINED_AFTER", "value": "x"},
    ]))
    .expect("resolves");
    let want = [
        ("NAME", "web-0"),
        ("NS", "shop"),
        ("IP", "127.2.1.7"),
        ("NODE", "proc-node-1"),
        ("APP", "web"),
        ("TEAM", "a"),
        ("SA", "web"),
        ("MODE", "fast"),
        ("PASSWORD", "s3cr3t"),
        ("MEM", "64"),
        ("CPU", "250"),
        ("CPU_LIMIT", "2"),
        ("URL", "http://127.2.1.7:8080/web-0?$(UNDEFINED)&$(NAME)"),
        ("API", "127.2.255.254:443"),
        ("LATER", "$(DEFINED_AFTER)"),
        ("KUBERNETES_SERVICE_HOST", "127.2.255.254"),
        ("KUBERNETES_PORT_443_TCP", "tcp://127.2.255.254:443"),
    ];
    for (k, v) in want {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
    }
}

#[test]
fn env_from_is_overridden_by_env_and_prefixed() {
    let p = pod();
    let ctx = PodContext {
        pod: &p,
        pod_ip: "127.2.1.7",
        host_ip: "127.2.255.254",
        node_cpu: 2.0,
        node_memory: 1024.0,
    };
    let c: Container = serde_json::from_value(json!({
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "creds"}, "prefix": "DB_"},
                    {"configMapRef": {"name": "absent", "optional": true}}],
        "env": [{"name": "mode", "value": "slow"}, {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}],
    }))
    .expect("container");
    let env = resolve(&c, &ctx, &fake(), &service_env("127.2.255.254")).expect("resolves");
    assert_eq!(env["mode"], "slow");
    assert_eq!(env["level"], "3");
    assert_eq!(env["DB_password"], "s3cr3t");
    assert_eq!(
        env["KUBERNETES_SERVICE_PORT"], "6443",
        "the container's own value wins"
    );
}

#[test]
fn missing_sources_fail_with_the_kubelets_message_unless_optional() {
    let cases = [
        (
            json!([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]),
            Err("secret \"nope\" not found".to_string()),
        ),
        (
            json!([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]),
            Err("couldn't find key k in ConfigMap shop/cfg".to_string()),
        ),
        (
            json!([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}]),
            Err("couldn't find key k in Secret shop/creds".to_string()),
        ),
        (
            json!([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}}]),
            Ok(None),
        ),
        (
            json!([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k", "optional": true}}}]),
            Ok(None),
        ),
    ];
    for (env, want) in cases {
        let got = run(env.clone()).map(|e| e.get("X").cloned());
        assert_eq!(got, want, "{env}");
    }
}

#[test]
fn command_and_args_expand_against_the_environment() {
    let env = BTreeMap::from([("PORT".to_string(), "8080".to_string())]);
    let words = [
        "serve".to_string(),
        "--port=$(PORT)".into(),
        "$$(PORT)".into(),
        "$(NOPE)".into(),
    ];
    assert_eq!(
        expand_command(&words, &env),
        ["serve", "--port=8080", "$(PORT)", "$(NOPE)"]
    );
}
