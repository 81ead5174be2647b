//! Tables for the pure state machine (upstream's hibernation inventory, pure items).

use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).expect("timestamp")
}

fn seen(phase: Option<HibernationPhase>, since: i64) -> Seen {
    Seen {
        phase,
        since: Some(t(since)),
        vm_name: Some("vk-ns-p".into()),
        message: phase.map(|p| p.as_str().to_owned()),
    }
}

fn pod(hibernate_set: bool, hibernated: bool, live: bool) -> PodFacts {
    PodFacts {
        vm: "vk-ns-p".into(),
        hibernate_set,
        hibernated,
        live,
    }
}

fn k8s_pod(yaml: &str) -> Pod {
    serde_yaml::from_str(yaml).expect("pod yaml")
}

const T: Timeouts = Timeouts {
    hibernate: HIBERNATE_TIMEOUT,
    wake: WAKE_TIMEOUT,
    poll: POLL,
};

#[test]
fn a_settled_reverse_transition_acts_on_the_desire_at_once() {
    // (desire, phase seen, pod, registry) -> (phase written, next). `asleep`: flag set and
    // lifecycle hibernated; `awake`: no flag, VM live.
    let (asleep, awake) = (pod(true, true, false), pod(false, false, true));
    let (hib, wake) = (Desire::Hibernate, Desire::Wake);
    let (tag, poll) = (Some(&Probe::Present), Next::After(POLL));
    let cases = [
        // Wake flipped while Hibernating: the hibernate finishes, then the wake starts now.
        (wake, Some(Hibernating), &asleep, tag, Hibernated, Next::Now),
        // Hibernate flipped while Waking: the wake finishes, then the hibernate starts now.
        (hib, Some(Waking), &awake, None, Active, Next::Now),
        // The reverse transition still in flight: poll as usual.
        (wake, Some(Hibernating), &awake, None, Hibernating, poll),
        (hib, Some(Waking), &asleep, None, Waking, poll),
        // Settled where the desire wants it: converged.
        (hib, Some(Hibernating), &asleep, tag, Hibernated, Next::Done),
        (wake, Some(Waking), &awake, None, Active, Next::Done),
        (hib, Some(Hibernated), &asleep, None, Hibernated, Next::Done),
        (wake, Some(Active), &awake, None, Active, Next::Done),
        // The pass after a settled reverse transition starts the desired flow.
        (wake, Some(Hibernated), &asleep, None, Waking, poll),
        (hib, Some(Active), &awake, None, Hibernating, poll),
    ];
    for (desire, phase, facts, probe, want_phase, want_next) in cases {
        let d = decide(desire, &seen(phase, 0), facts, probe, t(5), &T);
        let got = (d.phase, d.next);
        assert_eq!(got, (want_phase, want_next), "{desire:?} in {phase:?}");
    }
}

#[test]
fn a_reverse_transition_that_times_out_hands_over_to_the_desire() {
    // Wake flipped while Hibernating, and the hibernate never confirms: it fails as a
    // hibernate (its own words), then the wake starts at once as a retry of the Failed CR.
    let stuck = pod(true, false, true);
    let d = decide(
        Desire::Wake,
        &seen(Some(Hibernating), 0),
        &stuck,
        None,
        t(181),
        &T,
    );
    assert_eq!((d.phase, d.next), (Failed, Next::Now));
    assert_eq!(
        d.message.as_deref(),
        Some("hibernate not confirmed within 3m0s")
    );
    let d = decide(
        Desire::Wake,
        &seen(Some(Failed), 181),
        &stuck,
        None,
        t(182),
        &T,
    );
    assert_eq!(d.phase, Active, "the live VM is awake");
    // A Failed CR whose desire it failed at waits for a change, as before.
    let d = decide(
        Desire::Hibernate,
        &seen(Some(Hibernating), 0),
        &stuck,
        None,
        t(181),
        &T,
    );
    assert_eq!((d.phase, d.next), (Failed, Next::Done));
}

#[test]
fn settle_only_touches_a_finished_reverse_flow() {
    let done = |phase| Decision {
        phase,
        message: None,
        next: Next::Done,
        alert: None,
    };
    let cases = [
        (Desire::Wake, Flow::Hibernate, Next::Done, Next::Now),
        (Desire::Hibernate, Flow::Wake, Next::Done, Next::Now),
        (Desire::Wake, Flow::Wake, Next::Done, Next::Done),
        (Desire::Hibernate, Flow::Hibernate, Next::Done, Next::Done),
        (
            Desire::Wake,
            Flow::Hibernate,
            Next::After(POLL),
            Next::After(POLL),
        ),
        (
            Desire::Wake,
            Flow::Hibernate,
            Next::RetryError(POLL),
            Next::RetryError(POLL),
        ),
    ];
    for (desire, flow, next, want) in cases {
        let d = settle(
            desire,
            flow,
            Decision {
                next,
                ..done(Hibernated)
            },
        );
        assert_eq!(d.next, want, "{desire:?} {flow:?} {next:?}");
    }
}

#[test]
fn reverse_desires_finish_the_transition_in_flight_first() {
    let cases = [
        (Desire::Hibernate, None, Flow::Hibernate),
        (Desire::Hibernate, Some(Active), Flow::Hibernate),
        (Desire::Hibernate, Some(Waking), Flow::Wake),
        (Desire::Hibernate, Some(Failed), Flow::Hibernate),
        (Desire::Wake, Some(Hibernated), Flow::Wake),
        (Desire::Wake, Some(Hibernating), Flow::Hibernate),
        (Desire::Wake, Some(Pending), Flow::Wake),
    ];
    for (desire, phase, want) in cases {
        assert_eq!(flow(desire, phase), want, "{desire:?} in {phase:?}");
    }
}

#[test]
fn hibernate_deadline_table() {
    // (phase, seconds since Ready moved, probe) -> phase written
    let unconfirmed = pod(true, false, true);
    let cases = [
        (None, 10_000, Hibernating),
        (Some(Active), 10_000, Hibernating),
        (Some(Pending), 10_000, Hibernating),
        (Some(Hibernating), 0, Hibernating),
        (Some(Hibernating), 180, Hibernating),
        (Some(Hibernating), 181, Failed),
        (Some(Hibernating), 10_000, Failed),
        (Some(Failed), 10_000, Hibernating),
    ];
    for (phase, age, want) in cases {
        let d = hibernate(&seen(phase, 0), &unconfirmed, None, t(age), &T);
        assert_eq!(d.phase, want, "{phase:?} after {age}s");
    }
}

#[test]
fn wake_deadline_table() {
    let asleep = pod(false, true, false);
    let cases = [
        (Some(Hibernated), 10_000, Waking),
        (Some(Waking), 299, Waking),
        (Some(Waking), 300, Waking),
        (Some(Waking), 301, Failed),
        (Some(Failed), 10_000, Waking),
        (None, 0, Waking),
    ];
    for (phase, age, want) in cases {
        let d = wake(&seen(phase, 0), &asleep, t(age), &T);
        assert_eq!(d.phase, want, "{phase:?} after {age}s");
    }
}

#[test]
fn timeouts_use_upstreams_exact_words() {
    // Alerting and scripts match on these strings (docs/cocoon.md quotes them).
    let d = wake(
        &seen(Some(Waking), 0),
        &pod(false, false, false),
        t(400),
        &T,
    );
    assert_eq!(d.next, Next::Done);
    assert_eq!(
        d.message.as_deref(),
        Some("wake timed out after 5m0s; vk-cocoon never reported the container running")
    );
    assert_eq!(
        d.alert.as_deref(),
        Some("vk-cocoon did not report the container running within 5m0s")
    );
    let d = hibernate(
        &seen(Some(Hibernating), 0),
        &pod(true, false, true),
        None,
        t(200),
        &T,
    );
    assert_eq!(
        d.message.as_deref(),
        Some("hibernate not confirmed within 3m0s")
    );
    assert_eq!(
        d.alert.as_deref(),
        Some("snapshot vk-ns-p not confirmed in the registry within 3m0s")
    );
    // A tuned deadline prints as Go prints the duration.
    let short = Timeouts {
        hibernate: Duration::from_secs(7),
        ..T
    };
    let d = hibernate(
        &seen(Some(Hibernating), 0),
        &pod(true, false, true),
        None,
        t(8),
        &short,
    );
    assert_eq!(
        d.message.as_deref(),
        Some("hibernate not confirmed within 7s")
    );
}

#[test]
fn waiting_polls_and_wakes_up_for_the_deadline() {
    let short = Timeouts {
        hibernate: Duration::from_secs(3),
        ..T
    };
    let d = hibernate(
        &seen(Some(Hibernating), 0),
        &pod(true, false, true),
        None,
        t(1),
        &short,
    );
    assert_eq!(d.next, Next::After(Duration::from_secs(3)), "2s left + 1s");
    let d = hibernate(
        &seen(Some(Hibernating), 0),
        &pod(true, false, true),
        None,
        t(1),
        &T,
    );
    assert_eq!(d.next, Next::After(POLL));
    assert_eq!((d.phase, d.message), (Hibernating, None));
}

#[test]
fn hibernate_is_confirmed_by_lifecycle_and_registry() {
    let s = seen(Some(Hibernating), 0);
    let done = pod(true, true, false);
    assert!(needs_probe(&s, &done));
    let d = hibernate(&s, &done, Some(&Probe::Present), t(5), &T);
    assert_eq!((d.phase, d.next), (Hibernated, Next::Done));
    let d = hibernate(&s, &done, Some(&Probe::Absent), t(5), &T);
    assert_eq!(
        (d.phase, d.next),
        (Hibernating, Next::After(POLL)),
        "absence → wait"
    );
}

#[test]
fn stale_tag_is_ignored_until_lifecycle_hibernated() {
    // The tag may be left from an earlier round: without lifecycle `hibernated` the registry
    // is not even asked.
    let s = seen(Some(Hibernating), 0);
    let running = pod(true, false, true);
    assert!(!needs_probe(&s, &running));
    let d = hibernate(&s, &running, None, t(5), &T);
    assert_eq!(d.phase, Hibernating);
}

#[test]
fn stale_lifecycle_round_is_rejected() {
    let stale = k8s_pod(
        "metadata: {annotations: {vm.cocoonstack.io/name: vk-ns-p, \
         vm.cocoonstack.io/lifecycle-state: hibernated, \
         vm.cocoonstack.io/lifecycle-observed-generation: '1', \
         cocoonset.cocoonstack.io/generation: '2'}}",
    );
    let f = facts("ns", "p", Some(&stale)).expect("facts");
    assert!(
        !f.hibernated,
        "hibernated for generation 1 says nothing about generation 2"
    );
    let current = k8s_pod(
        "metadata: {annotations: {vm.cocoonstack.io/name: vk-ns-p, \
         vm.cocoonstack.io/hibernate: 'true', \
         vm.cocoonstack.io/lifecycle-state: hibernated, \
         vm.cocoonstack.io/lifecycle-observed-generation: '2', \
         cocoonset.cocoonstack.io/generation: '2'}}",
    );
    let f = facts("ns", "p", Some(&current)).expect("facts");
    assert!(f.hibernated && f.hibernate_set && !f.live);
}

#[test]
fn registry_error_retries_until_the_deadline_then_fails() {
    let done = pod(true, true, false);
    let err = Probe::Error("RegistryUnreachable");
    let d = hibernate(&seen(Some(Hibernating), 0), &done, Some(&err), t(60), &T);
    // The retry must come just past the deadline (120 s left) whatever the back-off.
    let due = Next::RetryError(Duration::from_secs(121));
    assert_eq!((d.phase, d.next), (Hibernating, due));
    assert!(d.message.expect("message").contains("RegistryUnreachable"));
    let d = hibernate(&seen(Some(Active), 0), &done, Some(&err), t(10_000), &T);
    assert_eq!(
        (d.phase, d.next),
        (Hibernating, Next::RetryError(Duration::from_secs(181))),
        "entering starts the clock"
    );
    let d = hibernate(&seen(Some(Hibernating), 0), &done, Some(&err), t(180), &T);
    assert_eq!(
        d.next,
        Next::RetryError(Duration::from_secs(1)),
        "at the deadline: retry a second later"
    );
    let d = hibernate(&seen(Some(Hibernating), 0), &done, Some(&err), t(181), &T);
    assert_eq!(
        (d.phase, d.next),
        (Failed, Next::Done),
        "probe error at the deadline"
    );
}

#[test]
fn hibernated_is_not_probed_again_for_the_same_vm() {
    let s = seen(Some(Hibernated), 0);
    let done = pod(true, true, false);
    assert!(!needs_probe(&s, &done));
    let d = hibernate(&s, &done, None, t(10_000), &T);
    assert_eq!((d.phase, d.next), (Hibernated, Next::Done));
    let other_vm = Seen {
        vm_name: Some("vk-ns-old".into()),
        ..s
    };
    assert!(
        needs_probe(&other_vm, &done),
        "a different VM must be confirmed afresh"
    );
}

#[test]
fn wake_completes_on_a_live_vm_even_with_a_residue_annotation() {
    let residue = pod(true, false, true);
    let d = wake(&seen(Some(Pending), 0), &residue, t(1), &T);
    assert_eq!((d.phase, d.next), (Active, Next::Done));
    let d = wake(&seen(Some(Waking), 0), &pod(false, false, false), t(1), &T);
    assert_eq!(d.phase, Waking);
}

#[test]
fn bad_references_are_pending_but_never_demote_restore_intent() {
    let missing = BadRef::PodMissing("ns/p".into());
    for phase in [
        None,
        Some(Active),
        Some(Pending),
        Some(Hibernating),
        Some(Failed),
    ] {
        let d = bad_ref(&seen(phase, 0), &missing).expect("pending");
        assert_eq!(d.phase, Pending, "{phase:?}");
        assert_eq!(d.message.as_deref(), Some("pod ns/p not yet present"));
        assert_eq!(d.next, Next::After(BAD_REF_RECHECK));
    }
    for phase in [Hibernated, Waking] {
        assert_eq!(
            bad_ref(&seen(Some(phase), 0), &missing),
            None,
            "{phase:?} kept"
        );
    }
    let d = bad_ref(&seen(None, 0), &BadRef::NoPodRef).expect("failed");
    assert_eq!(d.phase, Failed);
    assert_eq!(d.message.as_deref(), Some("spec.podRef.name is required"));
}

#[test]
fn bad_reference_is_news_once() {
    let bad = BadRef::NoVmName("ns/p".into());
    let d = bad_ref(&seen(Some(Active), 0), &bad).expect("pending");
    assert!(bad_ref_is_news(&seen(Some(Active), 0), &d));
    let already = Seen {
        phase: Some(Pending),
        message: Some("pod ns/p has no vm.cocoonstack.io/name annotation yet".into()),
        ..Seen::default()
    };
    assert!(
        !bad_ref_is_news(&already, &d),
        "same message: no second Event"
    );
    let other = BadRef::PodMissing("ns/p".into());
    let d = bad_ref(&already, &other).expect("pending");
    assert!(bad_ref_is_news(&already, &d), "a different reason is news");
}

#[test]
fn facts_name_the_bad_reference() {
    assert_eq!(facts("ns", "", None), Err(BadRef::NoPodRef));
    assert_eq!(
        facts("ns", "p", None),
        Err(BadRef::PodMissing("ns/p".into()))
    );
    let nameless = k8s_pod("metadata: {annotations: {vm.cocoonstack.io/name: ''}}");
    let err = facts("ns", "p", Some(&nameless)).expect_err("no VM name");
    assert_eq!(err.reason(), "NoVMName");
    assert_eq!(
        err.message(),
        "pod ns/p has no vm.cocoonstack.io/name annotation yet"
    );
    assert_eq!(BadRef::PodMissing("ns/p".into()).reason(), "PodNotFound");
}

#[test]
fn deadlines_apply_only_inside_their_phase() {
    assert_eq!(
        remaining(&seen(Some(Active), 0), Waking, WAKE_TIMEOUT, t(9_999)),
        Some(WAKE_TIMEOUT)
    );
    let no_time = Seen {
        phase: Some(Waking),
        ..Seen::default()
    };
    assert_eq!(
        remaining(&no_time, Waking, WAKE_TIMEOUT, t(9_999)),
        Some(WAKE_TIMEOUT)
    );
    let s = seen(Some(Waking), 100);
    assert_eq!(
        remaining(&s, Waking, WAKE_TIMEOUT, t(90)),
        Some(WAKE_TIMEOUT),
        "clock skew"
    );
    assert_eq!(
        remaining(&s, Waking, WAKE_TIMEOUT, t(160)),
        Some(Duration::from_secs(240))
    );
}

#[test]
fn timeouts_from_the_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(Timeouts::from_lookup(env(&[])), Timeouts::default());
    let t = Timeouts::from_lookup(env(&[
        (ENV_HIBERNATE_TIMEOUT, "7"),
        (ENV_WAKE_TIMEOUT, " 9 "),
    ]));
    assert_eq!(
        (t.hibernate, t.wake),
        (Duration::from_secs(7), Duration::from_secs(9))
    );
    let t = Timeouts::from_lookup(env(&[
        (ENV_HIBERNATE_TIMEOUT, "x"),
        (ENV_WAKE_TIMEOUT, "0"),
    ]));
    assert_eq!(t, Timeouts::default(), "garbage and zero keep the defaults");
}

#[test]
fn durations_print_like_go() {
    assert_eq!(go_duration(HIBERNATE_TIMEOUT), "3m0s");
    assert_eq!(go_duration(WAKE_TIMEOUT), "5m0s");
    assert_eq!(go_duration(Duration::from_secs(45)), "45s");
    assert_eq!(go_duration(Duration::from_secs(3_725)), "1h2m5s");
}
