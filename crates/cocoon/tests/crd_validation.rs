//! Admission against the real API server: upstream's manifests apply unchanged with upstream's
//! defaults, every invalid manifest is rejected with a message that says what is wrong, the
//! CEL rules (release policy, immutable CPU class and podRef) hold, the short names are ours
//! (`cset`, not kubectl's `cs`), and `kubectl apply -k deploy/cocoon` passes a server dry run.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::admission::Kind;

const GROUP: &str = "cocoonset.cocoonstack.io";
const SET: &str = "CocoonSet";
const HIBERNATION: &str = "CocoonHibernation";
const RELEASE_MESSAGE: &str = "hibernatePolicy=release requires agent.replicas=0 and no toolboxes";

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

/// Creates every spec and asserts that each is rejected with its expected message fragment.
async fn assert_rejected(api: &Kind, cases: Vec<(Value, &str)>) {
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let err = api
            .create(&format!("bad-{i}"), spec.clone())
            .await
            .expect_err("must be rejected");
        assert!(
            err.contains(want),
            "spec {spec}: expected {want:?} in {err:?}"
        );
    }
}

/// A valid set spec with `patch` merged into `spec.agent`.
fn set_with_agent(patch: Value) -> Value {
    let mut agent = json!({"image": "ubuntu-dev-base"});
    for (k, v) in patch.as_object().expect("object") {
        agent[k] = v.clone();
    }
    json!({"agent": agent})
}

/// A valid set spec with one toolbox `toolbox`.
fn set_with_toolbox(toolbox: Value) -> Value {
    json!({"agent": {"image": "ubuntu-dev-base"}, "toolboxes": [toolbox]})
}

#[tokio::test]
async fn cocoonset_defaults_are_applied_by_the_api_server() {
    let (client, ns) = setup("cocoon-crd-ok").await;
    let set = api(&client, &ns.name, SET)
        .create(
            "demo",
            set_with_toolbox(json!({"name": "db", "image": "postgres-16"})),
        )
        .await
        .expect("minimal set");
    let spec = &set.data["spec"];
    assert_eq!(spec["snapshotPolicy"], "always");
    assert_eq!(spec["hibernatePolicy"], "retain");
    assert_eq!(spec["nodePool"], "default");
    assert_eq!(spec["agent"]["mode"], "clone");
    assert_eq!(spec["agent"]["os"], "linux");
    assert_eq!(spec["agent"]["backend"], "cloud-hypervisor");
    assert_eq!(spec["agent"]["replicas"], 0);
    assert_eq!(spec["toolboxes"][0]["mode"], "run");
    assert_eq!(spec["toolboxes"][0]["os"], "linux");
    assert_eq!(spec["toolboxes"][0]["backend"], "cloud-hypervisor");
    assert!(spec.get("suspend").is_none(), "suspend has no default");
    assert!(
        spec["agent"].get("connType").is_none(),
        "connType is inferred, not defaulted"
    );
}

#[tokio::test]
async fn invalid_cocoonsets_are_rejected_with_clear_messages() {
    let (client, ns) = setup("cocoon-crd-bad-set").await;
    let api = api(&client, &ns.name, SET);
    let cases = vec![
        (json!({}), "spec.agent: Required value"),
        (json!({"agent": {}}), "spec.agent.image: Required value"),
        (
            set_with_agent(json!({"image": ""})),
            "spec.agent.image in body should be at least 1 chars long",
        ),
        (
            set_with_agent(json!({"replicas": -1})),
            "spec.agent.replicas in body should be greater than or equal to 0",
        ),
        (
            json!({"agent": {"image": "i"}, "snapshotPolicy": "sometimes"}),
            "spec.snapshotPolicy: Unsupported value: \"sometimes\"",
        ),
        (
            json!({"agent": {"image": "i"}, "hibernatePolicy": "drop"}),
            "spec.hibernatePolicy: Unsupported value: \"drop\"",
        ),
        (
            set_with_agent(json!({"os": "plan9"})),
            "spec.agent.os: Unsupported value: \"plan9\"",
        ),
        (
            set_with_agent(json!({"backend": "qemu"})),
            "spec.agent.backend: Unsupported value: \"qemu\"",
        ),
        (
            set_with_agent(json!({"connType": "telnet"})),
            "spec.agent.connType: Unsupported value: \"telnet\"",
        ),
        (
            set_with_agent(json!({"probePort": 70000})),
            "spec.agent.probePort in body should be less than or equal to 65535",
        ),
        (
            set_with_toolbox(json!({"name": "vnc", "vncPort": -1})),
            "spec.toolboxes[0].vncPort in body should be greater than or equal to 0",
        ),
        (
            set_with_toolbox(json!({"image": "i"})),
            "spec.toolboxes[0].name: Required value",
        ),
        (
            set_with_toolbox(json!({"name": "Bad_Name"})),
            "spec.toolboxes[0].name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        ),
        (
            set_with_toolbox(json!({"name": "d".repeat(64)})),
            "spec.toolboxes[0].name: Too long",
        ),
        (
            set_with_toolbox(json!({"name": "7"})),
            "toolbox name must not be an integer",
        ),
        (
            json!({"agent": {"image": "i"}, "toolboxes": [{"name": "db"}, {"name": "db"}]}),
            "spec.toolboxes[1]: Duplicate value",
        ),
        (
            set_with_toolbox(json!({"name": "db", "backend": "qemu"})),
            "spec.toolboxes[0].backend: Unsupported value: \"qemu\"",
        ),
        (
            json!({"agent": {"image": "i"}, "snapshotCompatibilityClass": "c".repeat(64)}),
            "spec.snapshotCompatibilityClass: Too long",
        ),
        (
            json!({"agent": {"image": "i"}, "snapshotCompatibilityClass": "skylake avx512"}),
            "spec.snapshotCompatibilityClass in body should match",
        ),
        (
            json!({"agent": {"image": "i"}, "snapshotCompatibilityClass": "-skylake"}),
            "spec.snapshotCompatibilityClass in body should match",
        ),
    ];
    assert_rejected(&api, cases).await;
}

#[tokio::test]
async fn release_policy_is_for_main_only_sets() {
    let (client, ns) = setup("cocoon-crd-release").await;
    let api = api(&client, &ns.name, SET);
    let release = |agent: Value, toolboxes: Option<Value>| {
        let mut spec = json!({"hibernatePolicy": "release", "agent": agent});
        if let Some(t) = toolboxes {
            spec["toolboxes"] = t;
        }
        spec
    };
    let cases = vec![
        (
            release(json!({"image": "i", "replicas": 1}), None),
            RELEASE_MESSAGE,
        ),
        (
            release(json!({"image": "i"}), Some(json!([{"name": "db"}]))),
            RELEASE_MESSAGE,
        ),
    ];
    assert_rejected(&api, cases).await;

    api.create("solo", release(json!({"image": "i"}), None))
        .await
        .expect("main-only release set");
    api.create(
        "solo-explicit",
        release(json!({"image": "i", "replicas": 0}), Some(json!([]))),
    )
    .await
    .expect("explicit replicas 0 and an empty toolbox list");
    let err = api
        .patch_spec("solo", json!({"agent": {"replicas": 2}}))
        .await
        .expect_err("scaling a release set must be rejected");
    assert!(err.contains(RELEASE_MESSAGE), "{err}");
}

#[tokio::test]
async fn snapshot_compatibility_class_is_immutable_once_set() {
    let (client, ns) = setup("cocoon-crd-class").await;
    let api = api(&client, &ns.name, SET);
    api.create("demo", json!({"agent": {"image": "i"}}))
        .await
        .expect("set without a class");
    let set = api
        .patch_spec("demo", json!({"snapshotCompatibilityClass": "skylake"}))
        .await
        .expect("setting the class for the first time is allowed");
    assert_eq!(set.data["spec"]["snapshotCompatibilityClass"], "skylake");

    let err = api
        .patch_spec("demo", json!({"snapshotCompatibilityClass": "zen4"}))
        .await
        .expect_err("changing the class must be rejected");
    assert!(
        err.contains("snapshotCompatibilityClass is immutable once set"),
        "{err}"
    );
    let err = api
        .patch_spec("demo", json!({"snapshotCompatibilityClass": null}))
        .await
        .expect_err("removing the class must be rejected");
    assert!(
        err.contains("snapshotCompatibilityClass is immutable once set"),
        "{err}"
    );

    api.patch_spec(
        "demo",
        json!({"suspend": true, "snapshotCompatibilityClass": "skylake"}),
    )
    .await
    .expect("other fields stay mutable with the class unchanged");
}

#[tokio::test]
async fn invalid_hibernations_are_rejected_with_clear_messages() {
    let (client, ns) = setup("cocoon-crd-bad-ch").await;
    let api = api(&client, &ns.name, HIBERNATION);
    let cases = vec![
        (
            json!({"desire": "Hibernate"}),
            "spec.podRef: Required value",
        ),
        (
            json!({"podRef": {}, "desire": "Hibernate"}),
            "spec.podRef.name: Required value",
        ),
        (
            json!({"podRef": {"name": ""}, "desire": "Hibernate"}),
            "spec.podRef.name in body should be at least 1 chars long",
        ),
        (
            json!({"podRef": {"name": "demo-0"}, "desire": "Sleep"}),
            "spec.desire: Unsupported value: \"Sleep\"",
        ),
        (
            json!({"podRef": {"name": "demo-0"}}),
            "spec.desire: Required value",
        ),
    ];
    assert_rejected(&api, cases).await;
}

#[tokio::test]
async fn hibernation_pod_ref_is_immutable_and_desire_is_not() {
    let (client, ns) = setup("cocoon-crd-ch").await;
    let api = api(&client, &ns.name, HIBERNATION);
    api.create(
        "demo-0",
        json!({"podRef": {"name": "demo-0"}, "desire": "Hibernate"}),
    )
    .await
    .expect("valid hibernation");
    let err = api
        .patch_spec("demo-0", json!({"podRef": {"name": "demo-1"}}))
        .await
        .expect_err("retargeting must be rejected");
    assert!(err.contains("spec.podRef is immutable"), "{err}");
    let ch = api
        .patch_spec("demo-0", json!({"desire": "Wake"}))
        .await
        .expect("flipping the desire is how a VM is woken");
    assert_eq!(ch.data["spec"]["desire"], "Wake");
    assert_eq!(ch.data["spec"]["podRef"]["name"], "demo-0");
}

#[tokio::test]
async fn short_names_category_and_columns_are_registered() {
    let client = testenv::client().await;
    for crd in cocoon::crd::crds() {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let set = crds.get(&format!("cocoonsets.{GROUP}")).await.expect("CRD");
    let short = set.spec.names.short_names.clone().unwrap_or_default();
    assert!(short.iter().any(|s| s == "cset"), "{short:?}");
    assert!(
        !short.iter().any(|s| s == "cs"),
        "`cs` is kubectl's componentstatuses: {short:?}"
    );
    assert_eq!(set.spec.names.categories, Some(vec!["cocoon".to_owned()]));
    assert_eq!(columns(&set), ["Phase", "Ready", "Desired", "Age"]);

    let ch = crds
        .get(&format!("cocoonhibernations.{GROUP}"))
        .await
        .expect("CRD");
    let short = ch.spec.names.short_names.clone().unwrap_or_default();
    assert!(short.iter().any(|s| s == "ch"), "{short:?}");
    assert_eq!(ch.spec.names.categories, Some(vec!["cocoon".to_owned()]));
    assert_eq!(columns(&ch), ["Pod", "Desire", "Phase", "Age"]);
}

fn columns(crd: &CustomResourceDefinition) -> Vec<String> {
    crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect()
}

fn deploy_dir() -> PathBuf {
    testenv::workspace_root().join("deploy/cocoon")
}

#[tokio::test]
async fn kustomize_install_passes_server_dry_run() {
    let admin = testenv::client().await;
    testenv::kustomize::assert_install_dry_run(
        &admin,
        &deploy_dir(),
        &deploy_dir().join("namespace.yaml"),
        &[
        "namespace/cocoon-system",
        "customresourcedefinition.apiextensions.k8s.io/cocoonsets.cocoonset.cocoonstack.io",
        "customresourcedefinition.apiextensions.k8s.io/cocoonhibernations.cocoonset.cocoonstack.io",
        "serviceaccount/cocoon-operator",
        "clusterrole.rbac.authorization.k8s.io/cocoon-operator",
        "clusterrolebinding.rbac.authorization.k8s.io/cocoon-operator",
        "role.rbac.authorization.k8s.io/cocoon-operator-leader-election",
        "rolebinding.rbac.authorization.k8s.io/cocoon-operator-leader-election",
        "service/cocoon-operator-metrics",
        "deployment.apps/cocoon-operator",
        ],
    )
    .await;
}

#[tokio::test]
async fn samples_pass_server_dry_run() {
    let (_client, ns) = setup("cocoon-samples").await;
    let dir = deploy_dir().join("samples").display().to_string();
    let (ok, stdout, stderr) =
        testenv::kustomize::kubectl(&["apply", "-k", &dir, "-n", &ns.name, "--dry-run=server"]);
    assert!(ok, "kubectl apply -k samples failed:\n{stdout}\n{stderr}");
    for expected in [
        "cocoonset.cocoonset.cocoonstack.io/demo",
        "cocoonset.cocoonset.cocoonstack.io/solo",
        "cocoonhibernation.cocoonset.cocoonstack.io/demo-0",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected} missing from the samples:\n{stdout}"
        );
    }
}
