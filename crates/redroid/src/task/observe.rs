//! Reads only: everything one task pass needs, fresh from the API server.
//!
//! Contract: the task itself is re-read (its `status.jobs` is the one-shot memory, and a stale
//! cached copy could make a finished instance run again); instances are listed in the task's
//! namespace (all of them: the task's own overrides are cleaned wherever they are);
//! ConfigMaps are checked by name; Jobs and CronJobs are those carrying the task label, Jobs
//! narrowed to the ones the task itself controls (not a CronJob's), read for a deleting task
//! too (it releases their finalizers); pods are read only for
//! `suspendInstance` tasks, which must see instance pods gone.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::validate::config_map_names;
use crate::crd::{RedroidInstance, RedroidTask};
use crate::names;

/// What one pass sees.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The task, fresh (None once it is gone).
    pub task: Option<RedroidTask>,
    /// Every RedroidInstance of the namespace.
    pub instances: Vec<RedroidInstance>,
    /// The referenced ConfigMaps that exist.
    pub config_maps: BTreeSet<String>,
    /// Jobs the task controls.
    pub jobs: Vec<Job>,
    /// CronJobs carrying the task label.
    pub cronjobs: Vec<CronJob>,
    /// Pods labelled with an instance (suspendInstance tasks only).
    pub pods: Vec<Pod>,
}

/// A failed read.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Reading `what` failed.
    #[error("reading {what}: {source}")]
    Read {
        /// What was being read.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl kit::reconcile::ReconcileError for ObserveError {
    fn category(&self) -> &'static str {
        "observe"
    }
}

fn read(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ObserveError {
    let what = what.into();
    move |source| ObserveError::Read { what, source }
}

/// Reads everything about the task `name` in `namespace`.
pub async fn observe(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Observed, ObserveError> {
    let tasks: Api<RedroidTask> = Api::namespaced(client.clone(), namespace);
    let task = tasks
        .get_opt(name)
        .await
        .map_err(read(format!("RedroidTask {name}")))?;
    let mut observed = Observed {
        task: None,
        instances: Vec::new(),
        config_maps: BTreeSet::new(),
        jobs: Vec::new(),
        cronjobs: Vec::new(),
        pods: Vec::new(),
    };
    let Some(task) = task else {
        return Ok(observed);
    };
    let instances: Api<RedroidInstance> = Api::namespaced(client.clone(), namespace);
    observed.instances = instances
        .list(&ListParams::default())
        .await
        .map_err(read("RedroidInstances"))?
        .items;
    // A deleting task still releases its Jobs' outcome finalizers.
    (observed.jobs, observed.cronjobs) = children(client, namespace, &task).await?;
    if task.metadata.deletion_timestamp.is_none() {
        observed.config_maps = existing_config_maps(client, namespace, &task).await?;
        if task.spec.suspend_instance {
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let lp = ListParams::default().labels(names::INSTANCE_LABEL);
            observed.pods = pods.list(&lp).await.map_err(read("Pods"))?.items;
        }
    }
    observed.task = Some(task);
    Ok(observed)
}

async fn existing_config_maps(
    client: &Client,
    namespace: &str,
    task: &RedroidTask,
) -> Result<BTreeSet<String>, ObserveError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut found = BTreeSet::new();
    for name in config_map_names(&task.spec) {
        if api
            .get_metadata_opt(&name)
            .await
            .map_err(read(format!("ConfigMap {name}")))?
            .is_some()
        {
            found.insert(name);
        }
    }
    Ok(found)
}

async fn children(
    client: &Client,
    namespace: &str,
    task: &RedroidTask,
) -> Result<(Vec<Job>, Vec<CronJob>), ObserveError> {
    let lp = ListParams::default().labels(&format!("{}={}", names::TASK_LABEL, task.name_any()));
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), namespace);
    let uid = task.uid();
    let mut owned = jobs.list(&lp).await.map_err(read("Jobs"))?.items;
    owned.retain(|j| {
        j.owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
    });
    let cron = cronjobs.list(&lp).await.map_err(read("CronJobs"))?.items;
    Ok((owned, cron))
}
