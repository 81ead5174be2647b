//! The RedroidTask API (`redroid.isning.moe/v1alpha1`), field-for-field compatible with
//! isning/redroid-operator: same names, defaults, validation (including the CEL rule and its
//! message) and printer columns.
// KubeSchema's schema-only copy of the spec struct inherits `serde(remote = "Self")` (see
// `kit::optional_spec!`), so nothing reads that private copy's fields. Every real item here
// is public, which dead-code analysis never flags, so this hides nothing else.
#![allow(dead_code)]
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::{
    EnvVar, LocalObjectReference, ResourceRequirements, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Integration work against one or more instances: a Job per instance (one-shot, when
/// `schedule` is empty) or a CronJob per instance (scheduled).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
// `spec` is optional as upstream's schema has it: an absent spec deserialises to the empty
// spec (`kit::optional_spec!`), which the controller reports as invalid.
#[serde(remote = "Self")]
#[kube(
    group = "redroid.isning.moe",
    version = "v1alpha1",
    kind = "RedroidTask",
    plural = "redroidtasks",
    namespaced,
    status = "RedroidTaskStatus",
    doc = "RedroidTask runs integration containers against RedroidInstances as Jobs or CronJobs.",
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(name = "Active", type_ = "string", json_path = ".status.activeJobs"),
    printcolumn(
        name = "LastSchedule",
        type_ = "date",
        json_path = ".status.lastScheduleTime"
    ),
    printcolumn(
        name = "LastSuccess",
        type_ = "date",
        json_path = ".status.lastSuccessfulTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!(has(self.suspendInstance) && self.suspendInstance && has(self.wakeInstance) && self.wakeInstance)").message("suspendInstance and wakeInstance are mutually exclusive"))]
#[serde(rename_all = "camelCase")]
pub struct RedroidTaskSpec {
    /// The instances (RedroidInstances in this namespace) to run against: one Job or CronJob each.
    #[schemars(length(min = 1), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub instances: Vec<InstanceRef>,

    /// Cron schedule. Empty: run once (a Job per instance). Otherwise a CronJob per instance.
    #[serde(default)]
    pub schedule: String,

    /// Suspend the CronJobs (scheduled tasks only).
    #[serde(default)]
    pub suspend: bool,

    /// Time zone of the schedule, e.g. `Europe/Paris` (scheduled tasks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,

    /// Deadline in seconds for starting a missed run (scheduled tasks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,

    /// Retries of each Job before it is marked failed.
    #[serde(
        default = "default_backoff_limit",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,

    /// One-shot only: stop each instance (`status.suspended`) and wait until it is Stopped
    /// before its Job starts; the Job then gets exclusive use of the instance's data through its
    /// own redroid sidecar. The instance resumes when its Job finishes.
    #[serde(default)]
    pub suspend_instance: bool,

    /// One-shot only: run each instance (`status.woken`, even if `spec.suspend` is true) and wait
    /// until it is Running before its Job starts; the Job talks to it through its Service. The
    /// instance returns to its `spec.suspend` state when its Job finishes.
    #[serde(default)]
    pub wake_instance: bool,

    /// Deadline in seconds of each Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,

    /// Seconds after which a finished one-shot Job is deleted. The task remembers that it ran:
    /// a deleted Job is not run again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// One-shot only: at most this many instance Jobs run at once (all at once when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallelism: Option<i32>,

    /// The integration containers, run in every instance's Job pod.
    #[schemars(length(min = 1), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub integrations: Vec<IntegrationSpec>,

    /// Volumes of every Job pod. Reserved and ConfigMap-generated volume names cannot be
    /// overridden; an instance's `volumes` entry with the same name replaces one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub volumes: Vec<Volume>,

    /// Service account of the Job pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Pull secrets of the Job pods, after the instance's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// Successful Jobs kept by each CronJob.
    #[serde(default = "default_history", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub successful_jobs_history_limit: Option<i32>,

    /// Failed Jobs kept by each CronJob.
    #[serde(default = "default_history", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failed_jobs_history_limit: Option<i32>,
}

kit::optional_spec!(RedroidTaskSpec);

/// A reference to a RedroidInstance in the task's namespace, with per-instance extras.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRef {
    /// Name of the RedroidInstance.
    pub name: String,
    /// Extra volumes of this instance's Job pod; one with the same name as a task volume
    /// replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub volumes: Vec<Volume>,
    /// Extra mounts for every integration container of this instance's Job; they win on a
    /// mountPath collision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
}

/// One integration container.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntegrationSpec {
    /// Container name.
    pub name: String,
    /// Container image.
    pub image: String,
    /// Image pull policy.
    #[serde(default = "default_always")]
    pub image_pull_policy: String,
    /// Entrypoint. Runs once ADB answers at `$ADB_ADDRESS`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Environment, after the injected `ADB_ADDRESS` and `INSTANCE_INDEX`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// ConfigMap keys mounted as files (read-only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<ConfigFile>,
    /// Volume mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// A ConfigMap key mounted as a file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFile {
    /// ConfigMap in the task's namespace.
    pub config_map_name: String,
    /// Key inside the ConfigMap.
    pub key: String,
    /// Where the file appears in the integration container.
    pub mount_path: String,
}

/// Observed state of a RedroidTask.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedroidTaskStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Most recent time a CronJob of this task scheduled a Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// Most recent time a Job of this task succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// Names of the Jobs still running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active_jobs: Vec<String>,
    /// `Active`, `Complete` and `Failed`, with reasons and messages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// One-shot tasks: the Job of each instance and how it ended. An instance listed here as
    /// Succeeded or Failed is never run again, even after its Job is deleted (by
    /// `ttlSecondsAfterFinished` or by hand).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["instance"]))]
    pub jobs: Vec<TaskJobStatus>,
}

/// The Job a one-shot task ran for one instance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskJobStatus {
    /// The RedroidInstance.
    pub instance: String,
    /// The Job's name.
    pub job: String,
    /// Running, Succeeded or Failed.
    pub phase: TaskJobPhase,
    /// When the Job finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Why the Job failed, in one word (e.g. `BackoffLimitExceeded`, `JobDeleted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the Job failed, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How far a one-shot task's Job got.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum TaskJobPhase {
    /// The Job exists and has not finished.
    Running,
    /// The Job completed.
    Succeeded,
    /// The Job failed, or was deleted before it finished.
    Failed,
}

#[allow(clippy::unnecessary_wraps)]
fn default_backoff_limit() -> Option<i32> {
    Some(0)
}
#[allow(clippy::unnecessary_wraps)]
fn default_history() -> Option<i32> {
    Some(3)
}
fn default_always() -> String {
    "Always".into()
}
