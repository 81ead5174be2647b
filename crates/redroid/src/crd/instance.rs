//! The RedroidInstance API (`redroid.isning.moe/v1alpha1`), field-for-field compatible with
//! isning/redroid-operator: same names, defaults, validation and printer columns.
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One Android-in-container instance: a Pod running redroid on an overlayfs `/data` (the shared
/// base PVC as the read-only lower layer, a per-instance writable layer on the diff PVC), and a
/// Service exposing ADB.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
// `spec` is optional as upstream's schema has it: an absent spec deserialises to Go's zero
// values (`kit::optional_spec!`), which the controller reports as `InvalidSpec`.
#[serde(remote = "Self")]
#[kube(
    group = "redroid.isning.moe",
    version = "v1alpha1",
    kind = "RedroidInstance",
    plural = "redroidinstances",
    namespaced,
    status = "RedroidInstanceStatus",
    doc = "RedroidInstance is an Android-in-container instance with overlayfs storage.",
    printcolumn(name = "Index", type_ = "integer", json_path = ".spec.index"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(
        name = "Suspended",
        type_ = "string",
        json_path = ".status.suspended.actor",
        priority = 1
    ),
    printcolumn(
        name = "Woken",
        type_ = "string",
        json_path = ".status.woken.actor",
        priority = 1
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Pod", type_ = "string", json_path = ".status.podName"),
    printcolumn(name = "ADB", type_ = "string", json_path = ".status.adbAddress"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RedroidInstanceSpec {
    /// Selects this instance's writable layer: the `/data-diff/<index>` sub-directory of the diff
    /// PVC. Two instances with the same index on the same diff PVC would corrupt each other, so
    /// the operator never runs them at once (the later one reports `IndexConflict`).
    // A plain integer as upstream's (Go `int`, no int32 format); i32 holds every index the
    // operator can run, and a larger one is refused by deserialisation, not silently wrapped.
    #[schemars(range(min = 0), extend("format" = null))]
    pub index: i32,

    /// Container image of redroid.
    #[serde(default = "default_image")]
    pub image: String,

    /// Image pull policy of the redroid container.
    #[serde(default = "default_if_not_present")]
    pub image_pull_policy: String,

    /// Secrets for pulling the redroid image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// Permanently stop the instance (like a CronJob's suspend): its Pod is deleted and not
    /// recreated until this is false again. A temporary wake (`status.woken`) still wins.
    #[serde(default)]
    pub suspend: bool,

    /// The shared base PVC (ReadWriteMany): the read-only lower layer of every instance, or the
    /// read-write `/data` in `baseMode`.
    #[serde(rename = "sharedDataPVC", default = "default_shared_pvc")]
    pub shared_data_pvc: String,

    /// The PVC holding every instance's writable layer, one `<index>` sub-directory each.
    #[serde(rename = "diffDataPVC", default = "default_diff_pvc")]
    pub diff_data_pvc: String,

    /// Mount the shared base PVC read-write as `/data`, without overlayfs. Used to prepare the
    /// base image (install APKs, log in); run at most one base-mode instance per shared PVC.
    #[serde(default)]
    pub base_mode: bool,

    /// GPU mode passed to redroid (`androidboot.redroid_gpu_mode`).
    #[serde(default)]
    pub gpu_mode: GpuMode,

    /// DRM device node passed to redroid (`androidboot.redroid_gpu_node`), e.g. `/dev/dri/renderD128`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_node: Option<String>,

    /// TCP port ADB listens on inside the container, and the Service port.
    #[serde(default = "default_adb_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub adb_port: i32,

    /// Screen geometry; unset fields keep redroid's own defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<ScreenSpec>,

    /// DNS servers and HTTP proxy inside Android.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,

    /// Do not redirect the Android kernel log to the container's stdout. By default an init
    /// container copies socat and busybox into the Pod and a wrapper binds a PTY over
    /// `/dev/kmsg`, so `kubectl logs` shows the kernel log instead of the host's dmesg.
    #[serde(default)]
    pub disable_kmsg_redirect: bool,

    /// Image providing socat and busybox for the kernel-log redirect. Defaults to the operator's
    /// `RELATED_IMAGE_KMSG_TOOLS`, else `ghcr.io/isning/redroid-operator/kmsg-tools:latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kmsg_tools_image: Option<String>,

    /// Extra redroid arguments, appended verbatim after the generated `androidboot.*` ones.
    /// `$(VAR)` references to container environment variables are expanded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,

    /// Extra environment variables of the redroid container (after `INSTANCE_INDEX`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_env: Vec<EnvVar>,

    /// Node selector of the instance Pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the instance Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Affinity of the instance Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Resources of the redroid container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// The Service exposing ADB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
}

kit::optional_spec!(RedroidInstanceSpec);

/// GPU mode of redroid.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GpuMode {
    /// Use the host GPU.
    #[default]
    Host,
    /// Software rendering inside Android.
    Guest,
    /// Let redroid choose.
    Auto,
    /// No GPU.
    None,
}

impl GpuMode {
    /// The value redroid expects.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuMode::Host => "host",
            GpuMode::Guest => "guest",
            GpuMode::Auto => "auto",
            GpuMode::None => "none",
        }
    }
}

/// Screen geometry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct ScreenSpec {
    /// Width in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub width: Option<i32>,
    /// Height in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub height: Option<i32>,
    /// Density in dots per inch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub dpi: Option<i32>,
    /// Frames per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub fps: Option<i32>,
}

/// Network settings inside Android.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct NetworkSpec {
    /// DNS servers, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// HTTP proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxySpec>,
}

/// HTTP proxy inside Android.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxySpec {
    /// Proxy type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<ProxyType>,
    /// Proxy host (static proxies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Proxy port (static proxies).
    #[serde(default = "default_proxy_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Hosts that bypass the proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_list: Option<String>,
    /// URL of a PAC file (PAC proxies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pac: Option<String>,
}

/// Proxy type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProxyType {
    /// A fixed host and port.
    Static,
    /// A proxy auto-config file.
    Pac,
    /// No proxy.
    None,
    /// Leave Android's setting alone.
    Unassigned,
}

impl ProxyType {
    /// The value redroid expects.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyType::Static => "static",
            ProxyType::Pac => "pac",
            ProxyType::None => "none",
            ProxyType::Unassigned => "unassigned",
        }
    }
}

/// The Service exposing ADB.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// Service type.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Annotations of the Service (for load balancers, for example).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Node port for NodePort and LoadBalancer Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
}

/// Service type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ServiceType {
    /// Reachable inside the cluster.
    #[default]
    ClusterIP,
    /// Also on a port of every node.
    NodePort,
    /// Also through a cloud load balancer.
    LoadBalancer,
}

impl ServiceType {
    /// The Kubernetes value.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

/// Observed state of a RedroidInstance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedroidInstanceStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pending, Running, Stopped or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<InstancePhase>,
    /// The Pod currently backing the instance (empty while stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// Stable ADB address: `<service>.<namespace>.svc.cluster.local:<adbPort>`, set while Running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adb_address: Option<String>,
    /// The instance's ADB Service (it exists even while the instance is stopped): named like
    /// the instance when the name is a valid Service name (a DNS-1035 label: lower-case
    /// letters, digits and `-`, starting with a letter, at most 63 characters), otherwise
    /// `redroid-<name>-<hash>` derived from it. A Flotilla addition to upstream's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// `Ready` and `Scheduled`, with reasons and messages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Temporary stop override (set by tasks or `kubectl redroid instance suspend`). Lives in
    /// status so GitOps tools never see drift; cleared automatically after `until`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended: Option<TemporaryOverride>,
    /// Temporary run override; wins over `spec.suspend`. Cleared automatically after `until`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub woken: Option<TemporaryOverride>,
}

/// A temporary suspend or wake.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct TemporaryOverride {
    /// Why, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the override ends by itself; never when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
    /// Who set it, e.g. `task/<name>` or `manual`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
}

/// Phase of an instance.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum InstancePhase {
    /// The Pod is being created, scheduled or started (or is held back by a conflict).
    Pending,
    /// The Pod runs.
    Running,
    /// No Pod: suspended.
    Stopped,
    /// The Pod failed.
    Failed,
}

impl InstancePhase {
    /// The API value.
    pub fn as_str(self) -> &'static str {
        match self {
            InstancePhase::Pending => "Pending",
            InstancePhase::Running => "Running",
            InstancePhase::Stopped => "Stopped",
            InstancePhase::Failed => "Failed",
        }
    }
}

fn default_image() -> String {
    "redroid/redroid:16.0.0-latest".into()
}
fn default_if_not_present() -> String {
    "IfNotPresent".into()
}
fn default_shared_pvc() -> String {
    "redroid-data-base-pvc".into()
}
fn default_diff_pvc() -> String {
    "redroid-data-diff-pvc".into()
}
fn default_adb_port() -> i32 {
    5555
}
fn default_proxy_port() -> i32 {
    3128
}
