//! The continuous checks of the stellar `placement` scenario, over watch caches of the WECs,
//! the ITS and the WDS (admin clients, never through the proxies), run after every event and
//! every 250 ms against the flow's [`Placement`]:
//!
//! - `delivered_unbound`: a run object on a WEC no policy ever bound it to;
//! - `applied_unwanted`: a run object newly created (a UID not seen before) on a WEC it is not
//!   wanted on now (e.g. re-created on the WEC it moved away from by a stale ManifestWork);
//! - `deleted_while_wanted`: a run object deleted (being deleted, or gone after it was seen)
//!   from a WEC it is wanted on;
//! - `two_manifest_works`: two ManifestWorks of one Binding carrying one object in one
//!   mailbox;
//! - `stale_status`: the status returned to the WDS Deployment from an older WEC generation
//!   than one it already showed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use stellar::names;
use stellar::ocm::ManifestWork;
use testenv::chaos::{Observer, Violations};

use crate::WDS2;
use crate::World;
use crate::flow::{Placement, RUN_LABEL, User};

/// The run's objects on one WEC.
struct Wec {
    cluster: String,
    namespaces: Store<Namespace>,
    config_maps: Store<ConfigMap>,
    deployments: Store<Deployment>,
}

/// One object seen on a WEC: `Kind/name`, UID, being deleted.
type Seen = (String, String, bool);

impl Wec {
    fn objects(&self) -> Vec<Seen> {
        fn one<K: Resource<DynamicType = ()>>(o: &K) -> Seen {
            let m = o.meta();
            (
                format!("{}/{}", K::kind(&()), m.name.clone().unwrap_or_default()),
                m.uid.clone().unwrap_or_default(),
                m.deletion_timestamp.is_some(),
            )
        }
        let mut v: Vec<Seen> = self.namespaces.state().iter().map(|o| one(&**o)).collect();
        v.extend(self.config_maps.state().iter().map(|o| one(&**o)));
        v.extend(self.deployments.state().iter().map(|o| one(&**o)));
        v
    }
}

/// Starts the watches and the checks.
pub fn observe(w: &World, user: &User, violations: &Violations) -> Observer {
    let mut obs = Observer::new();
    let cfg = || watcher::Config::default().labels(&format!("{RUN_LABEL}={}", w.ns));
    let wecs: Vec<Wec> = w
        .clusters
        .iter()
        .map(|c| Wec {
            cluster: c.name.clone(),
            namespaces: obs.watch(Api::all(c.client.clone()), cfg()),
            config_maps: obs.watch(Api::namespaced(c.client.clone(), &w.ns), cfg()),
            deployments: obs.watch(Api::namespaced(c.client.clone(), &w.ns), cfg()),
        })
        .collect();
    let (placement, v) = (user.placement.clone(), violations.clone());
    let mut seen: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    obs.check(move || placement_checks(&wecs, &placement, &mut seen, &v));

    let works: Store<ManifestWork> = obs.watch(
        Api::all(w.its.clone()),
        watcher::Config::default().labels(&format!("{}={WDS2}", names::WDS_LABEL)),
    );
    let mailboxes: BTreeSet<String> = w.clusters.iter().map(|c| c.name.clone()).collect();
    let v = violations.clone();
    obs.check(move || two_manifest_works(&works, &mailboxes, &v));

    let deployments: Store<Deployment> = obs.watch(
        Api::namespaced(w.wds.clone(), &w.ns),
        watcher::Config::default(),
    );
    let v = violations.clone();
    let mut highest: BTreeMap<String, i64> = BTreeMap::new();
    obs.check(move || stale_status(&deployments, &mut highest, &v));
    obs
}

fn placement_checks(
    wecs: &[Wec],
    placement: &Mutex<Placement>,
    seen: &mut BTreeMap<(String, String), BTreeSet<String>>,
    v: &Violations,
) {
    let p = placement.lock().expect("placement");
    for wec in wecs {
        let present = wec.objects();
        for (key, uid, deleting) in &present {
            let at = (wec.cluster.clone(), key.clone());
            if !p.allowed.contains(&at) {
                v.record(
                    "delivered_unbound",
                    format!("{key} on {} (never bound there)", wec.cluster),
                );
            }
            let new = seen.entry(at.clone()).or_default().insert(uid.clone());
            if new && !p.wanted.contains(&at) {
                v.record(
                    "applied_unwanted",
                    format!(
                        "{key} created on {} (uid {uid}) while not wanted there",
                        wec.cluster
                    ),
                );
            }
            if *deleting && p.wanted.contains(&at) {
                v.record(
                    "deleted_while_wanted",
                    format!("{key} being deleted on {} (uid {uid})", wec.cluster),
                );
            }
        }
        for at in p.wanted.iter().filter(|(c, _)| *c == wec.cluster) {
            for uid in seen.get(at).into_iter().flatten() {
                if !present.iter().any(|(k, u, _)| *k == at.1 && u == uid) {
                    v.record(
                        "deleted_while_wanted",
                        format!("{} gone from {} (uid {uid})", at.1, wec.cluster),
                    );
                }
            }
        }
    }
}

fn two_manifest_works(works: &Store<ManifestWork>, mailboxes: &BTreeSet<String>, v: &Violations) {
    let mut carried: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for mw in works.state() {
        let ns = mw.namespace().unwrap_or_default();
        if !mailboxes.contains(&ns) {
            continue;
        }
        let binding = mw
            .labels()
            .get(names::BINDING_LABEL)
            .cloned()
            .unwrap_or_default();
        for m in &mw.spec.workload.manifests {
            let object = format!(
                "{}/{}/{}",
                m["kind"].as_str().unwrap_or_default(),
                m["metadata"]["namespace"].as_str().unwrap_or_default(),
                m["metadata"]["name"].as_str().unwrap_or_default()
            );
            carried
                .entry((ns.clone(), binding.clone(), object))
                .or_default()
                .push(mw.name_any());
        }
    }
    for ((ns, binding, object), works) in carried {
        if works.len() > 1 {
            v.record(
                "two_manifest_works",
                format!("{object} of Binding {binding} in {ns}: {works:?}"),
            );
        }
    }
}

fn stale_status(
    deployments: &Store<Deployment>,
    highest: &mut BTreeMap<String, i64>,
    v: &Violations,
) {
    for d in deployments.state() {
        let Some(g) = d.status.as_ref().and_then(|s| s.observed_generation) else {
            continue;
        };
        let top = highest.entry(d.name_any()).or_insert(g);
        if g < *top {
            v.record(
                "stale_status",
                format!(
                    "Deployment {} shows the status of WEC generation {g} after {top}",
                    d.name_any()
                ),
            );
        }
        *top = (*top).max(g);
    }
}
