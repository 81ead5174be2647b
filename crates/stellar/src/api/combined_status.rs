//! CombinedStatus (`control.kubestellar.io/v1alpha1`, namespaced, short name `cs`, no spec):
//! the results of the StatusCollectors for one (workload object, BindingPolicy) pair.
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::binding::Destination;

/// CombinedStatus holds the combined status from the WECs for one particular (workload object,
/// BindingPolicy) pair. Its namespace is the workload object's, or `kubestellar-report` for a
/// cluster-scoped object; its name is `<object UID>.<BindingPolicy UID>`; its labels
/// `status.kubestellar.io/{api-group,resource,namespace,name,binding-policy}` name the pair.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "CombinedStatus",
    plural = "combinedstatuses",
    shortname = "cs",
    namespaced,
    no_spec,
    doc = "CombinedStatus holds the combined status from the WECs for one particular (workload object, BindingPolicy) pair.",
    printcolumn(
        name = "SUBJECT_GROUP",
        type_ = "string",
        json_path = ".metadata.labels['status\\.kubestellar\\.io/api-group']"
    ),
    printcolumn(
        name = "SUBJECT_RSC",
        type_ = "string",
        json_path = ".metadata.labels['status\\.kubestellar\\.io/resource']"
    ),
    printcolumn(
        name = "SUBJECT_NS",
        type_ = "string",
        json_path = ".metadata.labels['status\\.kubestellar\\.io/namespace']"
    ),
    printcolumn(
        name = "SUBJECT_NAME",
        type_ = "string",
        json_path = ".metadata.labels['status\\.kubestellar\\.io/name']"
    ),
    printcolumn(
        name = "BINDINGPOLICY",
        type_ = "string",
        json_path = ".metadata.labels['status\\.kubestellar\\.io/binding-policy']"
    )
)]
pub struct CombinedStatusFields {
    /// `results` has an entry for every applicable StatusCollector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<NamedStatusCombination>,
}

/// NamedStatusCombination holds the rows that come from evaluating one StatusCollector.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedStatusCombination {
    /// The StatusCollector's name.
    pub name: String,

    /// The columns: `select` names, or `groupBy` names then `combinedFields` names.
    pub column_names: Vec<String>,

    /// The rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<StatusCombinationRow>,

    /// RowErrors reports on some of the errors in evaluating expressions in the
    /// StatusCollectorSpec. Only a limited number of errors will appear here.
    /// For every column for which there is an error, there will be at least one
    /// entry here.
    /// In the input to aggregation operations, rows with errors are omitted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub row_errors: Vec<RowEvaluationError>,

    /// AggregationErrors reports errors from applying aggregation operations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregation_errors: Vec<ErrorInColumn>,
}

/// One row.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct StatusCombinationRow {
    /// One value per column.
    pub columns: Vec<Value>,
}

/// Value holds a JSON value. This is a union type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Value {
    /// `String`, `Number`, `Bool`, `Null`, `Object` or `Array`.
    #[serde(rename = "type")]
    pub type_: String,

    /// The value of a `String`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,

    /// Integer or floating-point, in JavaScript Object Notation.
    #[serde(rename = "float", default, skip_serializing_if = "Option::is_none")]
    pub number: Option<String>,

    /// The value of a `Bool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,

    /// The value of an `Object`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown")]
    pub object: Option<serde_json::Value>,

    /// The value of an `Array`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown")]
    pub array: Option<serde_json::Value>,
}

/// Any JSON (`x-kubernetes-preserve-unknown-fields`), as upstream's `apiextensions/v1.JSON`.
pub(crate) fn preserve_unknown(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

/// RowEvaluationError reports an error that is specific to a WEC
/// and a column.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RowEvaluationError {
    /// The WEC.
    pub wec: Destination,
    /// ColumnName is the empty string for the filter expression
    pub column_name: String,
    /// The error.
    pub error: String,
}

/// ErrorInColumn reports an error that is specific to a column.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorInColumn {
    /// The column.
    pub column_name: String,
    /// The error.
    pub error: String,
}
