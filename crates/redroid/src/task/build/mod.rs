//! Pure: a validated task plus its observed children → the desired children and overrides.
//!
//! Contract of [`plan`]:
//! - Scheduled: one CronJob per instance; no overrides, no one-shot Jobs touched.
//! - One-shot: each instance runs once. Its entry in `status.jobs` is the memory: an instance
//!   remembered as Succeeded/Failed never gets a Job again, and a remembered Running Job that
//!   vanished (deleted by hand) is recorded Failed rather than re-run.
//! - At most `parallelism` instances are in progress (preparing or running), picked in spec
//!   order. `suspendInstance`: the instance is held by `status.suspended` and its Job (with
//!   the redroid sidecar) is created only once the instance reports Stopped with one, no
//!   instance pod of it exists, no other data-sidecar pod of it is unfinished, and no other
//!   instance's Pod or unfinished sidecar uses data conflicting with it ([`crate::data`]). `wakeInstance`:
//!   held by `status.woken`, Job created once it reports Running with one.
//! - Desired overrides are only those of instances in progress; the applier clears this
//!   task's own overrides everywhere else.
//! - Task-owned Jobs of instances no longer referenced are deleted.
//! - A Job keeps [`names::JOB_OUTCOME_FINALIZER`] until its outcome is final in the entries:
//!   finished (its conditions), or deleted before it finished (`JobDeleted`). [`Plan::release`]
//!   names the Jobs whose finalizer may go once the entries are written.

pub mod cronjob;
pub mod job;
pub mod pod;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::validate::{Access, Model, Target};
use crate::crd::{InstancePhase, TaskJobPhase, TaskJobStatus};
use crate::data::Usage;
use crate::names;

/// An override this task wants on an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// `status.suspended`.
    Suspend,
    /// `status.woken`.
    Wake,
}

/// What the applier should make true.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// One-shot Jobs to create.
    pub create_jobs: Vec<Job>,
    /// Task-owned Jobs to delete (instance no longer referenced).
    pub delete_jobs: Vec<String>,
    /// CronJobs that should exist (scheduled tasks).
    pub cronjobs: Vec<CronJob>,
    /// The overrides this task should hold, by instance.
    pub holds: BTreeMap<String, Hold>,
    /// `status.jobs` after this pass.
    pub entries: Vec<TaskJobStatus>,
    /// Waiting on something no watch reports (an instance pod going away).
    pub recheck_after: Option<Duration>,
    /// Jobs holding [`names::JOB_OUTCOME_FINALIZER`] whose outcome `entries` records as final:
    /// their finalizer goes once `entries` are in the status.
    pub release: Vec<String>,
}

/// How long to wait before looking again at pods that are going away.
pub const POD_RECHECK: Duration = Duration::from_secs(2);

/// The plan for `model`; `jobs` are the Jobs the task controls, `pods` those labelled with an
/// instance, `memory` the live `status.jobs`.
pub fn plan(model: &Model, jobs: &[Job], pods: &[Pod], memory: &[TaskJobStatus]) -> Plan {
    let mut plan = Plan::default();
    if model.scheduled {
        plan.cronjobs = model
            .targets
            .iter()
            .map(|t| cronjob::cronjob(model, t))
            .collect();
        return plan;
    }
    let wanted: Vec<String> = model
        .targets
        .iter()
        .map(|t| job::job_name(&model.name, &t.name))
        .collect();
    plan.delete_jobs = jobs
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| !wanted.contains(n))
        .collect();
    let mut pending = Vec::new();
    for (target, name) in model.targets.iter().zip(&wanted) {
        let live = jobs.iter().find(|j| &j.name_any() == name);
        let remembered = memory.iter().find(|e| e.instance == target.name);
        match entry(target, name, live, remembered) {
            Some(e) => {
                let holding =
                    live.is_some_and(|j| kit::finalizers::has(j, names::JOB_OUTCOME_FINALIZER));
                if holding && e.phase != TaskJobPhase::Running {
                    plan.release.push(name.clone());
                }
                if e.phase == TaskJobPhase::Running {
                    hold(&mut plan, model.access, target);
                }
                plan.entries.push(e);
            }
            None => pending.push(target),
        }
    }
    let running = plan
        .entries
        .iter()
        .filter(|e| e.phase == TaskJobPhase::Running)
        .count();
    let limit = model
        .spec
        .parallelism
        .map_or(usize::MAX, |p| usize::try_from(p).unwrap_or(1));
    for target in pending.into_iter().take(limit.saturating_sub(running)) {
        start(&mut plan, model, target, pods);
    }
    plan
}

// The status entry of an instance whose Job exists or existed; None if it never ran.
fn entry(
    target: &Target,
    name: &str,
    live: Option<&Job>,
    remembered: Option<&TaskJobStatus>,
) -> Option<TaskJobStatus> {
    match (live, remembered) {
        (Some(j), _) => Some(observed_entry(target, j)),
        (None, Some(r)) if r.phase == TaskJobPhase::Running => Some(TaskJobStatus {
            phase: TaskJobPhase::Failed,
            reason: Some("JobDeleted".into()),
            message: Some(format!("Job {name:?} was deleted before it finished.")),
            ..r.clone()
        }),
        (None, Some(r)) => Some(r.clone()),
        (None, None) => None,
    }
}

fn observed_entry(target: &Target, job: &Job) -> TaskJobStatus {
    let status = job.status.clone().unwrap_or_default();
    let conds = status.conditions.unwrap_or_default();
    let is = |t: &str| conds.iter().find(|c| c.type_ == t && c.status == "True");
    let mut e = TaskJobStatus {
        instance: target.name.clone(),
        job: job.name_any(),
        phase: TaskJobPhase::Running,
        completion_time: None,
        reason: None,
        message: None,
    };
    if is("Complete").is_some() {
        e.phase = TaskJobPhase::Succeeded;
        e.completion_time = status.completion_time;
    } else if let Some(c) = is("Failed") {
        e.phase = TaskJobPhase::Failed;
        e.completion_time = c.last_transition_time.clone();
        e.reason = c.reason.clone();
        e.message = c.message.clone();
    } else if job.metadata.deletion_timestamp.is_some() {
        // Deleted before it finished (by hand): what a vanished Running Job is recorded as.
        e.phase = TaskJobPhase::Failed;
        e.reason = Some("JobDeleted".into());
        e.message = Some(format!(
            "Job {:?} was deleted before it finished.",
            job.name_any()
        ));
    }
    e
}

fn hold(plan: &mut Plan, access: Access, target: &Target) {
    let h = match access {
        Access::Sidecar => Hold::Suspend,
        Access::Wake => Hold::Wake,
        Access::Service => return,
    };
    plan.holds.insert(target.name.clone(), h);
}

fn start(plan: &mut Plan, model: &Model, target: &Target, pods: &[Pod]) {
    hold(plan, model.access, target);
    let ready = match model.access {
        Access::Service => true,
        Access::Wake => target.woken.is_some() && target.phase == Some(InstancePhase::Running),
        Access::Sidecar => {
            let stopped =
                target.suspended.is_some() && target.phase == Some(InstancePhase::Stopped);
            let busy = data_in_use(target, pods);
            if stopped && busy {
                plan.recheck_after = Some(POD_RECHECK);
            }
            stopped && !busy
        }
    };
    if ready {
        let job = job::job(model, target);
        plan.entries.push(TaskJobStatus {
            instance: target.name.clone(),
            job: job.name_any(),
            phase: TaskJobPhase::Running,
            completion_time: None,
            reason: None,
            message: None,
        });
        plan.create_jobs.push(job);
    }
}

// An instance pod (in any state) or an unfinished data-sidecar pod exists that is the
// target's own, or whose volumes use data conflicting with the target's.
fn data_in_use(target: &Target, pods: &[Pod]) -> bool {
    let own = names::instance_label(&target.name);
    let usage = Usage::of_spec(&target.spec);
    pods.iter().any(|p| {
        let labels = p.labels();
        let label = |k: &str| labels.get(k).map(String::as_str);
        let finished = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
        let holds = label(names::COMPONENT_LABEL) == Some(names::COMPONENT_INSTANCE)
            || (label(names::SIDECAR_LABEL) == Some("true") && !finished);
        let mine = label(names::INSTANCE_LABEL) == Some(own.as_str());
        let conflicts = Usage::of_pod(p).is_some_and(|u| usage.conflict(&u).is_some());
        holds && (mine || conflicts)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::task::validate::tests::{instance, task};
    use crate::task::validate::validate;

    fn model(yaml: &str) -> Model {
        let insts = [instance("a", 0), instance("b", 1), instance("c", 2)];
        validate(&task(yaml), &insts, &BTreeSet::new()).expect("valid")
    }

    const THREE: &str = "{metadata: {name: t, namespace: ns}, spec: {instances: [{name: a}, {name: b}, {name: c}], parallelism: 1, integrations: [{name: m, image: m}]}}";

    #[test]
    fn parallelism_starts_jobs_in_spec_order() {
        let p = plan(&model(THREE), &[], &[], &[]);
        let names: Vec<String> = p.create_jobs.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["t-a"]);
    }

    #[test]
    fn finished_instances_are_remembered_and_lost_jobs_not_rerun() {
        let done = |i: &str, phase| TaskJobStatus {
            instance: i.into(),
            job: format!("t-{i}"),
            phase,
            completion_time: None,
            reason: None,
            message: None,
        };
        let memory = [
            done("a", TaskJobPhase::Succeeded),
            done("b", TaskJobPhase::Running),
        ];
        let p = plan(&model(THREE), &[], &[], &memory);
        let names: Vec<String> = p.create_jobs.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["t-c"]);
        assert_eq!(p.entries[1].phase, TaskJobPhase::Failed);
        assert_eq!(p.entries[1].reason.as_deref(), Some("JobDeleted"));
    }

    fn job(name: &str, condition: Option<&str>, deleting: bool) -> Job {
        let mut j: Job = serde_yaml::from_str(&format!(
            "metadata: {{name: {name}, finalizers: [{}]}}",
            names::JOB_OUTCOME_FINALIZER
        ))
        .expect("job");
        if let Some(c) = condition {
            j.status =
                serde_yaml::from_str(&format!("conditions: [{{type: {c}, status: \"True\"}}]"))
                    .expect("status");
        }
        if deleting {
            j.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        j
    }

    #[test]
    fn a_job_keeps_its_finalizer_until_its_outcome_is_final() {
        // (condition, being deleted) → (recorded phase, reason, finalizer released)
        let cases = [
            (None, false, TaskJobPhase::Running, None, false),
            (Some("Complete"), false, TaskJobPhase::Succeeded, None, true),
            (Some("Complete"), true, TaskJobPhase::Succeeded, None, true),
            (Some("Failed"), false, TaskJobPhase::Failed, None, true),
            (None, true, TaskJobPhase::Failed, Some("JobDeleted"), true),
        ];
        let m = model(
            "{metadata: {name: t, namespace: ns}, spec: {instances: [{name: a}], integrations: [{name: m, image: m}]}}",
        );
        for (condition, deleting, phase, reason, released) in cases {
            let p = plan(&m, &[job("t-a", condition, deleting)], &[], &[]);
            let what = format!("{condition:?} deleting={deleting}");
            assert_eq!(p.entries[0].phase, phase, "{what}");
            assert_eq!(p.entries[0].reason.as_deref(), reason, "{what}");
            assert_eq!(p.release == ["t-a"], released, "{what}");
            assert!(p.create_jobs.is_empty(), "{what}: never a second Job");
        }
        let fresh = plan(&m, &[], &[], &[]);
        assert_eq!(
            fresh.create_jobs[0].finalizers(),
            [names::JOB_OUTCOME_FINALIZER],
            "a new Job carries the finalizer"
        );
    }

    #[test]
    fn suspend_instance_holds_before_creating() {
        let m = model(
            "{metadata: {name: t, namespace: ns}, spec: {instances: [{name: a}], suspendInstance: true, integrations: [{name: m, image: m}]}}",
        );
        let p = plan(&m, &[], &[], &[]);
        assert!(p.create_jobs.is_empty());
        assert_eq!(p.holds.get("a"), Some(&Hold::Suspend));
    }

    #[test]
    fn sidecar_waits_for_any_pod_on_conflicting_data() {
        let mut m = model(
            "{metadata: {name: t, namespace: ns}, spec: {instances: [{name: a}], suspendInstance: true, integrations: [{name: m, image: m}]}}",
        );
        m.targets[0].phase = Some(InstancePhase::Stopped);
        m.targets[0].suspended = Some(Default::default());
        // An instance Pod of another instance `z` on diff index `index` (a's index is 0).
        let pod = |index: i32| -> Pod {
            serde_yaml::from_str(&format!(
                r#"
metadata: {{name: z-pod, labels: {{"{}": z, "{}": instance}}}}
spec:
  volumes:
  - {{name: data-base, persistentVolumeClaim: {{claimName: redroid-data-base-pvc}}}}
  - {{name: data-diff, persistentVolumeClaim: {{claimName: redroid-data-diff-pvc}}}}
  containers: [{{name: redroid, volumeMounts: [{{name: data-diff, mountPath: /data-diff/{index}, subPath: "{index}"}}]}}]
"#,
                names::INSTANCE_LABEL,
                names::COMPONENT_LABEL
            ))
            .expect("pod")
        };
        let blocked = plan(&m, &[], &[pod(0)], &[]);
        assert!(blocked.create_jobs.is_empty());
        assert_eq!(blocked.recheck_after, Some(POD_RECHECK));
        let free = plan(&m, &[], &[pod(5)], &[]);
        assert_eq!(free.create_jobs.len(), 1);
    }

    #[test]
    fn names_fit_their_limits_and_quoting_is_safe() {
        let long = "x".repeat(60);
        assert!(job::job_name(&long, "instance").len() <= 63);
        assert!(cronjob::cronjob_name(&long, "instance").len() <= 52);
        assert_eq!(pod::shell_quote("it's $HOME"), r"'it'\''s $HOME'");
        assert!(
            pod::wait_script(&[], &[]).ends_with("done\n"),
            "no exec without command or args"
        );
    }
}
