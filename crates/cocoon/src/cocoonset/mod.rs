//! The CocoonSet controller: one main agent, `replicas` sub-agents and named toolboxes per
//! set, each a pod vk-cocoon turns into a VM; suspend/wake through the snapshot registry.
//!
//! Contract of [`reconcile`], first matching branch wins (reference §4.1):
//! `finalize` (deleting sets: pods gone, then registry tags by snapshot policy, then the
//! finalizer) → `add_finalizer` → `observe` (owned pods from the watch cache, classified) →
//! `stamp_generation` → `handle_failed_main` → `suspend` (retain or release) →
//! `migrate_main` (`spec.nodeName`) → `wake_released` → `unsuspend` → `ensure_main` →
//! `ensure_sub_agents` + `ensure_toolboxes` → `write_status`.
//! Expected waits are requeues (5 s while the main starts, suspend/migration/wake polls);
//! registry errors are errors (per-object back-off) wherever the reference says fail closed.
//! A converged pass makes no write at all. After start-up a pass reads only watch caches
//! (pods by set, CocoonHibernations by pod, [`crate::cache`]); the API server is asked only
//! where the reference asks it (a released main's liveness, a colliding toolbox name) or
//! while a deleted set's cache may still miss a pod it created.

mod agents;
mod delete;
mod failure;
mod migration;
pub mod pass;
pub mod progress;
mod suspend;
mod toolboxes;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::reconcile::{Outcome, ReconcileError};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};

use crate::cache::{Hibernations, SetPods};
use crate::context::Context;
use crate::crd::CocoonSet;
use crate::names;
use crate::pods::classify::classify;
use crate::registry::RegistryError;
use pass::Pass;

/// The controller name (metrics label).
pub const CONTROLLER: &str = "cocoonset";
/// How long to wait for the main agent, a suspend, a migration or a wake between looks.
pub const POLL: Duration = Duration::from_secs(5);
/// How long a pass waits for the pod cache's first list.
const CACHE_WAIT: Duration = Duration::from_secs(30);
/// "Look again now": after a write whose result the next pass must see.
pub const AGAIN: Duration = Duration::from_millis(500);

/// A failed reconcile, by the action that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing the set's pods failed.
    #[error("listing pods: {source}")]
    ListPods {
        /// The cause.
        source: kube::Error,
    },
    /// Reading one pod failed.
    #[error("reading pod {pod}: {source}")]
    ReadPod {
        /// The pod.
        pod: String,
        /// The cause.
        source: kube::Error,
    },
    /// Creating a pod failed.
    #[error("creating pod {pod}: {source}")]
    CreatePod {
        /// The pod.
        pod: String,
        /// The cause.
        source: kube::Error,
    },
    /// Deleting a pod failed.
    #[error("deleting pod {pod}: {source}")]
    DeletePod {
        /// The pod.
        pod: String,
        /// The cause.
        source: kube::Error,
    },
    /// Patching a pod's annotations failed.
    #[error("patching pod {pod}: {source}")]
    PatchPod {
        /// The pod.
        pod: String,
        /// The cause.
        source: kube::Error,
    },
    /// Patching the set's metadata (finalizer, operator annotations) failed.
    #[error("patching the cocoonset: {source}")]
    PatchSet {
        /// The cause.
        source: kube::Error,
    },
    /// Writing the status failed.
    #[error("writing status: {source}")]
    Status {
        /// The cause.
        source: kube::Error,
    },
    /// Reading the stored set failed.
    #[error("reading the cocoonset: {source}")]
    ReadSet {
        /// The cause.
        source: kube::Error,
    },
    /// Listing CocoonHibernations failed.
    #[error("listing cocoonhibernations: {source}")]
    ListHibernations {
        /// The cause.
        source: kube::Error,
    },
    /// A snapshot registry call failed.
    #[error("registry {op} {reference}: {source}")]
    Registry {
        /// `probe` or `delete`.
        op: &'static str,
        /// `<vm>:<tag>`.
        reference: String,
        /// The cause.
        source: RegistryError,
    },
    /// The pod cache has not completed its first list yet.
    #[error("the pod cache is not ready (its watch cannot list pods)")]
    CacheNotReady,
    /// The spec cannot be acted on (reported in status and an Event).
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// A pod that is not ours is in the way under a name we need (reported in status and an
    /// Event; looked at again periodically).
    #[error("name collision: {0}")]
    NameCollision(String),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::ListPods { .. }
            | Error::ReadPod { .. }
            | Error::ListHibernations { .. }
            | Error::ReadSet { .. }
            | Error::CacheNotReady => "read_failed",
            Error::CreatePod { .. } | Error::DeletePod { .. } | Error::PatchPod { .. } => {
                "pod_write_failed"
            }
            Error::PatchSet { .. } => "set_write_failed",
            Error::Status { .. } => "status_write_failed",
            Error::Registry { .. } => "registry_failed",
            Error::InvalidSpec(_) => "invalid_spec",
            Error::NameCollision(_) => "name_collision",
        }
    }

    fn is_permanent(&self) -> bool {
        matches!(self, Error::InvalidSpec(_))
    }
}

/// What [`reconcile`] gets: the shared context and the watch caches.
pub struct Reconciler {
    /// The operator context.
    pub ctx: Arc<Context>,
    /// Pods labelled with a set name, by set.
    pub pods: SetPods,
    /// CocoonHibernations, by the pod they name.
    pub crs: Hibernations,
}

/// A step's verdict: go on to the next step, or end the pass with this outcome.
pub type Step = Option<Outcome>;

/// One reconcile pass of `set` (see the module docs).
pub async fn reconcile(set: Arc<CocoonSet>, r: Arc<Reconciler>) -> Result<Action, Error> {
    let ctx = &r.ctx;
    // Reads must come from complete caches, or a pod could be missed (and built twice). A
    // bounded wait: a watch that cannot list (RBAC, API down) fails the pass with back-off
    // instead of holding a worker, and shutdown, forever.
    let ready = async {
        r.pods.store().wait_until_ready().await?;
        r.crs.store().wait_until_ready().await
    };
    if !matches!(tokio::time::timeout(CACHE_WAIT, ready).await, Ok(Ok(()))) {
        return Err(Error::CacheNotReady);
    }
    if set.meta().deletion_timestamp.is_some() {
        let outcome = delete::finalize(ctx, &r, set.clone()).await?;
        if outcome == Outcome::Done {
            ctx.backoff.forget(&*set);
        }
        return Ok(outcome.into());
    }
    if !set
        .finalizers()
        .iter()
        .any(|f| f == names::COCOONSET_FINALIZER)
    {
        add_finalizer(ctx, &set).await?;
        return Ok(Action::requeue(AGAIN));
    }
    let cached = cached_pods(&r.pods, &set);
    let uid = set.metadata.uid.as_deref().unwrap_or_default();
    if let Some(wait) = ctx.expectations.awaiting(uid, &cached) {
        // The pod's watch event starts the next pass; the requeue is the backstop.
        tracing::debug!(cocoonset = %set.name_any(), ?wait, "waiting for the cache to show this set's new pods");
        return Ok(Action::requeue(wait));
    }
    let pods = classify(&set, cached);
    let mut pass = Pass::new(ctx, set.clone(), pods, r.crs.clone());
    let outcome = steps(&mut pass).await;
    // The generation stamps no other patch of this pass carried.
    let flushed = pass.flush_stamps().await;
    let mut outcome = outcome?;
    flushed?;
    if let Some(due) = pass.deferred() {
        outcome = outcome.sooner(Outcome::RequeueAfter(due));
    }
    Ok(ctx.backoff.succeeded(&*set, outcome))
}

/// The ordered steps after observation; each may end the pass.
async fn steps(pass: &mut Pass<'_>) -> Result<Outcome, Error> {
    if pass.set.spec.agent.image.is_empty() {
        // The schema requires it, so only an object without spec gets here.
        let e = Error::InvalidSpec("spec.agent.image is required (the set has no spec)".into());
        return toolboxes::report(pass, e).await;
    }
    agents::stamp_generation(pass);
    if let Some(out) = failure::handle_failed_main(pass).await? {
        return Ok(out);
    }
    if pass.set.spec.suspend.unwrap_or(false) {
        return suspend::suspend(pass).await;
    }
    if let Some(out) = migration::migrate_main(pass).await? {
        return Ok(out);
    }
    if let Some(out) = wake::wake_released(pass).await? {
        return Ok(out);
    }
    agents::unsuspend(pass).await?;
    if let Some(out) = agents::ensure_main(pass).await? {
        return Ok(out);
    }
    let (subs_changed, rebuild_wait) = agents::ensure_sub_agents(pass).await?;
    let toolboxes_changed = match toolboxes::ensure_toolboxes(pass).await {
        Err(e) if toolboxes::problem(&e).is_some() => return toolboxes::report(pass, e).await,
        other => other?,
    };
    if subs_changed || toolboxes_changed {
        return Ok(Outcome::RequeueAfter(AGAIN));
    }
    pass.write_status(None).await?;
    Ok(rebuild_wait.map_or(Outcome::Done, Outcome::RequeueAfter))
}

async fn add_finalizer(ctx: &Context, set: &CocoonSet) -> Result<(), Error> {
    let api: Api<CocoonSet> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    kit::finalizers::add(&api, set, names::COCOONSET_FINALIZER)
        .await
        .map(|_| ())
        .map_err(|source| Error::PatchSet { source })
}

/// The set's pods from the cache (terminating ones included; `classify` leaves them out).
pub fn cached_pods(pods: &SetPods, set: &CocoonSet) -> Vec<Pod> {
    let key = (set.namespace().unwrap_or_default(), set.name_any());
    pods.get(&key).iter().map(|p| (**p).clone()).collect()
}

/// Retry policy: transient errors back off per object, permanent ones wait for a change.
pub fn error_policy(set: Arc<CocoonSet>, err: &Error, r: Arc<Reconciler>) -> Action {
    r.ctx.backoff.failed(&*set, err)
}

/// What about a pod can change what the controller decides: deletion, phase, readiness,
/// labels, annotations, container running, node. Other updates (e.g. heartbeats of
/// conditions' timestamps) are filtered out.
fn pod_fingerprint(pod: &Pod) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    pod.metadata.deletion_timestamp.is_some().hash(&mut h);
    crate::pods::state::phase(pod).hash(&mut h);
    crate::pods::state::is_ready(pod).hash(&mut h);
    crate::pods::state::container_running(pod).hash(&mut h);
    crate::pods::state::node_name(pod).hash(&mut h);
    crate::pods::state::unschedulable(pod).hash(&mut h);
    pod.metadata.labels.hash(&mut h);
    pod.metadata.annotations.hash(&mut h);
    Some(h.finish())
}

/// Pod events that matter: every deletion, and applies whose [`pod_fingerprint`] changed.
/// (kube's `predicate_filter` would also swallow the final Delete of a pod whose terminating
/// update was already seen, and "the pod is gone" is exactly what a waiting set needs.)
fn relevant_pod_changes(
    events: impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send + 'static {
    let mut seen: std::collections::HashMap<String, u64> = Default::default();
    events
        .map(move |event| {
            let pods: Vec<Pod> = match event {
                Err(e) => return vec![Err(e)],
                Ok(watcher::Event::Delete(pod)) => {
                    seen.remove(&pod.uid().unwrap_or_default());
                    vec![pod]
                }
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                    let fingerprint = pod_fingerprint(&pod).unwrap_or_default();
                    let previous = seen.insert(pod.uid().unwrap_or_default(), fingerprint);
                    (previous != Some(fingerprint))
                        .then_some(pod)
                        .into_iter()
                        .collect()
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => vec![],
            };
            pods.into_iter().map(Ok).collect::<Vec<_>>()
        })
        .flat_map(futures::stream::iter)
}

/// What about a set triggers a pass: a spec change (generation) or the start of deletion.
/// Status and annotation writes (the operator's own) do not.
fn set_fingerprint(set: &CocoonSet) -> Option<u64> {
    let deleting = u64::from(set.meta().deletion_timestamp.is_some());
    predicates::generation(set).map(|g| g.wrapping_mul(2).wrapping_add(deleting))
}

/// Runs the CocoonSet controller until `rc.shutdown` is cancelled, over `namespace` only
/// (cluster-wide when `None`), reading CocoonHibernations from `crs` (kept by their
/// controller's watch).
pub async fn run(
    ctx: Arc<Context>,
    rc: RunContext,
    concurrency: usize,
    namespace: Option<String>,
    crs: Hibernations,
) -> anyhow::Result<()> {
    let client = &ctx.client;
    let sets: Api<CocoonSet> = kit::events::scoped(client, namespace.as_deref());
    let (set_store, set_writer) = reflector::store();
    let set_events = reflector::reflector(
        set_writer,
        watcher(sets, watcher::Config::default())
            .default_backoff()
            .modify(|s| s.managed_fields_mut().clear()),
    )
    .applied_objects()
    .predicate_filter(set_fingerprint, Default::default());
    let pods: Api<Pod> = kit::events::scoped(client, namespace.as_deref());
    let (pod_store, pod_writer) = crate::cache::set_pods();
    let pod_stream = watcher(pods, watcher::Config::default().labels(names::LABEL_SET))
        .default_backoff()
        .modify(crate::cache::strip_pod);
    let seen = ctx.clone();
    let pod_stream = kit::index::reflect(pod_writer, pod_stream).inspect_ok(move |e| match e {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
            seen.expectations.observed(p, false);
        }
        watcher::Event::Delete(p) => seen.expectations.observed(p, true),
        watcher::Event::Init | watcher::Event::InitDone => {}
    });
    let pod_events = relevant_pod_changes(pod_stream);
    let controller =
        Controller::for_stream(set_events.boxed(), set_store).owns_stream(pod_events.boxed());
    let reconciler = Arc::new(Reconciler {
        ctx,
        pods: pod_store,
        crs,
    });
    let mut settings = ControllerSettings::new(CONTROLLER);
    settings.max_concurrent_reconciles = concurrency;
    run_controller(
        controller,
        &settings,
        &rc,
        reconcile,
        error_policy,
        reconciler,
    )
    .await;
    Ok(())
}
