//! BindingPolicy (`control.kubestellar.io/v1alpha1`, cluster-scoped, short name `bp`): which
//! workload objects go to which WECs, field for field as upstream's.
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// BindingPolicy defines in which ways the workload objects ('what') and the destinations
/// ('where') are bound together.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "BindingPolicy",
    plural = "bindingpolicies",
    shortname = "bp",
    status = "BindingPolicyStatus",
    doc = "BindingPolicy defines in which ways the workload objects ('what') and the destinations ('where') are bound together.",
    printcolumn(
        name = "SYNCED",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Synced')].status"
    ),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(name = "TYPE", type_ = "string", json_path = ".spec.type"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BindingPolicySpec {
    /// `clusterSelectors` identifies the relevant Cluster objects in terms of their labels.
    /// A Cluster is relevant if and only if it passes any of the LabelSelectors in this field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_selectors: Vec<LabelSelector>,

    /// `downsync` selects the objects to bind with the selected WECs for downsync,
    /// and modulates their downsync.
    /// An object is selected if it matches at least one member of this list.
    /// When multiple DownsyncPolicyClause match the same workload object:
    /// the `createOnly` bits are ORed together, and the StatusCollector reference
    /// sets are combined by union.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub downsync: Vec<DownsyncPolicyClause>,
}

/// DownsyncPolicyClause identifies some objects (by a predicate)
/// and modulates how they are downsynced.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownsyncPolicyClause {
    /// The test an object must pass.
    #[serde(flatten)]
    pub test: DownsyncObjectTest,
    /// How matching objects are downsynced.
    #[serde(flatten)]
    pub modulation: DownsyncModulation,
}

/// DownsyncObjectTest is a set of criteria that characterize matching objects.
/// An object matches if every criterion is satisfied; at least one field must be present.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownsyncObjectTest {
    /// `apiGroup` is the API group of the referenced object, empty string for the core API group.
    /// `nil` matches every API group.
    // Upstream's schema has a plain string here (not nullable): an explicit null is pruned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub api_group: Option<String>,

    /// `resources` is a list of lowercase plural names for the sorts of objects to match.
    /// An entry of `"*"` means that all match.
    /// If this list contains `"*"` then it should contain nothing else.
    /// Empty list is a special case, it matches every object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,

    /// `namespaces` is a list of acceptable names for the object's namespace.
    /// An entry of `"*"` means that any namespace is acceptable;
    /// this is the only way to match a cluster-scoped object.
    /// If this list contains `"*"` then it should contain nothing else.
    /// Empty list is a special case, it matches every object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,

    /// `namespaceSelectors` a list of label selectors.
    /// For a namespaced object, at least one of these label selectors has to match
    /// the labels of the Namespace object that defines the namespace of the object that this DownsyncObjectTest is testing.
    /// For a cluster-scoped object, at least one of these label selectors must be `{}`.
    /// Empty list is a special case, it matches every object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespace_selectors: Vec<LabelSelector>,

    /// `objectSelectors` is a list of label selectors.
    /// At least one of them must match the labels of the object being tested.
    /// Empty list is a special case, it matches every object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_selectors: Vec<LabelSelector>,

    /// `objectNames` is a list of object names that match.
    /// An entry of `"*"` means that all match.
    /// If this list contains `"*"` then it should contain nothing else.
    /// Empty list is a special case, it matches every object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_names: Vec<String>,
}

/// DownsyncModulation is about variations on downsync behavior.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownsyncModulation {
    /// `createOnly` indicates that in a given WEC, the object is not to be updated
    /// if it already exists.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_only: bool,

    /// `statusCollectors` is a list of references of StatusCollectors to apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_collectors: Vec<String>,

    /// WantSingletonReportedState indicates an expectation that the matching workload objects
    /// are distributed to exactly one WEC and requests that the `.status` of such objects
    /// propagate from the WEC to the WDS.
    ///
    /// The _qualified WEC set_ of a workload object is the set of WECs associated with it by
    /// at least one BindingPolicy that has `wantSingletonReportedState` or
    /// `wantMultiWECReportedState` in a clause matching it. While either kind of return is
    /// requested and that set has exactly one WEC, the object's `.status` is copied from that
    /// WEC into the WDS (and the object is labelled
    /// `managed-by.kubestellar.io/singletonstatus=true`); while neither holds, no `.status`
    /// propagated from a WEC stays on the object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub want_singleton_reported_state: bool,

    /// WantMultiWECReportedState requests that the `.status` from the
    /// workload object in each WEC where that object is present be combined
    /// and returned into the `.status` of the object in the WDS (Deployments, ReplicaSets and
    /// DaemonSets are combined with awareness of their status; see the user guide).
    #[serde(
        rename = "wantMultiWECReportedState",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub want_multi_wec_reported_state: bool,
}

/// BindingPolicyStatus defines the observed state of BindingPolicy
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingPolicyStatus {
    /// Conditions copied from the Binding (`StatusCollectorsAvailable`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<BindingPolicyCondition>,

    /// The policy generation this status describes.
    pub observed_generation: i64,

    /// What keeps the policy from being carried out (wrong WEC count for singleton status,
    /// template expansion errors, objects that cannot be delivered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// BindingPolicyCondition describes the state of a bindingpolicy at a certain point.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingPolicyCondition {
    /// Condition type: `Ready`, `Synced` or `StatusCollectorsAvailable`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the status, reason or message last changed.
    pub last_transition_time: Time,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}
