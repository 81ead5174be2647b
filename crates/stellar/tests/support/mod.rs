//! Test support: the shared WDS/ITS/WEC topology (`testenv::spaces`), started once per test
//! binary and reused across binaries like the single plane, with stellar's CRDs installed
//! where each space needs them.

#![allow(dead_code)]

use std::sync::OnceLock;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use testenv::spaces::{self, Topology};

/// The WDS, the ITS and the WECs tests use.
pub const WDS: &str = "wds1";
/// The ITS.
pub const ITS: &str = "its1";
/// The WECs.
pub const WECS: [&str; 2] = ["wec1", "wec2"];
/// A second WDS, for tests that run the `stellar` controller-manager as a process of their own
/// (in-process controllers of other test binaries serve [`WDS`]; they never touch this one).
pub const WDS2: &str = "wds2";

/// The topology every stellar test binary asks for (the same one, so none restarts the
/// spaces under another): [`WDS`], [`ITS`], [`WECS`] and [`WDS2`].
pub fn topology() -> Topology {
    let mut t = Topology::standard(WECS.len());
    t.spaces.push(spaces::SpaceSpec {
        name: WDS2.into(),
        role: spaces::Role::Wds,
    });
    t
}

static UP: OnceLock<Result<(), String>> = OnceLock::new();

/// Starts (or reuses) the topology and panics with the reason when it cannot.
pub fn ensure_spaces() {
    let r = UP.get_or_init(|| match spaces::up(&topology()) {
        Ok(up) => {
            if !up.reused {
                eprintln!("stellar tests: started the spaces in {:.1?}", up.took);
            }
            Ok(())
        }
        Err(e) => Err(format!("{e:#}")),
    });
    if let Err(e) = r {
        panic!("the spaces are not available: {e}");
    }
}

/// An admin client for `space`, with stellar's CRDs installed there.
pub async fn client(space: &str) -> Client {
    ensure_spaces();
    let client = spaces::client(space).await.expect("space client");
    let crds = match space {
        WDS | WDS2 => stellar::api::control_crds(),
        ITS => {
            let mut c = stellar::ocm::hub_crds();
            c.push(stellar::api::work_status_crd());
            c
        }
        _ => stellar::ocm::agent_crds(),
    };
    for crd in crds {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    client
}

/// A dynamic API for `group/version` `kind` (`plural`), cluster-scoped or in `namespace`.
pub fn dynamic(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Creates `obj` (a full manifest) as `kubectl create` does (strict field validation): the
/// stored object or the API server's message.
pub async fn create(client: &Client, obj: Value) -> Result<Value, String> {
    let api_version = obj["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().expect("kind");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let path = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{}", ar.plural),
        None => format!("{prefix}/{}", ar.plural),
    };
    let req = http::Request::post(format!("{path}?fieldValidation=Strict"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&obj).expect("json"))
        .expect("request");
    client.request::<Value>(req).await.map_err(|e| match e {
        kube::Error::Api(s) => s.message,
        other => panic!("unexpected error: {other}"),
    })
}

/// A name unique to this test run.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{prefix}-{:x}{:x}", std::process::id(), nanos)
}

static CONTROLLERS: OnceLock<()> = OnceLock::new();

/// Starts stellar's WDS-side controllers (binding, transport, status) and the hub duties once per test binary, on a runtime of their own (so
/// they outlive each test's runtime).
pub fn start_controllers() {
    CONTROLLERS.get_or_init(|| {
        // The controllers' logs on stderr (shown for failing tests), filtered by RUST_LOG.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        ensure_spaces();
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let wds = client(WDS).await;
                let its = client(ITS).await;
                tokio::spawn(stellar::hub::run(its.clone()));
                let transport = stellar::transport::run(
                    wds.clone(),
                    its.clone(),
                    stellar::transport::Options {
                        wds_name: WDS.to_owned(),
                        limits: Default::default(),
                    },
                );
                tokio::spawn(async move {
                    if let Err(e) = transport.await {
                        panic!("transport stopped: {e:#}");
                    }
                });
                let status = stellar::status::run(
                    wds.clone(),
                    its.clone(),
                    stellar::status::Options {
                        wds_name: WDS.to_owned(),
                    },
                );
                tokio::spawn(async move {
                    if let Err(e) = status.await {
                        panic!("status controller stopped: {e:#}");
                    }
                });
                if let Err(e) =
                    stellar::binding::run(wds, its, stellar::binding::Options::default()).await
                {
                    panic!("binding controller stopped: {e:#}");
                }
            });
        });
    });
}

/// Polls `f` until it returns `Some`, or panics after `secs` seconds saying what it waited for.
pub async fn until<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut delay = std::time::Duration::from_millis(50);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(delay).await; // polling a condition with a deadline
        delay = (delay * 2).min(std::time::Duration::from_millis(500));
    }
}

static AGENTS: OnceLock<()> = OnceLock::new();

/// Registers [`WECS`] in the ITS inventory (ManagedClusters labelled
/// `location-group=edge`, `name=<wec>`) and starts a work agent (with its status add-on) for
/// each, once per test binary, on a runtime of their own.
pub fn start_agents() {
    AGENTS.get_or_init(|| {
        ensure_spaces();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let its = client(ITS).await;
                for wec in WECS {
                    register(&its, wec).await;
                    let wec_client = client(wec).await;
                    let opts = agent_options(wec);
                    let its = its.clone();
                    tokio::spawn(async move {
                        if let Err(e) = stellar::agent::run(its, wec_client, opts).await {
                            panic!("agent stopped: {e:#}");
                        }
                    });
                }
                tx.send(()).expect("started");
                std::future::pending::<()>().await;
            });
        });
        rx.recv().expect("agents started");
    });
}

/// Registers `wec` in the ITS inventory (labels `location-group=edge`, `name=<wec>`), if it
/// is not yet.
pub async fn register(its: &Client, wec: &str) {
    let mc = serde_json::json!({
        "apiVersion": "cluster.open-cluster-management.io/v1",
        "kind": "ManagedCluster",
        "metadata": {"name": wec, "labels": {"location-group": "edge", "name": wec}},
        "spec": {"hubAcceptsClient": true}});
    if let Err(e) = create(its, mc).await {
        assert!(e.contains("already exists"), "register {wec}: {e}");
    }
}

/// The agent options of `wec` (its hub hash from the ITS URL).
pub fn agent_options(wec: &str) -> stellar::agent::Options {
    let kc = kube::config::Kubeconfig::read_from(spaces::kubeconfig(ITS)).expect("ITS kubeconfig");
    let url = kc.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .expect("ITS server");
    stellar::agent::Options {
        cluster_name: wec.to_owned(),
        hub_hash: stellar::agent::hub_hash(&url),
        agent_id: format!("{wec}-agent"),
    }
}
