//! The user's side of the cocoon `lifecycle` scenario, as the end-to-end tests do it one by
//! one: a set with a sub-agent and a toolbox comes up, is scaled, suspended and resumed; a
//! main-only set with `hibernatePolicy: release` is suspended (its pod deleted, the snapshot
//! kept) and woken from the snapshot, then migrated to another node through a snapshot; a
//! CocoonHibernation hibernates and wakes a sub-agent and is deleted. Every wait has a
//! deadline; a step that does not complete is an error (the caller records it as a violation).
//!
//! The converged state ([`settled`]): `alpha` Running with main, two sub-agents and the
//! toolbox live; `solo` Running, its main live on the node it was migrated to, restored from
//! its snapshot; no CocoonHibernation left.

use std::time::Duration;

use cocoon::crd::{CocoonHibernation, CocoonSet, CocoonSetPhase, HibernationPhase};
use cocoon::names;
use cocoon::pods::state;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testenv::chaos::Flow;

/// The longest any one step may take, faults and kills included.
pub const STEP: Duration = Duration::from_secs(120);
/// The kwok nodes the simulator plays (the migration moves `solo` between two of them).
pub const NODES: [&str; 3] = ["kwok-node-0", "kwok-node-1", "kwok-node-2"];

/// Admin access to the scenario's namespace.
pub struct User {
    pub client: Client,
    pub ns: String,
    /// The registry's URL (the state includes what it holds).
    pub registry: String,
}

fn phase(s: &CocoonSet) -> Option<CocoonSetPhase> {
    s.status.as_ref().and_then(|s| s.phase)
}

fn current(s: &CocoonSet) -> bool {
    s.status.as_ref().and_then(|s| s.observed_generation) == s.metadata.generation
}

fn all_vms_reported(s: &CocoonSet) -> bool {
    s.status.as_ref().is_some_and(|s| {
        s.agents.len() as i32 == s.desired_agents
            && s.toolboxes.len() as i32 == s.desired_toolboxes
            && s.agents.iter().all(|a| !a.vm_id.is_empty())
            && s.toolboxes.iter().all(|t| !t.vm_id.is_empty())
    })
}

impl User {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn set(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        let mut spec = spec;
        spec["agent"]["image"] = json!("ghcr.io/cocoonstack/ubuntu:24.04");
        let obj: CocoonSet = serde_json::from_value(json!({
            "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonSet",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        self.api::<CocoonSet>()
            .create(&PostParams::default(), &obj)
            .await?;
        Ok(())
    }

    async fn patch_set(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        let patch = Patch::Merge(json!({ "spec": spec }));
        self.api::<CocoonSet>()
            .patch(name, &PatchParams::default(), &patch)
            .await?;
        Ok(())
    }

    async fn set_is(
        &self,
        name: &str,
        what: &str,
        cond: impl Fn(&CocoonSet) -> bool,
    ) -> anyhow::Result<CocoonSet> {
        let api = self.api::<CocoonSet>();
        testenv::eventually(&format!("set {name} {what}"), STEP, || async {
            api.get_opt(name).await.ok().flatten().filter(|s| cond(s))
        })
        .await
    }

    async fn set_phase(&self, name: &str, want: CocoonSetPhase) -> anyhow::Result<CocoonSet> {
        self.set_is(name, want.as_str(), |s| {
            current(s) && phase(s) == Some(want)
        })
        .await
    }

    async fn running(&self, name: &str) -> anyhow::Result<CocoonSet> {
        self.set_is(name, "Running with every VM reported", |s| {
            current(s) && phase(s) == Some(CocoonSetPhase::Running) && all_vms_reported(s)
        })
        .await
    }

    async fn pod_is(
        &self,
        name: &str,
        what: &str,
        cond: impl Fn(&Pod) -> bool,
    ) -> anyhow::Result<Pod> {
        let api = self.api::<Pod>();
        testenv::eventually(&format!("pod {name} {what}"), STEP, || async {
            api.get_opt(name)
                .await
                .ok()
                .flatten()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && cond(p))
        })
        .await
    }

    async fn hibernation_is(
        &self,
        name: &str,
        want: HibernationPhase,
    ) -> anyhow::Result<CocoonHibernation> {
        let api = self.api::<CocoonHibernation>();
        testenv::eventually(&format!("hibernation {name} {want:?}"), STEP, || async {
            api.get_opt(name).await.ok().flatten().filter(|h| {
                h.status.as_ref().and_then(|s| s.phase) == Some(want)
                    && h.status.as_ref().and_then(|s| s.observed_generation)
                        == h.metadata.generation
            })
        })
        .await
    }

    async fn set_pods(&self, set: &str) -> anyhow::Result<Vec<String>> {
        let lp = ListParams::default().labels(&format!("{}={set}", names::LABEL_SET));
        let mut out: Vec<String> = (self.api::<Pod>().list(&lp).await?.items.iter())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        out.sort();
        Ok(out)
    }

    async fn pods_are(&self, set: &str, want: &[&str]) -> anyhow::Result<()> {
        testenv::eventually(&format!("pods of {set} = {want:?}"), STEP, || async {
            self.set_pods(set)
                .await
                .ok()
                .filter(|p| p.iter().map(String::as_str).eq(want.iter().copied()))
        })
        .await?;
        Ok(())
    }
}

impl Flow for User {
    /// The steps, under whatever faults and kills the caller arranged.
    async fn run(&self) -> anyhow::Result<()> {
        let u = self;
        // alpha: created, scaled, suspended and resumed.
        u.set(
            "alpha",
            json!({"agent": {"replicas": 1}, "toolboxes": [{"name": "db"}]}),
        )
        .await?;
        u.set("solo", json!({"hibernatePolicy": "release"})).await?;
        u.running("alpha").await?;
        u.patch_set("alpha", json!({"agent": {"replicas": 2}}))
            .await?;
        u.pods_are("alpha", &["alpha-0", "alpha-1", "alpha-2", "alpha-db"])
            .await?;
        u.running("alpha").await?;
        u.patch_set("alpha", json!({"suspend": true})).await?;
        u.set_phase("alpha", CocoonSetPhase::Suspended).await?;
        u.patch_set("alpha", json!({"suspend": false})).await?;
        u.running("alpha").await?;

        // solo: released on suspend, woken from its snapshot, then migrated through one.
        u.running("solo").await?;
        u.patch_set("solo", json!({"suspend": true})).await?;
        u.set_phase("solo", CocoonSetPhase::Suspended).await?;
        u.pods_are("solo", &[]).await?;
        u.patch_set("solo", json!({"suspend": false})).await?;
        u.running("solo").await?;
        let main = u.pod_is("solo-0", "live", state::vm_live).await?;
        let from = state::node_name(&main).unwrap_or_default().to_owned();
        let to = NODES.into_iter().find(|n| *n != from).unwrap_or(NODES[0]);
        u.patch_set("solo", json!({"nodeName": to})).await?;
        u.pod_is("solo-0", &format!("live on {to}"), |p| {
            state::vm_live(p) && state::node_name(p) == Some(to)
        })
        .await?;
        u.running("solo").await?;

        // A CocoonHibernation hibernates and wakes alpha's sub-agent 1, then goes.
        let h: CocoonHibernation = serde_json::from_value(json!({
            "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonHibernation",
            "metadata": {"name": "h1"},
            "spec": {"podRef": {"name": "alpha-1"}, "desire": "Hibernate"},
        }))?;
        let hibernations = u.api::<CocoonHibernation>();
        hibernations.create(&PostParams::default(), &h).await?;
        u.hibernation_is("h1", HibernationPhase::Hibernated).await?;
        let wake = Patch::Merge(json!({"spec": {"desire": "Wake"}}));
        hibernations
            .patch("h1", &PatchParams::default(), &wake)
            .await?;
        u.hibernation_is("h1", HibernationPhase::Active).await?;
        hibernations.delete("h1", &DeleteParams::default()).await?;
        testenv::eventually("hibernation h1 gone", STEP, || async {
            matches!(hibernations.get_opt("h1").await, Ok(None)).then_some(())
        })
        .await?;
        u.pod_is("alpha-1", "live", state::vm_live).await?;
        u.running("alpha").await?;
        Ok(())
    }

    async fn capture(&self) -> anyhow::Result<Value> {
        super::state::capture(&self.client, &self.ns, &self.registry).await
    }

    /// Whether `state` (see `super::state`) is the converged end of [`run`].
    fn settled(&self, state: &Value) -> bool {
        let sets = &state["sets"];
        let running = |name: &str| {
            sets[name]["phase"] == "Running"
                && sets[name]["current"] == true
                && sets[name]["vms_reported"] == true
        };
        let pods = state["pods"].as_object();
        let live =
            |name: &str| pods.is_some_and(|p| p.get(name).is_some_and(|p| p["live"] == true));
        running("alpha")
            && running("solo")
            && ["alpha-0", "alpha-1", "alpha-2", "alpha-db", "solo-0"]
                .into_iter()
                .all(live)
            && pods.is_some_and(|p| p.len() == 5)
            && state["hibernations"]
                .as_object()
                .is_some_and(|h| h.is_empty())
            && state["pods"]["solo-0"]["on_target"] == true
    }

    /// Deletes every set and hibernation there is (whatever the flow got to).
    async fn teardown(&self) -> anyhow::Result<()> {
        let u = self;
        let (dp, lp) = (DeleteParams::default(), ListParams::default());
        for h in u.api::<CocoonHibernation>().list(&lp).await?.items {
            u.api::<CocoonHibernation>()
                .delete(&h.name_any(), &dp)
                .await?;
        }
        for s in u.api::<CocoonSet>().list(&lp).await?.items {
            u.api::<CocoonSet>().delete(&s.name_any(), &dp).await?;
        }
        Ok(())
    }

    /// What is left of the user's objects and their children: `(invariant, what)` pairs, an
    /// object still there after its deletion as `finalizer_not_released`, a pod as
    /// `orphaned_child`.
    async fn leftovers(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let u = self;
        let lp = ListParams::default();
        let mut out = Vec::new();
        for s in u.api::<CocoonSet>().list(&lp).await?.items {
            out.push((
                "finalizer_not_released",
                format!("CocoonSet {} {:?}", s.name_any(), s.finalizers()),
            ));
        }
        for h in u.api::<CocoonHibernation>().list(&lp).await?.items {
            out.push((
                "finalizer_not_released",
                format!("CocoonHibernation {} {:?}", h.name_any(), h.finalizers()),
            ));
        }
        for p in u.api::<Pod>().list(&lp).await?.items {
            out.push(("orphaned_child", format!("Pod {}", p.name_any())));
        }
        Ok(out)
    }
}
