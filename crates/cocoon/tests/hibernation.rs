//! The CocoonHibernation controller end to end: the real control plane, a real OCI registry,
//! the vk-cocoon simulator and the operator in this process, one namespace per test.

mod support;

use std::time::Duration;

use cocoon::crd::{CocoonHibernation, Desire, HibernationPhase};
use cocoon::hibernation::decide::Timeouts;
use cocoon::names::{self, TAG_HIBERNATE, lifecycle};
use cocoon::pods::state;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::{Env, Options, T, delete_cr, hibernation_passes, occurrences, phase_of, ready_of};

use HibernationPhase::{Active, Failed, Hibernated, Hibernating, Pending, Waking};

fn hibernated(p: &Pod) -> bool {
    state::lifecycle_state(p) == Some(lifecycle::HIBERNATED)
}

fn flagged(p: &Pod) -> bool {
    state::hibernate_requested(p)
}

/// Waits until the controller has made `n` more passes than it had made when called.
async fn more_passes(env: &Env, n: f64) {
    let start = hibernation_passes(&env.operator);
    testenv::eventually("more reconcile passes", T, || async {
        (hibernation_passes(&env.operator) >= start + n).then_some(())
    })
    .await
    .expect("passes");
}

/// The Events with `reason` about `regarding` once they count at least `n` occurrences (the
/// controller publishes a transition's Events just after its status write, so they may come
/// a moment after the phase a test waited for); on timeout, fails showing those there are.
async fn occurrences_at_least(env: &Env, regarding: &str, reason: &str, n: i32) -> Vec<Event> {
    let what = format!("{n} occurrences of {reason} on {regarding}");
    let got = testenv::eventually(&what, T, || async {
        let list = env.events(regarding, reason).await;
        (occurrences(&list) >= n).then_some(list)
    })
    .await;
    match got {
        Ok(list) => list,
        Err(e) => panic!("{e}: {:?}", env.events(regarding, reason).await),
    }
}

#[tokio::test]
async fn hibernate_then_wake() {
    let env = Env::start("ch-cycle").await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    env.create_cr("p", "p", Desire::Hibernate).await;
    let cr = env.wait_phase("p", Hibernated).await;
    assert!(
        cr.finalizers()
            .iter()
            .any(|f| f == names::HIBERNATION_FINALIZER)
    );
    let status = cr.status.clone().expect("status");
    assert_eq!(status.vm_name.as_deref(), Some(vm.as_str()));
    assert_eq!(status.observed_generation, cr.metadata.generation);
    let ready = ready_of(&cr);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Done")
    );
    assert!(env.tag_exists(&vm, TAG_HIBERNATE).await, "snapshot pushed");
    let pod = env.wait_pod("p", "hibernated", hibernated).await;
    assert!(flagged(&pod) && !state::vm_live(&pod));
    let events = env.wait_event("p", "Hibernated").await;
    assert_eq!(occurrences(&events), 1);
    assert_eq!(
        events[0].note.as_deref(),
        Some(format!("snapshot {vm} pushed to the registry").as_str())
    );

    env.set_desire("p", Desire::Wake).await;
    let cr = env.wait_phase("p", Active).await;
    assert_eq!(ready_of(&cr).reason, "Done");
    let pod = env.wait_pod("p", "live", state::vm_live).await;
    assert!(!flagged(&pod), "hibernate annotation removed");
    env.wait_tag(&vm, TAG_HIBERNATE, false).await;
    let woken = env.wait_event("p", "WokenActive").await;
    assert_eq!(occurrences(&woken), 1);
    let ns = &env.ns.name;
    assert_eq!(
        woken[0].note.as_deref(),
        Some(format!("pod {ns}/p is running").as_str())
    );
    assert_eq!(
        occurrences(&env.events("p", "Hibernated").await),
        1,
        "no second Hibernated"
    );
}

#[tokio::test]
async fn stale_tag_is_not_mistaken_for_a_hibernation() {
    let env = Env::start("ch-stale").await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    testenv::registry::push_tag(&env.registry_url, None, &vm, TAG_HIBERNATE, b"old round")
        .await
        .expect("push a stale tag");
    env.sim.faults().stall(&vm);
    env.create_cr("p", "p", Desire::Hibernate).await;
    env.wait_phase("p", Hibernating).await;
    env.wait_pod("p", "hibernate requested", flagged).await;
    more_passes(&env, 2.0).await;
    let cr = env.api::<CocoonHibernation>().get("p").await.expect("cr");
    assert_eq!(
        phase_of(&cr),
        Some(Hibernating),
        "a tag alone proves nothing"
    );
    assert!(env.events("p", "Hibernated").await.is_empty());

    env.sim.faults().clear(&vm);
    env.wait_phase("p", Hibernated).await;
    env.wait_event("p", "Hibernated").await;
}

#[tokio::test]
async fn missing_pod_is_pending_then_proceeds() {
    let env = Env::start("ch-nopod").await;
    env.create_cr("c", "p", Desire::Hibernate).await;
    let cr = env.wait_phase("c", Pending).await;
    let want = format!("pod {}/p not yet present", env.ns.name);
    assert_eq!(ready_of(&cr).message, want);
    assert_eq!(ready_of(&cr).reason, "Pending");
    let events = env.wait_event("c", "PodNotFound").await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    // More passes (each CR edit triggers one) report nothing new.
    for i in 0..2 {
        env.annotate_cr("c", "test/poke", &i.to_string()).await;
        more_passes(&env, 1.0).await;
    }
    assert_eq!(
        occurrences(&env.events("c", "PodNotFound").await),
        1,
        "one Event per change"
    );

    env.live_pod("p").await;
    let cr = env.wait_phase("c", Hibernated).await;
    assert_eq!(cr.status.and_then(|s| s.vm_name), Some(env.vm("p")));
}

#[tokio::test]
async fn pod_without_vm_name_is_pending_until_it_has_one() {
    let env = Env::start("ch-novm").await;
    env.create_pod("p", false).await;
    env.create_cr("p", "p", Desire::Hibernate).await;
    let cr = env.wait_phase("p", Pending).await;
    let want = format!(
        "pod {}/p has no vm.cocoonstack.io/name annotation yet",
        env.ns.name
    );
    assert_eq!(ready_of(&cr).message, want);
    env.wait_event("p", "NoVMName").await;

    let patch =
        Patch::Merge(json!({"metadata": {"annotations": {names::ANN_VM_NAME: env.vm("p")}}}));
    env.api::<Pod>()
        .patch("p", &PatchParams::default(), &patch)
        .await
        .expect("name the VM");
    env.wait_phase("p", Hibernated).await;
    assert_eq!(occurrences(&env.events("p", "NoVMName").await), 1);
}

#[tokio::test]
async fn registry_outage_keeps_hibernating_with_backoff() {
    let mut env = Env::start("ch-regdown").await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    env.sim.faults().stall(&vm);
    env.create_cr("p", "p", Desire::Hibernate).await;
    let before = env.wait_phase("p", Hibernating).await;
    env.wait_pod("p", "hibernate requested", flagged).await;
    // vk-cocoon finishes while the operator is down; then the registry goes away.
    env.operator.stop().await;
    env.sim.faults().clear(&vm);
    env.wait_pod("p", "hibernated", hibernated).await;
    env.stop_registry();
    env.operator.restart().await;

    let cr = support::wait_cr(&env.api(), "p", "registry error reported", |cr| {
        cr.status.as_ref().is_some_and(|s| !s.conditions.is_empty())
            && ready_of(cr)
                .message
                .contains("failed (RegistryUnreachable); retrying")
    })
    .await;
    let labels = [
        ("controller", cocoon::hibernation::CONTROLLER),
        ("category", "registry_probe"),
    ];
    testenv::eventually("retries with back-off", T, || async {
        let n = env
            .operator
            .metric("flotilla_reconcile_errors_by_category_total", &labels);
        (n >= 3.0).then_some(())
    })
    .await
    .expect("retried");
    let now = env.api::<CocoonHibernation>().get("p").await.expect("cr");
    assert_eq!(
        phase_of(&now),
        Some(Hibernating),
        "not Failed before the deadline"
    );
    assert_eq!(
        ready_of(&now).last_transition_time,
        ready_of(&before).last_transition_time
    );
    assert_eq!(
        ready_of(&cr).last_transition_time,
        ready_of(&before).last_transition_time
    );
    assert!(env.events("p", "HibernateTimedOut").await.is_empty());
}

#[tokio::test]
async fn wake_timeout_fails_and_a_retry_gets_a_fresh_budget() {
    let options = Options {
        hibernation: Timeouts {
            wake: Duration::from_secs(8),
            ..Timeouts::default()
        },
        ..Options::default()
    };
    let env = Env::start_with("ch-waketo", options).await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    env.create_cr("p", "p", Desire::Hibernate).await;
    env.wait_phase("p", Hibernated).await;

    env.sim.faults().stall(&vm);
    env.set_desire("p", Desire::Wake).await;
    env.wait_phase("p", Waking).await;
    let failed = env.wait_phase("p", Failed).await;
    let ready = ready_of(&failed);
    assert_eq!(ready.reason, "Failed");
    // Upstream's exact words (alerting matches on them), with Go's duration format.
    assert_eq!(
        ready.message,
        "wake timed out after 8s; vk-cocoon never reported the container running"
    );
    let timed_out = env.wait_event("p", "WakeTimedOut").await;
    assert_eq!(
        timed_out[0].note.as_deref(),
        Some("vk-cocoon did not report the container running within 8s")
    );
    assert!(
        env.tag_exists(&vm, TAG_HIBERNATE).await,
        "the snapshot is kept for the retry"
    );

    // An edit retries; re-entering Waking starts a fresh budget.
    let retried_at = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("now");
    env.annotate_cr("p", "test/retry", "1").await;
    let waking = env.wait_phase("p", Waking).await;
    assert!(
        ready_of(&waking).last_transition_time.0 >= retried_at,
        "budget restarted"
    );
    env.wait_event("p", "RetryRequested").await;
    env.sim.faults().clear(&vm);
    env.wait_phase("p", Active).await;
    env.wait_tag(&vm, TAG_HIBERNATE, false).await;
    assert_eq!(occurrences(&env.events("p", "WakeTimedOut").await), 1);
}

#[tokio::test]
async fn two_crs_on_one_pod_share_the_vm_and_the_last_one_drops_the_tag() {
    let env = Env::start("ch-dup").await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    let (_, _) = tokio::join!(
        env.create_cr("a", "p", Desire::Hibernate),
        env.create_cr("b", "p", Desire::Hibernate),
    );
    for name in ["a", "b"] {
        let cr = env.wait_phase(name, Hibernated).await;
        assert_eq!(
            cr.status.and_then(|s| s.vm_name).as_deref(),
            Some(vm.as_str())
        );
        assert_eq!(
            occurrences(&env.wait_event(name, "Hibernated").await),
            1,
            "{name}"
        );
    }
    delete_cr(&env, "b").await;
    testenv::wait_deleted(&env.api::<CocoonHibernation>(), "b", T)
        .await
        .expect("b gone");
    assert!(
        env.tag_exists(&vm, TAG_HIBERNATE).await,
        "a still holds the VM"
    );
    let a = env.api::<CocoonHibernation>().get("a").await.expect("a");
    assert_eq!(phase_of(&a), Some(Hibernated));

    delete_cr(&env, "a").await;
    testenv::wait_deleted(&env.api::<CocoonHibernation>(), "a", T)
        .await
        .expect("a gone");
    assert!(
        !env.tag_exists(&vm, TAG_HIBERNATE).await,
        "the last holder dropped the tag"
    );
}

#[tokio::test]
async fn deletion_drops_the_tag_and_the_finalizer_but_leaves_the_pod() {
    let env = Env::start("ch-delete").await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    env.create_cr("p", "p", Desire::Hibernate).await;
    env.wait_phase("p", Hibernated).await;
    assert!(env.tag_exists(&vm, TAG_HIBERNATE).await);
    delete_cr(&env, "p").await;
    testenv::wait_deleted(&env.api::<CocoonHibernation>(), "p", T)
        .await
        .expect("finalized");
    assert!(!env.tag_exists(&vm, TAG_HIBERNATE).await, "tag dropped");
    let pod = env.api::<Pod>().get("p").await.expect("pod");
    assert!(
        flagged(&pod) && hibernated(&pod),
        "the pod stays hibernated"
    );
}

#[tokio::test]
async fn operator_restarted_mid_hibernate_converges() {
    let mut env = Env::start("ch-restart").await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    env.sim.faults().stall(&vm);
    env.create_cr("p", "p", Desire::Hibernate).await;
    env.wait_phase("p", Hibernating).await;
    env.wait_pod("p", "hibernate requested", flagged).await;
    env.operator.stop().await;
    env.sim.faults().clear(&vm);
    env.wait_pod("p", "hibernated", hibernated).await;
    env.operator.restart().await;
    env.wait_phase("p", Hibernated).await;
    assert_eq!(occurrences(&env.wait_event("p", "Hibernated").await), 1);
    assert!(env.tag_exists(&vm, TAG_HIBERNATE).await);
}

#[tokio::test]
async fn deleting_a_cr_that_never_found_its_vm_touches_no_tag() {
    let env = Env::start("ch-delnovm").await;
    env.create_cr("c", "absent", Desire::Hibernate).await;
    env.wait_phase("c", Pending).await;
    let registry = env.registry.as_ref().expect("registry");
    let served = registry.requests();
    delete_cr(&env, "c").await;
    testenv::wait_deleted(&env.api::<CocoonHibernation>(), "c", T)
        .await
        .expect("finalized");
    assert_eq!(registry.requests(), served, "no vmName, no registry call");
}

#[tokio::test]
async fn hibernated_is_kept_while_its_pod_is_gone() {
    let env = Env::start("ch-podgap").await;
    env.live_pod("p").await;
    env.create_cr("p", "p", Desire::Hibernate).await;
    env.wait_phase("p", Hibernated).await;
    env.api::<Pod>()
        .delete("p", &Default::default())
        .await
        .expect("delete pod");
    testenv::wait_deleted(&env.api::<Pod>(), "p", T)
        .await
        .expect("pod gone");
    env.annotate_cr("p", "test/poke", "1").await;
    more_passes(&env, 1.0).await;
    let cr = env.api::<CocoonHibernation>().get("p").await.expect("cr");
    assert_eq!(
        phase_of(&cr),
        Some(Hibernated),
        "restore intent is not demoted"
    );
    assert!(env.tag_exists(&env.vm("p"), TAG_HIBERNATE).await);
    assert!(env.events("p", "PodNotFound").await.is_empty());
}

#[tokio::test]
async fn hibernate_flipped_back_while_waking_hibernates_again() {
    let env = Env::start("ch-flipback").await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    env.create_cr("p", "p", Desire::Hibernate).await;
    env.wait_phase("p", Hibernated).await;
    // Wake, and change our mind before the VM reports running.
    env.sim.faults().stall(&vm);
    env.set_desire("p", Desire::Wake).await;
    env.wait_phase("p", Waking).await;
    env.wait_pod("p", "hibernate flag removed", |p| !flagged(p))
        .await;
    env.set_desire("p", Desire::Hibernate).await;
    more_passes(&env, 1.0).await;
    let cr = env.api::<CocoonHibernation>().get("p").await.expect("cr");
    assert_eq!(
        phase_of(&cr),
        Some(Waking),
        "the wake in flight finishes first"
    );
    // The VM reports running: the wake settles, and the desire (Hibernate) is acted on at once,
    // with no other change to trigger it.
    env.sim.faults().clear(&vm);
    env.wait_event("p", "WokenActive").await;
    let cr = support::wait_cr(&env.api(), "p", "Hibernated again", |cr| {
        phase_of(cr) == Some(Hibernated)
            && cr.status.as_ref().is_some_and(|s| !s.conditions.is_empty())
            && ready_of(cr).status == "True"
    })
    .await;
    assert_eq!(cr.spec.desire, Desire::Hibernate);
    let pod = env.wait_pod("p", "hibernated again", hibernated).await;
    assert!(flagged(&pod) && !state::vm_live(&pod));
    assert!(env.tag_exists(&vm, TAG_HIBERNATE).await);
    // The second Hibernated Event is published just after the status write seen above.
    let hibernated = occurrences_at_least(&env, "p", "Hibernated", 2).await;
    assert_eq!(occurrences(&hibernated), 2);
}

#[tokio::test]
async fn wake_flipped_while_hibernating_wakes_once_the_hibernate_settles() {
    let env = Env::start("ch-flipwake").await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    env.sim.faults().stall(&vm);
    env.create_cr("p", "p", Desire::Hibernate).await;
    env.wait_phase("p", Hibernating).await;
    env.wait_pod("p", "hibernate requested", flagged).await;
    env.set_desire("p", Desire::Wake).await;
    more_passes(&env, 1.0).await;
    let cr = env.api::<CocoonHibernation>().get("p").await.expect("cr");
    assert_eq!(
        phase_of(&cr),
        Some(Hibernating),
        "the hibernate in flight finishes first"
    );
    // The VM hibernates: that settles, then the wake starts at once and completes.
    env.sim.faults().clear(&vm);
    env.wait_event("p", "Hibernated").await;
    let cr = env.wait_phase("p", Active).await;
    assert_eq!(cr.spec.desire, Desire::Wake);
    assert_eq!(ready_of(&cr).status, "True");
    let pod = env.wait_pod("p", "awake", state::vm_live).await;
    assert!(!flagged(&pod), "hibernate annotation removed");
    env.wait_tag(&vm, TAG_HIBERNATE, false).await;
    env.wait_event("p", "WokenActive").await;
}

#[tokio::test]
async fn the_hibernate_deadline_holds_while_the_registry_fails() {
    let timeout = Duration::from_secs(20);
    let options = Options {
        hibernation: Timeouts {
            hibernate: timeout,
            ..Timeouts::default()
        },
        ..Options::default()
    };
    let mut env = Env::start_with("ch-regdeadline", options).await;
    let vm = env.vm("p");
    env.live_pod("p").await;
    // The VM is already hibernated when the request comes, and the registry is down: every
    // pass fails its probe and the back-off doubles (1, 2, 4, 8, 16 s: past 20 s at 31 s).
    let flag = Patch::Merge(json!({"metadata": {"annotations": {names::ANN_HIBERNATE: "true"}}}));
    env.api::<Pod>()
        .patch("p", &PatchParams::default(), &flag)
        .await
        .expect("flag");
    env.wait_pod("p", "hibernated", hibernated).await;
    env.stop_registry();
    env.create_cr("p", "p", Desire::Hibernate).await;
    let hibernating = env.wait_phase("p", Hibernating).await;
    let entered = ready_of(&hibernating).last_transition_time.0;
    let failed =
        support::wait_cr(&env.api(), "p", "Failed", |cr| phase_of(cr) == Some(Failed)).await;
    let late = jiff::Timestamp::now().duration_since(entered);
    let late = Duration::try_from(late).expect("after entering");
    assert!(late >= timeout, "not before the deadline: {late:?}");
    // lastTransitionTime has whole seconds, the check comes a second past the deadline.
    assert!(
        late <= timeout + Duration::from_secs(5),
        "the deadline fired {:?} late",
        late - timeout
    );
    assert_eq!(
        ready_of(&failed).message,
        "hibernate not confirmed within 20s"
    );
    let events = env.wait_event("p", "HibernateTimedOut").await;
    assert_eq!(
        events[0].note.as_deref(),
        Some(format!("snapshot {vm} not confirmed in the registry within 20s").as_str())
    );
}
