//! The CocoonHibernation controller: hibernate or wake the VM behind one pod.
//!
//! Contract of [`reconcile`], one pass as named steps:
//! `read_current → (deleting: delete::finalize) → ensure_finalizer → read_pod →
//! (bad reference: report_bad_ref) → lock_vms → set_annotation → probe_registry → decide →
//! (entering Active: drop_tag) → write_status → publish`.
//! - Hibernate sets `vm.cocoonstack.io/hibernate=true` on the pod and is confirmed by the
//!   lifecycle contract plus the registry ([`decide`]); a registry error is returned so the
//!   pass is retried with back-off (capped so the retry comes by the deadline), and an
//!   unconfirmed hibernate fails after its deadline.
//! - A desire flipped while a transition is in flight finishes that transition first, then
//!   the next pass starts at once on the desired one ([`decide::settle`]): the controller's
//!   own status writes do not trigger passes, so the decision itself asks for it.
//! - Wake removes the annotation, waits for a running container and a VM id, then drops
//!   `<vm>:hibernate` (best effort); past its deadline it is `Failed` with a dated message.
//!   The tag is dropped only from `Waking` (a wake found done at once writes `Waking` first),
//!   so a stored `Hibernated` always has its snapshot.
//! - A `Failed` CR is retried by the next pass that is triggered (its pod changed, the CR was
//!   edited or annotated, the operator restarted); re-entering the transition restarts its
//!   time budget. Its own status writes do not trigger a pass ([`watch`]).
//! - A bad reference (missing pod, pod without a VM name) is written to the status with one
//!   Warning Event per change, re-checked on the pod watch and a slow backstop, never in a
//!   hot loop.
//! - Passes of CRs acting on the same VM run one at a time (`Context::vm_locks`).
//! - Status is written only when it differs; a converged CR makes no writes.
//! - Reads come from the watch caches, except where [`observe`] says the cache could mislead
//!   (a CR whose cache copy misses this controller's last write is read fresh).

pub mod apply;
pub mod decide;
pub mod delete;
pub mod observe;
pub mod status;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::index::IndexedWriter;
use kit::reconcile::{Outcome, ReconcileError};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use crate::cache::{Hibernations, PodKey};
use crate::context::Context;
use crate::crd::{CocoonHibernation, HibernationPhase};
use crate::registry::RegistryError;
use decide::{Decision, Flow, Next, PodFacts, Probe, Seen, Timeouts};

/// Controller name: the `controller` metric label.
pub const CONTROLLER: &str = "cocoonhibernation";

/// A failed pass, by step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading failed.
    #[error(transparent)]
    Observe(#[from] observe::ObserveError),
    /// Writing the finalizer or the pod failed.
    #[error(transparent)]
    Apply(#[from] apply::ApplyError),
    /// Writing the status failed.
    #[error(transparent)]
    Status(#[from] status::StatusError),
    /// The registry could not confirm a hibernate; retried until the deadline.
    #[error("confirming {vm}:hibernate: {source}")]
    Registry {
        /// The VM (registry repository).
        vm: String,
        /// The registry error.
        #[source]
        source: RegistryError,
        /// Just past the hibernate deadline: the retry must come by then, whatever the
        /// back-off, so the timeout fires on time.
        deadline_in: Duration,
    },
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Observe(e) => e.category(),
            Error::Apply(e) => e.category(),
            Error::Status(e) => e.category(),
            Error::Registry { .. } => "registry_probe",
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            Error::Registry { deadline_in, .. } => Some(*deadline_in),
            _ => None,
        }
    }
}

/// How the controller runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// CRs reconciled at once.
    pub concurrency: usize,
    /// Watch only this namespace (CRs and pods); `None` is cluster-wide.
    pub namespace: Option<String>,
    /// Deadlines and poll interval.
    pub timeouts: Timeouts,
}

/// What every pass gets: the operator context, the time budgets and the watch caches.
pub struct Reconciler {
    /// The operator context.
    pub ctx: Arc<Context>,
    /// Deadlines and poll interval.
    pub timeouts: Timeouts,
    /// The CocoonHibernations, by the pod they name.
    pub crs: Hibernations,
    /// The pods of the watched namespaces (managed fields stripped).
    pub pods: Store<Pod>,
    /// This controller's writes the CR cache may not show yet.
    pub written: observe::Written,
}

/// How long a pass waits for the pod cache's first list.
const CACHE_WAIT: Duration = Duration::from_secs(30);

/// One pass over `obj` (see the module contract).
pub async fn reconcile(obj: Arc<CocoonHibernation>, r: Arc<Reconciler>) -> Result<Action, Error> {
    let ctx = &r.ctx;
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<CocoonHibernation> = Api::namespaced(ctx.client.clone(), &ns);
    if tokio::time::timeout(CACHE_WAIT, r.pods.wait_until_ready())
        .await
        .is_err()
    {
        return Err(observe::ObserveError::CacheNotReady.into());
    }
    let uid = obj.uid().unwrap_or_default();
    let Some(cr) = observe::current(&api, &r.crs, &r.written, &obj).await? else {
        ctx.backoff.forget(&*obj);
        r.written.forget(&uid);
        return Ok(Action::await_change());
    };
    if cr.meta().deletion_timestamp.is_some() {
        delete::finalize(ctx, &api, &cr).await?;
        ctx.backoff.forget(&cr);
        r.written.forget(&uid);
        return Ok(Action::await_change());
    }
    if let Some(written) = apply::ensure_finalizer(&api, &cr).await? {
        r.written.record(&written);
    }
    let pod_name = cr.spec.pod_ref.name.clone();
    let pod = observe::pod(ctx, &r.pods, &ns, &pod_name).await?;
    let outcome = match decide::facts(&ns, &pod_name, pod.as_ref()) {
        Err(bad) => report_bad_ref(&r, &api, &cr, &bad).await?,
        Ok(facts) => {
            let _locks = lock_vms(ctx, &cr, &facts.vm).await;
            step(&r, &api, &cr, &facts).await?
        }
    };
    Ok(ctx.backoff.succeeded(&cr, outcome))
}

// The pod's VM and the VM the status names (they differ once a CR's pod got a new VM),
// locked in name order so two passes can never wait on each other.
async fn lock_vms(
    ctx: &Context,
    cr: &CocoonHibernation,
    vm: &str,
) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
    let mut keys = vec![vm.to_owned()];
    keys.extend(Seen::of(cr).vm_name);
    keys.sort();
    keys.dedup();
    let mut guards = Vec::with_capacity(keys.len());
    for k in keys {
        guards.push(ctx.vm_locks.lock(&k).await);
    }
    guards
}

// One transition step on a pod with a VM.
async fn step(
    r: &Reconciler,
    api: &Api<CocoonHibernation>,
    cr: &CocoonHibernation,
    pod: &PodFacts,
) -> Result<Outcome, Error> {
    let (ctx, seen) = (&r.ctx, Seen::of(cr));
    let flow = decide::flow(cr.spec.desire, seen.phase);
    let (ns, pod_name) = (cr.namespace().unwrap_or_default(), &cr.spec.pod_ref.name);
    let want = flow == Flow::Hibernate;
    apply::hibernate_annotation(ctx, &ns, pod_name, want, pod.hibernate_set).await?;
    let (probe, probe_error) = probe_registry(ctx, flow, &seen, pod).await;
    let now = Timestamp::now();
    let d = decide::decide(cr.spec.desire, &seen, pod, probe.as_ref(), now, &r.timeouts);
    if d.phase == HibernationPhase::Active && seen.phase == Some(HibernationPhase::Hibernated) {
        // A wake found done at once still passes through Waking: the snapshot goes only once
        // the status no longer says Hibernated, so a crash or a failed write between the
        // deletion and the status write never leaves a Hibernated CR without its snapshot.
        let waking = status::compute(cr, HibernationPhase::Waking, Some(&pod.vm), None, now);
        if let Some(written) = status::write(api, cr, &waking).await? {
            r.written.record(&written);
        }
        return Ok(Outcome::RequeueAfter(Duration::ZERO));
    }
    if d.phase == HibernationPhase::Active && seen.phase != Some(HibernationPhase::Active) {
        // Deleting the snapshot cannot be undone: decided on caches, it is confirmed on the
        // stored objects first.
        if !awake_as_stored(ctx, api, cr, &ns, pod_name, &pod.vm).await? {
            tracing::debug!(cr = %cr.name_any(), "the wake's copy is stale; looking again");
            return Ok(Outcome::RequeueAfter(STALE_RETRY));
        }
        apply::drop_tag(ctx, cr, &pod.vm).await;
    }
    let desired = status::compute(cr, d.phase, Some(&pod.vm), d.message.as_deref(), now);
    if let Some(written) = status::write(api, cr, &desired).await? {
        r.written.record(&written);
    }
    publish(ctx, cr, flow, &seen, &d, &pod.vm, now).await;
    match (d.next, probe_error) {
        (Next::RetryError(deadline_in), Some(source)) => Err(Error::Registry {
            vm: pod.vm.clone(),
            source,
            deadline_in,
        }),
        (Next::After(after), _) => Ok(Outcome::RequeueAfter(after)),
        (Next::Now, _) => Ok(Outcome::RequeueAfter(Duration::ZERO)),
        _ => Ok(Outcome::Done),
    }
}

/// How soon a pass that found its copy stale looks again.
const STALE_RETRY: Duration = Duration::from_millis(500);

// Whether the stored objects confirm a finished wake: the CR is stored as this pass saw it
// (same resourceVersion: not changed to hibernate again meanwhile), and the pod is there with
// VM `vm`, live and not flagged for hibernation, so nothing needs `<vm>:hibernate` any more.
async fn awake_as_stored(
    ctx: &Context,
    api: &Api<CocoonHibernation>,
    cr: &CocoonHibernation,
    ns: &str,
    pod_name: &str,
    vm: &str,
) -> Result<bool, Error> {
    let name = cr.name_any();
    let stored = api
        .get_opt(&name)
        .await
        .map_err(|source| observe::ObserveError::GetCr {
            cr: format!("{ns}/{name}"),
            source,
        })?;
    if stored.as_ref().map(|c| c.resource_version()) != Some(cr.resource_version()) {
        return Ok(false);
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pod = pods
        .get_opt(pod_name)
        .await
        .map_err(|source| observe::ObserveError::GetPod {
            pod: format!("{ns}/{pod_name}"),
            source,
        })?;
    Ok(pod.is_some_and(|p| {
        crate::pods::state::vm_name(&p) == Some(vm) && !crate::pods::state::needs_snapshot(&p)
    }))
}

// Asks the registry for `<vm>:hibernate` when a hibernate pass needs it ([`decide::needs_probe`]);
// an error is kept to fail the pass with, after the status says what happened.
async fn probe_registry(
    ctx: &Context,
    flow: Flow,
    seen: &Seen,
    pod: &PodFacts,
) -> (Option<Probe>, Option<RegistryError>) {
    if flow != Flow::Hibernate || !decide::needs_probe(seen, pod) {
        return (None, None);
    }
    match ctx
        .registry
        .has_manifest(&pod.vm, crate::names::TAG_HIBERNATE)
        .await
    {
        Ok(true) => (Some(Probe::Present), None),
        Ok(false) => (Some(Probe::Absent), None),
        Err(e) => (Some(Probe::Error(e.category())), Some(e)),
    }
}

// The Events and the duration sample of the transition just written.
async fn publish(
    ctx: &Context,
    cr: &CocoonHibernation,
    flow: Flow,
    seen: &Seen,
    d: &Decision,
    vm: &str,
    now: Timestamp,
) {
    let pod = format!(
        "{}/{}",
        cr.namespace().unwrap_or_default(),
        cr.spec.pod_ref.name
    );
    let (notes, sample) = status::transition(flow, seen, d, vm, &pod, now);
    for note in &notes {
        apply::event(ctx, cr, note).await;
    }
    if let Some(s) = sample {
        let family = match s.flow {
            Flow::Hibernate => &ctx.metrics.hibernate_phase_duration,
            Flow::Wake => &ctx.metrics.wake_phase_duration,
        };
        let labels = crate::metrics::ResultLabels {
            result: s.result.into(),
        };
        family.get_or_create(&labels).observe(s.seconds);
    }
}

// Pending (or kept) with the reason; one Warning Event when the reported reason changes.
async fn report_bad_ref(
    r: &Reconciler,
    api: &Api<CocoonHibernation>,
    cr: &CocoonHibernation,
    bad: &decide::BadRef,
) -> Result<Outcome, Error> {
    let seen = Seen::of(cr);
    let Some(d) = decide::bad_ref(&seen, bad) else {
        tracing::debug!(
            reason = bad.reason(),
            "keeping the phase while the pod is unusable"
        );
        return Ok(Outcome::RequeueAfter(decide::BAD_REF_RECHECK));
    };
    let news = decide::bad_ref_is_news(&seen, &d);
    let desired = status::compute(cr, d.phase, None, d.message.as_deref(), Timestamp::now());
    if let Some(written) = status::write(api, cr, &desired).await? {
        r.written.record(&written);
    }
    if news {
        let note = status::Note {
            type_: kube::runtime::events::EventType::Warning,
            reason: bad.reason(),
            message: bad.message(),
        };
        apply::event(&r.ctx, cr, &note).await;
    }
    Ok(Outcome::RequeueAfter(decide::BAD_REF_RECHECK))
}

/// Retry policy: per-object exponential back-off.
pub fn error_policy(cr: Arc<CocoonHibernation>, err: &Error, r: Arc<Reconciler>) -> Action {
    r.ctx.backoff.failed(&*cr, err)
}

/// Runs the controller cluster-wide until `rc.shutdown`, with the default deadlines unless
/// the `COCOON_HIBERNATE_TIMEOUT_SECONDS` / `COCOON_WAKE_TIMEOUT_SECONDS` tuning knobs are
/// set (read once, here).
pub async fn run(ctx: Arc<Context>, rc: RunContext, concurrency: usize) -> anyhow::Result<()> {
    let settings = Settings {
        concurrency,
        namespace: None,
        timeouts: Timeouts::from_env(),
    };
    run_with(ctx, rc, settings, crate::cache::hibernations()).await
}

/// Runs the controller with explicit [`Settings`] until `rc.shutdown`, keeping `crs` (the
/// CocoonHibernation cache other controllers read too) with its watch.
///
/// CRs are watched into `crs` and filtered by [`watch::cr_fingerprint`]; pods through
/// [`watch::PodTriggers`], each mapped to the CRs naming it by the cache's index.
pub async fn run_with(
    ctx: Arc<Context>,
    rc: RunContext,
    settings: Settings,
    crs: (Hibernations, IndexedWriter<CocoonHibernation, PodKey>),
) -> anyhow::Result<()> {
    let ns = settings.namespace.as_deref();
    let (store, writer) = crs;
    let api: Api<CocoonHibernation> = kit::events::scoped(&ctx.client, ns);
    let cr_events = kit::index::reflect(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .touched_objects()
    .predicate_filter(watch::cr_fingerprint, PredicateConfig::default());
    let mut triggers = watch::PodTriggers::default();
    let (pods, pod_writer) = reflector::store();
    let pod_events = watcher(
        kit::events::scoped(&ctx.client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(crate::cache::strip_pod)
    .reflect(pod_writer)
    .filter_map(move |ev| std::future::ready(ev.map(|e| triggers.filter(e)).transpose()));
    let mapper = store.clone();
    let crs = store.clone();
    let controller = Controller::for_stream(cr_events, store.store().clone())
        .watches_stream(pod_events, move |pod| watch::referencing(&mapper, &pod));
    let mut cs = ControllerSettings::new(CONTROLLER);
    cs.max_concurrent_reconciles = settings.concurrency;
    let reconciler = Arc::new(Reconciler {
        ctx,
        timeouts: settings.timeouts,
        crs,
        pods,
        written: Default::default(),
    });
    run_controller(controller, &cs, &rc, reconcile, error_policy, reconciler).await;
    Ok(())
}
