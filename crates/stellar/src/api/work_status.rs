//! WorkStatus (`control.kubestellar.io/v1alpha1`, namespaced, short names `ws`/`wss`), the
//! status add-on's record in the ITS of one workload object's `.status` in one WEC: name,
//! shape and labels as kubestellar/ocm-status-addon writes them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// WorkStatus is the Schema for the work status
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "WorkStatus",
    plural = "workstatuses",
    shortname = "ws",
    shortname = "wss",
    namespaced,
    no_spec,
    status = "RawStatus",
    doc = "WorkStatus is the Schema for the work status"
)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatusFields {
    /// Workstatus spec
    #[serde(default)]
    pub spec: WorkStatusSpec,
    /// StatusDetails contains information about downsync propagations, which may or may not have been applied
    #[serde(default)]
    pub status_details: StatusDetails,
}

/// Workstatus spec
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatusSpec {
    /// The workload object in the WEC whose status this is.
    #[serde(default)]
    pub source_ref: SourceRef,
}

/// The workload object a WorkStatus reports on.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Resource (lowercase plural).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace (`""` for a cluster-scoped object).
    pub namespace: String,
}

/// StatusDetails contains information about downsync propagations, which may or may not have been applied
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// `lastGeneration` is that last `ObjectMeta.Generation` from the WDS that
    /// propagated to the WEC. This is not to imply that it was successfully applied there;
    /// for that, see `lastGenerationIsApplied`.
    /// Zero means that none has yet propagated there.
    pub last_generation: i64,
    /// `lastGenerationIsApplied` indicates whether `lastGeneration` has been successfully applied
    pub last_generation_is_applied: bool,
    /// `lastCurrencyUpdateTime` is the time of the latest update to either
    /// `lastGeneration` or `lastGenerationIsApplied`. More precisely, it is
    /// the time when the core became informed of the update.
    /// Before the first such update, this holds `time.Unix(0, 0)`
    pub last_currency_update_time: Time,
}

impl Default for StatusDetails {
    fn default() -> Self {
        Self {
            last_generation: 0,
            last_generation_is_applied: false,
            last_currency_update_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }
}

/// The WEC object's `.status`, verbatim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct RawStatus(pub serde_json::Value);

impl JsonSchema for RawStatus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RawStatus".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Manifest represents a resource to be deployed",
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-map-type": "atomic",
        })
    }
}
