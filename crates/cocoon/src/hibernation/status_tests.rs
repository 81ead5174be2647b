//! Ready mapping, transition times and what transitions publish.

use super::*;
use crate::hibernation::decide::Next;
use HibernationPhase::{Pending, Waking};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).expect("timestamp")
}

fn cr(generation: i64) -> CocoonHibernation {
    serde_yaml::from_str(&format!(
        "{{apiVersion: cocoonset.cocoonstack.io/v1, kind: CocoonHibernation, \
         metadata: {{name: c, namespace: ns, generation: {generation}}}, \
         spec: {{podRef: {{name: p}}, desire: Hibernate}}}}"
    ))
    .expect("cr yaml")
}

// `cr` after writing `phase` at `at`.
fn written(
    mut c: CocoonHibernation,
    phase: HibernationPhase,
    msg: Option<&str>,
    at: i64,
) -> CocoonHibernation {
    c.status = Some(compute(&c, phase, Some("vk-ns-p"), msg, t(at)));
    c
}

fn ready_of(c: &CocoonHibernation) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let s = c.status.as_ref().expect("status");
    conditions::get(&s.conditions, READY).expect("Ready")
}

#[test]
fn ready_mapping() {
    let cases = [
        (Hibernated, None, "True", "Done", "Hibernated"),
        (Active, None, "True", "Done", "Active"),
        (Failed, Some("boom"), "False", "Failed", "boom"),
        (
            Pending,
            Some("pod ns/p not yet present"),
            "False",
            "Pending",
            "pod ns/p not yet present",
        ),
        (Hibernating, None, "False", "Pending", "Hibernating"),
        (Waking, None, "False", "Pending", "Waking"),
    ];
    for (phase, msg, status, reason, message) in cases {
        let d = ready(phase, msg);
        assert_eq!(
            (d.status.as_str(), d.reason.as_str(), d.message.as_str()),
            (status, reason, message),
            "{phase:?}"
        );
    }
}

#[test]
fn entering_a_transition_restarts_its_clock() {
    let c = written(cr(1), Pending, Some("pod ns/p not yet present"), 0);
    let c = written(c, Hibernating, None, 50);
    assert_eq!(
        ready_of(&c).last_transition_time.0,
        t(50),
        "False → False still moves"
    );
    let c = written(c, Hibernating, Some("registry down"), 80);
    assert_eq!(
        ready_of(&c).last_transition_time.0,
        t(50),
        "staying keeps the clock"
    );
    assert_eq!(ready_of(&c).message, "registry down");
}

#[test]
fn recovering_from_failed_resets_the_deadline_both_ways() {
    for phase in [Hibernating, Waking] {
        let c = written(cr(1), phase, None, 0);
        let c = written(c, Failed, Some("timed out"), 400);
        let c = written(c, phase, None, 900);
        assert_eq!(ready_of(&c).last_transition_time.0, t(900), "{phase:?}");
        assert_eq!(ready_of(&c).reason, "Pending");
    }
}

#[test]
fn an_unchanged_pass_computes_the_same_status() {
    let c = written(cr(1), Hibernated, None, 0);
    let again = compute(&c, Hibernated, Some("vk-ns-p"), None, t(500));
    assert_eq!(c.status.as_ref(), Some(&again));
}

#[test]
fn observed_generation_follows_the_cr_on_the_same_phase() {
    let mut c = written(cr(1), Pending, Some("pod ns/p not yet present"), 0);
    c.metadata.generation = Some(2);
    let s = compute(&c, Pending, None, Some("pod ns/p not yet present"), t(10));
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(s.conditions[0].observed_generation, Some(2));
    assert_eq!(s.conditions[0].last_transition_time.0, t(0));
    assert_eq!(
        s.vm_name.as_deref(),
        Some("vk-ns-p"),
        "vmName kept when unknown"
    );
}

fn decision(phase: HibernationPhase, message: Option<&str>) -> Decision {
    Decision {
        phase,
        message: message.map(str::to_owned),
        next: Next::Done,
        alert: None,
    }
}

fn seen(phase: HibernationPhase, since: i64) -> Seen {
    Seen {
        phase: Some(phase),
        since: Some(t(since)),
        ..Seen::default()
    }
}

fn reasons(notes: &[Note]) -> Vec<&str> {
    notes.iter().map(|n| n.reason).collect()
}

#[test]
fn hibernated_publishes_once_with_its_duration() {
    let (notes, sample) = transition(
        Flow::Hibernate,
        &seen(Hibernating, 0),
        &decision(Hibernated, None),
        "vk-ns-p",
        "ns/p",
        t(42),
    );
    assert_eq!(reasons(&notes), ["Hibernated"]);
    assert_eq!(notes[0].message, "snapshot vk-ns-p pushed to the registry");
    assert_eq!(notes[0].type_, EventType::Normal);
    let s = sample.expect("sample");
    assert_eq!((s.flow, s.result, s.seconds), (Flow::Hibernate, "ok", 42.0));
    let (notes, sample) = transition(
        Flow::Hibernate,
        &seen(Hibernated, 0),
        &decision(Hibernated, None),
        "vk-ns-p",
        "ns/p",
        t(99),
    );
    assert!(
        notes.is_empty() && sample.is_none(),
        "no transition, nothing published"
    );
}

#[test]
fn woken_active_and_timeouts() {
    let (notes, sample) = transition(
        Flow::Wake,
        &seen(Waking, 0),
        &decision(Active, None),
        "vk-ns-p",
        "ns/p",
        t(7),
    );
    assert_eq!(reasons(&notes), ["WokenActive"]);
    assert_eq!(notes[0].message, "pod ns/p is running");
    assert_eq!(sample.map(|s| (s.flow, s.result)), Some((Flow::Wake, "ok")));
    let (notes, sample) = transition(
        Flow::Wake,
        &seen(Waking, 0),
        &decision(Failed, Some("late")),
        "vk-ns-p",
        "ns/p",
        t(301),
    );
    assert_eq!(reasons(&notes), ["WakeTimedOut"]);
    assert_eq!(
        (notes[0].type_, notes[0].message.as_str()),
        (EventType::Warning, "late")
    );
    let s = sample.expect("sample");
    assert_eq!(
        (s.flow, s.result, s.seconds),
        (Flow::Wake, "timeout", 301.0)
    );
    let (notes, _) = transition(
        Flow::Hibernate,
        &seen(Hibernating, 0),
        &decision(Failed, Some("late")),
        "vk-ns-p",
        "ns/p",
        t(181),
    );
    assert_eq!(reasons(&notes), ["HibernateTimedOut"]);
    // A timeout decided by the state machine: the Event carries upstream's Event words.
    let timed_out = crate::hibernation::decide::hibernate(
        &Seen {
            phase: Some(Hibernating),
            since: Some(t(0)),
            ..Seen::default()
        },
        &crate::hibernation::decide::PodFacts {
            vm: "vk-ns-p".into(),
            hibernate_set: true,
            hibernated: false,
            live: true,
        },
        None,
        t(181),
        &Default::default(),
    );
    let (notes, _) = transition(
        Flow::Hibernate,
        &seen(Hibernating, 0),
        &timed_out,
        "vk-ns-p",
        "ns/p",
        t(181),
    );
    assert_eq!(
        (notes[0].reason, notes[0].message.as_str()),
        (
            "HibernateTimedOut",
            "snapshot vk-ns-p not confirmed in the registry within 3m0s"
        )
    );
}

#[test]
fn retry_after_failure_is_announced() {
    let (notes, sample) = transition(
        Flow::Wake,
        &seen(Failed, 0),
        &decision(Waking, None),
        "vk-ns-p",
        "ns/p",
        t(5),
    );
    assert_eq!(reasons(&notes), ["RetryRequested"]);
    assert_eq!(notes[0].message, "retrying Wake after prior failure");
    assert!(sample.is_none());
    let (notes, sample) = transition(
        Flow::Hibernate,
        &seen(Failed, 0),
        &decision(Hibernated, None),
        "vk-ns-p",
        "ns/p",
        t(5),
    );
    assert_eq!(reasons(&notes), ["RetryRequested", "Hibernated"]);
    assert_eq!(
        sample.map(|s| s.seconds),
        Some(0.0),
        "not timed: it never was Hibernating"
    );
}
