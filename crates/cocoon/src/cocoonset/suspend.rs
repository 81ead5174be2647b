//! `suspend`: `spec.suspend: true` hibernates every VM of the set (reference §4.4, §4.5).
//!
//! Contract:
//! - Every owned pod gets `vm.cocoonstack.io/hibernate=true`.
//! - The set is `Suspended` only when every managed, non-terminal VM is verifiably
//!   hibernated for the current generation: vk-cocoon's lifecycle state `hibernated` with an
//!   observed generation at least the set's, AND `<vm>:hibernate` present in the registry. A
//!   tag alone proves nothing (it may be left from an earlier round). A registry error is an
//!   error (back-off), never a verdict. Until then: `Suspending`, look again in 5 s. The
//!   registry is asked only once every VM's lifecycle says hibernated, and once per VM per
//!   round (a confirmed tag is remembered until this operator deletes it).
//! - No pod is created while suspended. (Upstream creates a missing main just to hibernate
//!   it, which can fresh-boot a VM and push a snapshot of nothing; here a missing main stays
//!   missing and unsuspend restores it from its tag, see `wake`.)
//! - `release` policy: once verified, the VM names are stashed for deletion-time cleanup, the
//!   main's node is remembered as a placement hint, and every non-terminal pod is deleted
//!   (marked `keep-snapshot-on-delete` first, best effort). Terminal pods stay for triage.
//!   The `:hibernate` tag is never dropped by suspend.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kit::reconcile::Outcome;
use kube::ResourceExt;

use super::pass::Pass;
use super::{Error, POLL};
use crate::crd::{CocoonSetPhase, HibernatePolicy};
use crate::metrics::CocoonMetrics;
use crate::names;
use crate::pods::state;

/// Suspends the set; always ends the pass.
pub async fn suspend(pass: &mut Pass<'_>) -> Result<Outcome, Error> {
    let release = pass.set.spec.hibernate_policy == HibernatePolicy::Release;
    if release && pass.pods.all.is_empty() {
        pass.write_status(Some(CocoonSetPhase::Suspended)).await?;
        return Ok(Outcome::Done);
    }
    flag_all(pass).await?;
    if !all_hibernated(pass).await? {
        pass.write_status(Some(CocoonSetPhase::Suspending)).await?;
        return Ok(Outcome::RequeueAfter(POLL));
    }
    if release {
        release_seats(pass).await?;
        pass.write_status(Some(CocoonSetPhase::Suspended)).await?;
        return Ok(Outcome::RequeueAfter(POLL));
    }
    pass.write_status(Some(CocoonSetPhase::Suspended)).await?;
    Ok(Outcome::Done)
}

async fn flag_all(pass: &Pass<'_>) -> Result<(), Error> {
    let mut unflagged: Vec<String> = pass
        .pods
        .all
        .iter()
        .filter(|p| !state::hibernate_requested(p))
        .map(|p| p.name_any())
        .collect();
    unflagged.sort();
    // The set's pods are flagged at once (each patch is independent and idempotent).
    let flag = [(names::ANN_HIBERNATE, Some("true"))];
    futures::future::try_join_all(unflagged.iter().map(|pod| pass.annotate_pod(pod, &flag)))
        .await?;
    Ok(())
}

/// Whether every VM that can hibernate has, for this generation, with its tag present. The
/// lifecycle of every VM is checked before any registry probe, and a tag confirmed for the
/// same pod and generation is not probed again (`Context::hibernate_tags`), so a round costs
/// one probe per VM however many passes it takes.
pub async fn all_hibernated(pass: &Pass<'_>) -> Result<bool, Error> {
    let generation = pass.generation();
    let mut vms = Vec::new();
    for pod in pass.pods.all.iter().filter(|p| must_hibernate(p)) {
        let Some(vm) = state::vm_name(pod) else {
            return Ok(false);
        };
        if !state::hibernated_for(pod, generation) {
            return Ok(false);
        }
        vms.push((vm, pod.uid().unwrap_or_default()));
    }
    let tags = &pass.ctx.hibernate_tags;
    for (vm, uid) in vms {
        if tags.confirmed(vm, &uid, generation) {
            continue;
        }
        if !pass.has_tag(vm, names::TAG_HIBERNATE).await? {
            return Ok(false);
        }
        tags.record(vm, &uid, generation);
    }
    Ok(true)
}

/// Static toolboxes are not ours to hibernate, and failed VMs cannot be.
fn must_hibernate(pod: &Pod) -> bool {
    state::is_managed(pod) && !state::is_terminal(pod)
}

async fn release_seats(pass: &Pass<'_>) -> Result<(), Error> {
    let mut vms: BTreeSet<String> = pass
        .set_annotation(names::ANN_DELETE_VM_NAMES)
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    vms.extend(
        pass.pods
            .all
            .iter()
            .filter_map(state::vm_name)
            .map(str::to_owned),
    );
    let joined = vms.into_iter().collect::<Vec<_>>().join(",");
    let node = pass
        .pods
        .main
        .as_ref()
        .and_then(state::node_name)
        .map(str::to_owned);
    let mut changes = vec![(names::ANN_DELETE_VM_NAMES, Some(joined.as_str()))];
    if let Some(node) = node.as_deref() {
        changes.push((names::ANN_HIBERNATED_ON_NODE, Some(node)));
    }
    pass.annotate_set(&changes).await?;
    let mut live: Vec<&Pod> = pass
        .pods
        .all
        .iter()
        .filter(|p| !state::is_terminal(p))
        .collect();
    live.sort_by_key(|p| p.name_any());
    let labels = CocoonMetrics::set(pass.namespace(), &pass.name());
    for pod in live {
        let name = pod.name_any();
        // Best effort: without the flag vk-cocoon drops its node-local copy (a slower wake).
        if let Err(e) = pass
            .annotate_pod(&name, &[(names::ANN_KEEP_SNAPSHOT, Some("true"))])
            .await
        {
            tracing::warn!(pod = %name, error = %e, "marking keep-snapshot-on-delete failed");
        }
        pass.delete_pod(&name).await?;
        pass.ctx
            .metrics
            .slot_release_pods_deleted
            .get_or_create(&labels)
            .inc();
    }
    Ok(())
}
