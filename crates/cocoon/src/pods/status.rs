//! The CocoonSet status computed from its classified pods (reference §4.9). Pure.
//!
//! Contract:
//! - Deterministic: the same set and pods give the same status; conditions go through
//!   [`kit::conditions::upsert`], so `lastTransitionTime` only moves when a status flips and a
//!   steady set recomputes a byte-identical status.
//! - Desired agents are 1 + replicas; agents counted and listed are the main and the sub-agents
//!   of slots `1..=replicas` (main first, then by slot; sub-agents carry `forkedFrom`). Desired
//!   toolboxes are the distinct names in the spec; the toolboxes counted and listed are the
//!   spec's toolboxes that have a pod, by name. Pods about to be removed are not reported.
//! - `vmID`/`ip` come from vk-cocoon's annotations, `phase` is the pod phase.
//! - Phase: the caller's, else [`auto_phase`]. Conditions `Ready` and `Progressing` carry the
//!   set's generation, as does `observedGeneration`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kit::conditions::{Desired, upsert};

use super::build::conn_type;
use super::classify::Classified;
use super::state;
use crate::crd::{
    AgentStatus, CocoonSet, CocoonSetPhase, CocoonSetStatus, ToolboxSpec, ToolboxStatus,
};
use crate::names::{self, Role};

/// Ready and desired counts of a set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Agents whose pod is Ready (main + sub-agents in range).
    pub ready_agents: i32,
    /// 1 + replicas.
    pub desired_agents: i32,
    /// Spec toolboxes whose pod is Ready.
    pub ready_toolboxes: i32,
    /// Distinct toolbox names in the spec.
    pub desired_toolboxes: i32,
}

impl Counts {
    /// Counts `pods` against `set`'s spec.
    pub fn of(set: &CocoonSet, pods: &Classified) -> Self {
        let agents = agent_pods(set, pods);
        let toolboxes = toolbox_pods(set, pods);
        let ready_toolboxes = toolboxes.values().filter_map(|(_, p)| *p);
        Counts {
            ready_agents: count_ready(agents.iter().map(|(_, p)| *p)),
            desired_agents: 1 + set.spec.agent.replicas(),
            ready_toolboxes: count_ready(ready_toolboxes),
            desired_toolboxes: len(toolboxes.len()),
        }
    }

    /// Whether every desired agent and toolbox is Ready.
    pub fn all_ready(&self) -> bool {
        self.ready_agents == self.desired_agents
            && self.desired_agents > 0
            && self.ready_toolboxes == self.desired_toolboxes
    }
}

/// The status of `set` given its classified `pods`; `phase` `None` means [`auto_phase`].
pub fn compute(
    set: &CocoonSet,
    pods: &Classified,
    phase: Option<CocoonSetPhase>,
    now: Timestamp,
) -> CocoonSetStatus {
    let generation = set.metadata.generation;
    let counts = Counts::of(set, pods);
    let phase = phase.unwrap_or_else(|| auto_phase(set, pods));
    let mut status = set.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.phase = Some(phase);
    status.ready_agents = counts.ready_agents;
    status.desired_agents = counts.desired_agents;
    status.ready_toolboxes = counts.ready_toolboxes;
    status.desired_toolboxes = counts.desired_toolboxes;
    status.agents = agent_statuses(set, pods);
    status.toolboxes = toolbox_statuses(set, pods);
    for desired in conditions(&counts, phase) {
        upsert(&mut status.conditions, desired.observed(generation), now);
    }
    status
}

/// No main → `Pending`; fewer Ready than desired agents or toolboxes → `Scaling`; else
/// `Running`.
pub fn auto_phase(set: &CocoonSet, pods: &Classified) -> CocoonSetPhase {
    let c = Counts::of(set, pods);
    if pods.main.is_none() {
        CocoonSetPhase::Pending
    } else if c.ready_agents < c.desired_agents || c.ready_toolboxes < c.desired_toolboxes {
        CocoonSetPhase::Scaling
    } else {
        CocoonSetPhase::Running
    }
}

fn conditions(c: &Counts, phase: CocoonSetPhase) -> [Desired; 2] {
    let message = format!(
        "{}/{} agents ready, {}/{} toolboxes ready",
        c.ready_agents, c.desired_agents, c.ready_toolboxes, c.desired_toolboxes
    );
    let ready = if c.all_ready() {
        Desired::new("Ready", true, "AllAgentsReady", message)
    } else {
        Desired::new("Ready", false, "AgentsNotReady", message)
    };
    let busy = matches!(phase, CocoonSetPhase::Pending | CocoonSetPhase::Scaling);
    let reason = if busy { "Reconciling" } else { "Stable" };
    [
        ready,
        Desired::new("Progressing", busy, reason, phase.as_str()),
    ]
}

/// The main (slot 0) and sub-agents in range, by slot.
fn agent_pods<'a>(set: &CocoonSet, pods: &'a Classified) -> Vec<(i32, &'a Pod)> {
    let replicas = set.spec.agent.replicas();
    let main = pods.main.iter().map(|p| (0, p));
    let subs = pods.subs.range(1..=replicas.max(0)).map(|(s, p)| (*s, p));
    main.chain(subs).collect()
}

/// The spec's toolboxes by name (first wins on duplicates), with their pod if any.
fn toolbox_pods<'a>(
    set: &'a CocoonSet,
    pods: &'a Classified,
) -> BTreeMap<&'a str, (&'a ToolboxSpec, Option<&'a Pod>)> {
    let mut out = BTreeMap::new();
    for tb in set.spec.toolboxes.iter().flatten() {
        out.entry(tb.name.as_str())
            .or_insert((tb, pods.toolboxes.get(&tb.name)));
    }
    out
}

fn agent_statuses(set: &CocoonSet, pods: &Classified) -> Vec<AgentStatus> {
    agent_pods(set, pods)
        .into_iter()
        .map(|(slot, pod)| {
            let role = if slot == 0 {
                Role::Main
            } else {
                Role::SubAgent
            };
            let forked_from = if slot == 0 {
                ""
            } else {
                state::annotation(pod, names::ANN_FORK_FROM).unwrap_or_default()
            };
            AgentStatus {
                slot,
                role: role.as_str().into(),
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                vm_name: text(state::vm_name(pod)),
                vm_id: text(state::vm_id(pod)),
                ip: text(state::vm_ip(pod)),
                phase: state::phase(pod).into(),
                forked_from: forked_from.into(),
            }
        })
        .collect()
}

fn toolbox_statuses(set: &CocoonSet, pods: &Classified) -> Vec<ToolboxStatus> {
    toolbox_pods(set, pods)
        .into_iter()
        .filter_map(|(name, (tb, pod))| {
            let pod = pod?;
            let vnc = state::annotation(pod, names::ANN_VNC_PORT).and_then(|v| v.parse().ok());
            Some(ToolboxStatus {
                name: name.into(),
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                vm_name: text(state::vm_name(pod)),
                vm_id: text(state::vm_id(pod)),
                ip: text(state::vm_ip(pod)),
                phase: state::phase(pod).into(),
                conn_type: Some(conn_type(tb)),
                vnc_port: vnc.or(tb.vnc_port).filter(|p: &i32| *p > 0),
            })
        })
        .collect()
}

fn count_ready<'a>(pods: impl Iterator<Item = &'a Pod>) -> i32 {
    len(pods.filter(|p| state::is_ready(p)).count())
}

fn text(v: Option<&str>) -> String {
    v.unwrap_or_default().to_owned()
}

fn len(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ConnType;
    use crate::pods::build::tests::{set, toolbox};
    use crate::pods::build::{main_pod, sub_agent_pod, toolbox_pod};
    use crate::pods::classify::classify;
    use kit::conditions::get;

    const SET: &str = "agent: {image: img, replicas: 2}\ntoolboxes: [{name: db, image: pg}, {name: vnc, vncPort: 5901}]";

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn with_status(mut p: Pod, ready: bool) -> Pod {
        let yaml = format!(
            "phase: Running\nconditions: [{{type: Ready, status: \"{}\"}}]",
            if ready { "True" } else { "False" }
        );
        p.status = Some(serde_yaml::from_str(&yaml).unwrap());
        p
    }

    fn vm(mut p: Pod, id: &str, ip: &str) -> Pod {
        let a = p.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(names::ANN_VM_ID.into(), id.into());
        a.insert(names::ANN_VM_IP.into(), ip.into());
        p
    }

    fn sub(s: &CocoonSet, slot: i32) -> Pod {
        sub_agent_pod(s, slot, "vk-ns-demo-0", Some("n1"))
    }

    /// Every pod of SET, Ready unless listed in `not_ready`; `missing` are left out.
    fn pods(s: &CocoonSet, not_ready: &[&str], missing: &[&str]) -> Classified {
        let all = [
            main_pod(s),
            sub(s, 1),
            sub(s, 2),
            toolbox_pod(s, toolbox(s, "db")),
            toolbox_pod(s, toolbox(s, "vnc")),
        ];
        let pods = all
            .into_iter()
            .filter(|p| !missing.contains(&p.metadata.name.as_deref().unwrap()))
            .map(|p| {
                let ready = !not_ready.contains(&p.metadata.name.as_deref().unwrap());
                with_status(p, ready)
            })
            .collect();
        classify(s, pods)
    }

    fn cond<'a>(
        st: &'a CocoonSetStatus,
        type_: &str,
    ) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        get(&st.conditions, type_).expect("condition")
    }

    #[test]
    fn pending_without_main() {
        let s = set(SET);
        let c = pods(&s, &[], &["demo-0"]);
        assert_eq!(auto_phase(&s, &c), CocoonSetPhase::Pending);
        let st = compute(&s, &c, None, t(100));
        assert_eq!(st.phase, Some(CocoonSetPhase::Pending));
        assert_eq!((st.ready_agents, st.desired_agents), (2, 3));
        let p = cond(&st, "Progressing");
        assert_eq!(
            (p.status.as_str(), p.reason.as_str(), p.message.as_str()),
            ("True", "Reconciling", "Pending")
        );
        assert_eq!(
            auto_phase(&s, &Classified::default()),
            CocoonSetPhase::Pending
        );
    }

    #[test]
    fn scaling_with_missing_or_unready_subs_or_toolboxes() {
        let s = set(SET);
        for (not_ready, missing) in [
            (&[][..], &["demo-2"][..]),
            (&["demo-1"][..], &[][..]),
            (&[][..], &["demo-vnc"][..]),
            (&["demo-db"][..], &[][..]),
            (&["demo-0"][..], &[][..]),
        ] {
            let c = pods(&s, not_ready, missing);
            assert_eq!(
                auto_phase(&s, &c),
                CocoonSetPhase::Scaling,
                "{not_ready:?} {missing:?}"
            );
        }
    }

    #[test]
    fn running_when_all_ready() {
        let s = set(SET);
        let st = compute(&s, &pods(&s, &[], &[]), None, t(100));
        assert_eq!(st.phase, Some(CocoonSetPhase::Running));
        assert_eq!((st.ready_agents, st.desired_agents), (3, 3));
        assert_eq!((st.ready_toolboxes, st.desired_toolboxes), (2, 2));
        assert_eq!(st.observed_generation, Some(7));
        let r = cond(&st, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            ("True", "AllAgentsReady")
        );
        assert_eq!(r.message, "3/3 agents ready, 2/2 toolboxes ready");
        assert_eq!(r.observed_generation, Some(7));
        let p = cond(&st, "Progressing");
        assert_eq!(
            (p.status.as_str(), p.reason.as_str(), p.message.as_str()),
            ("False", "Stable", "Running")
        );
        assert_eq!(p.observed_generation, Some(7));
    }

    #[test]
    fn toolbox_pending_keeps_ready_false() {
        let s = set(SET);
        let st = compute(&s, &pods(&s, &["demo-vnc"], &[]), None, t(100));
        let r = cond(&st, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            ("False", "AgentsNotReady")
        );
        assert_eq!(r.message, "3/3 agents ready, 1/2 toolboxes ready");
        let only_main = set("agent: {image: img}");
        let c = classify(&only_main, vec![with_status(main_pod(&only_main), true)]);
        let st = compute(&only_main, &c, None, t(100));
        assert_eq!(
            cond(&st, "Ready").message,
            "1/1 agents ready, 0/0 toolboxes ready"
        );
        assert_eq!(cond(&st, "Ready").status, "True");
    }

    #[test]
    fn agents_listing_from_pods() {
        let s = set(SET);
        let mut c = pods(&s, &["demo-2"], &[]);
        let main = c.main.take().unwrap();
        c.main = Some(vm(main, "vm-0", "10.0.0.1"));
        let st = compute(&s, &c, None, t(100));
        let got: Vec<(i32, &str, &str, &str)> = st
            .agents
            .iter()
            .map(|a| {
                (
                    a.slot,
                    a.role.as_str(),
                    a.pod_name.as_str(),
                    a.forked_from.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, "main", "demo-0", ""),
                (1, "sub-agent", "demo-1", "vk-ns-demo-0"),
                (2, "sub-agent", "demo-2", "vk-ns-demo-0"),
            ]
        );
        let main = &st.agents[0];
        assert_eq!(
            (main.vm_name.as_str(), main.vm_id.as_str(), main.ip.as_str()),
            ("vk-ns-demo-0", "vm-0", "10.0.0.1")
        );
        assert_eq!(main.phase, "Running");
        assert_eq!(st.agents[1].vm_id, "");
    }

    #[test]
    fn toolbox_listing_by_name_with_connection() {
        let s = set(SET);
        let mut c = pods(&s, &[], &[]);
        let db = c.toolboxes.remove("db").unwrap();
        c.toolboxes.insert("db".into(), vm(db, "vm-db", "10.0.0.5"));
        let st = compute(&s, &c, None, t(100));
        let names: Vec<&str> = st.toolboxes.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["db", "vnc"]);
        let db = &st.toolboxes[0];
        assert_eq!(
            (db.pod_name.as_str(), db.vm_name.as_str()),
            ("demo-db", "vk-ns-demo-db")
        );
        assert_eq!((db.vm_id.as_str(), db.ip.as_str()), ("vm-db", "10.0.0.5"));
        assert_eq!((db.conn_type, db.vnc_port), (Some(ConnType::Ssh), None));
        let vnc = &st.toolboxes[1];
        assert_eq!(
            (vnc.conn_type, vnc.vnc_port),
            (Some(ConnType::Vnc), Some(5901))
        );
    }

    #[test]
    fn pods_outside_the_spec_are_not_reported() {
        let s = set(SET);
        let c = pods(&s, &[], &[]);
        let shrunk = set("agent: {image: img, replicas: 1}\ntoolboxes: [{name: db, image: pg}]");
        let st = compute(&shrunk, &c, None, t(100));
        assert_eq!((st.ready_agents, st.desired_agents), (2, 2));
        assert_eq!((st.ready_toolboxes, st.desired_toolboxes), (1, 1));
        assert_eq!(st.agents.len(), 2);
        assert_eq!(st.toolboxes.len(), 1);
        assert_eq!(st.phase, Some(CocoonSetPhase::Running));
    }

    #[test]
    fn explicit_phase_wins() {
        let s = set(SET);
        let c = pods(&s, &[], &[]);
        let st = compute(&s, &c, Some(CocoonSetPhase::Suspending), t(100));
        assert_eq!(st.phase, Some(CocoonSetPhase::Suspending));
        let p = cond(&st, "Progressing");
        assert_eq!(
            (p.status.as_str(), p.reason.as_str(), p.message.as_str()),
            ("False", "Stable", "Suspending")
        );
        let st = compute(&s, &c, Some(CocoonSetPhase::Pending), t(100));
        assert_eq!(cond(&st, "Progressing").status, "True");
    }

    #[test]
    fn recompute_is_identical_and_keeps_timestamps() {
        let mut s = set(SET);
        let c = pods(&s, &[], &[]);
        let first = compute(&s, &c, None, t(100));
        s.status = Some(first.clone());
        let again = compute(&s, &c, None, t(500));
        assert_eq!(
            again, first,
            "a steady set recomputes byte-identical status"
        );
        assert_eq!(cond(&again, "Ready").last_transition_time.0, t(100));
    }

    #[test]
    fn change_is_detected_and_moves_only_flipped_conditions() {
        let mut s = set(SET);
        s.status = Some(compute(&s, &pods(&s, &[], &[]), None, t(100)));
        let degraded = compute(&s, &pods(&s, &["demo-1"], &[]), None, t(200));
        assert_ne!(Some(&degraded), s.status.as_ref());
        assert_eq!(degraded.ready_agents, 2);
        assert_eq!(degraded.phase, Some(CocoonSetPhase::Scaling));
        assert_eq!(cond(&degraded, "Ready").last_transition_time.0, t(200));
        assert_eq!(
            cond(&degraded, "Progressing").last_transition_time.0,
            t(200)
        );
        s.status = Some(degraded);
        let suspended = compute(
            &s,
            &pods(&s, &["demo-1"], &[]),
            Some(CocoonSetPhase::Suspended),
            t(300),
        );
        assert_eq!(
            cond(&suspended, "Ready").last_transition_time.0,
            t(200),
            "Ready did not flip"
        );
        assert_eq!(
            cond(&suspended, "Progressing").last_transition_time.0,
            t(300)
        );
    }

    #[test]
    fn observed_generation_follows_the_set() {
        let mut s = set(SET);
        s.metadata.generation = Some(9);
        let st = compute(&s, &pods(&s, &[], &[]), None, t(100));
        assert_eq!(st.observed_generation, Some(9));
        assert_eq!(cond(&st, "Ready").observed_generation, Some(9));
        assert_eq!(cond(&st, "Progressing").observed_generation, Some(9));
    }
}
