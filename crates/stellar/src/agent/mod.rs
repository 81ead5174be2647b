//! The work agent (one per WEC, OCM-compatible): applies the ManifestWorks of its mailbox
//! namespace on the ITS to the WEC, and (in [`status`]) the status add-on's WorkStatus
//! reports back to the ITS.
//!
//! Contract (one debounced, level-triggered pass over the mailbox, applying up to 8
//! ManifestWorks at once; between resyncs only ManifestWorks whose generation was not yet
//! applied; every [`RESYNC`] all of them, which repairs drift on the WEC):
//! - A live ManifestWork gets the finalizer
//!   `cluster.open-cluster-management.io/manifest-work-cleanup`, and an AppliedManifestWork
//!   `<hub hash>-<ManifestWork name>` on the WEC (spec `hubHash`, `agentID`,
//!   `manifestWorkName`; finalizer `…/applied-manifest-work-cleanup`).
//! - Manifests are applied in OCM's kind order, each owned by the AppliedManifestWork (owner
//!   UID with a trailing `-` under deleteOption Orphan or a matching SelectivelyOrphan rule),
//!   by its update strategy: `Update` (create, else merge metadata and PUT only when the live
//!   object lacks something the manifest says), `CreateOnly` (create, else only ensure the
//!   owner), `ServerSideApply` (field manager `work-agent` or the configured one, `force` as
//!   configured), `ReadOnly` (only checks existence; never owned). A manifest that fails to
//!   apply keeps what it applied before (listed, owned, never pruned for the failure).
//! - The AppliedManifestWork's `status.appliedResources` lists what was applied (sorted);
//!   resources a ManifestWork no longer carries are pruned: deleted (UID precondition) when
//!   this AppliedManifestWork is their only one and no other live ManifestWork of the mailbox
//!   carries them (a hand-over, e.g. re-sharding by the transport; checked on the cache, then
//!   on a fresh list before anything is deleted), else only disowned.
//! - ManifestWork status: `Applied` and `Available` conditions and per-manifest
//!   `resourceStatus` with `Applied`/`Available` conditions; written only when it changes.
//! - A ManifestWork being deleted, or an AppliedManifestWork of this hub whose ManifestWork
//!   is gone: its resources are pruned (or disowned under Orphan), the AppliedManifestWork is
//!   deleted, then the ManifestWork's finalizer is removed.
//! - A manifest that fails leaves the others applied; the pass is retried with back-off.

pub mod status;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    PostParams, Preconditions,
};
use kube::discovery::Scope;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use stellar_core::agent::{Prune, apply_rank, contains, merge_for_update, prune};
use tokio::sync::Notify;

use crate::names;
use crate::ocm::{
    AppliedManifestResourceMeta, AppliedManifestWork, DeletePropagationPolicyType, ManifestWork,
    ManifestWorkStatus, UpdateStrategyType,
};

/// How often every ManifestWork is re-applied even without events (drift repair).
pub const RESYNC: Duration = Duration::from_secs(60);

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The WEC's name: its ManagedCluster and mailbox namespace.
    pub cluster_name: String,
    /// [`hub_hash`] of the ITS's URL.
    pub hub_hash: String,
    /// The agent's identity (recorded in AppliedManifestWorks).
    pub agent_id: String,
}

/// OCM's hub hash: lowercase hex SHA-256 of the hub's API server URL.
pub fn hub_hash(url: &str) -> String {
    Sha256::digest(url.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A step of the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Writing the ManifestWork (finalizer, status) on the ITS.
    #[error("ManifestWork {name}: {source}")]
    Work {
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Writing an AppliedManifestWork on the WEC.
    #[error("AppliedManifestWork {name}: {source}")]
    Applied {
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Applying or pruning one resource on the WEC.
    #[error("{what}: {message}")]
    Resource {
        /// The resource.
        what: String,
        /// What went wrong.
        message: String,
    },
}

// A served kind: its API resource and whether it is namespaced.
type Kind = (ApiResource, bool);

struct Ctx {
    its: Client,
    wec: Client,
    opts: Options,
    works: Store<ManifestWork>,
    applied: Store<AppliedManifestWork>,
    kinds: Mutex<HashMap<(String, String, String), Kind>>,
    // ManifestWork name → generation last applied without error.
    done: Mutex<HashMap<String, i64>>,
    // Set by the resync tick: the next pass re-applies everything.
    resync: AtomicBool,
}

/// Runs the work agent and the status add-on until dropped.
pub async fn run(its: Client, wec: Client, opts: Options) -> anyhow::Result<()> {
    let wake = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    let (works, w) = reflector::store::<ManifestWork>();
    let mw_api: Api<ManifestWork> = Api::namespaced(its.clone(), &opts.cluster_name);
    tasks.spawn(drive(
        reflector(w, watcher(mw_api, watcher::Config::default())),
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
    works.wait_until_ready().await?;
    applied.wait_until_ready().await?;
    let ctx = Arc::new(Ctx {
        its: its.clone(),
        wec: wec.clone(),
        opts: opts.clone(),
        works: works.clone(),
        applied: applied.clone(),
        kinds: Mutex::default(),
        done: Mutex::default(),
        resync: AtomicBool::new(true),
    });
    tasks.spawn(async move {
        if let Err(e) = status::run(its, wec, opts).await {
            tracing::error!(error = %e, "status add-on stopped");
        }
    });
    let tick = wake.clone();
    let tick_ctx = ctx.clone();
    tasks.spawn(async move {
        let mut every = tokio::time::interval(RESYNC);
        loop {
            every.tick().await;
            tick_ctx.resync.store(true, Ordering::SeqCst);
            tick.notify_one();
        }
    });
    let mut backoff = Duration::from_millis(100);
    wake.notify_one();
    loop {
        wake.notified().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let errors = pass(&ctx).await;
        if errors.is_empty() {
            backoff = Duration::from_millis(100);
        } else {
            for e in &errors {
                tracing::warn!(cluster = %ctx.opts.cluster_name, error = %e, "work agent step failed; retrying");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            wake.notify_one();
        }
    }
}

pub(crate) async fn drive<K, S>(stream: S, wake: Arc<Notify>)
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let stream = stream.default_backoff();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(_) => wake.notify_one(),
            Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
        }
    }
}

fn amw_name(opts: &Options, work: &str) -> String {
    format!("{}-{work}", opts.hub_hash)
}

/// ManifestWorks applied concurrently.
const CONCURRENCY: usize = 8;

async fn pass(ctx: &Ctx) -> Vec<AgentError> {
    let resync = ctx.resync.swap(false, Ordering::SeqCst);
    let works = ctx.works.state();
    // Between resyncs, a live ManifestWork already applied at its generation (with its
    // AppliedManifestWork present) is skipped: only changed work costs requests.
    let todo: Vec<Arc<ManifestWork>> = works
        .iter()
        .filter(|mw| {
            resync
                || mw.meta().deletion_timestamp.is_some()
                || ctx.done.lock().expect("done lock").get(&mw.name_any())
                    != mw.meta().generation.as_ref()
                || ctx
                    .applied
                    .get(&ObjectRef::new(&amw_name(&ctx.opts, &mw.name_any())))
                    .is_none()
        })
        .cloned()
        .collect();
    let results: Vec<Result<(), AgentError>> = futures::stream::iter(todo)
        .map(|mw| async move {
            let name = mw.name_any();
            if mw.meta().deletion_timestamp.is_some() {
                ctx.done.lock().expect("done lock").remove(&name);
                retire(ctx, &name, Some(&mw)).await
            } else {
                let r = apply_work(ctx, &mw).await;
                let mut done = ctx.done.lock().expect("done lock");
                match (&r, mw.meta().generation) {
                    (Ok(()), Some(g)) => {
                        done.insert(name, g);
                    }
                    _ => {
                        done.remove(&name);
                    }
                }
                r
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut errors: Vec<AgentError> = results.into_iter().filter_map(Result::err).collect();
    let live: BTreeSet<String> = works.iter().map(|w| w.name_any()).collect();
    ctx.done
        .lock()
        .expect("done lock")
        .retain(|n, _| live.contains(n));
    for amw in ctx.applied.state() {
        if amw.spec.hub_hash == ctx.opts.hub_hash
            && !live.contains(&amw.spec.manifest_work_name)
            && let Err(e) = retire(ctx, &amw.spec.manifest_work_name, None).await
        {
            errors.push(e);
        }
    }
    errors
}

// The API resource of a manifest's group/version/kind on the WEC (cached discovery).
async fn resource_of(
    ctx: &Ctx,
    api_version: &str,
    kind: &str,
) -> Result<(ApiResource, bool), String> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let key = (group.to_owned(), version.to_owned(), kind.to_owned());
    if let Some(r) = ctx.kinds.lock().expect("kinds lock").get(&key) {
        return Ok(r.clone());
    }
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(&ctx.wec, &gvk)
        .await
        .map_err(|e| format!("{kind}.{api_version} is not served on the WEC: {e}"))?;
    let namespaced = caps.scope == Scope::Namespaced;
    ctx.kinds
        .lock()
        .expect("kinds lock")
        .insert(key, (ar.clone(), namespaced));
    Ok((ar, namespaced))
}

fn dynamic_api(
    client: &Client,
    ar: &ApiResource,
    namespaced: bool,
    ns: &str,
) -> Api<DynamicObject> {
    if namespaced {
        Api::namespaced_with(client.clone(), ns, ar)
    } else {
        Api::all_with(client.clone(), ar)
    }
}

async fn ensure_applied(
    ctx: &Ctx,
    mw: &ManifestWork,
) -> Result<Arc<AppliedManifestWork>, AgentError> {
    let name = amw_name(&ctx.opts, &mw.name_any());
    if let Some(a) = ctx.applied.get(&ObjectRef::new(&name)) {
        return Ok(a);
    }
    let api: Api<AppliedManifestWork> = Api::all(ctx.wec.clone());
    let err = |source| AgentError::Applied {
        name: name.clone(),
        source,
    };
    if let Some(a) = api.get_opt(&name).await.map_err(err)? {
        return Ok(Arc::new(a));
    }
    let mut a = AppliedManifestWork::new(
        &name,
        crate::ocm::AppliedManifestWorkSpec {
            hub_hash: ctx.opts.hub_hash.clone(),
            agent_id: ctx.opts.agent_id.clone(),
            manifest_work_name: mw.name_any(),
        },
    );
    a.metadata.finalizers = Some(vec![names::APPLIED_MANIFEST_WORK_FINALIZER.to_owned()]);
    let a = api.create(&PostParams::default(), &a).await.map_err(err)?;
    tracing::info!(cluster = %ctx.opts.cluster_name, name = %name, "created AppliedManifestWork");
    Ok(Arc::new(a))
}

/// One manifest's outcome.
struct Outcome {
    meta: crate::ocm::ManifestResourceMeta,
    applied: Result<Option<AppliedManifestResourceMeta>, String>,
}

async fn apply_work(ctx: &Ctx, mw: &ManifestWork) -> Result<(), AgentError> {
    let name = mw.name_any();
    let mw_api: Api<ManifestWork> = Api::namespaced(ctx.its.clone(), &ctx.opts.cluster_name);
    kit::finalizers::add(&mw_api, mw, names::MANIFEST_WORK_FINALIZER)
        .await
        .map_err(|source| AgentError::Work {
            name: name.clone(),
            source,
        })?;
    let amw = ensure_applied(ctx, mw).await?;
    let amw_uid = amw.uid().unwrap_or_default();
    let mut order: Vec<(usize, &Value)> = mw.spec.workload.manifests.iter().enumerate().collect();
    order.sort_by_key(|(i, m)| (apply_rank(m["kind"].as_str().unwrap_or_default()), *i));
    let mut outcomes = Vec::new();
    for (ordinal, manifest) in order {
        outcomes.push(apply_one(ctx, mw, &amw, &amw_uid, ordinal, manifest).await);
    }
    outcomes.sort_by_key(|o| o.meta.ordinal);
    let mut now_applied: Vec<AppliedManifestResourceMeta> = outcomes
        .iter()
        .filter_map(|o| o.applied.as_ref().ok().cloned().flatten())
        .collect();
    now_applied.sort();
    let before = amw.status.clone().unwrap_or_default().applied_resources;
    let mut errors = Vec::new();
    for r in &before {
        let still = now_applied.iter().any(|n| {
            n.group == r.group
                && n.resource == r.resource
                && n.namespace == r.namespace
                && n.name == r.name
        });
        if still {
            continue;
        }
        // A resource this pass failed to apply is still carried: it stays listed (and owned)
        // as it was; only what the ManifestWork no longer carries is pruned. (Pruning it
        // deleted a wanted object from the WEC on any transient error, and the next pass
        // created it anew.)
        if outcomes
            .iter()
            .any(|o| o.applied.is_err() && carries(&o.meta, r))
        {
            now_applied.push(r.clone());
        } else if let Err(e) = prune_resource(ctx, r, &amw_uid, false).await {
            errors.push(e);
        }
    }
    now_applied.sort();
    if before != now_applied {
        let api: Api<AppliedManifestWork> = Api::all(ctx.wec.clone());
        api.patch_status(
            &amw.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"appliedResources": now_applied}})),
        )
        .await
        .map_err(|source| AgentError::Applied {
            name: amw.name_any(),
            source,
        })?;
    }
    write_status(ctx, mw, &outcomes).await?;
    for o in &outcomes {
        if let Err(message) = &o.applied {
            errors.push(AgentError::Resource {
                what: format!(
                    "{} {}/{} of ManifestWork {name}",
                    o.meta.kind, o.meta.namespace, o.meta.name
                ),
                message: message.clone(),
            });
        }
    }
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

// Whether manifest `m` is the resource `r` (its resource is unknown when discovery failed).
fn carries(m: &crate::ocm::ManifestResourceMeta, r: &AppliedManifestResourceMeta) -> bool {
    m.group == r.group
        && m.namespace == r.namespace
        && m.name == r.name
        && (m.resource == r.resource || m.resource.is_empty())
}

fn orphaned(mw: &ManifestWork, group: &str, resource: &str, ns: &str, name: &str) -> bool {
    match &mw.spec.delete_option {
        Some(d) if d.propagation_policy == DeletePropagationPolicyType::Orphan => true,
        Some(d) if d.propagation_policy == DeletePropagationPolicyType::SelectivelyOrphan => {
            d.selectively_orphan.as_ref().is_some_and(|s| {
                s.orphaning_rules.iter().any(|r| {
                    r.group == group
                        && r.resource == resource
                        && r.namespace == ns
                        && r.name == name
                })
            })
        }
        _ => false,
    }
}

async fn apply_one(
    ctx: &Ctx,
    mw: &ManifestWork,
    amw: &AppliedManifestWork,
    amw_uid: &str,
    ordinal: usize,
    manifest: &Value,
) -> Outcome {
    let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
    let kind = manifest["kind"].as_str().unwrap_or_default();
    let ns = manifest["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let mut meta = crate::ocm::ManifestResourceMeta {
        ordinal: ordinal as i32,
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
        resource: String::new(),
        name: name.to_owned(),
        namespace: ns.to_owned(),
    };
    let (ar, namespaced) = match resource_of(ctx, api_version, kind).await {
        Ok(r) => r,
        Err(e) => {
            // Discovery may be stale (a CRD applied just before): forget and retry later.
            ctx.kinds.lock().expect("kinds lock").clear();
            return Outcome {
                meta,
                applied: Err(e),
            };
        }
    };
    meta.resource = ar.plural.clone();
    let strategy = mw
        .spec
        .manifest_configs
        .iter()
        .find(|c| {
            let r = &c.resource_identifier;
            r.group == group && r.resource == ar.plural && r.namespace == ns && r.name == name
        })
        .and_then(|c| c.update_strategy.clone())
        .unwrap_or_default();
    let owner_uid = if orphaned(mw, group, &ar.plural, ns, name) {
        format!("{amw_uid}-")
    } else {
        amw_uid.to_owned()
    };
    let owner = json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "AppliedManifestWork",
        "name": amw.name_any(),
        "uid": owner_uid,
    });
    let mut desired = manifest.clone();
    if let Some(m) = desired["metadata"].as_object_mut() {
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
        ] {
            m.remove(f);
        }
        let mut owners = m
            .get("ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        owners.push(owner.clone());
        m.insert("ownerReferences".into(), Value::Array(owners));
    }
    let api = dynamic_api(&ctx.wec, &ar, namespaced, ns);
    let res = apply_by_strategy(&api, &strategy, &desired, name, &owner).await;
    let applied = res.map(|uid| {
        uid.map(|uid| AppliedManifestResourceMeta {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: ar.plural.clone(),
            namespace: ns.to_owned(),
            name: name.to_owned(),
            uid,
        })
    });
    Outcome { meta, applied }
}

fn owned_by(live: &Value, owner_uid: &str) -> bool {
    live["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| o.iter().any(|r| r["uid"].as_str() == Some(owner_uid)))
}

// Applies one object; the UID of what is now owned (None for ReadOnly).
async fn apply_by_strategy(
    api: &Api<DynamicObject>,
    strategy: &crate::ocm::UpdateStrategy,
    desired: &Value,
    name: &str,
    owner: &Value,
) -> Result<Option<String>, String> {
    let owner_uid = owner["uid"].as_str().unwrap_or_default();
    let to_obj = |v: &Value| -> Result<DynamicObject, String> {
        serde_json::from_value(v.clone()).map_err(|e| e.to_string())
    };
    let uid_of = |o: &DynamicObject| o.uid();
    match strategy.type_ {
        UpdateStrategyType::ReadOnly => match api.get_opt(name).await.map_err(|e| e.to_string())? {
            Some(_) => Ok(None),
            None => Err("not found (ReadOnly)".into()),
        },
        UpdateStrategyType::ServerSideApply => {
            let cfg = strategy.server_side_apply.clone().unwrap_or_default();
            let manager = if cfg.field_manager.is_empty() {
                names::WORK_AGENT_FIELD_MANAGER.to_owned()
            } else {
                cfg.field_manager
            };
            let mut pp = PatchParams::apply(&manager);
            pp.force = cfg.force;
            let o = api
                .patch(name, &pp, &Patch::Apply(desired))
                .await
                .map_err(|e| e.to_string())?;
            Ok(uid_of(&o))
        }
        UpdateStrategyType::CreateOnly | UpdateStrategyType::Update => {
            let live = api.get_opt(name).await.map_err(|e| e.to_string())?;
            let Some(live) = live else {
                return match api.create(&PostParams::default(), &to_obj(desired)?).await {
                    Ok(o) => Ok(uid_of(&o)),
                    Err(e) => Err(e.to_string()),
                };
            };
            let live_v = serde_json::to_value(&live).map_err(|e| e.to_string())?;
            if strategy.type_ == UpdateStrategyType::CreateOnly {
                if !owned_by(&live_v, owner_uid) {
                    let mut owners = live_v["metadata"]["ownerReferences"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    owners.push(owner.clone());
                    api.patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"ownerReferences": owners}})),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                }
                return Ok(live.uid());
            }
            let mut without_owners = desired.clone();
            if let Some(m) = without_owners["metadata"].as_object_mut() {
                m.remove("ownerReferences");
            }
            if contains(&live_v, &without_owners) && owned_by(&live_v, owner_uid) {
                return Ok(live.uid());
            }
            let merged = merge_for_update(&live_v, desired);
            let o = api
                .replace(name, &PostParams::default(), &to_obj(&merged)?)
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(name, "updated a resource on the WEC");
            Ok(uid_of(&o))
        }
    }
}

async fn prune_resource(
    ctx: &Ctx,
    r: &AppliedManifestResourceMeta,
    amw_uid: &str,
    orphan: bool,
) -> Result<(), AgentError> {
    let what = format!("{} {}/{}", r.resource, r.namespace, r.name);
    let e = |message: String| AgentError::Resource {
        what: what.clone(),
        message,
    };
    let ar = ApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: if r.group.is_empty() {
            r.version.clone()
        } else {
            format!("{}/{}", r.group, r.version)
        },
        kind: String::new(),
        plural: r.resource.clone(),
    };
    let api = dynamic_api(&ctx.wec, &ar, !r.namespace.is_empty(), &r.namespace);
    let Some(live) = api.get_opt(&r.name).await.map_err(|x| e(x.to_string()))? else {
        return Ok(());
    };
    if !r.uid.is_empty() && live.uid().as_deref() != Some(r.uid.as_str()) {
        return Ok(()); // a different object of the same name: not ours
    }
    let owners: Vec<(String, String)> = live
        .owner_references()
        .iter()
        .map(|o| (o.kind.clone(), o.uid.clone()))
        .collect();
    let decision = match prune(&owners, amw_uid) {
        Prune::Delete if orphan => Prune::Disown,
        // Handed over (e.g. moved to another ManifestWork when the transport re-shards):
        // the other ManifestWork's apply takes ownership; deleting would flap the object.
        Prune::Delete if carried_elsewhere(ctx, &ctx.works.state(), r, amw_uid) => Prune::Disown,
        // The cache may not have the receiving ManifestWork yet: a delete is only decided on
        // a fresh list of the mailbox.
        Prune::Delete if carried_elsewhere(ctx, &mailbox(ctx).await?, r, amw_uid) => Prune::Disown,
        d => d,
    };
    match decision {
        Prune::Leave => Ok(()),
        Prune::Disown => {
            let keep: Vec<_> = live
                .owner_references()
                .iter()
                .filter(|o| o.uid != amw_uid && o.uid != format!("{amw_uid}-"))
                .cloned()
                .collect();
            api.patch(
                &r.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"ownerReferences": keep}})),
            )
            .await
            .map_err(|x| e(x.to_string()))?;
            tracing::info!(resource = %what, "disowned a resource on the WEC");
            Ok(())
        }
        Prune::Delete => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: live.uid(),
                    resource_version: None,
                }),
                propagation_policy: Some(kube::api::PropagationPolicy::Background),
                ..Default::default()
            };
            match api.delete(&r.name, &dp).await {
                Ok(_) => {
                    tracing::info!(resource = %what, "deleted a resource on the WEC");
                    Ok(())
                }
                Err(kube::Error::Api(x)) if x.code == 404 || x.code == 409 => Ok(()),
                Err(x) => Err(e(x.to_string())),
            }
        }
    }
}

// Whether a live ManifestWork of the mailbox other than the one `amw_uid` applies carries
// the resource `r`.
/// The mailbox's ManifestWorks, read from the ITS (not the cache).
async fn mailbox(ctx: &Ctx) -> Result<Vec<Arc<ManifestWork>>, AgentError> {
    let api: Api<ManifestWork> = Api::namespaced(ctx.its.clone(), &ctx.opts.cluster_name);
    let list = api
        .list(&Default::default())
        .await
        .map_err(|e| AgentError::Resource {
            what: format!("ManifestWorks of {}", ctx.opts.cluster_name),
            message: e.to_string(),
        })?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}

fn carried_elsewhere(
    ctx: &Ctx,
    works: &[Arc<ManifestWork>],
    r: &AppliedManifestResourceMeta,
    amw_uid: &str,
) -> bool {
    let kinds: BTreeSet<String> = ctx
        .kinds
        .lock()
        .expect("kinds lock")
        .iter()
        .filter(|((g, _, _), (ar, _))| g == &r.group && ar.plural == r.resource)
        .map(|((_, _, k), _)| k.clone())
        .collect();
    works.iter().any(|mw| {
        let mine = ctx
            .applied
            .get(&ObjectRef::new(&amw_name(&ctx.opts, &mw.name_any())))
            .is_some_and(|a| a.uid().as_deref() == Some(amw_uid));
        !mine
            && mw.meta().deletion_timestamp.is_none()
            && mw.spec.workload.manifests.iter().any(|m| {
                let av = m["apiVersion"].as_str().unwrap_or_default();
                let group = av.split_once('/').map_or("", |(g, _)| g);
                group == r.group
                    && kinds.contains(m["kind"].as_str().unwrap_or_default())
                    && m["metadata"]["namespace"].as_str().unwrap_or_default() == r.namespace
                    && m["metadata"]["name"].as_str().unwrap_or_default() == r.name
            })
    })
}

async fn retire(ctx: &Ctx, work: &str, mw: Option<&ManifestWork>) -> Result<(), AgentError> {
    let name = amw_name(&ctx.opts, work);
    let api: Api<AppliedManifestWork> = Api::all(ctx.wec.clone());
    if let Some(amw) = ctx.applied.get(&ObjectRef::new(&name)) {
        let uid = amw.uid().unwrap_or_default();
        for r in amw.status.clone().unwrap_or_default().applied_resources {
            let orphan =
                mw.is_some_and(|mw| orphaned(mw, &r.group, &r.resource, &r.namespace, &r.name));
            prune_resource(ctx, &r, &uid, orphan).await?;
        }
        let err = |source| AgentError::Applied {
            name: name.clone(),
            source,
        };
        kit::finalizers::remove(&api, &amw, names::APPLIED_MANIFEST_WORK_FINALIZER)
            .await
            .map_err(err)?;
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(AgentError::Applied {
                    name: name.clone(),
                    source,
                });
            }
        }
        tracing::info!(cluster = %ctx.opts.cluster_name, name = %name, "removed AppliedManifestWork");
    }
    if let Some(mw) = mw {
        let mw_api: Api<ManifestWork> = Api::namespaced(ctx.its.clone(), &ctx.opts.cluster_name);
        kit::finalizers::remove(&mw_api, mw, names::MANIFEST_WORK_FINALIZER)
            .await
            .map_err(|source| AgentError::Work {
                name: work.to_owned(),
                source,
            })?;
    }
    Ok(())
}

fn condition(
    prev: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: i64,
) -> Condition {
    let status = if ok { "True" } else { "False" }.to_owned();
    let since = prev
        .iter()
        .find(|c| {
            c.type_ == type_ && c.status == status && c.reason == reason && c.message == message
        })
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
        observed_generation: Some(generation),
        last_transition_time: since,
    }
}

async fn write_status(
    ctx: &Ctx,
    mw: &ManifestWork,
    outcomes: &[Outcome],
) -> Result<(), AgentError> {
    let generation = mw.meta().generation.unwrap_or_default();
    let prev = mw.status.clone().unwrap_or_default();
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.applied.is_err()).collect();
    let mut manifests = Vec::new();
    for o in outcomes {
        let prev_conds: Vec<Condition> = prev
            .resource_status
            .manifests
            .iter()
            .find(|m| m.resource_meta.ordinal == o.meta.ordinal)
            .map(|m| m.conditions.clone())
            .unwrap_or_default();
        let (ok, reason, message) = match &o.applied {
            Ok(_) => (
                true,
                "AppliedManifestComplete",
                "Apply manifest complete".to_owned(),
            ),
            Err(e) => (
                false,
                "AppliedManifestFailed",
                format!("Failed to apply manifest: {e}"),
            ),
        };
        let available = o.applied.is_ok();
        manifests.push(crate::ocm::ManifestCondition {
            resource_meta: o.meta.clone(),
            status_feedbacks: Default::default(),
            conditions: vec![
                condition(&prev_conds, "Applied", ok, reason, message, generation),
                condition(
                    &prev_conds,
                    "Available",
                    available,
                    if available {
                        "ResourceAvailable"
                    } else {
                        "ResourceNotAvailable"
                    },
                    if available {
                        "Resource is available"
                    } else {
                        "Resource is not available"
                    }
                    .to_owned(),
                    generation,
                ),
            ],
        });
    }
    let all_ok = failed.is_empty();
    let status = ManifestWorkStatus {
        conditions: vec![
            condition(
                &prev.conditions,
                "Applied",
                all_ok,
                if all_ok {
                    "AppliedManifestWorkComplete"
                } else {
                    "AppliedManifestWorkFailed"
                },
                if all_ok {
                    "Apply manifest work complete".to_owned()
                } else {
                    format!(
                        "Failed to apply manifest work: {} of {} manifests failed",
                        failed.len(),
                        outcomes.len()
                    )
                },
                generation,
            ),
            condition(
                &prev.conditions,
                "Available",
                all_ok,
                if all_ok {
                    "ResourcesAvailable"
                } else {
                    "ResourcesNotAvailable"
                },
                if all_ok {
                    "All resources are available"
                } else {
                    "One or more resources are not available"
                }
                .to_owned(),
                generation,
            ),
        ],
        resource_status: crate::ocm::ManifestResourceStatus { manifests },
    };
    if mw.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mw_api: Api<ManifestWork> = Api::namespaced(ctx.its.clone(), &ctx.opts.cluster_name);
    mw_api
        .patch_status(
            &mw.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .map_err(|source| AgentError::Work {
            name: mw.name_any(),
            source,
        })?;
    Ok(())
}

/// The ManifestWorks of a mailbox by name (for the status add-on).
pub fn works_by_name(works: &Store<ManifestWork>) -> BTreeMap<String, Arc<ManifestWork>> {
    works
        .state()
        .into_iter()
        .map(|w| (w.name_any(), w))
        .collect()
}
