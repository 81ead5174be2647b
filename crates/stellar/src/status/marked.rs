//! Which WDS objects carry status this controller returned, from durable state: the objects
//! labelled `managed-by.kubestellar.io/singletonstatus` or `…/multiwecstatus` (the labels the
//! status controller puts on every object it writes status to and removes when it clears).
//!
//! Contract: [`labelled`] lists, in every served resource the binding controller would watch,
//! the objects carrying either label (metadata only, one LIST per label per resource). The
//! status controller seeds its set of objects to clear from it at start, so an object whose
//! every policy went while the controller was down is still cleared after a restart.
//! Resources that cannot be listed (404/405: gone since discovery) are skipped.

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use stellar_core::resolve::watched;

use super::Key;
use crate::names;

/// The objects of the WDS behind `wds` carrying a status-return label.
pub async fn labelled(wds: &Client) -> Result<BTreeSet<Key>, kube::Error> {
    let discovery = kube::discovery::Discovery::new(wds.clone()).run().await?;
    let mut out = BTreeSet::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if !watched(&ar.group, &ar.plural, &caps.operations, &[]) {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(wds.clone(), &ar);
            for label in [names::SINGLETON_STATUS_LABEL, names::MULTIWEC_STATUS_LABEL] {
                let list = match api
                    .list_metadata(&ListParams::default().labels(label))
                    .await
                {
                    Ok(l) => l,
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => continue,
                    Err(e) => return Err(e),
                };
                for o in list.items {
                    out.insert((
                        ar.group.clone(),
                        ar.version.clone(),
                        ar.plural.clone(),
                        o.namespace().unwrap_or_default(),
                        o.name_any(),
                    ));
                }
            }
        }
    }
    Ok(out)
}
