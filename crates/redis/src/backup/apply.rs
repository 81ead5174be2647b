//! The backup controller's writes besides the backup's own status: Events, and the backup
//! fields of the RedisCluster's status ([`super::summary::cluster_status`]).
//!
//! Contract: the cluster's status is written with a JSON merge patch of only
//! `lastSuccessfulBackup`, `lastFailedBackup` and `conditions`, carrying the
//! `resourceVersion` it was computed from, so a concurrent write by the cluster controller
//! makes it fail (409) and the pass retry on a fresh read instead of overwriting it. The
//! backup controller also re-checks whenever the RedisCluster changes, so a cluster status
//! write that lost these fields is repaired.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use super::summary::ClusterBackupStatus;
use crate::crd::{RedisBackup, RedisCluster};
use crate::names;

/// A failed write of the cluster's backup status.
#[derive(Debug, thiserror::Error)]
#[error("writing the backup status of RedisCluster {name}: {source}")]
pub struct ClusterStatusError {
    /// The cluster.
    pub name: String,
    /// The API error (409 when the cluster changed meanwhile).
    #[source]
    pub source: kube::Error,
}

/// Records an Event on `b` (a Warning with `warning`).
pub async fn event(
    recorder: &kit::events::Recorder,
    b: &RedisBackup,
    warning: bool,
    reason: &str,
    note: String,
) {
    let reference: ObjectReference = b.object_ref(&());
    kit::events::publish(recorder, &reference, warning, reason, note, None).await;
}

/// Writes `desired` into `cluster`'s status (see the module contract).
pub async fn cluster_status(
    client: &kube::Client,
    cluster: &RedisCluster,
    desired: &ClusterBackupStatus,
) -> Result<(), ClusterStatusError> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let body = serde_json::json!({
        "metadata": {"resourceVersion": cluster.resource_version()},
        "status": {
            "lastSuccessfulBackup": desired.last_successful_backup,
            "lastFailedBackup": desired.last_failed_backup,
            "conditions": desired.conditions,
        }
    });
    let params = PatchParams {
        field_manager: Some(names::FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    Api::<RedisCluster>::namespaced(client.clone(), &ns)
        .patch_status(&name, &params, &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| ClusterStatusError { name, source })
}
