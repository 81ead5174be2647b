//! The FoundationDBCluster controller: upstream's ordered subreconcilers (reference §4) on the
//! toolkit's pipeline, one file per step.
//!
//! Contract:
//! - One pass reads the cluster, fetches `status json` once (the cached status of §2.2: a
//!   cluster without connection string, or an unconfigured one whose database does not answer,
//!   works with the `configurationMissing` stand-in), then runs the steps of [`pipeline`] in
//!   order. A step that stops ends the pass; a delayed requeue lets later steps run (see
//!   [`kit::pipeline`]).
//! - No state is carried in memory between passes: everything a step needs is in the cluster
//!   (spec and status), in Kubernetes objects or in the database. Every step is idempotent.
//! - Status is written through the status subresource only when it changed
//!   ([`Pass::write_status`]), so a pass with nothing to do makes no write.
//! - Pure decisions live in functions next to each step with table tests.
//!
//! The database is reached through [`DatabaseClients`]: [`CliClients`] runs the real
//! `fdbcli` from `$FDB_BINARY_DIR`, [`FakeClients`] serves [`crate::admin::fake`] databases
//! for tests.

pub mod add_pods;
pub mod add_process_groups;
pub mod add_pvcs;
pub mod add_services;
pub mod bounce_processes;
pub mod change_coordinators;
pub mod check_client_compatibility;
pub mod choose_removals;
pub mod conditions;
pub mod coordinators;
pub mod delete_pods_for_buggification;
pub mod delete_terminal_pods;
pub mod exclude_processes;
pub mod fault_tolerance;
pub mod generate_initial_cluster_file;
pub mod maintenance_mode_checker;
pub mod monitor;
pub mod remove_incompatible_processes;
pub mod remove_process_groups;
pub mod remove_services;
pub mod replace_failed_process_groups;
pub mod replace_misconfigured_process_groups;
pub mod resources;
pub mod taints;
pub mod update_config_map;
pub mod update_database_configuration;
pub mod update_lock_configuration;
pub mod update_metadata;
pub mod update_pod_config;
pub mod update_pods;
pub mod update_sidecar_versions;
pub mod update_status;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Pod, Service};
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::pipeline::Pipeline;
use kit::reconcile::{Backoff, ReconcileError};
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use crate::admin::cli::{BinaryConfig, CliAdminClient, CliLockClient, ProcessRunner};
use crate::admin::fake::FakeDatabase;
use crate::admin::{AdminClient, ClusterTarget, FdbStatus, LockClient};
use crate::crd::{FoundationDBCluster, FoundationDBClusterStatus};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "fdb-kubernetes-operator";
/// The controller's name (metrics label).
pub const CONTROLLER: &str = "foundationdbcluster";

/// Operator-wide thresholds, upstream's command-line flags with their defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `--minimum-recovery-time-for-exclusion` (120 s).
    pub minimum_recovery_time_for_exclusion: f64,
    /// `--minimum-recovery-time-for-inclusion` (600 s).
    pub minimum_recovery_time_for_inclusion: f64,
    /// `--minimum-uptime-for-coordinator-change-with-missing-process` (2m): a coordinator
    /// change while a coordinator is missing needs the last recovery at least this old.
    pub minimum_recovery_time_for_missing_coordinator_change: f64,
    /// `--minimum-uptime-for-coordinator-change-with-undesired-process` (5m): a coordinator
    /// change otherwise needs the last recovery at least this old.
    pub minimum_uptime_for_coordinator_change: f64,
    /// `--minimum-uptime-for-configuration-changes` (1m): a configuration change needs the
    /// last recovery at least this old.
    pub minimum_uptime_for_configuration_changes: f64,
    /// At most this many active generations for any destructive step (10).
    pub max_active_generations: i64,
    /// `--minimum-age-for-terminal-pod-deletion` (30 s).
    pub minimum_age_for_terminal_pod_deletion: Duration,
    /// `--maintenance-list-stale-duration` (4 h): maintenance-list entries older than this
    /// are removed.
    pub maintenance_list_stale_duration: Duration,
    /// `--maintenance-list-wait-duration` (5 min): a listed process in another zone than
    /// the one in maintenance still blocks the reset for this long.
    pub maintenance_list_wait_duration: Duration,
    /// `--enable-restart-incompatible-processes` (on): RemoveIncompatibleProcesses runs.
    pub restart_incompatible_processes: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            minimum_recovery_time_for_exclusion: 120.0,
            minimum_recovery_time_for_inclusion: 600.0,
            minimum_recovery_time_for_missing_coordinator_change: 120.0,
            minimum_uptime_for_coordinator_change: 300.0,
            minimum_uptime_for_configuration_changes: 60.0,
            max_active_generations: 10,
            minimum_age_for_terminal_pod_deletion: Duration::from_secs(30),
            maintenance_list_stale_duration: Duration::from_secs(4 * 3600),
            maintenance_list_wait_duration: Duration::from_secs(300),
            restart_incompatible_processes: true,
        }
    }
}

/// Where the admin and lock clients of a cluster come from.
pub trait DatabaseClients: Send + Sync {
    /// The admin client for `cluster` as it is now (its connection string, versions).
    fn admin(&self, cluster: &FoundationDBCluster) -> Arc<dyn AdminClient>;
    /// The lock client for `cluster`.
    fn lock(&self, cluster: &FoundationDBCluster) -> Arc<dyn LockClient>;
    /// The admin client the backup and restore controllers use for `cluster`: `knobs`
    /// (`--knob_…=…`, from the backup's or restore's `customParameters`) go to fdbbackup and
    /// fdbrestore. Clients without knobs (the fake) ignore them.
    fn admin_with_knobs(
        &self,
        cluster: &FoundationDBCluster,
        knobs: Vec<String>,
    ) -> Arc<dyn AdminClient> {
        let _ = knobs;
        self.admin(cluster)
    }
}

/// The real clients: `fdbcli` & co. from `$FDB_BINARY_DIR/<major.minor>/`.
pub struct CliClients {
    config: Arc<BinaryConfig>,
}

impl CliClients {
    /// Clients configured from the environment, as upstream reads it.
    pub fn from_env() -> Self {
        Self::new(BinaryConfig::from_env())
    }

    /// Clients running the binaries `config` describes.
    pub fn new(config: BinaryConfig) -> Self {
        CliClients {
            config: Arc::new(config),
        }
    }

    fn client(&self, cluster: &FoundationDBCluster) -> CliAdminClient {
        CliAdminClient::new(
            self.config.clone(),
            Arc::new(ProcessRunner),
            ClusterTarget::of(cluster),
        )
    }
}

impl DatabaseClients for CliClients {
    fn admin(&self, cluster: &FoundationDBCluster) -> Arc<dyn AdminClient> {
        Arc::new(self.client(cluster))
    }

    fn lock(&self, cluster: &FoundationDBCluster) -> Arc<dyn LockClient> {
        Arc::new(CliLockClient::new(self.client(cluster)))
    }

    fn admin_with_knobs(
        &self,
        cluster: &FoundationDBCluster,
        knobs: Vec<String>,
    ) -> Arc<dyn AdminClient> {
        Arc::new(self.client(cluster).with_knobs(knobs))
    }
}

/// Test clients: one [`FakeDatabase`] per cluster (namespace/name), created on first use.
/// Handing out a client also hands the cluster's connection string to its database when the
/// database has none yet: the stand-in for processes reading the operator's cluster file.
#[derive(Clone, Default)]
pub struct FakeClients {
    databases: Arc<Mutex<BTreeMap<String, FakeDatabase>>>,
}

impl FakeClients {
    /// The database of `namespace/name`.
    pub fn database(&self, namespace: &str, name: &str) -> FakeDatabase {
        self.databases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(format!("{namespace}/{name}"))
            .or_default()
            .clone()
    }

    /// Makes `namespace/name` reach `db`: clusters in several namespaces (each with its own
    /// operator instance) sharing one database, as several Kubernetes clusters share one
    /// FoundationDB cluster.
    pub fn share(&self, namespace: &str, name: &str, db: FakeDatabase) {
        self.databases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(format!("{namespace}/{name}"), db);
    }

    fn of(&self, cluster: &FoundationDBCluster) -> FakeDatabase {
        let db = self.database(
            &cluster.namespace().unwrap_or_default(),
            &cluster.name_any(),
        );
        let cs = cluster
            .status
            .as_ref()
            .map(|s| s.connection_string.clone())
            .unwrap_or_default();
        if db.connection_string().is_empty() && !cs.is_empty() {
            db.set_connection_string(&cs);
        }
        db
    }
}

impl DatabaseClients for FakeClients {
    fn admin(&self, cluster: &FoundationDBCluster) -> Arc<dyn AdminClient> {
        Arc::new(self.of(cluster))
    }

    fn lock(&self, cluster: &FoundationDBCluster) -> Arc<dyn LockClient> {
        Arc::new(
            self.of(cluster)
                .lock_client(cluster.lock_id(), cluster.lock_duration().as_secs() as i64),
        )
    }
}

/// What a controller shares between passes (nothing about any one object); `O` are its
/// thresholds (the cluster controller's by default; the backup and restore controllers use
/// theirs).
pub struct Context<O = Options> {
    /// The Kubernetes client.
    pub client: kube::Client,
    /// The database clients.
    pub clients: Arc<dyn DatabaseClients>,
    /// Thresholds.
    pub options: O,
    /// Per-object error back-off.
    pub backoff: Backoff,
    /// Publishes Events as `fdb-kubernetes-operator`.
    pub recorder: kit::events::Recorder,
    /// The status last written per object (by uid, as JSON), for a pass whose cached copy
    /// has not caught up with that write yet.
    pub written: kit::written::Written<serde_json::Value>,
    /// The nodes' taints (the operator's node cache once its watcher runs).
    pub nodes: taints::NodeTaints,
}

impl<O: Default> Context<O> {
    /// A context with upstream's thresholds.
    pub fn new(client: kube::Client, clients: Arc<dyn DatabaseClients>) -> Self {
        let reporter = kube::runtime::events::Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: kit::events::Recorder::new(client.clone(), reporter),
            client,
            clients,
            options: O::default(),
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            written: kit::written::Written::default(),
            nodes: taints::NodeTaints::default(),
        }
    }

    /// The same context with other thresholds (the operator's flags, or a test's).
    #[must_use]
    pub fn with_options(mut self, options: O) -> Self {
        self.options = options;
        self
    }
}

/// One reconcile pass's state: the cluster (its `status` is the status being built), the
/// cluster as last written, and the cached database status.
pub struct Pass {
    /// The controller's context.
    pub ctx: Arc<Context>,
    /// The cluster; `status` holds the status as the steps update it.
    pub cluster: FoundationDBCluster,
    /// The cluster as observed, with the status as last written.
    pub live: FoundationDBCluster,
    /// The cached `status json` (§2.2); `None` when the database did not answer.
    pub db: Option<FdbStatus>,
    /// The pass's clock.
    pub now: Timestamp,
    /// Status writes made in this pass.
    pub status_writes: u32,
}

impl Pass {
    /// A pass over `cluster`.
    pub fn new(ctx: Arc<Context>, cluster: FoundationDBCluster) -> Self {
        let mut working = cluster.clone();
        working.status.get_or_insert_with(Default::default);
        Pass {
            ctx,
            cluster: working,
            live: cluster,
            db: None,
            now: Timestamp::now(),
            status_writes: 0,
        }
    }

    /// The status being built.
    pub fn status(&mut self) -> &mut FoundationDBClusterStatus {
        self.cluster.status.get_or_insert_with(Default::default)
    }

    /// The cluster's namespace.
    pub fn namespace(&self) -> String {
        self.cluster.namespace().unwrap_or_default()
    }

    /// The cluster's name.
    pub fn name(&self) -> String {
        self.cluster.name_any()
    }

    /// An API of `K` in the cluster's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.ctx.client.clone(), &self.namespace())
    }

    /// The admin client for the cluster as it is now.
    pub fn admin(&self) -> Arc<dyn AdminClient> {
        self.ctx.clients.admin(&self.cluster)
    }

    /// The lock client.
    pub fn lock(&self) -> Arc<dyn LockClient> {
        self.ctx.clients.lock(&self.cluster)
    }

    fn selector(&self) -> String {
        self.cluster
            .match_labels()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The cluster's pods by process-group ID.
    pub async fn pods(&self) -> Result<BTreeMap<String, Pod>, kube::Error> {
        self.by_group(self.api::<Pod>()).await
    }

    /// The cluster's PVCs by process-group ID.
    pub async fn pvcs(&self) -> Result<BTreeMap<String, PersistentVolumeClaim>, kube::Error> {
        self.by_group(self.api::<PersistentVolumeClaim>()).await
    }

    /// The cluster's per-group services by process-group ID.
    pub async fn services(&self) -> Result<BTreeMap<String, Service>, kube::Error> {
        self.by_group(self.api::<Service>()).await
    }

    /// The cluster's config map, if it exists.
    pub async fn config_map(&self) -> Result<Option<ConfigMap>, kube::Error> {
        self.api::<ConfigMap>()
            .get_opt(&resources::config_map_name(&self.cluster))
            .await
    }

    async fn by_group<K>(&self, api: Api<K>) -> Result<BTreeMap<String, K>, kube::Error>
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let label = self.cluster.process_group_id_label();
        let list = api
            .list(&ListParams::default().labels(&self.selector()))
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|o| {
                let id = o.meta().labels.as_ref()?.get(&label)?.clone();
                Some((id, o))
            })
            .collect())
    }

    /// Writes the status being built if it differs from the last written one.
    pub async fn write_status(&mut self) -> Result<bool, kube::Error> {
        let desired = self.cluster.status.clone().unwrap_or_default();
        let api = self.api::<FoundationDBCluster>();
        let stored =
            kit::status::write_status_if_changed(&api, &self.live, &desired, FIELD_MANAGER).await?;
        let wrote = stored.is_some();
        if let Some(stored) = stored {
            self.status_writes += 1;
            tracing::info!(cluster = %self.name(), "status updated");
            // The next pass may start from a cached copy that has not seen this write yet:
            // it then works from what was written (kit::written).
            let seen = self.live.resource_version().unwrap_or_default();
            let produced = stored.resource_version().unwrap_or_default();
            let uid = self.live.uid().unwrap_or_default();
            let value = serde_json::to_value(&desired).unwrap_or_default();
            self.ctx.written.record(&uid, &seen, &produced, value);
            self.live.metadata.resource_version = Some(produced);
        }
        self.live.status = Some(desired);
        Ok(wrote)
    }

    /// Records an Event on the cluster (Warning with `warning`); a failure is logged.
    pub async fn event(&self, warning: bool, reason: &str, note: String) {
        let regarding = self.cluster.object_ref(&());
        kit::events::publish(&self.ctx.recorder, &regarding, warning, reason, note, None).await;
    }

    /// Takes (or extends) the global lock when the cluster uses locks; Ok otherwise.
    pub async fn take_lock(&self) -> Result<(), crate::admin::AdminError> {
        if self.cluster.should_use_locks() {
            self.lock().take_lock().await
        } else {
            Ok(())
        }
    }

    /// The last recovery was at least `secs` ago (by the cached status).
    pub fn recovered_for(&self, secs: f64) -> bool {
        self.db
            .as_ref()
            .is_some_and(|s| s.cluster.recovery_state.seconds_since_last_recovered >= secs)
    }

    /// The database is available with at most `max_active_generations` generations.
    pub fn safe_for_destructive_steps(&self) -> bool {
        self.db.as_ref().is_some_and(|s| {
            s.client.database_status.available
                && s.cluster.recovery_state.active_generations
                    <= self.ctx.options.max_active_generations
        })
    }
}

/// The cluster pipeline in upstream's order (reference §4).
pub fn pipeline() -> Pipeline<Pass> {
    Pipeline::new()
        .step(update_status::UpdateStatus)
        .step(update_lock_configuration::UpdateLockConfiguration)
        .step(update_config_map::UpdateConfigMap)
        .step(check_client_compatibility::CheckClientCompatibility)
        .step(delete_pods_for_buggification::DeletePodsForBuggification)
        .step(delete_terminal_pods::DeleteTerminalPods)
        .step(replace_misconfigured_process_groups::ReplaceMisconfiguredProcessGroups)
        .step(replace_failed_process_groups::ReplaceFailedProcessGroups)
        .step(add_process_groups::AddProcessGroups)
        .step(add_services::AddServices)
        .step(add_pvcs::AddPvcs)
        .step(add_pods::AddPods)
        .step(generate_initial_cluster_file::GenerateInitialClusterFile)
        .step(remove_incompatible_processes::RemoveIncompatibleProcesses)
        .step(update_sidecar_versions::UpdateSidecarVersions)
        .step(update_pod_config::UpdatePodConfig)
        .step(update_metadata::UpdateMetadata)
        .step(update_database_configuration::UpdateDatabaseConfiguration)
        .step(choose_removals::ChooseRemovals)
        .step(exclude_processes::ExcludeProcesses)
        .step(change_coordinators::ChangeCoordinators)
        .step(bounce_processes::BounceProcesses)
        .step(maintenance_mode_checker::MaintenanceModeChecker)
        .step(update_pods::UpdatePods)
        .step(remove_process_groups::RemoveProcessGroups)
        .step(remove_services::RemoveServices)
        .step(update_status::UpdateStatus)
}

#[cfg(test)]
mod tests {
    #[test]
    fn steps_run_in_upstreams_order() {
        assert_eq!(
            super::pipeline().names(),
            vec![
                "update_status",
                "update_lock_configuration",
                "update_config_map",
                "check_client_compatibility",
                "delete_pods_for_buggification",
                "delete_terminal_pods",
                "replace_misconfigured_process_groups",
                "replace_failed_process_groups",
                "add_process_groups",
                "add_services",
                "add_pvcs",
                "add_pods",
                "generate_initial_cluster_file",
                "remove_incompatible_processes",
                "update_sidecar_versions",
                "update_pod_config",
                "update_metadata",
                "update_database_configuration",
                "choose_removals",
                "exclude_processes",
                "change_coordinators",
                "bounce_processes",
                "maintenance_mode_checker",
                "update_pods",
                "remove_process_groups",
                "remove_services",
                "update_status",
            ]
        );
    }
}

/// A failed pass.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A step failed.
    #[error(transparent)]
    Pipeline(#[from] kit::pipeline::PipelineError),
    /// Writing the conditions of an invalid spec failed.
    #[error("writing the status of an invalid spec: {0}")]
    InvalidSpecStatus(#[source] kube::Error),
}

impl ReconcileError for ClusterError {
    fn category(&self) -> &'static str {
        match self {
            ClusterError::Pipeline(e) => e.category(),
            ClusterError::InvalidSpecStatus(_) => "kubernetes_request_failed",
        }
    }

    fn is_permanent(&self) -> bool {
        match self {
            ClusterError::Pipeline(e) => e.is_permanent(),
            ClusterError::InvalidSpecStatus(_) => false,
        }
    }
}

/// A spec only the operator can tell is unusable: `SpecValid` and `Ready` say why (with a
/// Warning Event when that is news), and nothing else happens until the spec changes.
async fn invalid_spec(
    ctx: Arc<Context>,
    cluster: &FoundationDBCluster,
    problem: &str,
) -> Result<Action, ClusterError> {
    let mut pass = Pass::new(ctx, cluster.clone());
    let (now, c) = (pass.now, pass.cluster.clone());
    conditions::apply(&c, pass.status(), Some(problem), now);
    tracing::warn!(cluster = %pass.name(), %problem, "the spec is not valid; waiting for a change");
    if pass
        .write_status()
        .await
        .map_err(ClusterError::InvalidSpecStatus)?
    {
        pass.event(true, "InvalidSpec", problem.to_owned()).await;
    }
    Ok(Action::await_change())
}

/// One pass over `cluster`.
pub async fn reconcile(
    cluster: Arc<FoundationDBCluster>,
    ctx: Arc<Context>,
) -> Result<Action, ClusterError> {
    if cluster.spec.skip {
        tracing::info!(cluster = %cluster.name_any(), "skipping: spec.skip is set");
        return Ok(Action::await_change());
    }
    // Being deleted: its children go with it (owner references); creating or updating any
    // now would only race the garbage collector (upstream keeps reconciling).
    if cluster.metadata.deletion_timestamp.is_some() {
        tracing::debug!(cluster = %cluster.name_any(), "being deleted: nothing to do");
        return Ok(Action::await_change());
    }
    if let Err(problem) = cluster.validate() {
        return invalid_spec(ctx, &cluster, &problem).await;
    }
    let mut pass = Pass::new(ctx.clone(), caught_up(&ctx, &cluster));
    let report = pipeline().run(&mut pass).await;
    tracing::debug!(cluster = %cluster.name_any(), steps = ?report.ran_names(), writes = pass.status_writes, "pass finished");
    let outcome = report.into_result()?;
    Ok(ctx.backoff.succeeded(&*cluster, outcome))
}

/// `cluster` with the status this controller last wrote when the cached copy has not caught up
/// with that write yet (a pass triggered right after another would otherwise redo its work
/// from the older status: add process groups again, repeat Events).
fn caught_up(ctx: &Context, cluster: &FoundationDBCluster) -> FoundationDBCluster {
    let uid = cluster.uid().unwrap_or_default();
    let rv = cluster.resource_version().unwrap_or_default();
    let mut out = cluster.clone();
    if let Some(status) = ctx
        .written
        .lagging(&uid, &rv)
        .and_then(|v| serde_json::from_value(v).ok())
    {
        tracing::debug!(cluster = %cluster.name_any(), "the cached copy lags behind the last status write; working from that write");
        out.status = Some(status);
    }
    out
}

/// After a failed pass: per-object back-off.
pub fn error_policy(
    cluster: Arc<FoundationDBCluster>,
    err: &ClusterError,
    ctx: Arc<Context>,
) -> Action {
    tracing::warn!(cluster = %cluster.name_any(), error = %err, "reconcile failed");
    ctx.backoff.failed(&*cluster, err)
}

/// Runs the cluster controller, one reconcile at a time, until `rc.shutdown`; `namespace`
/// limits every watch.
pub async fn run(ctx: Arc<Context>, rc: RunContext, namespace: Option<String>) {
    run_with(ctx, rc, namespace, 1).await;
}

/// Runs the cluster controller with up to `concurrency` reconciles at once (different
/// clusters; one cluster is never reconciled twice at once) until `rc.shutdown`.
pub async fn run_with(
    ctx: Arc<Context>,
    rc: RunContext,
    namespace: Option<String>,
    concurrency: usize,
) {
    fn api<K: Resource<Scope = k8s_openapi::NamespaceResourceScope>>(
        c: &kube::Client,
        ns: &Option<String>,
    ) -> Api<K>
    where
        K::DynamicType: Default,
    {
        match ns {
            Some(ns) => Api::namespaced(c.clone(), ns),
            None => Api::all(c.clone()),
        }
    }
    let client = ctx.client.clone();
    let wc = watcher::Config::default();
    let controller = Controller::new(api::<FoundationDBCluster>(&client, &namespace), wc.clone())
        .owns(api::<Pod>(&client, &namespace), wc.clone())
        .owns(
            api::<PersistentVolumeClaim>(&client, &namespace),
            wc.clone(),
        )
        .owns(api::<Service>(&client, &namespace), wc.clone())
        .owns(api::<ConfigMap>(&client, &namespace), wc.clone());
    // Nodes (cluster-wide, taints only): a change of a node's taints wakes every cluster
    // that reacts to taints (taints.rs).
    let (node_store, node_writer) = kube::runtime::reflector::store();
    ctx.nodes.set_store(node_store);
    let node_events = kube::runtime::watcher(Api::<Node>::all(client.clone()), wc)
        .default_backoff()
        .modify(taints::strip)
        .reflect(node_writer)
        .touched_objects();
    let clusters = controller.store();
    let wake_ctx = ctx.clone();
    let wake = move |node: Node| {
        if !wake_ctx.nodes.changed(&node) {
            return Vec::new();
        }
        clusters
            .state()
            .into_iter()
            .filter(|c| taints::enabled(c))
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect::<Vec<_>>()
    };
    let controller = controller.watches_stream(node_events, wake);
    let mut settings = ControllerSettings::new(CONTROLLER);
    settings.max_concurrent_reconciles = concurrency.max(1);
    run_controller(controller, &settings, &rc, reconcile, error_policy, ctx).await;
}

/// Declares a step's error enum: Kubernetes and database failures, with categories.
macro_rules! step_error {
    ($name:ident, $what:literal) => {
        #[doc = concat!("Why ", $what, " failed.")]
        #[derive(Debug, thiserror::Error)]
        pub enum $name {
            /// A Kubernetes request failed.
            #[error("{0}")]
            Kube(#[from] kube::Error),
            /// A database call failed.
            #[error("{0}")]
            Admin(#[from] crate::admin::AdminError),
        }

        impl kit::reconcile::ReconcileError for $name {
            fn category(&self) -> &'static str {
                match self {
                    $name::Kube(_) => "kubernetes_request_failed",
                    $name::Admin(e) => e.category(),
                }
            }
        }
    };
}
pub(crate) use step_error;
