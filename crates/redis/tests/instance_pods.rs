//! The instance manager in real pods on the process-backed nodes: the pod built as the
//! operator builds it (init container `copy-manager` from the operator image, container
//! `redis` from `redis:7.2` running `/controller/manager instance`, projected Secrets, the
//! per-cluster ServiceAccount and Role, HTTPS probes). The test plays the operator: it creates
//! the Secrets, the RedisCluster and the pods, and sets the status and annotations.
//!
//! Checked: a replica pod starts as a replica of the primary pod's IP (reading the cluster
//! and the primary's pod in-cluster, as its ServiceAccount); with no primary named a pod waits,
//! Running and not Ready, and says why; a fenced pod keeps redis-server down without
//! restarting; the API refuses unauthenticated requests.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use redis::crd::RedisCluster;
use redis::instance_api::{self, Boot, InstanceReport};
use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::procnode::{self, ImageEntry};

mod support;

const T: Duration = Duration::from_secs(90);
const CLUSTER: &str = "demo";
const OPERATOR_REPOSITORY: &str = "ghcr.io/flotilla/redis-operator";
const BACKUP_CREDENTIALS: &str = "demo-backup-credentials";

struct Env {
    admin: Client,
    ns: TestNamespace,
    ca_pem: String,
    token: String,
    _image: procnode::ImageRegistration,
}

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("object")
}

fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

impl Env {
    async fn new() -> Self {
        let admin = testenv::client().await;
        for crd in redis::crd::crds() {
            testenv::install_crd(&admin, crd).await.expect("CRD");
        }
        let ns = TestNamespace::new(&admin, "redis-pods").await;
        let n = ns.name.clone();
        let pp = PostParams::default();
        // This build's binary as the operator image.
        let entry = ImageEntry {
            image: format!("{OPERATOR_REPOSITORY}:{n}"),
            files: [(
                "/redis-operator".to_string(),
                env!("CARGO_BIN_EXE_redis-operator").to_string(),
            )]
            .into(),
            entrypoint: vec!["/redis-operator".into()],
            ..ImageEntry::default()
        };
        let image = procnode::register_image(&admin, &format!("redis-operator.{n}"), &entry)
            .await
            .expect("image");
        Api::<ServiceAccount>::namespaced(admin.clone(), &n)
            .create(&pp, &obj(json!({"metadata": {"name": CLUSTER}})))
            .await
            .expect("sa");
        let role = Role {
            metadata: ObjectMeta {
                name: Some(CLUSTER.into()),
                ..Default::default()
            },
            rules: Some(redis::instance::role_rules(CLUSTER)),
        };
        Api::<Role>::namespaced(admin.clone(), &n)
            .create(&pp, &role)
            .await
            .expect("role");
        let rb: RoleBinding = obj(json!({
            "metadata": {"name": CLUSTER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLUSTER},
            "subjects": [{"kind": "ServiceAccount", "name": CLUSTER, "namespace": n}]
        }));
        Api::<RoleBinding>::namespaced(admin.clone(), &n)
            .create(&pp, &rb)
            .await
            .expect("rolebinding");
        let now = jiff::Timestamp::now();
        let ca = redis::admission::pki::Ca::generate(now).expect("ca");
        let serving =
            redis::admission::pki::issue(&ca, &[instance_api::server_name(CLUSTER, &n)], now)
                .expect("cert");
        let token = format!("token-{n}");
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), &n);
        for s in [
            secret("demo-auth", &[("password", "pw")]),
            secret(
                &instance_api::token_secret(CLUSTER),
                &[(instance_api::TOKEN_KEY, &token)],
            ),
            secret(
                &instance_api::server_secret(CLUSTER),
                &[
                    ("tls.crt", &serving.cert_pem),
                    ("tls.key", &serving.key_pem),
                    ("ca.crt", &ca.cert_pem),
                ],
            ),
        ] {
            secrets.create(&pp, &s).await.expect("secret");
        }
        let rc: RedisCluster = obj(json!({"apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": CLUSTER},
            "spec": {"storage": {"size": "1Gi", "type": "emptyDir"}, "instances": 2, "authSecret": {"name": "demo-auth"}}}));
        Api::<RedisCluster>::namespaced(admin.clone(), &n)
            .create(&pp, &rc)
            .await
            .expect("cluster");
        Self {
            admin,
            ns,
            ca_pem: ca.cert_pem,
            token,
            _image: image,
        }
    }

    /// The data pod of `ordinal`, as the operator builds it (with the bootstrap restore of
    /// `restore` when given).
    fn pod(&self, ordinal: u8, restore: Option<&str>) -> Pod {
        let name = format!("{CLUSTER}-{ordinal}");
        let field = |path: &str| json!({"valueFrom": {"fieldRef": {"fieldPath": path}}});
        let mut env = vec![json!({"name": "CLUSTER_NAME", "value": CLUSTER})];
        for (k, path) in [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
            ("POD_IP", "status.podIP"),
        ] {
            let mut e = field(path);
            e["name"] = json!(k);
            env.push(e);
        }
        let probe = |path: &str| json!({"httpGet": {"path": path, "port": 8080, "scheme": "HTTPS"}, "periodSeconds": 1, "timeoutSeconds": 12});
        let mut spec = json!({
            "serviceAccountName": CLUSTER,
            "terminationGracePeriodSeconds": 30,
            "initContainers": [{
                "name": "copy-manager",
                "image": format!("{OPERATOR_REPOSITORY}:{}", self.ns.name),
                "command": ["/redis-operator", "copy-binary", "/controller/manager"],
                "volumeMounts": [{"name": "controller", "mountPath": "/controller"}]
            }],
            "containers": [{
                "name": "redis",
                "image": "redis:7.2",
                "command": ["/controller/manager", "instance", "--shutdown-grace", "20"],
                "env": env,
                "ports": [{"name": "redis", "containerPort": 6379}, {"name": "http", "containerPort": 8080}],
                "readinessProbe": probe("/readyz"),
                "livenessProbe": probe("/healthz"),
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "controller", "mountPath": "/controller"},
                    {"name": "projected-secrets", "mountPath": "/projected", "readOnly": true},
                    {"name": "instance-token", "mountPath": instance_api::TOKEN_MOUNT, "readOnly": true},
                    {"name": "instance-tls", "mountPath": instance_api::TLS_MOUNT, "readOnly": true},
                    {"name": "backup-credentials", "mountPath": "/backup-credentials", "readOnly": true}
                ]
            }],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "controller", "emptyDir": {}},
                {"name": "projected-secrets", "projected": {"sources": [
                    {"secret": {"name": "demo-auth", "items": [{"key": "password", "path": "demo-auth/password"}]}}
                ]}},
                {"name": "instance-token", "secret": {"secretName": instance_api::token_secret(CLUSTER)}},
                {"name": "instance-tls", "secret": {"secretName": instance_api::server_secret(CLUSTER)}},
                {"name": "backup-credentials", "secret": {"secretName": BACKUP_CREDENTIALS, "optional": true}}
            ]
        });
        if let Some(backup) = restore {
            spec["initContainers"].as_array_mut().expect("init containers").push(json!({
                "name": "restore-data",
                "image": format!("{OPERATOR_REPOSITORY}:{}", self.ns.name),
                "command": ["/redis-operator", "restore", "--backup-name", backup],
                "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "backup-credentials", "mountPath": "/backup-credentials", "readOnly": true}
                ]
            }));
        }
        if let (Some(s), Some(p)) = (spec.as_object_mut(), procnode::placement().as_object()) {
            s.extend(p.clone());
        }
        obj(json!({
            "metadata": {"name": name, "labels": {"redis.io/cluster": CLUSTER, "redis.io/instance": name, "redis.io/workload": "data"}},
            "spec": spec
        }))
    }

    async fn create_pod(&self, ordinal: u8) -> Pod {
        self.create_pod_with(ordinal, None).await
    }

    async fn create_pod_with(&self, ordinal: u8, restore: Option<&str>) -> Pod {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns.name);
        pods.create(&PostParams::default(), &self.pod(ordinal, restore))
            .await
            .expect("pod");
        self.wait_pod(ordinal, "Running with an IP", |p| {
            let s = p.status.as_ref();
            s.and_then(|s| s.phase.as_deref()) == Some("Running")
                && s.and_then(|s| s.pod_ip.as_ref()).is_some()
        })
        .await
    }

    async fn wait_pod(
        &self,
        ordinal: u8,
        what: &str,
        cond: impl Fn(&Pod) -> bool + Clone + Send + 'static,
    ) -> Pod {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns.name);
        testenv::wait_for(&pods, &format!("{CLUSTER}-{ordinal}"), T, cond)
            .await
            .unwrap_or_else(|e| panic!("{CLUSTER}-{ordinal} {what}: {e:#}"))
    }

    async fn set_status(&self, v: Value) {
        Api::<RedisCluster>::namespaced(self.admin.clone(), &self.ns.name)
            .patch_status(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": v})),
            )
            .await
            .expect("status");
    }

    async fn annotate(&self, v: Value) {
        Api::<RedisCluster>::namespaced(self.admin.clone(), &self.ns.name)
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": v}})),
            )
            .await
            .expect("annotate");
    }

    fn http(&self, ip: &str) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).expect("ca"),
            )
            .resolve(
                &self.server_name(),
                std::net::SocketAddr::new(ip.parse().expect("ip"), 8080),
            )
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client")
    }

    fn server_name(&self) -> String {
        instance_api::server_name(CLUSTER, &self.ns.name)
    }

    async fn status(&self, ip: &str) -> Option<InstanceReport> {
        let resp = self
            .http(ip)
            .get(format!(
                "https://{}:8080{}",
                self.server_name(),
                redis::names::PATH_STATUS
            ))
            .bearer_auth(&self.token)
            .header(instance_api::VERSION_HEADER, instance_api::API_VERSION)
            .send()
            .await
            .ok()?;
        resp.json().await.ok()
    }

    async fn until_status(
        &self,
        ip: &str,
        what: &str,
        cond: impl Fn(&InstanceReport) -> bool,
    ) -> InstanceReport {
        match testenv::eventually(what, T, || async {
            self.status(ip).await.filter(|r| cond(r))
        })
        .await
        {
            Ok(r) => r,
            Err(e) => panic!("{e}; last status: {:#?}", self.status(ip).await),
        }
    }
}

fn ip_of(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod IP")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "redis"))
        .map_or(0, |c| c.restart_count)
}

#[tokio::test]
async fn pods_boot_as_primary_and_replica_of_the_primary_pod_ip() {
    let env = Env::new().await;
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let p0 = env.create_pod(0).await;
    let p1 = env.create_pod(1).await;
    let (ip0, ip1) = (ip_of(&p0), ip_of(&p1));
    env.until_status(&ip0, "demo-0 primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    let r1 = env
        .until_status(&ip1, "demo-1 replica", |r| {
            r.boot == Boot::Running && r.master_link_status == "up"
        })
        .await;
    assert_eq!(
        (r1.role.as_str(), r1.master_host.as_str(), r1.master_port),
        ("slave", ip0.as_str(), 6379)
    );
    // The primary starts a new replication ID when its first replica arrives: compare now.
    let r0 = env.status(&ip0).await.expect("status");
    assert_eq!(r1.replication_id, r0.replication_id);
    env.wait_pod(0, "Ready", ready).await;
    env.wait_pod(1, "Ready", ready).await;
    // The API refuses whoever has no token, and answers the operator.
    let http = env.http(&ip0);
    let url = format!(
        "https://{}:8080{}",
        env.server_name(),
        redis::names::PATH_STATUS
    );
    let resp = http
        .get(&url)
        .header(instance_api::VERSION_HEADER, instance_api::API_VERSION)
        .send()
        .await
        .expect("call");
    assert_eq!(resp.status().as_u16(), 401);
    let resp = http
        .post(format!(
            "https://{}:8080{}",
            env.server_name(),
            redis::names::PATH_DEMOTE
        ))
        .bearer_auth("guess")
        .header(instance_api::VERSION_HEADER, instance_api::API_VERSION)
        .json(&json!({"primaryIp": ip1, "primaryPort": 6379}))
        .send()
        .await
        .expect("call");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        env.status(&ip0).await.expect("status").role,
        "master",
        "nothing happened"
    );
}

#[tokio::test]
async fn a_pod_waits_for_its_primary_and_a_fenced_pod_stays_running_with_redis_down() {
    let env = Env::new().await;
    let p0 = env.create_pod(0).await;
    let ip0 = ip_of(&p0);
    // No primary named: Running, not Ready, waiting and saying why.
    let r = env
        .until_status(&ip0, "waiting", |r| matches!(&r.boot, Boot::Waiting { reason } if reason.contains("currentPrimary is empty")))
        .await;
    assert_eq!(r.role, "");
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), &env.ns.name);
    let p = pods.get("demo-0").await.expect("pod");
    assert!(!ready(&p));
    // Named: it starts and becomes Ready.
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    env.until_status(&ip0, "primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    env.wait_pod(0, "Ready", ready).await;
    let ping = [
        "redis-cli",
        "-h",
        ip0.as_str(),
        "-a",
        "pw",
        "--no-auth-warning",
        "ping",
    ];
    let (_, out) = procnode::exec(&env.admin, &env.ns.name, "demo-0", "redis", &ping)
        .await
        .expect("exec");
    assert!(
        out.contains("PONG"),
        "redis-server answers in the pod: {out}"
    );
    // Fenced: redis-server goes down, the pod stays Running and turns not Ready, no restart.
    env.annotate(json!({"redis.io/fencedInstances": "[\"demo-0\"]"}))
        .await;
    env.until_status(&ip0, "fenced", |r| {
        r.fenced && matches!(&r.boot, Boot::Waiting { reason } if reason.contains("fenced"))
    })
    .await;
    let p = env
        .wait_pod(0, "not Ready while fenced", |p| !ready(p))
        .await;
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    let (code, out) = procnode::exec(&env.admin, &env.ns.name, "demo-0", "redis", &ping)
        .await
        .expect("exec");
    assert!(
        code != 0 || !out.contains("PONG"),
        "redis-server is down while fenced: {out}"
    );
    assert_eq!(
        restarts(&pods.get("demo-0").await.expect("pod")),
        0,
        "no crash loop"
    );
    // Unfenced: back, Ready, still the same container.
    env.annotate(json!({"redis.io/fencedInstances": null}))
        .await;
    env.until_status(&ip0, "running again", |r| {
        r.boot == Boot::Running && !r.fenced
    })
    .await;
    let p = env.wait_pod(0, "Ready again", ready).await;
    assert_eq!(restarts(&p), 0);
}

#[tokio::test]
async fn a_backup_through_the_api_restores_into_a_new_primary_pod() {
    let env = Env::new().await;
    let gateway = procnode::gateway().expect("gateway").to_string();
    let s3 = support::s3_server("redis-backups", &gateway).await;
    Api::<Secret>::namespaced(env.admin.clone(), &env.ns.name)
        .create(
            &PostParams::default(),
            &secret(
                BACKUP_CREDENTIALS,
                &[
                    ("AWS_ACCESS_KEY_ID", support::AK),
                    ("AWS_SECRET_ACCESS_KEY", support::SK),
                ],
            ),
        )
        .await
        .expect("credentials");
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let ip0 = ip_of(&env.create_pod(0).await);
    env.until_status(&ip0, "primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    let mut c = redis::instance::resp::Conn::tcp(&format!("{ip0}:6379"), Duration::from_secs(5))
        .await
        .expect("connect");
    c.command(&["AUTH", "pw"]).await.expect("auth");
    for i in 0..100 {
        c.command(&["SET", &format!("k{i}"), "v"])
            .await
            .expect("set");
    }
    // The operator's call: asynchronous, then polled.
    let destination = redis::crd::BackupDestination {
        s3: Some(redis::crd::S3Destination {
            bucket: "redis-backups".into(),
            path: "demo".into(),
            endpoint: s3.endpoint.clone(),
            region: String::new(),
        }),
        azure: None,
    };
    let req = instance_api::BackupRequest {
        backup_name: "b1".into(),
        method: "rdb".into(),
        destination: destination.clone(),
    };
    let base = format!("https://{}:8080", env.server_name());
    let call = |r: reqwest::RequestBuilder| {
        r.bearer_auth(&env.token)
            .header(instance_api::VERSION_HEADER, instance_api::API_VERSION)
    };
    let resp = call(
        env.http(&ip0)
            .post(format!("{base}{}", redis::names::PATH_BACKUP))
            .json(&req),
    )
    .send()
    .await
    .expect("backup");
    assert_eq!(resp.status().as_u16(), 202);
    let done: instance_api::BackupResult =
        testenv::eventually("the backup completed", T, || async {
            let r = call(
                env.http(&ip0)
                    .get(format!("{base}{}/b1", redis::names::PATH_BACKUP)),
            )
            .send()
            .await
            .ok()?;
            let r: instance_api::BackupResult = r.json().await.ok()?;
            assert_ne!(r.phase, "Failed", "{r:?}");
            (r.phase == "Completed").then_some(r)
        })
        .await
        .expect("completed");
    assert_eq!(done.backup_path, "s3://redis-backups/demo/b1.rdb");
    assert!(s3.root.join("redis-backups/demo/b1.rdb").is_file());
    // The backup controller's record of it.
    let backups: Api<redis::crd::RedisBackup> = Api::namespaced(env.admin.clone(), &env.ns.name);
    let b: redis::crd::RedisBackup = obj(
        json!({"apiVersion": "redis.io/v1", "kind": "RedisBackup", "metadata": {"name": "b1"},
        "spec": {"clusterName": CLUSTER, "destination": destination}}),
    );
    backups
        .create(&PostParams::default(), &b)
        .await
        .expect("backup object");
    backups
        .patch_status("b1", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Completed", "backupPath": done.backup_path, "artifactType": "rdb"}})))
        .await
        .expect("backup status");
    // A new primary bootstraps from it: the restore init container, then the instance.
    env.set_status(json!({"currentPrimary": "demo-1", "targetPrimary": "demo-1"}))
        .await;
    let ip1 = ip_of(&env.create_pod_with(1, Some("b1")).await);
    env.until_status(&ip1, "restored primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    let mut c = redis::instance::resp::Conn::tcp(&format!("{ip1}:6379"), Duration::from_secs(5))
        .await
        .expect("connect");
    c.command(&["AUTH", "pw"]).await.expect("auth");
    assert_eq!(
        c.command(&["DBSIZE"]).await.expect("dbsize").int(),
        Some(100),
        "every key restored"
    );
}
