//! The RedroidInstance controller: one Pod (managed directly) and one ADB Service per
//! instance, the seed's 4-level desired phase, timed expiry of overrides, index safety.
//!
//! Contract of [`reconcile`], as named steps: `release_legacy_finalizer` (deleting objects
//! only) → `clear_expired_overrides` → `observe` → `validate` (desired phase, conflicts) →
//! `build` (Pod and Service) → `apply_service` → `apply_pod` → `write_status` → `publish_events`.
//! It never writes the spec; a pass with nothing to do makes no write at all; it requeues at
//! the earliest pending override `until`, and shortly while waiting for a Pod to go.
//!
//! Concurrency: up to `Settings::max_concurrent_reconciles` passes run at once; kube-runtime
//! never runs two passes of one instance together, and [`LayerLocks`] keeps passes of
//! instances sharing a writable layer apart, so the conflict rule sees each other's Pods.

pub mod apply;
pub mod build;
pub mod observe;
pub mod status;
pub mod validate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service};
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::reconcile::{Outcome, ReconcileError};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::RedroidInstance;
use crate::names;
use apply::{ApplyError, PodState};
use observe::{Caches, ObserveError};
use status::StatusError;

/// How often to look again while waiting for a Pod we do not get events for.
const WAIT: Duration = Duration::from_secs(2);

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
}

impl Reconciler {
    /// A reconciler that reads everything from the API (tests, tools).
    pub fn new(ctx: Arc<Context>) -> Self {
        Self {
            ctx,
            caches: None,
            layers: LayerLocks::default(),
        }
    }
}

/// One async lock per writable layer ([`validate::layer_key`]): passes of instances sharing
/// data run one after another, so the later pass sees the Pod the earlier one created (or
/// its stop). Without it two peers reconciled at once could both decide they may run.
#[derive(Default)]
pub struct LayerLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl LayerLocks {
    async fn lock(&self, key: String) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            // Drop the locks nobody holds or waits for, so the map follows the live layers.
            map.retain(|_, l| Arc::strong_count(l) > 1);
            map.entry(key).or_default().clone()
        };
        lock.lock_owned().await
    }
}

/// One reconcile pass of `inst` (see the module docs).
pub async fn reconcile(inst: Arc<RedroidInstance>, r: Arc<Reconciler>) -> Result<Action, Error> {
    let ctx = &r.ctx;
    if inst.meta().deletion_timestamp.is_some() {
        apply::release_legacy_finalizer(ctx, &inst).await?;
        ctx.backoff.forget(&*inst);
        return Ok(Action::await_change());
    }
    if let Some(caches) = &r.caches {
        // Reads must come from complete caches, or a Pod or conflict could be missed at start-up.
        caches.ready().await;
    }
    let _layer = r.layers.lock(validate::layer_key(&inst)).await;
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
    if let (
        Some(m),
        None | Some(validate::Block::IndexConflict(_) | validate::Block::DataInUse(_)),
    ) = (&model, &block)
    {
        apply::service(
            ctx,
            &inst,
            &build::service::service(m),
            seen.service.as_ref(),
        )
        .await?;
    }
    let hash = desired_pod.as_ref().and_then(|p| {
        p.annotations()
            .get(names::POD_TEMPLATE_HASH_ANNOTATION)
            .cloned()
    });
    let step = validate::pod_step(&seen.pods, &inst.uid().unwrap_or_default(), hash.as_deref());
    let pod = apply::pods(ctx, &inst, step, desired_pod.as_ref()).await?;
    let facts = status::Facts {
        want: &want,
        block: block.as_ref(),
        pod: &pod,
    };
    let new = status::compute(&inst, &facts, now);
    if status::write(ctx, &inst, &new).await? {
        for (warning, reason, note) in status::transitions(inst.status.as_ref(), &new) {
            apply::event(ctx, &inst, warning, reason, note).await;
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
    // Orphans, foreign Pods and peers' Pods send us no events; owned Pods do, this is a backstop.
    let waiting = matches!(pod, PodState::Terminating(_) | PodState::Foreign(_))
        || matches!(block, Some(validate::Block::IndexConflict(m)) if m.starts_with("waiting"));
    expiry.sooner(if waiting {
        Outcome::RequeueAfter(WAIT)
    } else {
        Outcome::Done
    })
}

/// Retry policy: transient errors back off per object, permanent ones wait for a change.
pub fn error_policy(inst: Arc<RedroidInstance>, err: &Error, r: Arc<Reconciler>) -> Action {
    r.ctx.backoff.failed(&*inst, err)
}

/// Runs the instance controller until `rc.shutdown` is cancelled: RedroidInstances in
/// `namespace` (cluster-wide when `None`), their Pods and Services, instances sharing data
/// (index conflicts) and data-sidecar task pods (DataInUse).
///
/// Pods and Services are watched through reflectors whose stores the reconciler reads
/// ([`Caches`]); the same watch events trigger the reconciles, after the store has them.
pub async fn run(
    ctx: Arc<Context>,
    rc: RunContext,
    namespace: Option<String>,
) -> anyhow::Result<()> {
    let ns = namespace.as_deref();
    let client = &ctx.client;
    let controller = Controller::new(
        kit::events::scoped::<RedroidInstance>(client, ns),
        watcher::Config::default(),
    );
    let instances = controller.store();
    let peers = instances.clone();
    // Every Pod labelled with an instance: its own (and upstream) Pods, task pods, sidecars.
    let pods_config = watcher::Config::default().labels(names::INSTANCE_LABEL);
    // managedFields are most of a cached Pod's size and nothing reads them; the Service
    // builder does read them (which annotations we applied), so Services keep theirs.
    let (pods, pod_events) = cached(kit::events::scoped::<Pod>(client, ns), pods_config, |p| {
        p.managed_fields_mut().clear()
    });
    let managed = format!("{}={}", names::MANAGED_BY_LABEL, names::MANAGED_BY);
    let services_config = watcher::Config::default().labels(&managed);
    let (services, service_events) = cached(
        kit::events::scoped::<Service>(client, ns),
        services_config,
        |_| {},
    );
    let controller = controller
        .watches_stream(pod_events, |pod| pod_triggers(&pod))
        .owns_stream(service_events)
        .watches(
            kit::events::scoped::<RedroidInstance>(client, ns),
            watcher::Config::default(),
            move |changed| sharing(&peers, &changed),
        );
    let reconciler = Arc::new(Reconciler {
        caches: Some(Caches {
            instances,
            pods,
            services,
        }),
        ..Reconciler::new(ctx.clone())
    });
    let mut settings = ControllerSettings::new(names::INSTANCE_CONTROLLER);
    settings.max_concurrent_reconciles = ctx.settings.max_concurrent_reconciles;
    run_controller(
        controller,
        &settings,
        &rc.metrics,
        reconcile,
        error_policy,
        reconciler,
        rc.shutdown.clone(),
    )
    .await;
    Ok(())
}

/// A reflector over `api`: the store, and the objects it changed (after the store has them).
fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
    prune: fn(&mut K),
) -> (
    Store<K>,
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
    let (store, writer) = reflector::store();
    let stream = watcher(api, config).default_backoff().modify(prune);
    let events = reflector::reflector(writer, stream);
    (store, events.touched_objects().boxed())
}

// The instances a Pod event concerns: its controlling instance, and for a data-sidecar pod
// the instance whose data it uses.
fn pod_triggers(pod: &Pod) -> Vec<ObjectRef<RedroidInstance>> {
    let ns = pod.namespace();
    let mut refs: Vec<ObjectRef<RedroidInstance>> = pod
        .owner_references()
        .iter()
        .filter_map(|o| ObjectRef::from_owner_ref(ns.as_deref(), o, ()))
        .collect();
    if pod.labels().get(names::SIDECAR_LABEL).map(String::as_str) == Some("true") {
        refs.extend(sidecar_owner(pod));
    }
    refs
}

// Every other instance sharing the changed instance's data: a deletion or stop frees them.
fn sharing(
    store: &Store<RedroidInstance>,
    changed: &RedroidInstance,
) -> Vec<ObjectRef<RedroidInstance>> {
    let (name, ns) = (changed.name_any(), changed.namespace());
    let others = store
        .state()
        .into_iter()
        .filter(|i| i.namespace() == ns && i.name_any() != name);
    others
        .filter(|i| validate::shares_data(&i.spec, &changed.spec))
        .map(|i| ObjectRef::from(&*i))
        .collect()
}

fn sidecar_owner(pod: &Pod) -> Option<ObjectRef<RedroidInstance>> {
    let instance = pod.labels().get(names::INSTANCE_LABEL)?;
    Some(ObjectRef::new(instance).within(&pod.namespace()?))
}
