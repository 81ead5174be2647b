//! The backup's finalizer (reference §11), handled before the steps.
//!
//! Contract:
//! - [`decide`] is pure. Deletion policy `noop` (the default) and backup type `unmanaged`
//!   keep no finalizer (one present is removed); `stop` and `cleanup` add
//!   `foundationdb.org/backup` while the backup exists. Once the backup is deleted: a running
//!   backup is aborted (`fdbbackup abort`) first; then `stop` releases the finalizer, and
//!   `cleanup` deletes the backup's data (`fdbbackup delete -d <url>`) and releases it when
//!   the delete succeeded or fdbbackup says there is no such backup.
//! - [`handle`] returns `Some(action)` when the pass ends here (a deleted backup: requeue
//!   every 5 s until the finalizer is gone), `None` to go on with the steps.
//! - A backup whose cluster no longer exists cannot be stopped: [`without_cluster`] releases
//!   its finalizer with a Warning Event saying what was left behind, so deleting the cluster
//!   first never leaves the backup stuck (upstream's stays stuck).

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::{Context, FINALIZER, Pass, event, step_error};
use crate::admin::AdminError;
use crate::crd::{BACKUP_TYPE_UNMANAGED, FoundationDBBackup};

step_error!(FinalizerError, "handling the backup's finalizer");

/// What to do about the finalizer this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: go on with the steps (or, when deleted, let the deletion finish).
    Nothing,
    /// Add the finalizer.
    Add,
    /// Remove a finalizer the policy does not want.
    Remove,
    /// Deleted with a running backup: abort it, then look again.
    Abort,
    /// Deleted under `cleanup`: delete the data, then release.
    DeleteData,
    /// Deleted and done: release the finalizer.
    Release,
}

/// See the module docs; `running` is the live backup's state, read only for a deleted
/// backup that still carries the finalizer.
pub fn decide(policy: &str, unmanaged: bool, deleting: bool, has: bool, running: bool) -> Decision {
    let managed = !unmanaged && matches!(policy, "stop" | "cleanup");
    match (managed, deleting, has) {
        (false, _, true) => Decision::Remove,
        (false, _, false) | (true, true, false) => Decision::Nothing,
        (true, false, false) => Decision::Add,
        (true, false, true) => Decision::Nothing,
        (true, true, true) if running => Decision::Abort,
        (true, true, true) if policy == "cleanup" => Decision::DeleteData,
        (true, true, true) => Decision::Release,
    }
}

fn unmanaged(backup: &FoundationDBBackup) -> bool {
    backup.backup_type() == BACKUP_TYPE_UNMANAGED
}

/// See the module docs.
pub async fn handle(pass: &mut Pass) -> Result<Option<Action>, FinalizerError> {
    let b = pass.backup.clone();
    let deleting = b.metadata.deletion_timestamp.is_some();
    let has = kit::finalizers::has(&b, FINALIZER);
    let policy = b.deletion_policy().to_owned();
    let running = if deleting && has {
        match pass.admin.get_backup_status(&b).await {
            Ok(s) => s.status.running,
            Err(AdminError::BackupDoesNotExist(_)) => false,
            Err(e) => return Err(e.into()),
        }
    } else {
        false
    };
    let api = pass.api::<FoundationDBBackup>();
    let requeue = Action::requeue(pass.ctx.options.backup_requeue);
    match decide(&policy, unmanaged(&b), deleting, has, running) {
        Decision::Nothing if deleting => Ok(Some(Action::await_change())),
        Decision::Nothing => Ok(None),
        Decision::Add => {
            if let Some(updated) = kit::finalizers::add_returning(&api, &b, FINALIZER).await? {
                pass.backup.metadata = updated.metadata.clone();
                pass.live.metadata = updated.metadata;
            }
            Ok(None)
        }
        Decision::Remove => {
            kit::finalizers::remove(&api, &b, FINALIZER).await?;
            Ok(Some(Action::requeue(pass.ctx.options.backup_requeue)))
        }
        Decision::Abort => {
            pass.admin.abort_backup(&b).await?;
            pass.event(false, "AbortedBackup", format!("aborted the backup on tag {} before deleting the resource (deletionPolicy {policy})", b.tag())).await;
            Ok(Some(requeue))
        }
        Decision::DeleteData => match pass.admin.delete_backup(&b).await {
            Ok(()) | Err(AdminError::BackupDoesNotExist(_)) => {
                let url = b.backup_url().unwrap_or_default();
                pass.event(
                    false,
                    "DeletedBackupData",
                    format!(
                        "deleted the backup data at {} (deletionPolicy cleanup)",
                        redact(&url)
                    ),
                )
                .await;
                kit::finalizers::remove(&api, &b, FINALIZER).await?;
                Ok(Some(Action::await_change()))
            }
            Err(e) => Err(e.into()),
        },
        Decision::Release => {
            kit::finalizers::remove(&api, &b, FINALIZER).await?;
            Ok(Some(Action::await_change()))
        }
    }
}

/// A backup whose cluster does not exist (see the module docs).
pub async fn without_cluster(
    ctx: &Context,
    backup: &FoundationDBBackup,
) -> Result<Action, super::BackupError> {
    let cluster = &backup.spec.cluster_name;
    let deleting = backup.metadata.deletion_timestamp.is_some();
    if deleting {
        if kit::finalizers::has(backup, FINALIZER) {
            let api = kube::Api::<FoundationDBBackup>::namespaced(
                ctx.client.clone(),
                &backup.namespace().unwrap_or_default(),
            );
            event(ctx, backup, true, "ClusterNotFound", format!("cluster {cluster:?} does not exist: the finalizer is released without stopping the backup or deleting its data (deletionPolicy {})", backup.deletion_policy())).await;
            kit::finalizers::remove(&api, backup, FINALIZER)
                .await
                .map_err(FinalizerError::from)?;
        }
        return Ok(Action::await_change());
    }
    let message = format!(
        "spec.clusterName names FoundationDBCluster {cluster:?}, which does not exist in namespace {}; waiting for it",
        backup.namespace().unwrap_or_default()
    );
    tracing::warn!(backup = %backup.name_any(), %message, "cannot reconcile the backup");
    super::not_ready(ctx, backup, "ClusterNotFound", &message).await?;
    event(ctx, backup, true, "ClusterNotFound", message).await;
    Ok(Action::requeue(ctx.options.missing_cluster_requeue))
}

/// The URL without its secret (`user:secret@` → `user@`), for Events and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((creds, host)) => {
            let user = creds.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Decision, decide, redact};

    #[test]
    fn decisions_follow_the_deletion_policy() {
        use Decision::*;
        // (policy, unmanaged, deleting, has, running) -> decision
        let cases = [
            ("noop", false, false, false, false, Nothing),
            ("noop", false, false, true, false, Remove),
            ("noop", false, true, true, true, Remove),
            ("stop", true, false, true, false, Remove),
            ("stop", false, false, false, false, Add),
            ("cleanup", false, false, false, false, Add),
            ("stop", false, false, true, false, Nothing),
            ("stop", false, true, true, true, Abort),
            ("cleanup", false, true, true, true, Abort),
            ("stop", false, true, true, false, Release),
            ("cleanup", false, true, true, false, DeleteData),
            ("stop", false, true, false, false, Nothing),
        ];
        for (policy, unmanaged, deleting, has, running, want) in cases {
            assert_eq!(
                decide(policy, unmanaged, deleting, has, running),
                want,
                "{policy} unmanaged={unmanaged} deleting={deleting} has={has} running={running}"
            );
        }
    }

    #[test]
    fn secrets_stay_out_of_messages() {
        assert_eq!(
            redact("blobstore://user:s3cret@host:443/b?bucket=x"),
            "blobstore://user@host:443/b?bucket=x"
        );
        assert_eq!(
            redact("blobstore://user@host:443/b"),
            "blobstore://user@host:443/b"
        );
    }
}
