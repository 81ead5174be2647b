//! The generated CRD schemas against the real API server: a manifest setting every upstream
//! field is kept as sent (nothing pruned or altered), an object without `spec` is accepted as
//! upstream's schema accepts it, and lists inside embedded Kubernetes types merge by key under
//! server-side apply, so two field managers keep each other's entries.

use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::admission::{Kind, assert_kept};

async fn setup(prefix: &str) -> (kube::Client, TestNamespace) {
    let client = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns)
}

fn api(client: &kube::Client, ns: &str, kind: &str) -> Kind {
    Kind::new(client, ns, "redroid.isning.moe", "v1alpha1", kind)
}

fn env() -> Value {
    json!([
        {"name": "PLAIN", "value": "v"},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": true}}},
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "FROM_FIELD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "FROM_RES", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}
    ])
}

fn affinity() -> Value {
    json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}
        ]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 10,
            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": "redroid"}}}
        }]}
    })
}

fn resources() -> Value {
    json!({
        "limits": {"cpu": "2", "memory": "4Gi"},
        "requests": {"cpu": "500m", "memory": "2Gi"},
        "claims": [{"name": "gpu"}]
    })
}

fn every_instance_field() -> Value {
    json!({
        "index": 7,
        "image": "redroid/redroid:14.0.0-latest",
        "imagePullPolicy": "Always",
        "imagePullSecrets": [{"name": "pull"}, {}],
        "suspend": true,
        "sharedDataPVC": "base",
        "diffDataPVC": "diff",
        "baseMode": false,
        "gpuMode": "guest",
        "gpuNode": "/dev/dri/renderD128",
        "adbPort": 5556,
        "screen": {"width": 1080, "height": 1920, "dpi": 480, "fps": 60},
        "network": {"dns": ["1.1.1.1", "8.8.8.8"], "proxy": {
            "type": "static", "host": "proxy.local", "port": 8080,
            "excludeList": "localhost,127.0.0.1", "pac": "http://pac.local/proxy.pac"
        }},
        "disableKmsgRedirect": true,
        "kmsgToolsImage": "example.com/kmsg-tools:1",
        "extraArgs": ["androidboot.use_memfd=1", "$(EXTRA)"],
        "extraEnv": env(),
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "android", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": affinity(),
        "resources": resources(),
        "service": {"type": "NodePort", "annotations": {"a": "b"}, "nodePort": 30555}
    })
}

fn every_task_field() -> Value {
    json!({
        "instances": [{
            "name": "a",
            "volumeMounts": [{"name": "extra", "mountPath": "/extra", "readOnly": true}],
            "volumes": [{"name": "extra", "configMap": {"name": "cm", "items": [{"key": "k", "path": "p"}]}}]
        }],
        "integrations": [{
            "name": "test",
            "image": "example.com/tests:1",
            "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/run"],
            "args": ["--serial", "$(ADB_SERIAL)"],
            "workingDir": "/work",
            "env": env(),
            "configs": [{"configMapName": "cm", "key": "config.yaml", "mountPath": "/etc/tests/config.yaml"}],
            "volumeMounts": [{"name": "results", "mountPath": "/results"}],
            "resources": {"limits": {"cpu": "1"}},
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                "capabilities": {"drop": ["ALL"]}}
        }],
        "volumes": [
            {"name": "results", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "creds", "secret": {"secretName": "s", "defaultMode": 256}},
            {"name": "proj", "projected": {"sources": [
                {"secret": {"name": "s", "items": [{"key": "k", "path": "k"}]}},
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
            ]}}
        ],
        "imagePullSecrets": [{"name": "pull"}],
        "serviceAccountName": "tests",
        "schedule": "*/30 * * * *",
        "timezone": "Europe/Berlin",
        "suspend": true,
        "startingDeadlineSeconds": 120,
        "successfulJobsHistoryLimit": 5,
        "failedJobsHistoryLimit": 2,
        "backoffLimit": 1,
        "activeDeadlineSeconds": 3600,
        "ttlSecondsAfterFinished": 600,
        "parallelism": 1,
        "suspendInstance": true,
        "wakeInstance": false
    })
}

#[tokio::test]
async fn a_manifest_setting_every_upstream_field_is_kept_as_sent() {
    let (client, ns) = setup("crd-max").await;
    let sent = every_instance_field();
    let inst = api(&client, &ns.name, "RedroidInstance")
        .create("every-field", sent.clone())
        .await
        .expect("maximal instance");
    assert_kept(&sent, &inst.data["spec"]);
    let sent = every_task_field();
    let task = api(&client, &ns.name, "RedroidTask")
        .create("every-field", sent.clone())
        .await
        .expect("maximal task");
    assert_kept(&sent, &task.data["spec"]);
}

#[tokio::test]
async fn objects_without_spec_are_accepted_as_upstream_accepts_them() {
    let (client, ns) = setup("crd-nospec").await;
    for kind in ["RedroidInstance", "RedroidTask"] {
        api(&client, &ns.name, kind)
            .create_without_spec("no-spec")
            .await
            .unwrap_or_else(|e| panic!("{kind} without spec: {e}"));
    }
}

#[tokio::test]
async fn lists_inside_kubernetes_types_merge_by_key_under_server_side_apply() {
    let (client, ns) = setup("crd-ssa").await;
    let api = api(&client, &ns.name, "RedroidInstance");
    let spec = |claim: &str| json!({"index": 1, "resources": {"claims": [{"name": claim}]}});
    api.apply_spec("merged", "gitops", spec("gpu"))
        .await
        .expect("first manager");
    let both = api
        .apply_spec("merged", "person", spec("fpga"))
        .await
        .expect("a second manager adds its own entry without a conflict");
    let claims: Vec<&str> = both.data["spec"]["resources"]["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(claims, ["gpu", "fpga"], "each manager keeps its own entry");
}
