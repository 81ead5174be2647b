//! The status add-on's agent (kubestellar/ocm-status-addon's contract): for every object an
//! AppliedManifestWork of this hub applied on the WEC (except RBAC, Secrets, ConfigMaps and
//! ServiceAccounts), one WorkStatus in the WEC's mailbox namespace on the ITS.
//!
//! Contract:
//! - Name [`work_status_name`]; labels: the ManifestWork's labels plus
//!   `managed-by.kubestellar.io/singletonstatus` copied from the WEC object when it has it;
//!   owner reference (controller) to the ManifestWork, so the hub's garbage collector removes
//!   it with the work; `spec.sourceRef` {group, version, resource, kind, name, namespace};
//!   `status`: the WEC object's raw `.status` (absent when the object has none).
//! - Objects are watched (one watch per resource, started and stopped as AppliedManifestWorks
//!   list them) so a status change on the WEC reaches the ITS without polling.
//! - A WorkStatus whose object is gone (or no longer applied) is deleted; writes happen only
//!   when something differs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use stellar_core::agent::{status_skipped, work_status_name};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{AgentError, Options, drive};
use crate::api::WorkStatus;
use crate::names;
use crate::ocm::{AppliedManifestWork, ManifestWork};

type Gvr = (String, String, String);

struct Watch {
    store: Store<DynamicObject>,
    task: JoinHandle<()>,
}

struct Ctx {
    its: Client,
    wec: Client,
    opts: Options,
    works: Store<ManifestWork>,
    applied: Store<AppliedManifestWork>,
    statuses: Store<WorkStatus>,
    wake: Arc<Notify>,
}

/// Runs the status add-on until dropped.
pub async fn run(its: Client, wec: Client, opts: Options) -> anyhow::Result<()> {
    let wake = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    let (works, w) = reflector::store::<ManifestWork>();
    let api: Api<ManifestWork> = Api::namespaced(its.clone(), &opts.cluster_name);
    tasks.spawn(drive(
        reflector(w, watcher(api, watcher::Config::default())),
        wake.clone(),
    ));
    let (applied, w) = reflector::store::<AppliedManifestWork>();
    tasks.spawn(drive(
        reflector(
            w,
            watcher(Api::all(wec.clone()), watcher::Config::default()),
        ),
        wake.clone(),
    ));
    let (statuses, w) = reflector::store::<WorkStatus>();
    let api: Api<WorkStatus> = Api::namespaced(its.clone(), &opts.cluster_name);
    tasks.spawn(drive(
        reflector(w, watcher(api, watcher::Config::default())),
        wake.clone(),
    ));
    works.wait_until_ready().await?;
    applied.wait_until_ready().await?;
    statuses.wait_until_ready().await?;
    let ctx = Ctx {
        its,
        wec,
        opts,
        works,
        applied,
        statuses,
        wake: wake.clone(),
    };
    let mut watches: BTreeMap<Gvr, Watch> = BTreeMap::new();
    let mut backoff = Duration::from_millis(100);
    wake.notify_one();
    loop {
        wake.notified().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let errors = pass(&ctx, &mut watches).await;
        if errors.is_empty() {
            backoff = Duration::from_millis(100);
        } else {
            for e in &errors {
                tracing::warn!(cluster = %ctx.opts.cluster_name, error = %e, "status add-on write failed; retrying");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            wake.notify_one();
        }
    }
}

fn api_resource(g: &Gvr) -> ApiResource {
    ApiResource {
        group: g.0.clone(),
        version: g.1.clone(),
        api_version: if g.0.is_empty() {
            g.1.clone()
        } else {
            format!("{}/{}", g.0, g.1)
        },
        kind: String::new(),
        plural: g.2.clone(),
    }
}

async fn pass(ctx: &Ctx, watches: &mut BTreeMap<Gvr, Watch>) -> Vec<AgentError> {
    let mut errors = Vec::new();
    let works: BTreeMap<String, Arc<ManifestWork>> = super::works_by_name(&ctx.works);
    // (amw, mw, resource) for every reported object.
    let mut wanted_gvrs: BTreeMap<Gvr, ()> = BTreeMap::new();
    let mut desired: BTreeMap<String, Value> = BTreeMap::new();
    let mut pending = false;
    for amw in ctx.applied.state() {
        if amw.spec.hub_hash != ctx.opts.hub_hash {
            continue;
        }
        let Some(mw) = works.get(&amw.spec.manifest_work_name) else {
            continue;
        };
        let amw_uid = amw.uid().unwrap_or_default();
        for r in amw.status.clone().unwrap_or_default().applied_resources {
            if status_skipped(&r.group, &r.resource) {
                continue;
            }
            let gvr: Gvr = (r.group.clone(), r.version.clone(), r.resource.clone());
            wanted_gvrs.insert(gvr.clone(), ());
            let Some(w) = watches.get(&gvr) else {
                pending = true;
                continue;
            };
            if w.store.wait_until_ready().now_or_never().is_none() {
                pending = true;
                continue;
            }
            let oref = if r.namespace.is_empty() {
                ObjectRef::new_with(&r.name, api_resource(&gvr))
            } else {
                ObjectRef::new_with(&r.name, api_resource(&gvr)).within(&r.namespace)
            };
            let Some(obj) = w.store.get(&oref) else {
                continue;
            };
            // The kind, from the manifest (list items may come without apiVersion/kind).
            let kind = mw
                .spec
                .workload
                .manifests
                .iter()
                .find(|m| {
                    m["metadata"]["name"].as_str() == Some(r.name.as_str())
                        && m["metadata"]["namespace"].as_str().unwrap_or_default() == r.namespace
                        && m["apiVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .split_once('/')
                            .map_or("", |(g, _)| g)
                            == r.group
                })
                .and_then(|m| m["kind"].as_str().map(str::to_owned))
                .or_else(|| obj.types.as_ref().map(|t| t.kind.clone()))
                .unwrap_or_default();
            let name =
                work_status_name(&amw_uid, &r.group, &r.version, &kind, &r.namespace, &r.name);
            let mut labels: BTreeMap<String, String> = mw.labels().clone();
            if let Some(v) = obj.labels().get(names::SINGLETON_STATUS_LABEL) {
                labels.insert(names::SINGLETON_STATUS_LABEL.to_owned(), v.clone());
            }
            let mut ws = json!({
                "apiVersion": "control.kubestellar.io/v1alpha1",
                "kind": "WorkStatus",
                "metadata": {
                    "name": name,
                    "namespace": ctx.opts.cluster_name,
                    "labels": labels,
                    "ownerReferences": [{
                        "apiVersion": "work.open-cluster-management.io/v1",
                        "kind": "ManifestWork",
                        "name": mw.name_any(),
                        "uid": mw.uid().unwrap_or_default(),
                        "controller": true,
                    }],
                },
                "spec": {"sourceRef": {
                    "group": r.group, "version": r.version, "resource": r.resource,
                    "kind": kind, "name": r.name, "namespace": r.namespace,
                }},
                "statusDetails": {
                    "lastGeneration": 0,
                    "lastGenerationIsApplied": false,
                    "lastCurrencyUpdateTime": "1970-01-01T00:00:00Z",
                },
            });
            if let Some(s) = obj.data.get("status") {
                ws["status"] = s.clone();
            }
            desired.insert(name, ws);
        }
    }
    // Watches follow what is applied.
    let gone: Vec<Gvr> = watches
        .keys()
        .filter(|g| !wanted_gvrs.contains_key(*g))
        .cloned()
        .collect();
    for g in gone {
        if let Some(w) = watches.remove(&g) {
            w.task.abort();
        }
    }
    for g in wanted_gvrs.keys() {
        if !watches.contains_key(g) {
            let writer = reflector::store::Writer::new(api_resource(g));
            let store = writer.as_reader();
            let api: Api<DynamicObject> = Api::all_with(ctx.wec.clone(), &api_resource(g));
            let task = tokio::spawn(drive(
                reflector(writer, watcher(api, watcher::Config::default())),
                ctx.wake.clone(),
            ));
            watches.insert(g.clone(), Watch { store, task });
        }
    }
    let api: Api<WorkStatus> = Api::namespaced(ctx.its.clone(), &ctx.opts.cluster_name);
    for (name, want) in &desired {
        let have = ctx
            .statuses
            .get(&ObjectRef::new(name).within(&ctx.opts.cluster_name));
        if let Err(source) = write_one(&api, name, want, have.as_deref()).await {
            errors.push(AgentError::Resource {
                what: format!("WorkStatus {name}"),
                message: source.to_string(),
            });
        }
    }
    if !pending {
        for ws in ctx.statuses.state() {
            let name = ws.name_any();
            if !desired.contains_key(&name) && ws.meta().deletion_timestamp.is_none() {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => errors.push(AgentError::Resource {
                        what: format!("WorkStatus {name}"),
                        message: e.to_string(),
                    }),
                }
            }
        }
    }
    if pending {
        ctx.wake.notify_one();
    }
    errors
}

async fn write_one(
    api: &Api<WorkStatus>,
    name: &str,
    want: &Value,
    have: Option<&WorkStatus>,
) -> Result<(), kube::Error> {
    let Some(have) = have else {
        let ws: WorkStatus =
            serde_json::from_value(want.clone()).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &ws).await {
            Ok(_) => {}
            Err(e) if kit::errors::already_exists(&e) => {}
            Err(e) => return Err(e),
        }
        if want.get("status").is_some() {
            api.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": want["status"]})),
            )
            .await?;
        }
        return Ok(());
    };
    let have_v = serde_json::to_value(have).map_err(kube::Error::SerdeError)?;
    let meta_same = have_v["metadata"]["labels"] == want["metadata"]["labels"]
        && have_v["spec"] == want["spec"];
    if !meta_same {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": want["metadata"]["labels"]}, "spec": want["spec"]}),
            ),
        )
        .await?;
    }
    let have_status = have_v.get("status").cloned().unwrap_or(Value::Null);
    let want_status = want.get("status").cloned().unwrap_or(Value::Null);
    if have_status != want_status {
        // Replace the whole status (a merge patch would keep removed keys).
        let mut body = have_v.clone();
        body["status"] = want_status;
        let body: WorkStatus = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
        api.replace_status(name, &PostParams::default(), &body)
            .await?;
    }
    Ok(())
}
