//! Building the pods of a CocoonSet (reference §3, §4.2). Pure: no client, no clock.
//!
//! Contract:
//! - Every builder returns a complete Pod: name and namespace, the labels of §3, the VMSpec
//!   annotations (empty values are not written), the generation stamp, a controller owner
//!   reference to the set, one placeholder container `agent`, the vk-cocoon tolerations and
//!   the hard pool (+ CPU class) node selector.
//! - The VMSpec annotations are produced by [`agent_vm_spec`] and [`toolbox_vm_spec`], which
//!   drift detection reuses, so what is built and what is compared cannot disagree.
//! - Only the main honours `spec.nodeName`, as a required hostname affinity (not a bind);
//!   sub-agents are bound to the main's node; toolboxes are left to the scheduler.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvFromSource, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Pod, PodSpec, PreferredSchedulingTerm, ResourceRequirements, Toleration,
};
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::crd::{AgentSpec, CocoonSet, ConnType, OsType, ToolboxMode, ToolboxSpec, VmOptions};
use crate::names::{self, Role};

/// Annotation keys that make up the VMSpec of every pod (compared by drift detection).
pub const VM_SPEC_KEYS: &[&str] = &[
    names::ANN_VM_NAME,
    names::ANN_IMAGE,
    names::ANN_MODE,
    names::ANN_OS,
    names::ANN_STORAGE,
    names::ANN_NETWORK,
    names::ANN_SNAPSHOT_POLICY,
    names::ANN_MANAGED,
    names::ANN_FORCE_PULL,
    names::ANN_NO_DIRECT_IO,
    names::ANN_FORK_FROM,
    names::ANN_CONN_TYPE,
    names::ANN_BACKEND,
    names::ANN_PROBE_PORT,
];

/// Annotation keys the operator writes only on static toolboxes (otherwise vk-cocoon does).
pub const STATIC_KEYS: &[&str] = &[names::ANN_VM_ID, names::ANN_VM_IP, names::ANN_VNC_PORT];

/// The resource name the VM's `storage` becomes in requests and limits.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// The main agent's pod (slot 0). With `spec.nodeName` it carries a required hostname node
/// affinity (the scheduler still places it; a bind would bypass the pool selector).
pub fn main_pod(set: &CocoonSet) -> Pod {
    let mut pod = agent_pod(set, 0, None);
    if let Some(node) = set.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        pod_spec(&mut pod).affinity = Some(required_hostname(node));
    }
    pod
}

/// The pod of sub-agent `slot`: forks from `main_vm` and is bound to the main's node.
pub fn sub_agent_pod(set: &CocoonSet, slot: i32, main_vm: &str, main_node: Option<&str>) -> Pod {
    let mut pod = agent_pod(set, slot, Some(main_vm));
    pod_spec(&mut pod).node_name = main_node.filter(|n| !n.is_empty()).map(str::to_owned);
    pod
}

/// The pod of toolbox `tb`. Static toolboxes carry their VM id, IP and VNC port and are not
/// marked managed.
pub fn toolbox_pod(set: &CocoonSet, tb: &ToolboxSpec) -> Pod {
    let set_name = set.name_any();
    let name = names::toolbox_pod_name(&set_name, &tb.name);
    let meta = pod_meta(set, name, Role::Toolbox, &tb.name, toolbox_vm_spec(set, tb));
    let spec = pod_spec_for(set, container(&tb.vm, None));
    Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    }
}

/// Asks vk-cocoon to restore the new pod from `<vm>:hibernate` instead of booting the image.
pub fn mark_restore(pod: &mut Pod) {
    pod.annotations_mut()
        .insert(names::ANN_RESTORE.into(), "true".into());
}

/// Adds a weight-100 preferred hostname affinity for `node`, unless the pod already has a
/// required node affinity (a `spec.nodeName` pin wins over a placement hint).
pub fn prefer_node(pod: &mut Pod, node: &str) {
    let affinity = pod_spec(pod).affinity.get_or_insert_with(Affinity::default);
    let na = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    if na
        .required_during_scheduling_ignored_during_execution
        .is_some()
    {
        return;
    }
    let term = PreferredSchedulingTerm {
        weight: 100,
        preference: hostname_term(node),
    };
    let preferred = na
        .preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new);
    if !preferred.contains(&term) {
        preferred.push(term);
    }
}

/// How to connect to a toolbox: explicit connType, else `vnc` when a VNC port is set, else
/// `adb` for Android, `rdp` for Windows and `ssh` otherwise.
pub fn conn_type(tb: &ToolboxSpec) -> ConnType {
    if let Some(explicit) = tb.vm.conn_type {
        return explicit;
    }
    if tb.vnc_port.unwrap_or(0) > 0 {
        return ConnType::Vnc;
    }
    match tb.vm.os {
        OsType::Android => ConnType::Adb,
        OsType::Windows => ConnType::Rdp,
        OsType::Linux | OsType::Macos => ConnType::Ssh,
    }
}

/// The VMSpec annotations of agent `slot` (sub-agents fork from `fork_from`).
pub fn agent_vm_spec(
    set: &CocoonSet,
    slot: i32,
    fork_from: Option<&str>,
) -> BTreeMap<String, String> {
    let agent: &AgentSpec = &set.spec.agent;
    let vm = names::agent_vm_name(&namespace(set), &set.name_any(), slot);
    let mut a = common_vm_spec(set, vm, &agent.vm);
    put(&mut a, names::ANN_IMAGE, &agent.image);
    put(&mut a, names::ANN_MODE, agent.mode.as_str());
    put(&mut a, names::ANN_MANAGED, "true");
    put(&mut a, names::ANN_FORK_FROM, fork_from.unwrap_or(""));
    a
}

/// The VMSpec annotations of toolbox `tb`, including VM id, IP and VNC port in static mode.
pub fn toolbox_vm_spec(set: &CocoonSet, tb: &ToolboxSpec) -> BTreeMap<String, String> {
    let vm = names::toolbox_vm_name(&namespace(set), &set.name_any(), &tb.name);
    let mut a = common_vm_spec(set, vm, &tb.vm);
    put(&mut a, names::ANN_IMAGE, tb.image.as_deref().unwrap_or(""));
    put(&mut a, names::ANN_MODE, tb.mode.as_str());
    if tb.mode == ToolboxMode::Static {
        put(
            &mut a,
            names::ANN_VM_ID,
            tb.static_vmid.as_deref().unwrap_or(""),
        );
        put(
            &mut a,
            names::ANN_VM_IP,
            tb.static_ip.as_deref().unwrap_or(""),
        );
        put_port(&mut a, names::ANN_VNC_PORT, tb.vnc_port);
    } else {
        put(&mut a, names::ANN_MANAGED, "true");
    }
    a
}

/// The `agent` container's resources: the spec's, with `storage` as ephemeral-storage in both
/// requests and limits. `None` when nothing is set.
pub fn resources(vm: &VmOptions) -> Option<ResourceRequirements> {
    let mut res = vm.resources.clone().unwrap_or_default();
    if let Some(storage) = vm.storage.as_ref().filter(|q| !q.0.is_empty()) {
        for list in [&mut res.requests, &mut res.limits] {
            list.get_or_insert_with(BTreeMap::new)
                .insert(EPHEMERAL_STORAGE.into(), storage.clone());
        }
    }
    (res != ResourceRequirements::default()).then_some(res)
}

/// The node pool the set selects (`default` when empty).
pub fn node_pool(set: &CocoonSet) -> &str {
    match set.spec.node_pool.as_str() {
        "" => "default",
        pool => pool,
    }
}

/// The snapshot CPU class the set selects, if any.
pub fn cpu_class(set: &CocoonSet) -> Option<&str> {
    set.spec
        .snapshot_compatibility_class
        .as_deref()
        .filter(|c| !c.is_empty())
}

fn agent_pod(set: &CocoonSet, slot: i32, fork_from: Option<&str>) -> Pod {
    let set_name = set.name_any();
    let role = if slot == 0 {
        Role::Main
    } else {
        Role::SubAgent
    };
    let name = names::agent_pod_name(&set_name, slot);
    let vm_spec = agent_vm_spec(set, slot, fork_from);
    let meta = pod_meta(set, name, role, &slot.to_string(), vm_spec);
    let agent = &set.spec.agent;
    let env_from = agent.env_from.clone().filter(|e| !e.is_empty());
    let mut spec = pod_spec_for(set, container(&agent.vm, env_from));
    spec.service_account_name = agent.service_account_name.clone().filter(|s| !s.is_empty());
    Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    }
}

fn pod_meta(
    set: &CocoonSet,
    name: String,
    role: Role,
    slot: &str,
    mut annotations: BTreeMap<String, String>,
) -> ObjectMeta {
    let set_name = set.name_any();
    let labels = BTreeMap::from([
        (names::LABEL_SET.to_owned(), set_name.clone()),
        (names::LABEL_ROLE.to_owned(), role.as_str().to_owned()),
        (names::LABEL_SLOT.to_owned(), slot.to_owned()),
        (names::LABEL_APP.to_owned(), set_name),
    ]);
    if let Some(generation) = set.metadata.generation {
        annotations.insert(names::ANN_GENERATION.into(), generation.to_string());
    }
    ObjectMeta {
        name: Some(name),
        namespace: set.metadata.namespace.clone(),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: set.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

fn pod_spec_for(set: &CocoonSet, container: Container) -> PodSpec {
    let mut selector = BTreeMap::from([(names::NODE_POOL.to_owned(), node_pool(set).to_owned())]);
    if let Some(class) = cpu_class(set) {
        selector.insert(names::NODE_CPU_CLASS.into(), class.into());
    }
    PodSpec {
        containers: vec![container],
        node_selector: Some(selector),
        termination_grace_period_seconds: Some(1),
        tolerations: Some(tolerations()),
        ..PodSpec::default()
    }
}

fn container(vm: &VmOptions, env_from: Option<Vec<EnvFromSource>>) -> Container {
    Container {
        name: names::CONTAINER_NAME.into(),
        image: Some(names::PLACEHOLDER_IMAGE.into()),
        resources: resources(vm),
        env_from,
        ..Container::default()
    }
}

fn tolerations() -> Vec<Toleration> {
    let exists = |key: &str, effect: Option<&str>| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: effect.map(str::to_owned),
        ..Toleration::default()
    };
    vec![
        exists(names::TAINT_PROVIDER, None),
        exists("node.kubernetes.io/not-ready", Some("NoExecute")),
        exists("node.kubernetes.io/unreachable", Some("NoExecute")),
    ]
}

fn common_vm_spec(set: &CocoonSet, vm_name: String, vm: &VmOptions) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    put(&mut a, names::ANN_VM_NAME, &vm_name);
    put(&mut a, names::ANN_OS, vm.os.as_str());
    put(&mut a, names::ANN_BACKEND, vm.backend.as_str());
    put(
        &mut a,
        names::ANN_SNAPSHOT_POLICY,
        set.spec.snapshot_policy.as_str(),
    );
    let storage = vm.storage.as_ref().map_or("", |q| q.0.as_str());
    put(&mut a, names::ANN_STORAGE, storage);
    put(
        &mut a,
        names::ANN_NETWORK,
        vm.network.as_deref().unwrap_or(""),
    );
    put(
        &mut a,
        names::ANN_CONN_TYPE,
        vm.conn_type.map_or("", ConnType::as_str),
    );
    put_port(&mut a, names::ANN_PROBE_PORT, vm.probe_port);
    if vm.force_pull == Some(true) {
        put(&mut a, names::ANN_FORCE_PULL, "true");
    }
    if vm.no_direct_io == Some(true) {
        put(&mut a, names::ANN_NO_DIRECT_IO, "true");
    }
    a
}

fn put(a: &mut BTreeMap<String, String>, key: &str, value: &str) {
    if !value.is_empty() {
        a.insert(key.to_owned(), value.to_owned());
    }
}

fn put_port(a: &mut BTreeMap<String, String>, key: &str, port: Option<i32>) {
    if let Some(port) = port.filter(|p| *p > 0) {
        a.insert(key.to_owned(), port.to_string());
    }
}

fn namespace(set: &CocoonSet) -> String {
    set.metadata.namespace.clone().unwrap_or_default()
}

fn pod_spec(pod: &mut Pod) -> &mut PodSpec {
    pod.spec.get_or_insert_with(PodSpec::default)
}

fn hostname_term(node: &str) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(vec![NodeSelectorRequirement {
            key: names::NODE_HOSTNAME.into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        ..NodeSelectorTerm::default()
    }
}

fn required_hostname(node: &str) -> Affinity {
    let required = NodeSelector {
        node_selector_terms: vec![hostname_term(node)],
    };
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(required),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorTerm;

    /// A CocoonSet `ns/demo` (uid `uid-1`, generation 7) with `spec` as its YAML spec.
    pub(crate) fn set(spec: &str) -> CocoonSet {
        let spec: String = spec.lines().map(|l| format!("  {l}\n")).collect();
        let yaml = format!(
            "apiVersion: cocoonset.cocoonstack.io/v1\nkind: CocoonSet\n\
             metadata: {{name: demo, namespace: ns, uid: uid-1, generation: 7}}\nspec:\n{spec}"
        );
        serde_yaml::from_str(&yaml).expect("cocoonset yaml")
    }

    /// A pod from YAML.
    pub(crate) fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).expect("pod yaml")
    }

    /// The toolbox named `name` of `set`.
    pub(crate) fn toolbox<'a>(set: &'a CocoonSet, name: &str) -> &'a ToolboxSpec {
        let tbs = set.spec.toolboxes.as_deref().unwrap_or_default();
        tbs.iter().find(|t| t.name == name).expect("toolbox")
    }

    fn ann<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
        pod.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    fn lbl<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
        pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn spec(pod: &Pod) -> &PodSpec {
        pod.spec.as_ref().expect("pod spec")
    }

    fn selector(pod: &Pod) -> &BTreeMap<String, String> {
        spec(pod).node_selector.as_ref().expect("node selector")
    }

    fn quantities(pod: &Pod, which: &str) -> BTreeMap<String, String> {
        let res = spec(pod).containers[0]
            .resources
            .clone()
            .unwrap_or_default();
        let list = if which == "requests" {
            res.requests
        } else {
            res.limits
        };
        list.unwrap_or_default()
            .into_iter()
            .map(|(k, q)| (k, q.0))
            .collect()
    }

    fn required_terms(pod: &Pod) -> Option<Vec<NodeSelectorTerm>> {
        let na = spec(pod).affinity.as_ref()?.node_affinity.as_ref()?;
        let req = na
            .required_during_scheduling_ignored_during_execution
            .as_ref()?;
        Some(req.node_selector_terms.clone())
    }

    const BASIC: &str = "agent: {image: ghcr.io/acme/agent:1, replicas: 2}";

    #[test]
    fn slot_0_is_the_main() {
        let p = main_pod(&set(BASIC));
        assert_eq!(p.metadata.name.as_deref(), Some("demo-0"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(lbl(&p, names::LABEL_SET), Some("demo"));
        assert_eq!(lbl(&p, names::LABEL_ROLE), Some("main"));
        assert_eq!(lbl(&p, names::LABEL_SLOT), Some("0"));
        assert_eq!(lbl(&p, names::LABEL_APP), Some("demo"));
        assert_eq!(ann(&p, names::ANN_VM_NAME), Some("vk-ns-demo-0"));
        assert_eq!(ann(&p, names::ANN_IMAGE), Some("ghcr.io/acme/agent:1"));
        assert_eq!(ann(&p, names::ANN_FORK_FROM), None);
        assert_eq!(spec(&p).node_name, None);
    }

    #[test]
    fn sub_agent_forks_from_the_main_on_its_node() {
        let p = sub_agent_pod(&set(BASIC), 2, "vk-ns-demo-0", Some("kwok-node-1"));
        assert_eq!(p.metadata.name.as_deref(), Some("demo-2"));
        assert_eq!(lbl(&p, names::LABEL_ROLE), Some("sub-agent"));
        assert_eq!(lbl(&p, names::LABEL_SLOT), Some("2"));
        assert_eq!(ann(&p, names::ANN_VM_NAME), Some("vk-ns-demo-2"));
        assert_eq!(ann(&p, names::ANN_FORK_FROM), Some("vk-ns-demo-0"));
        assert_eq!(ann(&p, names::ANN_MANAGED), Some("true"));
        assert_eq!(spec(&p).node_name.as_deref(), Some("kwok-node-1"));
        let unscheduled = sub_agent_pod(&set(BASIC), 1, "vk-ns-demo-0", None);
        assert_eq!(spec(&unscheduled).node_name, None);
    }

    #[test]
    fn agent_defaults_are_written_and_empty_values_are_not() {
        let p = main_pod(&set(BASIC));
        let want = [
            (names::ANN_MODE, "clone"),
            (names::ANN_OS, "linux"),
            (names::ANN_BACKEND, "cloud-hypervisor"),
            (names::ANN_SNAPSHOT_POLICY, "always"),
            (names::ANN_MANAGED, "true"),
            (names::ANN_GENERATION, "7"),
        ];
        for (key, value) in want {
            assert_eq!(ann(&p, key), Some(value), "{key}");
        }
        for key in [
            names::ANN_STORAGE,
            names::ANN_NETWORK,
            names::ANN_CONN_TYPE,
            names::ANN_PROBE_PORT,
            names::ANN_FORCE_PULL,
            names::ANN_NO_DIRECT_IO,
            names::ANN_RESTORE,
            names::ANN_HIBERNATE,
        ] {
            assert_eq!(ann(&p, key), None, "{key}");
        }
        assert_eq!(spec(&p).containers[0].resources, None);
    }

    #[test]
    fn vm_options_become_annotations() {
        let s = set(r#"snapshotPolicy: main-only
agent:
  image: img
  mode: run
  os: windows
  backend: firecracker
  connType: rdp
  network: lan
  forcePull: true
  noDirectIO: true
  probePort: 2222
  storage: 20Gi"#);
        let p = main_pod(&s);
        let want = [
            (names::ANN_MODE, "run"),
            (names::ANN_OS, "windows"),
            (names::ANN_BACKEND, "firecracker"),
            (names::ANN_CONN_TYPE, "rdp"),
            (names::ANN_NETWORK, "lan"),
            (names::ANN_FORCE_PULL, "true"),
            (names::ANN_NO_DIRECT_IO, "true"),
            (names::ANN_PROBE_PORT, "2222"),
            (names::ANN_STORAGE, "20Gi"),
            (names::ANN_SNAPSHOT_POLICY, "main-only"),
        ];
        for (key, value) in want {
            assert_eq!(ann(&p, key), Some(value), "{key}");
        }
        let off = main_pod(&set("agent: {image: img, forcePull: false, probePort: 0}"));
        assert_eq!(ann(&off, names::ANN_FORCE_PULL), None);
        assert_eq!(ann(&off, names::ANN_PROBE_PORT), None);
    }

    #[test]
    fn storage_becomes_ephemeral_storage_in_requests_and_limits() {
        let s = set(r#"agent:
  image: img
  storage: 10Gi
  resources:
    requests: {cpu: "1"}
    limits: {cpu: "2", memory: 4Gi}"#);
        let p = main_pod(&s);
        let requests = quantities(&p, "requests");
        let limits = quantities(&p, "limits");
        assert_eq!(requests["ephemeral-storage"], "10Gi");
        assert_eq!(limits["ephemeral-storage"], "10Gi");
        assert_eq!(requests["cpu"], "1");
        assert_eq!(
            (limits["cpu"].as_str(), limits["memory"].as_str()),
            ("2", "4Gi")
        );
        let only_storage = main_pod(&set("agent: {image: img, storage: 5Gi}"));
        assert_eq!(quantities(&only_storage, "requests").len(), 1);
        assert_eq!(
            quantities(&only_storage, "limits")["ephemeral-storage"],
            "5Gi"
        );
    }

    const TOOLBOXES: &str = r#"agent: {image: img}
toolboxes:
  - {name: vnc, mode: static, staticVMID: vm-42, staticIP: 10.0.0.9, vncPort: 5901, os: windows}
  - {name: db, image: postgres:16, storage: 1Gi}"#;

    #[test]
    fn static_toolbox_carries_vmid_ip_vnc_and_is_unmanaged() {
        let s = set(TOOLBOXES);
        let p = toolbox_pod(&s, toolbox(&s, "vnc"));
        assert_eq!(p.metadata.name.as_deref(), Some("demo-vnc"));
        assert_eq!(lbl(&p, names::LABEL_ROLE), Some("toolbox"));
        assert_eq!(lbl(&p, names::LABEL_SLOT), Some("vnc"));
        assert_eq!(ann(&p, names::ANN_VM_NAME), Some("vk-ns-demo-vnc"));
        assert_eq!(ann(&p, names::ANN_MODE), Some("static"));
        assert_eq!(ann(&p, names::ANN_VM_ID), Some("vm-42"));
        assert_eq!(ann(&p, names::ANN_VM_IP), Some("10.0.0.9"));
        assert_eq!(ann(&p, names::ANN_VNC_PORT), Some("5901"));
        assert_eq!(ann(&p, names::ANN_MANAGED), None);
        assert_eq!(ann(&p, names::ANN_IMAGE), None);
    }

    #[test]
    fn non_static_toolbox_is_managed_without_agent_fields() {
        let mut s = set(&format!(
            "{TOOLBOXES}\nnodeName: n1\nsnapshotCompatibilityClass: c1"
        ));
        s.spec.agent.service_account_name = Some("agents".into());
        let p = toolbox_pod(&s, toolbox(&s, "db"));
        assert_eq!(ann(&p, names::ANN_MODE), Some("run"));
        assert_eq!(ann(&p, names::ANN_MANAGED), Some("true"));
        assert_eq!(ann(&p, names::ANN_IMAGE), Some("postgres:16"));
        assert_eq!(ann(&p, names::ANN_VM_ID), None);
        assert_eq!(ann(&p, names::ANN_GENERATION), Some("7"));
        assert_eq!(quantities(&p, "limits")["ephemeral-storage"], "1Gi");
        assert_eq!(spec(&p).service_account_name, None);
        assert_eq!(spec(&p).affinity, None, "nodeName pins the main only");
        assert_eq!(selector(&p)[names::NODE_CPU_CLASS], "c1");
    }

    #[test]
    fn pods_are_controlled_by_the_set() {
        let s = set(TOOLBOXES);
        let pods = [
            main_pod(&s),
            sub_agent_pod(&s, 1, "vk-ns-demo-0", None),
            toolbox_pod(&s, toolbox(&s, "db")),
        ];
        for p in pods {
            let refs = p.metadata.owner_references.expect("owner refs");
            assert_eq!(refs.len(), 1);
            let r = &refs[0];
            assert_eq!((r.kind.as_str(), r.name.as_str()), ("CocoonSet", "demo"));
            assert_eq!(r.api_version, "cocoonset.cocoonstack.io/v1");
            assert_eq!((r.uid.as_str(), r.controller), ("uid-1", Some(true)));
        }
    }

    #[test]
    fn pool_and_cpu_class_selectors() {
        let p = main_pod(&set(BASIC));
        let want = BTreeMap::from([(names::NODE_POOL.to_owned(), "default".to_owned())]);
        assert_eq!(selector(&p), &want, "class omitted when unset");
        let p = main_pod(&set(
            "nodePool: gpu\nsnapshotCompatibilityClass: skylake\nagent: {image: img}",
        ));
        assert_eq!(selector(&p)[names::NODE_POOL], "gpu");
        assert_eq!(selector(&p)[names::NODE_CPU_CLASS], "skylake");
        let empty = main_pod(&set(
            "nodePool: ''\nsnapshotCompatibilityClass: ''\nagent: {image: img}",
        ));
        assert_eq!(selector(&empty), &want);
    }

    #[test]
    fn tolerates_vk_nodes_and_lost_nodes_forever() {
        let p = main_pod(&set(BASIC));
        let tols = spec(&p).tolerations.clone().expect("tolerations");
        let got: Vec<(&str, &str, Option<&str>)> = tols
            .iter()
            .map(|t| {
                assert_eq!(t.toleration_seconds, None, "tolerated forever");
                assert_eq!(t.value, None);
                let key = t.key.as_deref().unwrap_or_default();
                (
                    key,
                    t.operator.as_deref().unwrap_or_default(),
                    t.effect.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("virtual-kubelet.io/provider", "Exists", None),
                ("node.kubernetes.io/not-ready", "Exists", Some("NoExecute")),
                (
                    "node.kubernetes.io/unreachable",
                    "Exists",
                    Some("NoExecute")
                ),
            ]
        );
    }

    #[test]
    fn one_placeholder_container_and_a_short_grace_period() {
        let mut s = set(BASIC);
        s.spec.agent.service_account_name = Some("agents".into());
        s.spec.agent.env_from = Some(vec![
            serde_yaml::from_str("configMapRef: {name: env}").unwrap(),
        ]);
        let p = sub_agent_pod(&s, 1, "vk-ns-demo-0", None);
        let ps = spec(&p);
        assert_eq!(ps.termination_grace_period_seconds, Some(1));
        assert_eq!(ps.containers.len(), 1);
        assert_eq!(ps.containers[0].name, "agent");
        assert_eq!(
            ps.containers[0].image.as_deref(),
            Some(names::PLACEHOLDER_IMAGE)
        );
        assert_eq!(ps.service_account_name.as_deref(), Some("agents"));
        assert_eq!(ps.containers[0].env_from, s.spec.agent.env_from);
    }

    #[test]
    fn generation_stamp_follows_the_set() {
        let mut s = set(BASIC);
        s.metadata.generation = Some(12);
        assert_eq!(ann(&main_pod(&s), names::ANN_GENERATION), Some("12"));
    }

    #[test]
    fn main_is_pinned_by_required_hostname_affinity() {
        let p = main_pod(&set("nodeName: kwok-node-2\nagent: {image: img}"));
        let terms = required_terms(&p).expect("required affinity");
        assert_eq!(terms.len(), 1);
        let expr = &terms[0].match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (expr.key.as_str(), expr.operator.as_str()),
            ("kubernetes.io/hostname", "In")
        );
        assert_eq!(expr.values, Some(vec!["kwok-node-2".to_owned()]));
        assert_eq!(spec(&p).node_name, None, "an affinity, not a bind");
    }

    #[test]
    fn no_affinity_without_node_name_and_subs_ignore_it() {
        assert_eq!(spec(&main_pod(&set(BASIC))).affinity, None);
        let pinned = set("nodeName: kwok-node-2\nagent: {image: img, replicas: 1}");
        let sub = sub_agent_pod(&pinned, 1, "vk-ns-demo-0", Some("kwok-node-0"));
        assert_eq!(spec(&sub).affinity, None);
        assert_eq!(spec(&sub).node_name.as_deref(), Some("kwok-node-0"));
    }

    #[test]
    fn prefer_node_adds_a_preferred_hostname_once() {
        let mut p = main_pod(&set(BASIC));
        prefer_node(&mut p, "kwok-node-1");
        prefer_node(&mut p, "kwok-node-1");
        let na = spec(&p).affinity.clone().unwrap().node_affinity.unwrap();
        let preferred = na
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(preferred.len(), 1);
        assert_eq!(preferred[0].weight, 100);
        let expr = &preferred[0].preference.match_expressions.as_ref().unwrap()[0];
        assert_eq!(expr.key, "kubernetes.io/hostname");
        assert_eq!(expr.values, Some(vec!["kwok-node-1".to_owned()]));
        assert!(
            na.required_during_scheduling_ignored_during_execution
                .is_none()
        );
    }

    #[test]
    fn prefer_node_yields_to_a_required_pin() {
        let mut p = main_pod(&set("nodeName: kwok-node-2\nagent: {image: img}"));
        let before = spec(&p).affinity.clone();
        prefer_node(&mut p, "kwok-node-1");
        assert_eq!(spec(&p).affinity, before);
    }

    #[test]
    fn mark_restore_sets_the_flag() {
        let mut p = main_pod(&set(BASIC));
        mark_restore(&mut p);
        assert_eq!(ann(&p, names::ANN_RESTORE), Some("true"));
        assert_eq!(ann(&p, names::ANN_VM_NAME), Some("vk-ns-demo-0"));
    }

    #[test]
    fn conn_type_precedence() {
        let cases = [
            (
                "{name: a, connType: ssh, vncPort: 5900, os: windows}",
                ConnType::Ssh,
            ),
            ("{name: a, vncPort: 5900, os: android}", ConnType::Vnc),
            ("{name: a, vncPort: 0, os: android}", ConnType::Adb),
            ("{name: a, os: windows}", ConnType::Rdp),
            ("{name: a, os: macos}", ConnType::Ssh),
            ("{name: a}", ConnType::Ssh),
        ];
        for (yaml, want) in cases {
            let tb: ToolboxSpec = serde_yaml::from_str(yaml).unwrap();
            assert_eq!(conn_type(&tb), want, "{yaml}");
        }
    }
}
