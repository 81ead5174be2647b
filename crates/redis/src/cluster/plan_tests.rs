//! Tables for the pods plan: creation, labels, hibernation, scaling, drains and rolling updates.

use super::*;
use crate::cluster::facts::fixtures::{members, primary, replica, with_pod, with_report};
use crate::cluster::facts::{Member, Members, Poll};

struct Case {
    members: Members,
    instances: i32,
    current: &'static str,
    handoff: bool,
    hibernation: bool,
    hold_primary: bool,
    strategy: PrimaryUpdateStrategy,
    method: PrimaryUpdateMethod,
    approved: bool,
    frozen: Option<String>,
}

impl Case {
    fn new(list: Vec<Member>) -> Case {
        Case {
            members: members(list),
            instances: 3,
            current: "demo-0",
            handoff: false,
            hibernation: false,
            hold_primary: false,
            strategy: PrimaryUpdateStrategy::Unsupervised,
            method: PrimaryUpdateMethod::Switchover,
            approved: false,
            frozen: None,
        }
    }

    fn plan(&self) -> Plan {
        plan(&Inputs {
            members: &self.members,
            instances: self.instances,
            current: self.current,
            handoff: self.handoff,
            target: "",
            hibernation: self.hibernation,
            hold_primary: self.hold_primary,
            strategy: self.strategy,
            method: self.method,
            approved: self.approved,
            frozen: self.frozen.clone(),
        })
    }
}

fn three() -> Vec<Member> {
    vec![
        primary(0, "A", 100),
        replica(1, 0, "A", 100),
        replica(2, 0, "A", 90),
    ]
}

fn missing(ordinal: i32) -> Member {
    Member {
        name: format!("demo-{ordinal}"),
        ordinal,
        pod: None,
        poll: Poll::NotPolled,
        desired_hash: "h".into(),
    }
}

fn stale(m: Member) -> Member {
    with_pod(m, |p| p.hash = "old".into())
}

fn delete(pods: &[&str], why: Why, primary: bool) -> Action {
    Action::Delete {
        pods: pods.iter().map(|p| (*p).to_owned()).collect(),
        why,
        primary,
    }
}

#[test]
fn a_converged_cluster_needs_nothing() {
    let p = Case::new(three()).plan();
    assert_eq!(
        p,
        Plan {
            create: vec![],
            relabel: vec![],
            action: Action::None
        }
    );
}

#[test]
fn missing_pods_are_created_except_a_primary_a_failover_may_replace() {
    let mut c = Case::new(vec![missing(0), missing(1), replica(2, 0, "A", 1)]);
    assert_eq!(c.plan().create, vec![0, 1]);
    c.hold_primary = true;
    assert_eq!(c.plan().create, vec![1]);
    c.hibernation = true;
    assert!(c.plan().create.is_empty());
}

#[test]
fn role_labels_follow_the_current_primary() {
    let mut c = Case::new(three());
    c.current = "demo-1";
    assert_eq!(
        c.plan().relabel,
        vec![
            ("demo-0".to_owned(), "replica"),
            ("demo-1".to_owned(), "primary")
        ]
    );
}

#[test]
fn hibernation_stops_the_primary_first_then_the_rest() {
    let mut c = Case::new(three());
    c.hibernation = true;
    assert_eq!(c.plan().action, delete(&["demo-0"], Why::Hibernate, true));
    c.members
        .0
        .insert(0, with_pod(primary(0, "A", 1), |p| p.deleting = true));
    assert!(matches!(
        c.plan().action,
        Action::Wait {
            why: Why::Hibernate,
            ..
        }
    ));
    c.members.0.insert(0, missing(0));
    assert_eq!(
        c.plan().action,
        delete(&["demo-2", "demo-1"], Why::Hibernate, false)
    );
    c.members = members(vec![missing(0), missing(1), missing(2)]);
    assert_eq!(c.plan().action, Action::None);
}

#[test]
fn scaling_down_removes_the_highest_ordinals_one_at_a_time_never_the_primary() {
    let mut c = Case::new(vec![
        primary(0, "A", 1),
        replica(1, 0, "A", 1),
        replica(2, 0, "A", 1),
        replica(3, 0, "A", 1),
        replica(10, 0, "A", 1),
    ]);
    c.instances = 2;
    // Ordinals compare as numbers: 10 goes before 3 (upstream's string sort churned).
    assert_eq!(c.plan().action, delete(&["demo-10"], Why::ScaleDown, false));
    c.members
        .0
        .insert(10, with_pod(replica(10, 0, "A", 1), |p| p.deleting = true));
    assert!(matches!(
        c.plan().action,
        Action::Wait {
            why: Why::ScaleDown,
            ..
        }
    ));
    // The primary beyond `instances` hands over first, to a replica that stays.
    let mut c = Case::new(vec![
        replica(0, 2, "A", 90),
        replica(1, 2, "A", 95),
        primary(2, "A", 100),
    ]);
    c.current = "demo-2";
    c.instances = 2;
    assert_eq!(
        c.plan().action,
        Action::Switchover {
            to: "demo-1".into(),
            why: Why::ScaleDown
        }
    );
}

#[test]
fn a_primary_on_a_cordoned_node_hands_over_before_the_drain() {
    let mut c = Case::new(three());
    c.members.0.insert(
        0,
        with_pod(primary(0, "A", 100), |p| p.node_cordoned = true),
    );
    c.members.0.insert(
        1,
        with_pod(replica(1, 0, "A", 100), |p| p.node_cordoned = true),
    );
    assert_eq!(
        c.plan().action,
        Action::Switchover {
            to: "demo-2".into(),
            why: Why::Drain
        }
    );
}

#[test]
fn the_rolling_update_goes_replica_first_highest_ordinal_first_each_ready_and_in_sync() {
    let mut c = Case::new(vec![
        stale(primary(0, "A", 100)),
        stale(replica(1, 0, "A", 100)),
        stale(replica(2, 0, "A", 90)),
    ]);
    assert_eq!(c.plan().action, delete(&["demo-2"], Why::Update, false));
    // demo-2 came back updated but is still synchronising: wait.
    c.members.0.insert(
        2,
        with_report(replica(2, 0, "A", 0), |r| r.master_sync_in_progress = true),
    );
    assert!(matches!(c.plan().action, Action::Wait { reason, .. } if reason.contains("demo-2")));
    c.members
        .0
        .insert(2, with_pod(replica(2, 0, "A", 90), |p| p.ready = false));
    assert!(matches!(c.plan().action, Action::Wait { .. }));
    c.members.0.insert(2, missing(2));
    assert!(matches!(c.plan().action, Action::Wait { reason, .. } if reason.contains("created")));
    c.members.0.insert(2, replica(2, 0, "A", 90));
    assert_eq!(c.plan().action, delete(&["demo-1"], Why::Update, false));
    c.members.0.insert(1, replica(1, 0, "A", 80));
    assert_eq!(
        c.plan().action,
        Action::Switchover {
            to: "demo-2".into(),
            why: Why::Update
        },
        "the most advanced up-to-date replica takes over"
    );
}

#[test]
fn the_primary_update_is_supervised_restarted_or_switched_over() {
    let list = || {
        vec![
            stale(primary(0, "A", 100)),
            replica(1, 0, "A", 100),
            replica(2, 0, "A", 90),
        ]
    };
    let mut c = Case::new(list());
    c.strategy = PrimaryUpdateStrategy::Supervised;
    assert!(matches!(c.plan().action, Action::AwaitApproval(_)));
    c.approved = true;
    assert!(matches!(c.plan().action, Action::Switchover { .. }));
    c.method = PrimaryUpdateMethod::Restart;
    assert_eq!(c.plan().action, delete(&["demo-0"], Why::Update, true));
    let mut single = Case::new(vec![stale(primary(0, "A", 1))]);
    single.instances = 1;
    assert_eq!(single.plan().action, delete(&["demo-0"], Why::Update, true));
}

#[test]
fn nothing_is_disrupted_during_a_handoff_or_while_frozen() {
    let mut c = Case::new(vec![
        stale(primary(0, "A", 1)),
        stale(replica(1, 0, "A", 1)),
        replica(2, 0, "A", 1),
    ]);
    c.handoff = true;
    assert_eq!(c.plan().action, Action::None);
    c.handoff = false;
    c.frozen = Some("every instance is fenced".into());
    assert!(matches!(c.plan().action, Action::Wait { reason, .. } if reason.contains("fenced")));
}

fn resizing(m: Member) -> Member {
    with_pod(m, |p| p.resize_pending = true)
}

// A PVC waiting for a file-system resize (`FileSystemResizePending`) needs its pod restarted,
// with the spec hash unchanged: the same replica-first roll, each replica back in sync before
// the next, the primary switched over and then replaced as a replica.
#[test]
fn a_pending_file_system_resize_restarts_the_replicas_first_then_switches_the_primary_over() {
    let mut c = Case::new(vec![
        resizing(primary(0, "A", 100)),
        resizing(replica(1, 0, "A", 100)),
        resizing(replica(2, 0, "A", 90)),
    ]);
    assert_eq!(c.plan().action, delete(&["demo-2"], Why::Update, false));
    // demo-2 restarted: its PVC grew, it is back in sync.
    c.members.0.insert(2, replica(2, 0, "A", 90));
    assert_eq!(c.plan().action, delete(&["demo-1"], Why::Update, false));
    // While demo-1 is away only demo-2 could take over, but nothing moves until demo-1 is
    // back Ready and in sync.
    c.members.0.insert(1, missing(1));
    assert!(matches!(c.plan().action, Action::Wait { reason, .. } if reason.contains("demo-1")));
    c.members.0.insert(1, replica(1, 0, "A", 80));
    assert_eq!(
        c.plan().action,
        Action::Switchover {
            to: "demo-2".into(),
            why: Why::Update
        },
        "the primary hands over to the most advanced replica whose PVC is done"
    );
    // The old primary, now a replica of demo-2, is restarted last.
    let mut after = Case::new(vec![
        resizing(replica(0, 2, "B", 100)),
        replica(1, 2, "B", 100),
        primary(2, "B", 100),
    ]);
    after.current = "demo-2";
    assert_eq!(after.plan().action, delete(&["demo-0"], Why::Update, false));
}
