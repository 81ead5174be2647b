//! StatusCollector (`control.kubestellar.io/v1alpha1`, cluster-scoped, short name `sc`): an
//! SQL-like query over the status of one workload object in every WEC it went to.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// StatusCollector defines one way to collect status about a given workload object from
/// the set of WECs that it propagates to.
/// This is modeled after an SQL SELECT statement that does aggregation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "StatusCollector",
    plural = "statuscollectors",
    shortname = "sc",
    status = "StatusCollectorStatus",
    doc = "StatusCollector defines one way to collect status about a given workload object from the set of WECs that it propagates to. This is modeled after an SQL SELECT statement that does aggregation."
)]
#[serde(rename_all = "camelCase")]
// Structural rules upstream only reports in status.errors; rejected at admission here.
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.groupBy) || size(self.groupBy) == 0 || (has(self.combinedFields) && size(self.combinedFields) > 0)",
     "message": "groupBy must be empty when combinedFields is"},
    {"rule": "!(has(self.select) && size(self.select) > 0 && has(self.combinedFields) && size(self.combinedFields) > 0)",
     "message": "select must be empty when combinedFields is not"},
]))]
pub struct StatusCollectorSpec {
    /// `filter`, if given, is applied first.
    /// It must evaluate to a boolean or null (which is treated as false).
    /// This is like the WHERE clause in an SQL SELECT statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,

    /// `groupBy` says how to group workload objects for aggregation (if there is any).
    /// Each expression must evaluate to an atomic value.
    /// `groupBy` must be empty if `combinedFields` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_by: Vec<NamedExpression>,

    /// `combinedFields` defines the aggregations to do, if any.
    /// `combinedFields` must be empty if `select` is not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub combined_fields: Vec<NamedAggregator>,

    /// `select` defines named values to extract from each object.
    /// `select` must be empty when `combinedFields` is not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub select: Vec<NamedExpression>,

    /// `limit` limits the number of rows returned (unlike upstream, it is honoured: rows past
    /// the limit are dropped, in a deterministic order).
    #[schemars(range(min = 0))]
    pub limit: i64,
}

/// NamedExpression pairs a name with a way of extracting a value from a JSON object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NamedExpression {
    /// Column name.
    pub name: String,
    /// An expression in the [Common Expression Language](https://cel.dev/) over `obj` (the
    /// WDS object), `returned.status` (its status in the WEC, or null), `inventory.name` (the
    /// WEC) and `propagation.lastReturnedUpdateTimestamp`.
    pub def: String,
}

/// NamedAggregator pairs a name with a way to aggregate over some objects.
///
/// - For `type=="COUNT"`, `subject` is omitted and the aggregate is the count
///   of those objects that are not `null`.
///
/// - For the other types, `subject` is required and SHOULD
///   evaluate to a numeric value; a string that parses as a number is used as that number,
///   anything else is skipped and reported in `aggregationErrors`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.type in ['COUNT', 'SUM', 'AVG', 'MIN', 'MAX']",
     "message": "type must be one of COUNT, SUM, AVG, MIN, MAX"},
    {"rule": "self.type != 'COUNT' || !has(self.subject)",
     "message": "a COUNT has no subject"},
    {"rule": "self.type == 'COUNT' || has(self.subject)",
     "message": "SUM, AVG, MIN and MAX need a subject"},
]))]
pub struct NamedAggregator {
    /// Column name.
    pub name: String,
    /// AggregatorType indicates what sort of aggregation is to be done: `COUNT`, `SUM`,
    /// `AVG`, `MIN` or `MAX`. The AVG of no values is NaN; for the other types the
    /// aggregation of no values is the identity element of the combining operation in
    /// `float64` (SUM 0, MIN +Inf, MAX -Inf, COUNT 0).
    #[serde(rename = "type")]
    pub type_: String,
    /// A CEL expression (see NamedExpression); required for every type but COUNT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// StatusCollectorStatus defines the observed state of StatusCollector.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCollectorStatus {
    /// The generation this status describes.
    pub observed_generation: i64,

    /// What is wrong with the spec (structure, parse and type errors); an invalid collector is
    /// treated as absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}
