//! Dynamic watching of every served resource of the WDS: one metadata watch per resource (in
//! its preferred version) that the upstream exclusions allow, started and stopped as CRDs come
//! and go.
//!
//! Contract:
//! - [`Workloads::sync`] runs discovery and reconciles the set of watches with it: a resource
//!   newly served gets a watch, one no longer served loses its watch and its objects leave the
//!   index. One version per resource (upstream watched every served version of a new CRD and
//!   saw its objects twice).
//! - Each watch writes the index (a restart re-lists and replaces that resource's objects) and
//!   wakes the writer; a watch error is logged and the watch retries with back-off.
//! - [`watch_crds`] re-runs [`Workloads::sync`] on every CRD event, and once for the whole
//!   list of CRDs when its watch (re-)lists them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use stellar_core::resolve::{ObjInfo, ObjRef, watched};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::index::{Gvr, Index};

/// The set of running watches.
pub struct Workloads {
    client: Client,
    index: Arc<Mutex<Index>>,
    wake: Arc<Notify>,
    api_groups: Vec<String>,
    tasks: tokio::sync::Mutex<BTreeMap<Gvr, JoinHandle<()>>>,
}

impl Workloads {
    /// Watches of the WDS behind `client`, writing `index` and waking `wake`; `api_groups`
    /// limits the groups (empty: all).
    pub fn new(
        client: Client,
        index: Arc<Mutex<Index>>,
        wake: Arc<Notify>,
        api_groups: Vec<String>,
    ) -> Self {
        Self {
            client,
            index,
            wake,
            api_groups,
            tasks: Default::default(),
        }
    }

    /// Discovers the served resources and starts or stops watches to match.
    pub async fn sync(&self) -> Result<(), kube::Error> {
        let discovery = crate::discover::served(&self.client).await?;
        let mut want: BTreeMap<Gvr, ApiResource> = BTreeMap::new();
        for group in discovery.groups() {
            for (ar, caps) in group.recommended_resources() {
                if watched(&ar.group, &ar.plural, &caps.operations, &self.api_groups) {
                    let gvr = Gvr {
                        group: ar.group.clone(),
                        version: ar.version.clone(),
                        resource: ar.plural.clone(),
                    };
                    want.insert(gvr, ar);
                }
            }
        }
        let mut tasks = self.tasks.lock().await;
        let gone: Vec<Gvr> = tasks
            .keys()
            .filter(|g| !want.contains_key(*g))
            .cloned()
            .collect();
        for gvr in gone {
            if let Some(t) = tasks.remove(&gvr) {
                t.abort();
            }
            self.index.lock().expect("index lock").unwatch(&gvr);
            tracing::info!(group = %gvr.group, resource = %gvr.resource, "stopped watching");
        }
        for (gvr, ar) in want {
            if tasks.contains_key(&gvr) {
                continue;
            }
            self.index
                .lock()
                .expect("index lock")
                .watching
                .insert(gvr.clone());
            tracing::debug!(group = %gvr.group, version = %gvr.version, resource = %gvr.resource, "watching");
            let t = tokio::spawn(watch_one(
                self.client.clone(),
                gvr.clone(),
                ar,
                self.index.clone(),
                self.wake.clone(),
            ));
            tasks.insert(gvr, t);
        }
        drop(tasks);
        self.wake.notify_one();
        Ok(())
    }

    /// Stops every watch.
    pub async fn stop(&self) {
        for (_, t) in std::mem::take(&mut *self.tasks.lock().await) {
            t.abort();
        }
    }
}

fn obj_ref(gvr: &Gvr, meta: &PartialObjectMeta<DynamicObject>) -> ObjRef {
    ObjRef {
        group: gvr.group.clone(),
        version: gvr.version.clone(),
        resource: gvr.resource.clone(),
        namespace: meta.namespace().unwrap_or_default(),
        name: meta.name_any(),
    }
}

fn obj_info(meta: &PartialObjectMeta<DynamicObject>) -> ObjInfo {
    ObjInfo {
        uid: meta.uid().unwrap_or_default(),
        resource_version: meta.resource_version().unwrap_or_default(),
        labels: meta.labels().clone(),
    }
}

async fn watch_one(
    client: Client,
    gvr: Gvr,
    ar: ApiResource,
    index: Arc<Mutex<Index>>,
    wake: Arc<Notify>,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(group = %gvr.group, resource = %gvr.resource, error = %e, "watch failed; retrying");
                continue;
            }
        };
        let mut ix = index.lock().expect("index lock");
        let changed = match ev {
            watcher::Event::Init => {
                ix.relist_start(&gvr);
                false
            }
            watcher::Event::InitApply(m) => {
                ix.relist_object(&gvr, obj_ref(&gvr, &m), obj_info(&m));
                false
            }
            watcher::Event::InitDone => {
                ix.relist_done(&gvr);
                true
            }
            watcher::Event::Apply(m) => {
                let info = obj_info(&m);
                ix.objects.insert(obj_ref(&gvr, &m), info.clone()) != Some(info)
            }
            watcher::Event::Delete(m) => ix.objects.remove(&obj_ref(&gvr, &m)).is_some(),
        };
        drop(ix);
        if changed {
            wake.notify_one();
        }
    }
}

/// Re-discovers on every CRD event (a CRD established or removed changes what is served).
pub async fn watch_crds(client: Client, workloads: Arc<Workloads>) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    // The CRDs of a (re-)list, synced once it is complete: one discovery for all of them, not
    // one per CRD (a start against a WDS with many CRDs would otherwise run discovery, tens of
    // requests, once per CRD).
    let mut listed: Vec<(CustomResourceDefinition, bool)> = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(crd)) => listed.push((crd, false)),
            Ok(watcher::Event::InitDone) => {
                sync_until_settled(&workloads, &std::mem::take(&mut listed)).await
            }
            Ok(watcher::Event::Apply(crd)) => sync_until_settled(&workloads, &[(crd, false)]).await,
            Ok(watcher::Event::Delete(crd)) => sync_until_settled(&workloads, &[(crd, true)]).await,
            Err(e) => tracing::warn!(error = %e, "CRD watch failed; retrying"),
        }
    }
}

// Syncs the watches with discovery until they agree with every CRD of `crds` (each with
// whether it is gone). Discovery can lag a CRD's Established condition or its removal by a
// moment: retried with back-off, 12 times at most.
async fn sync_until_settled(workloads: &Workloads, crds: &[(CustomResourceDefinition, bool)]) {
    let mut delay = Duration::from_millis(100);
    for _ in 0..12 {
        match workloads.sync().await {
            Ok(()) if crds.iter().all(|(crd, gone)| workloads.settled(crd, *gone)) => break,
            Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "discovery failed; retrying"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

impl Workloads {
    // Whether the watches agree with `crd`: an established, served CRD's resource is watched;
    // a removed one's is not.
    fn settled(&self, crd: &CustomResourceDefinition, gone: bool) -> bool {
        let ix = self.index.lock().expect("index lock");
        let group = &crd.spec.group;
        let plural = &crd.spec.names.plural;
        let is_watched = ix
            .watching
            .iter()
            .any(|g| &g.group == group && &g.resource == plural);
        if gone {
            return !is_watched;
        }
        let established = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if !established || crd.metadata.deletion_timestamp.is_some() {
            return true;
        }
        let wanted = watched(
            group,
            plural,
            &["list".into(), "watch".into()],
            &self.api_groups,
        );
        !wanted || is_watched
    }
}
