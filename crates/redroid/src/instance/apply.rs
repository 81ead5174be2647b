//! The only writer of the instance controller: Pods (create, adopt, delete), the Service
//! (server-side apply, only when it differs), expired overrides, the legacy finalizer, and
//! Events.
//!
//! A deleted instance's Pods ([`delete_pods_of_deleted`]) are deleted as soon as the
//! deletion is seen, without a finalizer: the instance is gone at once, and if the operator
//! misses the deletion (down, or a Pod not yet cached) the garbage collector still removes
//! them through their owner reference.
//!
//! Contract: every function writes only when there is something to change; a converged
//! instance passes through here without a single request. Every write it makes is logged at
//! info with the instance's namespace and name (and the Pod or Service), so the operator's log
//! says what it did; a pass that writes nothing logs nothing here.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::build::service::up_to_date;
use super::cache::{self, Key};
use super::cached_pod::CachedPod;
use super::validate::{Expired, PodStep};
use crate::context::Context;
use crate::crd::RedroidInstance;
use crate::names;

/// A write failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Creating the instance Pod failed.
    #[error("create pod {name}: {source}")]
    CreatePod { name: String, source: kube::Error },
    /// Deleting an instance Pod failed.
    #[error("delete pod {name}: {source}")]
    DeletePod { name: String, source: kube::Error },
    /// Taking over an orphaned Pod failed.
    #[error("adopt pod {name}: {source}")]
    AdoptPod { name: String, source: kube::Error },
    /// Applying the Service failed.
    #[error("apply service {name}: {source}")]
    ApplyService { name: String, source: kube::Error },
    /// Clearing expired overrides failed.
    #[error("clear expired overrides of {name}: {source}")]
    ClearOverrides { name: String, source: kube::Error },
    /// Removing the upstream finalizer failed.
    #[error("remove legacy finalizer of {name}: {source}")]
    RemoveFinalizer { name: String, source: kube::Error },
}

impl kit::reconcile::ReconcileError for ApplyError {
    fn category(&self) -> &'static str {
        match self {
            ApplyError::CreatePod { .. } => "create_pod",
            ApplyError::DeletePod { .. } => "delete_pod",
            ApplyError::AdoptPod { .. } => "adopt_pod",
            ApplyError::ApplyService { .. } => "apply_service",
            ApplyError::ClearOverrides { .. } => "clear_overrides",
            ApplyError::RemoveFinalizer { .. } => "remove_finalizer",
        }
    }
}

/// What the Pod step left behind, for the status.
#[derive(Clone, Debug, PartialEq)]
pub enum PodState {
    /// No Pod.
    Absent,
    /// The current Pod.
    Current(Box<CachedPod>),
    /// Just created: this name.
    Created(String),
    /// Waiting for this Pod to terminate.
    Terminating(String),
    /// Waiting for this Pod, controlled by another object, to go.
    Foreign(String),
}

/// Publishes an Event about `inst` in the background; failures are logged, never fatal.
///
/// An Event is a courtesy: the pass that decided it goes on at once instead of waiting for
/// the API server to store it, so a pass costs its own writes only (under load, an awaited
/// Event added one round trip to every pass that created a Pod or became ready). Background
/// Events are written [`crate::context::BACKGROUND_EVENTS`] at a time, in the order decided.
pub fn event(
    ctx: &Context,
    inst: &RedroidInstance,
    warning: bool,
    reason: &'static str,
    note: String,
) {
    let reference = inst.object_ref(&());
    let recorder = ctx.recorder.clone();
    let permits = ctx.background_events.clone();
    tokio::spawn(async move {
        // The semaphore is never closed; without a permit the Event is still written.
        let _permit = permits.acquire_owned().await.ok();
        kit::events::publish(&recorder, &reference, warning, reason, note, None).await;
    });
}

fn api<K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>>(
    ctx: &Context,
    inst: &RedroidInstance,
) -> Api<K> {
    Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default())
}

/// Removes the upstream operator's finalizer from an instance being deleted.
///
/// A merge patch of the remaining list guarded by resourceVersion: the same safety as a JSON
/// patch `test` + `remove` (kube's `jsonpatch` feature is not enabled in this workspace).
pub async fn release_legacy_finalizer(
    ctx: &Context,
    inst: &RedroidInstance,
) -> Result<(), ApplyError> {
    let removed = kit::finalizers::remove(&api(ctx, inst), inst, names::LEGACY_INSTANCE_FINALIZER)
        .await
        .map_err(|source| ApplyError::RemoveFinalizer {
            name: inst.name_any(),
            source,
        })?;
    if removed {
        tracing::info!(
            namespace = %inst.namespace().unwrap_or_default(),
            name = %inst.name_any(),
            finalizer = %names::LEGACY_INSTANCE_FINALIZER,
            "removed the upstream finalizer from a deleted instance"
        );
    }
    Ok(())
}

/// Clears expired overrides (a merge patch, whoever set them) and returns the updated instance.
pub async fn clear_expired(
    ctx: &Context,
    inst: &RedroidInstance,
    expired: Expired,
) -> Result<Option<RedroidInstance>, ApplyError> {
    if !expired.woken && !expired.suspended {
        return Ok(None);
    }
    let mut status = serde_json::Map::new();
    for (hit, key) in [(expired.woken, "woken"), (expired.suspended, "suspended")] {
        if hit {
            status.insert(key.into(), serde_json::Value::Null);
        }
    }
    let body = json!({"status": status});
    let name = inst.name_any();
    let res = api::<RedroidInstance>(ctx, inst)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await;
    let updated = res.map_err(|source| ApplyError::ClearOverrides {
        name: name.clone(),
        source,
    })?;
    tracing::info!(
        namespace = %inst.namespace().unwrap_or_default(),
        name = %name,
        woken = expired.woken,
        suspended = expired.suspended,
        "cleared expired override"
    );
    if expired.woken {
        event(
            ctx,
            inst,
            false,
            "WokenExpired",
            "status.woken expired and was cleared".into(),
        );
    }
    if expired.suspended {
        event(
            ctx,
            inst,
            false,
            "SuspendedExpired",
            "status.suspended expired and was cleared".into(),
        );
    }
    Ok(Some(updated))
}

/// Carries out the Pod step; `desired` is the Pod to create when the step says so.
pub async fn pods(
    ctx: &Context,
    inst: &RedroidInstance,
    step: PodStep,
    desired: Option<&Pod>,
) -> Result<PodState, ApplyError> {
    let api: Api<Pod> = api(ctx, inst);
    match step {
        PodStep::Nothing => Ok(PodState::Absent),
        PodStep::Keep(pod) => Ok(PodState::Current(Box::new(pod))),
        PodStep::WaitTerminating(name) => Ok(PodState::Terminating(name)),
        PodStep::WaitForeign(name) => Ok(PodState::Foreign(name)),
        PodStep::Adopt(pod) => adopt(&api, inst, pod).await,
        PodStep::Delete(names) => delete(ctx, &api, inst, names).await,
        PodStep::Create => match desired {
            Some(pod) => create(ctx, &api, inst, pod).await,
            None => Ok(PodState::Absent),
        },
    }
}

async fn create(
    ctx: &Context,
    api: &Api<Pod>,
    inst: &RedroidInstance,
    pod: &Pod,
) -> Result<PodState, ApplyError> {
    let name = pod.name_any();
    match api
        .create(
            &PostParams {
                field_manager: Some(names::FIELD_MANAGER.into()),
                ..Default::default()
            },
            pod,
        )
        .await
    {
        Ok(_) => {
            tracing::info!(
                namespace = %inst.namespace().unwrap_or_default(),
                name = %inst.name_any(),
                pod = %name,
                "created Pod"
            );
            event(
                ctx,
                inst,
                false,
                "CreatedPod",
                format!("Created Pod {name}"),
            );
            Ok(PodState::Created(name))
        }
        // Created by an earlier pass our cache has not seen yet: never a second Pod.
        Err(e) if kit::errors::already_exists(&e) => Ok(PodState::Created(name)),
        Err(source) => {
            event(
                ctx,
                inst,
                true,
                "FailedCreatePod",
                format!("Failed to create Pod {name}: {source}"),
            );
            Err(ApplyError::CreatePod { name, source })
        }
    }
}

async fn delete(
    ctx: &Context,
    api: &Api<Pod>,
    inst: &RedroidInstance,
    names: Vec<String>,
) -> Result<PodState, ApplyError> {
    for name in &names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(
                    namespace = %inst.namespace().unwrap_or_default(),
                    name = %inst.name_any(),
                    pod = %name,
                    "deleted Pod"
                );
                event(
                    ctx,
                    inst,
                    false,
                    "DeletedPod",
                    format!("Deleted Pod {name}"),
                )
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(ApplyError::DeletePod {
                    name: name.clone(),
                    source,
                });
            }
        }
    }
    Ok(PodState::Terminating(
        names.into_iter().next().unwrap_or_default(),
    ))
}

async fn adopt(
    api: &Api<Pod>,
    inst: &RedroidInstance,
    pod: CachedPod,
) -> Result<PodState, ApplyError> {
    let name = pod.name_any();
    let owner = inst.controller_owner_ref(&());
    let body = json!({"metadata": {"ownerReferences": [owner], "resourceVersion": pod.resource_version()}});
    let res = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await;
    let adopted = res.map_err(|source| ApplyError::AdoptPod {
        name: name.clone(),
        source,
    })?;
    tracing::info!(
        namespace = %inst.namespace().unwrap_or_default(),
        name = %inst.name_any(),
        pod = %name,
        "adopted Pod"
    );
    Ok(PodState::Current(Box::new(CachedPod::from(adopted))))
}

/// Applies the Service when the live one differs.
pub async fn service(
    ctx: &Context,
    inst: &RedroidInstance,
    desired: &Service,
    live: Option<&Service>,
) -> Result<(), ApplyError> {
    if live.is_some_and(|l| up_to_date(l, desired)) {
        return Ok(());
    }
    let name = desired.name_any();
    let params = PatchParams::apply(names::FIELD_MANAGER).force();
    let res = api::<Service>(ctx, inst)
        .patch(&name, &params, &Patch::Apply(desired))
        .await;
    res.map_err(|source| ApplyError::ApplyService {
        name: name.clone(),
        source,
    })?;
    tracing::info!(
        namespace = %inst.namespace().unwrap_or_default(),
        name = %inst.name_any(),
        service = %name,
        created = live.is_none(),
        "applied Service"
    );
    Ok(())
}

/// Pod deletions of deleted instances in flight at once.
pub const DELETE_CONCURRENCY: usize = 16;

/// Deletes the Pods each deleted instance controlled (by the owner index of the Pod cache),
/// [`DELETE_CONCURRENCY`] at a time, until `deleted` ends. Each delete carries the Pod's uid
/// as a precondition, so a Pod of the same name created since for a new instance is never
/// touched; a Pod already gone or replaced is skipped, and a failure is logged and left to
/// the garbage collector.
pub async fn delete_pods_of_deleted(
    ctx: Arc<Context>,
    pods: cache::Pods,
    deleted: impl Stream<Item = RedroidInstance>,
) {
    let doomed = deleted.flat_map(move |inst| {
        let owned = inst.uid().map(|uid| pods.get(&Key::Owner(uid)));
        let owned = owned.unwrap_or_default().into_iter();
        futures::stream::iter(owned.map(move |pod| (inst.name_any(), pod)))
    });
    doomed
        .for_each_concurrent(DELETE_CONCURRENCY, |(instance, pod)| {
            let client = ctx.client.clone();
            async move { delete_owned(client, &instance, &pod).await }
        })
        .await;
}

async fn delete_owned(client: kube::Client, instance: &str, pod: &CachedPod) {
    let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    if pod.meta().deletion_timestamp.is_some() {
        return;
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<Pod>::namespaced(client, &ns)
        .delete(&name, &params)
        .await
    {
        Ok(_) => {
            tracing::info!(namespace = %ns, name = %instance, pod = %name, "deleted Pod of deleted instance")
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(error) => tracing::warn!(
            namespace = %ns, name = %instance, pod = %name, %error,
            "could not delete Pod of deleted instance; the garbage collector will"
        ),
    }
}
