//! The FoundationDBBackup controller: upstream's seven backup subreconcilers (reference §11)
//! on the toolkit's pipeline, one file per step, after the finalizer handling.
//!
//! Contract:
//! - Input the CRD cannot reject gets a Warning Event with the reason and nothing else
//!   happens: a blob-store account that cannot form a URL (`InvalidBlobStoreConfiguration`)
//!   or a version that does not parse (`InvalidVersion`) waits for a change of the spec; a
//!   `clusterName` naming no FoundationDBCluster in the namespace (`ClusterNotFound`) is
//!   looked for again every 30 s and when a cluster of that name appears.
//! - Then the finalizer ([`finalizer`]): `noop` and `unmanaged` backups carry none; `stop` and
//!   `cleanup` get `foundationdb.org/backup`; a deleted backup aborts a running backup, and
//!   `cleanup` deletes its data, before the finalizer is released; a deleted backup is
//!   requeued every 5 s until then.
//! - Then [`pipeline`]: UpdateBackupStatus, UpdateBackupAgents, StartBackup, StopBackup,
//!   ToggleBackupPaused, ModifyBackup, UpdateBackupStatus. StartBackup…ModifyBackup decide on
//!   the status the first UpdateBackupStatus read in the same pass (upstream's rule), so one
//!   pass issues at most one of start/discontinue and one of pause/resume.
//! - Nothing is kept in memory between passes: every step is idempotent and decides from the
//!   backup, the Deployment and `fdbbackup status`. Status is written only when it changed; a
//!   converged pass makes no write and issues no mutating `fdbbackup` call.
//! - A pass that ends not reconciled requeues after 5 s (upstream's delay); the owned
//!   Deployment's changes (agents becoming ready) trigger passes too.

pub mod conditions;
pub mod deployment;
pub mod finalizer;
pub mod modify_backup;
pub mod start_backup;
pub mod stop_backup;
pub mod toggle_backup_paused;
pub mod update_backup_agents;
pub mod update_backup_status;

#[cfg(test)]
mod decide_tests;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::pipeline::Pipeline;
use kit::reconcile::ReconcileError;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};

use crate::admin::AdminClient;
use crate::cluster::FIELD_MANAGER;
use crate::crd::{FoundationDBBackup, FoundationDBCluster};

/// The controller's name (metrics label).
pub const CONTROLLER: &str = "foundationdbbackup";
/// The finalizer of backups whose deletion stops or cleans up the backup.
pub const FINALIZER: &str = "foundationdb.org/backup";
/// Label on the agents' Deployment: the backup's UID.
pub const BACKUP_FOR_LABEL: &str = "foundationdb.org/backup-for";
/// Label on the agents' pods (and the Deployment's selector): the Deployment's name.
pub const DEPLOYMENT_NAME_LABEL: &str = "foundationdb.org/deployment-name";
/// Annotation on the agents' Deployment: the hash of its desired spec.
pub const LAST_SPEC_KEY: &str = "foundationdb.org/last-applied-spec";

/// Thresholds of the backup and restore controllers.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// How old a Failed/Succeeded agent pod must be before it is deleted
    /// (`--minimum-age-for-terminal-pod-deletion`, 30 s).
    pub minimum_age_for_terminal_pod_deletion: Duration,
    /// Requeue of a backup that is not reconciled yet, or being deleted (5 s).
    pub backup_requeue: Duration,
    /// Requeue of a backup or restore whose cluster does not exist (30 s).
    pub missing_cluster_requeue: Duration,
    /// Requeue of a restore whose state is `running` (1 min).
    pub restore_running_requeue: Duration,
    /// Requeue of a restore in any other unfinished state (5 min).
    pub restore_waiting_requeue: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            minimum_age_for_terminal_pod_deletion: Duration::from_secs(30),
            backup_requeue: Duration::from_secs(5),
            missing_cluster_requeue: Duration::from_secs(30),
            restore_running_requeue: Duration::from_secs(60),
            restore_waiting_requeue: Duration::from_secs(300),
        }
    }
}

/// What the backup and restore controllers share between passes: the cluster controller's
/// context with their own thresholds.
pub type Context = crate::cluster::Context<Options>;

/// `--knob_…` arguments for fdbbackup/fdbrestore from `customParameters` (upstream drops
/// `locality_*` parameters, which only agents understand).
pub fn knobs(custom_parameters: &[String]) -> Vec<String> {
    custom_parameters
        .iter()
        .filter(|p| !p.starts_with("locality_"))
        .map(|p| format!("--{p}"))
        .collect()
}

/// One pass over a backup.
pub struct Pass {
    /// The controller's context.
    pub ctx: Arc<Context>,
    /// The backup; its `status` is what the first UpdateBackupStatus read this pass.
    pub backup: FoundationDBBackup,
    /// The backup with the status as last written.
    pub live: FoundationDBBackup,
    /// The cluster backed up.
    pub cluster: FoundationDBCluster,
    /// The database's admin client (with the backup's knobs).
    pub admin: Arc<dyn AdminClient>,
    /// The pass's clock.
    pub now: Timestamp,
    /// Status writes made in this pass.
    pub status_writes: u32,
}

impl Pass {
    /// A pass over `backup` of `cluster`.
    pub fn new(
        ctx: Arc<Context>,
        backup: FoundationDBBackup,
        cluster: FoundationDBCluster,
    ) -> Self {
        let admin = ctx
            .clients
            .admin_with_knobs(&cluster, knobs(&backup.spec.custom_parameters));
        Pass {
            ctx,
            live: backup.clone(),
            backup,
            cluster,
            admin,
            now: Timestamp::now(),
            status_writes: 0,
        }
    }

    /// The backup's namespace.
    pub fn namespace(&self) -> String {
        self.backup.namespace().unwrap_or_default()
    }

    /// The backup's name.
    pub fn name(&self) -> String {
        self.backup.name_any()
    }

    /// An API of `K` in the backup's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.ctx.client.clone(), &self.namespace())
    }

    /// Records an Event on the backup (Warning with `warning`); a failure is logged.
    pub async fn event(&self, warning: bool, reason: &str, note: String) {
        event(&self.ctx, &self.backup, warning, reason, note).await;
    }
}

/// Records an Event on `obj`; a failure is logged.
pub async fn event<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    warning: bool,
    reason: &str,
    note: String,
) {
    let regarding = obj.object_ref(&());
    kit::events::publish(&ctx.recorder, &regarding, warning, reason, note, None).await;
}

/// The backup pipeline in upstream's order.
pub fn pipeline() -> Pipeline<Pass> {
    Pipeline::new()
        .step(update_backup_status::UpdateBackupStatus)
        .step(update_backup_agents::UpdateBackupAgents)
        .step(start_backup::StartBackup)
        .step(stop_backup::StopBackup)
        .step(toggle_backup_paused::ToggleBackupPaused)
        .step(modify_backup::ModifyBackup)
        .step(update_backup_status::UpdateBackupStatus)
}

/// A failed pass.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// A step failed.
    #[error(transparent)]
    Pipeline(#[from] kit::pipeline::PipelineError),
    /// Reading the backup's cluster failed.
    #[error("reading cluster {name}: {source}")]
    ReadCluster {
        /// The cluster's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Handling the finalizer failed.
    #[error(transparent)]
    Finalizer(#[from] finalizer::FinalizerError),
    /// Writing the status of a backup that cannot be reconciled failed.
    #[error("writing the status: {0}")]
    WriteStatus(#[from] kube::Error),
}

impl ReconcileError for BackupError {
    fn category(&self) -> &'static str {
        match self {
            BackupError::Pipeline(e) => e.category(),
            BackupError::ReadCluster { .. } => "kubernetes_request_failed",
            BackupError::Finalizer(e) => e.category(),
            BackupError::WriteStatus(_) => "kubernetes_request_failed",
        }
    }

    fn is_permanent(&self) -> bool {
        match self {
            BackupError::Pipeline(e) => e.is_permanent(),
            _ => false,
        }
    }
}

/// What the CRD cannot reject but the operator cannot work with: the Warning Event's reason
/// and message.
pub fn invalid_spec(backup: &FoundationDBBackup) -> Option<(&'static str, String)> {
    if let Err(e) = crate::crd::FdbVersion::parse(&backup.spec.version) {
        return Some((
            "InvalidVersion",
            format!(
                "spec.version {:?} is not a FoundationDB version: {e}",
                backup.spec.version
            ),
        ));
    }
    if let Err(e) = backup.backup_url() {
        return Some((
            "InvalidBlobStoreConfiguration",
            format!("spec.blobStoreConfiguration cannot form a backup URL: {e}"),
        ));
    }
    None
}

/// Sets `Ready` to `False` with `reason` and `message` (a status write only when that is
/// news).
pub async fn not_ready(
    ctx: &Context,
    backup: &FoundationDBBackup,
    reason: &str,
    message: &str,
) -> Result<bool, kube::Error> {
    let mut status = backup.status.clone().unwrap_or_default();
    status.conditions = conditions::problem(
        &status.conditions,
        conditions::READY,
        reason,
        message,
        backup.metadata.generation,
        Timestamp::now(),
    );
    let api: Api<FoundationDBBackup> =
        Api::namespaced(ctx.client.clone(), &backup.namespace().unwrap_or_default());
    kit::status::patch_status_if_changed(&api, backup, &status, FIELD_MANAGER).await
}

/// One pass over `backup`.
pub async fn reconcile(
    backup: Arc<FoundationDBBackup>,
    ctx: Arc<Context>,
) -> Result<Action, BackupError> {
    let deleting = backup.metadata.deletion_timestamp.is_some();
    if let Some((reason, message)) = invalid_spec(&backup).filter(|_| !deleting) {
        tracing::warn!(backup = %backup.name_any(), %message, "the spec cannot be used; waiting for a change");
        not_ready(&ctx, &backup, reason, &message).await?;
        event(&ctx, &*backup, true, reason, message).await;
        return Ok(Action::await_change());
    }
    let ns = backup.namespace().unwrap_or_default();
    let name = &backup.spec.cluster_name;
    let clusters: Api<FoundationDBCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = clusters
        .get_opt(name)
        .await
        .map_err(|source| BackupError::ReadCluster {
            name: name.clone(),
            source,
        })?;
    let Some(cluster) = cluster else {
        return finalizer::without_cluster(&ctx, &backup).await;
    };
    let mut pass = Pass::new(ctx.clone(), (*backup).clone(), cluster);
    if let Some(action) = finalizer::handle(&mut pass).await? {
        return Ok(action);
    }
    let report = pipeline().run(&mut pass).await;
    tracing::debug!(backup = %backup.name_any(), steps = ?report.ran_names(), writes = pass.status_writes, "pass finished");
    let outcome = report.into_result()?;
    let generation = backup.metadata.generation.unwrap_or(0);
    let reconciled = pass
        .backup
        .status
        .as_ref()
        .is_some_and(|s| s.generations.reconciled >= generation);
    let outcome = if reconciled {
        outcome
    } else {
        outcome.sooner(kit::reconcile::Outcome::RequeueAfter(
            ctx.options.backup_requeue,
        ))
    };
    Ok(ctx.backoff.succeeded(&*backup, outcome))
}

/// After a failed pass: per-object back-off.
pub fn error_policy(
    backup: Arc<FoundationDBBackup>,
    err: &BackupError,
    ctx: Arc<Context>,
) -> Action {
    tracing::warn!(backup = %backup.name_any(), error = %err, "reconcile failed");
    ctx.backoff.failed(&*backup, err)
}

/// Runs the backup controller until `rc.shutdown`; `namespace` limits every watch. Backups
/// are reconciled again when their agents' Deployment changes and when the cluster they name
/// changes (created, or its connection string written).
pub async fn run(ctx: Arc<Context>, rc: RunContext, namespace: Option<String>, concurrency: usize) {
    let client = ctx.client.clone();
    let wc = watcher::Config::default();
    let backups: Api<FoundationDBBackup> = kit::events::scoped(&client, namespace.as_deref());
    let controller = Controller::new(backups, wc.clone());
    let store = controller.store();
    let controller = controller
        .owns(
            kit::events::scoped::<Deployment>(&client, namespace.as_deref()),
            wc.clone(),
        )
        .watches(
            kit::events::scoped::<FoundationDBCluster>(&client, namespace.as_deref()),
            wc,
            move |cluster| {
                let ns = cluster.namespace();
                let name = cluster.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|b| b.namespace() == ns && b.spec.cluster_name == name)
                    .map(|b| ObjectRef::from_obj(&*b))
                    .collect::<Vec<_>>()
            },
        );
    let mut settings = ControllerSettings::new(CONTROLLER);
    settings.max_concurrent_reconciles = concurrency.max(1);
    run_controller(controller, &settings, &rc, reconcile, error_policy, ctx).await;
}

pub(crate) use crate::cluster::step_error;

#[cfg(test)]
mod tests {
    #[test]
    fn steps_run_in_upstreams_order() {
        assert_eq!(
            super::pipeline().names(),
            vec![
                "update_backup_status",
                "update_backup_agents",
                "start_backup",
                "stop_backup",
                "toggle_backup_paused",
                "modify_backup",
                "update_backup_status",
            ]
        );
    }

    #[test]
    fn knobs_drop_locality_parameters() {
        let params = vec![
            "knob_http_verbose_level=3".to_owned(),
            "locality_zoneid=a".to_owned(),
        ];
        assert_eq!(super::knobs(&params), vec!["--knob_http_verbose_level=3"]);
    }
}
