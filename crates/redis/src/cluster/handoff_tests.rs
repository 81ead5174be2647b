//! Tables for the handoff state machine: detection, candidates, failover, switchover, fences
//! and the Lease, each case a short description of the cluster and the one step it must take.

use super::*;
use crate::cluster::facts::fixtures::{members, primary, replica, with_pod, with_report};
use crate::cluster::facts::{Member, Members, Poll};
use crate::cluster::model::Fencing;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).expect("ts")
}

/// A cluster view: primary demo-0 (replid `A`), replicas demo-1 (offset 100) and demo-2 (90).
struct Case {
    members: Members,
    current: &'static str,
    target: &'static str,
    target_since: Option<Timestamp>,
    failing_since: Option<Timestamp>,
    fencing: Fencing,
    operator_fenced: Fencing,
    lease: Option<&'static str>,
    leader: Option<&'static str>,
    streak: Streak,
    delay: u64,
    automatic: bool,
    request: Option<Request>,
    refused: Option<(&'static str, &'static str)>,
    now: Timestamp,
    /// The old primary's last replication ID and `syncedReplicationID`.
    replid: &'static str,
    synced: &'static str,
}

fn healthy() -> Vec<Member> {
    vec![
        primary(0, "A", 100),
        replica(1, 0, "A", 100),
        replica(2, 0, "A", 90),
    ]
}

impl Case {
    fn new(list: Vec<Member>) -> Case {
        Case {
            members: members(list),
            current: "demo-0",
            target: "demo-0",
            target_since: None,
            failing_since: None,
            fencing: Fencing::default(),
            operator_fenced: Fencing::default(),
            lease: Some("demo-0"),
            leader: Some("demo-0"),
            streak: Streak::default(),
            delay: 0,
            automatic: true,
            request: None,
            refused: None,
            now: t(100),
            replid: "A",
            synced: "A",
        }
    }

    fn inputs(&self) -> Inputs<'_> {
        Inputs {
            now: self.now,
            current: self.current,
            target: self.target,
            target_since: self.target_since,
            failing_since: self.failing_since,
            members: &self.members,
            instances: 3,
            fencing: &self.fencing,
            operator_fenced: &self.operator_fenced,
            lease_holder: self.lease,
            leader: self.leader,
            streak: self.streak,
            primary_replid: self.replid,
            synced_replid: self.synced,
            failover_delay: Duration::from_secs(self.delay),
            max_lag: Duration::from_secs(10),
            switchover_timeout: Duration::from_secs(30),
            automatic: self.automatic,
            request: self.request.clone(),
            refused: self.refused,
        }
    }

    fn step(&self) -> Step {
        decide(&self.inputs(), "demo-0")
    }

    /// The primary dead (no answer, pod not Ready) for a whole detection window.
    fn primary_dead(mut self) -> Case {
        self.members.0.insert(0, dead(0));
        self.streak = Streak {
            misses: DETECTION_MISSES,
            since: Some(t(90)),
        };
        self
    }

    /// A failover that elected nobody yet, with demo-0 fenced (by the operator).
    fn electing(mut self) -> Case {
        self.target = PENDING;
        self.target_since = Some(t(99));
        self.failing_since = Some(t(95));
        self.fencing = fenced(&["demo-0"]);
        self.operator_fenced = fenced(&["demo-0"]);
        self
    }
}

fn dead(ordinal: i32) -> Member {
    let m = primary(ordinal, "A", 100);
    let mut m = with_pod(m, |p| p.ready = false);
    m.poll = Poll::Failed("connection refused".into());
    m
}

fn gone(ordinal: i32) -> Member {
    Member {
        pod: None,
        poll: Poll::NotPolled,
        ..primary(ordinal, "A", 100)
    }
}

fn fenced(pods: &[&str]) -> Fencing {
    Fencing {
        pods: pods.iter().map(|p| (*p).to_owned()).collect(),
        ..Fencing::default()
    }
}

fn link_down(m: Member, since: i64) -> Member {
    with_report(m, |r| {
        r.master_link_status = "down".into();
        r.master_link_down_since_seconds = since;
    })
}

#[test]
fn a_healthy_primary_is_left_alone() {
    assert_eq!(Case::new(healthy()).step(), Step::Idle);
}

#[test]
fn a_cluster_without_a_primary_names_ordinal_zero_or_a_running_primary() {
    let mut c = Case::new(vec![replica(0, 1, "A", 1), replica(1, 0, "A", 1)]);
    c.current = "";
    c.target = "";
    assert_eq!(c.step(), Step::Publish("demo-0".into()));
    let mut c = Case::new(vec![replica(0, 1, "A", 1), primary(1, "A", 5)]);
    c.current = "";
    c.target = "";
    assert_eq!(c.step(), Step::Publish("demo-1".into()));
}

#[test]
fn detection_needs_misses_over_a_window_and_corroboration() {
    // (misses, first miss at, pod ready, replicas' links up) -> failing?
    let cases = [
        (1, 99, false, false, false),
        (3, 98, false, false, false), // three misses, but only 2 s apart
        (2, 90, false, false, false), // long enough, but two misses
        (3, 90, true, true, false),   // nobody confirms: pod Ready, links up
        (3, 90, false, true, true),   // pod not Ready
        (3, 90, true, false, true),   // every replica sees its link down
    ];
    for (misses, since, ready, links_up, failing) in cases {
        let mut c = Case::new(healthy());
        let mut p = with_pod(primary(0, "A", 1), |p| p.ready = ready);
        p.poll = Poll::Failed("timeout".into());
        c.members.0.insert(0, p);
        if !links_up {
            for o in [1, 2] {
                let r = c.members.0.remove(&o).expect("replica");
                c.members.0.insert(o, link_down(r, 3));
            }
        }
        c.streak = Streak {
            misses,
            since: Some(t(since)),
        };
        let h = health(&c.inputs());
        match failing {
            true => assert!(
                matches!(h, Health::Failed(_)),
                "{misses} {since} {ready} {links_up}: {h:?}"
            ),
            false => assert!(
                matches!(h, Health::Suspect(_)),
                "{misses} {since} {ready} {links_up}: {h:?}"
            ),
        }
        // Whatever the verdict, the first bad observation is recorded before anything else.
        assert!(matches!(c.step(), Step::MarkFailing(_)), "{:?}", c.step());
    }
}

#[test]
fn a_restarted_operator_resumes_detection_from_the_recorded_first_bad_observation() {
    let mut c = Case::new(healthy()).primary_dead();
    // A new process: one bad observation of its own, the mark recorded 10 s ago.
    c.streak = Streak {
        misses: 1,
        since: Some(t(99)),
    };
    c.failing_since = Some(t(90));
    assert!(matches!(c.step(), Step::Watch(_)), "one miss is not enough");
    c.streak.misses = RESUMED_MISSES;
    assert!(matches!(c.step(), Step::StartFailover(_)), "{:?}", c.step());
    // A mark younger than the window does not confirm anything by itself.
    c.failing_since = Some(t(98));
    assert!(matches!(c.step(), Step::Watch(_)), "{:?}", c.step());
    // Without automatic failover nothing is recorded.
    c.failing_since = None;
    c.automatic = false;
    assert!(matches!(c.step(), Step::Watch(_)), "{:?}", c.step());
}

#[test]
fn candidates_link_check_counts_from_the_first_bad_observation() {
    // The replicas lost the primary 12 s ago, when it was first seen failing; the failure
    // was confirmed (and the failover started) only now, after operator restarts.
    let mut c = Case::new(healthy()).primary_dead();
    for o in [1, 2] {
        let r = c.members.0.remove(&o).expect("replica");
        c.members.0.insert(o, link_down(r, 12));
    }
    c.failing_since = Some(t(88));
    assert!(matches!(c.step(), Step::StartFailover(_)), "{:?}", c.step());
    c.target = PENDING;
    c.fencing = fenced(&["demo-0"]);
    c.operator_fenced = fenced(&["demo-0"]);
    assert!(
        candidate(&c.inputs()).is_some(),
        "{}",
        no_candidate(&c.inputs())
    );
}

#[test]
fn a_confirmed_failure_waits_for_the_failover_delay_then_starts_with_the_intent() {
    let mut c = Case::new(healthy()).primary_dead();
    c.failing_since = Some(t(95));
    c.delay = 30;
    assert_eq!(
        c.step(),
        Step::Delay {
            reason: match health(&c.inputs()) {
                Health::Failed(r) => r,
                other => panic!("{other:?}"),
            },
            remaining: Duration::from_secs(25),
        }
    );
    c.delay = 5;
    assert!(matches!(c.step(), Step::StartFailover(_)));
}

#[test]
fn no_automatic_failover_when_it_is_off_fenced_or_unreadable_or_nobody_is_in_sync() {
    let mut c = Case::new(healthy()).primary_dead();
    c.failing_since = Some(t(95));
    c.automatic = false;
    assert!(matches!(c.step(), Step::Wait(w) if w.contains("automatic failover is off")));
    c.automatic = true;
    c.fencing = fenced(&["demo-0"]);
    assert_eq!(c.step(), Step::Idle, "the user fenced the primary");
    c.fencing = Fencing {
        unreadable: Some("bad".into()),
        ..Fencing::default()
    };
    assert!(matches!(c.step(), Step::Wait(w) if w.contains("bad")));
    c.fencing = Fencing::default();
    for o in [1, 2] {
        let r = c.members.0.remove(&o).expect("replica");
        c.members
            .0
            .insert(o, with_report(r, |r| r.replication_id = "B".into()));
    }
    assert!(matches!(c.step(), Step::Wait(w) if w.contains("no replica is in sync")));
}

#[test]
fn a_recovered_primary_clears_the_failure_time() {
    let mut c = Case::new(healthy());
    c.failing_since = Some(t(90));
    assert_eq!(c.step(), Step::ClearFailing);
}

#[test]
fn candidates_share_the_replication_id_were_linked_until_the_failure_and_lead_on_offset() {
    // (replica changes, elected)
    type Tweak = fn(Member) -> Member;
    let keep: Tweak = |m| m;
    let cases: Vec<(Tweak, Tweak, Option<&str>)> = vec![
        (keep, keep, Some("demo-1")),
        // Equal offsets: the lower ordinal.
        (
            keep,
            |m| with_report(m, |r| r.replication_offset = 100),
            Some("demo-1"),
        ),
        // A never-synchronised replica has its own replication ID.
        (
            |m| with_report(m, |r| r.replication_id = "own".into()),
            keep,
            Some("demo-2"),
        ),
        (
            |m| with_report(m, |r| r.master_sync_in_progress = true),
            keep,
            Some("demo-2"),
        ),
        // Link down since the failure: still a candidate; down long before it: not.
        (|m| link_down(m, 8), keep, Some("demo-1")),
        (|m| link_down(m, 600), keep, Some("demo-2")),
        (
            |m| with_report(m, |r| r.fenced = true),
            keep,
            Some("demo-2"),
        ),
        (|m| with_pod(m, |p| p.deleting = true), keep, Some("demo-2")),
        // Synchronised before the first write (a new cluster): offset 0, still in sync.
        (
            |m| with_report(m, |r| r.replication_offset = 0),
            |m| with_report(m, |r| r.replication_offset = 0),
            Some("demo-1"),
        ),
        (
            |m| with_report(m, |r| r.replication_id = "own".into()),
            |m| with_report(m, |r| r.replication_id = "own".into()),
            None,
        ),
    ];
    for (n, (a, b, want)) in cases.into_iter().enumerate() {
        let mut c = Case::new(vec![
            dead(0),
            a(replica(1, 0, "A", 100)),
            b(replica(2, 0, "A", 90)),
        ]);
        c.failing_since = Some(t(95));
        let got = candidate(&c.inputs()).map(|(m, _)| m.name.clone());
        assert_eq!(got.as_deref(), want, "case {n}");
    }
    // Beyond `instances` (being scaled away): never.
    let mut c = Case::new(vec![
        dead(0),
        replica(3, 0, "A", 500),
        replica(1, 0, "A", 1),
    ]);
    c.failing_since = Some(t(95));
    assert_eq!(
        candidate(&c.inputs())
            .map(|(m, _)| m.name.clone())
            .as_deref(),
        Some("demo-1")
    );
}

#[test]
fn a_primary_with_a_replication_id_no_replica_has_yet_fails_over_to_its_synced_history() {
    // (the old primary's last ID, syncedReplicationID, demo-1's ID, demo-2's ID, elected):
    // demo-1 at offset 100, demo-2 at 500.
    let cases = [
        // Restarted in place as B (or promoted), crashed before a replica synchronised from
        // it: the replicas hold every write a replica acknowledged.
        ("B", "A", "A", "A", Some("demo-2")),
        // A replica already synchronised from B: only it holds what B's replicas
        // acknowledged, whatever the offsets.
        ("B", "A", "B", "A", Some("demo-1")),
        ("B", "A", "A", "B", Some("demo-2")),
        // Never synchronised: never promoted.
        ("B", "A", "own", "own2", None),
        ("A", "", "own", "own2", None),
        // No replica was ever seen in sync: the history is unknown beyond the old primary's.
        ("B", "", "A", "A", None),
        // A replica was seen in sync with B and none has it any more (it re-synchronised):
        // the others lack what it acknowledged.
        ("B", "B", "A", "A", None),
        // The usual case.
        ("A", "A", "A", "A", Some("demo-2")),
    ];
    for (n, (replid, synced, one, two, want)) in cases.into_iter().enumerate() {
        let mut c = Case::new(vec![
            dead(0),
            replica(1, 0, one, 100),
            replica(2, 0, two, 500),
        ]);
        c.failing_since = Some(t(95));
        (c.replid, c.synced) = (replid, synced);
        let got = candidate(&c.inputs()).map(|(m, _)| m.name.clone());
        assert_eq!(got.as_deref(), want, "case {n}");
        if want.is_none() {
            assert!(
                no_candidate(&c.inputs()).contains("replication ID"),
                "case {n}"
            );
        }
    }
    // The promotion expects the history's ID.
    let mut c = Case::new(vec![
        gone(0),
        replica(1, 0, "A", 100),
        replica(2, 0, "A", 90),
    ])
    .electing();
    (c.replid, c.synced) = ("B", "A");
    assert!(
        matches!(c.step(), Step::Elect { ref target, .. } if target == "demo-1"),
        "{:?}",
        c.step()
    );
    c.target = "demo-1";
    c.lease = Some("demo-1");
    assert_eq!(
        c.step(),
        Step::Promote {
            target: "demo-1".into(),
            ip: "10.0.0.1".into(),
            request: PromoteRequest {
                expected_replication_id: "A".into(),
                min_offset: 100
            }
        }
    );
}

#[test]
fn electing_fences_then_confirms_the_old_primary_stopped_then_elects() {
    let mut c = Case::new(vec![
        dead(0),
        replica(1, 0, "A", 100),
        replica(2, 0, "A", 90),
    ])
    .electing();
    c.fencing = Fencing::default();
    assert_eq!(c.step(), Step::Fence("demo-0".into()), "fence first");
    let c = Case::new(vec![
        dead(0),
        replica(1, 0, "A", 100),
        replica(2, 0, "A", 90),
    ])
    .electing();
    assert!(
        matches!(c.step(), Step::StopPod { pod, .. } if pod == "demo-0"),
        "an unreachable old primary is stopped by deleting its pod"
    );
    // Reachable and fenced, still running: it stops by itself; past the timeout it is deleted.
    let mut c = Case::new(healthy()).electing();
    assert!(matches!(c.step(), Step::Wait(w) if w.contains("to stop redis-server")));
    c.now = t(200);
    assert!(matches!(c.step(), Step::StopPod { .. }));
    // Deleting: wait.
    let c = Case::new(vec![
        with_pod(dead(0), |p| p.deleting = true),
        replica(1, 0, "A", 100),
    ])
    .electing();
    assert!(matches!(c.step(), Step::Wait(w) if w.contains("pod demo-0 to stop")));
    // Gone, or fenced with redis-server down: elect the most advanced replica.
    for old in [
        gone(0),
        with_report(primary(0, "A", 100), |r| {
            r.fenced = true;
            r.boot = Boot::Waiting {
                reason: "fenced".into(),
            };
        }),
    ] {
        let c = Case::new(vec![old, replica(1, 0, "A", 100), replica(2, 0, "A", 90)]).electing();
        assert!(matches!(c.step(), Step::Elect { target, .. } if target == "demo-1"));
    }
}

#[test]
fn a_failover_with_nobody_to_promote_is_aborted_and_the_fence_lifted() {
    let mut c = Case::new(vec![gone(0), replica(1, 0, "own", 100)]).electing();
    assert!(matches!(c.step(), Step::Abort(_)));
    // After the abort's status write: the operator's fence of the primary is released.
    c.target = "demo-0";
    assert_eq!(c.step(), Step::Release(vec!["demo-0".into()]));
}

#[test]
fn promoting_moves_the_lease_promotes_points_the_leader_and_publishes_in_that_order() {
    let list = || vec![gone(0), replica(1, 0, "A", 100), replica(2, 0, "A", 90)];
    let mut c = Case::new(list()).electing();
    c.target = "demo-1";
    assert_eq!(
        c.step(),
        Step::MoveLease {
            from: Some("demo-0".into()),
            to: "demo-1".into()
        }
    );
    c.lease = Some("demo-1");
    assert_eq!(
        c.step(),
        Step::Promote {
            target: "demo-1".into(),
            ip: "10.0.0.1".into(),
            request: PromoteRequest {
                expected_replication_id: "A".into(),
                min_offset: 100
            }
        }
    );
    c.members.0.insert(1, primary(1, "B", 100));
    assert_eq!(c.step(), Step::PointLeader("demo-1".into()));
    c.leader = Some("demo-1");
    assert_eq!(c.step(), Step::Publish("demo-1".into()));
}

#[test]
fn two_promotions_cannot_both_happen() {
    let mut c = Case::new(vec![gone(0), primary(1, "B", 100), replica(2, 0, "A", 90)]).electing();
    c.target = "demo-2";
    c.lease = Some("demo-1");
    assert!(
        matches!(c.step(), Step::Wait(w) if w.contains("may have been promoted")),
        "the Lease names a primary: no second promotion"
    );
    // The Lease names a replica that refused: it may move.
    c.members.0.insert(1, replica(1, 0, "A", 100));
    assert_eq!(
        c.step(),
        Step::MoveLease {
            from: Some("demo-1".into()),
            to: "demo-2".into()
        }
    );
}

#[test]
fn a_refused_or_vanished_target_is_elected_again() {
    let mut c = Case::new(vec![
        gone(0),
        replica(1, 0, "A", 100),
        replica(2, 0, "A", 90),
    ])
    .electing();
    c.target = "demo-1";
    c.lease = Some("demo-1");
    c.refused = Some(("demo-1", "replication ID is B"));
    assert!(matches!(c.step(), Step::StartFailover(w) if w.contains("refused")));
    c.refused = None;
    c.members.0.insert(1, gone(1));
    assert!(matches!(c.step(), Step::StartFailover(w) if w.contains("gone")));
}

#[test]
fn the_old_primarys_fence_is_released_only_once_it_is_stopped_or_a_replica() {
    let mut c = Case::new(vec![
        with_report(primary(0, "A", 50), |r| r.fenced = true),
        primary(1, "B", 100),
        replica(2, 1, "B", 90),
    ]);
    c.current = "demo-1";
    c.target = "demo-1";
    c.lease = Some("demo-1");
    c.leader = Some("demo-1");
    c.fencing = fenced(&["demo-0"]);
    c.operator_fenced = fenced(&["demo-0"]);
    assert_eq!(
        c.step(),
        Step::Idle,
        "still running as a primary: keep the fence"
    );
    c.members.0.insert(0, gone(0));
    assert_eq!(c.step(), Step::Release(vec!["demo-0".into()]));
    c.members.0.insert(0, replica(0, 1, "B", 90));
    assert_eq!(c.step(), Step::Release(vec!["demo-0".into()]));
}

#[test]
fn a_planned_switchover_checks_moves_the_lease_hands_over_and_publishes() {
    let mut c = Case::new(healthy());
    let req = Request {
        target: "demo-1".into(),
        reason: "rolling update".into(),
    };
    c.request = Some(req.clone());
    assert_eq!(c.step(), Step::StartSwitchover(req));
    c.request = None;
    c.target = "demo-1";
    assert_eq!(
        c.step(),
        Step::MoveLease {
            from: Some("demo-0".into()),
            to: "demo-1".into()
        }
    );
    c.lease = Some("demo-1");
    assert_eq!(
        c.step(),
        Step::HandOver {
            from: "demo-0".into(),
            from_ip: "10.0.0.0".into(),
            target: "demo-1".into(),
            target_ip: "10.0.0.1".into(),
            timeout_ms: 30_000
        }
    );
    c.members.0.insert(0, replica(0, 1, "B", 100));
    c.members.0.insert(1, primary(1, "B", 100));
    assert_eq!(c.step(), Step::PointLeader("demo-1".into()));
    c.leader = Some("demo-1");
    assert_eq!(c.step(), Step::Publish("demo-1".into()));
}

#[test]
fn a_switchover_to_a_replica_out_of_sync_or_abandoned_by_redis_is_aborted() {
    let mut c = Case::new(vec![
        primary(0, "A", 100),
        link_down(replica(1, 0, "A", 100), 3),
        replica(2, 0, "A", 90),
    ]);
    c.target = "demo-1";
    assert!(matches!(c.step(), Step::Abort(w) if w.contains("not a replica")));
    let mut c = Case::new(healthy());
    c.target = "demo-1";
    c.lease = Some("demo-1");
    c.refused = Some(("demo-0", "did not catch up"));
    assert!(matches!(c.step(), Step::Abort(w) if w.contains("did not catch up")));
}

#[test]
fn a_switchover_whose_old_primary_dies_becomes_a_failover() {
    let mut c = Case::new(healthy()).primary_dead();
    c.target = "demo-1";
    c.lease = Some("demo-1");
    assert!(matches!(c.step(), Step::StartFailover(w) if w.contains("during the switchover")));
}

#[test]
fn the_lease_is_created_for_the_primary_and_moved_back_after_an_abort() {
    let mut c = Case::new(healthy());
    c.lease = None;
    assert_eq!(
        c.step(),
        Step::MoveLease {
            from: None,
            to: "demo-0".into()
        }
    );
    c.lease = Some("demo-1");
    assert_eq!(
        c.step(),
        Step::MoveLease {
            from: Some("demo-1".into()),
            to: "demo-0".into()
        }
    );
}

#[test]
fn streaks_count_bad_observations_and_reset_on_a_good_one() {
    let s = Streak::default().observe(false, t(1)).observe(false, t(2));
    assert_eq!((s.misses, s.since), (2, Some(t(1))));
    assert_eq!(s.observe(true, t(3)), Streak::default());
}

#[test]
fn after_a_restart_in_place_the_links_age_is_not_held_against_a_complete_set_of_replicas() {
    // The old primary restarted in place (replication ID B, followed by no replica); its
    // replicas lost the link to incarnation A when it restarted, long before the failure was
    // seen.
    let case = |one: Member| {
        let mut c = Case::new(vec![dead(0), one, link_down(replica(2, 0, "A", 90), 600)]);
        c.failing_since = Some(t(95));
        c.replid = "B";
        c.synced = "A";
        candidate(&c.inputs()).map(|(m, _)| m.name.clone())
    };
    assert_eq!(
        case(link_down(replica(1, 0, "A", 100), 600)).as_deref(),
        Some("demo-1"),
        "every replica answers with the history: the highest offset"
    );
    // One replica does not answer with the history: it might hold more, so the link's age
    // counts again and nobody qualifies.
    assert_eq!(
        case(with_report(link_down(replica(1, 0, "A", 100), 600), |r| {
            r.replication_id = "own".into()
        })),
        None
    );
    assert_eq!(
        case(with_report(link_down(replica(1, 0, "A", 100), 600), |r| {
            r.master_sync_in_progress = true
        })),
        None
    );
    // No restart (the primary's own ID is the history): the link's age still counts against
    // a replica that lost the primary long before another did.
    let mut c = Case::new(vec![
        dead(0),
        link_down(replica(1, 0, "A", 100), 600),
        link_down(replica(2, 0, "A", 90), 8),
    ]);
    c.failing_since = Some(t(95));
    c.replid = "A";
    c.synced = "A";
    assert_eq!(
        candidate(&c.inputs())
            .map(|(m, _)| m.name.clone())
            .as_deref(),
        Some("demo-2")
    );
}

#[test]
fn replicas_that_lost_the_primary_together_stay_candidates_when_the_failure_was_seen_late() {
    // The operator (killed, or cut off from the API) recorded the failure at t(95), 21 s
    // after both replicas lost the primary: their links, down 133 s at t(205), are older
    // than the failure record allows (110 + 10 + 10 s), but each lost it when the other did.
    let both = |one: i64, two: i64| {
        let mut c = Case::new(vec![
            dead(0),
            link_down(replica(1, 0, "A", 100), one),
            link_down(replica(2, 0, "A", 90), two),
        ]);
        c.now = t(205);
        c.failing_since = Some(t(95));
        c.replid = "A";
        candidate(&c.inputs()).map(|(m, _)| m.name.clone())
    };
    assert_eq!(
        both(133, 133).as_deref(),
        Some("demo-1"),
        "the highest offset"
    );
    assert_eq!(both(133, 131).as_deref(), Some("demo-1"));
    // One went down long before the other: it missed what the other still got.
    assert_eq!(both(600, 133).as_deref(), Some("demo-2"));
    // A lone replica has nobody to corroborate when the primary died: the record rules.
    let mut lone = Case::new(vec![dead(0), link_down(replica(1, 0, "A", 100), 133)]);
    lone.now = t(205);
    lone.failing_since = Some(t(95));
    lone.replid = "A";
    assert!(candidate(&lone.inputs()).is_none());
}
