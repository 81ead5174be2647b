//! Events about pods, as the kubelet reports them (`Pulled`, `Created`, `Started`, `Killing`,
//! `Unhealthy`, `BackOff`, `Failed`, `FailedMount`), so `kubectl describe pod` explains what
//! happened on a process-backed node.
//!
//! Contract: fire and forget. An Event that cannot be written is dropped (logged at debug);
//! nothing waits on Events.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};

/// Normal or Warning.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Progress.
    Normal,
    /// Trouble.
    Warning,
}

/// Records an Event about `pod` (and `container`, when given) from node `node`.
pub fn record(
    client: &kube::Client,
    pod: &Pod,
    node: &str,
    kind: Kind,
    reason: &str,
    message: String,
    container: Option<&str>,
) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(ns.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            field_path: container.map(|c| format!("spec.containers{{{c}}}")),
            ..ObjectReference::default()
        },
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some(match kind {
            Kind::Normal => "Normal".into(),
            Kind::Warning => "Warning".into(),
        }),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some(node.into()),
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some(node.into()),
        action: Some(reason.into()),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    tokio::spawn(async move {
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(error = %e, "event not recorded");
        }
    });
}
