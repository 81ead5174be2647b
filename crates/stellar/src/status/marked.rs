//! Which WDS objects carry status this controller returned, from durable state: the objects
//! labelled `managed-by.kubestellar.io/singletonstatus` or `…/multiwecstatus` (the labels the
//! status controller puts on every object it writes status to and removes when it clears).
//!
//! Contract: [`labelled`] lists, in every served resource the binding controller would watch,
//! the objects carrying either label (metadata only, one LIST per label per resource, eight at
//! a time). The status controller seeds its set of objects to clear from it, so an object whose
//! every policy went while the controller was down is still cleared after a restart.
//! Resources that cannot be listed (404/405: gone since discovery) are skipped. Discovery and
//! each LIST are retried on their own until they succeed ([`crate::retry::until_ok`]): the
//! scan is about a hundred requests, and restarting all of it on any one fault would, under a
//! steady fault rate, never finish.

use std::collections::BTreeSet;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use stellar_core::resolve::watched;

use super::Key;
use crate::names;
use crate::retry::until_ok;

/// The objects of the WDS behind `wds` carrying a status-return label.
pub async fn labelled(wds: &Client) -> BTreeSet<Key> {
    let discovery = until_ok(
        "discovering the WDS's resources for returned status",
        || crate::discover::served(wds),
    )
    .await;
    let mut lists: Vec<(ApiResource, &'static str)> = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if !watched(&ar.group, &ar.plural, &caps.operations, &[]) {
                continue;
            }
            for label in [names::SINGLETON_STATUS_LABEL, names::MULTIWEC_STATUS_LABEL] {
                lists.push((ar.clone(), label));
            }
        }
    }
    // The futures are made first: a closure inside the stream trips the compiler's `Send`
    // check for the spawned scan (rust-lang/rust#102211).
    let scans: Vec<_> = lists
        .into_iter()
        .map(|(ar, label)| carrying(wds.clone(), ar, label))
        .collect();
    let found: Vec<Vec<Key>> = futures::stream::iter(scans)
        .buffer_unordered(8)
        .collect()
        .await;
    found.into_iter().flatten().collect()
}

// The objects of resource `ar` labelled `label` (none when the resource is gone).
async fn carrying(wds: Client, ar: ApiResource, label: &'static str) -> Vec<Key> {
    let api: Api<DynamicObject> = Api::all_with(wds, &ar);
    let lp = ListParams::default().labels(label);
    let what = format!("listing {} labelled {label}", ar.plural);
    let items = until_ok(&what, || list(&api, &lp)).await;
    items
        .into_iter()
        .map(|o| {
            (
                ar.group.clone(),
                ar.version.clone(),
                ar.plural.clone(),
                o.namespace().unwrap_or_default(),
                o.name_any(),
            )
        })
        .collect()
}

async fn list(
    api: &Api<DynamicObject>,
    lp: &ListParams,
) -> Result<Vec<kube::core::PartialObjectMeta<DynamicObject>>, kube::Error> {
    match api.list_metadata(lp).await {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}
