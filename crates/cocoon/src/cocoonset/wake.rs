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
//!   raises `WakeNoCapacity` (once per distinct scheduler message) and never fails the set.
//! - Waking and the VM live: drop the tag, count the placement once, drop the hint.
//! - A cached main that is suspended with a hint is checked against the API (the cache may
//!   still show a pod the release deleted): gone → wait; present → not engaged.

use kit::reconcile::Outcome;
use kube::ResourceExt;

use super::pass::Pass;
use super::{AGAIN, Error, POLL, Step};
use crate::crd::CocoonSetPhase;
use crate::metrics::{CocoonMetrics, PlacementLabels};
use crate::names;
use crate::pods::{build, state};

/// Drives a wake of a released main; `None` when not engaged.
pub async fn wake_released(pass: &mut Pass<'_>) -> Result<Step, Error> {
    let phase = pass.phase();
    let hint = pass
        .set_annotation(names::ANN_HIBERNATED_ON_NODE)
        .map(str::to_owned);
    let main = pass.pods.main.clone();
    let unfinished = main.as_ref().is_some_and(|m| {
        state::flag(m, names::ANN_RESTORE) && !state::hibernate_requested(m) && hint.is_some()
    });
    let engaged = match phase {
        Some(CocoonSetPhase::Waking | CocoonSetPhase::Suspended) => true,
        Some(CocoonSetPhase::Suspending) => hint.is_some(),
        _ => unfinished,
    };
    if !engaged {
        return Ok(None);
    }
    let Some(main) = main else {
        return restore_main(pass, hint.as_deref()).await;
    };
    if phase == Some(CocoonSetPhase::Waking) || unfinished {
        if state::vm_live(&main) {
            return complete(pass, &main, hint.as_deref()).await;
        }
        if let Some(msg) = state::unschedulable(&main) {
            no_capacity(pass, &main.name_any(), &msg).await;
        }
        pass.write_status(Some(CocoonSetPhase::Waking)).await?;
        return Ok(Some(Outcome::RequeueAfter(POLL)));
    }
    if hint.is_some()
        && !state::is_terminal(&main)
        && pass.live_pod(&main.name_any()).await?.is_none()
    {
        return Ok(Some(Outcome::RequeueAfter(POLL)));
    }
    Ok(None)
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

async fn complete(
    pass: &Pass<'_>,
    main: &k8s_openapi::api::core::v1::Pod,
    hint: Option<&str>,
) -> Result<Step, Error> {
    pass.drop_tag(&pass.main_vm(), names::TAG_HIBERNATE).await?;
    if let Some(hint) = hint {
        let placement = if state::node_name(main) == Some(hint) {
            "hint-node"
        } else {
            "pool"
        };
        let labels = PlacementLabels {
            namespace: pass.namespace().to_owned(),
            cocoonset: pass.name(),
            placement: placement.to_owned(),
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
