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
fn an_instance_that_stopped_answering_keeps_what_it_last_said_and_is_never_an_empty_entry() {
    // The failover compares the replicas' replication ID with the one the primary had when it
    // stopped answering; and server-side apply turns an entry whose fields all went away into
    // `null`, which the schema refuses (the whole status write failed while a primary was down).
    let m = model(
        json!({"currentPrimary": "demo-0", "phase": "Healthy", "instancesStatus": {
            "demo-2": {"role": "slave", "connected": true, "replicationID": "A",
                       "replicationOffset": 7, "masterLinkStatus": "up",
                       "lastSeenAt": "2026-01-01T00:00:00Z"}
        }}),
        json!({}),
    );
    let mut list = healthy();
    list.0.get_mut(&2).expect("2").poll = Poll::Failed("timeout".into());
    let s = run(&m, &list, &none());
    let entry = serde_json::to_value(&s.instances_status["demo-2"]).expect("json");
    assert_eq!(
        entry,
        json!({"role": "slave", "connected": false, "ready": true, "replicationID": "A",
               "replicationOffset": 7, "lastSeenAt": "2026-01-01T00:00:00Z"})
    );
    // Its instance manager answers but redis-server does not run: what redis said stays.
    let mut waiting = list.clone();
    waiting.0.insert(
        2,
        with_report(replica(2, 0, "", 0), |r| {
            r.boot = crate::instance_api::Boot::Waiting {
                reason: "fenced".into(),
            };
            r.role = String::new();
        }),
    );
    let s = run(&m, &waiting, &none());
    let e = &s.instances_status["demo-2"];
    assert_eq!((e.role.as_str(), e.replication_id.as_str()), ("slave", "A"));
    assert!(!e.connected);
    // Its pod deleted (the failover stops an old primary that way): the entry stays.
    let mut gone = list.clone();
    gone.0.insert(2, missing(2));
    let s = run(&m, &gone, &none());
    assert_eq!(s.instances_status["demo-2"].replication_id, "A");
    assert!(!s.instances_status["demo-2"].ready);
    let m = model(
        json!({"currentPrimary": "demo-0", "phase": "Healthy"}),
        json!({}),
    );
    let s = run(&m, &list, &none());
    let entry = serde_json::to_value(&s.instances_status["demo-2"]).expect("json");
    assert_ne!(entry, json!({}));
    // Never seen and without a pod: no entry.
    let s = run(&m, &gone, &none());
    assert!(!s.instances_status.contains_key("demo-2"));
}

#[test]
fn a_new_cluster_waiting_for_its_secrets_is_creating_not_degraded() {
    // The first pass runs before the generated Secrets are in the cache; that wait used to
    // make a new cluster Degraded, and it then never showed Creating.
    let blocked = |status: serde_json::Value| {
        let m = model(status, json!({}));
        let s = compute(&Inputs {
            model: &m,
            members: &members(vec![missing(0), missing(1), missing(2)]),
            plan: &none(),
            handoff: None,
            blocked: Some("waiting for Secret demo-auth"),
            secrets: &BTreeMap::new(),
            healthy_pvc: 0,
            dangling_pvc: vec![],
            resizing: false,
            now: t(0),
        });
        (s.phase, s.phase_reason)
    };
    let why = "waiting for Secret demo-auth".to_owned();
    assert_eq!(
        blocked(json!({})),
        (Some(ClusterPhase::Creating), why.clone())
    );
    assert_eq!(
        blocked(json!({"phase": "Creating", "currentPrimary": "demo-0"})),
        (Some(ClusterPhase::Creating), why.clone())
    );
    assert_eq!(
        blocked(json!({"phase": "Healthy", "currentPrimary": "demo-0"})),
        (Some(ClusterPhase::Degraded), why)
    );
}

#[test]
fn the_synced_replication_id_follows_the_primary_only_once_a_replica_is_in_sync_with_it() {
    let m = model(
        json!({"currentPrimary": "demo-0", "phase": "Healthy", "syncedReplicationID": "A"}),
        json!({}),
    );
    let restarted = |one: &str, two: &str| {
        members(vec![
            primary(0, "B", 10),
            with_report(replica(1, 0, one, 100), |r| {
                r.master_link_status = "down".into()
            }),
            replica(2, 0, two, 90),
        ])
    };
    // Restarted in place as B; the replicas are still of A (one's link down, one syncing).
    let syncing = members(vec![
        primary(0, "B", 10),
        with_report(replica(1, 0, "A", 100), |r| {
            r.master_link_status = "down".into()
        }),
        with_report(replica(2, 0, "A", 90), |r| r.master_sync_in_progress = true),
    ]);
    assert_eq!(run(&m, &syncing, &none()).synced_replication_id, "A");
    // A replica with B whose link is down is not seen in sync yet.
    let down = restarted("B", "A");
    assert_eq!(run(&m, &down, &none()).synced_replication_id, "A");
    // One in sync under B: B.
    let synced = restarted("A", "B");
    assert_eq!(run(&m, &synced, &none()).synced_replication_id, "B");
    // The primary not answering: kept.
    let dead = members(vec![
        with_report(primary(0, "B", 10), |r| {
            r.boot = crate::instance_api::Boot::Stopping
        }),
        replica(1, 0, "B", 100),
        replica(2, 0, "B", 90),
    ]);
    assert_eq!(run(&m, &dead, &none()).synced_replication_id, "A");
    // A new cluster: set once the first replica is in sync.
    let new = model(json!({"currentPrimary": "demo-0"}), json!({}));
    assert_eq!(run(&new, &healthy(), &none()).synced_replication_id, "A");
}

#[test]
fn a_replica_cluster_says_it_replicates_and_why_nothing_takes_writes() {
    let m = model_with(
        json!({"instances": 2, "storage": {"size": "1Gi"},
            "replicaMode": {"enabled": true, "source": {"host": "10.0.0.9"}}}),
        json!({}),
        json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0", "phase": "Creating"}),
    );
    let following = members(vec![replica(0, 9, "S", 100), replica(1, 9, "S", 100)]);
    let s = run(&m, &following, &none());
    assert_eq!(s.phase, Some(ClusterPhase::Replicating));
    assert_eq!(
        cond(&s, "ReplicaMode"),
        ("True".into(), "ReplicaModeEnabled".into())
    );
    assert_eq!(
        cond(&s, "PrimaryAvailable"),
        ("False".into(), "ReplicaMode".into())
    );
    assert_eq!(cond(&s, "Ready"), ("False".into(), "Replicating".into()));
    assert_eq!(cond(&s, "ReplicationHealthy").0, "True");
    // One link down: still Creating for a new cluster, Degraded once it replicated; saying
    // which.
    let down = members(vec![
        replica(0, 9, "S", 100),
        with_report(replica(1, 9, "S", 100), |r| {
            r.master_link_status = "down".into()
        }),
    ]);
    let s = run(&m, &down, &none());
    assert_eq!(s.phase, Some(ClusterPhase::Creating));
    assert_eq!(s.phase_reason, "demo-1 is not replicating from the source");
    // The designated leader too.
    let leader_down = members(vec![
        with_report(replica(0, 9, "S", 100), |r| {
            r.master_link_status = "down".into()
        }),
        replica(1, 9, "S", 100),
    ]);
    let s = run(&m, &leader_down, &none());
    assert_eq!(s.phase_reason, "demo-0 is not replicating from the source");
    let mut was = m.clone();
    was.status.phase = Some(ClusterPhase::Replicating);
    let s = run(&was, &down, &none());
    assert_eq!(s.phase, Some(ClusterPhase::Degraded));
    assert!(s.phase_reason.contains("demo-1"), "{}", s.phase_reason);
}

#[test]
fn the_bootstrap_is_completed_once_the_restored_cluster_is_first_healthy_and_stays_so() {
    let restored = |status: serde_json::Value| {
        model_with(
            json!({"instances": 3, "storage": {"size": "1Gi"},
                "bootstrap": {"backupName": "nightly"}}),
            json!({}),
            status,
        )
    };
    let creating = restored(json!({"currentPrimary": "demo-0", "phase": "Creating"}));
    let not_yet = members(vec![
        primary(0, "A", 100),
        replica(1, 0, "A", 100),
        missing(2),
    ]);
    let s = run(&creating, &not_yet, &none());
    assert_eq!(s.phase, Some(ClusterPhase::Creating));
    assert!(
        !s.bootstrap_completed,
        "not while the cluster is still created"
    );
    let s = run(&creating, &healthy(), &none());
    assert_eq!(s.phase, Some(ClusterPhase::Healthy));
    assert!(s.bootstrap_completed);
    // Never back, whatever happens later.
    let later = restored(json!({"currentPrimary": "demo-0", "phase": "Healthy",
        "bootstrapCompleted": true}));
    let s = run(&later, &not_yet, &none());
    assert_eq!(s.phase, Some(ClusterPhase::Degraded));
    assert!(s.bootstrap_completed);
    // A cluster without a bootstrap never sets it (upstream's field is cluster mode's).
    let plain = model(
        json!({"currentPrimary": "demo-0", "phase": "Healthy"}),
        json!({}),
    );
    assert!(!run(&plain, &healthy(), &none()).bootstrap_completed);
}
