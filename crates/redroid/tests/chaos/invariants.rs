//! The redroid invariants, checked after every watch event the scenario's observer applies
//! (and every 250 ms), never only at the end:
//!
//! - `two_pods_for_one_instance`: at most one instance Pod object (running, pending or
//!   terminating) per instance at any moment.
//! - `two_writers_on_one_layer`: no two unfinished Pods (instance Pods or data-sidecar task
//!   pods, terminating ones included: their processes still run) whose volumes use
//!   conflicting data (`redroid::data::Usage::of_pod`, a mechanical read of the volumes:
//!   one writable layer, or a base-mode write under another's overlay).
//! - `job_run_twice`: a one-shot task (its Jobs carry an owner reference to the task) gets at
//!   most one Job per instance over its whole life, however many times Jobs come and go.
//! - `override_outlives_task`: an override with actor `task/<name>` on an instance while no
//!   task of that name exists, for longer than [`GRACE`] (the task's finalizer releases its
//!   overrides before the task goes; the grace only covers the skew between two watches).
//! - `child_without_owner`: an instance Pod, a Service or a Job of the operator without an
//!   owner reference (garbage collection could never remove it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use redroid::crd::{RedroidInstance, RedroidTask};
use redroid::data::Usage;
use redroid::names;
use testenv::chaos::Violations;

/// How long an override may outlive its task in our view (two watches' skew).
pub const GRACE: Duration = Duration::from_secs(3);

/// The stores the checks read.
#[derive(Clone)]
pub struct Stores {
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub instances: Store<RedroidInstance>,
    pub tasks: Store<RedroidTask>,
    pub jobs: Store<Job>,
}

/// The checks' memory across events.
#[derive(Default)]
pub struct Memory {
    /// (task uid, instance label) → every Job uid seen for it.
    jobs: BTreeMap<(String, String), BTreeSet<String>>,
    /// (instance, actor) → when the override was first seen without its task.
    orphaned: BTreeMap<(String, String), Instant>,
}

/// Runs every check once.
pub fn check(s: &Stores, mem: &mut Memory, v: &Violations) {
    let pods = s.pods.state();
    two_pods_for_one_instance(&pods, v);
    two_writers_on_one_layer(&pods, v);
    job_run_twice(&s.jobs.state(), mem, v);
    override_outlives_task(&s.instances.state(), &s.tasks.state(), mem, v);
    child_without_owner(&pods, &s.services.state(), &s.jobs.state(), v);
}

fn is_instance_pod(p: &Pod) -> bool {
    p.labels().contains_key(names::INSTANCE_LABEL) && redroid::instance::observe::is_instance_pod(p)
}

fn finished(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

fn two_pods_for_one_instance(pods: &[std::sync::Arc<Pod>], v: &Violations) {
    let mut by_instance: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for p in pods.iter().filter(|p| is_instance_pod(p)) {
        let label = p.labels()[names::INSTANCE_LABEL].as_str();
        by_instance.entry(label).or_default().push(p.name_any());
    }
    for (instance, mut names) in by_instance.into_iter().filter(|(_, n)| n.len() > 1) {
        names.sort();
        v.record(
            "two_pods_for_one_instance",
            format!("instance {instance}: pods {names:?}"),
        );
    }
}

fn two_writers_on_one_layer(pods: &[std::sync::Arc<Pod>], v: &Violations) {
    let users: Vec<(String, Usage)> = pods
        .iter()
        .filter(|p| is_instance_pod(p) || redroid::instance::observe::is_sidecar(p.as_ref()))
        .filter(|p| !finished(p))
        .filter_map(|p| Some((p.name_any(), Usage::of_pod(p)?)))
        .collect();
    for (i, (a, ua)) in users.iter().enumerate() {
        for (b, ub) in &users[i + 1..] {
            if let Some(c) = ua.conflict(ub) {
                let (x, y) = if a < b { (a, b) } else { (b, a) };
                v.record(
                    "two_writers_on_one_layer",
                    format!("{x} and {y} ({}): {}", c.reason(), ua.describe()),
                );
            }
        }
    }
}

fn job_run_twice(jobs: &[std::sync::Arc<Job>], mem: &mut Memory, v: &Violations) {
    for j in jobs {
        let Some(owner) = j
            .owner_references()
            .iter()
            .find(|o| o.kind == "RedroidTask")
        else {
            continue; // CronJob-made Jobs run on every schedule by design
        };
        let instance = j
            .labels()
            .get(names::INSTANCE_LABEL)
            .cloned()
            .unwrap_or_default();
        let seen = mem
            .jobs
            .entry((owner.uid.clone(), instance.clone()))
            .or_default();
        seen.insert(j.uid().unwrap_or_default());
        if seen.len() > 1 {
            v.record(
                "job_run_twice",
                format!(
                    "task {} instance {instance}: {} Jobs ({})",
                    owner.name,
                    seen.len(),
                    j.name_any()
                ),
            );
        }
    }
}

fn override_outlives_task(
    instances: &[std::sync::Arc<RedroidInstance>],
    tasks: &[std::sync::Arc<RedroidTask>],
    mem: &mut Memory,
    v: &Violations,
) {
    let live: BTreeSet<String> = tasks.iter().map(|t| t.name_any()).collect();
    let mut now_orphaned = BTreeSet::new();
    for i in instances {
        let Some(s) = i.status.as_ref() else { continue };
        for o in [&s.suspended, &s.woken].into_iter().flatten() {
            let Some(task) = o.actor.as_deref().and_then(|a| a.strip_prefix("task/")) else {
                continue;
            };
            if live.contains(task) {
                continue;
            }
            let key = (i.name_any(), format!("task/{task}"));
            let since = *mem.orphaned.entry(key.clone()).or_insert_with(Instant::now);
            if since.elapsed() > GRACE {
                v.record(
                    "override_outlives_task",
                    format!(
                        "instance {} keeps an override of {} after the task is gone",
                        key.0, key.1
                    ),
                );
            }
            now_orphaned.insert(key);
        }
    }
    mem.orphaned.retain(|k, _| now_orphaned.contains(k));
}

fn child_without_owner(
    pods: &[std::sync::Arc<Pod>],
    services: &[std::sync::Arc<Service>],
    jobs: &[std::sync::Arc<Job>],
    v: &Violations,
) {
    let ours = |l: &BTreeMap<String, String>| {
        l.get(names::MANAGED_BY_LABEL).map(String::as_str) == Some(names::MANAGED_BY)
    };
    let orphans = pods
        .iter()
        .filter(|p| is_instance_pod(p))
        .filter(|p| p.owner_references().is_empty())
        .map(|p| format!("Pod {}", p.name_any()))
        .chain(
            services
                .iter()
                .filter(|s| ours(s.labels()) && s.owner_references().is_empty())
                .map(|s| format!("Service {}", s.name_any())),
        )
        .chain(
            jobs.iter()
                .filter(|j| ours(j.labels()) && j.owner_references().is_empty())
                .map(|j| format!("Job {}", j.name_any())),
        );
    for o in orphans {
        v.record("child_without_owner", o);
    }
}
