//! ManagedCluster (`cluster.open-cluster-management.io/v1`, cluster-scoped, short names
//! `mcl`/`mcls`): one WEC in the ITS inventory. KubeStellar reads its name (the WEC id and
//! mailbox namespace), labels (cluster selectors, template properties) and annotations
//! (template properties).
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// ManagedCluster represents the desired state and current status of a managed cluster.
/// ManagedCluster is a cluster-scoped resource. The name is the cluster UID.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1",
    kind = "ManagedCluster",
    plural = "managedclusters",
    shortname = "mcl",
    shortname = "mcls",
    status = "ManagedClusterStatus",
    doc = "ManagedCluster represents the desired state and current status of a managed cluster. ManagedCluster is a cluster-scoped resource. The name is the cluster UID.",
    printcolumn(
        name = "Hub Accepted",
        type_ = "boolean",
        json_path = ".spec.hubAcceptsClient"
    ),
    printcolumn(
        name = "Managed Cluster URLs",
        type_ = "string",
        json_path = ".spec.managedClusterClientConfigs[*].url"
    ),
    printcolumn(
        name = "Joined",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ManagedClusterJoined\")].status"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ManagedClusterConditionAvailable\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSpec {
    /// ManagedClusterClientConfigs represents a list of the apiserver address of the managed cluster.
    /// If it is empty, the managed cluster has no accessible address for the hub to connect with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_cluster_client_configs: Vec<ClientConfig>,

    /// hubAcceptsClient represents that hub accepts the joining of Klusterlet agent on
    /// the managed cluster with the hub.
    #[serde(default)]
    pub hub_accepts_client: bool,

    /// leaseDurationSeconds is used to coordinate the lease update time of Klusterlet agents on the managed cluster.
    /// If its value is zero, the Klusterlet agent will update its lease every 60 seconds by default
    #[serde(default = "default_lease", skip_serializing_if = "is_zero")]
    #[schemars(extend("default" = 60))]
    pub lease_duration_seconds: i32,

    /// taints is a property of managed cluster that allow the cluster to be repelled when scheduling.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

fn default_lease() -> i32 {
    60
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// ClientConfig represents the apiserver address of the managed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientConfig {
    /// URL is the URL of apiserver endpoint of the managed cluster.
    pub url: String,
    /// CABundle is the ca bundle to connect to apiserver of the managed cluster.
    /// System certs are used if it is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte"))]
    pub ca_bundle: Option<String>,
}

/// The managed cluster this Taint is attached to has the "effect" on
/// any placement that does not tolerate the Taint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// key is the taint key applied to a cluster. e.g. bar or foo.example.com/bar.
    /// The regex it matches is (dns1123SubdomainFmt/)?(qualifiedNameFmt)
    #[schemars(
        length(max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        )
    )]
    pub key: String,
    /// value is the taint value corresponding to the taint key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub value: String,
    /// effect indicates the effect of the taint on placements that do not tolerate the taint.
    /// Valid effects are NoSelect, PreferNoSelect and NoSelectIfNew.
    pub effect: TaintEffect,
    /// timeAdded represents the time at which the taint was added.
    #[serde(default)]
    pub time_added: Option<Time>,
}

/// What a taint does to placements that do not tolerate it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TaintEffect {
    /// Not selected by placements that do not tolerate it.
    #[default]
    NoSelect,
    /// Avoided by placements that do not tolerate it.
    PreferNoSelect,
    /// Not newly selected by placements that do not tolerate it.
    NoSelectIfNew,
}

/// ManagedClusterStatus represents the current status of joined managed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    /// Conditions contains the different condition statuses for this managed cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Capacity represents the total resource capacity from all nodeStatuses
    /// on the managed cluster.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Allocatable represents the total allocatable resources on the managed cluster.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Version represents the kubernetes version of the managed cluster.
    #[serde(default)]
    pub version: ManagedClusterVersion,
    /// ClusterClaims represents cluster information that a managed cluster claims.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_claims: Vec<ManagedClusterClaim>,
    /// managedNamespaces are a list of namespaces managed by the clustersets the
    /// cluster belongs to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["clusterSet", "name"]))]
    pub managed_namespaces: Vec<ClusterSetManagedNamespaceConfig>,
}

// A map of quantities, as controller-gen writes `resource.Quantity`.
fn resource_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true,
        },
    })
}

/// ManagedClusterVersion represents version information about the managed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ManagedClusterVersion {
    /// Kubernetes is the kubernetes version of managed cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubernetes: String,
}

/// ManagedClusterClaim represents a ClusterClaim collected from a managed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ManagedClusterClaim {
    /// Name is the name of a ClusterClaim resource on managed cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Value is a claim-dependent string
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 1024))]
    pub value: String,
}

/// A namespace managed by a cluster set the cluster belongs to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSetManagedNamespaceConfig {
    /// Name is the name of the namespace.
    #[schemars(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// ClusterSet represents the name of the cluster set.
    pub cluster_set: String,
    /// Conditions are the status conditions of the managed namespace
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
