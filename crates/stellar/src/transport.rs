//! The transport (WDS → ITS): for every Binding, the selected objects wrapped into
//! ManifestWorks per destination (one object each by default), in the destination's mailbox
//! namespace of the ITS.
//!
//! Contract (one debounced, level-triggered [`pass`] over every Binding; watches only wake it):
//! - Wrapping ([`Options::limits`], upstream's `--max-num-wrapped` / `--max-size-wrapped`):
//!   `stellar_core::wrap`. With one object per ManifestWork the name is
//!   `<Binding UID>-<WDS name>-<object UID>`, otherwise `<Binding name>-<WDS name>-<shard>`.
//!   An object bigger than the size limit is named in the Binding's `status.errors` and not
//!   delivered. Labels
//!   `transport.kubestellar.io/originOwnerReferenceBindingKey=<Binding>` and
//!   `transport.kubestellar.io/originWdsName=<WDS>`; annotation
//!   `…/originOwnerReferenceBindingGeneration` (the Binding generation of the last content
//!   write) and [`HASH_ANNOTATION`], a digest of the spec. A ManifestWork is written only when
//!   its digest differs, so an object's status write (which changes its resourceVersion and
//!   hence the Binding) rewrites nothing (upstream rewrote every ManifestWork of the Binding).
//! - Content: the object as read from the WDS (cached by resourceVersion), cleaned by the
//!   built-in transforms, then every CustomTransform of its group/resource, then (when the
//!   object asks) per-WEC template expansion with the WEC's properties. CreateOnly objects get
//!   a `CreateOnly` manifest config.
//! - Writes and deletes of one Binding's ManifestWorks run up to 8 at once; writes that take
//!   an object out of a ManifestWork run after the others, and deletes last, so an object
//!   moving between ManifestWorks is handed over on the WEC, not deleted and re-created.
//! - A template error for one destination is recorded in the Binding's `status.errors` and
//!   leaves that destination's existing ManifestWork as it is (the previous copy stays on the
//!   WEC, as upstream documents; upstream's code deleted it); with several objects per
//!   ManifestWork, every ManifestWork of that destination stays as it is. An object that
//!   cannot be read keeps every ManifestWork of the Binding as it is. A failing destination (e.g. no
//!   mailbox namespace) is logged and retried; it never blocks the others.
//! - ManifestWorks no longer wanted (object or destination gone) are deleted; a Binding being
//!   deleted has every ManifestWork of it deleted (in every namespace, not only current
//!   destinations), then its finalizer `transport.kubestellar.io/object-cleanup` goes;
//!   ManifestWorks of this WDS whose Binding is gone are deleted.
//! - The Binding's status is patched (merge patch of `observedGeneration` and `errors` only,
//!   so the status controller's conditions survive) when it differs.
//! - CustomTransform status: `observedGeneration`, path errors, and a warning when several
//!   CustomTransforms name the same group/resource.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use stellar_core::transport as t;
use stellar_core::wrap as w;
use tokio::sync::Notify;

use crate::api::{Binding, CustomTransform};
use crate::names;
use crate::ocm::{ManagedCluster, ManifestWork};

/// ManifestWork annotation: digest of its spec (what decides whether to rewrite it).
pub const HASH_ANNOTATION: &str = "transport.flotilla.dev/content-hash";

/// How the transport runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The WDS's name (the `originWdsName` label and part of every ManifestWork name).
    pub wds_name: String,
    /// How many objects, and how many bytes of them, one ManifestWork carries.
    pub limits: w::Limits,
}

/// A write or read of the transport failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Reading a workload object from the WDS.
    #[error("reading {what} from the WDS: {source}")]
    Read {
        /// The object.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// Writing or deleting a ManifestWork.
    #[error("ManifestWork {namespace}/{name}: {source}")]
    Work {
        /// Mailbox namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Writing a Binding (finalizer or status) or a CustomTransform's status.
    #[error("{what}: {source}")]
    Control {
        /// What was written.
        what: String,
        /// The API error.
        source: kube::Error,
    },
}

/// What a pass reads.
pub struct Ctx {
    wds: Client,
    its: Client,
    opts: Options,
    bindings: Store<Binding>,
    transforms: Store<CustomTransform>,
    works: Store<ManifestWork>,
    clusters: Store<ManagedCluster>,
    properties: Store<ConfigMap>,
    // Objects read from the WDS, by (group, version, resource, namespace, name).
    objects: Mutex<HashMap<ObjKey, Cached>>,
}

type ObjKey = (String, String, String, String, String);

// An object as read, cleaned, at one resourceVersion.
#[derive(Clone)]
struct Cached {
    rv: String,
    uid: String,
    obj: Value,
}

/// ManifestWork writes made at once.
const CONCURRENCY: usize = 8;

/// Quiet time after an event before a pass.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Runs the transport until dropped.
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
    let (transforms, w) = reflector::store::<CustomTransform>();
    tasks.spawn(drive(
        reflector(
            w,
            watcher(Api::all(wds.clone()), watcher::Config::default()),
        ),
        wake.clone(),
    ));
    let (works, w) = reflector::store::<ManifestWork>();
    let sel = format!("{}={}", names::WDS_LABEL, opts.wds_name);
    tasks.spawn(drive(
        reflector(
            w,
            watcher(
                Api::all(its.clone()),
                watcher::Config::default().labels(&sel),
            ),
        ),
        wake.clone(),
    ));
    let (clusters, w) = reflector::store::<ManagedCluster>();
    tasks.spawn(drive(
        reflector(
            w,
            watcher(Api::all(its.clone()), watcher::Config::default()),
        ),
        wake.clone(),
    ));
    let (properties, w) = reflector::store::<ConfigMap>();
    tasks.spawn(drive(
        reflector(
            w,
            watcher(
                Api::namespaced(its.clone(), names::CUSTOMIZATION_PROPERTIES_NAMESPACE),
                watcher::Config::default(),
            ),
        ),
        wake.clone(),
    ));
    bindings.wait_until_ready().await?;
    transforms.wait_until_ready().await?;
    works.wait_until_ready().await?;
    clusters.wait_until_ready().await?;
    properties.wait_until_ready().await?;
    let ctx = Ctx {
        wds,
        its,
        opts,
        bindings,
        transforms,
        works,
        clusters,
        properties,
        objects: Mutex::default(),
    };
    let mut backoff = Duration::from_millis(100);
    wake.notify_one();
    loop {
        wake.notified().await;
        tokio::time::sleep(DEBOUNCE).await;
        let errors = pass(&ctx).await;
        if errors.is_empty() {
            backoff = Duration::from_millis(100);
        } else {
            for e in &errors {
                tracing::warn!(error = %e, "transport write failed; retrying");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            wake.notify_one();
        }
    }
}

async fn drive<K, S>(stream: S, wake: Arc<Notify>)
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

/// One object of a Binding, as the transport needs it.
struct Item {
    key: ObjKey,
    rv: String,
    create_only: bool,
}

fn items(b: &Binding) -> Vec<Item> {
    let w = &b.spec.workload;
    let cluster = w.cluster_scope.iter().map(|c| Item {
        key: (
            c.object.group.clone(),
            c.object.version.clone(),
            c.object.resource.clone(),
            String::new(),
            c.object.name.clone(),
        ),
        rv: c.object.resource_version.clone(),
        create_only: c.modulation.create_only,
    });
    let namespaced = w.namespace_scope.iter().map(|c| Item {
        key: (
            c.object.group.clone(),
            c.object.version.clone(),
            c.object.resource.clone(),
            c.object.namespace.clone(),
            c.object.name.clone(),
        ),
        rv: c.object.resource_version.clone(),
        create_only: c.modulation.create_only,
    });
    cluster.chain(namespaced).collect()
}

/// One pass over every Binding; the errors (each already isolated to what it concerns).
pub async fn pass(ctx: &Ctx) -> Vec<TransportError> {
    let mut errors = Vec::new();
    let transforms = transforms_by_resource(ctx, &mut errors).await;
    let bindings = ctx.bindings.state();
    let mut referenced = BTreeSet::new();
    for b in &bindings {
        if b.meta().deletion_timestamp.is_some() {
            if let Err(e) = retire(ctx, b).await {
                errors.push(e);
            }
            continue;
        }
        for it in items(b) {
            referenced.insert(it.key);
        }
        if let Err(e) = sync_binding(ctx, b, &transforms, &mut errors).await {
            errors.push(e);
        }
    }
    // ManifestWorks of this WDS whose Binding is gone.
    let live: BTreeSet<String> = bindings.iter().map(|b| b.name_any()).collect();
    for mw in ctx.works.state() {
        let owner = mw
            .labels()
            .get(names::BINDING_LABEL)
            .cloned()
            .unwrap_or_default();
        if !live.contains(&owner)
            && mw.meta().deletion_timestamp.is_none()
            && let Err(e) = delete_work(ctx, &mw).await
        {
            errors.push(e);
        }
    }
    ctx.objects
        .lock()
        .expect("object cache lock")
        .retain(|k, _| referenced.contains(k));
    errors
}

// CustomTransform removals by (group, resource), writing each CustomTransform's status.
async fn transforms_by_resource(
    ctx: &Ctx,
    errors: &mut Vec<TransportError>,
) -> BTreeMap<(String, String), Vec<Vec<String>>> {
    let all = ctx.transforms.state();
    let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
    for ct in &all {
        *count
            .entry((ct.spec.api_group.clone(), ct.spec.resource.clone()))
            .or_default() += 1;
    }
    let mut out: BTreeMap<(String, String), Vec<Vec<String>>> = BTreeMap::new();
    for ct in &all {
        let key = (ct.spec.api_group.clone(), ct.spec.resource.clone());
        let paths = out.entry(key.clone()).or_default();
        paths.extend(ct.spec.remove.iter().filter_map(|p| t::parse_path(p).ok()));
        let warnings: Vec<String> = if count[&key] > 1 {
            vec![format!(
                "{} CustomTransforms apply to group {:?} resource {:?}; all of their removals are applied",
                count[&key], key.0, key.1
            )]
        } else {
            vec![]
        };
        // Through the typed status, so empty lists are omitted as the stored object has them.
        let status = serde_json::to_value(crate::api::CustomTransformStatus {
            observed_generation: ct.meta().generation.unwrap_or_default(),
            errors: t::remove_errors(&ct.spec.remove),
            warnings,
        })
        .expect("a status serialises");
        let live = serde_json::to_value(&ct.status).unwrap_or(Value::Null);
        if kit::status::differs(Some(&live), &status) {
            let api: Api<CustomTransform> = Api::all(ctx.wds.clone());
            if let Err(source) = api
                .patch_status(
                    &ct.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": with_nulls(&status, &["errors", "warnings"])})),
                )
                .await
            {
                errors.push(TransportError::Control {
                    what: format!("status of CustomTransform {}", ct.name_any()),
                    source,
                });
            }
        }
    }
    out
}

async fn read_object(ctx: &Ctx, it: &Item) -> Result<Option<Cached>, TransportError> {
    if let Some(c) = ctx.objects.lock().expect("object cache lock").get(&it.key)
        && c.rv == it.rv
    {
        return Ok(Some(c.clone()));
    }
    let (group, version, resource, namespace, name) = &it.key;
    let ar = ApiResource {
        group: group.clone(),
        version: version.clone(),
        api_version: if group.is_empty() {
            version.clone()
        } else {
            format!("{group}/{version}")
        },
        kind: String::new(),
        plural: resource.clone(),
    };
    let api: Api<DynamicObject> = if namespace.is_empty() {
        Api::all_with(ctx.wds.clone(), &ar)
    } else {
        Api::namespaced_with(ctx.wds.clone(), namespace, &ar)
    };
    let got = api
        .get_opt(name)
        .await
        .map_err(|source| TransportError::Read {
            what: format!("{resource} {namespace}/{name}"),
            source,
        })?;
    let Some(obj) = got else {
        return Ok(None);
    };
    let mut v = serde_json::to_value(&obj).expect("an object serialises");
    t::clean(&mut v);
    let c = Cached {
        rv: obj.resource_version().unwrap_or_default(),
        uid: obj.uid().unwrap_or_default(),
        obj: v,
    };
    ctx.objects
        .lock()
        .expect("object cache lock")
        .insert(it.key.clone(), c.clone());
    Ok(Some(c))
}

fn properties_of(ctx: &Ctx, wec: &str) -> BTreeMap<String, String> {
    let mc = ctx.clusters.get(&ObjectRef::new(wec));
    let labels = mc.as_ref().map(|m| m.labels().clone()).unwrap_or_default();
    let annotations = mc
        .as_ref()
        .map(|m| m.annotations().clone())
        .unwrap_or_default();
    let cm = ctx
        .properties
        .get(&ObjectRef::new(wec).within(names::CUSTOMIZATION_PROPERTIES_NAMESPACE));
    let mut data: BTreeMap<String, String> =
        cm.as_ref().and_then(|c| c.data.clone()).unwrap_or_default();
    if let Some(bin) = cm.as_ref().and_then(|c| c.binary_data.clone()) {
        for (k, v) in bin {
            data.insert(k, String::from_utf8_lossy(&v.0).into_owned());
        }
    }
    t::properties(wec, &labels, &annotations, &data)
}

// The Binding's objects as read and transformed (WEC-independent), in Binding order, and
// whether some could not be read.
async fn binding_objects(
    ctx: &Ctx,
    b: &Binding,
    transforms: &BTreeMap<(String, String), Vec<Vec<String>>>,
    errors: &mut Vec<TransportError>,
) -> (Vec<(Item, String, Value)>, bool) {
    let mut out = Vec::new();
    let mut failed = false;
    for it in items(b) {
        let Cached { uid, mut obj, .. } = match read_object(ctx, &it).await {
            Ok(Some(c)) => c,
            Ok(None) => continue, // gone: the binding controller drops it next
            Err(e) => {
                errors.push(e);
                failed = true;
                continue;
            }
        };
        if let Some(paths) = transforms.get(&(it.key.0.clone(), it.key.2.clone())) {
            for p in paths {
                t::remove_path(&mut obj, p);
            }
        }
        out.push((it, uid, obj));
    }
    (out, failed)
}

// Whether writing `spec` over `current` takes out an object `current` carries.
fn loses_objects(current: Option<&ManifestWork>, spec: &Value) -> bool {
    let id = |m: &Value| {
        (
            m["apiVersion"].as_str().unwrap_or_default().to_owned(),
            m["kind"].as_str().unwrap_or_default().to_owned(),
            m["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            m["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    let Some(current) = current else {
        return false;
    };
    let new: BTreeSet<_> = spec["workload"]["manifests"]
        .as_array()
        .map(|a| a.iter().map(id).collect())
        .unwrap_or_default();
    current
        .spec
        .workload
        .manifests
        .iter()
        .any(|m| !new.contains(&id(m)))
}

// A ManifestWork to write: (WEC, name, spec, digest, the current one).
type Write = (String, String, Value, String, Option<Arc<ManifestWork>>);

// What one destination of a Binding needs.
#[derive(Default)]
struct Planned {
    keep: Vec<(String, String)>,
    writes: Vec<Write>,
    errors: Vec<String>,
}

// The ManifestWorks `wec` should have for the Binding `name` (UID `uid`): expanded per WEC,
// wrapped, compared by digest with `existing`.
fn plan_destination(
    ctx: &Ctx,
    name: &str,
    uid: &str,
    wec: &str,
    objects: &[(Item, String, Value)],
    existing: &BTreeMap<(String, String), Arc<ManifestWork>>,
) -> Planned {
    let limits = ctx.opts.limits;
    let mut out = Planned::default();
    let mut wrapees = Vec::new();
    let mut failed = Vec::new();
    for (it, obj_uid, obj) in objects {
        let (group, _, resource, ns, obj_name) = &it.key;
        let content = if t::wants_expansion(obj) {
            match t::expand(obj, &properties_of(ctx, wec)) {
                Ok(o) => o,
                Err(errs) => {
                    for e in errs {
                        out.errors
                            .push(format!("{resource} {ns}/{obj_name} for {wec}: {e}"));
                    }
                    failed.push(obj_uid.clone());
                    continue;
                }
            }
        } else {
            obj.clone()
        };
        wrapees.push(w::Wrapee {
            obj: content,
            group: group.clone(),
            resource: resource.clone(),
            uid: obj_uid.clone(),
            create_only: it.create_only,
        });
    }
    if !failed.is_empty() {
        // The previous copy stays on the WEC: with one object per ManifestWork only the
        // failing object's; with several, the destination's whole set (re-sharding without
        // the object would remove it).
        if limits.max_num == 1 {
            for u in &failed {
                let mw = t::manifest_work_name(uid, &ctx.opts.wds_name, u);
                out.keep.push((wec.to_owned(), mw));
            }
        } else {
            out.keep
                .extend(existing.keys().filter(|(ns, _)| ns == wec).cloned());
            return out;
        }
    }
    let wrapped = w::wrap(&wrapees, name, uid, &ctx.opts.wds_name, limits);
    for (i, size) in wrapped.too_big {
        let o = &wrapees[i].obj;
        out.errors.push(format!(
            "{} {}/{} is {size} bytes of JSON, more than the transport's --max-size-wrapped {}; it is not delivered",
            wrapees[i].resource,
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default(),
            limits.max_size
        ));
    }
    for shard in wrapped.shards {
        let key = (wec.to_owned(), shard.name.clone());
        out.keep.push(key.clone());
        let hash = t::content_hash(&shard.spec);
        let current = existing.get(&key).cloned();
        if current
            .as_ref()
            .is_some_and(|mw| mw.annotations().get(HASH_ANNOTATION) == Some(&hash))
        {
            continue;
        }
        out.writes
            .push((wec.to_owned(), shard.name, shard.spec, hash, current));
    }
    out
}

async fn sync_binding(
    ctx: &Ctx,
    b: &Binding,
    transforms: &BTreeMap<(String, String), Vec<Vec<String>>>,
    errors: &mut Vec<TransportError>,
) -> Result<(), TransportError> {
    let name = b.name_any();
    let bindings: Api<Binding> = Api::all(ctx.wds.clone());
    kit::finalizers::add(&bindings, b, names::BINDING_FINALIZER)
        .await
        .map_err(|source| TransportError::Control {
            what: format!("finalizer of Binding {name}"),
            source,
        })?;
    let uid = b.uid().unwrap_or_default();
    let generation = b.meta().generation.unwrap_or_default();
    let existing: BTreeMap<(String, String), Arc<ManifestWork>> = ctx
        .works
        .state()
        .into_iter()
        .filter(|mw| mw.labels().get(names::BINDING_LABEL) == Some(&name))
        .map(|mw| ((mw.namespace().unwrap_or_default(), mw.name_any()), mw))
        .collect();
    let mut keep: BTreeSet<(String, String)> = BTreeSet::new();
    let mut binding_errors = Vec::new();
    let mut writes = Vec::new();
    let limits = ctx.opts.limits;
    let (objects, read_failed) = binding_objects(ctx, b, transforms, errors).await;
    if read_failed {
        // Keep what is delivered until every object can be read again (with several objects
        // per ManifestWork, writing without one would take it off the WECs).
        keep.extend(existing.keys().cloned());
    }
    for d in b
        .spec
        .destinations
        .iter()
        .filter(|_| !read_failed || limits.max_num == 1)
    {
        let p = plan_destination(ctx, &name, &uid, &d.cluster_id, &objects, &existing);
        keep.extend(p.keep);
        writes.extend(p.writes);
        for e in p.errors {
            if !binding_errors.contains(&e) {
                binding_errors.push(e);
            }
        }
    }
    // Writes that take an object out of a ManifestWork go after every other write, so the
    // agent (which sees the mailbox in write order) knows the object's new ManifestWork when
    // it prunes, and hands it over instead of deleting it.
    let (losing, gaining): (Vec<Write>, Vec<Write>) = writes
        .into_iter()
        .partition(|(_, _, spec, _, current)| loses_objects(current.as_deref(), spec));
    let name_ref = &name;
    let mut written: Vec<Result<(), TransportError>> = Vec::new();
    for phase in [gaining, losing] {
        let done: Vec<Result<(), TransportError>> = futures::stream::iter(phase)
            .map(|(wec, mw_name, spec, hash, current)| async move {
                write_work(
                    ctx,
                    name_ref,
                    generation,
                    &wec,
                    &mw_name,
                    spec,
                    &hash,
                    current.as_ref(),
                )
                .await
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        written.extend(done);
    }
    errors.extend(written.into_iter().filter_map(Result::err));
    let stale: Vec<Arc<ManifestWork>> = existing
        .iter()
        .filter(|(key, mw)| !keep.contains(*key) && mw.meta().deletion_timestamp.is_none())
        .map(|(_, mw)| mw.clone())
        .collect();
    let deleted: Vec<Result<(), TransportError>> = futures::stream::iter(stale)
        .map(|mw| async move { delete_work(ctx, &mw).await })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    errors.extend(deleted.into_iter().filter_map(Result::err));
    let status = b.status.clone().unwrap_or_default();
    if status.errors != binding_errors || status.observed_generation != generation {
        bindings
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "observedGeneration": generation,
                    "errors": if binding_errors.is_empty() { Value::Null } else { json!(binding_errors) },
                }})),
            )
            .await
            .map_err(|source| TransportError::Control {
                what: format!("status of Binding {name}"),
                source,
            })?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn write_work(
    ctx: &Ctx,
    binding: &str,
    generation: i64,
    wec: &str,
    name: &str,
    spec: Value,
    hash: &str,
    current: Option<&Arc<ManifestWork>>,
) -> Result<(), TransportError> {
    let api: Api<ManifestWork> = Api::namespaced(ctx.its.clone(), wec);
    let err = |source| TransportError::Work {
        namespace: wec.to_owned(),
        name: name.to_owned(),
        source,
    };
    let mut body = json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {
            "name": name,
            "namespace": wec,
            "labels": {
                names::BINDING_LABEL: binding,
                names::WDS_LABEL: ctx.opts.wds_name,
            },
            "annotations": {
                names::BINDING_GENERATION_ANNOTATION: generation.to_string(),
                HASH_ANNOTATION: hash,
            },
        },
        "spec": spec,
    });
    match current {
        Some(mw) => {
            body["metadata"]["resourceVersion"] = json!(mw.resource_version());
            if let Some(f) = &mw.metadata.finalizers {
                body["metadata"]["finalizers"] = json!(f);
            }
            let mw: ManifestWork =
                serde_json::from_value(body).map_err(|e| err(kube::Error::SerdeError(e)))?;
            api.replace(name, &PostParams::default(), &mw)
                .await
                .map_err(err)?;
            tracing::info!(namespace = %wec, name, binding, "updated ManifestWork");
        }
        None => {
            let mw: ManifestWork =
                serde_json::from_value(body).map_err(|e| err(kube::Error::SerdeError(e)))?;
            match api.create(&PostParams::default(), &mw).await {
                Ok(_) => tracing::info!(namespace = %wec, name, binding, "created ManifestWork"),
                // Our cache lags our own write: the next pass compares the digest.
                Err(e) if kit::errors::already_exists(&e) => {}
                Err(e) => return Err(err(e)),
            }
        }
    }
    Ok(())
}

async fn delete_work(ctx: &Ctx, mw: &ManifestWork) -> Result<(), TransportError> {
    let ns = mw.namespace().unwrap_or_default();
    let name = mw.name_any();
    let api: Api<ManifestWork> = Api::namespaced(ctx.its.clone(), &ns);
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(namespace = %ns, name = %name, "deleted ManifestWork");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(TransportError::Work {
            namespace: ns,
            name,
            source,
        }),
    }
}

async fn retire(ctx: &Ctx, b: &Binding) -> Result<(), TransportError> {
    let name = b.name_any();
    let mine: Vec<Arc<ManifestWork>> = ctx
        .works
        .state()
        .into_iter()
        .filter(|mw| mw.labels().get(names::BINDING_LABEL) == Some(&name))
        .collect();
    for mw in &mine {
        if mw.meta().deletion_timestamp.is_none() {
            delete_work(ctx, mw).await?;
        }
    }
    {
        let bindings: Api<Binding> = Api::all(ctx.wds.clone());
        kit::finalizers::remove(&bindings, b, names::BINDING_FINALIZER)
            .await
            .map_err(|source| TransportError::Control {
                what: format!("finalizer of Binding {name}"),
                source,
            })?;
    }
    Ok(())
}

// `status` as a merge patch: the listed fields it omits (empty lists) become `null`, so the
// stored ones are removed.
fn with_nulls(status: &Value, fields: &[&str]) -> Value {
    let mut v = status.clone();
    if let Some(m) = v.as_object_mut() {
        for f in fields {
            m.entry(*f).or_insert(Value::Null);
        }
    }
    v
}
