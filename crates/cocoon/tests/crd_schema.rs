//! The generated CRD schemas against the real API server: a manifest setting every upstream
//! field is kept as sent (nothing pruned or altered), an object without `spec` is accepted as
//! upstream's schema accepts it, and lists inside embedded Kubernetes types merge by key under
//! server-side apply, so two field managers keep each other's entries.

use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::admission::{Kind, assert_kept};

const GROUP: &str = "cocoonset.cocoonstack.io";

async fn setup(prefix: &str) -> (kube::Client, TestNamespace) {
    let client = testenv::client().await;
    for crd in cocoon::crd::crds() {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns)
}

fn api(client: &kube::Client, ns: &str, kind: &str) -> Kind {
    Kind::new(client, ns, GROUP, "v1", kind)
}

fn resources() -> Value {
    json!({"limits": {"cpu": "4", "memory": "8Gi"}, "requests": {"cpu": "2"}, "claims": [{"name": "gpu"}]})
}

fn every_set_field() -> Value {
    json!({
        "suspend": false,
        "nodePool": "gpu-pool",
        "nodeName": "kwok-node-1",
        "snapshotPolicy": "main-only",
        "hibernatePolicy": "retain",
        "snapshotCompatibilityClass": "intel-icelake",
        "agent": {
            "image": "ubuntu-dev-base:24.04",
            "replicas": 2,
            "mode": "run",
            "os": "android",
            "backend": "firecracker",
            "connType": "adb",
            "network": "bridge0",
            "probePort": 5555,
            "forcePull": true,
            "noDirectIO": true,
            "storage": "20Gi",
            "serviceAccountName": "agents",
            "resources": resources(),
            "envFrom": [
                {"prefix": "APP_", "configMapRef": {"name": "app", "optional": true}},
                {"secretRef": {"name": "creds"}}
            ]
        },
        "toolboxes": [
            {
                "name": "browser", "image": "chromium:1", "mode": "clone", "os": "linux",
                "backend": "cloud-hypervisor", "connType": "vnc", "network": "bridge1",
                "probePort": 5900, "vncPort": 5901, "forcePull": false, "noDirectIO": false,
                "storage": "10Gi", "resources": {"limits": {"memory": "2Gi"}}
            },
            {
                "name": "legacy", "mode": "static", "os": "windows", "connType": "rdp",
                "staticIP": "127.3.0.10", "staticVMID": "vm-legacy-1"
            }
        ]
    })
}

#[tokio::test]
async fn a_manifest_setting_every_upstream_field_is_kept_as_sent() {
    let (client, ns) = setup("cocoon-crd-max").await;
    let sent = every_set_field();
    let set = api(&client, &ns.name, "CocoonSet")
        .create("every-field", sent.clone())
        .await
        .expect("maximal set");
    assert_kept(&sent, &set.data["spec"]);
    let sent = json!({"podRef": {"name": "every-field-0"}, "desire": "Hibernate"});
    let h = api(&client, &ns.name, "CocoonHibernation")
        .create("every-field", sent.clone())
        .await
        .expect("maximal hibernation");
    assert_kept(&sent, &h.data["spec"]);
}

#[tokio::test]
async fn objects_without_spec_are_accepted_as_upstream_accepts_them() {
    let (client, ns) = setup("cocoon-crd-nospec").await;
    for kind in ["CocoonSet", "CocoonHibernation"] {
        api(&client, &ns.name, kind)
            .create_without_spec("no-spec")
            .await
            .unwrap_or_else(|e| panic!("{kind} without spec: {e}"));
    }
}

#[tokio::test]
async fn lists_inside_kubernetes_types_merge_by_key_under_server_side_apply() {
    let (client, ns) = setup("cocoon-crd-ssa").await;
    let api = api(&client, &ns.name, "CocoonSet");
    let spec = |claim: &str| json!({"agent": {"image": "ubuntu-dev-base", "resources": {"claims": [{"name": claim}]}}});
    api.apply_spec("merged", "gitops", spec("gpu"))
        .await
        .expect("first manager");
    let both = api
        .apply_spec("merged", "person", spec("fpga"))
        .await
        .expect("a second manager adds its own entry without a conflict");
    let claims: Vec<&str> = both.data["spec"]["agent"]["resources"]["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(claims, ["gpu", "fpga"], "each manager keeps its own entry");
}
