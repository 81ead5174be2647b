//! Binding (`control.kubestellar.io/v1alpha1`, cluster-scoped, short name `bdg`): the
//! resolution of one BindingPolicy (same name), written only by the binding controller.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::binding_policy::{BindingPolicyCondition, DownsyncModulation};

/// Binding is mapped 1:1 to a single BindingPolicy object.
/// Binding reflects the resolution of the BindingPolicy's selectors,
/// and explicitly reflects which objects should go to what destinations.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "Binding",
    plural = "bindings",
    shortname = "bdg",
    status = "BindingStatus",
    doc = "Binding is mapped 1:1 to a single BindingPolicy object. Binding reflects the resolution of the BindingPolicy's selectors, and explicitly reflects which objects should go to what destinations."
)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    /// `workload` is a collection of namespaced and cluster scoped object references and their associated
    /// data - resource versions, create-only bits, and statuscollectors - to be propagated to destination clusters.
    #[serde(default)]
    pub workload: DownsyncObjectClauses,

    /// `destinations` is a list of cluster-identifiers that the objects should be propagated to.
    /// No duplications are allowed in this list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["clusterId"]))]
    pub destinations: Vec<Destination>,
}

/// DownsyncObjectClauses defines the objects to be down-synced, grouping them by scope.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownsyncObjectClauses {
    /// `clusterScope` holds a list of references to cluster-scoped objects to downsync and how the
    /// downsync is to be modulated.
    /// No duplications.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["group", "resource", "name"]))]
    pub cluster_scope: Vec<ClusterScopeDownsyncClause>,

    /// `namespaceScope` holds a list of references to namespace-scoped objects to downsync and how the
    /// downsync is to be modulated.
    /// No duplications.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["group", "resource", "namespace", "name"]))]
    pub namespace_scope: Vec<NamespaceScopeDownsyncClause>,
}

/// NamespaceScopeDownsyncClause references a specific namespace-scoped object to downsync,
/// and the downsync modulation to apply.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceScopeDownsyncClause {
    /// The object.
    #[serde(flatten)]
    pub object: NamespaceScopeDownsyncObject,
    /// How it is downsynced.
    #[serde(flatten)]
    pub modulation: DownsyncModulation,
}

/// NamespaceScopeDownsyncObject references a specific namespace-scoped object to downsync,
/// identified by its GroupVersionResource, namespace, and name. The ResourceVersion specifies
/// the exact version of the object to downsync.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceScopeDownsyncObject {
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (lowercase plural).
    pub resource: String,
    /// `namespace` of the object to downsync.
    pub namespace: String,
    /// `name` of the object to downsync.
    pub name: String,
    /// `resourceVersion` is the version of the resource to downsync.
    pub resource_version: String,
}

/// ClusterScopeDownsyncClause references a specific cluster-scoped object to downsync,
/// and the downsync modulation to apply.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterScopeDownsyncClause {
    /// The object.
    #[serde(flatten)]
    pub object: ClusterScopeDownsyncObject,
    /// How it is downsynced.
    #[serde(flatten)]
    pub modulation: DownsyncModulation,
}

/// ClusterScopeDownsyncObject references a specific cluster-scoped object to downsync,
/// identified by its GroupVersionResource and name. The ResourceVersion specifies the
/// exact version of the object to downsync.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterScopeDownsyncObject {
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (lowercase plural).
    pub resource: String,
    /// `name` of the object to downsync.
    pub name: String,
    /// `resourceVersion` is the version of the resource to downsync.
    pub resource_version: String,
}

/// Destination wraps the identifiers required to uniquely identify a destination cluster.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// The WEC: its ManagedCluster's name (and mailbox namespace).
    pub cluster_id: String,
}

/// The observed state of a Binding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingStatus {
    /// Copied to the BindingPolicy's conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<BindingPolicyCondition>,

    /// The Binding generation this status describes.
    pub observed_generation: i64,

    /// Errors of the transport (template expansion, delivery).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}
