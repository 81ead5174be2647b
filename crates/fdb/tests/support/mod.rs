//! The harness of the cluster controller's plane tests: the operator under the RBAC of
//! `deploy/fdb/rbac` (a token of its ServiceAccount), one namespace per test, one fake
//! database per cluster whose processes follow the pods (upstream's mock does the same), and
//! a record of every pod that disappeared while its process still held data.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fdb::admin::fake::FakeDatabase;
use fdb::cluster::{CliClients, Context, DatabaseClients, FakeClients, Options};
use fdb::crd::{FoundationDBCluster, ProcessGroupStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testenv::TestNamespace;
use tokio_util::sync::CancellationToken;

pub use fdb::sim::follow::{CLASS_LABEL, ID_LABEL};

pub struct Harness {
    pub client: kube::Client,
    /// A client with the operator's ServiceAccount token.
    pub operator: kube::Client,
    pub ns: TestNamespace,
    pub clients: FakeClients,
    pub token: CancellationToken,
    /// The running operator's own token (a child of `token`), its thresholds, and its task
    /// (aborted by [`Harness::restart_operator`]).
    operator_run: Mutex<(CancellationToken, Options, Option<tokio::task::AbortHandle>)>,
    pub violations: Arc<Mutex<Vec<String>>>,
    /// When set, the operator runs the real CLI admin client against the `fdb-sim` server.
    pub sim: Option<CliSim>,
    _rbac: testenv::rbac::ClusterCleanup,
}

/// The simulator the CLI path talks to: `$FDB_BINARY_DIR` of symlinks to the `fdb-sim`
/// binary and its server, in this process, holding the databases.
pub struct CliSim {
    pub registry: fdb::sim::server::Registry,
    pub binary_dir: std::path::PathBuf,
}

impl CliSim {
    /// Lays out `<tmp>/fdb-sim-<name>/7.1/{fdbcli,fdbbackup,fdbrestore}` and serves the
    /// registry on `<dir>/fdb-sim.sock` until `token` is cancelled.
    pub fn start(name: &str, token: &CancellationToken) -> Self {
        let binary_dir = std::env::temp_dir().join(format!("fdb-sim-{name}"));
        let _ = std::fs::remove_dir_all(&binary_dir);
        let exe = std::path::Path::new(env!("CARGO_BIN_EXE_fdb-sim"));
        let socket = fdb::sim::install(&binary_dir, exe, &["7.1.57"]).expect("install fdb-sim");
        let listener = tokio::net::UnixListener::bind(&socket).expect("bind the fdb-sim socket");
        let registry = fdb::sim::server::Registry::new();
        tokio::spawn(fdb::sim::server::serve(
            listener,
            registry.clone(),
            token.clone(),
        ));
        CliSim {
            registry,
            binary_dir,
        }
    }

    /// The real clients, running the tools from the simulator's `$FDB_BINARY_DIR`.
    pub fn clients(&self) -> CliClients {
        let mut config = fdb::admin::cli::BinaryConfig::from_env();
        config.binary_dir = self.binary_dir.clone();
        CliClients::new(config)
    }
}

impl Drop for CliSim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.binary_dir);
    }
}

impl Harness {
    /// The operator with upstream's thresholds.
    pub async fn start(prefix: &str) -> Self {
        Self::start_with(prefix, Options::default()).await
    }

    /// The operator with `options` (its command-line thresholds), running in-process as
    /// its ServiceAccount.
    pub async fn start_with(prefix: &str, options: Options) -> Self {
        let h = Self::prepare(prefix).await;
        h.operator_run.lock().unwrap().1 = options;
        h.spawn_operator();
        h
    }

    /// The operator with `options`, its database clients the real CLI client over the
    /// `fdb-sim` tools and server.
    pub async fn start_cli(prefix: &str, options: Options) -> Self {
        let mut h = Self::prepare(prefix).await;
        h.sim = Some(CliSim::start(&h.ns.name, &h.token));
        h.operator_run.lock().unwrap().1 = options;
        h.spawn_operator();
        h
    }

    /// The database clients the operator uses.
    pub fn database_clients(&self) -> Arc<dyn DatabaseClients> {
        match &self.sim {
            Some(sim) => Arc::new(sim.clients()),
            None => Arc::new(self.clients.clone()),
        }
    }

    fn spawn_operator(&self) {
        let mut run = self.operator_run.lock().unwrap();
        run.0 = self.token.child_token();
        let ctx = Arc::new(
            Context::new(self.operator.clone(), self.database_clients())
                .with_options(run.1.clone()),
        );
        let rc = kit::controller::RunContext {
            client: self.operator.clone(),
            metrics: kit::metrics::Metrics::new(),
            readiness: kit::health::Readiness::new(),
            shutdown: run.0.clone(),
            metrics_addr: ([127, 0, 0, 1], 0).into(),
            probe_addr: ([127, 0, 0, 1], 0).into(),
        };
        let task = tokio::spawn(fdb::cluster::run(ctx, rc, Some(self.ns.name.clone())));
        run.2 = Some(task.abort_handle());
    }

    /// Also runs the backup and restore controllers (with `options`), as the operator's
    /// ServiceAccount, until the harness is dropped.
    pub fn spawn_backup_controllers(&self, options: fdb::backup::Options) {
        let ctx = Arc::new(
            fdb::backup::Context::new(self.operator.clone(), Arc::new(self.clients.clone()))
                .with_options(options),
        );
        let rc = kit::controller::RunContext {
            client: self.operator.clone(),
            metrics: kit::metrics::Metrics::new(),
            readiness: kit::health::Readiness::new(),
            shutdown: self.token.child_token(),
            metrics_addr: ([127, 0, 0, 1], 0).into(),
            probe_addr: ([127, 0, 0, 1], 0).into(),
        };
        let ns = Some(self.ns.name.clone());
        tokio::spawn(fdb::backup::run(ctx.clone(), rc.clone(), ns.clone(), 1));
        tokio::spawn(fdb::restore::run(ctx, rc, ns, 1));
    }

    /// Kills the operator and starts a new one on the same databases: nothing survives in
    /// memory, as when the operator's pod is SIGKILLed and restarted. The old operator's task
    /// is aborted, so its pass stops at whatever `await` it was at (a request already sent may
    /// still land, as after a real kill); it is not shut down gracefully, which would let its
    /// running pass finish beside the new operator, two instances at once on one cluster,
    /// which leader election never allows.
    pub fn restart_operator(&self) {
        let (old, task) = {
            let mut run = self.operator_run.lock().unwrap();
            (run.0.clone(), run.2.take())
        };
        if let Some(task) = task {
            task.abort();
        }
        old.cancel();
        self.spawn_operator();
    }

    /// CRDs, a namespace, the RBAC and the operator's client, but no operator yet.
    pub async fn prepare(prefix: &str) -> Self {
        if let Ok(level) = std::env::var("FDB_TEST_LOG") {
            let _ = kit::telemetry::init(kit::telemetry::LogFormat::Text, Some(&level));
        }
        let client = testenv::client().await;
        for crd in fdb::crd::crds() {
            testenv::install_crd(&client, crd)
                .await
                .expect("install CRD");
        }
        let ns = TestNamespace::new(&client, prefix).await;
        let rbac_dir = testenv::workspace_root().join("deploy/fdb/rbac");
        let rbac = testenv::rbac::install_rbac(&client, &rbac_dir, "fdb-operator-system", &ns.name)
            .await
            .expect("install RBAC");
        let operator = testenv::service_account_client(
            &client,
            &ns.name,
            "fdb-kubernetes-operator-controller-manager",
        )
        .await
        .expect("operator client");
        Harness {
            client,
            operator,
            ns,
            clients: FakeClients::default(),
            token: CancellationToken::new(),
            operator_run: Mutex::new((CancellationToken::new(), Options::default(), None)),
            violations: Arc::new(Mutex::new(Vec::new())),
            sim: None,
            _rbac: rbac,
        }
    }

    /// The database of cluster `name` (with the simulator: the one its cluster file's
    /// description, the cluster's name, reaches).
    pub fn db(&self, name: &str) -> FakeDatabase {
        match &self.sim {
            Some(sim) => sim.registry.database(name),
            None => self.clients.database(&self.ns.name, name),
        }
    }

    /// The processes follow the pods, each pod's monitor played by
    /// `fdb::admin::fake_monitor`; a pod gone while its process holds data is recorded.
    pub fn simulate(&self, name: &str) {
        simulate_clusters(&[(self, name)], self.db(name));
    }

    /// The operator with `options`, its cluster `name` reaching database `db` (another
    /// harness's): a second operator instance, in a namespace of its own, on one database.
    pub async fn start_on(prefix: &str, options: Options, name: &str, db: FakeDatabase) -> Self {
        let h = Self::prepare(prefix).await;
        h.clients.share(&h.ns.name, name, db);
        h.operator_run.lock().unwrap().1 = options;
        h.spawn_operator();
        h
    }

    pub fn clusters(&self) -> Api<FoundationDBCluster> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    pub async fn reconciled(&self, name: &str, timeout: Duration) -> FoundationDBCluster {
        testenv::wait_for(
            &self.clusters(),
            name,
            timeout,
            |c: &FoundationDBCluster| {
                let s = c.status.clone().unwrap_or_default();
                s.configured && s.generations.reconciled == c.metadata.generation.unwrap_or(-1)
            },
        )
        .await
        .expect("cluster reconciled")
    }

    /// The Events in the test's namespace.
    pub async fn events(&self) -> Vec<k8s_openapi::api::events::v1::Event> {
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.client.clone(), &self.ns.name)
            .list(&ListParams::default())
            .await
            .expect("list Events")
            .items
    }

    /// Patches cluster `name`'s spec with `spec` and waits until a pass has computed the
    /// conditions for the new generation: after a second such call returns, every step of the
    /// pass that started for the first one has run (passes of one cluster never overlap).
    pub async fn bump(&self, name: &str, spec: serde_json::Value) -> FoundationDBCluster {
        let c = self
            .clusters()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .expect("patch the spec");
        let generation = c.metadata.generation;
        testenv::wait_for(
            &self.clusters(),
            name,
            Duration::from_secs(120),
            move |c: &FoundationDBCluster| {
                let conditions = c.status.clone().unwrap_or_default().conditions;
                kit::conditions::get(&conditions, "Ready")
                    .is_some_and(|r| r.observed_generation == generation)
            },
        )
        .await
        .expect("a pass for the new generation")
    }

    /// Sets cluster `name`'s storage process count to `n`.
    pub async fn scale_storage(&self, name: &str, n: i64) {
        let patch = json!({"spec": {"processCounts": {"storage": n}}});
        self.clusters()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("scale storage");
    }

    /// Waits until group `id` of cluster `name` is excluded and its pod is gone (the include
    /// may still wait for its recovery gate); panics with the database's calls after `timeout`.
    pub async fn excluded_and_gone(&self, name: &str, id: &str, timeout: Duration) {
        let pods = Api::<Pod>::namespaced(self.client.clone(), &self.ns.name);
        testenv::eventually(
            &format!("{id} excluded and its pod gone"),
            timeout,
            || async {
                let c = self.clusters().get(name).await.ok()?;
                let g = groups(&c).into_iter().find(|g| {
                    g.process_group_id.as_str() == id && g.exclusion_timestamp.is_some()
                })?;
                pods.get_opt(&g.pod_name(name))
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}: calls {:?}", self.db(name).calls()));
    }

    /// Waits until cluster `name` reports `SpecValid` False, checks that it and `Ready` give
    /// the reason `InvalidSpec`, and returns `SpecValid`'s message.
    pub async fn spec_invalid(&self, name: &str) -> String {
        let c = testenv::wait_for(
            &self.clusters(),
            name,
            Duration::from_secs(60),
            |c: &FoundationDBCluster| {
                let conditions = c.status.clone().unwrap_or_default().conditions;
                kit::conditions::get(&conditions, "SpecValid").is_some_and(|s| s.status == "False")
            },
        )
        .await
        .expect("SpecValid is False");
        let conditions = c.status.unwrap().conditions;
        let valid = kit::conditions::get(&conditions, "SpecValid").unwrap();
        assert_eq!(valid.reason, "InvalidSpec");
        let ready = kit::conditions::get(&conditions, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "InvalidSpec")
        );
        valid.message.clone()
    }

    /// Reconciled with every removal finished: a pending removal (resources terminating or
    /// waiting for the include) does not block `reconciled`, as upstream.
    pub async fn removals_done(&self, name: &str, timeout: Duration) -> FoundationDBCluster {
        testenv::wait_for(
            &self.clusters(),
            name,
            timeout,
            |c: &FoundationDBCluster| {
                let s = c.status.clone().unwrap_or_default();
                s.configured
                    && s.generations.reconciled == c.metadata.generation.unwrap_or(-1)
                    && !s.process_groups.iter().any(|g| g.is_marked_for_removal())
            },
        )
        .await
        .expect("cluster reconciled without pending removals")
    }
}

/// The processes of database `db` follow the pods of every cluster in `clusters` (each in its
/// harness's namespace), each pod's monitor played by `fdb::admin::fake_monitor`: every 200 ms
/// each cluster's pods are listed, then the database's processes are set from all of them at
/// once; a pod gone while its process holds data is recorded in the first harness's
/// violations. Until the first harness is dropped.
pub fn simulate_clusters(clusters: &[(&Harness, &str)], db: FakeDatabase) {
    let (token, violations) = (
        clusters[0].0.token.clone(),
        clusters[0].0.violations.clone(),
    );
    let parts: Vec<(Api<Pod>, Api<ConfigMap>, String)> = clusters
        .iter()
        .map(|(h, name)| {
            (
                Api::namespaced(h.client.clone(), &h.ns.name),
                Api::namespaced(h.client.clone(), &h.ns.name),
                format!("{name}-config"),
            )
        })
        .collect();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        'ticks: while !token.is_cancelled() {
            tick.tick().await;
            let mut lists = Vec::new();
            for (pods, _, _) in &parts {
                let Ok(list) = pods.list(&ListParams::default()).await else {
                    continue 'ticks;
                };
                lists.push(list.items);
            }
            let all: Vec<Pod> = lists.iter().flatten().cloned().collect();
            for id in fdb::sim::follow::gone_holding_data(&db, &all) {
                violations
                    .lock()
                    .unwrap()
                    .push(format!("pod of {id} gone while its process held data"));
            }
            let mut all = Vec::new();
            for ((pods, configs, cm_name), mut list) in parts.iter().zip(lists) {
                fdb::sim::follow::play_monitors(pods, configs, cm_name, &mut list).await;
                all.extend(list);
            }
            db.sync_pods(&all, CLASS_LABEL, ID_LABEL, "7.1.57");
        }
    });
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

/// The cluster's process groups (none without status).
pub fn groups(c: &FoundationDBCluster) -> Vec<ProcessGroupStatus> {
    c.status.clone().unwrap_or_default().process_groups
}

/// The IDs of the cluster's process groups of `class`.
pub fn ids(c: &FoundationDBCluster, class: &str) -> BTreeSet<String> {
    groups(c)
        .iter()
        .filter(|g| g.process_class.as_str() == class)
        .map(|g| g.process_group_id.to_string())
        .collect()
}

/// Whether the cluster's `Ready` condition is True.
pub fn ready(c: &FoundationDBCluster) -> bool {
    kit::conditions::is_true(&c.status.clone().unwrap_or_default().conditions, "Ready")
}

/// Operator options with the database's recovery-age gates open, for tests about something
/// else.
pub fn open_recovery_gates() -> Options {
    Options {
        minimum_recovery_time_for_exclusion: 0.0,
        minimum_recovery_time_for_inclusion: 0.0,
        minimum_recovery_time_for_missing_coordinator_change: 0.0,
        minimum_uptime_for_coordinator_change: 0.0,
        ..Options::default()
    }
}

pub fn storage_groups(c: &FoundationDBCluster) -> BTreeSet<String> {
    c.status
        .as_ref()
        .unwrap()
        .process_groups
        .iter()
        .filter(|g| g.process_class.as_str() == "storage")
        .map(|g| g.process_group_id.to_string())
        .collect()
}

/// Creates cluster `name` (version 7.1.57, no fault domain, IPs in the cluster file, 1G
/// volumes) with `spec` merged in, and waits until it is reconciled.
pub async fn create(h: &Harness, name: &str, spec: serde_json::Value) -> FoundationDBCluster {
    let mut full = json!({
        "version": "7.1.57",
        "faultDomain": {"key": "foundationdb.org/none"},
        "routing": {"useDNSInClusterFile": false},
        "processes": {"general": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "1G"}}}}}},
        // As upstream's own e2e tests: removals are not paced (a test of the pace sets it).
        "automationOptions": {"waitBetweenRemovalsSeconds": 0},
    });
    for (k, v) in spec.as_object().unwrap() {
        match (
            full.get_mut(k).and_then(|f| f.as_object_mut()),
            v.as_object(),
        ) {
            (Some(f), Some(v)) if k == "automationOptions" => f.extend(v.clone()),
            _ => full[k] = v.clone(),
        }
    }
    let cluster: FoundationDBCluster = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBCluster",
        "metadata": {"name": name},
        "spec": full,
    }))
    .unwrap();
    h.clusters()
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create");
    h.reconciled(name, Duration::from_secs(180)).await
}
