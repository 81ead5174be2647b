//! Retention of stored artifacts: a RedisBackup with `deletionPolicy: Delete` carries the
//! finalizer `redis.io/artifact-cleanup`, and when it is deleted (by hand, or pruned by its
//! RedisScheduledBackup) its artifact is deleted from the object store before the object goes.
//!
//! Contract:
//! - [`ensure_finalizer`]: a live backup has the finalizer exactly while its policy is
//!   `Delete` (added before anything else the pass does, removed when the policy goes back to
//!   `Retain`). `Retain` (the default) never adds it, so upstream's manifests behave as before.
//! - [`decide`] (pure) says what a deleting backup needs, in this order: `Retain` (set after
//!   the finalizer was added) releases it and keeps the artifact; a backup that never started
//!   (no target pod, no path) or whose destination is invalid stored nothing and is released;
//!   a `backupPath` other than where this backup is stored (`<path>/<name>.rdb` or
//!   `.aof.tar.gz` in its destination) is never deleted (Warning, released); past
//!   `deletionTimestamp + --artifact-deletion-timeout` the artifact is kept with a Warning
//!   `ArtifactKept` saying why and the finalizer is released, so nothing waits forever; a
//!   RedisCluster still bootstrapping from this backup holds the deletion (its restore needs
//!   the artifact); without a data pod to ask, it waits; otherwise it asks one.
//! - The deletion is done by a data pod's instance manager (`DELETE /v1/backup/<name>`, the
//!   backup's own request): the pods hold the credentials, the operator never reads them. The
//!   pod that took the backup is asked first (it refuses while that backup still runs there,
//!   whose upload could come after), else a Ready data pod. Done (deleted, or not there):
//!   Event `ArtifactDeleted` and the finalizer goes. Refused or unreachable: asked again
//!   every [`RETRY`] until the deadline, the reason announced when it changes
//!   (`ArtifactDeletionPending`).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;

use super::observe::{self, Observed};
use super::{BackupError, Ctx};
use crate::crd::{BackupDeletionPolicy, BackupMethod, RedisBackup, RedisCluster};
use crate::instance::backup::object_key;
use crate::instance_client::Answer;
use crate::names;

/// Default of `--artifact-deletion-timeout`: how long a deleted backup's artifact may take to
/// be deleted before it is kept with a Warning and the object released.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// How soon a deletion that had to wait is tried again.
pub const RETRY: Duration = Duration::from_secs(2);

/// Where backup `b` is (or would be) stored: `s3://<bucket>/<key>` or
/// `azblob://<container>/<key>`, the key being upstream's `<path>/<name>.rdb` (or
/// `.aof.tar.gz`); `None` when its destination is invalid.
pub fn expected_path(b: &RedisBackup) -> Option<String> {
    let d = b.spec.destination.as_ref()?;
    crate::crd::BackupDestination::validate(Some(d)).ok()?;
    let aof = b.spec.method == BackupMethod::Aof;
    let name = b.name_any();
    match (&d.s3, &d.azure) {
        (Some(s), None) => Some(format!(
            "s3://{}/{}",
            s.bucket,
            object_key(&s.path, &name, aof)
        )),
        (None, Some(a)) => Some(format!(
            "azblob://{}/{}",
            a.container,
            object_key(&a.path, &name, aof)
        )),
        _ => None,
    }
}

/// What [`decide`] reads.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// The backup's `deletionPolicy`.
    pub policy: BackupDeletionPolicy,
    /// Its `deletionTimestamp`.
    pub deleting_since: Timestamp,
    /// This pass's clock.
    pub now: Timestamp,
    /// `--artifact-deletion-timeout`.
    pub timeout: Duration,
    /// `status.targetPod`.
    pub target_pod: &'a str,
    /// `status.backupPath`.
    pub backup_path: &'a str,
    /// [`expected_path`].
    pub expected: Option<&'a str>,
    /// A RedisCluster still restoring from this backup (`bootstrap.backupName`, not
    /// `bootstrapCompleted`).
    pub restoring: Option<&'a str>,
    /// The data pod to ask (its IP), or why there is none.
    pub via: Result<&'a str, &'a str>,
    /// Why the last pass did not delete it (the store's refusal, or what it waited for).
    pub last_error: Option<&'a str>,
}

/// What a deleting backup needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Nothing to delete: the finalizer goes; why (for the log).
    Release(String),
    /// The artifact is kept: a Warning `ArtifactKept` with the reason, and the finalizer goes.
    Keep(String),
    /// Not yet: why.
    Wait(String),
    /// Ask the instance at this IP to delete the artifact.
    Delete(String),
}

/// What a deleting backup needs (see the module contract).
pub fn decide(f: &Facts<'_>) -> Cleanup {
    if f.policy == BackupDeletionPolicy::Retain {
        return Cleanup::Release("deletionPolicy is Retain: the artifact is kept".into());
    }
    if f.target_pod.is_empty() && f.backup_path.is_empty() {
        return Cleanup::Release("the backup never started: nothing was stored".into());
    }
    let Some(expected) = f.expected else {
        return Cleanup::Release("the destination is invalid: nothing was stored".into());
    };
    if !f.backup_path.is_empty() && f.backup_path != expected {
        return Cleanup::Keep(format!(
            "backupPath {} is not where this backup is stored ({expected}); it is not deleted",
            f.backup_path
        ));
    }
    let deadline = f.deleting_since + f.timeout;
    if f.now >= deadline {
        let why = f
            .last_error
            .or(f.restoring.map(|_| "a cluster was still restoring from it"))
            .unwrap_or("it could not be deleted");
        return Cleanup::Keep(format!(
            "{expected} was not deleted within {}s of the RedisBackup's deletion ({why}); \
             it is kept: delete it from the object store by hand",
            f.timeout.as_secs()
        ));
    }
    if let Some(c) = f.restoring {
        return Cleanup::Wait(format!(
            "RedisCluster {c} is still being restored from this backup"
        ));
    }
    match f.via {
        Ok(ip) => Cleanup::Delete(ip.to_owned()),
        Err(why) => Cleanup::Wait(why.to_owned()),
    }
}

/// The data pod to ask: the one that took the backup when it still runs and has an IP (it
/// refuses while the backup runs there), else the first Ready one with an IP.
pub fn via<'p>(target: &str, pods: &'p [Pod]) -> Option<&'p Pod> {
    let live = |p: &&Pod| p.metadata.deletion_timestamp.is_none() && observe::ip_of(p).is_some();
    let ready = |p: &&Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    pods.iter()
        .filter(live)
        .find(|p| !target.is_empty() && p.name_any() == target)
        .or_else(|| pods.iter().filter(live).find(ready))
}

/// Keeps the finalizer in line with the policy of a live backup (see the module contract);
/// the backup as stored, or `None` when the pass should end and start again.
pub async fn ensure_finalizer(
    ctx: &Ctx,
    b: &RedisBackup,
) -> Result<Option<RedisBackup>, BackupError> {
    let api = backups(ctx, b);
    let want = b.spec.deletion_policy() == BackupDeletionPolicy::Delete;
    let has = kit::finalizers::has(b, names::FINALIZER_ARTIFACT);
    let err = |source| BackupError::Finalizer {
        name: b.name_any(),
        source,
    };
    match (want, has) {
        (true, false) => {
            let stored = kit::finalizers::add_returning(&api, b, names::FINALIZER_ARTIFACT)
                .await
                .map_err(err)?;
            tracing::info!(backup = %b.name_any(), "artifact-cleanup finalizer added");
            Ok(Some(stored.unwrap_or_else(|| b.clone())))
        }
        (false, true) => {
            kit::finalizers::remove(&api, b, names::FINALIZER_ARTIFACT)
                .await
                .map_err(err)?;
            Ok(None)
        }
        _ => Ok(Some(b.clone())),
    }
}

fn backups(ctx: &Ctx, b: &RedisBackup) -> Api<RedisBackup> {
    Api::namespaced(
        ctx.shared.client.clone(),
        &b.namespace().unwrap_or_default(),
    )
}

// A RedisCluster of the namespace whose bootstrap restore still needs backup `b`.
async fn restoring(ctx: &Ctx, b: &RedisBackup) -> Result<Option<String>, BackupError> {
    let ns = b.namespace().unwrap_or_default();
    let list = Api::<RedisCluster>::namespaced(ctx.shared.client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .map_err(|source| BackupError::ListClusters {
            namespace: ns.clone(),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            c.spec
                .bootstrap
                .as_ref()
                .is_some_and(|s| s.backup_name == b.name_any())
        })
        .find(|c| !c.status.as_ref().is_some_and(|s| s.bootstrap_completed))
        .map(|c| c.name_any()))
}

/// One pass over a deleting backup that carries the finalizer.
pub async fn reconcile(ctx: &Ctx, b: &RedisBackup) -> Result<Action, BackupError> {
    if !kit::finalizers::has(b, names::FINALIZER_ARTIFACT) {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let uid = format!("cleanup/{}", b.uid().unwrap_or_default());
    let obs = observe::observe(ctx, b, true).await?;
    let restoring = restoring(ctx, b).await?;
    let s = b.status.clone().unwrap_or_default();
    let expected = expected_path(b);
    let pod = via(&s.target_pod, &obs.pods);
    let ip = pod.and_then(observe::ip_of);
    let no_pod = no_pod(b, &obs);
    let last = ctx.shared.last_error(&uid);
    let step = decide(&Facts {
        policy: b.spec.deletion_policy(),
        deleting_since: b.metadata.deletion_timestamp.as_ref().map_or(now, |t| t.0),
        now,
        timeout: ctx.shared.artifact_timeout,
        target_pod: &s.target_pod,
        backup_path: &s.backup_path,
        expected: expected.as_deref(),
        restoring: restoring.as_deref(),
        via: ip.as_deref().ok_or(no_pod.as_str()),
        last_error: last.as_deref(),
    });
    let recorder = &ctx.shared.recorder;
    match step {
        Cleanup::Release(why) => {
            tracing::info!(backup = %b.name_any(), %why, "releasing the artifact-cleanup finalizer");
            release(ctx, b, &uid).await?;
        }
        Cleanup::Keep(why) => {
            super::apply::event(recorder, b, true, "ArtifactKept", why).await;
            release(ctx, b, &uid).await?;
        }
        Cleanup::Wait(why) => {
            ctx.shared.set_last_error(&uid, &why);
            pending(ctx, b, &uid, &why).await;
            return Ok(Action::requeue(RETRY));
        }
        Cleanup::Delete(ip) => return delete(ctx, b, &obs, &ip, &uid).await,
    }
    Ok(Action::await_change())
}

fn no_pod(b: &RedisBackup, obs: &Observed) -> String {
    let cluster = &b.spec.cluster_name;
    match (&obs.cluster, &obs.instances) {
        (None, _) => format!(
            "RedisCluster {cluster} does not exist: no data pod holds the credentials to delete the artifact"
        ),
        (Some(_), Err(e)) => format!("no instance client for RedisCluster {cluster}: {e}"),
        (Some(_), Ok(_)) => format!("no data pod of RedisCluster {cluster} is Ready"),
    }
}

async fn delete(
    ctx: &Ctx,
    b: &RedisBackup,
    obs: &Observed,
    ip: &str,
    uid: &str,
) -> Result<Action, BackupError> {
    let Ok(instances) = &obs.instances else {
        return Ok(Action::requeue(RETRY));
    };
    let req = super::request(b);
    let why = match instances.delete_backup(ip, &req).await {
        Ok(Answer::Done(msg)) => {
            let note = format!("artifact of RedisBackup {}: {msg}", b.name_any());
            super::apply::event(&ctx.shared.recorder, b, false, "ArtifactDeleted", note).await;
            release(ctx, b, uid).await?;
            return Ok(Action::await_change());
        }
        Ok(Answer::Refused(why)) => why,
        Err(e) => e.to_string(),
    };
    ctx.shared.set_last_error(uid, &why);
    pending(ctx, b, uid, &why).await;
    Ok(Action::requeue(RETRY))
}

async fn pending(ctx: &Ctx, b: &RedisBackup, uid: &str, why: &str) {
    if ctx.shared.announce_pending(uid, why) {
        tracing::info!(backup = %b.name_any(), reason = %why, "the artifact's deletion waits");
        let note = format!("the artifact's deletion waits: {why}");
        let recorder = &ctx.shared.recorder;
        super::apply::event(recorder, b, false, "ArtifactDeletionPending", note).await;
    }
}

async fn release(ctx: &Ctx, b: &RedisBackup, uid: &str) -> Result<(), BackupError> {
    kit::finalizers::remove(&backups(ctx, b), b, names::FINALIZER_ARTIFACT)
        .await
        .map_err(|source| BackupError::Finalizer {
            name: b.name_any(),
            source,
        })?;
    ctx.shared.forget_pending(uid);
    ctx.shared.forget_last_error(uid);
    Ok(())
}

#[cfg(test)]
#[path = "cleanup_tests.rs"]
mod tests;
