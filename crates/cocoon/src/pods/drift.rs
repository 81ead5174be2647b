//! Drift detection (reference §4.3): whether a live pod no longer matches the spec and must be
//! deleted and recreated. Pure.
//!
//! Contract — compared:
//! - the VMSpec annotations the builder would write (VM name taken from the live pod; fork-from
//!   expected empty on the main and the main VM on sub-agents), plus VM id/IP/VNC port for
//!   static toolboxes;
//! - CPU and memory requests and limits of the `agent` container, by value (`1` ≡ `1000m`), a
//!   missing request defaulting to its limit as the API server does; ephemeral-storage ignored;
//! - agents only: service account (`""` ≡ `default`) and envFrom (deep equality);
//! - node pool (nodeSelector > label > annotation > `default`) and CPU class, except that a live
//!   (non-terminal) pod without any class selector is adopted.
//!
//! Never compared: affinity, nodeName, tolerations (placement belongs to migration), and the
//! annotations the operator or vk-cocoon change at run time (generation, hibernate, restore,
//! lifecycle, dead-letter, VM id/IP of non-static VMs).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use super::build::{self, STATIC_KEYS, VM_SPEC_KEYS};
use super::state;
use crate::crd::{CocoonSet, ToolboxMode, ToolboxSpec};
use crate::names::{self, Role};

/// Whether agent pod `pod` (main or sub-agent, by its role label) drifted from the spec.
pub fn agent_drifted(set: &CocoonSet, pod: &Pod) -> bool {
    let sub = state::label(pod, names::LABEL_ROLE).and_then(Role::parse) == Some(Role::SubAgent);
    let slot = if sub { slot(pod).unwrap_or(1) } else { 0 };
    let fork_from = sub.then(|| main_vm(set));
    let want = build::agent_vm_spec(set, slot, fork_from.as_deref());
    vm_spec_drifted(&want, pod, VM_SPEC_KEYS)
        || resources_drifted(&set.spec.agent.vm.resources, pod)
        || service_account(pod) != want_service_account(set)
        || env_from_drifted(set, pod)
        || scheduling_drifted(set, pod)
}

/// Whether toolbox pod `pod` drifted from toolbox `tb` of the spec.
pub fn toolbox_drifted(set: &CocoonSet, tb: &ToolboxSpec, pod: &Pod) -> bool {
    let want = build::toolbox_vm_spec(set, tb);
    let static_drift = tb.mode == ToolboxMode::Static && vm_spec_drifted(&want, pod, STATIC_KEYS);
    vm_spec_drifted(&want, pod, VM_SPEC_KEYS)
        || static_drift
        || resources_drifted(&tb.vm.resources, pod)
        || scheduling_drifted(set, pod)
}

/// The node pool a live pod is in: its pool nodeSelector, else its pool label, else its pool
/// annotation, else `default`.
pub fn live_node_pool(pod: &Pod) -> &str {
    node_selector(pod, names::NODE_POOL)
        .or_else(|| state::label(pod, names::NODE_POOL))
        .or_else(|| state::annotation(pod, names::NODE_POOL))
        .unwrap_or("default")
}

/// Compares quantities by value (`1` ≡ `1000m`, `1Gi` ≡ `1073741824`); unparsable ones by text.
pub fn quantity_eq(a: &Quantity, b: &Quantity) -> bool {
    match (parse_quantity(&a.0), parse_quantity(&b.0)) {
        (Some(x), Some(y)) => x == y,
        _ => a.0.trim() == b.0.trim(),
    }
}

fn vm_spec_drifted(want: &BTreeMap<String, String>, pod: &Pod, keys: &[&str]) -> bool {
    keys.iter().any(|key| {
        let live = state::annotation(pod, key);
        if *key == names::ANN_VM_NAME {
            return false; // the VM name is the pod's identity, taken from the live pod
        }
        want.get(*key).map(String::as_str).filter(|v| !v.is_empty()) != live
    })
}

fn slot(pod: &Pod) -> Option<i32> {
    state::label(pod, names::LABEL_SLOT)?.parse().ok()
}

fn main_vm(set: &CocoonSet) -> String {
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    names::agent_vm_name(&ns, &set.name_any(), 0)
}

fn agent_container(pod: &Pod) -> Option<&Container> {
    let containers = &pod.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| c.name == names::CONTAINER_NAME)
        .or_else(|| containers.first())
}

fn node_selector<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.spec
        .as_ref()?
        .node_selector
        .as_ref()?
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

fn normalize_sa(sa: Option<&str>) -> &str {
    match sa {
        None | Some("") => "default",
        Some(sa) => sa,
    }
}

fn service_account(pod: &Pod) -> &str {
    let spec = pod.spec.as_ref();
    let sa = spec.and_then(|s| s.service_account_name.as_deref());
    let legacy = spec.and_then(|s| s.service_account.as_deref());
    normalize_sa(sa.filter(|s| !s.is_empty()).or(legacy))
}

fn want_service_account(set: &CocoonSet) -> &str {
    normalize_sa(set.spec.agent.service_account_name.as_deref())
}

fn env_from_drifted(set: &CocoonSet, pod: &Pod) -> bool {
    let want = set.spec.agent.env_from.as_deref().unwrap_or_default();
    let live = agent_container(pod)
        .and_then(|c| c.env_from.as_deref())
        .unwrap_or_default();
    want != live
}

fn scheduling_drifted(set: &CocoonSet, pod: &Pod) -> bool {
    if live_node_pool(pod) != build::node_pool(set) {
        return true;
    }
    match (
        node_selector(pod, names::NODE_CPU_CLASS),
        build::cpu_class(set),
    ) {
        (live, want) if live == want => false,
        // A legacy pod from before the class was set: adopt it while its VM is alive.
        (None, Some(_)) => state::is_terminal(pod),
        _ => true,
    }
}

const COMPUTE: [&str; 2] = ["cpu", "memory"];

fn resources_drifted(want: &Option<ResourceRequirements>, pod: &Pod) -> bool {
    let live = agent_container(pod).and_then(|c| c.resources.as_ref());
    let (want, live) = (compute(want.as_ref()), compute(live));
    want.len() != live.len()
        || want
            .iter()
            .zip(&live)
            .any(|((wk, wq), (lk, lq))| wk != lk || !quantity_eq(wq, lq))
}

/// CPU and memory requests and limits, keyed `requests/cpu` etc.; a missing request defaults
/// to its limit.
fn compute(res: Option<&ResourceRequirements>) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    let Some(res) = res else { return out };
    for name in COMPUTE {
        let limit = res.limits.as_ref().and_then(|l| l.get(name));
        let request = res.requests.as_ref().and_then(|r| r.get(name)).or(limit);
        if let Some(q) = limit {
            out.insert(format!("limits/{name}"), q.clone());
        }
        if let Some(q) = request {
            out.insert(format!("requests/{name}"), q.clone());
        }
    }
    out
}

/// The value of a Kubernetes quantity in nano-units (`1` → 10⁹), rounded up like the API
/// server; `None` when it is not a quantity or overflows.
fn parse_quantity(s: &str) -> Option<i128> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (negative, number) = match number.as_bytes().first()? {
        b'-' => (true, &number[1..]),
        b'+' => (false, &number[1..]),
        _ => (false, number),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let digits: i128 = format!("{int}{frac}").parse().ok()?;
    let (mul, exp10) = suffix_scale(suffix)?;
    // value = digits * 10^(exp10 - frac.len()) * mul, in nano units (+9).
    let exp = exp10 + 9 - i32::try_from(frac.len()).ok()?;
    let scaled = digits.checked_mul(mul)?;
    let value = if exp >= 0 {
        scaled.checked_mul(10i128.checked_pow(u32::try_from(exp).ok()?)?)?
    } else {
        let div = 10i128.checked_pow(u32::try_from(-exp).ok()?)?;
        (scaled + div - 1) / div
    };
    Some(if negative { -value } else { value })
}

/// Binary multiplier and decimal exponent of a quantity suffix.
fn suffix_scale(suffix: &str) -> Option<(i128, i32)> {
    let binary = |p: u32| Some((1i128 << p, 0));
    match suffix {
        "" => Some((1, 0)),
        "n" => Some((1, -9)),
        "u" => Some((1, -6)),
        "m" => Some((1, -3)),
        "k" => Some((1, 3)),
        "M" => Some((1, 6)),
        "G" => Some((1, 9)),
        "T" => Some((1, 12)),
        "P" => Some((1, 15)),
        "E" => Some((1, 18)),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E'])?;
            Some((1, exp.parse().ok().filter(|e: &i32| e.abs() <= 30)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::build::tests::{pod, set, toolbox};
    use crate::pods::build::{main_pod, sub_agent_pod, toolbox_pod};

    const SET: &str = r#"nodePool: gpu
snapshotCompatibilityClass: skylake
agent:
  image: img:1
  replicas: 2
  probePort: 22
  serviceAccountName: agents
  envFrom: [{configMapRef: {name: env}}]
  resources:
    limits: {cpu: 1000m, memory: 1Gi}
toolboxes:
  - {name: db, image: pg:16, probePort: 5432, resources: {requests: {cpu: 500m}}}
  - {name: vnc, mode: static, staticVMID: vm-42, staticIP: 10.0.0.9, vncPort: 5901}"#;

    fn sub(s: &CocoonSet) -> Pod {
        sub_agent_pod(s, 1, "vk-ns-demo-0", Some("kwok-node-0"))
    }

    fn set_ann(p: &mut Pod, key: &str, value: &str) {
        p.annotations_mut().insert(key.into(), value.into());
    }

    fn spec_of(p: &mut Pod) -> &mut k8s_openapi::api::core::v1::PodSpec {
        p.spec.as_mut().unwrap()
    }

    fn resources_of(p: &mut Pod) -> &mut ResourceRequirements {
        spec_of(p).containers[0].resources.as_mut().unwrap()
    }

    #[test]
    fn freshly_built_pods_have_not_drifted() {
        let s = set(SET);
        assert!(!agent_drifted(&s, &main_pod(&s)));
        assert!(!agent_drifted(&s, &sub(&s)));
        for name in ["db", "vnc"] {
            let tb = toolbox(&s, name);
            assert!(!toolbox_drifted(&s, tb, &toolbox_pod(&s, tb)), "{name}");
        }
        let plain = set("agent: {image: img}");
        assert!(!agent_drifted(&plain, &main_pod(&plain)));
    }

    #[test]
    fn api_server_defaults_are_not_drift() {
        // What the API server hands back for a main built from SET: canonical quantities,
        // requests defaulted from limits, extra scheduling fields, runtime annotations.
        let live = pod(r#"
metadata:
  name: demo-0
  labels: {cocoonset.cocoonstack.io/role: main, cocoonset.cocoonstack.io/slot: "0"}
  annotations:
    vm.cocoonstack.io/name: vk-ns-demo-0
    cocoonset.cocoonstack.io/image: img:1
    cocoonset.cocoonstack.io/mode: clone
    cocoonset.cocoonstack.io/os: linux
    vm.cocoonstack.io/backend: cloud-hypervisor
    cocoonset.cocoonstack.io/snapshot-policy: always
    cocoonset.cocoonstack.io/managed: "true"
    vm.cocoonstack.io/probe-port: "22"
    cocoonset.cocoonstack.io/generation: "3"
    vm.cocoonstack.io/id: vm-7
    vm.cocoonstack.io/ip: 10.1.0.4
    vm.cocoonstack.io/lifecycle-state: ready
spec:
  serviceAccountName: agents
  serviceAccount: agents
  nodeName: kwok-node-1
  nodeSelector: {cocoonstack.io/pool: gpu, cocoonstack.io/snapshot-cpu-class: skylake}
  containers:
    - name: agent
      image: ghcr.io/cocoonstack/placeholder:latest
      envFrom: [{configMapRef: {name: env}}]
      resources:
        limits: {cpu: "1", memory: 1Gi}
        requests: {cpu: "1", memory: "1073741824"}
"#);
        assert!(!agent_drifted(&set(SET), &live));
    }

    #[test]
    fn drift_on_image_backend_and_probe_port() {
        let s = set(SET);
        let edits = [
            (names::ANN_IMAGE, "img:2"),
            (names::ANN_BACKEND, "firecracker"),
            (names::ANN_PROBE_PORT, "2222"),
            (names::ANN_MODE, "run"),
            (names::ANN_SNAPSHOT_POLICY, "never"),
            (names::ANN_NETWORK, "lan"),
        ];
        for (key, value) in edits {
            let mut p = main_pod(&s);
            set_ann(&mut p, key, value);
            assert!(agent_drifted(&s, &p), "main {key}");
            let mut p = sub(&s);
            set_ann(&mut p, key, value);
            assert!(agent_drifted(&s, &p), "sub {key}");
        }
        let mut missing = main_pod(&s);
        missing.annotations_mut().remove(names::ANN_PROBE_PORT);
        assert!(agent_drifted(&s, &missing), "a removed annotation is drift");
    }

    #[test]
    fn toolbox_drift_on_image_and_probe_port() {
        let s = set(SET);
        let tb = toolbox(&s, "db");
        for (key, value) in [(names::ANN_IMAGE, "pg:17"), (names::ANN_PROBE_PORT, "6432")] {
            let mut p = toolbox_pod(&s, tb);
            set_ann(&mut p, key, value);
            assert!(toolbox_drifted(&s, tb, &p), "{key}");
        }
        let mut spec_changed = s.clone();
        spec_changed.spec.toolboxes.as_mut().unwrap()[0]
            .vm
            .probe_port = Some(15432);
        let old = toolbox_pod(&s, tb);
        assert!(toolbox_drifted(
            &spec_changed,
            toolbox(&spec_changed, "db"),
            &old
        ));
    }

    #[test]
    fn drift_on_cpu_and_memory_only() {
        let s = set(SET);
        let mut p = main_pod(&s);
        resources_of(&mut p)
            .limits
            .as_mut()
            .unwrap()
            .insert("memory".into(), Quantity("2Gi".into()));
        assert!(agent_drifted(&s, &p), "memory limit");
        let mut p = main_pod(&s);
        resources_of(&mut p).requests =
            Some(BTreeMap::from([("cpu".into(), Quantity("500m".into()))]));
        assert!(agent_drifted(&s, &p), "explicit request below the limit");
        let mut p = main_pod(&s);
        spec_of(&mut p).containers[0].resources = None;
        assert!(agent_drifted(&s, &p), "resources dropped");
        let mut p = main_pod(&s);
        let eph = BTreeMap::from([("ephemeral-storage".into(), Quantity("50Gi".into()))]);
        resources_of(&mut p).requests = Some(eph);
        assert!(!agent_drifted(&s, &p), "ephemeral-storage is ignored");
        let tb = toolbox(&s, "db");
        let mut p = toolbox_pod(&s, tb);
        resources_of(&mut p).requests =
            Some(BTreeMap::from([("cpu".into(), Quantity("1".into()))]));
        assert!(toolbox_drifted(&s, tb, &p), "toolbox cpu");
    }

    #[test]
    fn drift_on_service_account_with_default_equivalence() {
        let s = set(SET);
        let mut p = main_pod(&s);
        spec_of(&mut p).service_account_name = Some("other".into());
        assert!(agent_drifted(&s, &p));
        let plain = set("agent: {image: img}");
        let mut p = main_pod(&plain);
        spec_of(&mut p).service_account_name = Some("default".into());
        assert!(!agent_drifted(&plain, &p), "\"\" ≡ default");
        let mut named_default = plain.clone();
        named_default.spec.agent.service_account_name = Some("default".into());
        assert!(!agent_drifted(&named_default, &main_pod(&plain)));
    }

    #[test]
    fn drift_on_env_from() {
        let s = set(SET);
        let mut p = main_pod(&s);
        spec_of(&mut p).containers[0].env_from = None;
        assert!(agent_drifted(&s, &p));
        let mut p = sub(&s);
        let other = serde_yaml::from_str("secretRef: {name: env}").unwrap();
        spec_of(&mut p).containers[0].env_from = Some(vec![other]);
        assert!(agent_drifted(&s, &p));
        let plain = set("agent: {image: img, envFrom: []}");
        assert!(
            !agent_drifted(&plain, &main_pod(&set("agent: {image: img}"))),
            "[] ≡ absent"
        );
    }

    #[test]
    fn drift_on_node_pool_with_default_fallback() {
        let s = set(SET);
        let mut p = main_pod(&s);
        spec_of(&mut p)
            .node_selector
            .as_mut()
            .unwrap()
            .insert(names::NODE_POOL.into(), "cpu".into());
        assert!(agent_drifted(&s, &p));
        let plain = set("agent: {image: img}");
        let mut p = main_pod(&plain);
        spec_of(&mut p).node_selector = None;
        assert!(
            !agent_drifted(&plain, &p),
            "no selector reads as the default pool"
        );
        assert!(agent_drifted(
            &set("nodePool: gpu\nagent: {image: img}"),
            &p
        ));
        let tb_set = set("agent: {image: img}\ntoolboxes: [{name: db, image: pg}]");
        let tb = toolbox(&tb_set, "db");
        let moved = toolbox_pod(
            &set("nodePool: gpu\nagent: {image: img}\ntoolboxes: [{name: db, image: pg}]"),
            tb,
        );
        assert!(toolbox_drifted(&tb_set, tb, &moved));
    }

    #[test]
    fn live_node_pool_precedence() {
        let cases = [
            (
                r#"{metadata: {labels: {cocoonstack.io/pool: b}, annotations: {cocoonstack.io/pool: c}}, spec: {containers: [], nodeSelector: {cocoonstack.io/pool: a}}}"#,
                "a",
            ),
            (
                r#"{metadata: {labels: {cocoonstack.io/pool: b}, annotations: {cocoonstack.io/pool: c}}}"#,
                "b",
            ),
            (
                r#"{metadata: {annotations: {cocoonstack.io/pool: c}}}"#,
                "c",
            ),
            (r#"{metadata: {}}"#, "default"),
        ];
        for (yaml, want) in cases {
            assert_eq!(live_node_pool(&pod(yaml)), want, "{yaml}");
        }
    }

    #[test]
    fn drift_on_cpu_class() {
        let s = set(SET);
        let mut p = main_pod(&s);
        let sel = spec_of(&mut p).node_selector.as_mut().unwrap();
        sel.insert(names::NODE_CPU_CLASS.into(), "icelake".into());
        assert!(agent_drifted(&s, &p));
        let classless = set("agent: {image: img}");
        assert!(
            agent_drifted(&classless, &p),
            "a class the spec does not ask for"
        );
    }

    #[test]
    fn legacy_pod_without_class_is_adopted_while_live() {
        let s = set(SET);
        let mut p = main_pod(&s);
        spec_of(&mut p)
            .node_selector
            .as_mut()
            .unwrap()
            .remove(names::NODE_CPU_CLASS);
        assert!(!agent_drifted(&s, &p));
        let tb = toolbox(&s, "db");
        let mut t = toolbox_pod(&s, tb);
        spec_of(&mut t)
            .node_selector
            .as_mut()
            .unwrap()
            .remove(names::NODE_CPU_CLASS);
        assert!(!toolbox_drifted(&s, tb, &t));
        set_ann(&mut p, names::ANN_LIFECYCLE_STATE, "failed");
        assert!(
            agent_drifted(&s, &p),
            "a terminal legacy pod is not adopted"
        );
        let mut failed = main_pod(&s);
        spec_of(&mut failed)
            .node_selector
            .as_mut()
            .unwrap()
            .remove(names::NODE_CPU_CLASS);
        failed.status = Some(serde_yaml::from_str("phase: Failed").unwrap());
        assert!(agent_drifted(&s, &failed));
    }

    #[test]
    fn static_toolbox_drift_on_vmid_ip_and_vnc() {
        let s = set(SET);
        let tb = toolbox(&s, "vnc");
        for (key, value) in [
            (names::ANN_VM_ID, "vm-43"),
            (names::ANN_VM_IP, "10.0.0.10"),
            (names::ANN_VNC_PORT, "5902"),
        ] {
            let mut p = toolbox_pod(&s, tb);
            set_ann(&mut p, key, value);
            assert!(toolbox_drifted(&s, tb, &p), "{key}");
        }
        let mut managed = toolbox_pod(&s, tb);
        set_ann(&mut managed, names::ANN_MANAGED, "true");
        assert!(toolbox_drifted(&s, tb, &managed));
        let db = toolbox(&s, "db");
        let mut p = toolbox_pod(&s, db);
        set_ann(&mut p, names::ANN_VM_ID, "vm-1");
        set_ann(&mut p, names::ANN_VM_IP, "10.0.0.2");
        set_ann(&mut p, names::ANN_VNC_PORT, "5900");
        assert!(
            !toolbox_drifted(&s, db, &p),
            "vk-cocoon writes these on managed VMs"
        );
    }

    #[test]
    fn sub_keeps_fork_from_and_main_must_not_have_one() {
        let s = set(SET);
        let mut p = main_pod(&s);
        set_ann(&mut p, names::ANN_FORK_FROM, "vk-ns-demo-0");
        assert!(agent_drifted(&s, &p), "a fork-from edit on main");
        let mut p = sub(&s);
        assert!(!agent_drifted(&s, &p));
        set_ann(&mut p, names::ANN_FORK_FROM, "vk-ns-other-0");
        assert!(agent_drifted(&s, &p));
        p.annotations_mut().remove(names::ANN_FORK_FROM);
        assert!(agent_drifted(&s, &p));
    }

    #[test]
    fn placement_is_not_drift() {
        let s = set("nodeName: kwok-node-2\nagent: {image: img, replicas: 1}");
        let unpinned = set("agent: {image: img, replicas: 1}");
        let pinned = main_pod(&s);
        assert!(
            !agent_drifted(&unpinned, &pinned),
            "affinity is not compared"
        );
        assert!(!agent_drifted(&s, &main_pod(&unpinned)));
        let mut p = sub(&s);
        spec_of(&mut p).node_name = Some("elsewhere".into());
        spec_of(&mut p).tolerations = None;
        assert!(!agent_drifted(&s, &p));
    }

    #[test]
    fn runtime_annotations_and_vm_name_are_not_drift() {
        let s = set(SET);
        let mut p = sub(&s);
        for (key, value) in [
            (names::ANN_GENERATION, "99"),
            (names::ANN_HIBERNATE, "true"),
            (names::ANN_RESTORE, "true"),
            (names::ANN_KEEP_SNAPSHOT, "true"),
            (names::ANN_DEAD_LETTER, "true"),
            (names::ANN_LIFECYCLE_STATE, "hibernated"),
            (names::ANN_LIFECYCLE_GENERATION, "99"),
            (names::ANN_VM_ID, "vm-9"),
            (names::ANN_VM_IP, "10.0.0.1"),
            (names::ANN_VM_NAME, "vk-ns-legacy-1"),
        ] {
            set_ann(&mut p, key, value);
        }
        assert!(!agent_drifted(&s, &p));
    }

    #[test]
    fn quantities_compare_by_value() {
        let q = |s: &str| Quantity(s.into());
        let equal = [
            ("1", "1000m"),
            ("1Gi", "1073741824"),
            ("0.5", "500m"),
            ("1k", "1000"),
            ("1e3", "1k"),
            ("1.5Gi", "1536Mi"),
        ];
        for (a, b) in equal {
            assert!(quantity_eq(&q(a), &q(b)), "{a} == {b}");
        }
        let different = [("1", "2"), ("1Gi", "1G"), ("100m", "0.2"), ("1Mi", "1M")];
        for (a, b) in different {
            assert!(!quantity_eq(&q(a), &q(b)), "{a} != {b}");
        }
        assert!(quantity_eq(&q("junk"), &q("junk")));
        assert!(!quantity_eq(&q("junk"), &q("1")));
    }
}
