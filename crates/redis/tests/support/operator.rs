//! The operator (`redis-operator controller`) in the test process, as its own ServiceAccount
//! under `deploy/redis/rbac`, limited to the test's namespace, without the webhook server and
//! without leader election; stopped when dropped.
#![allow(dead_code)]

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

/// The operator's ServiceAccount (deploy/redis/rbac).
pub const SA: &str = "redis-operator";

/// A running operator.
pub struct Operator {
    token: CancellationToken,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// `http://127.0.0.1:<port>/metrics`.
    pub metrics_url: String,
    _rbac: testenv::rbac::ClusterCleanup,
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Operator {
    /// Starts the operator for namespace `ns` with `extra` flags.
    pub async fn start(admin: &Client, ns: &str, extra: &[&str]) -> Self {
        let rbac_dir = testenv::workspace_root().join("deploy/redis/rbac");
        let rbac = testenv::rbac::install_rbac(admin, &rbac_dir, "redis-operator-system", ns)
            .await
            .expect("install the operator's RBAC");
        let port = free_port();
        let metrics = format!("--metrics-addr=127.0.0.1:{port}");
        let watch = format!("--watch-namespaces={ns}");
        let mut args = vec![
            "redis-operator",
            "controller",
            "--leader-elect=false",
            "--webhook-enabled=false",
            "--probe-addr=127.0.0.1:0",
            // These tests make the data pods themselves (the instance-manager contract): the
            // RedisCluster controller would replace them.
            "--controllers=redisbackup,redisscheduledbackup",
            &metrics,
            &watch,
        ];
        args.extend_from_slice(extra);
        let cli = <redis::cli::Cli as clap::Parser>::try_parse_from(args).expect("flags");
        let redis::cli::Command::Controller(flags) = cli.command else {
            panic!("not the controller subcommand");
        };
        let client = testenv::service_account_client(admin, ns, SA)
            .await
            .expect("operator ServiceAccount client");
        let token = CancellationToken::new();
        let task = tokio::spawn(redis::run::run_with_client(
            *flags,
            client,
            token.clone(),
            |_| {},
        ));
        Self {
            token,
            task: Some(task),
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
            _rbac: rbac,
        }
    }

    /// Stops the operator and checks it ended cleanly.
    pub async fn stop(mut self) {
        self.token.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the operator stops")
                .expect("join")
                .expect("clean exit");
        }
    }

    /// The operator's `/metrics` text.
    pub async fn metrics(&self) -> String {
        let resp = reqwest::get(&self.metrics_url).await.expect("metrics");
        resp.text().await.expect("metrics body")
    }
}
