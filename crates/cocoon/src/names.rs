//! Every label, annotation, finalizer and name of the cocoon contract in one place. The keys
//! are the wire contract with vk-cocoon and cocoon-webhook (cocoon-common `meta`): they must
//! not change.

/// Field manager and Event reporter of the operator.
pub const FIELD_MANAGER: &str = "cocoon-operator";

/// Finalizer on CocoonSets: pods are gone and registry tags collected before the set goes.
pub const COCOONSET_FINALIZER: &str = "cocoonset.cocoonstack.io/finalizer";
/// Finalizer on CocoonHibernations: the hibernation tag is dropped before the CR goes.
pub const HIBERNATION_FINALIZER: &str = "cocoonhibernation.cocoonset.cocoonstack.io/finalizer";

// Labels the operator puts on pods.
/// The owning CocoonSet's name.
pub const LABEL_SET: &str = "cocoonset.cocoonstack.io/name";
/// `main`, `sub-agent` or `toolbox`.
pub const LABEL_ROLE: &str = "cocoonset.cocoonstack.io/role";
/// The agent slot (`0`, `1`, …) or, for toolboxes, the toolbox name.
pub const LABEL_SLOT: &str = "cocoonset.cocoonstack.io/slot";
/// `app.kubernetes.io/name=<set>`.
pub const LABEL_APP: &str = "app.kubernetes.io/name";

/// Node label selecting the node pool.
pub const NODE_POOL: &str = "cocoonstack.io/pool";
/// Node label selecting the snapshot CPU compatibility class.
pub const NODE_CPU_CLASS: &str = "cocoonstack.io/snapshot-cpu-class";
/// Node label matched by the main's node affinity.
pub const NODE_HOSTNAME: &str = "kubernetes.io/hostname";
/// Taint key of vk-cocoon nodes, tolerated by every pod.
pub const TAINT_PROVIDER: &str = "virtual-kubelet.io/provider";

// Annotations the operator writes on pods (the VMSpec).
/// The VM name (`vk-<namespace>-<set>-<slot|toolbox>`), also the registry repository.
pub const ANN_VM_NAME: &str = "vm.cocoonstack.io/name";
/// VM image.
pub const ANN_IMAGE: &str = "cocoonset.cocoonstack.io/image";
/// `clone`, `run` or `static`.
pub const ANN_MODE: &str = "cocoonset.cocoonstack.io/mode";
/// Guest OS.
pub const ANN_OS: &str = "cocoonset.cocoonstack.io/os";
/// Root volume size.
pub const ANN_STORAGE: &str = "cocoonset.cocoonstack.io/storage";
/// Cluster network.
pub const ANN_NETWORK: &str = "cocoonset.cocoonstack.io/network";
/// The set's snapshot policy.
pub const ANN_SNAPSHOT_POLICY: &str = "cocoonset.cocoonstack.io/snapshot-policy";
/// `"true"` on VMs the operator manages (agents and non-static toolboxes).
pub const ANN_MANAGED: &str = "cocoonset.cocoonstack.io/managed";
/// `"true"`: re-pull the image.
pub const ANN_FORCE_PULL: &str = "cocoonset.cocoonstack.io/force-pull";
/// `"true"`: no O_DIRECT.
pub const ANN_NO_DIRECT_IO: &str = "vm.cocoonstack.io/no-direct-io";
/// The VM a sub-agent forks from (the main VM).
pub const ANN_FORK_FROM: &str = "vm.cocoonstack.io/fork-from";
/// Connection type.
pub const ANN_CONN_TYPE: &str = "vm.cocoonstack.io/conn-type";
/// Hypervisor backend.
pub const ANN_BACKEND: &str = "vm.cocoonstack.io/backend";
/// TCP probe port.
pub const ANN_PROBE_PORT: &str = "vm.cocoonstack.io/probe-port";
/// The set's `metadata.generation`, re-stamped every pass; vk-cocoon echoes it back.
pub const ANN_GENERATION: &str = "cocoonset.cocoonstack.io/generation";
/// `"true"` asks vk-cocoon to hibernate the VM; absent means awake.
pub const ANN_HIBERNATE: &str = "vm.cocoonstack.io/hibernate";
/// `"true"` on a new pod that must restore from `<vm>:hibernate`.
pub const ANN_RESTORE: &str = "vm.cocoonstack.io/restore-from-hibernate";
/// `"true"` before a release-policy delete: vk-cocoon keeps the node-local snapshot.
pub const ANN_KEEP_SNAPSHOT: &str = "vm.cocoonstack.io/keep-snapshot-on-delete";
/// `"true"` on a sub-agent pod that exhausted its rebuilds.
pub const ANN_DEAD_LETTER: &str = "cocoonset.cocoonstack.io/dead-letter";

// Annotations vk-cocoon writes (and the operator writes for static toolboxes).
/// VM id.
pub const ANN_VM_ID: &str = "vm.cocoonstack.io/id";
/// VM IP.
pub const ANN_VM_IP: &str = "vm.cocoonstack.io/ip";
/// VNC port.
pub const ANN_VNC_PORT: &str = "vm.cocoonstack.io/vnc-port";
/// Lifecycle state: `creating`, `ready`, `hibernating`, `hibernated`, `failed` (lower case).
pub const ANN_LIFECYCLE_STATE: &str = "vm.cocoonstack.io/lifecycle-state";
/// The pod generation stamp vk-cocoon saw when it wrote the lifecycle state.
pub const ANN_LIFECYCLE_GENERATION: &str = "vm.cocoonstack.io/lifecycle-observed-generation";
/// Why the lifecycle state is what it is (failures).
pub const ANN_LIFECYCLE_MESSAGE: &str = "vm.cocoonstack.io/lifecycle-state-message";

// Operator-private annotations on the CocoonSet.
/// JSON `slot -> {count, lastDeleted}` of sub-agent rebuilds.
pub const ANN_REBUILD_HISTORY: &str = "cocoonset.cocoonstack.io/rebuild-history";
/// Sorted, comma-joined VM names whose registry tags deletion collects.
pub const ANN_DELETE_VM_NAMES: &str = "cocoonset.cocoonstack.io/delete-vm-names";
/// The node the main ran on when a release-policy set was suspended.
pub const ANN_HIBERNATED_ON_NODE: &str = "cocoonset.cocoonstack.io/hibernated-on-node";

/// Registry tag of a hibernation snapshot.
pub const TAG_HIBERNATE: &str = "hibernate";
/// Registry tag vk-cocoon pushes when a pod is deleted (snapshot policy permitting).
pub const TAG_LATEST: &str = "latest";

/// Image of the pods' only container; never pulled (vk-cocoon runs the VM).
pub const PLACEHOLDER_IMAGE: &str = "ghcr.io/cocoonstack/placeholder:latest";
/// Name of that container.
pub const CONTAINER_NAME: &str = "agent";

/// Lifecycle states written by vk-cocoon.
pub mod lifecycle {
    /// The VM is being created or restored.
    pub const CREATING: &str = "creating";
    /// The VM runs.
    pub const READY: &str = "ready";
    /// The VM is being snapshotted.
    pub const HIBERNATING: &str = "hibernating";
    /// The VM is snapshotted to the registry and removed.
    pub const HIBERNATED: &str = "hibernated";
    /// vk-cocoon failed; the message annotation says why.
    pub const FAILED: &str = "failed";
}

/// Role of a pod in its set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Slot 0.
    Main,
    /// Slots 1..replicas.
    SubAgent,
    /// A named toolbox.
    Toolbox,
}

impl Role {
    /// The `cocoonset.cocoonstack.io/role` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Main => "main",
            Role::SubAgent => "sub-agent",
            Role::Toolbox => "toolbox",
        }
    }

    /// Parses a role label value.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "main" => Some(Role::Main),
            "sub-agent" => Some(Role::SubAgent),
            "toolbox" => Some(Role::Toolbox),
            _ => None,
        }
    }
}

/// Pod name of agent `slot` (0 = main).
pub fn agent_pod_name(set: &str, slot: i32) -> String {
    format!("{set}-{slot}")
}

/// Pod name of toolbox `toolbox`.
pub fn toolbox_pod_name(set: &str, toolbox: &str) -> String {
    format!("{set}-{toolbox}")
}

/// VM name of agent `slot`: `vk-<namespace>-<set>-<slot>`.
pub fn agent_vm_name(namespace: &str, set: &str, slot: i32) -> String {
    format!("vk-{namespace}-{set}-{slot}")
}

/// VM name of a toolbox: `vk-<namespace>-<set>-<toolbox>` (`vk-<namespace>-<podName>`).
pub fn toolbox_vm_name(namespace: &str, set: &str, toolbox: &str) -> String {
    format!("vk-{namespace}-{}", toolbox_pod_name(set, toolbox))
}

/// What a VM name of set `set` in `namespace` stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmRole {
    /// An agent slot (0 = main).
    Agent(i32),
    /// A toolbox, by name.
    Toolbox(String),
}

/// Decodes a VM name of this set: strip `vk-<ns>-<set>-`; a non-negative integer is an agent
/// slot, anything else a toolbox. `None` when the prefix does not match.
pub fn vm_role(namespace: &str, set: &str, vm_name: &str) -> Option<VmRole> {
    let rest = vm_name.strip_prefix(&format!("vk-{namespace}-{set}-"))?;
    if rest.is_empty() {
        return None;
    }
    if rest.bytes().all(|b| b.is_ascii_digit()) {
        rest.parse().ok().map(VmRole::Agent)
    } else {
        Some(VmRole::Toolbox(rest.to_owned()))
    }
}

/// True when `name` is a pure integer: such a toolbox name would collide with an agent slot.
pub fn is_integer_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract() {
        assert_eq!(agent_pod_name("demo", 0), "demo-0");
        assert_eq!(toolbox_pod_name("demo", "db"), "demo-db");
        assert_eq!(agent_vm_name("ns", "demo", 0), "vk-ns-demo-0");
        assert_eq!(toolbox_vm_name("ns", "demo", "db"), "vk-ns-demo-db");
    }

    #[test]
    fn vm_role_table() {
        let cases = [
            ("vk-ns-demo-0", Some(VmRole::Agent(0))),
            ("vk-ns-demo-12", Some(VmRole::Agent(12))),
            ("vk-ns-demo-db", Some(VmRole::Toolbox("db".into()))),
            ("vk-ns-demo-db-0", Some(VmRole::Toolbox("db-0".into()))),
            ("vk-ns-demo-", None),
            ("vk-other-demo-0", None),
        ];
        for (vm, want) in cases {
            assert_eq!(vm_role("ns", "demo", vm), want, "{vm}");
        }
    }

    #[test]
    fn integer_names() {
        assert!(is_integer_name("0"));
        assert!(is_integer_name("42"));
        assert!(!is_integer_name("db-0"));
        assert!(!is_integer_name(""));
    }
}
