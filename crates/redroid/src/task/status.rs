//! Pure status computation, and the one status write (only when it differs).
//!
//! Contract of [`compute`]: deterministic from its inputs (`now` only stamps a condition that
//! changes status). Conditions, upstream's three plus `Ready`:
//! - `Ready`: True/`ReferencesResolved`, or False with the [`Invalid`] reason and message.
//! - `Active`: True/`JobsActive` naming the running Jobs, else False/`NoActiveJobs`.
//! - One-shot `Complete`: True/`AllJobsSucceeded` when every instance's Job succeeded, else
//!   False/`NotComplete` "x/y Job(s) have completed successfully[; N active]."; `Failed`:
//!   True/`JobsFailed` with each Job's name, reason and message, else False/`NoFailedJobs`.
//! - Scheduled: `Complete`/`Failed` False with reason `Scheduled`; `activeJobs`,
//!   `lastScheduleTime` and `lastSuccessfulTime` come from the CronJobs (latest of each).
//! - An invalid task keeps everything else it had and only updates `Ready`.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kit::conditions::{self, Desired};
use kube::api::Api;

use super::validate::{Invalid, Model};
use crate::crd::{RedroidTask, RedroidTaskStatus, TaskJobPhase, TaskJobStatus};
use crate::names;

/// What the status is computed from.
pub enum Input<'a> {
    /// References do not resolve.
    Invalid(&'a Invalid),
    /// A one-shot task and its `status.jobs` after this pass.
    OneShot(&'a Model, &'a [TaskJobStatus]),
    /// A scheduled task and its CronJobs.
    Scheduled(&'a Model, &'a [CronJob]),
}

/// The status `task` should have.
pub fn compute(task: &RedroidTask, input: Input<'_>, now: Timestamp) -> RedroidTaskStatus {
    let mut s = task.status.clone().unwrap_or_default();
    let generation = task.metadata.generation;
    s.observed_generation = generation;
    let set = |c: &mut Vec<_>, d: Desired| {
        conditions::upsert(c, d.observed(generation), now);
    };
    match input {
        Input::Invalid(inv) => {
            let ns = task.metadata.namespace.clone().unwrap_or_default();
            set(
                &mut s.conditions,
                Desired::new("Ready", false, inv.reason(), inv.message(&ns)),
            );
            return s;
        }
        Input::OneShot(model, entries) => {
            s.jobs = entries.to_vec();
            s.active_jobs = running(entries);
            s.last_schedule_time = None;
            s.last_successful_time = latest(
                entries
                    .iter()
                    .filter(|e| e.phase == TaskJobPhase::Succeeded)
                    .map(|e| &e.completion_time),
            );
            let (complete, failed) = one_shot_conditions(model.targets.len(), entries);
            set(&mut s.conditions, ready(model));
            set(&mut s.conditions, active(&s.active_jobs));
            set(&mut s.conditions, complete);
            set(&mut s.conditions, failed);
        }
        Input::Scheduled(model, cronjobs) => {
            s.jobs = Vec::new();
            let st: Vec<_> = cronjobs.iter().filter_map(|c| c.status.clone()).collect();
            let mut act: Vec<String> = st
                .iter()
                .flat_map(|s| s.active.iter().flatten())
                .filter_map(|r| r.name.clone())
                .collect();
            act.sort();
            s.active_jobs = act;
            s.last_schedule_time = latest(st.iter().map(|s| &s.last_schedule_time));
            s.last_successful_time = latest(st.iter().map(|s| &s.last_successful_time));
            let n = cronjobs.len();
            set(&mut s.conditions, ready(model));
            set(&mut s.conditions, active(&s.active_jobs));
            let msg = format!(
                "Scheduled task: {n} CronJob(s) create the Jobs; see each CronJob's Jobs for their results."
            );
            set(
                &mut s.conditions,
                Desired::new("Complete", false, "Scheduled", msg.clone()),
            );
            set(
                &mut s.conditions,
                Desired::new("Failed", false, "Scheduled", msg),
            );
        }
    }
    s
}

fn running(entries: &[TaskJobStatus]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.phase == TaskJobPhase::Running)
        .map(|e| e.job.clone())
        .collect()
}

fn latest<'a>(times: impl Iterator<Item = &'a Option<Time>>) -> Option<Time> {
    times.flatten().max_by_key(|t| t.0).cloned()
}

fn ready(model: &Model) -> Desired {
    let msg = format!(
        "All {} instance(s) and referenced ConfigMaps exist.",
        model.targets.len()
    );
    Desired::new("Ready", true, "ReferencesResolved", msg)
}

fn active(jobs: &[String]) -> Desired {
    if jobs.is_empty() {
        return Desired::new("Active", false, "NoActiveJobs", "No Jobs are running.");
    }
    Desired::new(
        "Active",
        true,
        "JobsActive",
        format!("{} Job(s) running: {}.", jobs.len(), jobs.join(", ")),
    )
}

fn one_shot_conditions(expected: usize, entries: &[TaskJobStatus]) -> (Desired, Desired) {
    let count = |p| entries.iter().filter(|e| e.phase == p).count();
    let (ok, running) = (count(TaskJobPhase::Succeeded), count(TaskJobPhase::Running));
    let failures: Vec<String> = entries
        .iter()
        .filter(|e| e.phase == TaskJobPhase::Failed)
        .map(describe_failure)
        .collect();
    let complete = if running == 0 && failures.is_empty() && expected > 0 && ok >= expected {
        Desired::new(
            "Complete",
            true,
            "AllJobsSucceeded",
            format!("All {ok} Job(s) completed successfully."),
        )
    } else {
        let tail = if running > 0 {
            format!("; {running} active")
        } else {
            String::new()
        };
        Desired::new(
            "Complete",
            false,
            "NotComplete",
            format!("{ok}/{expected} Job(s) have completed successfully{tail}."),
        )
    };
    let failed = if failures.is_empty() {
        Desired::new("Failed", false, "NoFailedJobs", "No Jobs have failed.")
    } else {
        Desired::new("Failed", true, "JobsFailed", failures.join("; "))
    };
    (complete, failed)
}

fn describe_failure(e: &TaskJobStatus) -> String {
    let reason = e.reason.as_deref().unwrap_or("Unknown");
    let message = e.message.as_deref().unwrap_or("no message");
    format!("job {:?} failed (reason: {reason}): {message}", e.job)
}

/// Writes `desired` to the task's status subresource if it differs; returns whether it wrote.
pub async fn patch(
    api: &Api<RedroidTask>,
    task: &RedroidTask,
    desired: &RedroidTaskStatus,
) -> Result<bool, StatusError> {
    kit::status::patch_status_if_changed(api, task, desired, names::FIELD_MANAGER)
        .await
        .map_err(|source| StatusError::Patch {
            task: task.metadata.name.clone().unwrap_or_default(),
            source,
        })
}

/// Logs, at info, each of `Ready`, `Active`, `Complete` and `Failed` whose status or reason
/// changed from `old` to `new` (a pass that changes nothing logs nothing).
pub fn log_transition(
    task: &RedroidTask,
    old: Option<&RedroidTaskStatus>,
    new: &RedroidTaskStatus,
) {
    for type_ in ["Ready", "Active", "Complete", "Failed"] {
        let get = |s: Option<&RedroidTaskStatus>| {
            s.and_then(|s| conditions::get(&s.conditions, type_))
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let (before, after) = (get(old), get(Some(new)));
        let Some((status, reason, message)) = after else {
            continue;
        };
        if before.as_ref().map(|b| (&b.0, &b.1)) == Some((&status, &reason)) {
            continue;
        }
        tracing::info!(
            namespace = %task.metadata.namespace.clone().unwrap_or_default(),
            task = %task.metadata.name.clone().unwrap_or_default(),
            condition = %type_,
            status = %status,
            reason = %reason,
            message = %message,
            "task condition changed"
        );
    }
}

/// The status write failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Patching the status of `task` failed.
    #[error("patching the status of RedroidTask {task}: {source}")]
    Patch {
        /// The task.
        task: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl kit::reconcile::ReconcileError for StatusError {
    fn category(&self) -> &'static str {
        "patch_status"
    }
}
