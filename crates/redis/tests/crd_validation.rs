//! Admission by the CRD schema alone (no webhook registered): upstream's manifests apply with
//! upstream's defaults, every rule the schema and its CEL expressions carry rejects with its
//! message, the transition rules (storage type, bootstrap, mode, replica mode) hold, the short
//! names and columns are registered, and `kubectl apply -k deploy/redis` passes a server dry run.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::admission::Kind;

const GROUP: &str = "redis.io";

async fn setup(prefix: &str) -> (kube::Client, TestNamespace) {
    let client = testenv::client().await;
    for crd in redis::crd::crds() {
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

/// A valid cluster spec with `extra` merged in at the top level.
fn cluster(extra: Value) -> Value {
    let mut spec = json!({"instances": 3, "storage": {"size": "1Gi"}});
    for (k, v) in extra.as_object().expect("object") {
        spec[k] = v.clone();
    }
    spec
}

/// Creates every spec and asserts that each is rejected with its expected message fragment.
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
async fn defaults_are_applied_by_the_api_server() {
    let (client, ns) = setup("redis-crd-defaults").await;
    let rc = api(&client, &ns.name, "RedisCluster")
        .create("cache", json!({"storage": {}}))
        .await
        .expect("minimal cluster");
    let spec = &rc.data["spec"];
    assert_eq!(spec["instances"], 1);
    assert_eq!(spec["mode"], "standalone");
    assert_eq!(spec["imageName"], "redis:7.2");
    assert_eq!(spec["primaryUpdateStrategy"], "unsupervised");
    assert_eq!(spec["primaryUpdateMethod"], "switchover");
    assert_eq!(spec["storage"], json!({"type": "pvc", "size": "1Gi"}));
    assert_eq!(spec["enablePodDisruptionBudget"], true);
    assert_eq!(
        spec["primaryIsolation"],
        json!({"enabled": true, "apiServerTimeout": "5s", "peerTimeout": "5s"})
    );
    assert_eq!(spec["failoverDelay"], 0);
    assert_eq!(spec["switchoverDelay"], 30);
    assert_eq!(spec["minSyncReplicasMaxLag"], 10);
    // What the operator reads back is the typed default.
    let typed: redis::crd::RedisCluster =
        serde_json::from_value(serde_json::to_value(&rc).expect("json")).expect("typed");
    assert_eq!(typed.spec, redis::crd::RedisClusterSpec::default());

    let rc = api(&client, &ns.name, "RedisCluster")
        .create(
            "nested",
            cluster(json!({
                "memory": {"maxMemory": "100Mi"},
                "nodeMaintenanceWindow": {"inProgress": false},
                "replicaMode": {"enabled": true, "source": {"host": "redis.east"}},
            })),
        )
        .await
        .expect("nested defaults");
    let spec = &rc.data["spec"];
    assert_eq!(spec["memory"]["maxMemoryPolicy"], "noeviction");
    assert_eq!(spec["nodeMaintenanceWindow"]["reusePVC"], true);
    assert_eq!(spec["replicaMode"]["source"]["port"], 6379);

    let rb = api(&client, &ns.name, "RedisBackup")
        .create("b", json!({"clusterName": "cache"}))
        .await
        .expect("backup");
    assert_eq!(rb.data["spec"]["target"], "prefer-replica");
    assert_eq!(rb.data["spec"]["method"], "rdb");
    let rsb = api(&client, &ns.name, "RedisScheduledBackup")
        .create("s", json!({"clusterName": "cache", "schedule": "@daily"}))
        .await
        .expect("scheduled backup");
    let spec = &rsb.data["spec"];
    assert_eq!(spec["timeZone"], "UTC");
    assert_eq!(spec["successfulBackupsHistoryLimit"], 3);
    assert_eq!(spec["failedBackupsHistoryLimit"], 3);
    assert_eq!(spec["target"], "prefer-replica");
}

#[tokio::test]
async fn upstream_manifests_are_accepted() {
    let (client, ns) = setup("redis-crd-upstream").await;
    let rc = api(&client, &ns.name, "RedisCluster");
    let manifests = [
        // upstream's README
        json!({"instances": 3, "mode": "standalone", "storage": {"size": "1Gi"}}),
        json!({"instances": 3, "mode": "sentinel", "storage": {"size": 1073741824},
            "tlsSecret": {"name": "tls"}, "caSecret": {"name": "ca"}}),
        json!({"instances": 2, "storage": {"type": "emptyDir", "size": "512Mi"},
            "resources": {"limits": {"memory": "1Gi"}},
            "memory": {"maxMemoryPercent": 75, "maxMemoryPolicy": "allkeys-lru"},
            "minSyncReplicas": 1, "maxSyncReplicas": 1, "redis": {"appendfsync": "always"},
            "connectionSecret": {"name": "cache-conn"},
            "primaryIsolation": {"apiServerTimeout": "1500ms", "peerTimeout": "2s"},
            "nodeMaintenanceWindow": {"inProgress": true, "reusePVC": false},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "redis", "effect": "NoSchedule"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"redis.io/cluster": "c"}}}]}),
        json!({"instances": 1, "storage": {"size": "1Gi"}, "bootstrap": {"backupName": "b1"},
            "replicaMode": {"enabled": true, "promote": true,
                "source": {"clusterName": "east", "host": "redis.east", "port": 6380, "authSecretName": "src"}}}),
    ];
    for (i, spec) in manifests.into_iter().enumerate() {
        rc.create(&format!("ok-{i}"), spec.clone())
            .await
            .unwrap_or_else(|e| panic!("upstream manifest {spec} rejected: {e}"));
    }
}

#[tokio::test]
async fn invalid_clusters_are_rejected_with_clear_messages() {
    let (client, ns) = setup("redis-crd-bad").await;
    let rc = api(&client, &ns.name, "RedisCluster");
    let cases = vec![
        (json!({"instances": 3}), "spec.storage: Required value"),
        (
            cluster(json!({"instances": -1})),
            "spec.instances in body should be greater than or equal to 0",
        ),
        (
            cluster(json!({"instances": 0})),
            "spec.instances: Invalid value: 0: must be at least 1",
        ),
        (
            cluster(json!({"mode": "cluster"})),
            "cluster mode is reserved and not supported yet",
        ),
        (
            cluster(json!({"mode": "ring"})),
            "spec.mode: Unsupported value: \"ring\"",
        ),
        (
            cluster(json!({"mode": "sentinel", "instances": 2})),
            "sentinel mode requires at least 3 redis instances",
        ),
        (
            cluster(json!({"shards": 2})),
            "spec.shards in body should be greater than or equal to 3",
        ),
        (
            cluster(json!({"primaryUpdateStrategy": "manual"})),
            "spec.primaryUpdateStrategy: Unsupported value",
        ),
        (
            cluster(json!({"primaryUpdateMethod": "recreate"})),
            "spec.primaryUpdateMethod: Unsupported value",
        ),
        (
            cluster(json!({"storage": {"type": "hostPath", "size": "1Gi"}})),
            "spec.storage.type: Unsupported value",
        ),
        (
            cluster(json!({"storage": {"size": "lots"}})),
            "spec.storage.size in body should match",
        ),
        (
            cluster(json!({"tlsSecret": {"name": "tls"}})),
            "spec.caSecret: Required value: caSecret is required when tlsSecret is set",
        ),
        (
            cluster(json!({"caSecret": {"name": "ca"}})),
            "spec.tlsSecret: Required value: tlsSecret is required when caSecret is set",
        ),
        (
            cluster(json!({"authSecret": {}})),
            "spec.authSecret.name: Required value",
        ),
        (
            cluster(json!({"minSyncReplicas": 3})),
            "spec.minSyncReplicas: Invalid value: must be less than or equal to instances - 1",
        ),
        (
            cluster(json!({"minSyncReplicas": 2, "maxSyncReplicas": 1})),
            "spec.maxSyncReplicas: Invalid value: must be greater than or equal to minSyncReplicas",
        ),
        (
            cluster(json!({"minSyncReplicasMaxLag": 0})),
            "spec.minSyncReplicasMaxLag in body should be greater than or equal to 1",
        ),
        (
            cluster(json!({"failoverDelay": -1})),
            "spec.failoverDelay in body should be greater than or equal to 0",
        ),
        (
            cluster(json!({"switchoverDelay": 0})),
            "spec.switchoverDelay in body should be greater than or equal to 1",
        ),
        (
            cluster(json!({"memory": {"maxMemoryPercent": 0}})),
            "spec.memory.maxMemoryPercent in body should be greater than or equal to 1",
        ),
        (
            cluster(json!({"memory": {"maxMemoryPercent": 101}})),
            "spec.memory.maxMemoryPercent in body should be less than or equal to 100",
        ),
        (
            cluster(json!({"memory": {"maxMemory": "1Gi", "maxMemoryPercent": 50}})),
            "spec.memory.maxMemoryPercent: Forbidden: spec.memory.maxMemory and spec.memory.maxMemoryPercent are mutually exclusive; set only one",
        ),
        (
            cluster(json!({"memory": {"maxMemoryPolicy": "lru"}})),
            "spec.memory.maxMemoryPolicy: Unsupported value",
        ),
        (
            cluster(
                json!({"instances": 1, "nodeMaintenanceWindow": {"inProgress": true, "reusePVC": false}}),
            ),
            "nodeMaintenanceWindow.reusePVC=false is not allowed for single-instance clusters",
        ),
        (
            cluster(json!({"nodeMaintenanceWindow": {"reusePVC": true}})),
            "spec.nodeMaintenanceWindow.inProgress: Required value",
        ),
        (
            cluster(json!({"bootstrap": {}})),
            "spec.bootstrap.backupName: Required value",
        ),
        (
            cluster(
                json!({"storage": {"type": "emptyDir", "size": "1Gi"}, "bootstrap": {"backupName": "b"}}),
            ),
            "spec.bootstrap: Forbidden: bootstrap is not supported with ephemeral storage",
        ),
        (
            cluster(
                json!({"storage": {"type": "emptyDir", "size": "1Gi", "storageClassName": "fast"}}),
            ),
            "spec.storage.storageClassName: Forbidden: storageClassName has no effect with ephemeral storage",
        ),
        (
            cluster(json!({"replicaMode": {"promote": true}})),
            "replicaMode.promote=true requires replicaMode.enabled=true",
        ),
        (
            cluster(json!({"replicaMode": {"enabled": true}})),
            "spec.replicaMode.source: Required value: source is required when replicaMode.enabled=true",
        ),
        (
            cluster(json!({"replicaMode": {"enabled": true, "source": {"host": " "}}})),
            "source.host is required when replicaMode.enabled=true",
        ),
        (
            cluster(
                json!({"replicaMode": {"enabled": true, "source": {"host": "h", "port": 70000}}}),
            ),
            "spec.replicaMode.source.port in body should be less than or equal to 65535",
        ),
        (
            cluster(
                json!({"replicaMode": {"enabled": true, "source": {"host": "h", "authSecretName": "  "}}}),
            ),
            "must not be empty when set",
        ),
        (
            cluster(json!({"connectionSecret": {"name": "Bad_Name"}})),
            "a lowercase RFC 1123 subdomain must consist of",
        ),
        (
            cluster(json!({"connectionSecret": {"name": " "}})),
            "name is required when connectionSecret is set",
        ),
        (
            cluster(json!({"connectionSecret": {"name": "a".repeat(254)}})),
            "spec.connectionSecret.name: Too long",
        ),
        (
            cluster(json!({"primaryIsolation": {"apiServerTimeout": "5 seconds"}})),
            "spec.primaryIsolation.apiServerTimeout in body should match",
        ),
    ];
    assert_rejected(&rc, cases).await;

    let rsb = api(&client, &ns.name, "RedisScheduledBackup");
    let cases = vec![
        (json!({"clusterName": "c"}), "spec.schedule: Required value"),
        (
            json!({"clusterName": "c", "schedule": ""}),
            "spec.schedule in body should be at least 1 chars long",
        ),
        (
            json!({"schedule": "@daily"}),
            "spec.clusterName: Required value",
        ),
        (
            json!({"clusterName": "c", "schedule": "@daily", "successfulBackupsHistoryLimit": -1}),
            "spec.successfulBackupsHistoryLimit in body should be greater than or equal to 0",
        ),
        (
            json!({"clusterName": "c", "schedule": "@daily", "method": "zip"}),
            "spec.method: Unsupported value",
        ),
    ];
    assert_rejected(&rsb, cases).await;
    let rb = api(&client, &ns.name, "RedisBackup");
    let cases = vec![
        (json!({}), "spec.clusterName: Required value"),
        (
            json!({"clusterName": "c", "target": "any"}),
            "spec.target: Unsupported value",
        ),
        (
            json!({"clusterName": "c", "destination": {"s3": {}}}),
            "spec.destination.s3.bucket: Required value",
        ),
    ];
    assert_rejected(&rb, cases).await;
}

#[tokio::test]
async fn storage_type_and_bootstrap_are_immutable() {
    let (client, ns) = setup("redis-crd-immutable").await;
    let rc = api(&client, &ns.name, "RedisCluster");
    rc.create("a", cluster(json!({"bootstrap": {"backupName": "b1"}})))
        .await
        .expect("create");
    let err = rc
        .patch_spec(
            "a",
            json!({"storage": {"type": "emptyDir", "bootstrap": null}}),
        )
        .await
        .expect_err("storage type change");
    assert!(
        err.contains("storage.type is immutable after creation"),
        "{err}"
    );
    for change in [
        json!({"bootstrap": {"backupName": "b2"}}),
        json!({"bootstrap": null}),
    ] {
        let err = rc
            .patch_spec("a", change.clone())
            .await
            .expect_err("bootstrap change");
        assert!(
            err.contains("bootstrap backupName is immutable after creation"),
            "{change}: {err}"
        );
    }
    rc.create("b", cluster(json!({}))).await.expect("create");
    let err = rc
        .patch_spec("b", json!({"bootstrap": {"backupName": "late"}}))
        .await
        .expect_err("adding a bootstrap later");
    assert!(
        err.contains("bootstrap backupName is immutable after creation"),
        "{err}"
    );
    rc.patch_spec("b", json!({"instances": 5, "storage": {"size": "2Gi"}}))
        .await
        .expect("other fields stay mutable");
}

#[tokio::test]
async fn only_standalone_to_sentinel_with_a_primary_and_no_tls() {
    let (client, ns) = setup("redis-crd-mode").await;
    let rc = api(&client, &ns.name, "RedisCluster");
    let typed: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1", "RedisCluster")),
    );
    rc.create("s", cluster(json!({"mode": "sentinel"})))
        .await
        .expect("sentinel");
    // Created in sentinel mode, TLS is accepted (as upstream); only the migration refuses it.
    rc.create(
        "st",
        cluster(json!({"mode": "sentinel", "tlsSecret": {"name": "t"}, "caSecret": {"name": "c"}})),
    )
    .await
    .expect("sentinel with TLS");
    let err = rc
        .patch_spec("s", json!({"mode": "standalone"}))
        .await
        .expect_err("sentinel->standalone");
    assert!(
        err.contains("unsupported mode transition; only standalone->sentinel"),
        "{err}"
    );

    rc.create("a", cluster(json!({})))
        .await
        .expect("standalone");
    let err = rc
        .patch_spec("a", json!({"mode": "sentinel"}))
        .await
        .expect_err("no primary yet");
    assert!(
        err.contains("cannot migrate standalone->sentinel until status.currentPrimary is set"),
        "{err}"
    );
    typed
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentPrimary": "a-0"}})),
        )
        .await
        .expect("status");
    let err = rc
        .patch_spec(
            "a",
            json!({"mode": "sentinel", "tlsSecret": {"name": "t"}, "caSecret": {"name": "c"}}),
        )
        .await
        .expect_err("TLS in the migration");
    assert!(
        err.contains("cannot migrate standalone->sentinel in place for a TLS-enabled cluster"),
        "{err}"
    );
    let migrated = rc
        .patch_spec("a", json!({"mode": "sentinel"}))
        .await
        .expect("the supported migration");
    assert_eq!(migrated.data["spec"]["mode"], "sentinel");
}

#[tokio::test]
async fn replica_mode_is_left_only_through_promotion() {
    let (client, ns) = setup("redis-crd-replica").await;
    let rc = api(&client, &ns.name, "RedisCluster");
    let source = json!({"host": "redis.east"});
    rc.create("dr", cluster(json!({}))).await.expect("create");
    let err = rc
        .patch_spec(
            "dr",
            json!({"replicaMode": {"enabled": true, "promote": true, "source": source}}),
        )
        .await
        .expect_err("promote while enabling");
    assert!(
        err.contains("replicaMode.promote can only be set after replicaMode is already enabled"),
        "{err}"
    );
    rc.patch_spec(
        "dr",
        json!({"replicaMode": {"enabled": true, "source": source}}),
    )
    .await
    .expect("enable");
    let err = rc
        .patch_spec("dr", json!({"replicaMode": {"enabled": false}}))
        .await
        .expect_err("disable directly");
    assert!(
        err.contains(
            "replicaMode.enabled cannot be disabled directly; set replicaMode.promote=true first"
        ),
        "{err}"
    );
    rc.patch_spec("dr", json!({"replicaMode": {"promote": true}}))
        .await
        .expect("promote");
    rc.patch_spec(
        "dr",
        json!({"replicaMode": {"enabled": false, "promote": false}}),
    )
    .await
    .expect("what the operator writes once promoted");
}

#[tokio::test]
async fn short_names_categories_and_columns_are_registered() {
    let client = testenv::client().await;
    for crd in redis::crd::crds() {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let expect = [
        (
            "redisclusters",
            vec!["rc", "rcl"],
            vec!["Instances", "Ready", "Phase", "Primary", "Age"],
        ),
        (
            "redisbackups",
            vec!["rb"],
            vec!["Cluster", "Phase", "Target", "Age"],
        ),
        (
            "redisscheduledbackups",
            vec!["rsb"],
            vec!["Cluster", "Schedule", "Phase", "Last Backup", "Age"],
        ),
    ];
    for (plural, short, cols) in expect {
        let crd = crds.get(&format!("{plural}.{GROUP}")).await.expect("CRD");
        assert_eq!(
            crd.spec.names.short_names.clone().unwrap_or_default(),
            short
        );
        assert_eq!(crd.spec.names.categories, Some(vec!["redis".to_owned()]));
        let got: Vec<String> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(got, cols);
    }
}

fn deploy_dir() -> PathBuf {
    testenv::workspace_root().join("deploy/redis")
}

#[tokio::test]
async fn kustomize_install_passes_server_dry_run() {
    let admin = testenv::client().await;
    testenv::kustomize::assert_install_dry_run(
        &admin,
        &deploy_dir(),
        &deploy_dir().join("namespace.yaml"),
        &[
        "namespace/redis-operator-system",
        "customresourcedefinition.apiextensions.k8s.io/redisclusters.redis.io",
        "customresourcedefinition.apiextensions.k8s.io/redisbackups.redis.io",
        "customresourcedefinition.apiextensions.k8s.io/redisscheduledbackups.redis.io",
        "serviceaccount/redis-operator",
        "clusterrole.rbac.authorization.k8s.io/redis-operator",
        "clusterrolebinding.rbac.authorization.k8s.io/redis-operator",
        "role.rbac.authorization.k8s.io/redis-operator-leader-election",
        "rolebinding.rbac.authorization.k8s.io/redis-operator-leader-election",
        "service/redis-operator-metrics",
        "service/redis-operator-webhook-service",
        "deployment.apps/redis-operator",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/redis-operator-validating-webhook",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/redis-operator-mutating-webhook",
        ],
    )
    .await;
}

#[tokio::test]
async fn samples_pass_server_dry_run() {
    let (_client, ns) = setup("redis-samples").await;
    let dir = deploy_dir().join("samples").display().to_string();
    let (ok, stdout, stderr) =
        testenv::kustomize::kubectl(&["apply", "-k", &dir, "-n", &ns.name, "--dry-run=server"]);
    assert!(ok, "kubectl apply -k samples failed:\n{stdout}\n{stderr}");
    for expected in [
        "rediscluster.redis.io/cache",
        "redisbackup.redis.io/cache-backup-now",
        "redisscheduledbackup.redis.io/cache-nightly",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected} missing from the samples:\n{stdout}"
        );
    }
}
