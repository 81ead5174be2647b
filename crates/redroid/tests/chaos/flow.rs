//! The user's side of the `lifecycle` scenario, as the end-to-end tests do it one by one:
//! instances (one waiting on another's writable layer, one suspended), a one-shot task that
//! suspends its instance and runs a data sidecar (its finished Job removed at once by
//! `ttlSecondsAfterFinished: 0`), a one-shot task that wakes a suspended instance, a scheduled
//! task whose instances change, a spec change that replaces a Pod, a manual suspend that lets
//! the waiting instance run, deletions. Every wait has a deadline; a step that does not
//! complete is an error (the caller records it as a violation).
//!
//! The converged state ([`settled`]): `a` Running (new image), `c` Running (it took `b`'s
//! layer once `b` was suspended and deleted, its Service gone too), `d` Stopped (spec.suspend), no override left,
//! the scheduled task Ready with one CronJob; the one-shot tasks are deleted.

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use redroid::crd::{InstancePhase, RedroidInstance, RedroidTask};
use serde_json::{Value, json};
use testenv::chaos::Flow;

/// The longest any one step may take, faults and kills included.
pub const STEP: Duration = Duration::from_secs(120);

/// Admin access to the scenario's namespace.
pub struct User {
    pub client: Client,
    pub ns: String,
}

fn phase(i: &RedroidInstance) -> Option<InstancePhase> {
    i.status.as_ref().and_then(|s| s.phase)
}

fn ready_reason(i: &RedroidInstance) -> Option<String> {
    let s = i.status.as_ref()?;
    kit::conditions::get(&s.conditions, "Ready").map(|c| c.reason.clone())
}

fn current(i: &RedroidInstance) -> bool {
    i.status.as_ref().and_then(|s| s.observed_generation) == i.metadata.generation
}

fn complete(t: &RedroidTask) -> bool {
    t.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
    })
}

impl User {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn instance(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        let obj: RedroidInstance = serde_json::from_value(json!({
            "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        self.api::<RedroidInstance>()
            .create(&PostParams::default(), &obj)
            .await?;
        Ok(())
    }

    async fn task(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        let obj: RedroidTask = serde_json::from_value(json!({
            "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidTask",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        self.api::<RedroidTask>()
            .create(&PostParams::default(), &obj)
            .await?;
        Ok(())
    }

    async fn instance_is(
        &self,
        name: &str,
        what: &str,
        cond: impl Fn(&RedroidInstance) -> bool,
    ) -> anyhow::Result<()> {
        let api = self.api::<RedroidInstance>();
        testenv::eventually(&format!("instance {name} {what}"), STEP, || async {
            api.get_opt(name).await.ok().flatten().filter(|i| cond(i))
        })
        .await?;
        Ok(())
    }

    async fn task_is(
        &self,
        name: &str,
        what: &str,
        cond: impl Fn(&RedroidTask) -> bool,
    ) -> anyhow::Result<()> {
        let api = self.api::<RedroidTask>();
        testenv::eventually(&format!("task {name} {what}"), STEP, || async {
            api.get_opt(name).await.ok().flatten().filter(|t| cond(t))
        })
        .await?;
        Ok(())
    }

    async fn running(&self, name: &str) -> anyhow::Result<()> {
        self.instance_is(name, "Running", |i| {
            current(i) && phase(i) == Some(InstancePhase::Running)
        })
        .await
    }

    async fn stopped(&self, name: &str) -> anyhow::Result<()> {
        self.instance_is(name, "Stopped", |i| {
            current(i) && phase(i) == Some(InstancePhase::Stopped)
        })
        .await
    }

    async fn gone<K>(&self, name: &str) -> anyhow::Result<()>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api = self.api::<K>();
        testenv::eventually(&format!("{name} gone"), STEP, || async {
            matches!(api.get_opt(name).await, Ok(None)).then_some(())
        })
        .await?;
        Ok(())
    }
}

fn integration() -> Value {
    json!([{"name": "probe", "image": "registry.invalid/adb-probe:1", "command": ["getprop"]}])
}

impl Flow for User {
    /// The steps, under whatever faults and kills the caller arranged.
    async fn run(&self) -> anyhow::Result<()> {
        let u = self;
        let image = "registry.invalid/redroid:16";
        u.instance("a", json!({"index": 0, "image": image})).await?;
        u.instance("b", json!({"index": 1, "image": image})).await?;
        u.instance("d", json!({"index": 2, "image": image, "suspend": true}))
            .await?;
        u.running("a").await?;
        u.running("b").await?;
        u.stopped("d").await?;
        // c wants b's writable layer: it waits.
        u.instance("c", json!({"index": 1, "image": image})).await?;
        u.instance_is("c", "held back by b (IndexConflict)", |i| {
            current(i) && ready_reason(i).as_deref() == Some("IndexConflict")
        })
        .await?;

        u.task(
            "sidecar",
            json!({"instances": [{"name": "a"}], "integrations": integration(),
                   "suspendInstance": true, "ttlSecondsAfterFinished": 0}),
        )
        .await?;
        u.task(
            "wake",
            json!({"instances": [{"name": "d"}], "integrations": integration(), "wakeInstance": true}),
        )
        .await?;
        u.task(
            "nightly",
            json!({"schedule": "0 4 * * *", "instances": [{"name": "a"}, {"name": "b"}],
                   "integrations": integration()}),
        )
        .await?;
        u.task_is("sidecar", "Complete", complete).await?;
        u.task_is("wake", "Complete", complete).await?;
        u.instance_is("a", "Running without the task's override", |i| {
            current(i)
                && phase(i) == Some(InstancePhase::Running)
                && i.status.as_ref().is_some_and(|s| s.suspended.is_none())
        })
        .await?;
        u.stopped("d").await?;

        // A spec change replaces a's Pod.
        let patch = Patch::Merge(json!({"spec": {"image": "registry.invalid/redroid:17"}}));
        u.api::<RedroidInstance>()
            .patch("a", &PatchParams::default(), &patch)
            .await?;
        u.running("a").await?;

        // A manual suspend of b hands its layer to c; then b goes.
        let held = json!({"status": {"suspended": {"actor": "manual", "reason": "chaos"}}});
        u.api::<RedroidInstance>()
            .patch_status("b", &PatchParams::default(), &Patch::Merge(&held))
            .await?;
        u.stopped("b").await?;
        u.running("c").await?;
        u.api::<RedroidInstance>()
            .delete("b", &DeleteParams::default())
            .await?;
        u.gone::<RedroidInstance>("b").await?;

        // The scheduled task follows its instance list; the one-shot tasks go.
        let patch = Patch::Merge(json!({"spec": {"instances": [{"name": "a"}]}}));
        u.api::<RedroidTask>()
            .patch("nightly", &PatchParams::default(), &patch)
            .await?;
        for t in ["sidecar", "wake"] {
            u.api::<RedroidTask>()
                .delete(t, &DeleteParams::default())
                .await?;
        }
        for t in ["sidecar", "wake"] {
            u.gone::<RedroidTask>(t).await?;
        }
        Ok(())
    }

    async fn capture(&self) -> anyhow::Result<Value> {
        super::state::capture(&self.client, &self.ns).await
    }

    /// Whether `state` (see `super::state`) is the converged end of [`run`].
    fn settled(&self, state: &Value) -> bool {
        let i = &state["instances"];
        let is = |name: &str, phase: &str| i[name]["phase"] == phase && i[name]["current"] == true;
        let no_overrides = i.as_object().is_some_and(|m| {
            m.values()
                .all(|v| v["suspended"].is_null() && v["woken"].is_null())
        });
        let nightly = &state["tasks"]["nightly"];
        is("a", "Running")
            && is("c", "Running")
            && is("d", "Stopped")
            && i.get("b").is_none()
            // b's Service goes with b through the garbage collector, some time after b: until then
            // the state is not final (a baseline taken before it went made the faulted runs,
            // which waited longer, look wrong).
            && state["services"] == json!(["a", "c", "d"])
            && no_overrides
            && nightly["current"] == true
            && nightly["conditions"]["Ready"]
                .as_str()
                .is_some_and(|r| r.starts_with("True/"))
            && state["cronjobs"].as_array().is_some_and(|c| c.len() == 1)
            && state["pods"]
                .as_array()
                .is_some_and(|p| p.len() == 2 && p.iter().all(|p| p[3] == false))
    }

    /// Deletes every instance and task there is (whatever the flow got to).
    async fn teardown(&self) -> anyhow::Result<()> {
        let u = self;
        let (dp, lp) = (DeleteParams::default(), kube::api::ListParams::default());
        for i in u.api::<RedroidInstance>().list(&lp).await?.items {
            u.api::<RedroidInstance>()
                .delete(&i.name_any(), &dp)
                .await?;
        }
        for t in u.api::<RedroidTask>().list(&lp).await?.items {
            u.api::<RedroidTask>().delete(&t.name_any(), &dp).await?;
        }
        Ok(())
    }

    /// What is left of the user's objects and their children: `(invariant, what)` pairs, an
    /// object still there after its deletion as `finalizer_not_released`, a child as
    /// `orphaned_child`.
    async fn leftovers(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let u = self;
        use k8s_openapi::api::batch::v1::{CronJob, Job};
        use k8s_openapi::api::core::v1::{Pod, Service};
        let lp = kube::api::ListParams::default();
        let mut out = Vec::new();
        for i in u.api::<RedroidInstance>().list(&lp).await?.items {
            out.push((
                "finalizer_not_released",
                format!("RedroidInstance {} {:?}", i.name_any(), i.finalizers()),
            ));
        }
        for t in u.api::<RedroidTask>().list(&lp).await?.items {
            out.push((
                "finalizer_not_released",
                format!("RedroidTask {} {:?}", t.name_any(), t.finalizers()),
            ));
        }
        let labelled = lp.clone().labels(redroid::names::INSTANCE_LABEL);
        for p in u.api::<Pod>().list(&labelled).await?.items {
            out.push(("orphaned_child", format!("Pod {}", p.name_any())));
        }
        let managed = lp.clone().labels(redroid::names::MANAGED_BY_LABEL);
        for s in u.api::<Service>().list(&managed).await?.items {
            out.push(("orphaned_child", format!("Service {}", s.name_any())));
        }
        for j in u.api::<Job>().list(&lp).await?.items {
            out.push(("orphaned_child", format!("Job {}", j.name_any())));
        }
        for c in u.api::<CronJob>().list(&lp).await?.items {
            out.push(("orphaned_child", format!("CronJob {}", c.name_any())));
        }
        Ok(out)
    }
}
