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
//! - A tag found while the main was never quiesced is stale and is dropped, not trusted.

use k8s_openapi::api::core::v1::Pod;
use kit::reconcile::Outcome;
use kube::ResourceExt;

use super::pass::{Created, Pass};
use super::{AGAIN, Error, POLL, Step};
use crate::crd::CocoonSetPhase;
use crate::names;
use crate::pods::{build, state};

/// Drives a migration of the main; `None` when not engaged.
pub async fn migrate_main(pass: &mut Pass<'_>) -> Result<Step, Error> {
    let target = pass.set.spec.node_name.clone().filter(|n| !n.is_empty());
    let migrating = pass.phase() == Some(CocoonSetPhase::Migrating);
    if target.is_none() && !migrating {
        return Ok(None);
    }
    let main = pass.pods.main.clone();
    if let Some(m) = &main {
        let on_target = on_target(m, target.as_deref());
        // Settled. While the phase still says Migrating, go on: the tag must be dropped.
        if on_target && state::vm_live(m) && !state::hibernate_requested(m) && !migrating {
            return Ok(None);
        }
        if on_target && state::hibernate_requested(m) && held_by_cr(pass, m).await? {
            return Ok(None);
        }
    }
    let vm = pass.main_vm();
    if !pass.has_tag(&vm, names::TAG_HIBERNATE).await? {
        return start(pass, main.as_ref(), target.as_deref()).await;
    }
    with_snapshot(pass, main.as_ref(), target.as_deref(), &vm, migrating).await
}

fn on_target(main: &Pod, target: Option<&str>) -> bool {
    target.is_none_or(|t| state::node_name(main) == Some(t))
}

async fn held_by_cr(pass: &Pass<'_>, main: &Pod) -> Result<bool, Error> {
    Ok(pass.hibernation_holds().await?.contains(&main.name_any()))
}

/// No snapshot yet: quiesce a main that sits on the wrong node.
async fn start(pass: &Pass<'_>, main: Option<&Pod>, target: Option<&str>) -> Result<Step, Error> {
    let Some(main) = main else { return Ok(None) };
    if target.is_none() || state::node_name(main).is_none() || on_target(main, target) {
        return Ok(None);
    }
    pass.write_status(Some(CocoonSetPhase::Migrating)).await?;
    if !state::hibernate_requested(main) {
        pass.annotate_pod(&main.name_any(), &[(names::ANN_HIBERNATE, Some("true"))])
            .await?;
    }
    Ok(Some(Outcome::RequeueAfter(POLL)))
}

async fn with_snapshot(
    pass: &mut Pass<'_>,
    main: Option<&Pod>,
    target: Option<&str>,
    vm: &str,
    migrating: bool,
) -> Result<Step, Error> {
    let Some(main) = main else {
        return restore_on_target(pass).await;
    };
    let name = main.name_any();
    if state::node_name(main).is_some() && !on_target(main, target) {
        if !state::hibernate_requested(main) {
            // Never quiesced by us: the tag is left from an earlier round.
            pass.drop_tag(vm, names::TAG_HIBERNATE).await?;
        } else if state::hibernated_for(main, pass.generation()) {
            pass.delete_pod(&name).await?;
        }
        return migrating_for(pass, POLL).await;
    }
    if state::hibernate_requested(main) {
        // On the target (or unpinned) and still flagged: wake it in place.
        pass.annotate_pod(&name, &[(names::ANN_HIBERNATE, None)])
            .await?;
        return migrating_for(pass, POLL).await;
    }
    if !state::vm_live(main) {
        if !migrating {
            // Restoring, but not our migration (a CocoonHibernation wake): not ours to drive.
            return Ok(None);
        }
        return migrating_for(pass, POLL).await;
    }
    pass.drop_tag(vm, names::TAG_HIBERNATE).await?;
    migrating_for(pass, AGAIN).await
}

async fn restore_on_target(pass: &mut Pass<'_>) -> Result<Step, Error> {
    pass.write_status(Some(CocoonSetPhase::Migrating)).await?;
    let mut pod = build::main_pod(&pass.set);
    build::mark_restore(&mut pod);
    let after = match pass.create_pod(&pod).await? {
        Created::Yes => AGAIN,
        Created::AlreadyExists => POLL,
    };
    Ok(Some(Outcome::RequeueAfter(after)))
}

async fn migrating_for(pass: &Pass<'_>, after: std::time::Duration) -> Result<Step, Error> {
    pass.write_status(Some(CocoonSetPhase::Migrating)).await?;
    Ok(Some(Outcome::RequeueAfter(after)))
}
