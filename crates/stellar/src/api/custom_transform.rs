//! CustomTransform (`control.kubestellar.io/v1alpha1`, cluster-scoped, short name `ct`,
//! category `all`): removals applied to every object of one group/resource on its way from
//! the WDS to the WECs.
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// CustomTransform describes how to select and transform some objects
/// on their way from WDS to WEC, without regard to the WEC (i.e.,
/// not changes that are specific to the individual WEC).
/// The transformation specified here is in addition to, and follows,
/// whatever is built into KubeStellar for that object.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "CustomTransform",
    plural = "customtransforms",
    shortname = "ct",
    category = "all",
    status = "CustomTransformStatus",
    doc = "CustomTransform describes how to select and transform some objects on their way from WDS to WEC, without regard to the WEC (i.e., not changes that are specific to the individual WEC). The transformation specified here is in addition to, and follows, whatever is built into KubeStellar for that object.",
    printcolumn(name = "SUBJECT_GROUP", type_ = "string", json_path = ".spec.apiGroup"),
    printcolumn(
        name = "SUBJECT_RESOURCE",
        type_ = "string",
        json_path = ".spec.resource"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CustomTransformSpec {
    /// `apiGroup` holds just the group, not also the version
    pub api_group: String,

    /// `resource` is the lowercase plural way of identifying a sort of object.
    /// "subresources" can not be directly bound to, only whole (top-level) objects.
    pub resource: String,

    /// `remove` is a list of paths that identify parts of the object to remove if present.
    /// A path is `$` followed by one or more segments, each `.name` (letters, digits and `_`,
    /// not starting with a digit) or `["any key"]` (a double-quoted string with JSON escapes),
    /// for example `$.metadata.labels["example.com/team"]` or `$.spec.template.spec.nodeName`.
    /// A path that leads nowhere removes nothing. Wildcards, indices and filters are not
    /// supported; an invalid path is reported in `status.errors`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// The observed state of a CustomTransform.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomTransformStatus {
    /// The generation this status describes.
    pub observed_generation: i64,

    /// Invalid entries of `spec.remove` (`Error in spec.remove[i]: …`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,

    /// For example that another CustomTransform applies to the same group and resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
