//! The only writer of the task controller: finalizer, instance overrides, Jobs, CronJobs and
//! Events.
//!
//! Contract:
//! - Children are server-side applied with [`names::FIELD_MANAGER`] and a controller owner
//!   reference to the task. A one-shot Job is only ever created (never updated), with its
//!   outcome finalizer, which [`release_jobs`] removes once the outcome is recorded; a CronJob is
//!   applied only when missing or when its spec-hash annotation differs; labelled CronJobs
//!   and task-owned Jobs that are no longer desired are deleted.
//! - Nothing is written when nothing differs, so a converged task costs no writes.
//! - Each action records an Event on the task (upstream's reasons).

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PropagationPolicy};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::overrides::Change;
use crate::context::Context;
use crate::crd::{RedroidInstance, RedroidTask};
use crate::names;

/// A failed write.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Adding or removing the task finalizer failed.
    #[error("updating the finalizer of RedroidTask {task}: {source}")]
    Finalizer {
        /// The task.
        task: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Setting or clearing an override on an instance failed.
    #[error("patching the status of RedroidInstance {instance}: {source}")]
    Override {
        /// The instance.
        instance: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Creating a Job failed.
    #[error("creating Job {job}: {source}")]
    CreateJob {
        /// The Job.
        job: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Removing the outcome finalizer of a Job failed.
    #[error("releasing Job {job}: {source}")]
    ReleaseJob {
        /// The Job.
        job: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Applying a CronJob failed.
    #[error("applying CronJob {cronjob}: {source}")]
    ApplyCronJob {
        /// The CronJob.
        cronjob: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Deleting a Job or CronJob failed.
    #[error("deleting {kind} {name}: {source}")]
    Delete {
        /// Job or CronJob.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl kit::reconcile::ReconcileError for ApplyError {
    fn category(&self) -> &'static str {
        match self {
            ApplyError::Finalizer { .. } => "update_finalizer",
            ApplyError::Override { .. } => "patch_instance_override",
            ApplyError::CreateJob { .. } => "create_job",
            ApplyError::ReleaseJob { .. } => "release_job",
            ApplyError::ApplyCronJob { .. } => "apply_cronjob",
            ApplyError::Delete { .. } => "delete_child",
        }
    }
}

/// Publishes an Event on `task`, related to the child or instance `about` (so Events about
/// different objects are not folded into one series); a failure to record is logged.
pub async fn event(
    ctx: &Context,
    task: &RedroidTask,
    about: Option<ObjectReference>,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let warning = type_ == EventType::Warning;
    let reference = task.object_ref(&());
    kit::events::publish(&ctx.recorder, &reference, warning, reason, note, about).await;
}

/// A reference to `kind`/`name` in the task's namespace, for [`event`].
/// An Event on `task` about its batch/v1 child (`kind` Job or CronJob) called `name`.
async fn child_event(
    ctx: &Context,
    task: &RedroidTask,
    kind: &str,
    name: &str,
    type_: EventType,
    reason: &str,
    note: String,
) {
    event(
        ctx,
        task,
        about(task, "batch/v1", kind, name),
        type_,
        reason,
        note,
    )
    .await
}

pub fn about(
    task: &RedroidTask,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Option<ObjectReference> {
    Some(ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: task.namespace(),
        ..ObjectReference::default()
    })
}

/// Adds the task finalizer if missing; returns whether it wrote.
pub async fn ensure_finalizer(
    api: &Api<RedroidTask>,
    task: &RedroidTask,
) -> Result<bool, ApplyError> {
    kit::finalizers::add(api, task, names::TASK_FINALIZER)
        .await
        .map_err(|source| ApplyError::Finalizer {
            task: task.name_any(),
            source,
        })
}

/// Removes the task finalizer if present; returns whether it wrote.
pub async fn remove_finalizer(
    api: &Api<RedroidTask>,
    task: &RedroidTask,
) -> Result<bool, ApplyError> {
    kit::finalizers::remove(api, task, names::TASK_FINALIZER)
        .await
        .map_err(|source| ApplyError::Finalizer {
            task: task.name_any(),
            source,
        })
}

/// Writes the override `changes` on instances, with an Event each.
pub async fn overrides(
    ctx: &Context,
    task: &RedroidTask,
    changes: &[Change],
) -> Result<(), ApplyError> {
    let api: Api<RedroidInstance> =
        Api::namespaced(ctx.client.clone(), &task.namespace().unwrap_or_default());
    for c in changes {
        let patch = Patch::Merge(c.patch(&task.name_any()));
        let err = |source| ApplyError::Override {
            instance: c.instance.clone(),
            source,
        };
        api.patch_status(&c.instance, &PatchParams::default(), &patch)
            .await
            .map_err(err)?;
        let verb = if c.set { "Set" } else { "Cleared" };
        let field = if c.event_reason().contains("Suspended") {
            "suspended"
        } else {
            "woken"
        };
        tracing::info!(
            namespace = %task.namespace().unwrap_or_default(),
            task = %task.name_any(),
            instance = %c.instance,
            reason = %c.event_reason(),
            "{} status.{field} of an instance",
            if c.set { "set" } else { "cleared" }
        );
        let note = format!("{verb} status.{field} on RedroidInstance {}", c.instance);
        event(
            ctx,
            task,
            about(
                task,
                "redroid.isning.moe/v1alpha1",
                "RedroidInstance",
                &c.instance,
            ),
            EventType::Normal,
            c.event_reason(),
            note,
        )
        .await;
    }
    Ok(())
}

fn owned<K: Resource<DynamicType = ()>>(mut child: K, task: &RedroidTask) -> K {
    child.meta_mut().owner_references = task.controller_owner_ref(&()).map(|o| vec![o]);
    child
}

/// Creates the one-shot `jobs`, with `CreatedJob` / `FailedCreateJob` Events.
pub async fn create_jobs(
    ctx: &Context,
    task: &RedroidTask,
    jobs: Vec<Job>,
) -> Result<(), ApplyError> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &task.namespace().unwrap_or_default());
    let params = PatchParams::apply(names::FIELD_MANAGER).force();
    for job in jobs {
        let name = job.name_any();
        match api
            .patch(&name, &params, &Patch::Apply(owned(job, task)))
            .await
        {
            Ok(_) => {
                tracing::info!(
                    namespace = %task.namespace().unwrap_or_default(),
                    task = %task.name_any(),
                    job = %name,
                    "created Job"
                );
                child_event(
                    ctx,
                    task,
                    "Job",
                    &name,
                    EventType::Normal,
                    "CreatedJob",
                    format!("Created Job {name}"),
                )
                .await
            }
            Err(source) => {
                let note = format!("Failed to create Job {name}: {source}");
                child_event(
                    ctx,
                    task,
                    "Job",
                    &name,
                    EventType::Warning,
                    "FailedCreateJob",
                    note,
                )
                .await;
                return Err(ApplyError::CreateJob { job: name, source });
            }
        }
    }
    Ok(())
}

/// Removes [`names::JOB_OUTCOME_FINALIZER`] from the Jobs of `live` named in `names` (a Job
/// whose outcome is recorded, or that the task no longer needs); a Job already gone is done.
pub async fn release_jobs(
    ctx: &Context,
    task: &RedroidTask,
    live: &[Job],
    names: &[String],
) -> Result<(), ApplyError> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &task.namespace().unwrap_or_default());
    for job in live.iter().filter(|j| names.contains(&j.name_any())) {
        let released = kit::finalizers::remove(&api, job, names::JOB_OUTCOME_FINALIZER)
            .await
            .map_err(|source| ApplyError::ReleaseJob {
                job: job.name_any(),
                source,
            })?;
        if released {
            tracing::info!(
                namespace = %task.namespace().unwrap_or_default(),
                task = %task.name_any(),
                job = %job.name_any(),
                "released Job: its outcome is recorded"
            );
        }
    }
    Ok(())
}

/// Deletes task-owned Jobs by name (their pods go with them), releasing their finalizer
/// first: the task no longer needs their outcome.
pub async fn delete_jobs(
    ctx: &Context,
    task: &RedroidTask,
    live: &[Job],
    jobs: &[String],
) -> Result<(), ApplyError> {
    release_jobs(ctx, task, live, jobs).await?;
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &task.namespace().unwrap_or_default());
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    for name in jobs {
        let err = |source| ApplyError::Delete {
            kind: "Job",
            name: name.clone(),
            source,
        };
        ignore_not_found(api.delete(name, &dp).await.map(|_| ())).map_err(err)?;
        tracing::info!(
            namespace = %task.namespace().unwrap_or_default(),
            task = %task.name_any(),
            job = %name,
            "deleted Job: its instance left the task"
        );
        child_event(
            ctx,
            task,
            "Job",
            name,
            EventType::Normal,
            "DeletedJob",
            format!("Deleted Job {name}: its instance left the task"),
        )
        .await;
    }
    Ok(())
}

/// Makes the task's CronJobs exactly `desired`: applies missing or changed ones, deletes the
/// rest of `live`.
pub async fn cronjobs(
    ctx: &Context,
    task: &RedroidTask,
    desired: Vec<CronJob>,
    live: &[CronJob],
) -> Result<(), ApplyError> {
    let api: Api<CronJob> =
        Api::namespaced(ctx.client.clone(), &task.namespace().unwrap_or_default());
    let hash = |c: &CronJob| {
        c.annotations()
            .get(names::TASK_SPEC_HASH_ANNOTATION)
            .cloned()
    };
    for stale in live
        .iter()
        .filter(|l| !desired.iter().any(|d| d.name_any() == l.name_any()))
    {
        let name = stale.name_any();
        let err = |source| ApplyError::Delete {
            kind: "CronJob",
            name: name.clone(),
            source,
        };
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        ignore_not_found(api.delete(&name, &dp).await.map(|_| ())).map_err(err)?;
        tracing::info!(
            namespace = %task.namespace().unwrap_or_default(),
            task = %task.name_any(),
            cronjob = %name,
            "deleted CronJob: its instance left the task"
        );
        child_event(
            ctx,
            task,
            "CronJob",
            &name,
            EventType::Normal,
            "DeletedCronJob",
            format!("Deleted CronJob {name}: its instance left the task"),
        )
        .await;
    }
    let params = PatchParams::apply(names::FIELD_MANAGER).force();
    for cj in desired {
        let name = cj.name_any();
        let existing = live.iter().find(|l| l.name_any() == name);
        if existing.is_some_and(|l| hash(l) == hash(&cj)) {
            continue;
        }
        let result = api
            .patch(&name, &params, &Patch::Apply(owned(cj, task)))
            .await;
        let (reason, verb) = if existing.is_some() {
            ("UpdatedCronJob", "Updated")
        } else {
            ("CreatedCronJob", "Created")
        };
        match result {
            Ok(_) => {
                tracing::info!(
                    namespace = %task.namespace().unwrap_or_default(),
                    task = %task.name_any(),
                    cronjob = %name,
                    "{} CronJob",
                    verb.to_lowercase()
                );
                child_event(
                    ctx,
                    task,
                    "CronJob",
                    &name,
                    EventType::Normal,
                    reason,
                    format!("{verb} CronJob {name}"),
                )
                .await
            }
            Err(source) => {
                let note = format!("Failed to apply CronJob {name}: {source}");
                child_event(
                    ctx,
                    task,
                    "CronJob",
                    &name,
                    EventType::Warning,
                    "FailedCreateCronJob",
                    note,
                )
                .await;
                return Err(ApplyError::ApplyCronJob {
                    cronjob: name,
                    source,
                });
            }
        }
    }
    Ok(())
}

fn ignore_not_found(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}
