//! AppliedManifestWork (`work.open-cluster-management.io/v1`, cluster-scoped, on a WEC): the
//! work agent's anchor for the resources one ManifestWork applied there, named
//! `<hub hash>-<ManifestWork name>`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// AppliedManifestWork represents an applied manifestwork on managed cluster that is placed
/// on a managed cluster. An AppliedManifestWork links to a manifestwork on a hub recording resources
/// deployed in the managed cluster.
/// When the agent is removed from managed cluster, cluster-admin on managed cluster
/// can delete appliedmanifestwork to remove resources deployed by the agent.
/// The name of the appliedmanifestwork must be in the format of
/// {hash of hub's first kube-apiserver url}-{manifestwork name}
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "AppliedManifestWork",
    plural = "appliedmanifestworks",
    status = "AppliedManifestWorkStatus",
    doc = "AppliedManifestWork represents an applied manifestwork on managed cluster that is placed on a managed cluster. An AppliedManifestWork links to a manifestwork on a hub recording resources deployed in the managed cluster. The name of the appliedmanifestwork must be in the format of {hash of hub's first kube-apiserver url}-{manifestwork name}"
)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestWorkSpec {
    /// HubHash represents the hash of the first hub kube apiserver to identify which hub
    /// this AppliedManifestWork links to.
    pub hub_hash: String,

    /// AgentID represents the ID of the work agent who is to handle this AppliedManifestWork.
    #[serde(rename = "agentID", default)]
    pub agent_id: String,

    /// ManifestWorkName represents the name of the related manifestwork on the hub.
    pub manifest_work_name: String,
}

/// AppliedManifestWorkStatus represents the current status of AppliedManifestWork
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestWorkStatus {
    /// AppliedResources represents a list of resources defined within the manifestwork that are applied.
    /// Only resources with valid GroupVersionResource, namespace, and name are suitable.
    /// An item in this slice is deleted when there is no mapped manifest in manifestwork.Spec or by finalizer.
    /// The resource relating to the item will also be removed from managed cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_resources: Vec<AppliedManifestResourceMeta>,

    /// EvictionStartTime represents the current appliedmanifestwork will be evicted after a grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_start_time: Option<Time>,
}

/// AppliedManifestResourceMeta represents the group, version, resource, name and namespace of a resource.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub struct AppliedManifestResourceMeta {
    /// Group is the API Group of the Kubernetes resource,
    /// empty string indicates it is in core group.
    #[serde(default)]
    pub group: String,
    /// Version is the version of the Kubernetes resource.
    pub version: String,
    /// Resource is the resource name of the Kubernetes resource.
    pub resource: String,
    /// Name is the namespace of the Kubernetes resource, empty string indicates
    /// it is a cluster scoped resource.
    #[serde(default)]
    pub namespace: String,
    /// Name is the name of the Kubernetes resource.
    pub name: String,
    /// UID of the applied resource.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}
