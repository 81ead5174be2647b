//! The CocoonHibernation API (`cocoonset.cocoonstack.io/v1`), compatible with
//! cocoonstack/cocoon-common: a per-pod request to hibernate or wake its VM.
// KubeSchema's schema-only copy of the spec struct inherits `serde(remote = "Self")` (see
// `kit::optional_spec!`), so nothing reads that private copy's fields. Every real item here
// is public, which dead-code analysis never flags, so this hides nothing else.
#![allow(dead_code)]
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Hibernate or wake the VM behind one pod. Hibernate snapshots the VM to
/// `<vmName>:hibernate` in the registry and stops it (the pod stays, as a placeholder); Wake
/// restores it. By convention the CR is named like the pod.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
// `spec` is optional as upstream's schema has it: an absent spec deserialises to the empty
// spec, which the controller reports as a missing podRef.
#[serde(remote = "Self")]
#[kube(
    group = "cocoonset.cocoonstack.io",
    version = "v1",
    kind = "CocoonHibernation",
    plural = "cocoonhibernations",
    singular = "cocoonhibernation",
    shortname = "ch",
    shortname = "cocoonhibernations",
    category = "cocoon",
    namespaced,
    status = "CocoonHibernationStatus",
    doc = "CocoonHibernation is the Schema for the cocoonhibernations API.",
    printcolumn(name = "Pod", type_ = "string", json_path = ".spec.podRef.name"),
    printcolumn(name = "Desire", type_ = "string", json_path = ".spec.desire"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CocoonHibernationSpec {
    /// The pod whose VM to hibernate or wake, in the CR's namespace. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.podRef is immutable"))]
    pub pod_ref: PodRef,

    /// `Hibernate` or `Wake`.
    pub desire: Desire,
}

kit::optional_spec!(CocoonHibernationSpec);

/// A pod in the CR's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PodRef {
    /// Pod name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// What the CR asks for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Desire {
    /// Snapshot the VM to the registry and stop it.
    Hibernate,
    // The default only fills an absent spec, which fails on its empty podRef first; `Wake`
    // is the one that can never take a VM down.
    /// Restore the VM and drop its hibernation snapshot.
    #[default]
    Wake,
}

/// The observed state of a CocoonHibernation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CocoonHibernationStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Where the request is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HibernationPhase>,

    /// The VM the request acted on (its registry repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_name: Option<String>,

    /// `Ready`: True once Hibernated or Active; False with reason `Pending` or `Failed` and a
    /// message saying why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The phase of a CocoonHibernation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum HibernationPhase {
    /// Waiting for the pod or its VM name.
    Pending,
    /// Hibernate asked; waiting for vk-cocoon and the registry to confirm.
    Hibernating,
    /// The VM is hibernated and its snapshot is in the registry.
    Hibernated,
    /// Wake asked; waiting for the VM to run.
    Waking,
    /// The VM runs again.
    Active,
    /// The request failed (see the Ready condition); editing or re-applying retries it.
    Failed,
}

impl HibernationPhase {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            HibernationPhase::Pending => "Pending",
            HibernationPhase::Hibernating => "Hibernating",
            HibernationPhase::Hibernated => "Hibernated",
            HibernationPhase::Waking => "Waking",
            HibernationPhase::Active => "Active",
            HibernationPhase::Failed => "Failed",
        }
    }
}
