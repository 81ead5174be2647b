//! UpdateBackupStatus (reference §11 B1 and B7): the backup's status from its agents'
//! Deployment and `fdbbackup status --json`.
//!
//! Contract:
//! - [`compute`] is pure: `agentCount` = the Deployment's min(ready, updated) replicas;
//!   `deploymentConfigured` = the Deployment observed its generation and carries the desired
//!   labels and annotations (spec hash included), or no Deployment is wanted and none exists;
//!   `backupDetails` = the live backup (URL, running, paused, snapshot period, restorable,
//!   tag), absent while the tag has no backup; the generation markers as upstream's
//!   `CheckReconciliation` sets them, `reconciled` carried over until everything is done.
//! - The step reads the Deployments labelled `foundationdb.org/backup-for=<UID>` and the
//!   live status, refuses a tag that differs from the one in the status (the tag is
//!   immutable: Warning Event `BackupTagChanged`, the pass fails permanently until the spec
//!   changes back), writes the status only when it differs, and leaves it in the pass for the
//!   later steps to decide on.

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use kit::pipeline::{Flow, Step, StepResult};
use kube::ResourceExt;
use kube::api::ListParams;

use super::{BACKUP_FOR_LABEL, Pass, conditions, deployment};
use crate::admin::{AdminError, LiveBackupStatus};
use crate::cluster::FIELD_MANAGER;
use crate::crd::{
    FoundationDBBackup, FoundationDBBackupStatus, FoundationDBBackupStatusBackupDetails,
};

/// Why UpdateBackupStatus failed.
#[derive(Debug, thiserror::Error)]
pub enum UpdateBackupStatusError {
    /// A Kubernetes request failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// `fdbbackup status` failed.
    #[error("{0}")]
    Admin(#[from] AdminError),
    /// The spec's tag is not the tag the backup runs on.
    #[error("the backup tag cannot be changed from {from:?} to {to:?}")]
    TagChanged {
        /// The tag in the status.
        from: String,
        /// The tag in the spec.
        to: String,
    },
}

impl kit::reconcile::ReconcileError for UpdateBackupStatusError {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kubernetes_request_failed",
            Self::Admin(e) => e.category(),
            Self::TagChanged { .. } => "backup_tag_changed",
        }
    }

    fn is_permanent(&self) -> bool {
        matches!(self, Self::TagChanged { .. })
    }
}

/// The step.
pub struct UpdateBackupStatus;

/// See the module docs; `deployments` are those labelled for this backup.
pub fn compute(
    backup: &FoundationDBBackup,
    deployments: &[Deployment],
    live: Option<&LiveBackupStatus>,
    now: Timestamp,
) -> FoundationDBBackupStatus {
    let previous = backup.status.clone().unwrap_or_default();
    let mut status = FoundationDBBackupStatus::default();
    status.generations.reconciled = previous.generations.reconciled;
    let desired = deployment::desired(backup);
    match (deployments, &desired) {
        ([existing], Some(want)) => {
            let s = existing.status.clone().unwrap_or_default();
            let ready = i64::from(s.ready_replicas.unwrap_or(0));
            let updated = i64::from(s.updated_replicas.unwrap_or(0));
            status.agent_count = ready.min(updated);
            let observed = s.observed_generation == existing.metadata.generation;
            status.deployment_configured = observed && deployment::matches(existing, want);
        }
        ([], None) => status.deployment_configured = true,
        _ => status.deployment_configured = false,
    }
    status.backup_details = live.map(|l| FoundationDBBackupStatusBackupDetails {
        url: l.destination_url.clone(),
        running: l.status.running,
        paused: l.backup_agents_paused,
        snapshot_period_seconds: l.snapshot_interval_seconds,
        restorable: l.restorable.unwrap_or(false),
        tag: l.tag.clone().unwrap_or_else(|| backup.tag().to_owned()),
    });
    let mut with_status = backup.clone();
    with_status.status = Some(status.clone());
    with_status.check_reconciliation(&mut status);
    status.conditions = previous.conditions;
    let ready = conditions::backup_ready(backup, &status);
    kit::conditions::upsert(&mut status.conditions, ready, now);
    status
}

/// The tag the status records, when the spec asks for another one.
pub fn changed_tag(backup: &FoundationDBBackup) -> Option<String> {
    let recorded = backup
        .status
        .as_ref()
        .and_then(|s| s.backup_details.as_ref())
        .map(|d| d.tag.clone())
        .filter(|t| !t.is_empty())?;
    (recorded != backup.tag()).then_some(recorded)
}

impl Step<Pass> for UpdateBackupStatus {
    fn name(&self) -> &'static str {
        "update_backup_status"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            let b = pass.backup.clone();
            if let Some(from) = changed_tag(&b) {
                let to = b.tag().to_owned();
                let message = format!(
                    "spec.tag {to:?} differs from the tag the backup runs on, {from:?}; the tag cannot be changed: set it back, or create a new FoundationDBBackup"
                );
                super::not_ready(&pass.ctx, &b, "BackupTagChanged", &message)
                    .await
                    .map_err(UpdateBackupStatusError::from)?;
                pass.event(true, "BackupTagChanged", message).await;
                return Err(UpdateBackupStatusError::TagChanged { from, to }.into());
            }
            let selector = format!("{BACKUP_FOR_LABEL}={}", b.uid().unwrap_or_default());
            let deployments = pass
                .api::<Deployment>()
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(UpdateBackupStatusError::from)?
                .items;
            let live = match pass.admin.get_backup_status(&b).await {
                Ok(l) => Some(l),
                Err(AdminError::BackupDoesNotExist(_)) => None,
                Err(e) => return Err(UpdateBackupStatusError::from(e).into()),
            };
            let status = compute(&b, &deployments, live.as_ref(), pass.now);
            let api = pass.api::<FoundationDBBackup>();
            let wrote =
                kit::status::patch_status_if_changed(&api, &pass.live, &status, FIELD_MANAGER)
                    .await
                    .map_err(UpdateBackupStatusError::from)?;
            if wrote {
                pass.status_writes += 1;
                tracing::info!(backup = %pass.name(), "status updated");
            }
            pass.live.status = Some(status.clone());
            pass.backup.status = Some(status);
            Ok(Flow::Continue)
        })
    }
}

#[cfg(test)]
#[path = "update_backup_status_tests.rs"]
mod tests;
