//! The operator runtime against the real local control plane: endpoints, an instrumented
//! controller, and `Operator::run` with leader election.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::ConfigMap};
use kit::{
    controller::{ControllerSettings, Operator, RunContext, run_controller},
    flags::OperatorFlags,
    health::{self, Readiness},
    leader::LeaseConfig,
    metrics::Metrics,
    reconcile::ReconcileError,
    telemetry::LogFormat,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
    runtime::{Controller, controller::Action, watcher},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::oneshot,
};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// A plain HTTP/1.1 GET; returns the status code and body.
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).await?;
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

async fn metrics_contain(addr: SocketAddr, needle: &str) -> anyhow::Result<()> {
    testenv::eventually(needle, WAIT, || async {
        let (code, body) = get(addr, "/metrics").await.ok()?;
        (code == 200 && body.contains(needle)).then_some(())
    })
    .await
}

#[derive(Debug, thiserror::Error)]
#[error("never happens")]
struct Never;

impl ReconcileError for Never {
    fn category(&self) -> &'static str {
        "never"
    }
}

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
}

fn run_context(
    client: &Client,
    metrics: &Metrics,
    readiness: &Readiness,
    shutdown: &CancellationToken,
    addr: SocketAddr,
) -> RunContext {
    RunContext {
        client: client.clone(),
        metrics: metrics.clone(),
        readiness: readiness.clone(),
        shutdown: shutdown.clone(),
        metrics_addr: addr,
        probe_addr: addr,
    }
}

#[tokio::test]
async fn endpoints_report_health_readiness_and_reconcile_metrics() {
    let client = testenv::client().await;
    let ns = testenv::TestNamespace::new(&client, "kit-runtime").await;
    let (metrics, ready, stop) = (Metrics::new(), Readiness::new(), CancellationToken::new());
    let server = health::start(
        local(),
        local(),
        metrics.clone(),
        ready.clone(),
        stop.clone(),
    )
    .await
    .expect("bind");
    let addr = server.probe_addr();
    assert_ne!(addr.port(), 0, "the bound port is reported");
    assert_eq!(get(addr, "/healthz").await.expect("healthz").0, 200);
    assert_eq!(get(addr, "/readyz").await.expect("readyz").0, 503);
    ready.set_ready(true);
    assert_eq!(get(addr, "/readyz").await.expect("readyz").0, 200);

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("watched".into()),
            labels: Some([("kit-test".to_owned(), "watched".to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
    let controller_stop = CancellationToken::new();
    let settings = ControllerSettings::new("configmap");
    let rc = run_context(&client, &metrics, &ready, &controller_stop, addr);
    let controller = run_controller(
        // The selector leaves out the namespace's own kube-root-ca.crt ConfigMap.
        Controller::new(api, watcher::Config::default().labels("kit-test=watched")),
        &settings,
        &rc,
        |_cm: Arc<ConfigMap>, _ctx: Arc<()>| async { Ok::<_, Never>(Action::await_change()) },
        |_cm, _err: &Never, _ctx| Action::requeue(Duration::from_secs(1)),
        Arc::new(()),
    );
    let controller = tokio::spawn(controller);
    metrics_contain(
        addr,
        r#"controller_runtime_reconcile_total{controller="configmap",result="success"} 1"#,
    )
    .await
    .expect("the reconcile is counted");
    metrics_contain(
        addr,
        r#"controller_runtime_reconcile_time_seconds_count{controller="configmap"} 1"#,
    )
    .await
    .expect("the reconcile is timed");

    controller_stop.cancel();
    tokio::time::timeout(WAIT, controller)
        .await
        .expect("controller drains")
        .expect("join");
    stop.cancel();
    tokio::time::timeout(WAIT, server.wait())
        .await
        .expect("server stops")
        .expect("clean stop");
}

fn flags(ns: &str) -> OperatorFlags {
    OperatorFlags {
        metrics_addr: local(),
        probe_addr: local(),
        leader_elect: true,
        lease_name: None,
        lease_namespace: Some(ns.to_owned()),
        log_format: LogFormat::Text,
        log_level: Some("warn".into()),
    }
}

#[tokio::test]
async fn operator_runs_controllers_only_while_holding_the_lease() {
    let client: Client = testenv::client().await;
    let ns = testenv::TestNamespace::new(&client, "kit-operator").await;
    let lease = LeaseConfig {
        identity: "operator-under-test".into(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
        ..LeaseConfig::new("demo-leader", &ns.name)
    };
    let shutdown = CancellationToken::new();
    let (started_tx, started_rx) = oneshot::channel();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let probe_leases = leases.clone();
    let op = Operator::new("demo", flags(&ns.name))
        .with_client(client.clone())
        .with_shutdown(shutdown.clone())
        .with_lease(lease);
    let run = tokio::spawn(op.run(move |ctx| async move {
        // Started only once leading: the Lease must already name us.
        let holder = probe_leases
            .get("demo-leader")
            .await?
            .spec
            .and_then(|s| s.holder_identity);
        let _ = started_tx.send((holder, ctx.metrics_addr));
        ctx.shutdown.cancelled().await;
        Ok(())
    }));
    let (holder, metrics_addr) = tokio::time::timeout(WAIT, started_rx)
        .await
        .expect("controllers start once leading")
        .expect("context sent");
    assert_eq!(holder.as_deref(), Some("operator-under-test"));
    metrics_contain(
        metrics_addr,
        r#"leader_election_master_status{name="demo-leader"} 1"#,
    )
    .await
    .expect("leadership is exported");

    shutdown.cancel();
    tokio::time::timeout(WAIT, run)
        .await
        .expect("operator stops")
        .expect("join")
        .expect("clean exit");
    let released = leases
        .get("demo-leader")
        .await
        .expect("lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(released, None, "shutdown releases the lease");
}

// A controller whose identity may not list what it watches: /readyz says so (503, naming the
// verb, resource and namespace) and turns 200 again once a Role grants list and watch, and
// the controller then reconciles.
#[tokio::test]
async fn forbidden_watch_holds_readiness_until_the_permission_is_granted() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

    let admin = testenv::client().await;
    let ns = testenv::TestNamespace::new(&admin, "kit-forbidden").await;
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("watcher".into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &sa)
        .await
        .expect("service account");
    let client = testenv::service_account_client(&admin, &ns.name, "watcher")
        .await
        .expect("client");
    let (metrics, ready, stop) = (Metrics::new(), Readiness::new(), CancellationToken::new());
    let server = health::start(
        local(),
        local(),
        metrics.clone(),
        ready.clone(),
        stop.clone(),
    )
    .await
    .expect("bind");
    let addr = server.probe_addr();
    ready.set_ready(true);
    let rc = run_context(&client, &metrics, &ready, &stop, addr);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let reconciled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = reconciled.clone();
    let controller = tokio::spawn(run_controller(
        Controller::new(api, watcher::Config::default()),
        &ControllerSettings::new("configmap"),
        &rc,
        move |_cm: Arc<ConfigMap>, _ctx: Arc<()>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok::<_, Never>(Action::await_change()) }
        },
        |_cm, _err: &Never, _ctx| Action::requeue(Duration::from_secs(1)),
        Arc::new(()),
    ));
    let body = testenv::eventually("readyz reports the forbidden list", WAIT, || async {
        let (code, body) = get(addr, "/readyz").await.ok()?;
        (code == 503).then_some(body)
    })
    .await
    .expect("not ready");
    let expected = format!(
        r#"list of configmaps in namespace "{}" is forbidden"#,
        ns.name
    );
    assert!(body.contains(&expected), "{body}");

    let role = Role {
        metadata: ObjectMeta {
            name: Some("watch-configmaps".into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["list".into(), "watch".into()],
            ..PolicyRule::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("watch-configmaps".into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "watch-configmaps".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "watcher".into(),
            namespace: Some(ns.name.clone()),
            ..Subject::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
    testenv::eventually("ready again once granted", WAIT, || async {
        let (code, _) = get(addr, "/readyz").await.ok()?;
        (code == 200).then_some(())
    })
    .await
    .expect("ready");
    // The watch itself recovered: the namespace's kube-root-ca.crt ConfigMap is reconciled.
    testenv::eventually(
        "a reconcile after recovery",
        Duration::from_secs(60),
        || async { (reconciled.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(()) },
    )
    .await
    .expect("reconciled");
    stop.cancel();
    tokio::time::timeout(WAIT, controller)
        .await
        .expect("controller drains")
        .expect("join");
    tokio::time::timeout(WAIT, server.wait())
        .await
        .expect("server stops")
        .expect("clean stop");
}
