//! The CocoonSet API (`cocoonset.cocoonstack.io/v1`), field-for-field compatible with
//! cocoonstack/cocoon-common: same names, defaults, enums, CEL rules, printer columns and
//! status shape. One deliberate difference: the short name `cs` is not registered, because it
//! shadows kubectl's built-in `cs` (componentstatuses); users type `cset` instead.
// KubeSchema's schema-only copy of the spec struct inherits `serde(remote = "Self")` (see
// `kit::optional_spec!`), so nothing reads that private copy's fields. Every real item here
// is public, which dead-code analysis never flags, so this hides nothing else.
#![allow(dead_code)]
// kube's repeated `printcolumn(name = …, type_ = …)` arguments are not duplicates.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::{EnvFromSource, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Backend, ConnType, OsType};

/// A group of VM-backed pods run by vk-cocoon: one main agent (slot 0), `agent.replicas`
/// sub-agents forked from it (slots 1..replicas) and any number of named toolboxes.
/// Setting `suspend` hibernates every VM into the snapshot registry; clearing it wakes them.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
// `spec` is optional as upstream's schema has it: an absent spec deserialises to the empty
// spec (Go's zero values), which the controller reports as an invalid spec.
#[serde(remote = "Self")]
#[kube(
    group = "cocoonset.cocoonstack.io",
    version = "v1",
    kind = "CocoonSet",
    plural = "cocoonsets",
    singular = "cocoonset",
    shortname = "cset",
    shortname = "cocoonsets",
    category = "cocoon",
    namespaced,
    status = "CocoonSetStatus",
    doc = "CocoonSet is the Schema for the cocoonsets API.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyAgents"),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".status.desiredAgents"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.hibernatePolicy) || self.hibernatePolicy != 'release' || ((!has(self.agent.replicas) || self.agent.replicas == 0) && (!has(self.toolboxes) || size(self.toolboxes) == 0))").message("hibernatePolicy=release requires agent.replicas=0 and no toolboxes"))]
#[x_kube(validation = Rule::new("!has(oldSelf.snapshotCompatibilityClass) || (has(self.snapshotCompatibilityClass) && self.snapshotCompatibilityClass == oldSelf.snapshotCompatibilityClass)").message("snapshotCompatibilityClass is immutable once set"))]
#[serde(rename_all = "camelCase")]
pub struct CocoonSetSpec {
    /// Hibernate every VM of the set: each pod gets `vm.cocoonstack.io/hibernate=true`, vk-cocoon
    /// snapshots the VM to `<vmName>:hibernate` in the registry, and the phase becomes
    /// `Suspended` once every VM is verifiably hibernated. Clearing it wakes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Which VMs vk-cocoon pushes a `:latest` snapshot for when their pod is deleted: `always`
    /// (every VM), `main-only` (slot 0 only) or `never`. Also decides which `:latest` tags the
    /// operator deletes from the registry when the set is deleted.
    #[serde(default)]
    pub snapshot_policy: SnapshotPolicy,

    /// What suspend does with the pods: `retain` keeps hibernated placeholder pods; `release`
    /// deletes them once the snapshot is verified, freeing the node's seat (main-only sets only:
    /// `agent.replicas` 0 and no toolboxes). Waking a released set restores the main from its
    /// snapshot, preferring the node it hibernated on.
    #[serde(default)]
    pub hibernate_policy: HibernatePolicy,

    /// Node pool: every pod gets the hard node selector `cocoonstack.io/pool=<nodePool>`.
    #[serde(default = "default_node_pool")]
    pub node_pool: String,

    /// Snapshot CPU compatibility class: pods get the node selector
    /// `cocoonstack.io/snapshot-cpu-class=<class>` so snapshots restore on compatible CPUs.
    /// Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    )]
    pub snapshot_compatibility_class: Option<String>,

    /// Pins the main agent to a node through a required hostname node affinity (the pod stays
    /// Pending if it does not fit). Changing it migrates the main: hibernate, delete, restore on
    /// the new node. Empty lets the scheduler place it within the node pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,

    /// The agents: the main agent (always one) and `replicas` sub-agents forked from it.
    pub agent: AgentSpec,

    /// Toolbox VMs (at most 256), by unique name; each runs in pod `<set>-<name>`. Names are
    /// map keys: a duplicate is rejected at admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 256),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub toolboxes: Option<Vec<ToolboxSpec>>,
}

fn default_node_pool() -> String {
    "default".into()
}

/// When vk-cocoon pushes `:latest` snapshots.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SnapshotPolicy {
    /// Every VM.
    #[default]
    #[serde(rename = "always")]
    Always,
    /// The main agent (slot 0) only.
    #[serde(rename = "main-only")]
    MainOnly,
    /// No VM.
    #[serde(rename = "never")]
    Never,
}

impl SnapshotPolicy {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotPolicy::Always => "always",
            SnapshotPolicy::MainOnly => "main-only",
            SnapshotPolicy::Never => "never",
        }
    }
}

/// What suspend does with the pods.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HibernatePolicy {
    /// Keep hibernated placeholder pods.
    #[default]
    Retain,
    /// Delete the pods once their snapshot is verified.
    Release,
}

/// The agent VMs of a CocoonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// Number of sub-agents; the main agent is always created in addition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 0))]
    pub replicas: Option<i32>,

    /// VM image of every agent.
    #[schemars(length(min = 1))]
    pub image: String,

    /// `clone` boots from a copy of the image (sub-agents fork the main VM); `run` runs it.
    #[serde(default)]
    pub mode: AgentMode,

    /// Guest OS, backend, connection and disk options.
    #[serde(flatten)]
    pub vm: VmOptions,

    /// Environment sources of the agent container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<EnvFromSource>>,

    /// ServiceAccount of the agent pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

impl AgentSpec {
    /// The number of sub-agents (absent means 0).
    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(0).max(0)
    }
}

kit::optional_spec!(CocoonSetSpec);

/// AgentMode defines the mode of an agent VM.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentMode {
    /// Clone the image (and, for sub-agents, fork the main VM).
    #[default]
    Clone,
    /// Run the image.
    Run,
}

impl AgentMode {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentMode::Clone => "clone",
            AgentMode::Run => "run",
        }
    }
}

/// A toolbox VM of a CocoonSet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolboxSpec {
    /// Toolbox name, unique in the set: a DNS label of at most 63 characters (it is also the
    /// pod's slot label value) that is not a pure integer. The pod is `<set>-<name>` and the
    /// VM `vk-<namespace>-<set>-<name>`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    #[x_kube(validation = Rule::new("!self.matches('^[0-9]+$')").message("toolbox name must not be an integer: it would collide with an agent slot's pod name"))]
    pub name: String,

    /// VM image (not needed in `static` mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,

    /// `run` runs the image, `clone` boots a copy, `static` adopts an existing VM given by
    /// `staticVMID`/`staticIP` (the operator does not manage or hibernate it).
    #[serde(default)]
    pub mode: ToolboxMode,

    /// IP address of a `static` toolbox.
    #[serde(rename = "staticIP", default, skip_serializing_if = "Option::is_none")]
    pub static_ip: Option<String>,

    /// VM id of a `static` toolbox.
    #[serde(
        rename = "staticVMID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub static_vmid: Option<String>,

    /// VNC port advertised for the toolbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65535))]
    pub vnc_port: Option<i32>,

    /// Guest OS, backend, connection and disk options.
    #[serde(flatten)]
    pub vm: VmOptions,
}

/// ToolboxMode defines the mode of a toolbox VM.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolboxMode {
    /// Run the image.
    #[default]
    Run,
    /// Boot a copy of the image.
    Clone,
    /// An existing VM, adopted as is.
    Static,
}

impl ToolboxMode {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolboxMode::Run => "run",
            ToolboxMode::Clone => "clone",
            ToolboxMode::Static => "static",
        }
    }
}

/// VM options shared by agents and toolboxes (inlined into both).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmOptions {
    /// Guest operating system.
    #[serde(default)]
    pub os: OsType,

    /// Hypervisor backend. Firecracker uses direct kernel boot and only supports OCI VM images.
    #[serde(default)]
    pub backend: Backend,

    /// Connection protocol advertised for the VM. Empty falls back to OS-based inference
    /// (linux → ssh, windows → rdp, android → adb).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn_type: Option<ConnType>,

    /// Cluster network the VM attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,

    /// Bypass the image cache and re-pull from upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_pull: Option<bool>,

    /// Disable O_DIRECT on writable disks (host page cache instead). Cloud Hypervisor only.
    #[serde(
        rename = "noDirectIO",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub no_direct_io: Option<bool>,

    /// TCP port checked instead of the default ICMP probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65535))]
    pub probe_port: Option<i32>,

    /// Size of the VM root volume (also the pod's ephemeral-storage request and limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Quantity>,

    /// Compute resources of the VM's pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// CocoonSetStatus represents the observed state of a CocoonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CocoonSetStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Where the set is in its lifecycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<CocoonSetPhase>,

    /// Agents (main and sub-agents) whose pod is Ready.
    #[serde(default)]
    pub ready_agents: i32,

    /// Agents wanted: 1 + `agent.replicas`.
    #[serde(default)]
    pub desired_agents: i32,

    /// Toolboxes whose pod is Ready.
    #[serde(default)]
    pub ready_toolboxes: i32,

    /// Toolboxes wanted.
    #[serde(default)]
    pub desired_toolboxes: i32,

    /// One entry per agent pod, main first, then sub-agents by slot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["slot"]))]
    pub agents: Vec<AgentStatus>,

    /// One entry per toolbox pod, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub toolboxes: Vec<ToolboxStatus>,

    /// `Ready` (every agent and toolbox Ready) and `Progressing` (phase Pending or Scaling).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// CocoonSetPhase represents the lifecycle phase of a CocoonSet.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CocoonSetPhase {
    /// The main agent is missing or not Ready yet.
    Pending,
    /// Every agent and toolbox is Ready.
    Running,
    /// Some sub-agent or toolbox is missing or not Ready.
    Scaling,
    /// Suspend asked; not every VM is verifiably hibernated yet.
    Suspending,
    /// Every VM is hibernated and its snapshot is in the registry.
    Suspended,
    /// A released set is restoring its main from the snapshot.
    Waking,
    /// The main is moving to `spec.nodeName`.
    Migrating,
    /// The main agent failed; see the Events.
    Failed,
}

impl CocoonSetPhase {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            CocoonSetPhase::Pending => "Pending",
            CocoonSetPhase::Running => "Running",
            CocoonSetPhase::Scaling => "Scaling",
            CocoonSetPhase::Suspending => "Suspending",
            CocoonSetPhase::Suspended => "Suspended",
            CocoonSetPhase::Waking => "Waking",
            CocoonSetPhase::Migrating => "Migrating",
            CocoonSetPhase::Failed => "Failed",
        }
    }
}

/// The observed state of one agent VM.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// Slot: 0 is the main agent, 1..replicas the sub-agents.
    pub slot: i32,
    /// `main` or `sub-agent`.
    pub role: String,
    /// The agent's pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_name: String,
    /// The VM name (also the registry repository).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vm_name: String,
    /// The VM id vk-cocoon reported.
    #[serde(rename = "vmID", default, skip_serializing_if = "String::is_empty")]
    pub vm_id: String,
    /// The VM's IP address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip: String,
    /// The pod phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// The VM a sub-agent was forked from (the main VM).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub forked_from: String,
}

/// The observed state of one toolbox VM.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolboxStatus {
    /// Toolbox name.
    pub name: String,
    /// The toolbox's pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_name: String,
    /// The VM name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vm_name: String,
    /// The VM id.
    #[serde(rename = "vmID", default, skip_serializing_if = "String::is_empty")]
    pub vm_id: String,
    /// The VM's IP address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip: String,
    /// The pod phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// How to connect: explicit connType, else vnc when a VNC port is set, else by OS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn_type: Option<ConnType>,
    /// VNC port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vnc_port: Option<i32>,
}
