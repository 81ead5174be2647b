//! `finalize`: a deleted CocoonSet (reference §4.8).
//!
//! Contract:
//! 1. The VM names to clean up are stashed on the set first (status ∪ earlier stash ∪ live
//!    pods), so they survive the pods and an operator restart; when the status and an
//!    earlier stash already name every pod's VM, nothing is written.
//! 2. Every owned pod is deleted; vk-cocoon pushes `:latest` while it tears a VM down (inside
//!    DeletePod, before it releases the pod), so tags are collected only once every owned pod
//!    is gone, terminating ones included (as upstream): a pod still terminating may still be
//!    pushing. The pass waits on the pod watch (every pod deletion triggers it) with a 5 s
//!    backstop. The owned pods come from the pod cache, unless a pod this operator created
//!    for the set has not shown up in it yet ([`crate::cache::Expectations`]): then from the
//!    API server, so a pod the cache lags on is never missed.
//! 3. Per VM: `:hibernate` is deleted. `:latest` is kept for the VMs the snapshot policy
//!    snapshots (`always`: every VM; `main-only`: slot 0), which is what the policy is for;
//!    for the others it is deleted only if present, so no delete is ever issued for a tag
//!    vk-cocoon never pushed (the seed's rule), while one left from an earlier policy is
//!    still collected.
//! 4. Registry errors do not block deletion: each is logged and reported as a Warning Event
//!    (`RegistryCleanupFailed`) naming the tags that may have leaked.
//! 5. The finalizer is removed, with the version of the set the pass has (a 409 re-reads it
//!    once).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kit::reconcile::Outcome;
use kube::ResourceExt;
use kube::api::Api;

use super::pass::Pass;
use super::{Error, POLL, Reconciler};
use crate::cache::SetPods;
use crate::context::Context;
use crate::crd::{CocoonSet, SnapshotPolicy};
use crate::names::{self, VmRole};
use crate::pods::classify::{classify, controlled_by};
use crate::pods::state;

/// Runs the deletion steps; `Done` once the finalizer is gone.
pub async fn finalize(
    ctx: &Context,
    r: &Reconciler,
    set: Arc<CocoonSet>,
) -> Result<Outcome, Error> {
    if !set
        .finalizers()
        .iter()
        .any(|f| f == names::COCOONSET_FINALIZER)
    {
        let uid = set.metadata.uid.as_deref().unwrap_or_default();
        ctx.expectations.forget(uid);
        ctx.progress.settled(uid);
        ctx.written.forget(uid);
        return Ok(Outcome::Done);
    }
    let empty = classify(&set, Vec::new());
    let pass = Pass::new(ctx, set.clone(), empty, r.crs.clone());
    let owned = owned_pods(&pass, &r.pods).await?;
    let stashed = stash_vm_names(&pass, &owned).await?;
    for pod in owned
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| ctx.expectations.delete_once(p))
    {
        if let Err(e) = pass.delete_pod(&pod.name_any()).await {
            ctx.expectations.delete_failed(pod);
            return Err(e);
        }
    }
    if !owned.is_empty() {
        // Every pod's deletion (and its final removal) comes back through the pod watch and
        // triggers the next pass; the poll is a backstop.
        let pods: Vec<String> = owned.iter().map(ResourceExt::name_any).collect();
        tracing::info!(
            ?pods,
            "waiting for the pods to be gone before collecting registry tags"
        );
        return Ok(Outcome::RequeueAfter(POLL));
    }
    collect_tags(&pass, &stashed.vms).await;
    remove_finalizer(ctx, stashed.set.as_ref().unwrap_or(&set)).await?;
    ctx.expectations.forget(pass.uid());
    ctx.progress.settled(pass.uid());
    ctx.written.forget(pass.uid());
    Ok(Outcome::Done)
}

/// Every pod the set controls, terminating ones included: from the cache once it has shown
/// every pod the set's passes created ([`crate::cache::Expectations`]), else from the API
/// server.
async fn owned_pods(pass: &Pass<'_>, cache: &SetPods) -> Result<Vec<Pod>, Error> {
    let key = (pass.namespace().to_owned(), pass.name());
    let cached = cache.get(&key);
    let expectations = &pass.ctx.expectations;
    if !expectations.pending(pass.uid(), &cached) {
        let pods = cached.iter().map(|p| (**p).clone()).collect();
        return Ok(owned(&pass.set, pods));
    }
    let listed = pass.list_pods().await?;
    expectations.reset_from_list(pass.uid(), &listed, &cached);
    Ok(owned(&pass.set, listed))
}

/// The pods of `pods` that `set` controls, whether terminating or not (unlike
/// [`classify`], which leaves terminating pods out of a live pass).
pub fn owned(set: &CocoonSet, pods: Vec<Pod>) -> Vec<Pod> {
    let uid = set.metadata.uid.as_deref().unwrap_or_default();
    pods.into_iter().filter(|p| controlled_by(p, uid)).collect()
}

/// The VM names to clean up, and the set as the stash's patch returned it (when it wrote).
struct Stashed {
    vms: BTreeSet<String>,
    set: Option<CocoonSet>,
}

async fn stash_vm_names(pass: &Pass<'_>, owned: &[Pod]) -> Result<Stashed, Error> {
    let existing = pass
        .set_annotation(names::ANN_DELETE_VM_NAMES)
        .unwrap_or_default()
        .to_owned();
    let mut vms: BTreeSet<String> = existing
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if let Some(status) = &pass.set.status {
        vms.extend(status.agents.iter().map(|a| a.vm_name.clone()));
        vms.extend(status.toolboxes.iter().map(|t| t.vm_name.clone()));
    }
    // What the set already records (its status is no longer written once it is deleting)
    // survives a restart; only names the pods add need the stash.
    let recorded = vms.clone();
    vms.extend(owned.iter().filter_map(state::vm_name).map(str::to_owned));
    vms.remove("");
    let joined = vms.iter().cloned().collect::<Vec<_>>().join(",");
    let mut set = None;
    if !vms.iter().all(|vm| recorded.contains(vm)) {
        set = Some(
            pass.annotate_set(&[(names::ANN_DELETE_VM_NAMES, Some(&joined))])
                .await?,
        );
    }
    Ok(Stashed { vms, set })
}

/// Whether vk-cocoon pushes `:latest` for `vm` under `policy`.
pub fn policy_snapshots(policy: SnapshotPolicy, namespace: &str, set: &str, vm: &str) -> bool {
    match policy {
        SnapshotPolicy::Always => true,
        SnapshotPolicy::Never => false,
        SnapshotPolicy::MainOnly => names::vm_role(namespace, set, vm) == Some(VmRole::Agent(0)),
    }
}

async fn collect_tags(pass: &Pass<'_>, vms: &BTreeSet<String>) {
    let policy = pass.set.spec.snapshot_policy;
    let mut leaked = Vec::new();
    for vm in vms {
        if let Err(e) = pass.drop_tag(vm, names::TAG_HIBERNATE).await {
            tracing::warn!(error = %e, "registry cleanup failed");
            leaked.push(format!("{vm}:{}", names::TAG_HIBERNATE));
        }
        if policy_snapshots(policy, pass.namespace(), &pass.name(), vm) {
            continue;
        }
        let dropped = match pass.has_tag(vm, names::TAG_LATEST).await {
            Ok(false) => Ok(()),
            Ok(true) => pass.drop_tag(vm, names::TAG_LATEST).await,
            Err(e) => Err(e),
        };
        if let Err(e) = dropped {
            tracing::warn!(error = %e, "registry cleanup failed");
            leaked.push(format!("{vm}:{}", names::TAG_LATEST));
        }
    }
    if !leaked.is_empty() {
        let note = format!(
            "could not delete registry tags (may have leaked): {}",
            leaked.join(", ")
        );
        pass.event(true, "RegistryCleanupFailed", note).await;
    }
}

/// Removes the finalizer with the set as this pass knows it (the cache's, or the stash's
/// answer); when that is not the latest version (409), once more against a fresh read.
async fn remove_finalizer(ctx: &Context, set: &CocoonSet) -> Result<(), Error> {
    let api: Api<CocoonSet> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    match kit::finalizers::remove(&api, set, names::COCOONSET_FINALIZER).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        other => {
            return other
                .map(|_| ())
                .map_err(|source| Error::PatchSet { source });
        }
    }
    let fresh = api
        .get_opt(&set.name_any())
        .await
        .map_err(|source| Error::PatchSet { source })?;
    let Some(set) = fresh else { return Ok(()) };
    kit::finalizers::remove(&api, &set, names::COCOONSET_FINALIZER)
        .await
        .map(|_| ())
        .map_err(|source| Error::PatchSet { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminating_pods_still_hold_the_deletion() {
        let set: CocoonSet = serde_yaml::from_str(
            "{apiVersion: cocoonset.cocoonstack.io/v1, kind: CocoonSet, \
             metadata: {name: demo, namespace: ns, uid: set-uid}, spec: {agent: {image: img}}}",
        )
        .expect("set");
        let pod = |name: &str, owner: &str, terminating: bool| -> Pod {
            let deletion = if terminating {
                ", deletionTimestamp: '2026-01-01T00:00:00Z'"
            } else {
                ""
            };
            serde_yaml::from_str(&format!(
                "metadata: {{name: {name}{deletion}, ownerReferences: [{{apiVersion: v1, \
                 kind: CocoonSet, name: demo, uid: {owner}, controller: true}}]}}"
            ))
            .expect("pod")
        };
        let pods = vec![
            pod("demo-0", "set-uid", false),
            pod("demo-1", "set-uid", true),
            pod("demo-db", "other-uid", false),
        ];
        let names: Vec<String> = owned(&set, pods.clone())
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        assert_eq!(names, ["demo-0", "demo-1"], "terminating demo-1 counts");
        assert_eq!(classify(&set, pods).all.len(), 1, "a live pass skips it");
    }

    #[test]
    fn latest_is_kept_exactly_where_the_policy_snapshots() {
        let cases = [
            (SnapshotPolicy::Always, "vk-ns-demo-0", true),
            (SnapshotPolicy::Always, "vk-ns-demo-db", true),
            (SnapshotPolicy::Never, "vk-ns-demo-0", false),
            (SnapshotPolicy::MainOnly, "vk-ns-demo-0", true),
            (SnapshotPolicy::MainOnly, "vk-ns-demo-1", false),
            (SnapshotPolicy::MainOnly, "vk-ns-demo-db", false),
            (SnapshotPolicy::MainOnly, "vk-ns-demo-db-0", false),
        ];
        for (policy, vm, want) in cases {
            assert_eq!(
                policy_snapshots(policy, "ns", "demo", vm),
                want,
                "{policy:?} {vm}"
            );
        }
    }
}
