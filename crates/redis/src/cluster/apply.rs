//! The cluster controller's only writer: children by server-side apply with the fixed field
//! manager `redis-operator`, pods and PVCs created whole and touched by narrow patches, the
//! RedisCluster's annotations, spec and status, the primary Lease, and Events.
//!
//! Contract:
//! - [`Writer::apply`] makes no request when the live object already carries what it would
//!   apply: the `redis.io/applied-hash` annotation equals the hash of the desired object *and*
//!   every desired field is present in the live object with the same value (so a child edited
//!   by someone else is put back, and a field the operator stopped sending is removed by the
//!   apply). A converged cluster costs no write.
//! - Every write of the RedisCluster itself (status, annotations, spec) is conditional on the
//!   `resourceVersion` of the pass's copy (`rc`): a pass working from a view older than the
//!   stored object (a watch cache behind the previous pass's write, a concurrent edit of the
//!   fencing annotation by a user) writes nothing and gets [`WriteError::Stale`]; the pass
//!   ends and the next one reads again. Each write returns the object as stored, whose
//!   `resourceVersion` the pass's next write starts from.
//! - [`Writer::confirm_current`] reads the RedisCluster back to check the pass's copy is the
//!   stored one before an action a stale view must not take (moving the Lease, promoting,
//!   deleting a pod or PVC).
//! - The Lease moves by compare-and-swap on its `resourceVersion`: of two writers starting from
//!   the same holder, exactly one succeeds.
//! - Status is written through the status subresource only, and only when
//!   [`super::status::needs_write`] says so.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kit::reconcile::ReconcileError;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::build::short_hash;
use crate::context::Context;
use crate::crd::{RedisCluster, RedisClusterStatus};
use crate::names;

/// A write that failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Server-side apply of a child.
    #[error("applying {kind} {name}: {source}")]
    Apply {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Creating an object.
    #[error("creating {kind} {name}: {source}")]
    Create {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Deleting an object.
    #[error("deleting {kind} {name}: {source}")]
    Delete {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Patching an object.
    #[error("patching {kind} {name}: {source}")]
    Patch {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Writing the RedisCluster's status.
    #[error("writing the status of RedisCluster {name}: {source}")]
    Status {
        /// Name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The RedisCluster changed since the pass read it (409 Conflict on a write conditional
    /// on the pass's `resourceVersion`, or a newer one read back): the pass's view is stale.
    #[error(
        "RedisCluster {name} changed since this pass read it (resourceVersion {read}); the next pass reads it again"
    )]
    Stale {
        /// Name.
        name: String,
        /// The resourceVersion the pass had.
        read: String,
    },
    /// Reading an object the write depends on.
    #[error("reading {kind} {name}: {source}")]
    Read {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// The category of [`WriteError::Stale`]: a pass whose error has it ended on a stale view.
pub const STALE_VIEW: &str = "stale_view";

impl WriteError {
    /// Whether the pass's view of the RedisCluster was older than the stored object.
    pub fn is_stale(&self) -> bool {
        matches!(self, WriteError::Stale { .. })
    }
}

impl ReconcileError for WriteError {
    fn category(&self) -> &'static str {
        match self {
            WriteError::Apply { .. } => "apply_failed",
            WriteError::Create { .. } => "create_failed",
            WriteError::Delete { .. } => "delete_failed",
            WriteError::Patch { .. } => "patch_failed",
            WriteError::Status { .. } => "status_write_failed",
            WriteError::Stale { .. } => STALE_VIEW,
            WriteError::Read { .. } => "read_failed",
        }
    }
}

fn kind_of<K: Resource<DynamicType = ()>>() -> String {
    K::kind(&()).into_owned()
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether every field of `desired` is in `live` with the same value (maps: by key, lists: in
/// order and of the same length, numbers: by value).
pub fn contained(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .filter(|(_, v)| !v.is_null())
            .all(|(k, v)| l.get(k).is_some_and(|w| contained(v, w))),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(a, b)| contained(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

/// The hash the writer records for `desired` (without its own annotation).
pub fn applied_hash<K: Serialize>(desired: &K) -> String {
    short_hash(&serde_json::to_vec(desired).unwrap_or_default())
}

/// Writes for one RedisCluster.
pub struct Writer<'a> {
    ctx: &'a Context,
    rc: &'a RedisCluster,
    ns: String,
}

impl<'a> Writer<'a> {
    /// The writer of `rc`'s pass.
    pub fn new(ctx: &'a Context, rc: &'a RedisCluster) -> Self {
        Self {
            ctx,
            rc,
            ns: rc.namespace().unwrap_or_default(),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    /// Applies `desired` unless `live` already has it (see the module contract); returns
    /// whether a write was made.
    pub async fn apply<K>(&self, desired: &K, live: Option<&K>) -> Result<bool, WriteError>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let hash = applied_hash(desired);
        let mut obj = desired.clone();
        obj.meta_mut()
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(names::ANN_APPLIED_HASH.into(), hash.clone());
        if let Some(live) = live {
            let recorded = live.annotations().get(names::ANN_APPLIED_HASH);
            let want = serde_json::to_value(&obj).unwrap_or_default();
            let have = serde_json::to_value(live).unwrap_or_default();
            if recorded == Some(&hash) && contained(&want, &have) {
                return Ok(false);
            }
        }
        let name = obj.name_any();
        let mut body = serde_json::to_value(&obj).unwrap_or_default();
        body["apiVersion"] = json!(K::api_version(&()));
        body["kind"] = json!(K::kind(&()));
        let params = PatchParams::apply(names::FIELD_MANAGER).force();
        self.api::<K>()
            .patch(&name, &params, &Patch::Apply(&body))
            .await
            .map_err(|source| WriteError::Apply {
                kind: kind_of::<K>(),
                name: name.clone(),
                source,
            })?;
        tracing::info!(kind = %kind_of::<K>(), %name, created = live.is_none(), "applied");
        Ok(true)
    }

    /// Creates `obj`; `false` when it already exists.
    pub async fn create<K>(&self, obj: &K) -> Result<bool, WriteError>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let pp = PostParams {
            field_manager: Some(names::FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        match self.api::<K>().create(&pp, obj).await {
            Ok(_) => {
                tracing::info!(kind = %kind_of::<K>(), name = %obj.name_any(), "created");
                Ok(true)
            }
            Err(e) if kit::errors::already_exists(&e) => Ok(false),
            Err(source) => Err(WriteError::Create {
                kind: kind_of::<K>(),
                name: obj.name_any(),
                source,
            }),
        }
    }

    /// Deletes `name` (already gone is fine), with a grace period for pods.
    pub async fn delete<K>(&self, name: &str, grace: Option<u32>) -> Result<(), WriteError>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        let dp = DeleteParams {
            grace_period_seconds: grace,
            ..DeleteParams::default()
        };
        match self.api::<K>().delete(name, &dp).await {
            Ok(_) => {
                tracing::info!(kind = %kind_of::<K>(), %name, ?grace, "deleted");
                Ok(())
            }
            Err(e) if not_found(&e) => Ok(()),
            Err(source) => Err(WriteError::Delete {
                kind: kind_of::<K>(),
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// Sets the `redis.io/role` label of pod `name`.
    pub async fn label_pod(&self, name: &str, role: &str) -> Result<(), WriteError> {
        let body = json!({"metadata": {"labels": {names::LABEL_ROLE: role}}});
        self.api::<Pod>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| WriteError::Patch {
                kind: "Pod".into(),
                name: name.to_owned(),
                source,
            })?;
        tracing::info!(pod = %name, %role, "labelled");
        Ok(())
    }

    /// Grows PVC `name`'s storage request to `size`.
    pub async fn resize_pvc(&self, name: &str, size: &str) -> Result<(), WriteError> {
        let body = json!({"spec": {"resources": {"requests": {"storage": size}}}});
        self.api::<PersistentVolumeClaim>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| WriteError::Patch {
                kind: "PersistentVolumeClaim".into(),
                name: name.to_owned(),
                source,
            })?;
        tracing::info!(pvc = %name, %size, "resized");
        Ok(())
    }

    /// The pass's resourceVersion of the RedisCluster.
    fn read_version(&self) -> String {
        self.rc.resource_version().unwrap_or_default()
    }

    /// `e` as [`WriteError::Stale`] when it is a 409 Conflict, else through `other`.
    fn stale_or(
        &self,
        e: kube::Error,
        other: impl FnOnce(kube::Error) -> WriteError,
    ) -> WriteError {
        if kit::status::is_conflict(&e) {
            WriteError::Stale {
                name: self.rc.name_any(),
                read: self.read_version(),
            }
        } else {
            other(e)
        }
    }

    /// Checks that the pass's copy of the RedisCluster is the stored one (a read from the API
    /// server, not the cache): [`WriteError::Stale`] when it is not.
    pub async fn confirm_current(&self) -> Result<(), WriteError> {
        let name = self.rc.name_any();
        let stored = self
            .api::<RedisCluster>()
            .get(&name)
            .await
            .map_err(|source| WriteError::Read {
                kind: "RedisCluster".into(),
                name: name.clone(),
                source,
            })?;
        if stored.resource_version() != self.rc.resource_version() {
            tracing::info!(
                cluster = %name,
                read = %self.read_version(),
                stored = ?stored.resource_version(),
                "the pass's view of the cluster is stale"
            );
            return Err(WriteError::Stale {
                name,
                read: self.read_version(),
            });
        }
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) annotations of the RedisCluster: `change` computes
    /// them from the pass's copy's annotations, and the patch is conditional on its
    /// resourceVersion (a concurrent edit makes it fail with [`WriteError::Stale`], never
    /// lost). Returns the cluster as stored.
    pub async fn annotate_cluster(
        &self,
        change: impl FnOnce(&BTreeMap<String, String>) -> Vec<(&'static str, Option<String>)>,
    ) -> Result<RedisCluster, WriteError> {
        let name = self.rc.name_any();
        let changes = change(self.rc.annotations());
        let ann: serde_json::Map<String, Value> = changes
            .iter()
            .map(|(k, v)| {
                (
                    (*k).to_owned(),
                    v.clone().map_or(Value::Null, Value::String),
                )
            })
            .collect();
        let body = json!({"metadata": {
            "annotations": ann,
            "resourceVersion": self.rc.resource_version(),
        }});
        let updated = self
            .api::<RedisCluster>()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|e| {
                self.stale_or(e, |source| WriteError::Patch {
                    kind: "RedisCluster".into(),
                    name: name.clone(),
                    source,
                })
            })?;
        tracing::info!(cluster = %name, ?changes, "annotated");
        Ok(updated)
    }

    /// Merge-patches the RedisCluster's spec with `spec`, conditional on the pass's
    /// resourceVersion; returns the cluster as stored.
    pub async fn patch_spec(&self, spec: Value) -> Result<RedisCluster, WriteError> {
        let name = self.rc.name_any();
        let body = json!({
            "metadata": {"resourceVersion": self.rc.resource_version()},
            "spec": spec,
        });
        self.api::<RedisCluster>()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|e| {
                self.stale_or(e, |source| WriteError::Patch {
                    kind: "RedisCluster".into(),
                    name: name.clone(),
                    source,
                })
            })
    }

    /// Writes `desired` as the status when it differs from `live` in more than volatile
    /// numbers, conditional on the pass's resourceVersion; returns the cluster as stored, or
    /// `None` when no write was needed.
    pub async fn status(
        &self,
        live: Option<&RedisClusterStatus>,
        desired: &RedisClusterStatus,
    ) -> Result<Option<RedisCluster>, WriteError> {
        if !super::status::needs_write(live, desired) {
            return Ok(None);
        }
        let name = self.rc.name_any();
        tracing::debug!(
            cluster = %name,
            phase = ?desired.phase,
            reason = %desired.phase_reason,
            read = %self.read_version(),
            "writing the status"
        );
        let mut shell = self.rc.clone();
        shell.status = live.cloned();
        kit::status::patch_status_if_changed_at(
            &self.api::<RedisCluster>(),
            &shell,
            desired,
            names::FIELD_MANAGER,
        )
        .await
        .map_err(|e| {
            self.stale_or(e, |source| WriteError::Status {
                name: name.clone(),
                source,
            })
        })
    }

    /// Moves the Lease `name` from `from` to `to` by compare-and-swap (creating it when `from`
    /// is `None`); `Ok(false)` when someone else changed it first.
    pub async fn move_lease(
        &self,
        name: &str,
        live: Option<&Lease>,
        from: Option<&str>,
        to: &str,
    ) -> Result<bool, WriteError> {
        let api = self.api::<Lease>();
        let now = MicroTime(jiff::Timestamp::now());
        let holder = |l: &Lease| l.spec.as_ref().and_then(|s| s.holder_identity.clone());
        let Some(live) = live else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(self.ns.clone()),
                    labels: Some(BTreeMap::from([(
                        names::LABEL_CLUSTER.to_owned(),
                        self.rc.name_any(),
                    )])),
                    owner_references: self.rc.controller_owner_ref(&()).map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(to.to_owned()),
                    acquire_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return self.create(&lease).await;
        };
        if holder(live).as_deref() != from {
            return Ok(false);
        }
        let mut next = live.clone();
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(to.to_owned());
        spec.acquire_time = Some(now);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        match api.replace(name, &PostParams::default(), &next).await {
            Ok(_) => {
                tracing::info!(lease = %name, ?from, %to, "moved the primary Lease");
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(source) => Err(WriteError::Patch {
                kind: "Lease".into(),
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// Publishes an Event about the cluster (never fails the pass).
    pub async fn event(&self, warning: bool, reason: &str, note: String) {
        kit::events::publish(
            &self.ctx.recorder,
            &self.rc.object_ref(&()),
            warning,
            reason,
            note,
            None,
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment_ignores_server_defaults_but_not_changes() {
        let live = json!({"a": 1, "b": {"c": "x", "d": 2}, "l": [{"p": 1, "q": 2}], "extra": true});
        assert!(contained(
            &json!({"a": 1.0, "b": {"c": "x"}, "l": [{"p": 1}]}),
            &live
        ));
        assert!(contained(&json!({"a": 1, "z": null}), &live));
        assert!(!contained(&json!({"a": 2}), &live));
        assert!(!contained(&json!({"b": {"c": "y"}}), &live));
        assert!(!contained(&json!({"l": [{"p": 1}, {"p": 2}]}), &live));
        assert!(!contained(&json!({"missing": 1}), &live));
    }
}
