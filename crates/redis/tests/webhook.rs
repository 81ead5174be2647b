//! The admission webhooks end to end: the operator's webhook server runs in this process under
//! the operator's own ServiceAccount and RBAC (deploy/redis/rbac), registered on the local plane
//! by URL (`https://127.0.0.1:<port>/...`) in webhook configurations scoped to the test's
//! namespace, with the operator's self-made CA patched in as their caBundle. Each test creates
//! objects as a user would and checks the verdict and what was stored.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::admission::{Kind, rejection};
use testenv::kustomize::{kubectl, kubectl_stdin};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const GROUP: &str = "redis.io";
const SA: &str = "redis-operator";
const T: Duration = Duration::from_secs(60);

/// One test's plane objects and webhook server.
struct Env {
    client: Client,
    ns: TestNamespace,
    config: String,
    operator: Option<(CancellationToken, JoinHandle<anyhow::Result<()>>)>,
    port: u16,
    _rbac: testenv::rbac::ClusterCleanup,
    _cleanup: Cleanup,
}

/// Deletes the test's cluster-scoped objects (through kubectl, so it outlives the runtime).
struct Cleanup(Vec<(String, String)>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = kubectl(&["delete", kind, name, "--wait=false", "--ignore-not-found"]);
        }
    }
}

fn dynamic(
    client: &Client,
    ns: &str,
    kind: &str,
    group: &str,
    version: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

fn all(client: &Client, kind: &str, group: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn webhook(name: &str, port: u16, path: &str, resource: &str, ns: &str) -> Value {
    json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}")},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "rules": [{"apiGroups": ["redis.io"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": [resource]}],
    })
}

impl Env {
    async fn start(prefix: &str) -> Env {
        Self::start_with(prefix, &[]).await
    }

    async fn start_with(prefix: &str, flags: &[&str]) -> Env {
        let client = testenv::client().await;
        for crd in redis::crd::crds() {
            testenv::install_crd(&client, crd)
                .await
                .expect("install CRD");
        }
        let ns = TestNamespace::new(&client, prefix).await;
        let rbac_dir = testenv::workspace_root().join("deploy/redis/rbac");
        let rbac =
            testenv::rbac::install_rbac(&client, &rbac_dir, "redis-operator-system", &ns.name)
                .await
                .expect("install the operator's RBAC");
        let config = format!("redis-webhook-{}", ns.name);
        let port = free_port();
        let pp = PostParams::default();
        let vwc: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": config},
            "webhooks": [
                webhook("vrediscluster.redis.io", port, "/validate-redis-io-v1-rediscluster", "redisclusters", &ns.name),
                webhook("vredisscheduledbackup.redis.io", port, "/validate-redis-io-v1-redisscheduledbackup", "redisscheduledbackups", &ns.name),
            ],
        }))
        .expect("vwc");
        all(
            &client,
            "ValidatingWebhookConfiguration",
            "admissionregistration.k8s.io",
            "v1",
        )
        .create(&pp, &vwc)
        .await
        .expect("create the validating configuration");
        let mut mwc_hook = webhook(
            "mrediscluster.redis.io",
            port,
            "/mutate-redis-io-v1-rediscluster",
            "redisclusters",
            &ns.name,
        );
        mwc_hook["reinvocationPolicy"] = json!("Never");
        let mwc: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": config}, "webhooks": [mwc_hook],
        }))
        .expect("mwc");
        all(
            &client,
            "MutatingWebhookConfiguration",
            "admissionregistration.k8s.io",
            "v1",
        )
        .create(&pp, &mwc)
        .await
        .expect("create the mutating configuration");
        // deploy/redis/rbac grants get/patch on the two production configuration names only;
        // this test's configurations have per-namespace names, granted here the same way.
        let grant = format!("redis-webhook-test-{}", ns.name);
        let role: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": grant},
            "rules": [{"apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                "resourceNames": [config], "verbs": ["get", "patch"]}],
        }))
        .expect("role");
        let binding: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": grant},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": grant},
            "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns.name}],
        }))
        .expect("binding");
        all(&client, "ClusterRole", "rbac.authorization.k8s.io", "v1")
            .create(&pp, &role)
            .await
            .expect("role");
        all(
            &client,
            "ClusterRoleBinding",
            "rbac.authorization.k8s.io",
            "v1",
        )
        .create(&pp, &binding)
        .await
        .expect("binding");
        let cleanup = Cleanup(vec![
            ("validatingwebhookconfiguration".into(), config.clone()),
            ("mutatingwebhookconfiguration".into(), config.clone()),
            ("clusterrolebinding".into(), grant.clone()),
            ("clusterrole".into(), grant),
        ]);
        let mut env = Env {
            client,
            ns,
            config,
            operator: None,
            port,
            _rbac: rbac,
            _cleanup: cleanup,
        };
        env.start_operator(flags).await;
        env
    }

    /// Starts the operator (webhook server and runtime) as its ServiceAccount and waits until
    /// the API server admits through it.
    async fn start_operator(&mut self, extra: &[&str]) {
        let port = format!("--webhook-bind-address=127.0.0.1:{}", self.port);
        let ns = format!("--operator-namespace={}", self.ns.name);
        let vwc = format!("--validating-webhook-configuration={}", self.config);
        let mwc = format!("--mutating-webhook-configuration={}", self.config);
        let mut args = vec![
            "redis-operator",
            "controller",
            "--leader-elect=false",
            "--metrics-addr=127.0.0.1:0",
            "--probe-addr=127.0.0.1:0",
            "--webhook-hosts=127.0.0.1",
            &port,
            &ns,
            &vwc,
            &mwc,
        ];
        args.extend_from_slice(extra);
        let cli = <redis::cli::Cli as clap::Parser>::try_parse_from(args).expect("flags");
        let redis::cli::Command::Controller(flags) = cli.command else {
            panic!("not the controller subcommand");
        };
        let operator_client = testenv::service_account_client(&self.client, &self.ns.name, SA)
            .await
            .expect("operator ServiceAccount client");
        let token = CancellationToken::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(redis::run::run_with_client(
            *flags,
            operator_client,
            token.clone(),
            move |addr| {
                let _ = tx.send(addr);
            },
        ));
        if tokio::time::timeout(T, rx).await.is_err() || task.is_finished() {
            let result = task.await;
            panic!("the webhook server did not start: {result:?}");
        }
        self.operator = Some((token, task));
        // The API server picks up the patched caBundle through its informer: wait until a
        // dry-run create is defaulted by the webhook.
        let api = dynamic(&self.client, &self.ns.name, "RedisCluster", GROUP, "v1");
        let probe: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": "probe"}, "spec": {"instances": 0},
        }))
        .expect("probe");
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        testenv::eventually("admission through the webhook", T, || {
            let (api, probe, dry) = (api.clone(), probe.clone(), dry.clone());
            async move {
                let obj = api.create(&dry, &probe).await.ok()?;
                (obj.data["spec"]["instances"] == 1).then_some(())
            }
        })
        .await
        .expect("the webhook admits");
    }

    async fn stop_operator(&mut self) {
        if let Some((token, task)) = self.operator.take() {
            token.cancel();
            tokio::time::timeout(T, task)
                .await
                .expect("the operator stops")
                .expect("join")
                .expect("clean exit");
        }
    }

    fn kind(&self, kind: &str) -> Kind {
        Kind::new(&self.client, &self.ns.name, GROUP, "v1", kind)
    }

    async fn create(
        &self,
        kind: &str,
        metadata: Value,
        spec: Value,
    ) -> Result<DynamicObject, String> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "redis.io/v1", "kind": kind, "metadata": metadata, "spec": spec,
        }))
        .expect("object");
        dynamic(&self.client, &self.ns.name, kind, GROUP, "v1")
            .create(&PostParams::default(), &obj)
            .await
            .map_err(rejection)
    }

    async fn secret(&self, name: &str) -> Option<Secret> {
        Api::<Secret>::namespaced(self.client.clone(), &self.ns.name)
            .get_opt(name)
            .await
            .expect("read secret")
    }
}

fn storage() -> Value {
    json!({"size": "1Gi"})
}

fn assert_denied(result: Result<DynamicObject, String>, want: &str) {
    let err = result.expect_err(&format!("must be rejected with {want:?}"));
    assert!(err.contains(want), "expected {want:?} in {err:?}");
}

#[tokio::test]
async fn defaults_turn_upstream_zero_values_into_defaults() {
    let env = Env::start("redis-wh-defaults").await;
    let rc = env.kind("RedisCluster");
    let stored = rc
        .create(
            "zeros",
            json!({"instances": 0, "mode": "", "imageName": "", "shards": 0,
            "primaryUpdateStrategy": ""}),
        )
        .await
        .expect("upstream accepts zero values");
    let spec = &stored.data["spec"];
    assert_eq!(spec["instances"], 1);
    assert_eq!(spec["mode"], "standalone");
    assert_eq!(spec["imageName"], "redis:7.2");
    assert_eq!(spec["primaryUpdateStrategy"], "unsupervised");
    assert_eq!(spec["storage"], json!({"type": "pvc", "size": "1Gi"}));
    assert!(spec.get("shards").is_none(), "{spec}");
    assert_eq!(
        spec["resources"]["requests"],
        json!({"memory": "128Mi", "cpu": "100m"})
    );

    let capped = rc
        .create(
            "small",
            json!({"storage": storage(), "resources": {"limits": {"memory": "64Mi"}}}),
        )
        .await
        .expect("small limits");
    assert_eq!(
        capped.data["spec"]["resources"]["requests"],
        json!({"memory": "64Mi", "cpu": "100m"}),
        "requests never exceed limits"
    );

    let bare = env
        .create("RedisCluster", json!({"name": "bare"}), Value::Null)
        .await
        .expect("an object without spec");
    assert_eq!(bare.data["spec"]["instances"], 1);
    assert_eq!(
        bare.data["spec"]["storage"],
        json!({"type": "pvc", "size": "1Gi"})
    );
}

#[tokio::test]
async fn rules_that_need_other_objects_are_enforced() {
    let env = Env::start("redis-wh-refs").await;
    let rc = env.kind("RedisCluster");
    let boot = json!({"instances": 1, "storage": storage(), "bootstrap": {"backupName": "b1"}});
    assert_denied(
        rc.create("restored", boot.clone()).await,
        r#"admission webhook "vrediscluster.redis.io" denied the request: spec.bootstrap.backupName: Not found: "b1""#,
    );
    env.kind("RedisBackup")
        .create(
            "b1",
            json!({"clusterName": "old", "destination": {"s3": {"bucket": "backups"}}}),
        )
        .await
        .expect("backup");
    assert_denied(
        rc.create("restored", boot.clone()).await,
        r#"referenced RedisBackup must be in phase "Completed""#,
    );
    dynamic(&env.client, &env.ns.name, "RedisBackup", GROUP, "v1")
        .patch_status(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Completed", "backupPath": "s3://backups/b1.rdb"}}),
            ),
        )
        .await
        .expect("complete the backup");
    rc.create("restored", boot)
        .await
        .expect("a completed backup bootstraps");

    let replica = json!({"storage": storage(),
        "replicaMode": {"enabled": true, "source": {"host": "redis.east", "authSecretName": "east-auth"}}});
    assert_denied(
        rc.create("dr", replica.clone()).await,
        r#"spec.replicaMode.source.authSecretName: Not found: "east-auth""#,
    );
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "east-auth"}, "stringData": {"password": "p"},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(env.client.clone(), &env.ns.name)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    rc.create("dr", replica)
        .await
        .expect("the source Secret exists");
    // Once referenced, a deleted source Secret does not block later writes such as fencing.
    Api::<Secret>::namespaced(env.client.clone(), &env.ns.name)
        .delete("east-auth", &Default::default())
        .await
        .expect("delete the source Secret");
    dynamic(&env.client, &env.ns.name, "RedisCluster", GROUP, "v1")
        .patch(
            "dr",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"redis.io/fencedInstances": "[\"dr-0\"]"}}}),
            ),
        )
        .await
        .expect("fencing a cluster whose source Secret is gone");

    assert_denied(
        env.create(
            "RedisCluster",
            json!({"name": "h", "annotations": {"redis.io/hibernation": "maybe"}}),
            json!({"storage": storage()}),
        )
        .await,
        r#"metadata.annotations[redis.io/hibernation]: Invalid value: "maybe": must be "on", "off", "true", "false", or empty"#,
    );
    assert_denied(
        env.create(
            "RedisCluster",
            json!({"name": "u", "annotations": {"redis.io/approve-primary-update": "yes"}}),
            json!({"storage": storage()}),
        )
        .await,
        r#"metadata.annotations[redis.io/approve-primary-update]: Invalid value: "yes": must be "true" when present"#,
    );
    let limited = |memory: Value| {
        json!({"storage": storage(), "memory": memory,
        "resources": {"limits": {"memory": "1Gi"}}})
    };
    assert_denied(
        rc.create(
            "m1",
            json!({"storage": storage(), "memory": {"maxMemoryPercent": 50}}),
        )
        .await,
        "spec.memory.maxMemoryPercent: Invalid value: 50: spec.memory.maxMemoryPercent requires spec.resources.limits.memory to be set",
    );
    assert_denied(
        rc.create("m2", limited(json!({"maxMemory": "2Gi"}))).await,
        r#"spec.memory.maxMemory: Invalid value: "2Gi": spec.memory.maxMemory must not exceed spec.resources.limits.memory"#,
    );
    assert_denied(
        rc.create("m3", json!({"storage": storage(), "memory": {"maxMemory": "1Gi"}, "redis": {"maxmemory": "1gb"}})).await,
        "spec.redis[maxmemory]: Forbidden: configure Redis memory via spec.memory; remove maxmemory/maxmemory-policy from spec.redis",
    );
    assert_denied(
        rc.create(
            "m5",
            json!({"storage": storage(), "memory": {"maxMemory": "0"}}),
        )
        .await,
        r#"spec.memory.maxMemory: Invalid value: "0": spec.memory.maxMemory must be greater than 0"#,
    );
    rc.create("m4", limited(json!({"maxMemoryPercent": 75})))
        .await
        .expect("a sound memory spec");

    // A completed backup without a destination cannot be restored from.
    env.kind("RedisBackup")
        .create("b2", json!({"clusterName": "old"}))
        .await
        .expect("backup");
    dynamic(&env.client, &env.ns.name, "RedisBackup", GROUP, "v1")
        .patch_status(
            "b2",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Completed", "backupPath": "s3://x/b2.rdb"}})),
        )
        .await
        .expect("complete the backup");
    assert_denied(
        rc.create(
            "restored-2",
            json!({"storage": storage(), "bootstrap": {"backupName": "b2"}}),
        )
        .await,
        r#"spec.bootstrap.backupName: Invalid value: "b2": referenced RedisBackup has an invalid destination: destination is required"#,
    );
}

#[tokio::test]
async fn storage_grows_only_where_it_can_and_never_below_a_pvc() {
    let env = Env::start("redis-wh-storage").await;
    let fixed = format!("{}-fixed", env.ns.name);
    let growable = format!("{}-growable", env.ns.name);
    let _classes = Cleanup(vec![
        ("storageclass".into(), fixed.clone()),
        ("storageclass".into(), growable.clone()),
    ]);
    let classes = all(&env.client, "StorageClass", "storage.k8s.io", "v1");
    for (name, expand) in [(&fixed, false), (&growable, true)] {
        let sc: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": "kubernetes.io/no-provisioner", "allowVolumeExpansion": expand,
        }))
        .expect("class");
        classes
            .create(&PostParams::default(), &sc)
            .await
            .expect("storage class");
    }
    let rc = env.kind("RedisCluster");
    rc.create(
        "a",
        json!({"storage": {"size": "2Gi", "storageClassName": fixed}}),
    )
    .await
    .expect("create");
    let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "a-data-0", "labels": {"redis.io/cluster": "a"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": fixed,
            "resources": {"requests": {"storage": "2Gi"}}},
    }))
    .expect("pvc");
    Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        env.client.clone(),
        &env.ns.name,
    )
    .create(&PostParams::default(), &pvc)
    .await
    .expect("pvc");
    let err = rc
        .patch_spec("a", json!({"storage": {"size": "1Gi"}}))
        .await
        .expect_err("shrink");
    assert!(
        err.contains(r#"spec.storage.size: Forbidden: storage size cannot be decreased below currently requested PVC size "2Gi""#),
        "{err}"
    );
    let err = rc
        .patch_spec("a", json!({"storage": {"size": "5Gi"}}))
        .await
        .expect_err("grow");
    assert!(
        err.contains(&format!(r#"spec.storage.size: Forbidden: storageClass "{fixed}" does not allow volume expansion"#)),
        "{err}"
    );
    rc.create(
        "b",
        json!({"storage": {"size": "1Gi", "storageClassName": growable}}),
    )
    .await
    .expect("create");
    rc.patch_spec("b", json!({"storage": {"size": "3Gi"}}))
        .await
        .expect("an expandable class grows");
    rc.create(
        "c",
        json!({"storage": {"size": "1Gi", "storageClassName": format!("{}-absent", env.ns.name)}}),
    )
    .await
    .expect("create");
    let err = rc
        .patch_spec("c", json!({"storage": {"size": "3Gi"}}))
        .await
        .expect_err("absent class");
    assert!(err.contains("was not found"), "{err}");
}

#[tokio::test]
async fn scheduled_backups_need_a_schedule_that_fires() {
    let env = Env::start("redis-wh-schedule").await;
    let rsb = env.kind("RedisScheduledBackup");
    let spec = |schedule: &str, zone: &str| json!({"clusterName": "cache", "schedule": schedule, "timeZone": zone});
    let cases = [
        (
            spec("0 2 * *", "UTC"),
            r#"spec.schedule: Invalid value: "0 2 * *": not a valid cron expression: expected exactly 5 fields, found 4"#,
        ),
        (
            spec("0 2 * * *", "Mars/Olympus"),
            r#"spec.timeZone: Invalid value: "Mars/Olympus": not a valid IANA time zone"#,
        ),
        (
            spec("0 0 30 2 *", "UTC"),
            r#"spec.schedule: Invalid value: "0 0 30 2 *": cron expression has no upcoming occurrences"#,
        ),
        (
            spec("61 * * * *", "UTC"),
            "61 is out of range 0-59 in minute field",
        ),
    ];
    for (i, (s, want)) in cases.into_iter().enumerate() {
        let err = rsb.create(&format!("bad-{i}"), s).await.expect_err(want);
        assert!(err.contains(want), "expected {want:?} in {err:?}");
    }
    rsb.create("nightly", spec("0 2 * * *", "America/Chicago"))
        .await
        .expect("valid");
    rsb.create("every", spec("@every 6h", "UTC"))
        .await
        .expect("valid");
}

#[tokio::test]
async fn memory_warnings_reach_kubectl() {
    let env = Env::start("redis-wh-warnings").await;
    let cases = [
        (
            json!({"storage": storage(), "resources": {"limits": {"memory": "1Gi"}}}),
            "Warning: spec.resources.limits.memory is set (1073741824 bytes) but no Redis maxmemory is configured",
        ),
        (
            json!({"storage": storage(), "resources": {"limits": {"memory": "1Gi"}},
                "memory": {"maxMemoryPercent": 95}}),
            "Warning: spec.memory resolves maxmemory to 1020054732 bytes, at least 90% of the 1073741824 byte container limit",
        ),
        (
            json!({"storage": storage(), "instances": 3, "minSyncReplicas": 1, "maxSyncReplicas": 1,
                "redis": {"min-replicas-to-write": "2"}}),
            "Warning: spec.redis sets min-replicas-to-write, which overrides",
        ),
        (
            json!({"storage": storage(), "instances": 3, "minSyncReplicas": 1, "maxSyncReplicas": 2}),
            "Warning: maxSyncReplicas has no effect: Redis replication has no upper bound",
        ),
    ];
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let manifest = json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": format!("warn-{i}"), "namespace": env.ns.name},
            "spec": spec,
        });
        // kubectl blocks: run it off the runtime thread, which serves the webhook.
        let (ok, stdout, stderr) = tokio::task::spawn_blocking(move || {
            kubectl_stdin(&["apply", "-f", "-"], &manifest.to_string())
        })
        .await
        .expect("kubectl");
        assert!(ok, "warnings do not reject: {stdout}\n{stderr}");
        assert!(stderr.contains(want), "expected {want:?} in {stderr}");
    }
}

#[tokio::test]
async fn the_pki_lives_in_upstreams_secrets_and_renews_while_serving() {
    let mut env = Env::start_with("redis-wh-pki", &["--webhook-pki-interval=1s"]).await;
    let ca = env
        .secret("redis-operator-ca-secret")
        .await
        .expect("CA secret");
    let cert = env
        .secret("redis-operator-webhook-cert")
        .await
        .expect("cert secret");
    let data = |s: &Secret, k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| b.0.clone())
            .unwrap_or_default()
    };
    assert_eq!(cert.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(data(&cert, "ca.crt"), data(&ca, "tls.crt"));
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let cfg = all(&env.client, kind, "admissionregistration.k8s.io", "v1")
            .get(&env.config)
            .await
            .expect("configuration");
        for hook in cfg.data["webhooks"].as_array().expect("webhooks") {
            let bundle = hook["clientConfig"]["caBundle"]
                .as_str()
                .expect("caBundle patched");
            use base64::Engine as _;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(bundle)
                .expect("base64");
            assert_eq!(decoded, data(&ca, "tls.crt"), "{kind} {}", hook["name"]);
        }
    }

    // A damaged serving certificate is replaced within the PKI interval, under the same CA,
    // and the server keeps admitting with the new one.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns.name);
    secrets
        .patch(
            "redis-operator-webhook-cert",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"tls.crt": "Z2FyYmFnZQ=="}})),
        )
        .await
        .expect("damage the certificate");
    let renewed = testenv::eventually("a renewed serving certificate", T, || {
        let secrets = secrets.clone();
        async move {
            let s = secrets.get("redis-operator-webhook-cert").await.ok()?;
            let crt = s.data.as_ref()?.get("tls.crt")?.0.clone();
            (crt.starts_with(b"-----BEGIN CERTIFICATE-----")).then_some(crt)
        }
    })
    .await
    .expect("renewed");
    assert_ne!(renewed, data(&cert, "tls.crt"));
    env.kind("RedisCluster")
        .create(
            "after-renewal",
            json!({"instances": 0, "storage": storage()}),
        )
        .await
        .expect("admitted with the renewed certificate");

    // A restarted operator reuses the CA rather than minting a new one.
    env.stop_operator().await;
    env.start_operator(&[]).await;
    let again = env
        .secret("redis-operator-ca-secret")
        .await
        .expect("CA secret");
    assert_eq!(data(&again, "tls.crt"), data(&ca, "tls.crt"));
    env.stop_operator().await;
}
