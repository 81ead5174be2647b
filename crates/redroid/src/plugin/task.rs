//! `kubectl redroid task …`: read tasks, run a scheduled task now, read its newest Job's logs.
//!
//! Contract: `trigger` works on scheduled tasks only; for every instance of the task it creates
//! one Job from that instance's CronJob template, named `<cronjob>-manual-<unix seconds>`
//! (hashed to 63 characters), so names never collide between instances (upstream reused one
//! name). Each Job is owned by its CronJob, so it is cleaned up with it, and is annotated
//! `triggered-by=kubectl-redroid` and `cronjob=<cronjob>`.

use std::collections::BTreeMap;
use std::io::Write;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use super::duration::age_since;
use super::error::PluginError;
use super::kubeconfig::Session;
use super::logs::{containers_in_order, copy_logs, newest_job};
use super::{describe_conditions, write_out};
use crate::crd::RedroidTask;
use crate::names;
use kit::plugin::table::{Describe, Table};

const KIND: &str = "redroidtask";

/// `task` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum TaskCommand {
    /// List tasks.
    #[command(visible_aliases = ["ls", "get"])]
    List {
        /// List tasks of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Show a task in detail.
    Describe {
        /// Task name.
        name: String,
    },
    /// Run a scheduled task now: one Job per instance from its CronJob.
    Trigger {
        /// Task name.
        name: String,
    },
    /// Print the logs of the task's newest Job (init containers first).
    Logs {
        /// Task name.
        name: String,
        /// Keep streaming new lines.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only the newest Job of this instance.
        #[arg(long, value_name = "NAME")]
        instance: Option<String>,
        /// Only the last N lines of each container.
        #[arg(long, value_name = "N")]
        tail: Option<i64>,
    },
}

/// Runs one `task` subcommand.
pub async fn run(cmd: TaskCommand, s: &Session, out: &mut impl Write) -> Result<(), PluginError> {
    match cmd {
        TaskCommand::List { all_namespaces } => list(s, all_namespaces, out).await,
        TaskCommand::Describe { name } => write_out(out, &describe_text(&get(s, &name).await?)),
        TaskCommand::Trigger { name } => trigger(s, &name, out).await,
        TaskCommand::Logs {
            name,
            follow,
            instance,
            tail,
        } => logs(s, &name, instance.as_deref(), follow, tail, out).await,
    }
}

async fn get(s: &Session, name: &str) -> Result<RedroidTask, PluginError> {
    super::kubeconfig::get(s, KIND, name).await
}

async fn list(s: &Session, all: bool, out: &mut impl Write) -> Result<(), PluginError> {
    let items: Vec<RedroidTask> = super::kubeconfig::list_sorted(s, "redroidtasks", all).await?;
    write_out(out, &list_table(&items, all, &s.namespace))
}

fn schedule_of(t: &RedroidTask) -> String {
    if t.spec.schedule.trim().is_empty() {
        "<one-shot>".into()
    } else {
        t.spec.schedule.clone()
    }
}

/// The `task list` output for these tasks.
pub fn list_table(items: &[RedroidTask], all: bool, namespace: &str) -> String {
    if items.is_empty() {
        return kit::plugin::table::no_resources(all, namespace);
    }
    let mut header = vec![
        "NAME",
        "SCHEDULE",
        "SUSPEND",
        "INSTANCES",
        "ACTIVE JOBS",
        "LAST SCHEDULE",
        "AGE",
    ];
    if all {
        header.insert(0, "NAMESPACE");
    }
    let mut table = Table::new(header);
    for t in items {
        let status = t.status.clone().unwrap_or_default();
        let last = status
            .last_schedule_time
            .as_ref()
            .map(|at| age_since(Some(at)))
            .unwrap_or_else(|| "<never>".into());
        let mut row = vec![
            t.name_any(),
            schedule_of(t),
            t.spec.suspend.to_string(),
            t.spec.instances.len().to_string(),
            status.active_jobs.len().to_string(),
            last,
            age_since(t.metadata.creation_timestamp.as_ref()),
        ];
        if all {
            row.insert(0, t.namespace().unwrap_or_default());
        }
        table.row(row);
    }
    table.render()
}

/// The `task describe` output.
pub fn describe_text(t: &RedroidTask) -> String {
    let status = t.status.clone().unwrap_or_default();
    let time = |at: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        at.map(|x| format!("{} ({} ago)", x.0, age_since(Some(x))))
            .unwrap_or_else(|| "<never>".into())
    };
    let mut d = Describe::new();
    d.field("Name", t.name_any())
        .field("Namespace", t.namespace().unwrap_or_default())
        .field("Age", age_since(t.metadata.creation_timestamp.as_ref()))
        .field("Schedule", schedule_of(t))
        .field(
            "Timezone",
            t.spec.timezone.clone().unwrap_or_else(|| "<none>".into()),
        )
        .field("Suspend", t.spec.suspend.to_string())
        .field("Suspend Instance", t.spec.suspend_instance.to_string())
        .field("Wake Instance", t.spec.wake_instance.to_string())
        .field(
            "Parallelism",
            t.spec
                .parallelism
                .map(|p| p.to_string())
                .unwrap_or_else(|| "<unlimited>".into()),
        )
        .field("Instances", "");
    for i in &t.spec.instances {
        d.nested("-", i.name.clone());
    }
    d.field("Integrations", "");
    for i in &t.spec.integrations {
        d.nested(i.name.clone(), i.image.clone());
    }
    d.field("Active Jobs", status.active_jobs.len().to_string());
    for j in &status.active_jobs {
        d.nested("-", j.clone());
    }
    d.field("Last Schedule", time(status.last_schedule_time.as_ref()))
        .field("Last Success", time(status.last_successful_time.as_ref()));
    describe_conditions(&mut d, &status.conditions);
    d.render()
}

async fn trigger(s: &Session, name: &str, out: &mut impl Write) -> Result<(), PluginError> {
    let task = get(s, name).await?;
    if task.spec.schedule.trim().is_empty() {
        return Err(PluginError::OneShotTask {
            name: name.into(),
            namespace: s.namespace.clone(),
        });
    }
    let cronjobs: Api<CronJob> = Api::namespaced(s.client.clone(), &s.namespace);
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), &s.namespace);
    let lp = ListParams::default().labels(&format!("{}={name}", names::TASK_LABEL));
    let owned = cronjobs
        .list(&lp)
        .await
        .map_err(|e| PluginError::Api {
            action: format!("list CronJobs of {KIND} {name:?}"),
            source: e,
        })?
        .items;
    let now = jiff::Timestamp::now().as_second();
    for instance in &task.spec.instances {
        let cronjob = cronjob_for(&cronjobs, &owned, name, &instance.name, &s.namespace).await?;
        let job = job_from_cronjob(&cronjob, now);
        let job_name = job.name_any();
        jobs.create(
            &PostParams {
                field_manager: Some(super::instance::FIELD_MANAGER.into()),
                ..Default::default()
            },
            &job,
        )
        .await
        .map_err(|e| PluginError::Api {
            action: format!("create Job {job_name:?} for instance {:?}", instance.name),
            source: e,
        })?;
        write_out(
            out,
            &format!(
                "job.batch/{job_name} created (instance {})\n",
                instance.name
            ),
        )?;
    }
    Ok(())
}

/// The instance's CronJob: the one labelled for the task and instance, else `<task>-<instance>`.
async fn cronjob_for(
    api: &Api<CronJob>,
    owned: &[CronJob],
    task: &str,
    instance: &str,
    ns: &str,
) -> Result<CronJob, PluginError> {
    if let Some(cj) = owned
        .iter()
        .find(|c| c.labels().get(names::INSTANCE_LABEL) == Some(&names::instance_label(instance)))
    {
        return Ok(cj.clone());
    }
    let missing = || PluginError::NoCronJob {
        task: task.into(),
        instance: instance.into(),
        namespace: ns.into(),
    };
    match api.get_opt(&format!("{task}-{instance}")).await {
        Ok(Some(cj)) => Ok(cj),
        Ok(None) => Err(missing()),
        Err(e) => Err(PluginError::Api {
            action: format!("get the CronJob of instance {instance:?}"),
            source: e,
        }),
    }
}

/// The Job `kubectl redroid task trigger` creates from a CronJob at `unix_seconds`.
pub fn job_from_cronjob(cronjob: &CronJob, unix_seconds: i64) -> Job {
    let cj_name = cronjob.name_any();
    let template = cronjob.spec.job_template.clone();
    let meta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    for key in [
        names::TASK_LABEL,
        names::INSTANCE_LABEL,
        names::COMPONENT_LABEL,
        names::MANAGED_BY_LABEL,
    ] {
        if let Some(v) = cronjob.labels().get(key) {
            labels.entry(key.to_string()).or_insert_with(|| v.clone());
        }
    }
    let mut annotations: BTreeMap<String, String> = meta.annotations.unwrap_or_default();
    annotations.insert(
        names::TRIGGERED_BY_ANNOTATION.into(),
        "kubectl-redroid".into(),
    );
    annotations.insert(names::CRONJOB_ANNOTATION.into(), cj_name.clone());
    Job {
        metadata: ObjectMeta {
            name: Some(kit::names::truncate_with_hash(
                &format!("{cj_name}-manual-{unix_seconds}"),
                kit::names::LABEL_MAX,
            )),
            namespace: cronjob.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_ref(cronjob)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

fn owner_ref(cronjob: &CronJob) -> OwnerReference {
    // Like `kubectl create job --from=cronjob/…`: the CronJob controls the Job, so deleting the
    // CronJob (or the task) removes manual runs too.
    OwnerReference {
        api_version: CronJob::api_version(&()).into(),
        kind: CronJob::kind(&()).into(),
        name: cronjob.name_any(),
        uid: cronjob.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

async fn logs(
    s: &Session,
    name: &str,
    instance: Option<&str>,
    follow: bool,
    tail: Option<i64>,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    get(s, name).await?;
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), &s.namespace);
    let mut selector = format!("{}={name}", names::TASK_LABEL);
    if let Some(i) = instance {
        selector.push_str(&format!(
            ",{}={}",
            names::INSTANCE_LABEL,
            names::instance_label(i)
        ));
    }
    let list = jobs
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| PluginError::Api {
            action: format!("list Jobs of {KIND} {name:?}"),
            source: e,
        })?
        .items;
    let filter = instance
        .map(|i| format!(" for instance {i:?}"))
        .unwrap_or_default();
    let job = newest_job(&list).ok_or_else(|| PluginError::NoJobs {
        task: name.into(),
        namespace: s.namespace.clone(),
        filter,
    })?;
    let pods_api: Api<Pod> = Api::namespaced(s.client.clone(), &s.namespace);
    let lp = ListParams::default().labels(&format!("job-name={}", job.name_any()));
    let mut pods = pods_api
        .list(&lp)
        .await
        .map_err(|e| PluginError::Api {
            action: format!("list pods of Job {:?}", job.name_any()),
            source: e,
        })?
        .items;
    pods.sort_by_key(|p| p.metadata.creation_timestamp.clone());
    for pod in &pods {
        for container in containers_in_order(pod) {
            write_out(
                out,
                &format!(
                    "==> job/{} pod/{} container/{container} <==\n",
                    job.name_any(),
                    pod.name_any()
                ),
            )?;
            let params = LogParams {
                follow,
                tail_lines: tail,
                container: Some(container),
                ..Default::default()
            };
            copy_logs(&pods_api, &pod.name_any(), &params, out).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cronjob(name: &str) -> CronJob {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "games", "uid": "u-1",
                "labels": {names::TASK_LABEL: "daily", names::INSTANCE_LABEL: "android-0"}},
            "spec": {"schedule": "0 4 * * *", "jobTemplate": {
                "metadata": {"labels": {"extra": "x"}, "annotations": {"keep": "y"}},
                "spec": {"backoffLimit": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}
        }))
        .unwrap()
    }

    #[test]
    fn manual_job_copies_the_template_and_is_owned_by_the_cronjob() {
        let job = job_from_cronjob(&cronjob("daily-android-0"), 1_700_000_000);
        assert_eq!(job.name_any(), "daily-android-0-manual-1700000000");
        assert_eq!(job.spec.as_ref().unwrap().backoff_limit, Some(2));
        let a = job.annotations();
        assert_eq!(a[names::TRIGGERED_BY_ANNOTATION], "kubectl-redroid");
        assert_eq!(a[names::CRONJOB_ANNOTATION], "daily-android-0");
        assert_eq!(a["keep"], "y");
        let l = job.labels();
        assert_eq!(
            (l["extra"].as_str(), l[names::TASK_LABEL].as_str()),
            ("x", "daily")
        );
        let owner = &job.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("CronJob", "daily-android-0", "u-1")
        );
    }

    #[test]
    fn manual_job_names_differ_per_cronjob_and_fit_a_label() {
        let long = "t".repeat(60);
        let a = job_from_cronjob(&cronjob(&format!("{long}-a")), 1_700_000_000).name_any();
        let b = job_from_cronjob(&cronjob(&format!("{long}-b")), 1_700_000_000).name_any();
        assert_ne!(a, b);
        assert!(a.len() <= 63 && kit::names::is_dns1123_label(&a), "{a}");
    }
}
