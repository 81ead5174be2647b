//! ManifestWork (`work.open-cluster-management.io/v1`, namespaced in a WEC's mailbox on the
//! ITS): the wrapped objects one WEC is to apply, with per-manifest options, and the work
//! agent's report. Field for field as OCM's, so a real klusterlet can serve our hub and our
//! agent a real OCM hub.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// ManifestWork represents a manifests workload that hub wants to deploy on the managed cluster.
/// A manifest workload is defined as a set of Kubernetes resources.
/// ManifestWork must be created in the cluster namespace on the hub, so that agent on the
/// corresponding managed cluster can access this resource and deploy on the managed
/// cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    plural = "manifestworks",
    namespaced,
    status = "ManifestWorkStatus",
    doc = "ManifestWork represents a manifests workload that hub wants to deploy on the managed cluster. A manifest workload is defined as a set of Kubernetes resources. ManifestWork must be created in the cluster namespace on the hub, so that agent on the corresponding managed cluster can access this resource and deploy on the managed cluster."
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSpec {
    /// workload represents the manifest workload to be deployed on a managed cluster.
    #[serde(default)]
    pub workload: ManifestsTemplate,

    /// deleteOption represents deletion strategy when the manifestwork is deleted.
    /// Foreground deletion strategy is applied to all the resource in this manifestwork if it is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<DeleteOption>,

    /// manifestConfigs represents the configurations of manifests defined in workload field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_configs: Vec<ManifestConfigOption>,

    /// Executor is the configuration that makes the work agent to perform some pre-request processing/checking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ManifestWorkExecutor>,
}

/// ManifestsTemplate represents the manifest workload to be deployed on a managed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ManifestsTemplate {
    /// manifests represents a list of kubernetes resources to be deployed on a managed cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<EmbeddedManifest>")]
    pub manifests: Vec<serde_json::Value>,
}

/// A Kubernetes object, as it is to be applied.
struct EmbeddedManifest;

impl JsonSchema for EmbeddedManifest {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Manifest".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Manifest represents a resource to be deployed on managed cluster.",
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

/// How the agent deletes the applied resources when the work goes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOption {
    /// propagationPolicy can be Foreground, Orphan or SelectivelyOrphan
    #[serde(default)]
    #[schemars(extend("default" = "Foreground"))]
    pub propagation_policy: DeletePropagationPolicyType,

    /// selectivelyOrphan represents a list of resources following orphan deletion stratecy
    #[serde(
        rename = "selectivelyOrphans",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub selectively_orphan: Option<SelectivelyOrphan>,

    /// TTLSecondsAfterFinished limits the lifetime of a ManifestWork that has been marked Complete
    /// by one or more conditionRules set for its manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i64>,
}

/// Foreground, Orphan or SelectivelyOrphan.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletePropagationPolicyType {
    /// Every resource is deleted with the work (the default).
    #[default]
    Foreground,
    /// Every resource is left in place.
    Orphan,
    /// Only the listed resources are left in place.
    SelectivelyOrphan,
}

/// SelectivelyOrphan represents a list of resources following orphan deletion stratecy
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectivelyOrphan {
    /// orphaningRules defines a slice of orphaningrule.
    /// Each orphaningrule identifies a single resource included in this manifestwork
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphaning_rules: Vec<ResourceIdentifier>,
}

/// ResourceIdentifier identifies a single resource included in this manifestwork
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub struct ResourceIdentifier {
    /// Group is the API Group of the Kubernetes resource,
    /// empty string indicates it is in core group.
    #[serde(default)]
    pub group: String,
    /// Resource is the resource name of the Kubernetes resource.
    pub resource: String,
    /// Name is the name of the Kubernetes resource.
    pub name: String,
    /// Name is the namespace of the Kubernetes resource, empty string indicates
    /// it is a cluster scoped resource.
    #[serde(default)]
    pub namespace: String,
}

/// ManifestConfigOption represents the configurations of a manifest defined in workload field.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConfigOption {
    /// ResourceIdentifier represents the group, resource, name and namespace of a resoure.
    /// iff this refers to a resource not created by this manifest work, the related rules will not be executed.
    pub resource_identifier: ResourceIdentifier,

    /// FeedbackRules defines what resource status field should be returned. If it is not set or empty,
    /// no feedback rules will be honored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feedback_rules: Vec<FeedbackRule>,

    /// UpdateStrategy defines the strategy to update this manifest. UpdateStrategy is Update
    /// if it is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,

    /// ConditionRules defines how to set manifestwork conditions for a specific manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["condition"]))]
    pub condition_rules: Vec<ConditionRule>,

    /// FeedbackScrapeType represents the way to monitor resource, it could be Poll or Watch
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Poll"))]
    pub feedback_scrape_type: Option<FeedbackScrapeType>,
}

/// Poll or Watch.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum FeedbackScrapeType {
    /// Read the resource periodically.
    Poll,
    /// Watch the resource.
    Watch,
}

/// A rule that sets a manifestwork condition from a manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"message": "Condition is required for CEL rules", "rule": "self.type != 'CEL' || self.condition != \"\""}]))]
pub struct ConditionRule {
    /// Condition is the type of condition that is set based on this rule.
    pub condition: String,
    /// Type defines how a manifest should be evaluated for a condition: CEL or
    /// WellKnownConditions.
    #[serde(rename = "type")]
    pub type_: ConditionRuleType,
    /// CelExpressions defines the CEL expressions to be evaluated for the condition.
    /// Final result is the logical AND of all expressions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cel_expressions: Vec<String>,
    /// Message is set on the condition created for this rule
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// MessageExpression uses a CEL expression to generate a message for the condition
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message_expression: String,
}

/// WellKnownConditions or CEL.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConditionRuleType {
    /// Hard-coded rules for common kinds.
    #[default]
    WellKnownConditions,
    /// User-defined CEL expressions.
    #[serde(rename = "CEL")]
    Cel,
}

/// What resource status is returned in the work's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackRule {
    /// Type defines the option of how status can be returned: WellKnownStatus or JSONPaths.
    #[serde(rename = "type")]
    pub type_: FeedBackType,
    /// JsonPaths defines the json path under status field to be synced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub json_paths: Vec<JsonPath>,
}

/// WellKnownStatus or JSONPaths.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FeedBackType {
    /// Common status fields of well-known kinds.
    #[default]
    WellKnownStatus,
    /// The listed paths.
    #[serde(rename = "JSONPaths")]
    JsonPaths,
}

/// One returned status field.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct JsonPath {
    /// Name represents the alias name for this field
    pub name: String,
    /// Version is the version of the Kubernetes resource.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Path represents the json path of the field under status.
    pub path: String,
}

/// UpdateStrategy defines the strategy to update this manifest
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// type defines the strategy to update this manifest, default value is Update.
    /// Update type means to update resource by an update call.
    /// CreateOnly type means do not update resource based on current manifest.
    /// ServerSideApply type means to update resource using server side apply with work-controller as the field manager.
    /// ReadOnly type means the agent will only check the existence of the resource based on its metadata.
    #[serde(rename = "type")]
    #[schemars(extend("default" = "Update"))]
    pub type_: UpdateStrategyType,

    /// serverSideApply defines the configuration for server side apply. It is honored only when the
    /// type of the updateStrategy is ServerSideApply
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_apply: Option<ServerSideApplyConfig>,
}

/// Update, CreateOnly, ServerSideApply or ReadOnly.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpdateStrategyType {
    /// Update by an update call.
    #[default]
    Update,
    /// Create when missing, never update.
    CreateOnly,
    /// Server-side apply with the work agent's field manager.
    ServerSideApply,
    /// Only read: check existence.
    ReadOnly,
}

/// Server-side apply options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSideApplyConfig {
    /// Force represents to force apply the manifest.
    #[serde(default)]
    pub force: bool,
    /// FieldManager is the manager to apply the resource. It is work-agent by default, but can be other name with work-agent
    /// as the prefix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = "^work-agent"), extend("default" = "work-agent"))]
    pub field_manager: String,
    /// IgnoreFields defines a list of json paths in the resource that will not be updated on the spoke.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["condition"]))]
    pub ignore_fields: Vec<IgnoreField>,
}

/// Fields not updated on the spoke.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreField {
    /// Condition defines the condition that the fields should be ignored when apply the resource.
    #[schemars(extend("default" = "OnSpokePresent"))]
    pub condition: IgnoreFieldsCondition,
    /// JSONPaths defines the list of json path in the resource to be ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_paths: Vec<String>,
    /// JSONPointers defines the list of JSON Pointers (RFC 6901) in the resource to be ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_pointers: Vec<String>,
    /// JQPathExpressions defines the list of jq path expressions in the resource to be ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jq_path_expressions: Vec<String>,
}

/// OnSpokePresent or OnSpokeChange.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum IgnoreFieldsCondition {
    /// Ignored whenever the resource exists on the spoke.
    #[default]
    OnSpokePresent,
    /// Ignored when another actor changed them on the spoke.
    OnSpokeChange,
}

/// ManifestWorkExecutor is the executor that applies the resources to the managed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ManifestWorkExecutor {
    /// Subject is the subject identity which the work agent uses to talk to the
    /// local cluster when applying the resources.
    #[serde(default)]
    pub subject: ManifestWorkExecutorSubject,
}

/// The subject identity used by the work agent to apply the resources.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkExecutorSubject {
    /// Type is the type of the subject identity. Supported types are: "ServiceAccount".
    #[serde(rename = "type")]
    pub type_: ExecutorSubjectType,
    /// ServiceAccount is for identifying which service account to use by the work agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ManifestWorkSubjectServiceAccount>,
}

/// Only ServiceAccount.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ExecutorSubjectType {
    /// A ServiceAccount of the managed cluster.
    #[default]
    ServiceAccount,
}

/// A service account in the managed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ManifestWorkSubjectServiceAccount {
    /// Namespace is the namespace of the service account.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$")
    )]
    pub namespace: String,
    /// Name is the name of the service account.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$")
    )]
    pub name: String,
}

/// ManifestWorkStatus represents the current status of managed cluster ManifestWork.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkStatus {
    /// Conditions contains the different condition statuses for this work: Applied,
    /// Progressing, Available, Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// ResourceStatus represents the status of each resource in manifestwork deployed on a
    /// managed cluster.
    #[serde(default)]
    pub resource_status: ManifestResourceStatus,
}

/// The status of each resource of the work.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ManifestResourceStatus {
    /// Manifests represents the condition of manifests deployed on managed cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<ManifestCondition>,
}

/// The conditions of one resource of the work on the managed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestCondition {
    /// ResourceMeta represents the group, version, kind, name and namespace of a resoure.
    pub resource_meta: ManifestResourceMeta,
    /// StatusFeedback represents the values of the feild synced back defined in statusFeedbacks
    #[serde(rename = "statusFeedback", default)]
    pub status_feedbacks: StatusFeedbackResult,
    /// Conditions represents the conditions of this resource on a managed cluster.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Identity of a manifest, with its position in the work.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ManifestResourceMeta {
    /// Ordinal represents the index of the manifest on spec.
    pub ordinal: i32,
    /// Group is the API Group of the Kubernetes resource.
    #[serde(default)]
    pub group: String,
    /// Version is the version of the Kubernetes resource.
    #[serde(default)]
    pub version: String,
    /// Kind is the kind of the Kubernetes resource.
    #[serde(default)]
    pub kind: String,
    /// Resource is the resource name of the Kubernetes resource.
    #[serde(default)]
    pub resource: String,
    /// Name is the name of the Kubernetes resource.
    #[serde(default)]
    pub name: String,
    /// Name is the namespace of the Kubernetes resource.
    #[serde(default)]
    pub namespace: String,
}

/// Values returned by feedback rules.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct StatusFeedbackResult {
    /// Values represents the synced value of the interested field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub values: Vec<FeedbackValue>,
}

/// One returned value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct FeedbackValue {
    /// Name represents the alias name for this field.
    pub name: String,
    /// Value is the value of the status field.
    #[serde(rename = "fieldValue")]
    pub value: FieldValue,
}

/// The value of a status field: integer, string, boolean or raw JSON.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldValue {
    /// Type represents the type of the value, it can be integer, string or boolean.
    #[serde(rename = "type")]
    pub type_: FieldValueType,
    /// Integer is the integer value when type is integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer: Option<i64>,
    /// String is the string value when type is string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// Boolean is bool value when type is boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boolean: Option<bool>,
    /// JsonRaw is a json string when type is a list or object
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub json_raw: Option<String>,
}

/// Integer, String, Boolean or JsonRaw.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FieldValueType {
    /// An integer.
    #[default]
    Integer,
    /// A string.
    String,
    /// A boolean.
    Boolean,
    /// JSON text.
    JsonRaw,
}
