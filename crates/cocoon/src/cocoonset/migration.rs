//! `migrate_main`: moving the main agent to `spec.nodeName` through a hibernation snapshot
//! (reference §4.6): hibernate on the old node, delete, restore on the new one, drop the tag.
//!
//! Contract:
//! - Engaged only when `spec.nodeName` is set or the phase is `Migrating`. Settled sets (main
//!   on the wanted node, VM live, no hibernate flag, phase no longer `Migrating`) and CR-held
//!   mains never reach the registry. A migration ends by dropping the tag once the restored
//!   main is live; the next pass finds no tag and hands back to the normal flow.
//! - A registry error is an error: migration never falls through to the normal flow on a
//!   failed probe.
//! - Phase `Migrating` is persisted before the first disruptive write, so a restarted
//!   operator resumes the migration instead of mistaking the gap for a fresh set.
//! - The old main is deleted only once its VM is verifiably hibernated for this generation
//!   (lifecycle state AND tag). Upstream deletes on "tag present and flagged", which a stale
//!   tag from an earlier round satisfies before the new snapshot exists; that would lose the
//!   VM's latest state.
//! - A tag found while the main was never quiesced is stale and is dropped, not trusted, once
//!   a fresh read of the main agrees (the cache can lag the registry by a whole hibernation).
//!
//! The decision is pure ([`before_probe`], [`decide`]); [`migrate_main`] only carries it out.

use k8s_openapi::api::core::v1::Pod;
use kit::reconcile::Outcome;
use kube::ResourceExt;

use super::pass::{Created, Pass};
use super::{AGAIN, Error, POLL, Step};
use crate::crd::CocoonSetPhase;
use crate::names;
use crate::pods::{build, state};

/// What the migration step knows about the main, without the registry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// `spec.nodeName`, if set.
    pub target: Option<String>,
    /// The phase is `Migrating`.
    pub migrating: bool,
    /// The main pod, if any (not terminating).
    pub main: Option<MainFacts>,
}

/// The main pod, as far as migration cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MainFacts {
    /// The node it is bound to.
    pub node: Option<String>,
    /// VM id reported and a container running.
    pub live: bool,
    /// Carries `hibernate=true`.
    pub flagged: bool,
    /// vk-cocoon reports it hibernated for the set's current generation.
    pub hibernated: bool,
    /// A CocoonHibernation holds it hibernated.
    pub held_by_cr: bool,
}

impl MainFacts {
    fn on_target(&self, target: Option<&str>) -> bool {
        target.is_none_or(|t| self.node.as_deref() == Some(t))
    }

    fn elsewhere(&self, target: Option<&str>) -> bool {
        self.node.is_some() && !self.on_target(target)
    }
}

/// What to do, before or after probing the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Not a migration: the normal flow goes on.
    NotEngaged,
    /// Probe `<main>:hibernate` and [`decide`].
    Probe,
    /// Persist `Migrating`, then flag the main for hibernation.
    Start,
    /// The tag is from an earlier round: drop it.
    DropStaleTag,
    /// The old main is hibernated for this round: delete it.
    DeleteOld,
    /// Persist `Migrating` and create the main restoring from the tag.
    Restore,
    /// On the target (or unpinned) and still flagged: wake it in place.
    WakeInPlace,
    /// Waiting for hibernation or restore: `Migrating`, look again later.
    Wait,
    /// Restored and live: drop the tag.
    Finish,
}

/// The decision that needs no registry call.
pub fn before_probe(f: &Facts) -> Action {
    let target = f.target.as_deref();
    if target.is_none() && !f.migrating {
        return Action::NotEngaged;
    }
    if let Some(m) = &f.main {
        let on_target = m.on_target(target);
        if on_target && m.live && !m.flagged && !f.migrating {
            return Action::NotEngaged;
        }
        if on_target && m.flagged && m.held_by_cr {
            return Action::NotEngaged;
        }
    }
    Action::Probe
}

/// The decision once the registry said whether `<main>:hibernate` exists.
pub fn decide(f: &Facts, tag: bool) -> Action {
    let target = f.target.as_deref();
    let Some(m) = &f.main else {
        return if tag {
            Action::Restore
        } else {
            Action::NotEngaged
        };
    };
    if !tag {
        let movable = target.is_some() && m.elsewhere(target);
        return if movable {
            Action::Start
        } else {
            Action::NotEngaged
        };
    }
    if m.elsewhere(target) {
        return match (m.flagged, m.hibernated) {
            (false, _) => Action::DropStaleTag,
            (true, true) => Action::DeleteOld,
            (true, false) => Action::Wait,
        };
    }
    if m.flagged {
        return Action::WakeInPlace;
    }
    match (m.live, f.migrating) {
        (true, _) => Action::Finish,
        // Restoring, but not our migration (a CocoonHibernation wake): not ours to drive.
        (false, false) => Action::NotEngaged,
        (false, true) => Action::Wait,
    }
}

/// Drives a migration of the main; `None` when not engaged.
pub async fn migrate_main(pass: &mut Pass<'_>) -> Result<Step, Error> {
    let mut facts = facts(pass);
    let engaged = facts.target.is_some() || facts.migrating;
    if engaged && facts.main.as_ref().is_some_and(|m| m.flagged) {
        let held = pass.held_by_cr(&format!("{}-0", pass.name()));
        if let Some(m) = facts.main.as_mut() {
            m.held_by_cr = held;
        }
    }
    if before_probe(&facts) == Action::NotEngaged {
        return Ok(None);
    }
    let vm = pass.main_vm();
    let tag = pass.has_tag(&vm, names::TAG_HIBERNATE).await?;
    let main = pass.pods.main.clone();
    carry_out(pass, decide(&facts, tag), main.as_ref()).await
}

fn facts(pass: &Pass<'_>) -> Facts {
    let generation = pass.generation();
    Facts {
        target: pass.set.spec.node_name.clone().filter(|n| !n.is_empty()),
        migrating: pass.phase() == Some(CocoonSetPhase::Migrating),
        main: pass.pods.main.as_ref().map(|m| MainFacts {
            node: state::node_name(m).map(str::to_owned),
            live: state::vm_live(m),
            flagged: state::hibernate_requested(m),
            hibernated: state::hibernated_for(m, generation),
            held_by_cr: false,
        }),
    }
}

async fn carry_out(pass: &mut Pass<'_>, action: Action, main: Option<&Pod>) -> Result<Step, Error> {
    let main_name = main.map(|m| m.name_any()).unwrap_or_default();
    let after = match action {
        Action::NotEngaged | Action::Probe => return Ok(None),
        Action::Start => {
            pass.write_status(Some(CocoonSetPhase::Migrating)).await?;
            let flag = [(names::ANN_HIBERNATE, Some("true"))];
            pass.annotate_pod(&main_name, &flag).await?;
            return Ok(Some(Outcome::RequeueAfter(POLL)));
        }
        Action::Restore => {
            pass.write_status(Some(CocoonSetPhase::Migrating)).await?;
            let mut pod = build::main_pod(&pass.set);
            build::mark_restore(&mut pod);
            let after = match pass.create_pod(&pod).await? {
                Created::Yes => AGAIN,
                Created::AlreadyExists => POLL,
            };
            return Ok(Some(Outcome::RequeueAfter(after)));
        }
        // A tag is only ever dropped once a fresh read of the main confirms the decision: a
        // cache behind the registry shows an unflagged main while this round's snapshot is
        // already there.
        Action::DropStaleTag => pass.drop_main_snapshot().await.map(|_| POLL)?,
        Action::DeleteOld => pass.delete_pod(&main_name).await.map(|_| POLL)?,
        Action::WakeInPlace => pass
            .annotate_pod(&main_name, &[(names::ANN_HIBERNATE, None)])
            .await
            .map(|_| POLL)?,
        Action::Wait => POLL,
        Action::Finish => match pass.drop_main_snapshot().await? {
            true => AGAIN,
            false => POLL,
        },
    };
    pass.write_status(Some(CocoonSetPhase::Migrating)).await?;
    Ok(Some(Outcome::RequeueAfter(after)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(target: Option<&str>, migrating: bool, main: Option<MainFacts>) -> Facts {
        Facts {
            target: target.map(str::to_owned),
            migrating,
            main,
        }
    }

    fn main(node: &str, live: bool, flagged: bool, hibernated: bool) -> MainFacts {
        MainFacts {
            node: (!node.is_empty()).then(|| node.to_owned()),
            live,
            flagged,
            hibernated,
            held_by_cr: false,
        }
    }

    #[test]
    fn no_node_name_and_settled_sets_never_probe() {
        assert_eq!(before_probe(&facts(None, false, None)), Action::NotEngaged);
        let settled = facts(Some("b"), false, Some(main("b", true, false, false)));
        assert_eq!(
            before_probe(&settled),
            Action::NotEngaged,
            "skip probe when settled"
        );
        let wrong_node = facts(Some("b"), false, Some(main("a", true, false, false)));
        assert_eq!(before_probe(&wrong_node), Action::Probe);
    }

    #[test]
    fn a_cr_hibernated_main_is_left_alone() {
        let mut m = main("b", false, true, true);
        m.held_by_cr = true;
        assert_eq!(
            before_probe(&facts(Some("b"), false, Some(m))),
            Action::NotEngaged
        );
    }

    #[test]
    fn start_on_the_wrong_node_without_a_snapshot() {
        let f = facts(Some("b"), false, Some(main("a", true, false, false)));
        assert_eq!(decide(&f, false), Action::Start);
        // Unscheduled or already on target: nothing to move.
        let unscheduled = facts(Some("b"), false, Some(main("", false, false, false)));
        assert_eq!(decide(&unscheduled, false), Action::NotEngaged);
        let there = facts(Some("b"), true, Some(main("b", false, false, false)));
        assert_eq!(decide(&there, false), Action::NotEngaged);
    }

    #[test]
    fn delete_the_old_main_only_once_hibernated_for_this_round() {
        let waiting = facts(Some("b"), true, Some(main("a", false, true, false)));
        assert_eq!(
            decide(&waiting, true),
            Action::Wait,
            "a tag alone is not enough"
        );
        let done = facts(Some("b"), true, Some(main("a", false, true, true)));
        assert_eq!(decide(&done, true), Action::DeleteOld);
    }

    #[test]
    fn a_stale_tag_is_dropped_instead_of_deleting_a_live_main() {
        let f = facts(Some("b"), false, Some(main("a", true, false, false)));
        assert_eq!(decide(&f, true), Action::DropStaleTag);
    }

    #[test]
    fn recreate_with_restore_on_the_target_and_finish_aborted_restores() {
        assert_eq!(decide(&facts(Some("b"), true, None), true), Action::Restore);
        // nodeName cleared mid-way: still Migrating, still restores (without a pin).
        assert_eq!(decide(&facts(None, true, None), true), Action::Restore);
        assert_eq!(
            decide(&facts(Some("b"), true, None), false),
            Action::NotEngaged
        );
    }

    #[test]
    fn wait_while_restoring_then_drop_the_snapshot() {
        let restoring = facts(Some("b"), true, Some(main("b", false, false, false)));
        assert_eq!(decide(&restoring, true), Action::Wait);
        let live = facts(Some("b"), true, Some(main("b", true, false, false)));
        assert_eq!(before_probe(&live), Action::Probe, "Migrating still probes");
        assert_eq!(decide(&live, true), Action::Finish);
        assert_eq!(decide(&live, false), Action::NotEngaged, "then it settles");
    }

    #[test]
    fn retargeting_back_wakes_in_place() {
        let f = facts(Some("a"), true, Some(main("a", false, true, true)));
        assert_eq!(decide(&f, true), Action::WakeInPlace);
    }

    #[test]
    fn a_cr_wake_window_is_not_taken_over() {
        let f = facts(Some("b"), false, Some(main("b", false, false, false)));
        assert_eq!(before_probe(&f), Action::Probe);
        assert_eq!(decide(&f, true), Action::NotEngaged);
    }

    #[test]
    fn an_unscheduled_restore_pod_is_not_deleted() {
        let f = facts(Some("b"), true, Some(main("", false, false, false)));
        assert_eq!(decide(&f, true), Action::Wait);
    }
}
