//! Admission by the CRDs alone, on the local control plane: manifests shaped like upstream's
//! samples apply unchanged and are kept as sent, the API server fills in upstream's CRD
//! defaults, the schema's bounds, patterns, enums and CEL rules reject bad input with their
//! messages, the backup tag is immutable, and the printer columns and short names are
//! upstream's.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::admission::{Kind, assert_kept};

const GROUP: &str = "apps.foundationdb.org";
const MANIFESTS: &str = include_str!("fixtures/manifests.yaml");

async fn setup(prefix: &str) -> (kube::Client, TestNamespace) {
    let client = testenv::client().await;
    for crd in fdb::crd::crds() {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns)
}

fn api(client: &kube::Client, ns: &str, kind: &str) -> Kind {
    Kind::new(client, ns, GROUP, "v1beta2", kind)
}

fn cluster(extra: Value) -> Value {
    let mut spec = json!({"version": "7.1.57"});
    for (k, v) in extra.as_object().expect("object") {
        spec[k] = v.clone();
    }
    spec
}

fn without_zero_values(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| {
                    !matches!(v, Value::Bool(false) | Value::Null)
                        && v.as_i64() != Some(0)
                        && v.as_str() != Some("")
                })
                .map(|(k, v)| (k.clone(), without_zero_values(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_zero_values).collect()),
        other => other.clone(),
    }
}

async fn assert_rejected(api: &Kind, cases: Vec<(Value, &str)>) {
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let err = api
            .create(&format!("bad-{i}"), spec.clone())
            .await
            .expect_err(&format!("must be rejected: {spec}"));
        assert!(
            err.contains(want),
            "spec {spec}: expected {want:?} in {err:?}"
        );
    }
}

#[tokio::test]
async fn upstream_shaped_manifests_apply_unchanged() {
    let (client, ns) = setup("fdb-crd-samples").await;
    for doc in serde_yaml::Deserializer::from_str(MANIFESTS) {
        let manifest: Value = serde::Deserialize::deserialize(doc).expect("yaml");
        let kind = manifest["kind"].as_str().expect("kind");
        let name = manifest["metadata"]["name"].as_str().expect("name");
        let stored = api(&client, &ns.name, kind)
            .create(name, manifest["spec"].clone())
            .await
            .unwrap_or_else(|e| panic!("{kind} {name} rejected: {e}"));
        assert_kept(&manifest["spec"], &stored.data["spec"]);
        // The typed API reads every stored object and loses nothing the manifest set.
        let typed = stored.data["spec"].clone();
        // Zero values are the same as absent ones to the typed API (as to upstream's Go types).
        let sent = &without_zero_values(&manifest["spec"]);
        match kind {
            "FoundationDBCluster" => {
                let spec: fdb::crd::FoundationDBClusterSpec =
                    serde_json::from_value(typed.clone()).expect("cluster spec");
                assert_kept(sent, &serde_json::to_value(&spec).unwrap());
            }
            "FoundationDBBackup" => {
                let spec: fdb::crd::FoundationDBBackupSpec =
                    serde_json::from_value(typed.clone()).expect("backup spec");
                assert_kept(sent, &serde_json::to_value(&spec).unwrap());
            }
            _ => {
                let spec: fdb::crd::FoundationDBRestoreSpec =
                    serde_json::from_value(typed.clone()).expect("restore spec");
                assert_kept(sent, &serde_json::to_value(&spec).unwrap());
            }
        }
    }
}

#[tokio::test]
async fn crd_defaults_are_upstreams() {
    let (client, ns) = setup("fdb-crd-defaults").await;
    let stored = api(&client, &ns.name, "FoundationDBCluster")
        .create(
            "c",
            json!({"version": "7.1.57", "automationOptions": {"replacements": {}}, "databaseConfiguration": {}}),
        )
        .await
        .expect("minimal cluster");
    let spec = &stored.data["spec"];
    assert_eq!(spec["imageType"], "unified");
    assert_eq!(spec["minimumUptimeSecondsForBounce"], 600);
    assert_eq!(spec["replaceInstancesWhenResourcesChange"], false);
    assert_eq!(spec["skip"], false);
    assert_eq!(
        spec["databaseConfiguration"],
        json!({"storage_engine": "ssd-2"})
    );
    let auto = &spec["automationOptions"];
    assert_eq!(auto["deletionMode"], "Zone");
    assert_eq!(auto["removalMode"], "Zone");
    assert_eq!(auto["podUpdateStrategy"], "ReplaceTransactionSystem");
    assert_eq!(auto["synchronizationMode"], "local");
    assert_eq!(
        auto["replacements"],
        json!({"maxConcurrentReplacements": 1})
    );
    let b = api(&client, &ns.name, "FoundationDBBackup")
        .create("b", json!({"version": "7.1.57", "clusterName": "c"}))
        .await
        .expect("minimal backup");
    let spec = &b.data["spec"];
    assert_eq!(
        spec["imageType"], "split",
        "the CRD's default; the operator's getter says unified"
    );
    assert_eq!(spec["backupType"], "backup_agent");
    assert_eq!(spec["deletionPolicy"], "noop");
    assert_eq!(spec["backupMode"], "continuous");
    assert_eq!(spec["allowTagOverride"], false);
}

#[tokio::test]
async fn bad_clusters_are_rejected() {
    let (client, ns) = setup("fdb-crd-bad").await;
    let c = api(&client, &ns.name, "FoundationDBCluster");
    assert_rejected(
        &c,
        vec![
            (json!({}), "spec.version: Required value"),
            (cluster(json!({"version": "latest"})), "spec.version in body should match"),
            (cluster(json!({"version": "6.3.25"})), "minimum supported version is: 7.1.0"),
            (cluster(json!({"processGroupIDPrefix": "-bad"})), "spec.processGroupIDPrefix in body should match"),
            (cluster(json!({"processGroupIDPrefix": "a".repeat(44)})), "spec.processGroupIDPrefix: Too long"),
            (cluster(json!({"processGroupsToRemove": ["storage"]})), "spec.processGroupsToRemove[0] in body should match"),
            (cluster(json!({"minimumUptimeSecondsForBounce": 0})), "spec.minimumUptimeSecondsForBounce in body should be greater than or equal to 1"),
            (cluster(json!({"imageType": "docker"})), "spec.imageType: Unsupported value"),
            (cluster(json!({"databaseConfiguration": {"redundancy_mode": "quadruple"}})), "spec.databaseConfiguration.redundancy_mode: Unsupported value"),
            (cluster(json!({"databaseConfiguration": {"storage_engine": "ssd-3"}})), "spec.databaseConfiguration.storage_engine: Unsupported value"),
            (cluster(json!({"databaseConfiguration": {"perpetual_storage_wiggle_locality": "bad locality"}})), "perpetual_storage_wiggle_locality in body should match"),
            (cluster(json!({"databaseConfiguration": {"regions": [{"datacenters": [{"id": "a", "satellite": 2}]}]}})), "satellite in body should be less than or equal to 1"),
            (cluster(json!({"automationOptions": {"removalMode": "Sometimes"}})), "spec.automationOptions.removalMode: Unsupported value"),
            (cluster(json!({"automationOptions": {"replacements": {"maxConcurrentReplacements": -1}}})), "maxConcurrentReplacements in body should be greater than or equal to 0"),
            (cluster(json!({"automationOptions": {"replacements": {"taintReplacementOptions": [{"key": "k"}]}}})), "durationInSeconds: Required value"),
            (cluster(json!({"automationOptions": {"databaseInteractionMode": "telnet"}})), "database interaction mode is not supported"),
            (cluster(json!({"routing": {"podIPFamily": 5}})), "Pod IP Family is not valid, only 4 or 6 are allowed."),
            (cluster(json!({"routing": {"dnsDomain": ""}})), "spec.routing.dnsDomain in body should be at least 1 chars long"),
            (cluster(json!({"mainContainer": {"imageConfigs": [{"version": "7.1.57-with-a-long-suffix"}]}})), "version: Too long"),
            (cluster(json!({"buggify": {"crashLoopContainers": [{"containerName": ""}]}})), "containerName in body should be at least 1 chars long"),
        ],
    )
    .await;
    // Both upstream spellings of a valid IP family and of no family are accepted.
    for (i, family) in [0, 4, 6].into_iter().enumerate() {
        c.create(
            &format!("family-{i}"),
            cluster(json!({"routing": {"podIPFamily": family}})),
        )
        .await
        .expect("IP family");
    }
}

#[tokio::test]
async fn bad_backups_and_restores_are_rejected_and_the_tag_is_immutable() {
    let (client, ns) = setup("fdb-crd-backup").await;
    let b = api(&client, &ns.name, "FoundationDBBackup");
    let backup = |extra: Value| {
        let mut spec = json!({"version": "7.1.57", "clusterName": "c"});
        for (k, v) in extra.as_object().expect("object") {
            spec[k] = v.clone();
        }
        spec
    };
    assert_rejected(
        &b,
        vec![
            (
                json!({"version": "7.1.57"}),
                "spec.clusterName: Required value",
            ),
            (
                backup(json!({"backupState": "Sleeping"})),
                "spec.backupState: Unsupported value",
            ),
            (
                backup(json!({"deletionPolicy": "shred"})),
                "spec.deletionPolicy: Unsupported value",
            ),
            (
                backup(json!({"blobStoreConfiguration": {"bucket": "b"}})),
                "accountName: Required value",
            ),
            (
                backup(json!({"blobStoreConfiguration": {"accountName": "a@h", "bucket": "ab"}})),
                "bucket in body should be at least 3 chars long",
            ),
        ],
    )
    .await;
    b.create("tagged", backup(json!({"tag": "one"})))
        .await
        .expect("tagged backup");
    let err = b
        .patch_spec("tagged", json!({"tag": "two"}))
        .await
        .expect_err("tag change");
    assert!(err.contains("BackupTag is immutable"), "{err}");
    b.patch_spec("tagged", json!({"agentCount": 3}))
        .await
        .expect("other fields change");

    let r = api(&client, &ns.name, "FoundationDBRestore");
    assert_rejected(
        &r,
        vec![
            (json!({}), "spec.destinationClusterName: Required value"),
            (
                json!({"destinationClusterName": "c", "keyRanges": [{"start": "a b", "end": "c"}]}),
                "start in body should match",
            ),
            (
                json!({"destinationClusterName": "c", "keyRanges": [{"start": "a"}]}),
                "end: Required value",
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn printer_columns_and_names_are_registered() {
    let (client, _ns) = setup("fdb-crd-columns").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let c = crds
        .get("foundationdbclusters.apps.foundationdb.org")
        .await
        .expect("cluster CRD");
    assert_eq!(
        c.spec.names.list_kind.as_deref(),
        Some("FoundationDBClusterList")
    );
    assert_eq!(c.spec.names.short_names, Some(vec!["fdb".to_owned()]));
    let columns: Vec<(String, String)> = c.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|col| (col.name.clone(), col.json_path.clone()))
        .collect();
    assert_eq!(
        columns[1],
        (
            "Reconciled".to_owned(),
            ".status.generations.reconciled".to_owned()
        )
    );
    assert_eq!(
        columns[6],
        ("Version".to_owned(), ".status.runningVersion".to_owned())
    );
    let b = crds
        .get("foundationdbbackups.apps.foundationdb.org")
        .await
        .expect("backup CRD");
    assert_eq!(b.spec.names.short_names, Some(vec!["fdbbackup".to_owned()]));
    let r = crds
        .get("foundationdbrestores.apps.foundationdb.org")
        .await
        .expect("restore CRD");
    assert_eq!(
        r.spec.names.short_names,
        Some(vec!["fdbrestore".to_owned()])
    );
    let cols: Vec<String> = r.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(cols, ["Age", "State"]);
}

fn deploy_dir() -> std::path::PathBuf {
    testenv::workspace_root().join("deploy/fdb")
}

/// The install, applied server-side: the FoundationDBCluster CRD is larger than the 256 KiB
/// `last-applied-configuration` annotation of a client-side `kubectl apply` allows (upstream's
/// is too), so the documented command is `kubectl apply --server-side -k deploy/fdb`.
#[tokio::test]
async fn kustomize_install_passes_server_dry_run() {
    let admin = testenv::client().await;
    let text = std::fs::read_to_string(deploy_dir().join("namespace.yaml")).unwrap();
    let namespace: kube::api::DynamicObject = serde_yaml::from_str(&text).unwrap();
    testenv::rbac::apply(&admin, &namespace, "flotilla-install-dry-run")
        .await
        .expect("apply the namespace");
    let dir = deploy_dir().display().to_string();
    let (ok, stdout, stderr) = testenv::kustomize::kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=flotilla-install-dry-run",
        // The tests' CRD installer owns the CRDs' fields on this plane.
        "--force-conflicts",
        "-k",
        &dir,
        "--dry-run=server",
    ]);
    assert!(
        ok,
        "kubectl apply --server-side -k failed:\n{stdout}\n{stderr}"
    );
    assert!(
        !stderr.contains("would violate PodSecurity"),
        "the operator pod must meet the restricted standard:\n{stderr}"
    );
    let (ok, _, stderr) = testenv::kustomize::kubectl(&["apply", "-k", &dir, "--dry-run=server"]);
    assert!(
        !ok && stderr.contains("Too long"),
        "a client-side apply is refused for the CRD's size, as documented: {stderr}"
    );
    for line in [
        "namespace/fdb-operator-system",
        "customresourcedefinition.apiextensions.k8s.io/foundationdbclusters.apps.foundationdb.org",
        "customresourcedefinition.apiextensions.k8s.io/foundationdbbackups.apps.foundationdb.org",
        "customresourcedefinition.apiextensions.k8s.io/foundationdbrestores.apps.foundationdb.org",
        "serviceaccount/fdb-kubernetes-operator-controller-manager",
        "clusterrole.rbac.authorization.k8s.io/fdb-kubernetes-operator-manager-clusterrole",
        "clusterrolebinding.rbac.authorization.k8s.io/fdb-kubernetes-operator-manager-clusterrolebinding",
        "role.rbac.authorization.k8s.io/fdb-kubernetes-operator-leader-election",
        "rolebinding.rbac.authorization.k8s.io/fdb-kubernetes-operator-leader-election",
        "service/fdb-kubernetes-operator-metrics",
        "deployment.apps/fdb-kubernetes-operator-controller-manager",
    ] {
        assert!(
            stdout.contains(line),
            "{line} missing from the install:\n{stdout}"
        );
    }
}

#[tokio::test]
async fn samples_pass_server_dry_run() {
    let (_client, ns) = setup("fdb-samples").await;
    let dir = deploy_dir().join("samples").display().to_string();
    let (ok, stdout, stderr) =
        testenv::kustomize::kubectl(&["apply", "-k", &dir, "-n", &ns.name, "--dry-run=server"]);
    assert!(ok, "kubectl apply -k samples failed:\n{stdout}\n{stderr}");
    for expected in [
        "foundationdbcluster.apps.foundationdb.org/sample-cluster",
        "foundationdbcluster.apps.foundationdb.org/local-cluster",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected} missing from the samples:\n{stdout}"
        );
    }
    // The backup and restore samples, applied on their own.
    for (file, expected) in [
        (
            "backup.yaml",
            "foundationdbbackup.apps.foundationdb.org/sample-cluster",
        ),
        (
            "restore.yaml",
            "foundationdbrestore.apps.foundationdb.org/sample-cluster",
        ),
    ] {
        let path = deploy_dir()
            .join("samples")
            .join(file)
            .display()
            .to_string();
        let (ok, stdout, stderr) = testenv::kustomize::kubectl(&[
            "apply",
            "-f",
            &path,
            "-n",
            &ns.name,
            "--dry-run=server",
        ]);
        assert!(ok, "kubectl apply -f {file} failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains(expected), "{expected} missing:\n{stdout}");
    }
}
