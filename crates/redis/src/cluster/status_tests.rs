//! Tables for the status: phases that tell the truth, conditions, volatile numbers.

use super::*;
use crate::cluster::build::fixtures::model_with;
use crate::cluster::facts::Poll;
use crate::cluster::facts::fixtures::{members, primary, replica, with_pod, with_report};
use serde_json::json;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).expect("ts")
}

fn model(status: serde_json::Value, annotations: serde_json::Value) -> Model {
    model_with(
        json!({"instances": 3, "storage": {"size": "1Gi"}}),
        annotations,
        status,
    )
}

fn healthy() -> Members {
    members(vec![
        primary(0, "A", 100),
        replica(1, 0, "A", 100),
        replica(2, 0, "A", 90),
    ])
}

fn missing(ordinal: i32) -> crate::cluster::facts::Member {
    crate::cluster::facts::Member {
        pod: None,
        poll: Poll::NotPolled,
        ..replica(ordinal, 0, "A", 0)
    }
}

fn none() -> Plan {
    Plan {
        create: vec![],
        relabel: vec![],
        action: Action::None,
    }
}

fn run(m: &Model, members: &Members, plan: &Plan) -> RedisClusterStatus {
    compute(&Inputs {
        model: m,
        members,
        plan,
        handoff: None,
        blocked: None,
        secrets: &BTreeMap::new(),
        healthy_pvc: 3,
        dangling_pvc: vec![],
        resizing: false,
        now: t(0),
    })
}

fn cond(s: &RedisClusterStatus, type_: &str) -> (String, String) {
    let c = conditions::get(&s.conditions, type_).expect(type_);
    (c.status.clone(), c.reason.clone())
}

#[test]
fn a_converged_cluster_is_healthy_and_ready() {
    let m = model(
        json!({"currentPrimary": "demo-0", "phase": "Healthy"}),
        json!({}),
    );
    let s = run(&m, &healthy(), &none());
    assert_eq!(s.phase, Some(ClusterPhase::Healthy));
    assert_eq!(s.ready_instances, 3);
    assert_eq!(s.observed_generation, 2);
    assert_eq!(cond(&s, "Ready").0, "True");
    assert_eq!(cond(&s, "PrimaryAvailable").0, "True");
    assert_eq!(cond(&s, "ReplicationHealthy").0, "True");
    assert_eq!(s.instances_status["demo-2"].replica_lag_bytes, 10);
    assert_eq!(s.instances_status["demo-1"].replication_id, "A");
    assert!(conditions::get(&s.conditions, "Hibernated").is_none());
}

#[test]
fn two_masters_or_a_master_that_is_not_current_is_never_healthy_or_ready() {
    let m = model(
        json!({"currentPrimary": "demo-0", "phase": "Healthy"}),
        json!({}),
    );
    let two = members(vec![
        primary(0, "A", 1),
        primary(1, "B", 1),
        replica(2, 0, "A", 1),
    ]);
    let s = run(&m, &two, &none());
    assert_eq!(s.phase, Some(ClusterPhase::Degraded));
    assert!(s.phase_reason.contains("split brain"), "{}", s.phase_reason);
    assert_eq!(cond(&s, "Ready"), ("False".into(), "SplitBrain".into()));
    let other = members(vec![
        replica(0, 1, "B", 1),
        primary(1, "B", 1),
        replica(2, 1, "B", 1),
    ]);
    let s = run(&m, &other, &none());
    assert_eq!(s.phase, Some(ClusterPhase::Degraded));
    assert!(s.phase_reason.contains("demo-1 reports role master"));
    assert_eq!(cond(&s, "Ready").0, "False");
}

#[test]
fn phases_follow_the_handoff_the_plan_and_the_instances() {
    let cases: Vec<(
        serde_json::Value,
        serde_json::Value,
        Members,
        Action,
        ClusterPhase,
    )> = vec![
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0", "targetPrimary": "pending"}),
            json!({}),
            healthy(),
            Action::None,
            ClusterPhase::FailingOver,
        ),
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0", "targetPrimary": "demo-1"}),
            json!({"redis.io/operatorFencedInstances": "[\"demo-0\"]"}),
            healthy(),
            Action::None,
            ClusterPhase::FailingOver,
        ),
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0", "targetPrimary": "demo-1"}),
            json!({}),
            healthy(),
            Action::None,
            ClusterPhase::Updating,
        ),
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0"}),
            json!({"redis.io/hibernation": "on"}),
            healthy(),
            Action::None,
            ClusterPhase::Hibernating,
        ),
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0"}),
            json!({}),
            healthy(),
            Action::AwaitApproval("x".into()),
            ClusterPhase::WaitingForUser,
        ),
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0"}),
            json!({}),
            healthy(),
            Action::Delete {
                pods: vec!["demo-2".into()],
                why: Why::Update,
                primary: false,
            },
            ClusterPhase::Updating,
        ),
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0"}),
            json!({}),
            healthy(),
            Action::Delete {
                pods: vec!["demo-3".into()],
                why: Why::ScaleDown,
                primary: false,
            },
            ClusterPhase::Scaling,
        ),
        (
            json!({}),
            json!({}),
            healthy(),
            Action::None,
            ClusterPhase::Creating,
        ),
        (
            json!({"phase": "Creating", "currentPrimary": "demo-0"}),
            json!({}),
            members(vec![primary(0, "A", 1), missing(1), missing(2)]),
            Action::None,
            ClusterPhase::Creating,
        ),
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0"}),
            json!({}),
            members(vec![
                primary(0, "A", 1),
                replica(1, 0, "A", 1),
                with_pod(replica(2, 0, "A", 1), |p| p.ready = false),
            ]),
            Action::None,
            ClusterPhase::Degraded,
        ),
        (
            json!({"phase": "Healthy", "currentPrimary": "demo-0"}),
            json!({}),
            members(vec![
                with_report(primary(0, "A", 1), |r| r.fenced = true),
                replica(1, 0, "A", 1),
                replica(2, 0, "A", 1),
            ]),
            Action::None,
            ClusterPhase::Degraded,
        ),
    ];
    for (n, (status, ann, members, action, want)) in cases.into_iter().enumerate() {
        let m = model(status, ann);
        let plan = Plan { action, ..none() };
        let s = run(&m, &members, &plan);
        assert_eq!(s.phase, Some(want), "case {n}: {}", s.phase_reason);
        assert!(!s.phase_reason.is_empty(), "case {n}");
    }
}

#[test]
fn an_unanswered_instance_counts_as_neither_connected_nor_ready() {
    let m = model(
        json!({"currentPrimary": "demo-0", "phase": "Healthy"}),
        json!({}),
    );
    let mut list = healthy();
    list.0.get_mut(&2).expect("2").poll = Poll::Failed("timeout".into());
    let s = run(&m, &list, &none());
    assert_eq!(s.ready_instances, 2);
    assert_eq!(s.instances, 2);
    assert!(!s.instances_status["demo-2"].connected);
    assert_eq!(cond(&s, "ReplicationHealthy").0, "False");
}

#[test]
fn moving_offsets_alone_need_no_write() {
    let m = model(
        json!({"currentPrimary": "demo-0", "phase": "Healthy"}),
        json!({}),
    );
    let before = run(&m, &healthy(), &none());
    let later = members(vec![
        primary(0, "A", 5_000),
        replica(1, 0, "A", 4_900),
        replica(2, 0, "A", 4_800),
    ]);
    let m2 = Model {
        status: before.clone(),
        ..m.clone()
    };
    let after = compute(&Inputs {
        now: t(60),
        ..Inputs {
            model: &m2,
            members: &later,
            plan: &none(),
            handoff: None,
            blocked: None,
            secrets: &BTreeMap::new(),
            healthy_pvc: 3,
            dangling_pvc: vec![],
            resizing: false,
            now: t(0),
        }
    });
    assert_ne!(before, after, "the numbers did move");
    assert!(!needs_write(Some(&before), &after));
    let mut role_changed = after.clone();
    role_changed
        .instances_status
        .get_mut("demo-2")
        .expect("2")
        .master_link_status = "down".into();
    assert!(needs_write(Some(&before), &role_changed));
}

#[test]
fn toggled_conditions_appear_when_on_and_stay_false_afterwards() {
    let on = model(
        json!({"currentPrimary": "demo-0"}),
        json!({"redis.io/hibernation": "on"}),
    );
    let s = run(&on, &members(vec![]), &none());
    assert_eq!(cond(&s, "Hibernated").0, "True");
    assert_eq!(cond(&s, "Ready").0, "False");
    let off = Model {
        hibernation: false,
        status: s,
        ..on
    };
    let s = run(&off, &healthy(), &none());
    assert_eq!(cond(&s, "Hibernated"), ("False".into(), "Resumed".into()));
}
