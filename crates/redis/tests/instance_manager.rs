//! The instance manager as a whole, on the local plane: each test runs real instance managers
//! in this process (each with its own loopback IP standing for its pod IP, its own data and
//! projected-secret directories, and a real redis-server child), under the per-cluster
//! ServiceAccount and Role the operator gives them ([`redis::instance::role_rules`]). The test
//! plays the operator: it creates the RedisCluster, sets its status and annotations, creates
//! the Pod objects whose IPs the managers resolve, and talks to the managers' HTTPS API.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use redis::crd::RedisCluster;
use redis::instance::resp::{Conn, RespError};
use redis::instance::{InstanceFlags, Settings, manager};
use redis::instance_api::{self, Boot, InstanceReport};
use serde_json::{Value, json};
use testenv::TestNamespace;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const T: Duration = Duration::from_secs(60);
const CLUSTER: &str = "demo";
static SEQ: AtomicU64 = AtomicU64::new(1);

/// A test's cluster: namespace, RBAC, PKI, token.
struct Env {
    admin: Client,
    sa: Client,
    ns: TestNamespace,
    dir: PathBuf,
    redis_port: u16,
    http_port: u16,
    net: (u8, u8),
    ca_pem: String,
    token: String,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("object")
}

impl Env {
    async fn new(spec: Value) -> Self {
        testenv::procnode::ensure_host_packages().expect("redis-tools (the Redis server)");
        testenv::capture_logs("info,kube=warn,hyper=warn");
        let admin = testenv::client().await;
        for crd in redis::crd::crds() {
            testenv::install_crd(&admin, crd).await.expect("CRD");
        }
        let ns = TestNamespace::new(&admin, "redis-inst").await;
        let n = &ns.name;
        let pp = PostParams::default();
        Api::<ServiceAccount>::namespaced(admin.clone(), n)
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
        Api::<Role>::namespaced(admin.clone(), n)
            .create(&pp, &role)
            .await
            .expect("role");
        let rb: RoleBinding = obj(json!({
            "metadata": {"name": CLUSTER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLUSTER},
            "subjects": [{"kind": "ServiceAccount", "name": CLUSTER, "namespace": n}]
        }));
        Api::<RoleBinding>::namespaced(admin.clone(), n)
            .create(&pp, &rb)
            .await
            .expect("rolebinding");
        let sa = testenv::service_account_client(&admin, n, CLUSTER)
            .await
            .expect("sa client");
        let mut full = json!({"storage": {"size": "1Gi"}, "instances": 3, "authSecret": {"name": "demo-auth"}});
        if let (Some(f), Some(e)) = (full.as_object_mut(), spec.as_object()) {
            f.extend(e.clone());
        }
        let rc: RedisCluster = obj(json!({"apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": CLUSTER}, "spec": full}));
        Api::<RedisCluster>::namespaced(admin.clone(), n)
            .create(&pp, &rc)
            .await
            .expect("cluster");
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("rim-{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let now = jiff::Timestamp::now();
        let ca = redis::admission::pki::Ca::generate(now).expect("ca");
        let net = (
            u8::try_from(100 + std::process::id() % 100).unwrap_or(100),
            u8::try_from(seq % 250).unwrap_or(1),
        );
        let env = Self {
            admin,
            sa,
            ns,
            dir,
            redis_port: testenv::process::free_port().expect("port"),
            http_port: testenv::process::free_port().expect("port"),
            net,
            ca_pem: ca.cert_pem.clone(),
            token: format!("token-{seq}-{}", std::process::id()),
        };
        let serving = redis::admission::pki::issue(
            &ca,
            &[instance_api::server_name(CLUSTER, &env.ns.name)],
            now,
        )
        .expect("cert");
        std::fs::create_dir_all(env.dir.join("api-tls")).expect("tls dir");
        std::fs::write(env.dir.join("api-tls/tls.crt"), &serving.cert_pem).expect("crt");
        std::fs::write(env.dir.join("api-tls/tls.key"), &serving.key_pem).expect("key");
        std::fs::write(env.dir.join("api-tls/ca.crt"), &ca.cert_pem).expect("ca");
        std::fs::create_dir_all(env.dir.join("token")).expect("token dir");
        std::fs::write(env.dir.join("token/token"), &env.token).expect("token");
        env
    }

    fn ip(&self, ordinal: u8) -> IpAddr {
        IpAddr::from([127, self.net.0, self.net.1, ordinal + 1])
    }

    fn clusters(&self) -> Api<RedisCluster> {
        Api::namespaced(self.admin.clone(), &self.ns.name)
    }

    async fn patch_cluster(&self, v: Value) {
        self.clusters()
            .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(v))
            .await
            .expect("patch cluster");
    }

    async fn set_status(&self, v: Value) {
        self.clusters()
            .patch_status(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": v})),
            )
            .await
            .expect("patch status");
    }

    /// The Pod object of instance `ordinal`, with its IP (no kubelet runs it: the test process
    /// does).
    async fn pod(&self, ordinal: u8) {
        let name = format!("{CLUSTER}-{ordinal}");
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns.name);
        let pod: Pod = obj(
            json!({"metadata": {"name": name, "labels": {"redis.io/cluster": CLUSTER, "redis.io/workload": "data"}},
            "spec": {"nodeSelector": {"flotilla.dev/nowhere": "true"}, "containers": [{"name": "redis", "image": "redis:7.2"}]}}),
        );
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("pod");
        let ip = self.ip(ordinal).to_string();
        pods.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}})),
        )
        .await
        .expect("pod ip");
    }

    fn password(&self, ordinal: u8, pw: &str) {
        let d = self.dir.join(format!("i{ordinal}/projected/demo-auth"));
        std::fs::create_dir_all(&d).expect("projected");
        // As the kubelet does: a new file swapped in, never a half-written one.
        std::fs::write(d.join("password.tmp"), pw).expect("write");
        std::fs::rename(d.join("password.tmp"), d.join("password")).expect("swap");
    }

    fn settings(&self, ordinal: u8) -> Settings {
        let i = self.dir.join(format!("i{ordinal}"));
        let flags = InstanceFlags {
            role: redis::instance::InstanceRole::Data,
            cluster_name: CLUSTER.into(),
            pod_name: format!("{CLUSTER}-{ordinal}"),
            pod_namespace: self.ns.name.clone(),
            pod_ip: self.ip(ordinal),
            redis_port: self.redis_port,
            http_port: self.http_port,
            shutdown_grace: 10,
            redis_server: "/usr/bin/redis-check-rdb".into(),
            data_dir: i.join("data"),
            socket: i.join("redis.sock"),
            projected_dir: i.join("projected"),
            tls_dir: i.join("tls"),
            token_dir: self.dir.join("token"),
            api_tls_dir: self.dir.join("api-tls"),
            backup_credentials_dir: i.join("backup-credentials"),
            resync: 1,
            log_format: kit::telemetry::LogFormat::Text,
            log_level: None,
        };
        flags.settings().expect("settings")
    }

    fn start(&self, ordinal: u8) -> Instance {
        let stop = CancellationToken::new();
        let run = manager::run(self.settings(ordinal), self.sa.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let result = run.await;
            if let Err(e) = &result {
                // Shown with a failing test: a manager that ended explains a silent API.
                eprintln!("instance manager {CLUSTER}-{ordinal} ended: {e:#}");
            }
            result
        });
        Instance {
            ordinal,
            stop,
            task: Some(task),
        }
    }

    fn http(&self, ordinal: u8) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).expect("ca"),
            )
            .resolve(
                &self.server_name(),
                std::net::SocketAddr::new(self.ip(ordinal), self.http_port),
            )
            .timeout(Duration::from_secs(20))
            .build()
            .expect("http client")
    }

    fn server_name(&self) -> String {
        instance_api::server_name(CLUSTER, &self.ns.name)
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", self.server_name(), self.http_port)
    }

    /// An authenticated API call.
    async fn call(
        &self,
        ordinal: u8,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, String), String> {
        let mut req = self
            .http(ordinal)
            .request(method, self.url(path))
            .bearer_auth(&self.token)
            .header(instance_api::VERSION_HEADER, instance_api::API_VERSION);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let code = resp.status().as_u16();
        Ok((code, resp.text().await.unwrap_or_default()))
    }

    async fn status(&self, ordinal: u8) -> Option<InstanceReport> {
        match self
            .call(
                ordinal,
                reqwest::Method::GET,
                redis::names::PATH_STATUS,
                None,
            )
            .await
        {
            Ok((200, body)) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }

    async fn until_status(
        &self,
        ordinal: u8,
        what: &str,
        cond: impl Fn(&InstanceReport) -> bool,
    ) -> InstanceReport {
        match testenv::eventually(what, T, || async {
            self.status(ordinal).await.filter(|r| cond(r))
        })
        .await
        {
            Ok(r) => r,
            Err(e) => panic!("{e}; last status: {:#?}", self.status(ordinal).await),
        }
    }

    async fn probe(&self, ordinal: u8, path: &str) -> (u16, String) {
        let resp = self
            .http(ordinal)
            .get(self.url(path))
            .send()
            .await
            .expect("probe");
        (
            resp.status().as_u16(),
            resp.text().await.unwrap_or_default(),
        )
    }

    async fn redis(&self, ordinal: u8, pw: &str) -> Result<Conn, RespError> {
        let mut c = Conn::tcp(
            &format!("{}:{}", self.ip(ordinal), self.redis_port),
            Duration::from_secs(3),
        )
        .await?;
        c.command(&["AUTH", pw]).await?;
        Ok(c)
    }
}

struct Instance {
    ordinal: u8,
    stop: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Instance {
    /// SIGTERM: the graceful stop.
    async fn terminate(mut self) -> anyhow::Result<()> {
        self.stop.cancel();
        let task = self.task.take().expect("running");
        tokio::time::timeout(T, task)
            .await
            .expect("stopped in time")
            .expect("task")
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = self.ordinal;
    }
}

fn promote(id: &str) -> Value {
    serde_json::to_value(instance_api::PromoteRequest {
        expected_replication_id: id.into(),
        min_offset: 0,
    })
    .expect("json")
}

fn running(r: &InstanceReport) -> bool {
    r.boot == Boot::Running
}

fn waiting_for(r: &InstanceReport, words: &str) -> bool {
    matches!(&r.boot, Boot::Waiting { reason } if reason.contains(words))
}

#[tokio::test]
async fn a_replica_boots_following_the_primarys_pod_ip_and_the_primary_unknown_waits() {
    let env = Env::new(json!({})).await;
    for i in 0..2 {
        env.pod(i).await;
        env.password(i, "pw");
    }
    // No currentPrimary yet: neither starts; both say why and stay live.
    let _a = env.start(0);
    let _b = env.start(1);
    env.until_status(0, "demo-0 waiting for a primary", |r| {
        waiting_for(r, "currentPrimary is empty")
    })
    .await;
    env.until_status(1, "demo-1 waiting for a primary", |r| {
        waiting_for(r, "currentPrimary is empty")
    })
    .await;
    assert_eq!(
        env.probe(0, "/healthz").await.0,
        200,
        "a waiting instance is live"
    );
    let (code, why) = env.probe(0, "/readyz").await;
    assert_eq!(code, 503);
    assert!(why.contains("currentPrimary is empty"), "{why}");
    assert!(
        env.redis(0, "pw").await.is_err(),
        "redis-server is not running"
    );
    // The operator names the primary: demo-0 starts as primary, demo-1 as its replica.
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    env.until_status(0, "demo-0 primary", |r| running(r) && r.role == "master")
        .await;
    let r = env
        .until_status(1, "demo-1 replica", |r| {
            running(r) && r.master_link_status == "up"
        })
        .await;
    assert_eq!(
        (r.role.as_str(), r.master_host.as_str(), r.master_port),
        ("slave", env.ip(0).to_string().as_str(), env.redis_port)
    );
    // The primary starts a new replication ID when its first replica arrives: compare now.
    let p = env.status(0).await.expect("status");
    assert_eq!(r.replication_id, p.replication_id);
    assert_eq!(env.probe(1, "/readyz").await.0, 200);
    // The password was there from the first moment; the wrong one is refused.
    assert!(env.redis(0, "nope").await.unwrap_err().is_auth());
    let mut c = env.redis(0, "pw").await.expect("client");
    c.command(&["SET", "k", "v"]).await.expect("write");
}

#[tokio::test]
async fn a_replica_whose_primary_pod_is_missing_waits_and_never_self_elects() {
    let env = Env::new(json!({})).await;
    env.pod(1).await;
    env.password(1, "pw");
    env.set_status(json!({"currentPrimary": "demo-0"})).await;
    let _b = env.start(1);
    let r = env
        .until_status(1, "demo-1 waiting", |r| waiting_for(r, "does not exist"))
        .await;
    assert_eq!(r.role, "");
    assert!(env.redis(1, "pw").await.is_err());
    // The primary's pod appears (and starts): the replica follows it.
    env.pod(0).await;
    env.password(0, "pw");
    let _a = env.start(0);
    env.until_status(1, "demo-1 replicating", |r| {
        running(r) && r.master_link_status == "up"
    })
    .await;
}

#[tokio::test]
async fn fencing_keeps_redis_down_with_the_manager_up_and_unfencing_restarts_it() {
    let env = Env::new(json!({})).await;
    env.pod(0).await;
    env.password(0, "pw");
    env.set_status(json!({"currentPrimary": "demo-0"})).await;
    let _a = env.start(0);
    env.until_status(0, "running", |r| running(r) && r.role == "master")
        .await;
    let mut c = env.redis(0, "pw").await.expect("client");
    c.command(&["SET", "before-fence", "1"])
        .await
        .expect("write");
    env.patch_cluster(
        json!({"metadata": {"annotations": {"redis.io/fencedInstances": "[\"demo-0\"]"}}}),
    )
    .await;
    let r = env
        .until_status(0, "fenced and down", |r| {
            r.fenced && waiting_for(r, "fenced")
        })
        .await;
    assert_eq!(r.role, "");
    assert!(env.redis(0, "pw").await.is_err(), "redis-server is down");
    assert_eq!(env.probe(0, "/healthz").await.0, 200, "the pod stays live");
    let (code, why) = env.probe(0, "/readyz").await;
    assert_eq!(code, 503);
    assert!(why.contains("fenced"), "{why}");
    // Still fenced after a while: it does not come back by itself (no crash loop).
    let (code, _) = env
        .call(
            0,
            reqwest::Method::POST,
            redis::names::PATH_PROMOTE,
            Some(promote("")),
        )
        .await
        .expect("promote call");
    assert_eq!(code, 409, "a fenced instance refuses promotion");
    // The wildcard fences too; then unfencing brings it back with its data.
    env.patch_cluster(
        json!({"metadata": {"annotations": {"redis.io/fencedInstances": "[\"*\"]"}}}),
    )
    .await;
    env.until_status(0, "still fenced", |r| r.fenced).await;
    env.patch_cluster(json!({"metadata": {"annotations": {"redis.io/fencedInstances": "[]"}}}))
        .await;
    env.until_status(0, "running again", |r| {
        running(r) && !r.fenced && r.role == "master"
    })
    .await;
    let mut c = env.redis(0, "pw").await.expect("client");
    assert_eq!(
        c.command(&["GET", "before-fence"])
            .await
            .expect("get")
            .text()
            .as_deref(),
        Some("1")
    );
}

#[tokio::test]
async fn the_api_refuses_unauthenticated_and_unversioned_requests() {
    let env = Env::new(json!({})).await;
    env.pod(0).await;
    env.password(0, "pw");
    let _a = env.start(0);
    env.until_status(0, "answering", |_| true).await;
    let http = env.http(0);
    let status_url = env.url(redis::names::PATH_STATUS);
    let promote_url = env.url(redis::names::PATH_PROMOTE);
    let body = promote("x");
    let v = (instance_api::VERSION_HEADER, instance_api::API_VERSION);
    let cases: Vec<(&str, reqwest::RequestBuilder, u16)> = vec![
        ("no token", http.get(&status_url).header(v.0, v.1), 401),
        (
            "wrong token",
            http.get(&status_url).bearer_auth("guess").header(v.0, v.1),
            401,
        ),
        (
            "no token, promote",
            http.post(&promote_url).json(&body).header(v.0, v.1),
            401,
        ),
        (
            "no token, delete a backup's artifact",
            http.delete(env.url(&format!("{}/b1", redis::names::PATH_BACKUP)))
                .json(&json!({"backupName": "b1", "method": "rdb",
                    "destination": {"s3": {"bucket": "bk"}}}))
                .header(v.0, v.1),
            401,
        ),
        (
            "no version",
            http.get(&status_url).bearer_auth(&env.token),
            409,
        ),
        (
            "other version",
            http.get(&status_url)
                .bearer_auth(&env.token)
                .header(v.0, "0"),
            409,
        ),
        (
            "authenticated",
            http.get(&status_url)
                .bearer_auth(&env.token)
                .header(v.0, v.1),
            200,
        ),
    ];
    for (case, req, want) in cases {
        let resp = req.send().await.expect(case);
        assert_eq!(resp.status().as_u16(), want, "{case}");
        assert_eq!(
            resp.headers().get(v.0).and_then(|h| h.to_str().ok()),
            Some(v.1),
            "{case}: version header"
        );
    }
    // Deleting a backup's artifact: only the key of the backup the path names, and only with
    // the projected credentials (none here: refused, saying so).
    let delete = |name: &str| {
        json!({"backupName": name, "method": "rdb",
            "destination": {"s3": {"bucket": "bk", "endpoint": "http://127.0.0.1:9"}}})
    };
    let path = format!("{}/b1", redis::names::PATH_BACKUP);
    let (code, text) = env
        .call(0, reqwest::Method::DELETE, &path, Some(delete("b2")))
        .await
        .expect("delete");
    assert_eq!(code, 400, "{text}");
    let (code, text) = env
        .call(0, reqwest::Method::DELETE, &path, Some(delete("b1")))
        .await
        .expect("delete");
    let r: instance_api::CommandResult = serde_json::from_str(&text).expect(&text);
    assert_eq!(code, 409, "{text}");
    assert!(
        !r.done && r.message.contains("must include an AWS access key"),
        "{r:?}"
    );
    // The certificate names the cluster: a client expecting another name refuses it.
    let other = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(env.ca_pem.as_bytes()).expect("ca"))
        .resolve(
            "other.instances.redis.io",
            std::net::SocketAddr::new(env.ip(0), env.http_port),
        )
        .build()
        .expect("client");
    let err = other
        .get(format!(
            "https://other.instances.redis.io:{}/healthz",
            env.http_port
        ))
        .send()
        .await;
    assert!(
        err.is_err(),
        "the certificate is only valid for the cluster's server name"
    );
    // A rotated token works from the next request, and the old one no longer does.
    std::fs::write(env.dir.join("token/token"), "rotated").expect("rotate");
    let resp = http
        .get(&status_url)
        .bearer_auth("rotated")
        .header(v.0, v.1)
        .send()
        .await
        .expect("rotated");
    assert_eq!(resp.status().as_u16(), 200);
    let resp = http
        .get(&status_url)
        .bearer_auth(&env.token)
        .header(v.0, v.1)
        .send()
        .await
        .expect("old");
    assert_eq!(resp.status().as_u16(), 401);
}

#[tokio::test]
async fn roles_follow_the_status_and_operator_commands_are_not_undone() {
    let env = Env::new(json!({})).await;
    for i in 0..2 {
        env.pod(i).await;
        env.password(i, "pw");
    }
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let _a = env.start(0);
    let _b = env.start(1);
    env.until_status(1, "replica up", |r| {
        running(r) && r.master_link_status == "up"
    })
    .await;
    let replid = env.status(1).await.expect("status").replication_id;
    // A promotion with the wrong lineage is refused; with the right one it happens.
    let (code, _) = env
        .call(
            1,
            reqwest::Method::POST,
            redis::names::PATH_PROMOTE,
            Some(promote("not-it")),
        )
        .await
        .expect("call");
    assert_eq!(code, 409);
    let (code, body) = env
        .call(
            1,
            reqwest::Method::POST,
            redis::names::PATH_PROMOTE,
            Some(promote(&replid)),
        )
        .await
        .expect("call");
    assert_eq!(code, 200, "{body}");
    // The cluster status still names demo-0 (the operator has not written yet): demo-1 keeps
    // its promotion over several passes of its loop.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1100)).await; // three resync periods of 1 s
        assert_eq!(
            env.status(1).await.expect("status").role,
            "master",
            "the promotion is not undone"
        );
    }
    // Idempotent: promoting again is "already primary".
    let (code, body) = env
        .call(
            1,
            reqwest::Method::POST,
            redis::names::PATH_PROMOTE,
            Some(promote(&replid)),
        )
        .await
        .expect("call");
    assert_eq!(code, 200, "{body}");
    // The operator finishes the handoff: demo-0 follows demo-1 by itself, its clients killed.
    let mut old_client = env.redis(0, "pw").await.expect("client of demo-0");
    env.set_status(json!({"currentPrimary": "demo-1", "targetPrimary": "demo-1"}))
        .await;
    let r = env
        .until_status(0, "demo-0 follows demo-1", |r| {
            r.role == "slave" && r.master_link_status == "up"
        })
        .await;
    assert_eq!(r.master_host, env.ip(1).to_string());
    assert!(
        old_client.command(&["PING"]).await.is_err(),
        "clients of the demoted primary were disconnected"
    );
    // A planned switchover back, through the API, with a writer that waits for its
    // acknowledgements: none is lost.
    let mut w = env.redis(1, "pw").await.expect("client of demo-1");
    for i in 0..100 {
        w.command(&["SET", &format!("k{i}"), "v"])
            .await
            .expect("write");
    }
    assert_eq!(
        w.command(&["WAIT", "1", "5000"]).await.expect("wait").int(),
        Some(1)
    );
    env.set_status(json!({"targetPrimary": "demo-0"})).await;
    let body = serde_json::to_value(instance_api::SwitchoverRequest {
        target_ip: env.ip(0).to_string(),
        target_port: env.redis_port,
        timeout_ms: 5000,
    })
    .expect("json");
    let (code, text) = env
        .call(
            1,
            reqwest::Method::POST,
            redis::names::PATH_SWITCHOVER,
            Some(body),
        )
        .await
        .expect("call");
    assert_eq!(code, 200, "{text}");
    env.set_status(json!({"currentPrimary": "demo-0"})).await;
    env.until_status(0, "demo-0 primary again", |r| r.role == "master")
        .await;
    env.until_status(1, "demo-1 replica again", |r| {
        r.role == "slave" && r.master_link_status == "up"
    })
    .await;
    let mut c = env.redis(0, "pw").await.expect("client");
    assert_eq!(
        c.command(&["DBSIZE"]).await.expect("dbsize").int(),
        Some(100)
    );
}

#[tokio::test]
async fn a_password_rotation_is_applied_live_on_every_instance() {
    let env = Env::new(json!({})).await;
    for i in 0..2 {
        env.pod(i).await;
        env.password(i, "old-password");
    }
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let _a = env.start(0);
    let _b = env.start(1);
    env.until_status(1, "replica up", |r| {
        running(r) && r.master_link_status == "up"
    })
    .await;
    let gen_old = env.status(0).await.expect("status").auth_generation;
    // The kubelet updates the primary's projected Secret first.
    env.password(0, "new-password");
    env.until_status(0, "the primary on the new password", |r| {
        r.auth_generation != gen_old
    })
    .await;
    // Both passwords work on the primary while the replica has not seen the new one.
    env.redis(0, "new-password")
        .await
        .expect("new password accepted");
    env.redis(0, "old-password")
        .await
        .expect("old password still accepted");
    // Then the replica's.
    env.password(1, "new-password");
    let gen_new = env.status(0).await.expect("status").auth_generation;
    env.until_status(1, "the replica on the new password", |r| {
        r.auth_generation == gen_new
    })
    .await;
    // Every instance on the new password: the old one is retired everywhere.
    testenv::eventually("the old password refused", T, || async {
        let refused = |r: Result<Conn, RespError>| matches!(r, Err(e) if e.is_auth());
        (refused(env.redis(0, "old-password").await) && refused(env.redis(1, "old-password").await))
            .then_some(())
    })
    .await
    .expect("retired");
    // Replication never stopped and the instance managers still reach Redis.
    let r = env.status(1).await.expect("status");
    assert_eq!(r.master_link_status, "up");
    let mut w = env.redis(0, "new-password").await.expect("client");
    w.command(&["SET", "after-rotation", "1"])
        .await
        .expect("write");
    assert_eq!(
        w.command(&["WAIT", "1", "5000"]).await.expect("wait").int(),
        Some(1)
    );
}

#[tokio::test]
async fn spec_changes_apply_live_and_sigterm_stops_gracefully() {
    let env = Env::new(json!({"redis": {"maxmemory-samples": "7"}})).await;
    env.pod(0).await;
    env.password(0, "pw");
    env.set_status(json!({"currentPrimary": "demo-0"})).await;
    let a = env.start(0);
    env.until_status(0, "running", |r| running(r) && r.role == "master")
        .await;
    let mut c = env.redis(0, "pw").await.expect("client");
    let get = |v: redis::instance::resp::Value| match v {
        redis::instance::resp::Value::Array(Some(items)) => {
            items.get(1).and_then(|v| v.text()).unwrap_or_default()
        }
        _ => String::new(),
    };
    assert_eq!(
        get(c
            .command(&["CONFIG", "GET", "maxmemory-samples"])
            .await
            .expect("get")),
        "7"
    );
    env.patch_cluster(
        json!({"spec": {"redis": {"maxmemory-samples": "9"}, "memory": {"maxMemory": "64Mi"}}}),
    )
    .await;
    testenv::eventually("maxmemory applied", T, || async {
        let mut c = env.redis(0, "pw").await.ok()?;
        let samples = get(c
            .command(&["CONFIG", "GET", "maxmemory-samples"])
            .await
            .ok()?);
        let max = get(c.command(&["CONFIG", "GET", "maxmemory"]).await.ok()?);
        (samples == "9" && max == "67108864").then_some(())
    })
    .await
    .expect("live config");
    // The metrics see it.
    let (code, text) = env.probe(0, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        text.contains("redis_maxmemory_bytes{") && text.contains("} 67108864"),
        "{text}"
    );
    assert!(text.contains("redis_fenced{") && text.contains("redis_up{"));
    c.command(&["SET", "k", "v"]).await.expect("write");
    // SIGTERM: a graceful SHUTDOWN (the data is saved) and a clean exit of the manager.
    let started = std::time::Instant::now();
    a.terminate().await.expect("clean exit");
    // The grace is 10 s (SIGKILL at its end); a few seconds more for the manager to wind
    // down on a loaded machine.
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "stopped within the grace period: {took:?}"
    );
    assert!(env.redis(0, "pw").await.is_err());
    let data = env.settings(0).paths.data_dir;
    assert!(
        data.join("appendonlydir").is_dir() && data.join("dump.rdb").is_file(),
        "persisted on shutdown"
    );
    assert!(Path::new(&data).join("redis.conf").is_file());
}

/// A TLS connection to instance `ordinal`'s Redis port, trusting only `ca_pem`.
async fn tls_redis(env: &Env, ordinal: u8, ca_pem: &str, pw: &str) -> Result<Conn, String> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect((env.ip(ordinal), env.redis_port))
        .await
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(ServerName::IpAddress(env.ip(ordinal).into()), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut c = Conn::over(tls, Duration::from_secs(3));
    c.command(&["AUTH", pw]).await.map_err(|e| e.to_string())?;
    Ok(c)
}

/// A certificate for `ip` signed by `ca`, usable by a server and, for replication, as a client.
fn issue_for_redis(ca: &redis::admission::pki::Ca, ip: IpAddr) -> (String, String) {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::from_pem(&ca.key_pem).expect("ca key");
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).expect("issuer");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.subject_alt_names = vec![SanType::IpAddress(ip)];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

fn write_tls(env: &Env, ordinal: u8, ca: &redis::admission::pki::Ca) {
    let (crt, key) = issue_for_redis(ca, env.ip(ordinal));
    let d = env.dir.join(format!("i{ordinal}/tls"));
    std::fs::create_dir_all(&d).expect("tls dir");
    for (f, v) in [
        ("tls.crt", &crt),
        ("tls.key", &key),
        ("ca.crt", &ca.cert_pem),
    ] {
        std::fs::write(d.join(format!("{f}.tmp")), v).expect("write");
        std::fs::rename(d.join(format!("{f}.tmp")), d.join(f)).expect("swap");
    }
}

#[tokio::test]
async fn tls_replication_and_a_certificate_rotation_without_restart() {
    let env =
        Env::new(json!({"tlsSecret": {"name": "redis-tls"}, "caSecret": {"name": "redis-ca"}}))
            .await;
    let ca1 = redis::admission::pki::Ca::generate(jiff::Timestamp::now()).expect("ca");
    for i in 0..2 {
        env.pod(i).await;
        env.password(i, "pw");
        write_tls(&env, i, &ca1);
    }
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let _a = env.start(0);
    let _b = env.start(1);
    // Replication runs over TLS, verified against the CA.
    env.until_status(1, "replica over TLS", |r| {
        running(r) && r.master_link_status == "up"
    })
    .await;
    let mut c = tls_redis(&env, 0, &ca1.cert_pem, "pw")
        .await
        .expect("TLS client");
    c.command(&["SET", "k", "v"]).await.expect("write");
    assert!(env.redis(0, "pw").await.is_err(), "no plain-text port");
    // New certificates from another CA: served from the next handshake, no restart.
    let ca2 = redis::admission::pki::Ca::generate(jiff::Timestamp::now()).expect("ca2");
    write_tls(&env, 0, &ca2);
    testenv::eventually("the new certificate served", T, || async {
        tls_redis(&env, 0, &ca2.cert_pem, "pw").await.ok().map(drop)
    })
    .await
    .expect("rotated");
    assert!(
        tls_redis(&env, 0, &ca1.cert_pem, "pw").await.is_err(),
        "the old chain is gone"
    );
    let mut c = tls_redis(&env, 0, &ca2.cert_pem, "pw")
        .await
        .expect("client");
    assert_eq!(
        c.command(&["GET", "k"])
            .await
            .expect("get")
            .text()
            .as_deref(),
        Some("v"),
        "same process, same data"
    );
}

#[tokio::test]
async fn replica_mode_follows_the_source_and_the_leader_promotes() {
    let env = Env::new(json!({})).await;
    // The external source: a plain Redis with its own password.
    let src_dir = env.dir.join("source");
    std::fs::create_dir_all(&src_dir).expect("dir");
    let src_ip = env.ip(200);
    std::fs::write(
        src_dir.join("redis.conf"),
        format!(
            "bind {src_ip}\nport {}\nrequirepass srcpw\ndir {}\nsave \"\"\nunixsocket {}/s.sock\n",
            env.redis_port,
            src_dir.display(),
            src_dir.display()
        ),
    )
    .expect("conf");
    let mut src = redis::instance::process::spawn(
        std::path::Path::new("/usr/bin/redis-check-rdb"),
        &src_dir.join("redis.conf"),
    )
    .expect("source");
    let src_local =
        redis::instance::local::Local::new(src_dir.join("s.sock"), vec!["srcpw".into()]);
    testenv::eventually("the source", T, || async { src_local.ping().await.ok() })
        .await
        .expect("source up");
    src_local
        .command(&["SET".into(), "from-source".into(), "1".into()])
        .await
        .expect("write");
    env.patch_cluster(json!({"spec": {"replicaMode": {"enabled": true, "source": {"host": src_ip.to_string(), "port": env.redis_port, "authSecretName": "source-auth"}}}})).await;
    env.pod(0).await;
    env.password(0, "pw");
    let d = env.dir.join("i0/projected/source-auth");
    std::fs::create_dir_all(&d).expect("dir");
    std::fs::write(d.join("password"), "srcpw").expect("source password");
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let _a = env.start(0);
    let r = env
        .until_status(0, "following the source", |r| {
            running(r) && r.master_link_status == "up"
        })
        .await;
    assert_eq!(r.master_host, src_ip.to_string());
    let mut c = env.redis(0, "pw").await.expect("local password");
    assert_eq!(
        c.command(&["GET", "from-source"])
            .await
            .expect("get")
            .text()
            .as_deref(),
        Some("1")
    );
    // Promote: the designated leader leaves the source and takes writes.
    env.patch_cluster(json!({"spec": {"replicaMode": {"promote": true}}}))
        .await;
    env.until_status(0, "promoted", |r| r.role == "master")
        .await;
    let mut c = env.redis(0, "pw").await.expect("client");
    c.command(&["SET", "after-promotion", "1"])
        .await
        .expect("writes accepted");
    src.stop(&src_local, Duration::from_secs(10))
        .await
        .expect("stop source");
}

#[tokio::test]
async fn an_acl_secret_keeps_the_default_user_protected_and_reloads_live() {
    let env = Env::new(json!({"aclConfigSecret": {"name": "acl"}})).await;
    env.pod(0).await;
    env.password(0, "pw");
    let acl = |rules: &str| {
        let d = env.dir.join("i0/projected/acl");
        std::fs::create_dir_all(&d).expect("dir");
        std::fs::write(d.join("acl.tmp"), rules).expect("w");
        std::fs::rename(d.join("acl.tmp"), d.join("acl")).expect("swap");
    };
    acl("user app on >apppw ~app:* +@all\n");
    env.set_status(json!({"currentPrimary": "demo-0"})).await;
    let _a = env.start(0);
    env.until_status(0, "running", |r| running(r) && r.role == "master")
        .await;
    assert!(
        env.redis(0, "wrong").await.unwrap_err().is_auth(),
        "the default user has a password"
    );
    env.redis(0, "pw")
        .await
        .expect("the default user's password");
    let app = |pw: &'static str| {
        let env = &env;
        async move {
            let mut c = Conn::tcp(
                &format!("{}:{}", env.ip(0), env.redis_port),
                Duration::from_secs(3),
            )
            .await?;
            c.command(&["AUTH", "app", pw]).await?;
            Ok::<Conn, RespError>(c)
        }
    };
    let mut c = app("apppw").await.expect("app user");
    c.command(&["SET", "app:1", "v"])
        .await
        .expect("allowed key");
    let denied = c.command(&["SET", "other", "v"]).await.unwrap_err();
    assert!(denied.to_string().starts_with("NOPERM"), "{denied}");
    // New rules: reloaded live, the default user still protected.
    acl("user app on >apppw2 ~app:* +@all\n");
    testenv::eventually("the new ACL loaded", T, || async {
        app("apppw2").await.ok().map(drop)
    })
    .await
    .expect("reloaded");
    assert!(app("apppw").await.is_err());
    assert!(env.redis(0, "wrong").await.is_err());
    env.redis(0, "pw").await.expect("default user unchanged");
}

#[tokio::test]
async fn an_isolated_primary_fails_liveness_only_when_api_and_peers_are_gone() {
    let env = Env::new(json!({"primaryIsolation": {"enabled": true, "apiServerTimeout": "1s", "peerTimeout": "1s"}})).await;
    for i in 0..2 {
        env.pod(i).await;
        env.password(i, "pw");
    }
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let _a = env.start(0);
    let b = env.start(1);
    env.until_status(1, "replica up", |r| {
        running(r) && r.master_link_status == "up"
    })
    .await;
    assert_eq!(env.probe(0, "/healthz").await.0, 200);
    // The API refuses this ServiceAccount from now on: a peer still answers, so it is live.
    let rbs: Api<RoleBinding> = Api::namespaced(env.admin.clone(), &env.ns.name);
    rbs.delete(CLUSTER, &Default::default())
        .await
        .expect("delete rolebinding");
    testenv::eventually("the API refusing the instance", T, || async {
        Api::<RedisCluster>::namespaced(env.sa.clone(), &env.ns.name)
            .get(CLUSTER)
            .await
            .err()
            .map(drop)
    })
    .await
    .expect("refused");
    assert_eq!(env.probe(0, "/healthz").await.0, 200, "a peer answers");
    // The peer goes too: isolated.
    b.terminate().await.expect("replica stopped");
    let (code, body) = testenv::eventually("liveness failing", T, || async {
        let r = env.probe(0, "/healthz").await;
        (r.0 == 503).then_some(r)
    })
    .await
    .expect("isolated");
    assert!(body.contains("primary isolated"), "{code} {body}");
    // The API is back: live again.
    let rb: RoleBinding = obj(json!({
        "metadata": {"name": CLUSTER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLUSTER},
        "subjects": [{"kind": "ServiceAccount", "name": CLUSTER, "namespace": env.ns.name}]
    }));
    rbs.create(&PostParams::default(), &rb)
        .await
        .expect("rolebinding");
    testenv::eventually("liveness back", T, || async {
        (env.probe(0, "/healthz").await.0 == 200).then_some(())
    })
    .await
    .expect("live");
}

#[tokio::test]
async fn the_manager_exits_when_redis_server_exits() {
    let env = Env::new(json!({})).await;
    env.pod(0).await;
    env.password(0, "pw");
    env.set_status(json!({"currentPrimary": "demo-0"})).await;
    let mut a = env.start(0);
    env.until_status(0, "running", |r| running(r) && r.role == "master")
        .await;
    // Someone stops Redis behind the manager's back.
    let mut c = env.redis(0, "pw").await.expect("client");
    let _ = c.command(&["SHUTDOWN", "NOSAVE"]).await;
    let task = a.task.take().expect("task");
    let ended = tokio::time::timeout(T, task)
        .await
        .expect("the manager ended")
        .expect("joined");
    let err = ended.expect_err("an error exit, so the container restarts");
    assert!(err.to_string().contains("redis-server exited"), "{err:#}");
}
