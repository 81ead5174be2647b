//! The writers of the CocoonHibernation controller other than the status: the finalizer,
//! the pod's hibernate annotation, the registry tag and Events.
//!
//! Contract:
//! - Every write is skipped when it would change nothing (finalizer present or absent,
//!   annotation already as wanted), so a converged CR costs no writes.
//! - Finalizer edits carry the CR's resourceVersion: a concurrent change makes them fail and
//!   the pass retries, instead of overwriting someone else's finalizer list.
//! - The hibernate annotation is `"true"` or absent, never `"false"` (vk-cocoon's contract).
//! - Dropping a tag never fails the pass: an error is logged and reported as a Warning Event
//!   (`SnapshotTagDeleteFailed`); the tag may leak, the CR does not get stuck.

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::{Value, json};

use super::status::{Note, full_name};
use crate::context::Context;
use crate::crd::CocoonHibernation;
use crate::names;

/// A failed write.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Adding or removing the finalizer failed.
    #[error("updating the finalizer of CocoonHibernation {cr}: {source}")]
    Finalizer {
        /// `namespace/name` of the CR.
        cr: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Setting or clearing the hibernate annotation failed.
    #[error("patching the hibernate annotation of pod {pod}: {source}")]
    PatchPod {
        /// `namespace/name` of the pod.
        pod: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ApplyError {
    /// The metric label of this failure.
    pub fn category(&self) -> &'static str {
        match self {
            ApplyError::Finalizer { .. } => "update_finalizer",
            ApplyError::PatchPod { .. } => "patch_pod",
        }
    }
}

/// Adds the finalizer unless present; returns the CR as written (`None`: nothing to write).
pub async fn ensure_finalizer(
    api: &Api<CocoonHibernation>,
    cr: &CocoonHibernation,
) -> Result<Option<CocoonHibernation>, ApplyError> {
    kit::finalizers::add_returning(api, cr, names::HIBERNATION_FINALIZER)
        .await
        .map_err(|source| finalizer_error(cr, source))
}

/// Removes the finalizer if present.
pub async fn remove_finalizer(
    api: &Api<CocoonHibernation>,
    cr: &CocoonHibernation,
) -> Result<(), ApplyError> {
    kit::finalizers::remove(api, cr, names::HIBERNATION_FINALIZER)
        .await
        .map(|_| ())
        .map_err(|source| finalizer_error(cr, source))
}

/// Whether `cr` carries the controller's finalizer.
pub fn has_finalizer(cr: &CocoonHibernation) -> bool {
    kit::finalizers::has(cr, names::HIBERNATION_FINALIZER)
}

fn finalizer_error(cr: &CocoonHibernation, source: kube::Error) -> ApplyError {
    ApplyError::Finalizer {
        cr: full_name(cr),
        source,
    }
}

/// The merge patch that sets (`"true"`) or removes the hibernate annotation.
pub fn hibernate_patch(hibernate: bool) -> Value {
    let value = if hibernate {
        json!("true")
    } else {
        Value::Null
    };
    let mut annotations = serde_json::Map::new();
    annotations.insert(names::ANN_HIBERNATE.to_owned(), value);
    json!({"metadata": {"annotations": annotations}})
}

/// Makes the pod's hibernate annotation `want` unless it already is (`is`).
pub async fn hibernate_annotation(
    ctx: &Context,
    namespace: &str,
    pod: &str,
    want: bool,
    is: bool,
) -> Result<(), ApplyError> {
    if want == is {
        return Ok(());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch(
        pod,
        &PatchParams::default(),
        &Patch::Merge(hibernate_patch(want)),
    )
    .await
    .map(|_| ())
    .map_err(|source| ApplyError::PatchPod {
        pod: format!("{namespace}/{pod}"),
        source,
    })
}

/// Deletes `<vm>:hibernate`; an error is logged and reported, never returned.
pub async fn drop_tag(ctx: &Context, cr: &CocoonHibernation, vm: &str) {
    ctx.hibernate_tags.forget(vm);
    let Err(e) = ctx.registry.delete_manifest(vm, names::TAG_HIBERNATE).await else {
        tracing::info!(vm, "dropped the hibernation snapshot tag");
        return;
    };
    tracing::warn!(vm, error = %e, category = e.category(), "dropping the hibernation snapshot tag failed");
    let note = Note {
        type_: EventType::Warning,
        reason: "SnapshotTagDeleteFailed",
        message: format!("deleting {vm}:{} failed: {e}", names::TAG_HIBERNATE),
    };
    event(ctx, cr, &note).await;
}

/// Publishes `note` on `cr`; a failure to record is logged.
pub async fn event(ctx: &Context, cr: &CocoonHibernation, note: &Note) {
    let warning = note.type_ == EventType::Warning;
    let reference = cr.object_ref(&());
    let message = note.message.clone();
    kit::events::publish(
        &ctx.recorder,
        &reference,
        warning,
        note.reason,
        message,
        None,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hibernate_is_true_or_absent_never_false() {
        let set = hibernate_patch(true);
        assert_eq!(
            set["metadata"]["annotations"][names::ANN_HIBERNATE],
            json!("true")
        );
        // Waking (also the fast path that clears a residue flag) removes the key.
        let clear = hibernate_patch(false);
        let annotations = clear["metadata"]["annotations"]
            .as_object()
            .expect("object");
        assert_eq!(annotations.get(names::ANN_HIBERNATE), Some(&Value::Null));
    }

    #[test]
    fn finalizer_presence() {
        let mut cr: CocoonHibernation = serde_yaml::from_str(
            "{apiVersion: cocoonset.cocoonstack.io/v1, kind: CocoonHibernation, \
             metadata: {name: c, namespace: ns}, spec: {podRef: {name: p}, desire: Wake}}",
        )
        .expect("cr");
        assert!(!has_finalizer(&cr));
        cr.metadata.finalizers = Some(vec![names::HIBERNATION_FINALIZER.into()]);
        assert!(has_finalizer(&cr));
    }
}
