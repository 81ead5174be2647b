//! The FoundationDBRestore controller: upstream's three restore subreconcilers (reference
//! §11): UpdateRestoreStatus, StartRestore, UpdateRestoreStatus.
//!
//! Contract:
//! - A pass reads the restore and its destination cluster (`spec.destinationClusterName`,
//!   same namespace). A cluster that does not exist, or a blob-store account that cannot form
//!   a URL, gets a Warning Event (`ClusterNotFound`, `InvalidBlobStoreConfiguration`) and
//!   nothing else happens (the cluster is looked for again every 30 s; a bad spec waits for
//!   a change).
//! - A restore whose status says `completed` is done: no database call, no write.
//! - Otherwise [`pipeline`] runs; StartRestore starts the restore at most once (see
//!   [`start_restore`]). A restore not completed is looked at again after 1 min while its
//!   state is `running`, after 5 min otherwise (upstream's delays; [`crate::backup::Options`]).
//! - Nothing is kept in memory between passes; the status is written only when it changed.

pub mod start_restore;
pub mod update_restore_status;

use std::sync::Arc;

use jiff::Timestamp;
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::pipeline::Pipeline;
use kit::reconcile::{Outcome, ReconcileError};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};

use crate::admin::AdminClient;
use crate::backup::{Context, event, knobs};
use crate::cluster::FIELD_MANAGER;
use crate::crd::{FoundationDBCluster, FoundationDBRestore, FoundationDBRestoreStatus};

pub(crate) use crate::cluster::step_error;

/// The controller's name (metrics label).
pub const CONTROLLER: &str = "foundationdbrestore";

/// One pass over a restore.
pub struct Pass {
    /// The controller's context.
    pub ctx: Arc<Context>,
    /// The restore; its `status` is the status as the steps update it.
    pub restore: FoundationDBRestore,
    /// The restore with the status as last written.
    pub live: FoundationDBRestore,
    /// The destination cluster.
    pub cluster: FoundationDBCluster,
    /// The destination database's admin client (with the restore's knobs).
    pub admin: Arc<dyn AdminClient>,
    /// What `fdbrestore status` said in the last UpdateRestoreStatus (`None`: no restore).
    pub restore_text: Option<String>,
    /// The pass's clock.
    pub now: Timestamp,
    /// Status writes made in this pass.
    pub status_writes: u32,
}

impl Pass {
    /// A pass over `restore` into `cluster`.
    pub fn new(
        ctx: Arc<Context>,
        restore: FoundationDBRestore,
        cluster: FoundationDBCluster,
    ) -> Self {
        let admin = ctx
            .clients
            .admin_with_knobs(&cluster, knobs(&restore.spec.custom_parameters));
        Pass {
            ctx,
            live: restore.clone(),
            restore,
            cluster,
            admin,
            restore_text: None,
            now: Timestamp::now(),
            status_writes: 0,
        }
    }

    /// The restore's name.
    pub fn name(&self) -> String {
        self.restore.name_any()
    }

    /// The status being built.
    pub fn status(&self) -> FoundationDBRestoreStatus {
        self.restore.status.clone().unwrap_or_default()
    }

    /// Writes `status` if it differs from the last written one.
    pub async fn write_status(
        &mut self,
        status: FoundationDBRestoreStatus,
    ) -> Result<bool, kube::Error> {
        let api: Api<FoundationDBRestore> = Api::namespaced(
            self.ctx.client.clone(),
            &self.restore.namespace().unwrap_or_default(),
        );
        let stored =
            kit::status::write_status_if_changed(&api, &self.live, &status, FIELD_MANAGER).await?;
        let wrote = stored.is_some();
        if let Some(stored) = stored {
            self.status_writes += 1;
            tracing::info!(restore = %self.name(), state = %status.state, "status updated");
            let seen = self.live.resource_version().unwrap_or_default();
            let produced = stored.resource_version().unwrap_or_default();
            let value = serde_json::to_value(&status).unwrap_or_default();
            let uid = self.restore.uid().unwrap_or_default();
            self.ctx.written.record(&uid, &seen, &produced, value);
            self.live.metadata.resource_version = Some(produced);
        }
        self.live.status = Some(status.clone());
        self.restore.status = Some(status);
        Ok(wrote)
    }

    /// Records an Event on the restore (Warning with `warning`).
    pub async fn event(&self, warning: bool, reason: &str, note: String) {
        event(&self.ctx, &self.restore, warning, reason, note).await;
    }
}

/// The restore pipeline in upstream's order.
pub fn pipeline() -> Pipeline<Pass> {
    Pipeline::new()
        .step(update_restore_status::UpdateRestoreStatus)
        .step(start_restore::StartRestore)
        .step(update_restore_status::UpdateRestoreStatus)
}

/// A failed pass.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A step failed.
    #[error(transparent)]
    Pipeline(#[from] kit::pipeline::PipelineError),
    /// Writing the status of a restore that cannot be reconciled failed.
    #[error("writing the status: {0}")]
    WriteStatus(#[source] kube::Error),
    /// Reading the destination cluster failed.
    #[error("reading cluster {name}: {source}")]
    ReadCluster {
        /// The cluster's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError for RestoreError {
    fn category(&self) -> &'static str {
        match self {
            RestoreError::Pipeline(e) => e.category(),
            RestoreError::ReadCluster { .. } | RestoreError::WriteStatus(_) => {
                "kubernetes_request_failed"
            }
        }
    }

    fn is_permanent(&self) -> bool {
        match self {
            RestoreError::Pipeline(e) => e.is_permanent(),
            RestoreError::ReadCluster { .. } | RestoreError::WriteStatus(_) => false,
        }
    }
}

/// How soon to look at a restore in `state` again (`None`: it is done).
pub fn next_look(state: &str, options: &crate::backup::Options) -> Option<std::time::Duration> {
    match state {
        "completed" => None,
        "running" => Some(options.restore_running_requeue),
        _ => Some(options.restore_waiting_requeue),
    }
}

/// Sets `Complete` to `False` with `reason` and `message` (a status write only when that is
/// news).
async fn not_complete(
    ctx: &Context,
    restore: &FoundationDBRestore,
    reason: &str,
    message: &str,
) -> Result<bool, RestoreError> {
    let mut status = restore.status.clone().unwrap_or_default();
    status.conditions = crate::backup::conditions::problem(
        &status.conditions,
        crate::backup::conditions::COMPLETE,
        reason,
        message,
        restore.metadata.generation,
        Timestamp::now(),
    );
    let api: Api<FoundationDBRestore> =
        Api::namespaced(ctx.client.clone(), &restore.namespace().unwrap_or_default());
    kit::status::patch_status_if_changed(&api, restore, &status, FIELD_MANAGER)
        .await
        .map_err(RestoreError::WriteStatus)
}

/// One pass over `restore`.
pub async fn reconcile(
    restore: Arc<FoundationDBRestore>,
    ctx: Arc<Context>,
) -> Result<Action, RestoreError> {
    let restore = with_written_status(&ctx, restore);
    let state = restore.status.clone().unwrap_or_default().state;
    if state == "completed" {
        return Ok(Action::await_change());
    }
    if let Err(e) = restore.backup_url() {
        let message = format!("spec.blobStoreConfiguration cannot form a backup URL: {e}");
        tracing::warn!(restore = %restore.name_any(), %message, "the spec cannot be used; waiting for a change");
        not_complete(&ctx, &restore, "InvalidBlobStoreConfiguration", &message).await?;
        event(
            &ctx,
            &*restore,
            true,
            "InvalidBlobStoreConfiguration",
            message,
        )
        .await;
        return Ok(Action::await_change());
    }
    let ns = restore.namespace().unwrap_or_default();
    let name = restore.spec.destination_cluster_name.clone();
    let clusters: Api<FoundationDBCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = clusters
        .get_opt(&name)
        .await
        .map_err(|source| RestoreError::ReadCluster {
            name: name.clone(),
            source,
        })?;
    let Some(cluster) = cluster else {
        let message = format!(
            "spec.destinationClusterName names FoundationDBCluster {name:?}, which does not exist in namespace {ns}; waiting for it"
        );
        tracing::warn!(restore = %restore.name_any(), %message, "cannot reconcile the restore");
        not_complete(&ctx, &restore, "ClusterNotFound", &message).await?;
        event(&ctx, &*restore, true, "ClusterNotFound", message).await;
        return Ok(Action::requeue(ctx.options.missing_cluster_requeue));
    };
    let mut pass = Pass::new(ctx.clone(), (*restore).clone(), cluster);
    let report = pipeline().run(&mut pass).await;
    tracing::debug!(restore = %restore.name_any(), steps = ?report.ran_names(), writes = pass.status_writes, "pass finished");
    let outcome = report.into_result()?;
    let state = pass.status().state;
    if state == "completed" && pass.status_writes > 0 {
        pass.event(false, "RestoreCompleted", "the restore completed".into())
            .await;
    }
    let outcome = match next_look(&state, &ctx.options) {
        Some(after) => outcome.sooner(Outcome::RequeueAfter(after)),
        None => outcome,
    };
    Ok(ctx.backoff.succeeded(&*restore, outcome))
}

/// `restore` with the status this process last wrote while its cached copy lags that write
/// (so a pass on a stale copy of a completed restore calls nothing).
fn with_written_status(
    ctx: &Context,
    restore: Arc<FoundationDBRestore>,
) -> Arc<FoundationDBRestore> {
    let uid = restore.uid().unwrap_or_default();
    let rv = restore.resource_version().unwrap_or_default();
    let written = ctx.written.lagging(&uid, &rv);
    match written.and_then(|v| serde_json::from_value(v).ok()) {
        Some(status) => Arc::new(FoundationDBRestore {
            status: Some(status),
            ..(*restore).clone()
        }),
        None => restore,
    }
}

/// After a failed pass: per-object back-off.
pub fn error_policy(
    restore: Arc<FoundationDBRestore>,
    err: &RestoreError,
    ctx: Arc<Context>,
) -> Action {
    tracing::warn!(restore = %restore.name_any(), error = %err, "reconcile failed");
    ctx.backoff.failed(&*restore, err)
}

/// Runs the restore controller until `rc.shutdown`; `namespace` limits the watch.
pub async fn run(ctx: Arc<Context>, rc: RunContext, namespace: Option<String>, concurrency: usize) {
    let client = ctx.client.clone();
    let restores: Api<FoundationDBRestore> = kit::events::scoped(&client, namespace.as_deref());
    let controller = Controller::new(restores, watcher::Config::default());
    let mut settings = ControllerSettings::new(CONTROLLER);
    settings.max_concurrent_reconciles = concurrency.max(1);
    run_controller(controller, &settings, &rc, reconcile, error_policy, ctx).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::backup::Options;

    #[test]
    fn steps_run_in_upstreams_order() {
        assert_eq!(
            super::pipeline().names(),
            vec![
                "update_restore_status",
                "start_restore",
                "update_restore_status"
            ]
        );
    }

    #[test]
    fn unfinished_restores_are_looked_at_again() {
        let o = Options::default();
        assert_eq!(super::next_look("completed", &o), None);
        assert_eq!(
            super::next_look("running", &o),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            super::next_look("queued", &o),
            Some(Duration::from_secs(300))
        );
        assert_eq!(super::next_look("", &o), Some(Duration::from_secs(300)));
    }
}
