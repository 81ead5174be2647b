//! Events and namespace scoping shared by the operators' controllers.
//!
//! Contract: [`publish`] records one Event through kube-runtime's `Recorder` (events.k8s.io/v1,
//! repeats folded into a series) with `action` equal to `reason`, and never fails the caller:
//! an Event is a courtesy, so a refused one is logged, not returned. [`scoped`] is the `Api`
//! of a namespaced kind over one namespace, or over all of them.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder};

/// Records a Normal (or, with `warning`, Warning) Event `reason` on `regarding`, optionally
/// about a `related` object; a failure is logged.
pub async fn publish(
    recorder: &Recorder,
    regarding: &ObjectReference,
    warning: bool,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: related,
    };
    if let Err(e) = recorder.publish(&event, regarding).await {
        tracing::warn!(error = %e, reason, "recording an Event failed");
    }
}

/// `Api<K>` over `namespace`, or over every namespace when `None`.
pub fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
