//! The status controller (WDS): returns the status reported by WECs (WorkStatus objects in
//! the ITS) into the WDS objects that asked for it.
//!
//! Contract (one debounced, level-triggered pass; Bindings and WorkStatuses wake it):
//! - For every object of every Binding, [`plan`] decides from the policies that request
//!   singleton or multi-WEC return and their destinations (only *qualified* WECs count).
//! - Singleton: the WorkStatuses of this WDS for the object in the WEC's mailbox (several when
//!   two policies deliver it there; they report the same WEC object) agreeing on one non-null
//!   `.status` ⇒ it is written to the WDS object through the status subresource
//!   (a merge patch of the main resource when it has none), with the label
//!   `managed-by.kubestellar.io/singletonstatus: "true"`; the multi-WEC label is removed.
//!   No WorkStatus ⇒ cleared.
//! - Multi: the non-null statuses of the qualified WECs: none ⇒ cleared; one ⇒ copied as
//!   singleton; several ⇒ [`aggregate`] for Deployments, ReplicaSets and DaemonSets with the
//!   label `managed-by.kubestellar.io/multiwecstatus: "true"`.
//! - Clear: `.status: {}` and both labels removed, only for objects carrying one of the labels
//!   (objects this controller returned status to), including objects no Binding lists any
//!   more: those are found from the labels themselves ([`marked`], scanned at start beside
//!   the passes, which never wait for it) and remembered from then on, so a restart loses
//!   nothing. Namespaces and CRDs are never written.
//! - CombinedStatus (see [`combined`]): one per (object, BindingPolicy) whose merged
//!   `statusCollectors` is not empty, named `<object UID>.<policy UID>`, in the object's
//!   namespace (`kubestellar-report` for cluster-scoped objects), with upstream's five labels
//!   and an owner reference to the object; `results` for every existing, valid collector in
//!   name order. StatusCollector status (`observedGeneration`, `errors`) and the Binding's
//!   `StatusCollectorsAvailable` condition are maintained.
//! - Every write happens only when the stored value differs.

mod combined;
pub mod marked;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::{reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use stellar_core::status::{Plan, aggregate, plan};
use tokio::sync::Notify;

use crate::agent::drive;
use crate::api::{Binding, CombinedStatus, StatusCollector, WorkStatus};
use crate::names;
use crate::retry::until_ok;

/// How the status controller runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The WDS's name (WorkStatuses labelled for another WDS are ignored).
    pub wds_name: String,
}

/// A status write failed.
#[derive(Debug, thiserror::Error)]
#[error("status of {what}: {source}")]
pub struct StatusError {
    what: String,
    source: kube::Error,
}

impl StatusError {
    fn new(what: impl Into<String>, source: kube::Error) -> Self {
        Self {
            what: what.into(),
            source,
        }
    }
}

pub(crate) type Key = (String, String, String, String, String); // group, version, resource, ns, name

// (group, resource, namespace, name) → (WEC, reported status) of each WorkStatus.
type Reported = BTreeMap<(String, String, String, String), Vec<(String, Option<Value>)>>;

#[derive(Default)]
struct Wants {
    s: bool,
    qs: BTreeSet<String>,
    m: bool,
    qm: BTreeSet<String>,
}

/// Runs the status controller until dropped.
pub async fn run(wds: Client, its: Client, opts: Options) -> anyhow::Result<()> {
    let wake = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    let (bindings, w) = reflector::store::<Binding>();
    tasks.spawn(drive(
        reflector(
            w,
            watcher(Api::all(wds.clone()), watcher::Config::default()),
        ),
        wake.clone(),
    ));
    let (statuses, w) = reflector::store::<WorkStatus>();
    tasks.spawn(drive(
        reflector(
            w,
            watcher(Api::all(its.clone()), watcher::Config::default()),
        ),
        wake.clone(),
    ));
    let (collectors, w) = reflector::store::<StatusCollector>();
    tasks.spawn(drive(
        reflector(
            w,
            watcher(Api::all(wds.clone()), watcher::Config::default()),
        ),
        wake.clone(),
    ));
    let (combined, w) = reflector::store::<CombinedStatus>();
    tasks.spawn(drive(
        reflector(
            w,
            watcher(Api::all(wds.clone()), watcher::Config::default()),
        ),
        wake.clone(),
    ));
    bindings.wait_until_ready().await?;
    statuses.wait_until_ready().await?;
    collectors.wait_until_ready().await?;
    combined.wait_until_ready().await?;
    until_ok("creating the kubestellar-report namespace", || {
        crate::hub::ensure_namespace(&wds, names::REPORT_NAMESPACE)
    })
    .await;
    let stores = combined::Stores {
        bindings: bindings.clone(),
        statuses: statuses.clone(),
        collectors,
        combined,
    };
    // Objects returned status to before (this process or an earlier one), from their labels:
    // scanned beside the passes, so returning status for what the Bindings want now never
    // waits for the scan; what it finds joins `returned` when it is done.
    let (found_tx, mut found) = tokio::sync::oneshot::channel();
    {
        let (wds, wake) = (wds.clone(), wake.clone());
        tasks.spawn(async move {
            let m = marked::labelled(&wds).await;
            tracing::info!(objects = m.len(), "objects with returned status");
            let _ = found_tx.send(m);
            wake.notify_one();
        });
    }
    let mut returned = BTreeSet::new();
    let mut backoff = Duration::from_millis(100);
    wake.notify_one();
    loop {
        wake.notified().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Ok(m) = found.try_recv() {
            returned.extend(m);
        }
        let mut errors = pass(&wds, &opts, &bindings, &statuses, &mut returned).await;
        errors.extend(combined::pass(&wds, &opts, &stores).await);
        if errors.is_empty() {
            backoff = Duration::from_millis(100);
        } else {
            for e in &errors {
                tracing::warn!(error = %e, "status return failed; retrying");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            wake.notify_one();
        }
    }
}

fn wants(bindings: &Store<Binding>) -> BTreeMap<Key, Wants> {
    let mut out: BTreeMap<Key, Wants> = BTreeMap::new();
    for b in bindings.state() {
        let dests: BTreeSet<String> = b
            .spec
            .destinations
            .iter()
            .map(|d| d.cluster_id.clone())
            .collect();
        let w = &b.spec.workload;
        let entries = w
            .cluster_scope
            .iter()
            .map(|c| {
                (
                    (
                        c.object.group.clone(),
                        c.object.version.clone(),
                        c.object.resource.clone(),
                        String::new(),
                        c.object.name.clone(),
                    ),
                    &c.modulation,
                )
            })
            .chain(w.namespace_scope.iter().map(|c| {
                (
                    (
                        c.object.group.clone(),
                        c.object.version.clone(),
                        c.object.resource.clone(),
                        c.object.namespace.clone(),
                        c.object.name.clone(),
                    ),
                    &c.modulation,
                )
            }));
        for (key, m) in entries {
            let e = out.entry(key).or_default();
            if m.want_singleton_reported_state {
                e.s = true;
                e.qs.extend(dests.iter().cloned());
            }
            if m.want_multi_wec_reported_state {
                e.m = true;
                e.qm.extend(dests.iter().cloned());
            }
        }
    }
    out
}

pub(crate) fn api_for(wds: &Client, k: &Key) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: k.0.clone(),
        version: k.1.clone(),
        api_version: if k.0.is_empty() {
            k.1.clone()
        } else {
            format!("{}/{}", k.0, k.1)
        },
        kind: String::new(),
        plural: k.2.clone(),
    };
    if k.3.is_empty() {
        Api::all_with(wds.clone(), &ar)
    } else {
        Api::namespaced_with(wds.clone(), &k.3, &ar)
    }
}

// `returned`: the objects this controller returned status to and has not cleared since (an
// object whose every Binding went is not in any Binding any more, but must be cleared).
async fn pass(
    wds: &Client,
    opts: &Options,
    bindings: &Store<Binding>,
    statuses: &Store<WorkStatus>,
    returned: &mut BTreeSet<Key>,
) -> Vec<StatusError> {
    let mut errors = Vec::new();
    // WorkStatuses of this WDS by (object, WEC).
    let mut reported: Reported = BTreeMap::new();
    for ws in statuses.state() {
        if ws
            .labels()
            .get(names::WDS_LABEL)
            .is_some_and(|w| w != &opts.wds_name)
        {
            continue;
        }
        let r = &ws.spec.spec.source_ref;
        reported
            .entry((
                r.group.clone(),
                r.resource.clone(),
                r.namespace.clone(),
                r.name.clone(),
            ))
            .or_default()
            .push((
                ws.namespace().unwrap_or_default(),
                ws.status.as_ref().map(|s| s.0.clone()),
            ));
    }
    let mut all = wants(bindings);
    for k in returned.iter() {
        all.entry(k.clone()).or_default();
    }
    for (key, w) in all {
        let (group, _, resource, ns, name) = &key;
        if (group.is_empty() && resource == "namespaces")
            || (group == "apiextensions.k8s.io" && resource == "customresourcedefinitions")
        {
            continue;
        }
        let from = |wec: &str| -> Vec<Option<Value>> {
            reported
                .get(&(group.clone(), resource.clone(), ns.clone(), name.clone()))
                .map(|v| {
                    v.iter()
                        .filter(|(n, _)| n == wec)
                        .map(|(_, s)| s.clone())
                        .collect()
                })
                .unwrap_or_default()
        };
        let decided = plan(w.s, &w.qs, w.m, &w.qm);
        let target: Option<(Option<Value>, &str)> = match &decided {
            Plan::Singleton(wec) => {
                // Several WorkStatuses in one WEC (two policies deliver the object there) report
                // the same WEC object: one distinct status is the answer.
                let reports = from(wec);
                let mut distinct: Vec<Value> = reports
                    .iter()
                    .flatten()
                    .filter(|s| !s.is_null())
                    .cloned()
                    .collect();
                distinct.sort_by_key(|v| v.to_string());
                distinct.dedup();
                match (reports.is_empty(), distinct.as_slice()) {
                    (true, _) => Some((None, "")),
                    (false, [s]) => Some((Some(s.clone()), names::SINGLETON_STATUS_LABEL)),
                    // No status reported yet, or the reports still disagree: leave as is.
                    (false, _) => None,
                }
            }
            Plan::Multi(q) => {
                // One status per WEC (several WorkStatuses in one WEC report one object).
                let got: Vec<Value> = q
                    .iter()
                    .filter_map(|wec| from(wec).into_iter().flatten().find(|s| !s.is_null()))
                    .collect();
                match got.len() {
                    0 => Some((None, "")),
                    1 => Some((Some(got[0].clone()), names::SINGLETON_STATUS_LABEL)),
                    _ => {
                        let api = api_for(wds, &key);
                        let kind = match api.get_opt(name).await {
                            Ok(Some(o)) => o.types.map(|t| t.kind).unwrap_or_default(),
                            _ => String::new(),
                        };
                        aggregate(group, &kind, &got)
                            .map(|a| (Some(a), names::MULTIWEC_STATUS_LABEL))
                    }
                }
            }
            Plan::Clear => Some((None, "")),
        };
        let Some((status, label)) = target else {
            continue;
        };
        let clearing = status.is_none();
        if clearing && !returned.contains(&key) {
            continue; // never returned status to it (its labels say so): nothing to clear, no GET
        }
        match write(wds, &key, status, label).await {
            Ok(()) if clearing => {
                returned.remove(&key);
            }
            Ok(()) => {
                returned.insert(key);
            }
            Err(e) => errors.push(e),
        }
    }
    errors
}

// Writes `status` (None: clear) and keeps exactly `label` of the two status labels.
async fn write(
    wds: &Client,
    key: &Key,
    status: Option<Value>,
    label: &str,
) -> Result<(), StatusError> {
    let api = api_for(wds, key);
    let what = format!("{} {}/{}", key.2, key.3, key.4);
    let err = |source| StatusError {
        what: what.clone(),
        source,
    };
    let Some(live) = api.get_opt(&key.4).await.map_err(err)? else {
        return Ok(());
    };
    let labels = live.labels();
    let has = |l: &str| labels.contains_key(l);
    if status.is_none() && !has(names::SINGLETON_STATUS_LABEL) && !has(names::MULTIWEC_STATUS_LABEL)
    {
        return Ok(()); // never returned status to it: nothing to clear
    }
    let want_status = status.unwrap_or_else(|| json!({}));
    if live.data.get("status") != Some(&want_status) {
        let mut body = live.clone();
        body.data["status"] = want_status.clone();
        let pp = PostParams::default();
        match api.replace_status(&key.4, &pp, &body).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                api.patch(
                    &key.4,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": want_status})),
                )
                .await
                .map_err(err)?;
            }
            Err(e) => return Err(err(e)),
        }
        tracing::info!(object = %what, "returned status");
    }
    let mut patch = serde_json::Map::new();
    for l in [names::SINGLETON_STATUS_LABEL, names::MULTIWEC_STATUS_LABEL] {
        if l == label && !has(l) {
            patch.insert(l.into(), json!("true"));
        } else if l != label && has(l) {
            patch.insert(l.into(), Value::Null);
        }
    }
    if !patch.is_empty() {
        api.patch(
            &key.4,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": patch}})),
        )
        .await
        .map_err(err)?;
    }
    Ok(())
}
