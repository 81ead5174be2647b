//! Admission: upstream manifests apply unchanged with upstream defaults, and every invalid
//! manifest is rejected by the API server with a message that says what is wrong.

use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::admission::Kind;

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

fn task_spec() -> Value {
    json!({"instances": [{"name": "a"}], "integrations": [{"name": "i", "image": "img:1"}]})
}

#[tokio::test]
async fn upstream_manifests_apply_unchanged_with_upstream_defaults() {
    let (client, ns) = setup("crd-ok").await;
    let inst = api(&client, &ns.name, "RedroidInstance")
        .create(
            "a",
            json!({"index": 0, "network": {"proxy": {"type": "static", "host": "p"}}}),
        )
        .await
        .expect("minimal instance");
    let spec = &inst.data["spec"];
    assert_eq!(spec["image"], "redroid/redroid:16.0.0-latest");
    assert_eq!(spec["imagePullPolicy"], "IfNotPresent");
    assert_eq!(spec["sharedDataPVC"], "redroid-data-base-pvc");
    assert_eq!(spec["diffDataPVC"], "redroid-data-diff-pvc");
    assert_eq!(spec["gpuMode"], "host");
    assert_eq!(spec["adbPort"], 5555);
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["network"]["proxy"]["port"], 3128);

    let task = api(&client, &ns.name, "RedroidTask")
        .create("t", task_spec())
        .await
        .expect("minimal task");
    let spec = &task.data["spec"];
    assert_eq!(spec["backoffLimit"], 0);
    assert_eq!(spec["successfulJobsHistoryLimit"], 3);
    assert_eq!(spec["failedJobsHistoryLimit"], 3);
    assert_eq!(spec["integrations"][0]["imagePullPolicy"], "Always");
    assert_eq!(spec["schedule"], "");
}

#[tokio::test]
async fn invalid_instances_are_rejected_with_clear_messages() {
    let (client, ns) = setup("crd-bad-inst").await;
    let api = api(&client, &ns.name, "RedroidInstance");
    let cases = [
        (json!({}), "spec.index: Required value"),
        (
            json!({"index": -1}),
            "spec.index: Invalid value: -1: spec.index in body should be greater than or equal to 0",
        ),
        (
            json!({"index": 0, "adbPort": 70000}),
            "spec.adbPort in body should be less than or equal to 65535",
        ),
        (
            json!({"index": 0, "gpuMode": "metal"}),
            "spec.gpuMode: Unsupported value: \"metal\"",
        ),
        (
            json!({"index": 0, "screen": {"width": 0}}),
            "spec.screen.width in body should be greater than or equal to 1",
        ),
        (
            json!({"index": 0, "network": {"proxy": {"type": "socks"}}}),
            "spec.network.proxy.type: Unsupported value: \"socks\"",
        ),
        (
            json!({"index": 0, "service": {"type": "ExternalName"}}),
            "spec.service.type: Unsupported value: \"ExternalName\"",
        ),
        (
            json!({"index": 0, "service": {"nodePort": 0}}),
            "spec.service.nodePort in body should be greater than or equal to 1",
        ),
        (
            json!({"index": "zero"}),
            "spec.index: Invalid value: \"string\"",
        ),
    ];
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

#[tokio::test]
async fn invalid_tasks_are_rejected_with_clear_messages() {
    let (client, ns) = setup("crd-bad-task").await;
    let api = api(&client, &ns.name, "RedroidTask");
    let with = |patch: Value| {
        let mut spec = task_spec();
        for (k, v) in patch.as_object().expect("object") {
            spec[k] = v.clone();
        }
        spec
    };
    let cases = [
        (
            with(json!({"suspendInstance": true, "wakeInstance": true})),
            "suspendInstance and wakeInstance are mutually exclusive",
        ),
        (
            with(json!({"instances": []})),
            "spec.instances: Invalid value: 0: spec.instances in body should have at least 1 items",
        ),
        (
            with(json!({"instances": [{"name": "a"}, {"name": "a"}]})),
            "spec.instances[1]: Duplicate value",
        ),
        (
            with(json!({"integrations": []})),
            "spec.integrations in body should have at least 1 items",
        ),
        (
            with(
                json!({"integrations": [{"name": "i", "image": "x"}, {"name": "i", "image": "y"}]}),
            ),
            "spec.integrations[1]: Duplicate value",
        ),
        (
            with(json!({"integrations": [{"name": "i"}]})),
            "spec.integrations[0].image: Required value",
        ),
        (
            with(json!({"activeDeadlineSeconds": 0})),
            "spec.activeDeadlineSeconds in body should be greater than or equal to 1",
        ),
        (
            with(json!({"parallelism": 0})),
            "spec.parallelism in body should be greater than or equal to 1",
        ),
        (
            with(json!({"backoffLimit": -1})),
            "spec.backoffLimit in body should be greater than or equal to 0",
        ),
        (
            with(
                json!({"integrations": [{"name": "i", "image": "x", "configs": [{"configMapName": "c"}]}]}),
            ),
            "spec.integrations[0].configs[0].key: Required value",
        ),
        (
            json!({"integrations": [{"name": "i", "image": "x"}]}),
            "spec.instances: Required value",
        ),
    ];
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

// Issue item 14: docs/redroid.md used `kubectl get ri`, a short name no CRD declares (upstream
// declares none). Every resource a `kubectl get|describe` in the guide names must be one the
// API server resolves: a built-in, or a name (plural, singular, kind or short name) the
// installed redroid CRDs serve.
#[tokio::test]
async fn resources_named_in_the_guide_are_served() {
    let (client, _ns) = setup("crd-docs").await;
    let mut served: Vec<String> = Vec::new();
    let lists = [
        client.list_core_api_resources("v1").await.expect("core"),
        client
            .list_api_group_resources("batch/v1")
            .await
            .expect("batch"),
        client
            .list_api_group_resources("redroid.isning.moe/v1alpha1")
            .await
            .expect("redroid"),
    ];
    for r in lists.iter().flat_map(|l| &l.resources) {
        served.push(r.name.clone());
        served.push(r.singular_name.clone());
        served.push(r.kind.to_lowercase());
        served.extend(r.short_names.iter().flatten().cloned());
    }
    let guide =
        std::fs::read_to_string(testenv::workspace_root().join("docs/redroid.md")).expect("guide");
    let mut named = Vec::new();
    for verb in ["kubectl get ", "kubectl describe "] {
        for (at, _) in guide.match_indices(verb) {
            let word: String = guide[at + verb.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == ',' || *c == '.')
                .collect();
            named.extend(
                word.split(',')
                    .map(|w| w.split('.').next().unwrap_or_default().to_owned())
                    .filter(|w| !w.is_empty()),
            );
        }
    }
    assert!(named.iter().any(|n| n == "redroidinstances"), "{named:?}");
    for name in named {
        assert!(
            served.contains(&name),
            "docs/redroid.md runs `kubectl get {name}`, which the API server does not serve"
        );
    }
}
