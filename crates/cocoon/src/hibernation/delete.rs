//! Deleting a CocoonHibernation: drop `<vmName>:hibernate` unless someone else still holds
//! it, then release the finalizer.
//!
//! Contract:
//! - Runs under the lock of `status.vmName`, so it never interleaves with a live pass of
//!   another CR on the same VM.
//! - The tag is kept when another CR in the namespace that is not itself being deleted has
//!   the same `status.vmName` or the same `spec.podRef.name` (duplicates tolerated: the last
//!   holder collects the tag). Without a `status.vmName` there is no tag to drop.
//! - A registry error is logged and reported as a Warning Event; the finalizer is removed
//!   anyway (best effort, like upstream). The pod is not touched: it stays as it is until a
//!   Wake CR or its CocoonSet changes it.

use kube::ResourceExt;
use kube::api::Api;

use super::{Error, apply, observe};
use crate::context::Context;
use crate::crd::CocoonHibernation;

/// Whether one of `others` still holds the tag of `me` (see the module contract).
pub fn tag_held_elsewhere(me: &CocoonHibernation, others: &[CocoonHibernation]) -> bool {
    let vm = vm_name(me);
    let pod = me.spec.pod_ref.name.as_str();
    others.iter().any(|o| {
        o.uid() != me.uid()
            && o.metadata.deletion_timestamp.is_none()
            && (vm.is_some() && vm_name(o) == vm || o.spec.pod_ref.name == pod)
    })
}

fn vm_name(cr: &CocoonHibernation) -> Option<&str> {
    cr.status
        .as_ref()
        .and_then(|s| s.vm_name.as_deref())
        .filter(|v| !v.is_empty())
}

/// Finalizes a deleting `cr` (see the module contract).
pub async fn finalize(
    ctx: &Context,
    api: &Api<CocoonHibernation>,
    cr: &CocoonHibernation,
) -> Result<(), Error> {
    if !apply::has_finalizer(cr) {
        return Ok(());
    }
    let Some(vm) = vm_name(cr) else {
        apply::remove_finalizer(api, cr).await?;
        return Ok(());
    };
    let _lock = ctx.vm_locks.lock(vm).await;
    let others = observe::siblings(api, &cr.namespace().unwrap_or_default()).await?;
    if tag_held_elsewhere(cr, &others) {
        tracing::info!(
            vm,
            "another CocoonHibernation holds the VM; keeping its tag"
        );
    } else {
        apply::drop_tag(ctx, cr, vm).await;
    }
    apply::remove_finalizer(api, cr).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(yaml: &str) -> CocoonHibernation {
        serde_yaml::from_str(yaml).expect("cr yaml")
    }

    fn named(uid: &str, pod: &str, vm: Option<&str>, deleting: bool) -> CocoonHibernation {
        let mut c = cr(&format!(
            "{{apiVersion: cocoonset.cocoonstack.io/v1, kind: CocoonHibernation, \
             metadata: {{name: {uid}, namespace: ns, uid: {uid}}}, \
             spec: {{podRef: {{name: {pod}}}, desire: Hibernate}}}}"
        ));
        if let Some(vm) = vm {
            c.status = Some(crate::crd::CocoonHibernationStatus {
                vm_name: Some(vm.into()),
                ..Default::default()
            });
        }
        if deleting {
            c.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        c
    }

    #[test]
    fn another_live_cr_on_the_vm_or_pod_keeps_the_tag() {
        let me = named("a", "p", Some("vk-ns-p"), true);
        let same_vm = named("b", "other", Some("vk-ns-p"), false);
        let same_pod = named("c", "p", None, false);
        assert!(tag_held_elsewhere(&me, &[me.clone(), same_vm]));
        assert!(tag_held_elsewhere(&me, &[me.clone(), same_pod]));
    }

    #[test]
    fn deleting_or_unrelated_crs_do_not_hold_the_tag() {
        let me = named("a", "p", Some("vk-ns-p"), true);
        let deleting = named("b", "p", Some("vk-ns-p"), true);
        let unrelated = named("c", "q", Some("vk-ns-q"), false);
        assert!(!tag_held_elsewhere(&me, &[me.clone(), deleting, unrelated]));
        assert!(!tag_held_elsewhere(&me, std::slice::from_ref(&me)));
    }

    #[test]
    fn retargeted_cr_does_not_hold_its_stale_vm() {
        // `b` once acted on vk-ns-old but now targets another pod whose VM it recorded:
        // only what its status says counts.
        let me = named("a", "p", Some("vk-ns-old"), true);
        let retargeted = named("b", "q", Some("vk-ns-q"), false);
        assert!(!tag_held_elsewhere(&me, &[retargeted]));
        let without_vm = named("d", "q", None, false);
        assert!(!tag_held_elsewhere(&me, &[without_vm]));
    }
}
