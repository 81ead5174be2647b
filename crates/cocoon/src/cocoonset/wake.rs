//! `wake_released`: bringing back a main whose pod is gone after a suspend (reference §4.7):
//! a release-policy set, or a retain set whose main disappeared while suspended.
//!
//! Contract:
//! - Engaged when the phase is `Waking` or `Suspended`, or `Suspending` with the
//!   hibernated-on-node hint, or when the main carries `restore-from-hibernate`, no hibernate
//!   flag and the hint (an unfinished wake whose phase was overwritten).
//! - No main: probe `:hibernate` (a registry error fails closed: nothing is created). Absent →
//!   not engaged (the normal flow boots a fresh main). Present → persist `Waking`, then create
//!   the main restoring from the tag, preferring the hint node (a required `nodeName`
//!   affinity wins).
//! - Waking and the VM not live yet: `Waking`, look again in 5 s; an unschedulable main
//!   raises `WakeNoCapacity` and never fails the set.
//! - Waking and the VM live: drop the tag, count the placement once, drop the hint. The tag
//!   goes only once a fresh read of the main confirms it (the cache may be behind).
//! - A cached main that is suspended with a hint is checked against the API (the cache may
//!   still show a pod the release deleted): gone → wait; present → not engaged.
//!
//! The decision is pure ([`decide`]); [`wake_released`] only carries it out.

use k8s_openapi::api::core::v1::Pod;
use kit::reconcile::Outcome;

use super::pass::Pass;
use super::{AGAIN, Error, POLL, Step};
use crate::crd::CocoonSetPhase;
use crate::metrics::{CocoonMetrics, PlacementLabels};
use crate::names;
use crate::pods::{build, state};

/// What the wake step knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// The set's phase.
    pub phase: Option<CocoonSetPhase>,
    /// The node the main hibernated on (release-suspend hint).
    pub hint: Option<String>,
    /// The main pod, if the cache has one.
    pub main: Option<MainFacts>,
}

/// The main pod, as far as waking cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MainFacts {
    /// VM id reported and a container running.
    pub live: bool,
    /// Pod phase Failed or lifecycle failed.
    pub terminal: bool,
    /// Carries `restore-from-hibernate=true`.
    pub restoring: bool,
    /// Carries `hibernate=true`.
    pub flagged: bool,
    /// The scheduler's message when it cannot place the pod.
    pub unschedulable: Option<String>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Not a released wake: the normal flow goes on.
    NotEngaged,
    /// No main: probe the tag; restore the main from it if present.
    Restore,
    /// Restored VM live: drop the tag and the hint.
    Complete,
    /// Still restoring: `Waking`, look again; `Some` = unschedulable, with the message.
    Wait(Option<String>),
    /// Suspended with a hint and a main in the cache: is it really there?
    CheckLive,
}

/// The released-wake decision.
pub fn decide(f: &Facts) -> Action {
    let unfinished = f
        .main
        .as_ref()
        .is_some_and(|m| m.restoring && !m.flagged && f.hint.is_some());
    let engaged = match f.phase {
        Some(CocoonSetPhase::Waking | CocoonSetPhase::Suspended) => true,
        Some(CocoonSetPhase::Suspending) => f.hint.is_some(),
        _ => unfinished,
    };
    if !engaged {
        return Action::NotEngaged;
    }
    let Some(m) = &f.main else {
        return Action::Restore;
    };
    if f.phase == Some(CocoonSetPhase::Waking) || unfinished {
        return if m.live {
            Action::Complete
        } else {
            Action::Wait(m.unschedulable.clone())
        };
    }
    if f.hint.is_some() && !m.terminal {
        return Action::CheckLive;
    }
    Action::NotEngaged
}

/// Drives a wake of a released main; `None` when not engaged.
pub async fn wake_released(pass: &mut Pass<'_>) -> Result<Step, Error> {
    let hint = pass
        .set_annotation(names::ANN_HIBERNATED_ON_NODE)
        .map(str::to_owned);
    let main = pass.pods.main.clone();
    let facts = Facts {
        phase: pass.phase(),
        hint: hint.clone(),
        main: main.as_ref().map(main_facts),
    };
    match decide(&facts) {
        Action::NotEngaged => Ok(None),
        Action::Restore => restore_main(pass, hint.as_deref()).await,
        Action::Complete => complete(pass, main.as_ref(), hint.as_deref()).await,
        Action::Wait(unschedulable) => {
            if let Some(msg) = unschedulable {
                no_capacity(pass, &format!("{}-0", pass.name()), &msg).await;
            }
            pass.write_status(Some(CocoonSetPhase::Waking)).await?;
            Ok(Some(Outcome::RequeueAfter(POLL)))
        }
        Action::CheckLive => {
            let name = format!("{}-0", pass.name());
            let gone = pass.live_pod(&name).await?.is_none();
            Ok(gone.then_some(Outcome::RequeueAfter(POLL)))
        }
    }
}

fn main_facts(m: &Pod) -> MainFacts {
    MainFacts {
        live: state::vm_live(m),
        terminal: state::is_terminal(m),
        restoring: state::flag(m, names::ANN_RESTORE),
        flagged: state::hibernate_requested(m),
        unschedulable: state::unschedulable(m),
    }
}

async fn restore_main(pass: &mut Pass<'_>, hint: Option<&str>) -> Result<Step, Error> {
    if !pass.has_tag(&pass.main_vm(), names::TAG_HIBERNATE).await? {
        return Ok(None);
    }
    pass.write_status(Some(CocoonSetPhase::Waking)).await?;
    let mut pod = build::main_pod(&pass.set);
    build::mark_restore(&mut pod);
    if let Some(node) = hint {
        build::prefer_node(&mut pod, node);
    }
    // AlreadyExists: the released pod is still terminating; either way, look again soon.
    pass.create_pod(&pod).await?;
    Ok(Some(Outcome::RequeueAfter(POLL)))
}

async fn complete(pass: &Pass<'_>, main: Option<&Pod>, hint: Option<&str>) -> Result<Step, Error> {
    if !pass.drop_main_snapshot().await? {
        return Ok(Some(Outcome::RequeueAfter(POLL)));
    }
    if let Some(hint) = hint {
        let on_hint = main.and_then(state::node_name) == Some(hint);
        let labels = PlacementLabels {
            namespace: pass.namespace().to_owned(),
            cocoonset: pass.name(),
            placement: if on_hint { "hint-node" } else { "pool" }.to_owned(),
        };
        pass.ctx
            .metrics
            .slot_release_wake
            .get_or_create(&labels)
            .inc();
        pass.annotate_set(&[(names::ANN_HIBERNATED_ON_NODE, None)])
            .await?;
    }
    pass.write_status(None).await?;
    Ok(Some(Outcome::RequeueAfter(AGAIN)))
}

async fn no_capacity(pass: &Pass<'_>, pod: &str, msg: &str) {
    let labels = CocoonMetrics::set(pass.namespace(), &pass.name());
    pass.ctx
        .metrics
        .slot_release_wake_unschedulable
        .get_or_create(&labels)
        .inc();
    let note = format!("main pod {pod} unschedulable: {msg}");
    pass.event(true, "WakeNoCapacity", note).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use CocoonSetPhase::*;

    fn facts(phase: Option<CocoonSetPhase>, hint: bool, main: Option<MainFacts>) -> Facts {
        Facts {
            phase,
            hint: hint.then(|| "kwok-node-1".to_owned()),
            main,
        }
    }

    fn pod(live: bool, restoring: bool, flagged: bool) -> MainFacts {
        MainFacts {
            live,
            restoring,
            flagged,
            ..MainFacts::default()
        }
    }

    #[test]
    fn running_or_pending_sets_are_not_woken() {
        assert_eq!(
            decide(&facts(Some(Running), false, None)),
            Action::NotEngaged
        );
        assert_eq!(decide(&facts(None, false, None)), Action::NotEngaged);
        assert_eq!(
            decide(&facts(Some(Running), true, Some(pod(true, true, false)))),
            Action::Complete,
            "an unfinished wake whose phase got overwritten still completes"
        );
    }

    #[test]
    fn a_suspended_set_without_pods_restores_its_main() {
        assert_eq!(decide(&facts(Some(Suspended), true, None)), Action::Restore);
        assert_eq!(
            decide(&facts(Some(Suspended), false, None)),
            Action::Restore
        );
        assert_eq!(decide(&facts(Some(Waking), false, None)), Action::Restore);
        // Suspending without a hint is the normal suspend flow's business.
        assert_eq!(
            decide(&facts(Some(Suspending), false, None)),
            Action::NotEngaged
        );
        assert_eq!(
            decide(&facts(Some(Suspending), true, None)),
            Action::Restore
        );
    }

    #[test]
    fn waking_waits_until_live_and_reports_no_capacity() {
        let restoring = pod(false, true, false);
        assert_eq!(
            decide(&facts(Some(Waking), true, Some(restoring.clone()))),
            Action::Wait(None)
        );
        let stuck = MainFacts {
            unschedulable: Some("0/3 nodes are available".into()),
            ..restoring
        };
        assert_eq!(
            decide(&facts(Some(Waking), true, Some(stuck))),
            Action::Wait(Some("0/3 nodes are available".into()))
        );
        assert_eq!(
            decide(&facts(Some(Waking), true, Some(pod(true, true, false)))),
            Action::Complete
        );
    }

    #[test]
    fn a_cached_main_of_a_released_set_is_checked_against_the_api() {
        let cached = pod(false, false, true);
        assert_eq!(
            decide(&facts(Some(Suspended), true, Some(cached.clone()))),
            Action::CheckLive
        );
        let terminal = MainFacts {
            terminal: true,
            ..cached.clone()
        };
        assert_eq!(
            decide(&facts(Some(Suspended), true, Some(terminal))),
            Action::NotEngaged
        );
        // A retain placeholder (no hint) is left to the normal unsuspend.
        assert_eq!(
            decide(&facts(Some(Suspended), false, Some(cached))),
            Action::NotEngaged
        );
    }
}
