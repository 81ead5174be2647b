//! The RedroidTask controller against the real local control plane, one namespace per test,
//! controllers run in-process for that namespace only.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kit::controller::RunContext;
use kit::health::Readiness;
use kit::metrics::{Metrics, ReconcileResult};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use redroid::context::{Context, Settings};
use redroid::crd::{InstancePhase, RedroidInstance, RedroidTask, TaskJobPhase};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

struct Env {
    client: Client,
    ns: testenv::TestNamespace,
    metrics: Metrics,
    stop: CancellationToken,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Env {
    /// A namespace with the task controller (and optionally the instance controller) running
    /// on `operator`'s credentials.
    async fn new(prefix: &str, instances_too: bool, operator: Option<Client>) -> Env {
        let client = testenv::client().await;
        for crd in redroid::crd::crds() {
            testenv::install_crd(&client, crd)
                .await
                .expect("install CRD");
        }
        let ns = testenv::TestNamespace::new(&client, prefix).await;
        let op = operator.unwrap_or_else(|| client.clone());
        let (metrics, stop) = (Metrics::new(), CancellationToken::new());
        let ctx = Arc::new(Context::new(op.clone(), Settings::default()));
        let addr = "127.0.0.1:0".parse().expect("addr");
        let rc = RunContext {
            client: op,
            metrics: metrics.clone(),
            readiness: Readiness::new(),
            shutdown: stop.clone(),
            metrics_addr: addr,
            probe_addr: addr,
        };
        tokio::spawn(redroid::task::run(
            ctx.clone(),
            rc.clone(),
            Some(ns.name.clone()),
        ));
        if instances_too {
            tokio::spawn(redroid::instance::run(ctx, rc, Some(ns.name.clone())));
        }
        Env {
            client,
            ns,
            metrics,
            stop,
        }
    }

    /// The instances' default PVCs, bound through the plane's default StorageClass, so instance
    /// pods schedule.
    async fn volumes(&self) {
        for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
            testenv::bound_claim(&self.client, &self.ns.name, claim)
                .await
                .expect("bound claim");
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    async fn instance(&self, name: &str, index: i32, extra: serde_json::Value) {
        let mut spec = json!({"index": index});
        merge(&mut spec, extra);
        let obj: RedroidInstance = serde_json::from_value(json!({
            "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("instance");
        self.api::<RedroidInstance>()
            .create(&PostParams::default(), &obj)
            .await
            .expect("create instance");
    }

    async fn task(&self, name: &str, spec: serde_json::Value) {
        let obj: RedroidTask = serde_json::from_value(json!({
            "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidTask",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("task");
        self.api::<RedroidTask>()
            .create(&PostParams::default(), &obj)
            .await
            .expect("create task");
    }

    async fn task_where(
        &self,
        name: &str,
        what: &str,
        cond: impl Fn(&RedroidTask) -> bool,
    ) -> RedroidTask {
        // Polled rather than watched: a watch can end on "too old resource version" under load.
        let api = self.api::<RedroidTask>();
        let r = testenv::eventually(what, WAIT, || async {
            api.get_opt(name).await.ok().flatten().filter(|t| cond(t))
        })
        .await;
        r.unwrap_or_else(|e| panic!("{what}: {e:#}"))
    }

    async fn events(&self, reason: &str) -> Vec<Event> {
        let all = self
            .api::<Event>()
            .list(&ListParams::default())
            .await
            .expect("events")
            .items;
        all.into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    async fn wait_event(&self, reason: &str) -> Event {
        let found = testenv::eventually(reason, WAIT, || async {
            self.events(reason).await.into_iter().next()
        })
        .await;
        found.expect("event")
    }

    async fn jobs(&self) -> Vec<Job> {
        self.api::<Job>()
            .list(&ListParams::default())
            .await
            .expect("jobs")
            .items
    }
}

fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(b), serde_json::Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
}

fn condition(t: &RedroidTask, type_: &str) -> Option<(String, String, String)> {
    let c = t
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn is(t: &RedroidTask, type_: &str, status: &str, reason: &str) -> bool {
    condition(t, type_).is_some_and(|(s, r, _)| s == status && r == reason)
}

fn integration() -> serde_json::Value {
    json!([{"name": "maa", "image": "maa:1", "command": ["maa"], "args": ["run", "it's"]}])
}

fn env_of(job: &Job, container: &str, var: &str) -> Option<String> {
    let spec = job.spec.as_ref()?.template.spec.as_ref()?;
    let c = spec.containers.iter().find(|c| c.name == container)?;
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == var)?
        .value
        .clone()
}

#[tokio::test]
async fn one_shot_task_runs_a_job_per_instance_and_completes() {
    let env = Env::new("task-oneshot", false, None).await;
    env.instance("a", 5, json!({})).await;
    env.instance("b", 6, json!({"adbPort": 6000})).await;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "maa.conf"}, "data": {"k": "v"}}))
            .expect("cm");
    env.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .expect("cm");
    let mut integrations = integration();
    integrations[0]["configs"] =
        json!([{"configMapName": "maa.conf", "key": "k", "mountPath": "/etc/maa/k"}]);
    env.task("t", json!({"instances": [{"name": "a"}, {"name": "b"}], "integrations": integrations, "backoffLimit": 2})).await;
    let done = env
        .task_where("t", "task completes", |t| {
            is(t, "Complete", "True", "AllJobsSucceeded")
        })
        .await;
    assert!(is(&done, "Active", "False", "NoActiveJobs"));
    assert!(is(&done, "Failed", "False", "NoFailedJobs"));
    assert!(is(&done, "Ready", "True", "ReferencesResolved"));
    let jobs = done.status.as_ref().expect("status").jobs.clone();
    assert!(
        jobs.iter()
            .all(|j| j.phase == TaskJobPhase::Succeeded && j.completion_time.is_some()),
        "{jobs:?}"
    );
    assert!(
        done.finalizers()
            .iter()
            .any(|f| f == redroid::names::TASK_FINALIZER)
    );
    let live = env.jobs().await;
    assert_eq!(live.len(), 2);
    let a = live
        .iter()
        .find(|j| j.name_any() == "t-a")
        .expect("job t-a");
    let ns = &env.ns.name;
    assert_eq!(
        env_of(a, "maa", "ADB_ADDRESS"),
        Some(format!("a.{ns}.svc.cluster.local:5555"))
    );
    assert_eq!(env_of(a, "maa", "INSTANCE_INDEX").as_deref(), Some("5"));
    let b = live
        .iter()
        .find(|j| j.name_any() == "t-b")
        .expect("job t-b");
    assert_eq!(
        env_of(b, "maa", "ADB_ADDRESS"),
        Some(format!("b.{ns}.svc.cluster.local:6000"))
    );
    let spec = a.spec.as_ref().expect("spec");
    assert_eq!(spec.backoff_limit, Some(2));
    let pod = spec.template.spec.as_ref().expect("pod");
    assert!(
        pod.init_containers.is_none(),
        "no sidecar without suspendInstance"
    );
    let vol = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.config_map.is_some())
        .expect("cm volume");
    assert_eq!(vol.name, kit::names::label_with_hash("cm-", "maa.conf"));
    let script = &pod.containers[0].args.as_ref().expect("args")[0];
    assert!(
        script.ends_with("exec 'maa' 'run' 'it'\\''s'\n"),
        "{script}"
    );
    let labels = a.labels();
    assert_eq!(
        labels
            .get(redroid::names::COMPONENT_LABEL)
            .map(String::as_str),
        Some("task")
    );
    assert_eq!(env.events("CreatedJob").await.len(), 2);
}

#[tokio::test]
async fn parallelism_bounds_unfinished_jobs() {
    let env = Env::new("task-parallel", false, None).await;
    for (i, n) in ["a", "b", "c"].iter().enumerate() {
        env.instance(n, i32::try_from(i).expect("index"), json!({}))
            .await;
    }
    env.task("t", json!({"instances": [{"name": "a"}, {"name": "b"}, {"name": "c"}], "integrations": integration(), "parallelism": 1})).await;
    let max_unfinished = std::cell::Cell::new(0);
    testenv::eventually("all three Jobs complete", WAIT, || {
        let (env, max) = (&env, &max_unfinished);
        async move {
            let jobs = env.jobs().await;
            let finished = |j: &Job| {
                j.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Complete" && c.status == "True")
                    })
            };
            max.set(max.get().max(jobs.iter().filter(|j| !finished(j)).count()));
            (jobs.len() == 3 && jobs.iter().all(finished)).then_some(())
        }
    })
    .await
    .expect("completion");
    let seen = max_unfinished.get();
    assert!(seen <= 1, "saw {seen} unfinished Jobs at once");
    env.task_where("t", "task completes", |t| {
        is(t, "Complete", "True", "AllJobsSucceeded")
    })
    .await;
    let mut created: Vec<Job> = env.jobs().await;
    created.sort_by_key(|j| j.creation_timestamp().map(|t| t.0));
    let names: Vec<String> = created.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["t-a", "t-b", "t-c"], "Jobs start in spec order");
}

#[tokio::test]
async fn finished_task_does_not_run_again_when_its_job_is_deleted() {
    let env = Env::new("task-memory", false, None).await;
    env.instance("a", 0, json!({})).await;
    env.instance("b", 1, json!({})).await;
    env.task(
        "t",
        json!({"instances": [{"name": "a"}], "integrations": integration()}),
    )
    .await;
    env.task_where("t", "task completes", |t| {
        is(t, "Complete", "True", "AllJobsSucceeded")
    })
    .await;
    let first = env.api::<Job>().get("t-a").await.expect("job").uid();
    let dp = DeleteParams::background();
    env.api::<Job>()
        .delete("t-a", &dp)
        .await
        .expect("delete job");
    testenv::wait_deleted(&env.api::<Job>(), "t-a", WAIT)
        .await
        .expect("job gone");
    // A spec change the controller must act on proves it has seen the deletion by then.
    let patch = json!({"spec": {"instances": [{"name": "a"}, {"name": "b"}]}});
    env.api::<RedroidTask>()
        .patch("t", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch");
    let done = env
        .task_where("t", "b done too", |t| {
            is(t, "Complete", "True", "AllJobsSucceeded")
                && t.status.as_ref().is_some_and(|s| s.jobs.len() == 2)
        })
        .await;
    let again = env.api::<Job>().get_opt("t-a").await.expect("get");
    assert!(again.is_none_or(|j| j.uid() == first), "t-a was re-created");
    assert_eq!(
        done.status.expect("status").jobs[0].phase,
        TaskJobPhase::Succeeded
    );
}

// Found by the chaos suite's fault-free baseline (crates/redroid/tests/chaos, the `sidecar`
// task): with `ttlSecondsAfterFinished: 0` the TTL controller deletes a Job the moment it
// finishes, before the operator has recorded how it ended, and the task reported the
// succeeded Job as Failed/JobDeleted. A one-shot Job now carries a finalizer until its outcome
// is in `status.jobs`, so it cannot vanish unrecorded (nor while the operator is down).
#[tokio::test]
async fn a_job_removed_by_its_ttl_as_it_finishes_is_recorded_as_succeeded() {
    let env = Env::new("task-ttl0", false, None).await;
    env.instance("a", 0, json!({})).await;
    env.instance("b", 1, json!({})).await;
    env.task(
        "t",
        json!({"instances": [{"name": "a"}, {"name": "b"}], "integrations": integration(),
               "ttlSecondsAfterFinished": 0}),
    )
    .await;
    let done = env
        .task_where("t", "both Jobs recorded", |t| {
            t.status.as_ref().is_some_and(|s| {
                s.jobs.len() == 2 && s.jobs.iter().all(|j| j.phase != TaskJobPhase::Running)
            })
        })
        .await;
    let status = done.status.expect("status");
    for j in &status.jobs {
        assert_eq!(
            (j.phase, j.reason.as_deref()),
            (TaskJobPhase::Succeeded, None),
            "{j:?}"
        );
    }
    env.task_where("t", "Complete", |t| {
        is(t, "Complete", "True", "AllJobsSucceeded")
    })
    .await;
    // The TTL controller still removes the Jobs once their outcome is recorded.
    for job in ["t-a", "t-b"] {
        testenv::wait_deleted(&env.api::<Job>(), job, WAIT)
            .await
            .expect("the finished Job is removed by its TTL");
    }
}

#[tokio::test]
async fn missing_instance_and_config_map_are_reported_then_resolved() {
    let env = Env::new("task-missing", false, None).await;
    let mut integrations = integration();
    integrations[0]["configs"] = json!([{"configMapName": "cfg", "key": "k", "mountPath": "/cfg"}]);
    env.task(
        "t",
        json!({"instances": [{"name": "ghost"}], "integrations": integrations}),
    )
    .await;
    let t = env
        .task_where("t", "InstanceNotFound", |t| {
            is(t, "Ready", "False", "InstanceNotFound")
        })
        .await;
    assert!(
        condition(&t, "Ready")
            .expect("ready")
            .2
            .contains("\"ghost\"")
    );
    let ev = env.wait_event("InstanceNotFound").await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(env.jobs().await.is_empty());
    env.instance("ghost", 0, json!({})).await;
    let t = env
        .task_where("t", "ConfigMapNotFound", |t| {
            is(t, "Ready", "False", "ConfigMapNotFound")
        })
        .await;
    assert!(condition(&t, "Ready").expect("ready").2.contains("\"cfg\""));
    env.wait_event("ConfigMapNotFound").await;
    assert_eq!(
        env.events("InstanceNotFound").await.len(),
        1,
        "one Event, not a retry loop"
    );
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"k": "v"}}))
            .expect("cm");
    env.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .expect("cm");
    env.task_where("t", "runs once resolved", |t| {
        is(t, "Complete", "True", "AllJobsSucceeded")
    })
    .await;
}

#[tokio::test]
async fn scheduled_task_manages_one_cronjob_per_instance() {
    let env = Env::new("task-cron", false, None).await;
    env.instance("a", 0, json!({})).await;
    env.instance("b", 1, json!({})).await;
    let spec = json!({"instances": [{"name": "a"}, {"name": "b"}], "integrations": integration(),
        "schedule": "0 4 * * *", "timezone": "Asia/Shanghai", "startingDeadlineSeconds": 180});
    env.task("t", spec).await;
    let t = env
        .task_where("t", "scheduled status", |t| {
            is(t, "Complete", "False", "Scheduled")
        })
        .await;
    assert!(is(&t, "Failed", "False", "Scheduled"));
    let cj = env.api::<CronJob>().get("t-a").await.expect("cronjob t-a");
    assert_eq!(cj.spec.schedule, "0 4 * * *");
    assert_eq!(cj.spec.concurrency_policy.as_deref(), Some("Forbid"));
    assert_eq!(cj.spec.time_zone.as_deref(), Some("Asia/Shanghai"));
    assert_eq!(cj.spec.starting_deadline_seconds, Some(180));
    assert_eq!(
        (
            cj.spec.successful_jobs_history_limit,
            cj.spec.failed_jobs_history_limit
        ),
        (Some(3), Some(3))
    );
    env.api::<CronJob>().get("t-b").await.expect("cronjob t-b");
    env.wait_event("CreatedCronJob").await;
    let patch =
        json!({"spec": {"schedule": "0 5 * * *", "suspend": true, "instances": [{"name": "a"}]}});
    env.api::<RedroidTask>()
        .patch("t", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch");
    testenv::wait_deleted(&env.api::<CronJob>(), "t-b", WAIT)
        .await
        .expect("t-b deleted when b left the task");
    let cj = testenv::wait_for(&env.api::<CronJob>(), "t-a", WAIT, |c| {
        c.spec.schedule == "0 5 * * *"
    })
    .await
    .expect("updated");
    assert_eq!(cj.spec.suspend, Some(true));
    assert!(
        env.jobs().await.is_empty(),
        "a scheduled task creates no one-shot Job"
    );
}

#[tokio::test]
async fn deletion_removes_only_the_tasks_own_overrides() {
    let env = Env::new("task-delete", false, None).await;
    env.instance("a", 0, json!({})).await;
    env.instance("b", 1, json!({})).await;
    let manual = json!({"status": {"suspended": {"actor": "manual", "reason": "by hand"}}});
    let insts = env.api::<RedroidInstance>();
    insts
        .patch_status("b", &PatchParams::default(), &Patch::Merge(manual))
        .await
        .expect("manual override");
    env.task("t", json!({"instances": [{"name": "a"}, {"name": "b"}], "integrations": integration(), "suspendInstance": true})).await;
    let actor = |i: &RedroidInstance| {
        i.status
            .as_ref()
            .and_then(|s| s.suspended.as_ref())
            .and_then(|o| o.actor.clone())
    };
    testenv::wait_for(&insts, "a", WAIT, move |i| {
        actor(i).as_deref() == Some("task/t")
    })
    .await
    .expect("a suspended by the task");
    env.wait_event("SuspendedInstance").await;
    assert!(
        env.jobs().await.is_empty(),
        "no Job while the instances are not Stopped"
    );
    env.api::<RedroidTask>()
        .delete("t", &DeleteParams::default())
        .await
        .expect("delete task");
    testenv::wait_deleted(&env.api::<RedroidTask>(), "t", WAIT)
        .await
        .expect("task gone");
    let a = insts.get("a").await.expect("a");
    assert_eq!(actor(&a), None, "the task's own override is removed");
    let b = insts.get("b").await.expect("b");
    assert_eq!(
        actor(&b).as_deref(),
        Some("manual"),
        "another actor's override survives"
    );
}

#[tokio::test]
async fn converged_task_makes_no_writes() {
    let (counting, counts) = testenv::counting_client().await;
    let env = Env::new("task-noop", false, Some(counting)).await;
    env.instance("a", 0, json!({})).await;
    env.task(
        "t",
        json!({"instances": [{"name": "a"}], "integrations": integration()}),
    )
    .await;
    env.task_where("t", "task completes", |t| {
        is(t, "Complete", "True", "AllJobsSucceeded")
    })
    .await;
    // The pass after the one that recorded the outcome releases the Job's outcome finalizer;
    // only then is the task converged.
    testenv::eventually("the Job's outcome finalizer released", WAIT, || async {
        let jobs = env.jobs().await;
        let released = !jobs.is_empty()
            && jobs
                .iter()
                .all(|j| !kit::finalizers::has(j, redroid::names::JOB_OUTCOME_FINALIZER));
        released.then_some(())
    })
    .await
    .expect("outcome finalizer released");
    let results = env.metrics.controller(redroid::names::TASK_CONTROLLER);
    let settled = || results.result_count(ReconcileResult::Success);
    // Converged: the Job finished, its result is in status and its finalizer released; from
    // here a pass writes nothing.
    let before = settled();
    counts.reset();
    let poke = json!({"metadata": {"annotations": {"poke": "1"}}});
    env.api::<RedroidTask>()
        .patch("t", &PatchParams::default(), &Patch::Merge(poke))
        .await
        .expect("poke");
    testenv::eventually("a reconcile after the poke", WAIT, || async {
        (settled() > before).then_some(())
    })
    .await
    .expect("reconciled");
    assert_eq!(
        counts.writes(),
        0,
        "writes on a no-op reconcile: {:?}",
        counts.by_verb()
    );
}

#[tokio::test]
async fn suspend_instance_runs_the_job_with_a_sidecar_on_the_stopped_instance() {
    let env = Env::new("task-suspend", true, None).await;
    env.volumes().await;
    env.instance("a", 3, json!({})).await;
    let insts = env.api::<RedroidInstance>();
    let phase = |i: &RedroidInstance| i.status.as_ref().and_then(|s| s.phase);
    testenv::wait_for(&insts, "a", WAIT, move |i| {
        phase(i) == Some(InstancePhase::Running)
    })
    .await
    .expect("a Running");
    env.task("t", json!({"instances": [{"name": "a"}], "integrations": integration(), "suspendInstance": true})).await;
    let job = testenv::wait_for(&env.api::<Job>(), "t-a", WAIT, |_| true)
        .await
        .expect("job");
    let a = insts.get("a").await.expect("a");
    assert_eq!(
        phase(&a),
        Some(InstancePhase::Stopped),
        "the Job starts only once the instance is Stopped"
    );
    let held = a
        .status
        .as_ref()
        .and_then(|s| s.suspended.clone())
        .expect("suspended");
    assert_eq!(held.actor.as_deref(), Some("task/t"));
    assert_eq!(held.reason.as_deref(), Some("reserved for one-shot task t"));
    assert_eq!(
        job.labels()
            .get(redroid::names::SIDECAR_LABEL)
            .map(String::as_str),
        Some("true")
    );
    let pod = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .expect("pod");
    let sidecar = &pod.init_containers.expect("sidecar")[0];
    assert_eq!(
        (sidecar.name.as_str(), sidecar.restart_policy.as_deref()),
        ("redroid", Some("Always"))
    );
    let mounts: Vec<&str> = sidecar
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect();
    assert_eq!(mounts, ["/data-base", "/data-diff/3", "/dev/dri"]);
    assert_eq!(
        env_of(&job, "maa", "ADB_ADDRESS").as_deref(),
        Some("127.0.0.1:5555")
    );
    env.task_where("t", "task completes", |t| {
        is(t, "Complete", "True", "AllJobsSucceeded")
    })
    .await;
    testenv::wait_for(&insts, "a", WAIT, move |i| {
        i.status.as_ref().is_some_and(|s| s.suspended.is_none())
            && phase(i) == Some(InstancePhase::Running)
    })
    .await
    .expect("override cleared and the instance running again");
    env.wait_event("ClearedSuspendedInstance").await;
}

#[tokio::test]
async fn wake_instance_runs_the_job_against_the_woken_instance() {
    let env = Env::new("task-wake", true, None).await;
    env.volumes().await;
    env.instance("a", 0, json!({"suspend": true})).await;
    let insts = env.api::<RedroidInstance>();
    let phase = |i: &RedroidInstance| i.status.as_ref().and_then(|s| s.phase);
    testenv::wait_for(&insts, "a", WAIT, move |i| {
        phase(i) == Some(InstancePhase::Stopped)
    })
    .await
    .expect("a Stopped");
    env.task(
        "t",
        json!({"instances": [{"name": "a"}], "integrations": integration(), "wakeInstance": true}),
    )
    .await;
    let job = testenv::wait_for(&env.api::<Job>(), "t-a", WAIT, |_| true)
        .await
        .expect("job");
    let a = insts.get("a").await.expect("a");
    assert_eq!(
        phase(&a),
        Some(InstancePhase::Running),
        "the Job starts only once the instance runs"
    );
    let held = a
        .status
        .as_ref()
        .and_then(|s| s.woken.clone())
        .expect("woken");
    assert_eq!(held.actor.as_deref(), Some("task/t"));
    let pod = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .expect("pod");
    assert!(
        pod.init_containers.is_none(),
        "no sidecar: the instance itself is running"
    );
    let ns = &env.ns.name;
    assert_eq!(
        env_of(&job, "maa", "ADB_ADDRESS"),
        Some(format!("a.{ns}.svc.cluster.local:5555"))
    );
    env.task_where("t", "task completes", |t| {
        is(t, "Complete", "True", "AllJobsSucceeded")
    })
    .await;
    testenv::wait_for(&insts, "a", WAIT, move |i| {
        i.status.as_ref().is_some_and(|s| s.woken.is_none())
            && phase(i) == Some(InstancePhase::Stopped)
    })
    .await
    .expect("woken cleared and the instance back to spec.suspend");
    env.wait_event("ClearedWokenInstance").await;
}

#[tokio::test]
async fn a_task_without_spec_is_reported_invalid_and_runs_nothing() {
    let env = Env::new("task-nospec", false, None).await;
    testenv::admission::Kind::new(
        &env.client,
        &env.ns.name,
        "redroid.isning.moe",
        "v1alpha1",
        "RedroidTask",
    )
    .create_without_spec("bare")
    .await
    .expect("the schema accepts an object without spec, as upstream's does");
    let t = env
        .task_where("bare", "InvalidSpec", |t| {
            is(t, "Ready", "False", "InvalidSpec")
        })
        .await;
    assert!(
        condition(&t, "Ready")
            .expect("ready")
            .2
            .contains("spec.instances and spec.integrations"),
    );
    assert!(env.jobs().await.is_empty());
}
