//! The RedroidTask controller: Jobs (one-shot) or CronJobs (scheduled) per referenced
//! instance, with temporary suspend/wake of the instances (ADR 0001).
//!
//! Contract of [`reconcile`], one pass as named steps:
//! `observe → (deleting: release_overrides → release_jobs → remove_finalizer) →
//! ensure_finalizer → validate → plan → apply_overrides → apply_children → patch_status →
//! release_jobs`.
//! - A one-shot Job's outcome finalizer is released only after the status that records the
//!   outcome is written, so a Job never disappears (TTL, a person, garbage collection, all
//!   while the operator may be down) before the task knows how it ended.
//! - A missing instance or ConfigMap is not an error: `Ready=False` with its reason, one
//!   Warning Event when that condition changes, and the pass waits for the watches (an
//!   instance or ConfigMap appearing re-triggers the task).
//! - Expected waits (an instance stopping or starting) are watch-driven; only a pod going
//!   away is re-checked on a short timer.
//! - A converged task makes no writes.
//!
//! [`run`] watches tasks, their Jobs and CronJobs, and maps RedroidInstances and ConfigMaps
//! to the tasks that reference them.

pub mod apply;
pub mod build;
pub mod observe;
pub mod overrides;
pub mod status;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ConfigMap;
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::reconcile::{Outcome, ReconcileError};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller::Action, watcher};
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::{RedroidInstance, RedroidTask};
use crate::names;

/// A failed pass, by step.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// Reading failed.
    #[error(transparent)]
    Observe(#[from] observe::ObserveError),
    /// Writing children, overrides or the finalizer failed.
    #[error(transparent)]
    Apply(#[from] apply::ApplyError),
    /// Writing the status failed.
    #[error(transparent)]
    Status(#[from] status::StatusError),
}

impl ReconcileError for TaskError {
    fn category(&self) -> &'static str {
        match self {
            TaskError::Observe(e) => e.category(),
            TaskError::Apply(e) => e.category(),
            TaskError::Status(e) => e.category(),
        }
    }
}

/// One reconcile pass of `task` (see the module docs).
pub async fn reconcile(task: Arc<RedroidTask>, ctx: Arc<Context>) -> Result<Action, TaskError> {
    let (ns, name) = (task.namespace().unwrap_or_default(), task.name_any());
    let api: Api<RedroidTask> = Api::namespaced(ctx.client.clone(), &ns);
    let obs = observe::observe(&ctx.client, &ns, &name).await?;
    let Some(task) = obs.task.clone() else {
        ctx.backoff.forget(&*task);
        return Ok(Action::await_change());
    };
    if task.meta().deletion_timestamp.is_some() {
        release_overrides(&ctx, &task, &obs).await?;
        let all: Vec<String> = obs.jobs.iter().map(ResourceExt::name_any).collect();
        apply::release_jobs(&ctx, &task, &obs.jobs, &all).await?;
        if apply::remove_finalizer(&api, &task).await? {
            tracing::info!(namespace = %ns, task = %name, "task deleted: its overrides were released");
        }
        return Ok(Action::await_change());
    }
    apply::ensure_finalizer(&api, &task).await?;
    let model = match validate::validate(&task, &obs.instances, &obs.config_maps) {
        Ok(model) => model,
        Err(invalid) => {
            report_invalid(&ctx, &api, &task, &invalid).await?;
            return Ok(ctx.backoff.succeeded(&task, Outcome::Done));
        }
    };
    let memory = task
        .status
        .as_ref()
        .map(|s| s.jobs.clone())
        .unwrap_or_default();
    let plan = build::plan(&model, &obs.jobs, &obs.pods, &memory);
    let changes = overrides::changes(&name, &plan.holds, &obs.instances);
    apply::overrides(&ctx, &task, &changes).await?;
    let input = if model.scheduled {
        apply::cronjobs(&ctx, &task, plan.cronjobs.clone(), &obs.cronjobs).await?;
        status::Input::Scheduled(&model, &obs.cronjobs)
    } else {
        apply::delete_jobs(&ctx, &task, &obs.jobs, &plan.delete_jobs).await?;
        apply::create_jobs(&ctx, &task, plan.create_jobs.clone()).await?;
        status::Input::OneShot(&model, &plan.entries)
    };
    let desired = status::compute(&task, input, jiff::Timestamp::now());
    if status::patch(&api, &task, &desired).await? {
        status::log_transition(&task, task.status.as_ref(), &desired);
    }
    // Only now that the outcomes are in the status may their Jobs go.
    apply::release_jobs(&ctx, &task, &obs.jobs, &plan.release).await?;
    let outcome = plan
        .recheck_after
        .map_or(Outcome::Done, Outcome::RequeueAfter);
    Ok(ctx.backoff.succeeded(&task, outcome))
}

// On deletion: remove every override this task set, wherever it is, and nothing else.
async fn release_overrides(
    ctx: &Context,
    task: &RedroidTask,
    obs: &observe::Observed,
) -> Result<(), TaskError> {
    let changes = overrides::changes(&task.name_any(), &BTreeMap::new(), &obs.instances);
    apply::overrides(ctx, task, &changes).await?;
    Ok(())
}

// Ready=False with the reason; one Warning Event when that condition changes.
async fn report_invalid(
    ctx: &Context,
    api: &Api<RedroidTask>,
    task: &RedroidTask,
    invalid: &validate::Invalid,
) -> Result<(), TaskError> {
    let desired = status::compute(
        task,
        status::Input::Invalid(invalid),
        jiff::Timestamp::now(),
    );
    let ready = |s: Option<&crate::crd::RedroidTaskStatus>| {
        s.and_then(|s| kit::conditions::get(&s.conditions, "Ready"))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let changed = ready(task.status.as_ref()) != ready(Some(&desired));
    if status::patch(api, task, &desired).await? {
        status::log_transition(task, task.status.as_ref(), &desired);
    }
    if changed {
        let ns = task.namespace().unwrap_or_default();
        apply::event(
            ctx,
            task,
            None,
            EventType::Warning,
            invalid.reason(),
            invalid.message(&ns),
        )
        .await;
    }
    Ok(())
}

/// What to do after a failed pass: per-object exponential back-off.
pub fn error_policy(task: Arc<RedroidTask>, err: &TaskError, ctx: Arc<Context>) -> Action {
    ctx.backoff.failed(&*task, err)
}

/// Runs the task controller until `rc.shutdown` is cancelled; `namespace` limits every watch.
pub async fn run(
    ctx: Arc<Context>,
    rc: RunContext,
    namespace: Option<String>,
) -> anyhow::Result<()> {
    fn api<K: Resource<Scope = k8s_openapi::NamespaceResourceScope>>(
        c: &kube::Client,
        ns: &Option<String>,
    ) -> Api<K>
    where
        K::DynamicType: Default,
    {
        match ns {
            Some(ns) => Api::namespaced(c.clone(), ns),
            None => Api::all(c.clone()),
        }
    }
    let client = ctx.client.clone();
    let wc = watcher::Config::default();
    let controller = Controller::new(api::<RedroidTask>(&client, &namespace), wc.clone());
    let store = controller.store();
    let cm_store = store.clone();
    let controller = controller
        .owns(api::<Job>(&client, &namespace), wc.clone())
        .owns(api::<CronJob>(&client, &namespace), wc.clone())
        .watches(
            api::<RedroidInstance>(&client, &namespace),
            wc.clone(),
            move |i| {
                referencing(&store, &i, |t, n| {
                    t.spec.instances.iter().any(|r| r.name == n)
                })
            },
        )
        .watches(
            api::<PartialObjectMeta<ConfigMap>>(&client, &namespace),
            wc,
            move |cm| {
                referencing(&cm_store, &cm, |t, n| {
                    validate::config_map_names(&t.spec).contains(n)
                })
            },
        );
    let mut settings = ControllerSettings::new(names::TASK_CONTROLLER);
    settings.max_concurrent_reconciles = ctx.settings.max_concurrent_reconciles;
    run_controller(controller, &settings, &rc, reconcile, error_policy, ctx).await;
    Ok(())
}

// The tasks in `obj`'s namespace for which `refers(task, obj's name)` holds.
fn referencing<K: Resource>(
    store: &Store<RedroidTask>,
    obj: &K,
    refers: impl Fn(&RedroidTask, &str) -> bool,
) -> Vec<ObjectRef<RedroidTask>> {
    let (ns, name) = (
        obj.meta().namespace.clone(),
        obj.meta().name.clone().unwrap_or_default(),
    );
    let tasks = store
        .state()
        .into_iter()
        .filter(|t| t.namespace() == ns && refers(t, &name));
    tasks.map(|t| ObjectRef::from_obj(&*t)).collect()
}
