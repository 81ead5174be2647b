//! Pure: the one-shot Job of one instance, `<task>-<instance>` (hashed to fit 63 characters).
//!
//! Contract: labels managed-by/task/instance/component=task (+ data-sidecar=true with the
//! sidecar) on the Job and its pod template; `backoffLimit` (default 0),
//! `activeDeadlineSeconds`, `ttlSecondsAfterFinished`; the finalizer
//! [`names::JOB_OUTCOME_FINALIZER`], released once the task recorded the Job's outcome; a
//! controller owner reference to the task is added by the caller, which knows the task's UID.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use kube::api::ObjectMeta;

use super::super::validate::{Access, Model, Target};
use super::pod::pod_template;
use crate::names;

/// The longest Job name that keeps the pod label `job-name` valid.
pub const JOB_NAME_MAX: usize = 63;

/// `<task>-<instance>`, cut with a hash suffix when longer than [`JOB_NAME_MAX`].
pub fn job_name(task: &str, instance: &str) -> String {
    kit::names::truncate_with_hash(&format!("{task}-{instance}"), JOB_NAME_MAX)
}

/// The labels of every child of `task` for `instance`.
pub fn labels(task: &str, instance: &str, sidecar: bool) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        (
            names::MANAGED_BY_LABEL.to_string(),
            names::MANAGED_BY.to_string(),
        ),
        (names::TASK_LABEL.to_string(), task.to_string()),
        (
            names::INSTANCE_LABEL.to_string(),
            names::instance_label(instance),
        ),
        (
            names::COMPONENT_LABEL.to_string(),
            names::COMPONENT_TASK.to_string(),
        ),
    ]);
    if sidecar {
        l.insert(names::SIDECAR_LABEL.to_string(), "true".to_string());
    }
    l
}

/// The Job spec shared with CronJobs' job templates; `ttl` only for one-shot Jobs.
pub fn job_spec(model: &Model, target: &Target, access: Access, ttl: bool) -> JobSpec {
    let labels = labels(&model.name, &target.name, access == Access::Sidecar);
    JobSpec {
        backoff_limit: Some(model.spec.backoff_limit.unwrap_or(0)),
        active_deadline_seconds: model.spec.active_deadline_seconds,
        ttl_seconds_after_finished: if ttl {
            model.spec.ttl_seconds_after_finished
        } else {
            None
        },
        template: pod_template(model, target, access, &labels),
        ..JobSpec::default()
    }
}

/// The one-shot Job of `target`.
pub fn job(model: &Model, target: &Target) -> Job {
    let sidecar = model.access == Access::Sidecar;
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(&model.name, &target.name)),
            namespace: Some(model.namespace.clone()),
            labels: Some(labels(&model.name, &target.name, sidecar)),
            finalizers: Some(vec![names::JOB_OUTCOME_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(job_spec(model, target, model.access, true)),
        status: None,
    }
}
