//! The RedroidInstance controller: one Pod (managed directly) and one ADB Service per
//! instance, the seed's 4-level desired phase, timed expiry of overrides, index safety.
//!
//! Contract of [`reconcile`], as named steps: `release_legacy_finalizer` (deleting objects
//! only) → `clear_expired_overrides` → `observe` → `validate` (desired phase, conflicts) →
//! `build` (Pod and Service) → `apply_service` and `apply_pod` (together) → `write_status`
//! (a starting Pod's first status waits up to [`status::GRACE`], see [`status::defer`]) →
//! `publish_events` (in the background, see [`apply::event`]).
//! It never writes the spec; a pass with nothing to do makes no write at all; it requeues at
//! the earliest pending override `until`, shortly while waiting for a Pod to go, and after
//! [`BLOCKED_RECHECK`] while held back by a conflict (a backstop: the wake-up normally comes
//! from the peer's own change, see [`run`]).
//!
//! Concurrency: up to `Settings::max_concurrent_reconciles` passes run at once; kube-runtime
//! never runs two passes of one instance together, and [`LayerLocks`] keeps passes of
//! instances whose data conflict apart, so the conflict rule sees each other's Pods.

pub mod apply;
pub mod build;
pub mod cache;
pub mod cached_pod;
pub mod observe;
pub mod status;
pub mod validate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};

use futures::TryStreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::reconcile::{Outcome, ReconcileError};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::RedroidInstance;
use crate::names;
use apply::{ApplyError, PodState};
use cached_pod::CachedPod;
use observe::{Caches, ObserveError};
use status::StatusError;

/// How often to look again while waiting for a Pod we do not get events for.
const WAIT: Duration = Duration::from_secs(2);
/// Backstop re-check of an instance held back by a conflict or a data sidecar.
pub const BLOCKED_RECHECK: Duration = Duration::from_secs(30);

/// A failed reconcile, by step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading failed.
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// Writing a child, an override or the finalizer failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// Writing the status failed.
    #[error(transparent)]
    Status(#[from] StatusError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Observe(e) => e.category(),
            Error::Apply(e) => e.category(),
            Error::Status(e) => e.category(),
        }
    }
}

/// What [`reconcile`] gets: the shared context and, when run by [`run`], the watch caches.
pub struct Reconciler {
    /// The operator context.
    pub ctx: Arc<Context>,
    caches: Option<Caches>,
    layers: LayerLocks,
    written: Arc<Written>,
}

impl Reconciler {
    /// A reconciler that reads everything from the API (tests, tools).
    pub fn new(ctx: Arc<Context>) -> Self {
        Self {
            ctx,
            caches: None,
            layers: LayerLocks::default(),
            written: Arc::default(),
        }
    }
}

/// The instances whose status a pass wrote and the cache has not shown back yet
/// ([`kit::written`]): the instance as the write stored it (spec included). The pass that a
/// Pod's event starts right after a status write would otherwise still read the old status
/// from the cache, write the same status again and repeat its Events.
type Written = kit::written::Written<Arc<RedroidInstance>>;

/// The newest known copy of `inst` (see [`Written`]).
fn newest(written: &Written, inst: Arc<RedroidInstance>) -> Arc<RedroidInstance> {
    let (Some(uid), Some(rv)) = (inst.uid(), inst.resource_version()) else {
        return inst;
    };
    written.lagging(&uid, &rv).unwrap_or(inst)
}

/// Notes the instance `stored` by a status write decided on `before`.
fn remember(written: &Written, before: &RedroidInstance, mut stored: RedroidInstance) {
    let (Some(uid), Some(seen), Some(produced)) = (
        before.uid(),
        before.resource_version(),
        stored.resource_version(),
    ) else {
        return;
    };
    cache::slim_instance(&mut stored);
    written.record(&uid, &seen, &produced, Arc::new(stored));
}

/// Keeps passes of instances whose data conflict apart ([`validate::lock_keys`]), so the later
/// pass sees the Pod the earlier one created (or its stop). Without it two peers reconciled
/// at once could both decide they may run. A read-write lock per shared base PVC (overlays
/// share it, a baseMode instance holds it alone) and a lock per writable layer; always taken
/// in that order, so passes never deadlock.
#[derive(Default)]
pub struct LayerLocks {
    bases: Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>,
    layers: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// The locks one pass holds.
pub struct LayerGuard {
    _base: BaseGuard,
    _layer: Option<tokio::sync::OwnedMutexGuard<()>>,
}

enum BaseGuard {
    Shared(#[allow(dead_code)] tokio::sync::OwnedRwLockReadGuard<()>),
    Exclusive(#[allow(dead_code)] tokio::sync::OwnedRwLockWriteGuard<()>),
}

fn entry<L: Default>(map: &Mutex<HashMap<String, Arc<L>>>, key: String) -> Arc<L> {
    let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
    // Drop the locks nobody holds or waits for, so the map follows the live data.
    map.retain(|_, l| Arc::strong_count(l) > 1);
    map.entry(key).or_default().clone()
}

impl LayerLocks {
    async fn lock(&self, inst: &RedroidInstance) -> LayerGuard {
        let (base, exclusive, layer) = validate::lock_keys(inst);
        let base = entry(&self.bases, base);
        let base = if exclusive {
            BaseGuard::Exclusive(base.write_owned().await)
        } else {
            BaseGuard::Shared(base.read_owned().await)
        };
        let layer = match layer {
            Some(key) => Some(entry(&self.layers, key).lock_owned().await),
            None => None,
        };
        LayerGuard {
            _base: base,
            _layer: layer,
        }
    }
}

/// One reconcile pass of `inst` (see the module docs).
pub async fn reconcile(inst: Arc<RedroidInstance>, r: Arc<Reconciler>) -> Result<Action, Error> {
    let ctx = &r.ctx;
    if inst.meta().deletion_timestamp.is_some() {
        r.written.forget(&inst.uid().unwrap_or_default());
        apply::release_legacy_finalizer(ctx, &inst).await?;
        ctx.backoff.forget(&*inst);
        return Ok(Action::await_change());
    }
    let inst = newest(&r.written, inst);
    if let Some(caches) = &r.caches {
        // Reads must come from complete caches, or a Pod or conflict could be missed at start-up.
        caches.ready().await;
    }
    let _layers = r.layers.lock(&inst).await;
    let now = Timestamp::now();
    let cleared = apply::clear_expired(ctx, &inst, validate::expired_overrides(&inst, now)).await?;
    let inst = cleared.map(Arc::new).unwrap_or(inst);
    let seen = observe::observe(ctx, r.caches.as_ref(), &inst).await?;
    let want = validate::want(&inst, now);
    let block = (want == validate::Want::Run)
        .then(|| validate::block(&inst, &seen.peers, &seen.peer_pods, &seen.sidecars, now))
        .flatten();
    let model = build::Model::new(&inst, &ctx.settings.kmsg_tools_image);
    let desired_pod = model
        .as_ref()
        .filter(|_| want == validate::Want::Run && block.is_none())
        .map(build::pod::pod);
    let runnable = !matches!(block, Some(validate::Block::Invalid(_)));
    let service = model
        .as_ref()
        .filter(|_| runnable)
        .map(build::service::service);
    let hash = desired_pod.as_ref().and_then(|p| {
        p.annotations()
            .get(names::POD_TEMPLATE_HASH_ANNOTATION)
            .cloned()
    });
    let step = validate::pod_step(&seen.pods, &inst.uid().unwrap_or_default(), hash.as_deref());
    // The Service and the Pod do not depend on each other: both writes go out together, so a
    // pass that creates an instance's children costs one round trip for them, not two.
    let apply_service = async {
        match &service {
            Some(s) => apply::service(ctx, &inst, s, seen.service.as_ref()).await,
            None => Ok(()),
        }
    };
    let ((), pod) = futures::try_join!(
        apply_service,
        apply::pods(ctx, &inst, step, desired_pod.as_ref())
    )?;
    let facts = status::Facts {
        want: &want,
        block: block.as_ref(),
        pod: &pod,
    };
    let new = status::compute(&inst, &facts, now);
    if let Some(wait) = status::defer(&inst, &new, &pod, now) {
        // The Pod is starting: its Running status will be the generation's first write.
        let outcome = requeue(&inst, &pod, block.as_ref(), now).sooner(Outcome::RequeueAfter(wait));
        return Ok(ctx.backoff.succeeded(&*inst, outcome));
    }
    if let Some(stored) = status::write(ctx, &inst, &new).await? {
        remember(&r.written, &inst, stored);
        status::log_transition(&inst, inst.status.as_ref(), &new);
        for (warning, reason, note) in status::transitions(inst.status.as_ref(), &new) {
            apply::event(ctx, &inst, warning, reason, note);
        }
    }
    let outcome = requeue(&inst, &pod, block.as_ref(), now);
    Ok(ctx.backoff.succeeded(&*inst, outcome))
}

fn requeue(
    inst: &RedroidInstance,
    pod: &PodState,
    block: Option<&validate::Block>,
    now: Timestamp,
) -> Outcome {
    let expiry = validate::next_expiry(inst, now).map_or(Outcome::Done, Outcome::RequeueAfter);
    // Orphans, foreign Pods and other instances' Pods send us no events; owned Pods do, this
    // is a backstop. A conflict is re-checked on a timer too, in case a wake-up was missed.
    let waiting_for_pod = matches!(pod, PodState::Terminating(_) | PodState::Foreign(_))
        || matches!(block, Some(validate::Block::Conflict { pod: true, .. }));
    let backstop = if waiting_for_pod {
        Outcome::RequeueAfter(WAIT)
    } else if matches!(block, Some(validate::Block::Invalid(_))) {
        // Only a spec change helps, and the instance's own watch brings it.
        Outcome::Done
    } else if block.is_some() {
        Outcome::RequeueAfter(BLOCKED_RECHECK)
    } else {
        Outcome::Done
    };
    expiry.sooner(backstop)
}

/// Retry policy: transient errors back off per object, permanent ones wait for a change.
pub fn error_policy(inst: Arc<RedroidInstance>, err: &Error, r: Arc<Reconciler>) -> Action {
    r.ctx.backoff.failed(&*inst, err)
}

/// Runs the instance controller until `rc.shutdown` is cancelled: RedroidInstances in
/// `namespace` (cluster-wide when `None`), their Pods and Services, instances whose data
/// conflict (each other's changes wake them) and data-sidecar task pods (DataInUse).
///
/// Every watch feeds an indexed reflector ([`cache`]) whose store the reconciler reads
/// ([`Caches`]), and every trigger is derived from an event only after that store and its
/// indexes have applied it: a blocked instance woken by its peer's deletion re-reads a store
/// that no longer holds the peer. A deleted instance's Pods are deleted right away
/// ([`apply::delete_pods_of_deleted`]); garbage collection remains the backstop.
pub async fn run(
    ctx: Arc<Context>,
    rc: RunContext,
    namespace: Option<String>,
) -> anyhow::Result<()> {
    let ns = namespace.as_deref();
    let client = &ctx.client;
    let (instances, writer) = kit::index::store(cache::instance_keys);
    // Wake-ups of other instances, sent after the store applied the change that caused them.
    let (wake, woken) = futures::channel::mpsc::unbounded();
    // Deleted instances, whose Pods go without waiting for the garbage collector.
    let (gone, deleted) = futures::channel::mpsc::unbounded();
    let mapper = instances.clone();
    let written = Arc::new(Written::default());
    let forget = written.clone();
    let watch = watcher(
        kit::events::scoped::<RedroidInstance>(client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(cache::slim_instance);
    let instance_events = kit::index::reflect(writer, watch)
        .inspect_ok(move |event| {
            for r in wakes(&mapper, event) {
                let _ = wake.unbounded_send(r);
            }
            if let watcher::Event::Delete(i) = event {
                forget.forget(&i.uid().unwrap_or_default());
                let _ = gone.unbounded_send(i.clone());
            }
        })
        .applied_objects();
    // Every Pod labelled with an instance: its own (and upstream) Pods, task pods, sidecars.
    let pods_config = watcher::Config::default().labels(names::INSTANCE_LABEL);
    let (pods, pod_events) = cached(
        kit::events::scoped::<CachedPod>(client, ns),
        pods_config,
        cache::pod_keys,
        cache::slim_pod,
    );
    let managed = format!("{}={}", names::MANAGED_BY_LABEL, names::MANAGED_BY);
    let services_config = watcher::Config::default().labels(&managed);
    let (services, service_events) = cached(
        kit::events::scoped::<Service>(client, ns),
        services_config,
        |_| Vec::new(),
        cache::slim_service,
    );
    let pod_mapper = instances.clone();
    let controller = Controller::for_stream(instance_events, instances.store().clone())
        .watches_stream(pod_events, move |pod| pod_triggers(&pod_mapper, &pod))
        .owns_stream(service_events)
        .reconcile_on(woken);
    let cleanup = apply::delete_pods_of_deleted(ctx.clone(), pods.clone(), deleted);
    let reconciler = Arc::new(Reconciler {
        caches: Some(Caches::new(instances, pods, services)),
        written,
        ..Reconciler::new(ctx.clone())
    });
    let mut settings = ControllerSettings::new(names::INSTANCE_CONTROLLER);
    settings.max_concurrent_reconciles = ctx.settings.max_concurrent_reconciles;
    let controller = run_controller(
        controller,
        &settings,
        &rc,
        reconcile,
        error_policy,
        reconciler,
    );
    // The clean-up ends when the instance watch (its only sender) does, with the controller.
    futures::join!(controller, cleanup);
    Ok(())
}

/// An indexed reflector over `api`, each object pruned to what is read before it is cached:
/// the reader, and the objects it changed (after the store and indexes have them).
fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
    keys: fn(&K) -> Vec<cache::Key>,
    prune: fn(&mut K),
) -> (
    kit::index::Indexed<K, cache::Key>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = kit::index::store(keys);
    let stream = watcher(api, config).default_backoff().modify(prune);
    let events = kit::index::reflect(writer, stream);
    (reader, events.touched_objects().boxed())
}

/// The other instances an instance event should wake, computed after the cache applied it:
/// for a changed or deleted instance, those whose data conflict with it and every instance
/// in its namespace held back by a conflict (it may have been the one they waited for, with
/// data it no longer has); after a re-list, every instance held back by a conflict. Index
/// lookups: the cost is what is woken, not the size of the cache.
pub fn wakes(
    instances: &cache::Instances,
    event: &watcher::Event<RedroidInstance>,
) -> Vec<ObjectRef<RedroidInstance>> {
    let changed = match event {
        watcher::Event::Apply(i) | watcher::Event::Delete(i) => i,
        watcher::Event::InitDone => {
            return instances.refs(&cache::Key::AnyBlocked);
        }
        watcher::Event::Init | watcher::Event::InitApply(_) => return Vec::new(),
    };
    let (name, ns) = (changed.name_any(), changed.namespace().unwrap_or_default());
    let mut keys = cache::conflict_keys(&ns, &crate::data::Usage::of_spec(&changed.spec));
    keys.push(cache::Key::Blocked { ns });
    instances
        .get_any(&keys)
        .iter()
        .filter(|i| i.name_any() != name)
        .filter(|i| blocked(i) || validate::shares_data(&i.spec, &changed.spec))
        .map(|i| ObjectRef::from(&**i))
        .collect()
}

// Held back by another instance's data (its Ready reason says so).
fn blocked(i: &RedroidInstance) -> bool {
    let ready = i
        .status
        .as_ref()
        .and_then(|s| kit::conditions::get(&s.conditions, "Ready"));
    ready.is_some_and(|c| {
        [
            crate::data::Conflict::Layer.reason(),
            crate::data::Conflict::Base.reason(),
            "DataInUse",
        ]
        .contains(&c.reason.as_str())
    })
}

// The instances a Pod event concerns: its controlling instance; for a data-sidecar pod the
// instance whose data it uses; and for any instance or sidecar pod, the instances in its
// namespace held back by a conflict (they may be waiting for this Pod to go).
fn pod_triggers(instances: &cache::Instances, pod: &CachedPod) -> Vec<ObjectRef<RedroidInstance>> {
    let ns = pod.namespace();
    let mut refs: Vec<ObjectRef<RedroidInstance>> = pod
        .owner_references()
        .iter()
        .filter_map(|o| ObjectRef::from_owner_ref(ns.as_deref(), o, ()))
        .collect();
    let sidecar = observe::is_sidecar(pod);
    if !sidecar && !observe::is_instance_pod(pod) {
        return refs;
    }
    let ns = ns.unwrap_or_default();
    let mut keys = vec![cache::Key::Blocked { ns: ns.clone() }];
    if let Some(label) = pod.labels().get(names::INSTANCE_LABEL).filter(|_| sidecar) {
        keys.push(cache::Key::Label {
            ns,
            label: label.clone(),
        });
    }
    refs.extend(
        instances
            .get_any(&keys)
            .iter()
            .map(|i| ObjectRef::from(&**i)),
    );
    refs
}
