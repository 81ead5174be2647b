//! Support shared by the RedisCluster controller's tests: the operator runs in this process
//! under its own ServiceAccount and hand-written RBAC (deploy/redis/rbac), scoped to the
//! test's namespace, with its API requests counted.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, PostParams};
use redis::crd::RedisCluster;
use serde_json::{Value, json};
use testenv::{RequestCounts, TestNamespace};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The operator's ServiceAccount in deploy/redis/rbac.
pub const SA: &str = "redis-operator";
/// The namespace deploy/redis/rbac names.
pub const DEPLOY_NAMESPACE: &str = "redis-operator-system";

/// A test namespace with the operator running in it.
pub struct Env {
    /// Admin client (the test's own actions).
    pub admin: Client,
    /// The namespace.
    pub ns: TestNamespace,
    /// The operator's requests.
    pub counts: RequestCounts,
    operator: Option<(CancellationToken, JoinHandle<anyhow::Result<()>>)>,
    sa: Client,
    _rbac: testenv::rbac::ClusterCleanup,
}

/// The operator's flags for a test in `ns`.
pub fn flags(ns: &str, extra: &[&str]) -> redis::run::ControllerFlags {
    use clap::Parser;
    let args = [
        "redis-operator",
        "controller",
        "--metrics-addr=127.0.0.1:0",
        "--probe-addr=127.0.0.1:0",
        "--webhook-enabled=false",
        "--status-poll-seconds=2",
        "--log-level=info,redis=debug",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([
        format!("--watch-namespaces={ns}"),
        format!("--lease-namespace={ns}"),
    ])
    .chain(extra.iter().map(|s| (*s).to_owned()));
    match redis::cli::Cli::try_parse_from(args)
        .expect("flags")
        .command
    {
        redis::cli::Command::Controller(f) => *f,
        other => panic!("unexpected {other:?}"),
    }
}

/// A client acting as `namespace/sa` whose requests are counted by verb.
pub async fn counting_sa_client(
    admin: &Client,
    namespace: &str,
    sa: &str,
) -> anyhow::Result<(Client, RequestCounts)> {
    let cfg = testenv::identity::service_account_config(admin, namespace, sa).await?;
    testenv::counting(cfg)
}

/// Waits until a 5 s window passes without a write by the operator.
pub async fn settled(counts: &RequestCounts, timeout: Duration) {
    testenv::eventually("the operator to settle", timeout, || async {
        counts.reset();
        tokio::time::sleep(Duration::from_secs(5)).await; // the quiet window being checked
        let writes = counts.by_verb();
        tracing::info!(?writes, "operator requests in the quiet window");
        (counts.writes() == 0).then_some(())
    })
    .await
    .expect("the operator settles");
}

impl Env {
    /// A namespace with the operator's RBAC and CRDs, the operator started with `extra` flags.
    pub async fn start(prefix: &str, extra: &[&str]) -> Env {
        let admin = testenv::client().await;
        for crd in redis::crd::crds() {
            testenv::install_crd(&admin, crd).await.expect("CRD");
        }
        let ns = TestNamespace::new(&admin, prefix).await;
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/redis/rbac");
        let rbac = testenv::rbac::install_rbac(&admin, &dir, DEPLOY_NAMESPACE, &ns.name)
            .await
            .expect("the operator's RBAC");
        let (sa, counts) = counting_sa_client(&admin, &ns.name, SA)
            .await
            .expect("operator client");
        let mut env = Env {
            admin,
            ns,
            counts,
            operator: None,
            sa,
            _rbac: rbac,
        };
        env.start_operator(extra);
        env
    }

    /// Starts (again) the operator with `extra` flags.
    pub fn start_operator(&mut self, extra: &[&str]) {
        let stop = CancellationToken::new();
        let task = tokio::spawn(redis::run::run_with_client(
            flags(&self.ns.name, extra),
            self.sa.clone(),
            stop.clone(),
            |_| {},
        ));
        self.operator = Some((stop, task));
    }

    /// Stops the operator (as a crash would: no cleanup of what it was doing).
    pub async fn stop_operator(&mut self) {
        if let Some((stop, task)) = self.operator.take() {
            task.abort();
            stop.cancel();
            let _ = task.await;
        }
    }

    /// RedisClusters of the namespace.
    pub fn clusters(&self) -> Api<RedisCluster> {
        Api::namespaced(self.admin.clone(), &self.ns.name)
    }

    /// Any namespaced kind of the namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.admin.clone(), &self.ns.name)
    }

    /// Creates RedisCluster `name` with `spec`.
    pub async fn create(&self, name: &str, spec: Value) -> RedisCluster {
        let rc: RedisCluster = serde_json::from_value(json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .expect("cluster");
        self.clusters()
            .create(&PostParams::default(), &rc)
            .await
            .expect("create cluster")
    }

    /// Waits until `cond` holds for RedisCluster `name`.
    pub async fn wait(
        &self,
        name: &str,
        timeout: Duration,
        cond: impl Fn(&RedisCluster) -> bool + Clone + Send + 'static,
    ) -> RedisCluster {
        testenv::wait_for(&self.clusters(), name, timeout, cond)
            .await
            .unwrap_or_else(|e| panic!("waiting for RedisCluster {name}: {e}"))
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some((stop, task)) = self.operator.take() {
            stop.cancel();
            task.abort();
        }
    }
}
