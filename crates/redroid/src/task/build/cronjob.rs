//! Pure: the CronJob of one instance of a scheduled task, `<task>-<instance>` (hashed to fit
//! 52 characters, the CronJob limit).
//!
//! Contract: `concurrencyPolicy: Forbid`, `suspend`, `timeZone` when set,
//! `startingDeadlineSeconds`, history limits (default 3/3), the shared job template without
//! TTL; the annotation [`names::TASK_SPEC_HASH_ANNOTATION`] carries a hash of everything
//! else, so the applier can skip a CronJob that is already as desired.

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobTemplateSpec};
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};

use super::super::validate::{Access, Model, Target};
use super::job::{job_spec, labels};
use crate::names;

/// The longest CronJob name (its Jobs append an 11-character suffix).
pub const CRONJOB_NAME_MAX: usize = 52;

/// `<task>-<instance>`, cut with a hash suffix when longer than [`CRONJOB_NAME_MAX`].
pub fn cronjob_name(task: &str, instance: &str) -> String {
    kit::names::truncate_with_hash(&format!("{task}-{instance}"), CRONJOB_NAME_MAX)
}

/// The CronJob of `target`, with its spec-hash annotation.
pub fn cronjob(model: &Model, target: &Target) -> CronJob {
    let labels = labels(&model.name, &target.name, false);
    let spec = CronJobSpec {
        schedule: model.spec.schedule.clone(),
        concurrency_policy: Some("Forbid".into()),
        suspend: Some(model.spec.suspend),
        time_zone: model.spec.timezone.clone().filter(|z| !z.is_empty()),
        starting_deadline_seconds: model.spec.starting_deadline_seconds,
        successful_jobs_history_limit: Some(model.spec.successful_jobs_history_limit.unwrap_or(3)),
        failed_jobs_history_limit: Some(model.spec.failed_jobs_history_limit.unwrap_or(3)),
        job_template: JobTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            }),
            spec: Some(job_spec(model, target, Access::Service, false)),
        },
    };
    let mut cj = CronJob {
        metadata: ObjectMeta {
            name: Some(cronjob_name(&model.name, &target.name)),
            namespace: Some(model.namespace.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    };
    let hash = spec_hash(&cj);
    cj.metadata.annotations = Some([(names::TASK_SPEC_HASH_ANNOTATION.to_string(), hash)].into());
    cj
}

fn spec_hash(cj: &CronJob) -> String {
    let json = serde_json::to_vec(&(&cj.metadata.labels, &cj.spec)).unwrap_or_default();
    let digest = Sha256::digest(&json);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}
