//! Data pods as the operator builds them, made by hand on the process-backed nodes (until the
//! cluster controller makes them): the init container `copy-manager` from this build's
//! operator binary registered as the operator image, container `redis` from `redis:7.2`
//! running `/controller/manager instance`, projected Secrets, the per-cluster ServiceAccount
//! and Role, HTTPS probes. The test plays the operator: it creates the Secrets (the instance
//! API's CA, serving certificate and token included), the RedisCluster and the pods, and sets
//! the status and annotations.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use redis::crd::RedisCluster;
use redis::instance_api::{self, InstanceReport};
use serde_json::{Value, json};
use testenv::TestNamespace;
use testenv::procnode::{self, ImageEntry};

/// How long a pod or instance may take to get somewhere.
pub const T: Duration = Duration::from_secs(90);
/// The cluster's name.
pub const CLUSTER: &str = "demo";
/// The repository of the operator image the pods' init containers run.
pub const OPERATOR_REPOSITORY: &str = "ghcr.io/flotilla/redis-operator";
/// The cluster's `backupCredentialsSecret`.
pub const BACKUP_CREDENTIALS: &str = "demo-backup-credentials";
/// The cluster's password.
pub const PASSWORD: &str = "pw";

/// A namespace with a RedisCluster `demo` and everything its data pods need.
pub struct Pods {
    /// An admin client.
    pub admin: Client,
    /// The namespace.
    pub ns: TestNamespace,
    /// The instance API's CA (every cluster of the namespace shares it).
    pub ca_pem: String,
    /// The instance API's token (every cluster of the namespace shares it).
    pub token: String,
    ca: redis::admission::pki::Ca,
    _image: procnode::ImageRegistration,
}

/// `v` as a typed object.
pub fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("object")
}

/// A Secret with string data.
pub fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
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

impl Pods {
    /// A fresh namespace (`prefix`-…) with the CRDs, this build's operator image, the
    /// per-cluster RBAC and Secrets, and RedisCluster `demo` (2 instances, emptyDir,
    /// `authSecret` and `backupCredentialsSecret` set; no status).
    pub async fn new(prefix: &str) -> Self {
        let admin = testenv::client().await;
        for crd in redis::crd::crds() {
            testenv::install_crd(&admin, crd).await.expect("CRD");
        }
        let ns = TestNamespace::new(&admin, prefix).await;
        let n = ns.name.clone();
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
        let ca = redis::admission::pki::Ca::generate(jiff::Timestamp::now()).expect("ca");
        let env = Self {
            admin,
            token: format!("token-{n}"),
            ns,
            ca_pem: ca.cert_pem.clone(),
            ca,
            _image: image,
        };
        env.add_cluster(CLUSTER, json!({"instances": 2})).await;
        env
    }

    /// Adds RedisCluster `cluster` (emptyDir storage, `authSecret` `demo-auth`,
    /// `backupCredentialsSecret`, and `spec`'s fields) with its ServiceAccount, Role,
    /// RoleBinding and instance API Secrets.
    pub async fn add_cluster(&self, cluster: &str, spec: Value) {
        let (admin, n, pp) = (&self.admin, self.name(), PostParams::default());
        Api::<ServiceAccount>::namespaced(admin.clone(), n)
            .create(&pp, &obj(json!({"metadata": {"name": cluster}})))
            .await
            .expect("sa");
        let role = Role {
            metadata: ObjectMeta {
                name: Some(cluster.into()),
                ..Default::default()
            },
            rules: Some(redis::instance::role_rules(cluster)),
        };
        Api::<Role>::namespaced(admin.clone(), n)
            .create(&pp, &role)
            .await
            .expect("role");
        let rb: RoleBinding = obj(json!({
            "metadata": {"name": cluster},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": cluster},
            "subjects": [{"kind": "ServiceAccount", "name": cluster, "namespace": n}]
        }));
        Api::<RoleBinding>::namespaced(admin.clone(), n)
            .create(&pp, &rb)
            .await
            .expect("rolebinding");
        let now = jiff::Timestamp::now();
        let serving =
            redis::admission::pki::issue(&self.ca, &[instance_api::server_name(cluster, n)], now)
                .expect("cert");
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), n);
        let mut all = vec![
            secret(
                &instance_api::token_secret(cluster),
                &[(instance_api::TOKEN_KEY, &self.token)],
            ),
            secret(
                &instance_api::server_secret(cluster),
                &[
                    ("tls.crt", &serving.cert_pem),
                    ("tls.key", &serving.key_pem),
                    ("ca.crt", &self.ca.cert_pem),
                ],
            ),
            secret(
                &instance_api::ca_secret(cluster),
                &[("ca.crt", &self.ca.cert_pem), ("ca.key", &self.ca.key_pem)],
            ),
        ];
        if secrets.get_opt("demo-auth").await.expect("read").is_none() {
            all.push(secret("demo-auth", &[("password", PASSWORD)]));
        }
        for s in all {
            secrets.create(&pp, &s).await.expect("secret");
        }
        let mut full = json!({"storage": {"size": "1Gi", "type": "emptyDir"},
            "authSecret": {"name": "demo-auth"},
            "backupCredentialsSecret": {"name": BACKUP_CREDENTIALS}});
        if let (Some(f), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
            f.extend(extra.clone());
        }
        let rc: RedisCluster = obj(json!({"apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": cluster}, "spec": full}));
        Api::<RedisCluster>::namespaced(admin.clone(), n)
            .create(&pp, &rc)
            .await
            .expect("cluster");
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.ns.name
    }

    /// Creates the backup credentials Secret the instances upload with.
    pub async fn backup_credentials(&self, data: &[(&str, &str)]) {
        Api::<Secret>::namespaced(self.admin.clone(), self.name())
            .create(&PostParams::default(), &secret(BACKUP_CREDENTIALS, data))
            .await
            .expect("credentials");
    }

    /// Data pod `name` of cluster `demo` as the operator builds it, labelled as workload
    /// `workload` (`data`, or `sentinel` for a pod that must never be taken for a data pod),
    /// with the bootstrap restore of `restore` when given.
    pub fn pod(&self, name: &str, workload: &str, restore: Option<&str>) -> Pod {
        self.pod_of(CLUSTER, name, workload, restore)
    }

    /// The same for cluster `cluster`.
    pub fn pod_of(&self, cluster: &str, name: &str, workload: &str, restore: Option<&str>) -> Pod {
        let field = |path: &str| json!({"valueFrom": {"fieldRef": {"fieldPath": path}}});
        let mut env = vec![json!({"name": "CLUSTER_NAME", "value": cluster})];
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
        let image = format!("{OPERATOR_REPOSITORY}:{}", self.ns.name);
        let mut spec = json!({
            "serviceAccountName": cluster,
            "terminationGracePeriodSeconds": 30,
            "initContainers": [{
                "name": "copy-manager",
                "image": image,
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
                {"name": "instance-token", "secret": {"secretName": instance_api::token_secret(cluster)}},
                {"name": "instance-tls", "secret": {"secretName": instance_api::server_secret(cluster)}},
                {"name": "backup-credentials", "secret": {"secretName": BACKUP_CREDENTIALS, "optional": true}}
            ]
        });
        if let Some(backup) = restore {
            spec["initContainers"]
                .as_array_mut()
                .expect("init containers")
                .push(json!({
                    "name": "restore-data",
                    "image": image,
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
            "metadata": {"name": name, "labels": {"redis.io/cluster": cluster, "redis.io/instance": name, "redis.io/workload": workload}},
            "spec": spec
        }))
    }

    /// Creates data pod `<cluster>-<ordinal>` and waits until it runs with an IP.
    pub async fn create_pod(&self, ordinal: u8) -> Pod {
        self.create(&format!("{CLUSTER}-{ordinal}"), "data", None)
            .await
    }

    /// Creates pod `name` of cluster `demo` ([`Pods::pod`]) and waits until it runs with an
    /// IP.
    pub async fn create(&self, name: &str, workload: &str, restore: Option<&str>) -> Pod {
        self.create_of(CLUSTER, name, workload, restore).await
    }

    /// The same for cluster `cluster`.
    pub async fn create_of(
        &self,
        cluster: &str,
        name: &str,
        workload: &str,
        restore: Option<&str>,
    ) -> Pod {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns.name);
        pods.create(
            &PostParams::default(),
            &self.pod_of(cluster, name, workload, restore),
        )
        .await
        .expect("pod");
        self.wait_pod(name, "Running with an IP", |p| {
            let s = p.status.as_ref();
            s.and_then(|s| s.phase.as_deref()) == Some("Running")
                && s.and_then(|s| s.pod_ip.as_ref()).is_some()
        })
        .await
    }

    /// Waits until pod `name` satisfies `cond`.
    pub async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        cond: impl Fn(&Pod) -> bool + Clone + Send + 'static,
    ) -> Pod {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns.name);
        testenv::wait_for(&pods, name, T, cond)
            .await
            .unwrap_or_else(|e| panic!("{name} {what}: {e:#}"))
    }

    /// Merges `v` into the status of RedisCluster `demo`.
    pub async fn set_status(&self, v: Value) {
        self.set_status_of(CLUSTER, v).await
    }

    /// Merges `v` into the status of RedisCluster `cluster`.
    pub async fn set_status_of(&self, cluster: &str, v: Value) {
        Api::<RedisCluster>::namespaced(self.admin.clone(), &self.ns.name)
            .patch_status(
                cluster,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": v})),
            )
            .await
            .expect("status");
    }

    /// Merges `v` into the RedisCluster's annotations.
    pub async fn annotate(&self, v: Value) {
        Api::<RedisCluster>::namespaced(self.admin.clone(), &self.ns.name)
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": v}})),
            )
            .await
            .expect("annotate");
    }

    /// An HTTPS client of the instance of `demo` at `ip`, trusting the cluster CA for its
    /// name.
    pub fn http(&self, ip: &str) -> reqwest::Client {
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

    /// The instances' certificate name.
    pub fn server_name(&self) -> String {
        instance_api::server_name(CLUSTER, &self.ns.name)
    }

    /// `GET /v1/status` of the instance at `ip`.
    pub async fn status(&self, ip: &str) -> Option<InstanceReport> {
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

    /// Waits until the instance at `ip` reports what `cond` wants.
    pub async fn until_status(
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

/// The pod's IP.
pub fn ip_of(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod IP")
}

/// Whether the pod is Ready.
pub fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The `redis` container's restarts.
pub fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "redis"))
        .map_or(0, |c| c.restart_count)
}
