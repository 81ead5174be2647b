//! The user's side of the stellar `placement` scenario, as docs/stellar.md walks through it:
//! in the WDS a namespace with a Deployment `web` and the ConfigMaps `cfg-1`, `cfg-2` and
//! `common`; three BindingPolicies: `web` (the Deployment to WEC a, its status returned as a
//! singleton), `cfg` (the `cfg-*` ConfigMaps to a) and `common` (the ConfigMap `common` to a
//! and b), each with the namespace. Then the Deployment is scaled to 2 with a new template
//! annotation and `cfg-1` gets new data; `cfg`'s cluster selector moves to b (the two
//! ConfigMaps move from a to b); `cfg-2` is deleted. Every wait has a deadline; a step that
//! does not complete is an error (the caller records it as `progress`).
//!
//! The flow keeps the [`Placement`] the invariants read: what is wanted on each WEC now, and
//! what was ever bound there; it is changed before each write that changes it (a removal
//! before the write that removes, an addition before the write that adds).
//!
//! The converged state ([`User::settled`]): on a the namespace, `web` (2 replicas, both
//! available, the new annotation) and `common`; on b the namespace, `common` and `cfg-1` with
//! its new data; the Deployment's status in the WDS from a's copy at its generation 2.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use stellar::api::{Binding, BindingPolicy, WorkStatus};
use stellar::names;
use stellar::ocm::{AppliedManifestWork, ManifestWork};
use testenv::chaos::Flow;

use crate::WDS2;
use crate::World;

/// The longest any one step may take, faults and kills included.
pub const STEP: Duration = Duration::from_secs(180);
/// The label every workload object of the run carries (the run's name).
pub const RUN_LABEL: &str = "flotilla-chaos";

/// A WEC registered for the run.
#[derive(Clone)]
pub struct Cluster {
    /// Its ManagedCluster (and mailbox) name, `<run>-a` or `<run>-b`.
    pub name: String,
    /// The space it is (`wec1`, `wec2`).
    pub space: String,
    /// An admin client of the space.
    pub client: Client,
}

/// Where the flow wants objects (`(cluster, Kind/name)`), now and ever.
#[derive(Default, Debug)]
pub struct Placement {
    /// Wanted there now: deleting it there is a violation.
    pub wanted: BTreeSet<(String, String)>,
    /// Ever bound there: anything else appearing there is a violation.
    pub allowed: BTreeSet<(String, String)>,
}

impl Placement {
    fn want(&mut self, cluster: &str, keys: &[String]) {
        for k in keys {
            self.wanted.insert((cluster.to_owned(), k.clone()));
            self.allowed.insert((cluster.to_owned(), k.clone()));
        }
    }

    fn unwant(&mut self, cluster: &str, keys: &[String]) {
        for k in keys {
            self.wanted.remove(&(cluster.to_owned(), k.clone()));
        }
    }
}

/// Admin access to the run's spaces, and the placement the invariants read.
pub struct User {
    pub ns: String,
    pub wds: Client,
    pub its: Client,
    pub clusters: Vec<Cluster>,
    pub placement: Arc<Mutex<Placement>>,
}

fn cm_key(name: &str) -> String {
    format!("ConfigMap/{name}")
}

const WEB: &str = "Deployment/web";

impl User {
    pub fn new(w: &World) -> Self {
        Self {
            ns: w.ns.clone(),
            wds: w.wds.clone(),
            its: w.its.clone(),
            clusters: w.clusters.clone(),
            placement: Arc::default(),
        }
    }

    fn a(&self) -> &Cluster {
        &self.clusters[0]
    }

    fn b(&self) -> &Cluster {
        &self.clusters[1]
    }

    fn ns_key(&self) -> String {
        format!("Namespace/{}", self.ns)
    }

    fn policy(&self, short: &str) -> String {
        format!("{}-{short}", self.ns)
    }

    fn placement(&self) -> std::sync::MutexGuard<'_, Placement> {
        self.placement.lock().expect("placement")
    }

    fn labels(&self, tier: &str) -> Value {
        json!({RUN_LABEL: &self.ns, "tier": tier})
    }

    fn policy_object(&self, short: &str, clusters: &[&str], tier: &str, singleton: bool) -> Value {
        json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
            "metadata": {"name": self.policy(short)},
            "spec": {
                "clusterSelectors": [{"matchExpressions": [{"key": "name", "operator": "In", "values": clusters}]}],
                "downsync": [
                    {"resources": ["namespaces"], "objectNames": [&self.ns]},
                    {"namespaces": [&self.ns], "objectSelectors": [{"matchLabels": {RUN_LABEL: &self.ns, "tier": tier}}],
                     "wantSingletonReportedState": singleton},
                ],
            },
        })
    }

    async fn create_workload(&self) -> anyhow::Result<()> {
        let pp = PostParams::default();
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": &self.ns, "labels": {RUN_LABEL: &self.ns}}}))?;
        Api::<Namespace>::all(self.wds.clone())
            .create(&pp, &ns)
            .await?;
        let web: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "labels": self.labels("web")},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}, "annotations": {"note": "v1"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))?;
        Api::<Deployment>::namespaced(self.wds.clone(), &self.ns)
            .create(&pp, &web)
            .await?;
        let cms = Api::<ConfigMap>::namespaced(self.wds.clone(), &self.ns);
        for (name, tier) in [("cfg-1", "cfg"), ("cfg-2", "cfg"), ("common", "common")] {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": self.labels(tier)}, "data": {"v": "1"}}))?;
            cms.create(&pp, &cm).await?;
        }
        Ok(())
    }

    async fn create_policies(&self) -> anyhow::Result<()> {
        let (a, b) = (self.a().name.clone(), self.b().name.clone());
        {
            let ns = self.ns_key();
            let mut p = self.placement();
            p.want(
                &a,
                &[ns.clone(), WEB.into(), cm_key("cfg-1"), cm_key("cfg-2")],
            );
            p.want(&a, &[cm_key("common")]);
            p.want(&b, &[ns, cm_key("common")]);
        }
        let api: Api<BindingPolicy> = Api::all(self.wds.clone());
        let pp = PostParams::default();
        for (short, clusters, tier, singleton) in [
            ("web", vec![a.as_str()], "web", true),
            ("cfg", vec![a.as_str()], "cfg", false),
            ("common", vec![a.as_str(), b.as_str()], "common", false),
        ] {
            let p = self.policy_object(short, &clusters, tier, singleton);
            api.create(&pp, &serde_json::from_value(p)?).await?;
        }
        Ok(())
    }

    /// Waits until `check` holds of the captured state.
    async fn until(&self, what: &str, check: impl Fn(&Value) -> bool) -> anyhow::Result<()> {
        testenv::eventually(what, STEP, || async {
            let s = self.capture_state().await.ok()?;
            check(&s).then_some(())
        })
        .await
        .map(|_| ())
    }

    /// The run's objects on `c` (not being deleted), `Kind/name` → what matters of each.
    pub async fn on_wec(&self, c: &Cluster) -> anyhow::Result<BTreeMap<String, Value>> {
        let lp = ListParams::default().labels(&format!("{RUN_LABEL}={}", self.ns));
        let live = |m: &kube::api::ObjectMeta| m.deletion_timestamp.is_none();
        let mut out = BTreeMap::new();
        for n in Api::<Namespace>::all(c.client.clone()).list(&lp).await? {
            if live(&n.metadata) {
                out.insert(format!("Namespace/{}", n.name_any()), json!({}));
            }
        }
        for cm in Api::<ConfigMap>::namespaced(c.client.clone(), &self.ns)
            .list(&lp)
            .await?
        {
            if live(&cm.metadata) {
                out.insert(cm_key(&cm.name_any()), json!(cm.data));
            }
        }
        for d in Api::<Deployment>::namespaced(c.client.clone(), &self.ns)
            .list(&lp)
            .await?
        {
            if live(&d.metadata) {
                out.insert(
                    format!("Deployment/{}", d.name_any()),
                    deployment_summary(&d),
                );
            }
        }
        Ok(out)
    }

    /// The run's ManifestWorks in `c`'s mailbox: `<policy>: Kind/name` with whether the agent
    /// applied it (and `deleting` when it is being deleted), sorted.
    async fn works(&self, c: &Cluster) -> anyhow::Result<Vec<String>> {
        let lp = ListParams::default().labels(&format!("{}={WDS2}", names::WDS_LABEL));
        let mut out = Vec::new();
        for mw in Api::<ManifestWork>::namespaced(self.its.clone(), &c.name)
            .list(&lp)
            .await?
        {
            let applied = mw.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Applied" && c.status == "True")
            });
            let deleting = mw.metadata.deletion_timestamp.is_some();
            for m in &mw.spec.workload.manifests {
                out.push(format!(
                    "{}: {}/{}{}{}",
                    self.short_policy(mw.labels().get(names::BINDING_LABEL)),
                    m["kind"].as_str().unwrap_or_default(),
                    m["metadata"]["name"].as_str().unwrap_or_default(),
                    if applied { " applied" } else { "" },
                    if deleting { " deleting" } else { "" },
                ));
            }
        }
        out.sort();
        Ok(out)
    }

    fn short_policy(&self, label: Option<&String>) -> String {
        let l = label.map(String::as_str).unwrap_or_default();
        l.strip_prefix(&format!("{}-", self.ns))
            .unwrap_or(l)
            .to_owned()
    }

    /// The WorkStatuses in `c`'s mailbox of the run's objects: `<policy>: Kind/name`.
    async fn work_statuses(&self, c: &Cluster) -> anyhow::Result<Vec<String>> {
        let mut out: Vec<String> = Api::<WorkStatus>::namespaced(self.its.clone(), &c.name)
            .list(&ListParams::default())
            .await?
            .into_iter()
            .filter(|w| {
                let r = &w.spec.spec.source_ref;
                r.namespace == self.ns || r.name == self.ns
            })
            .map(|w| {
                let r = &w.spec.spec.source_ref;
                format!(
                    "{}: {}/{}",
                    self.short_policy(w.labels().get(names::BINDING_LABEL)),
                    r.kind,
                    r.name
                )
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// The status returned to the WDS Deployment.
    async fn returned_status(&self) -> anyhow::Result<Value> {
        let d = Api::<Deployment>::namespaced(self.wds.clone(), &self.ns)
            .get_opt("web")
            .await?;
        Ok(d.map_or(Value::Null, |d| {
            let s = d.status.clone().unwrap_or_default();
            json!({
                "replicas": s.replicas,
                "available": s.available_replicas,
                "observedGeneration": s.observed_generation,
                "singleton": d.labels().get(names::SINGLETON_STATUS_LABEL),
            })
        }))
    }

    /// The normalized state: clusters as `a` and `b`, policies by their short names.
    async fn capture_state(&self) -> anyhow::Result<Value> {
        let mut wecs = serde_json::Map::new();
        let mut works = serde_json::Map::new();
        let mut statuses = serde_json::Map::new();
        for (short, c) in [("a", self.a()), ("b", self.b())] {
            let objects: BTreeMap<String, Value> = self
                .on_wec(c)
                .await?
                .into_iter()
                .map(|(k, v)| (k.replace(&self.ns, "<run>"), v))
                .collect();
            wecs.insert(short.into(), json!(objects));
            works.insert(short.into(), json!(self.normalize(self.works(c).await?)));
            statuses.insert(
                short.into(),
                json!(self.normalize(self.work_statuses(c).await?)),
            );
        }
        Ok(json!({
            "wecs": wecs,
            "works": works,
            "work_statuses": statuses,
            "status": self.returned_status().await?,
        }))
    }

    fn normalize(&self, v: Vec<String>) -> Vec<String> {
        v.into_iter()
            .map(|s| s.replace(&self.ns, "<run>"))
            .collect()
    }

    async fn patch_policy_clusters(&self, short: &str, clusters: &[&str]) -> anyhow::Result<()> {
        let patch = json!({"spec": {"clusterSelectors": [
            {"matchExpressions": [{"key": "name", "operator": "In", "values": clusters}]}]}});
        Api::<BindingPolicy>::all(self.wds.clone())
            .patch(
                &self.policy(short),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
        Ok(())
    }
}

/// What the state compares of a Deployment (on a WEC).
fn deployment_summary(d: &Deployment) -> Value {
    let spec = d.spec.clone().unwrap_or_default();
    let note = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("note").cloned());
    json!({
        "replicas": spec.replicas,
        "available": d.status.as_ref().and_then(|s| s.available_replicas),
        "note": note,
    })
}

/// Whether the state has `key` on WEC `short` with `value` (or any value when `None`).
fn has(s: &Value, short: &str, key: &str, value: Option<Value>) -> bool {
    let got = &s["wecs"][short][key];
    !got.is_null() && value.is_none_or(|v| *got == v)
}

fn web(replicas: i32, note: &str) -> Value {
    json!({"replicas": replicas, "available": replicas, "note": note})
}

fn data(v: &str) -> Value {
    json!({"v": v})
}

fn status_is(s: &Value, available: i32, generation: i64) -> bool {
    s["status"]["available"] == json!(available)
        && s["status"]["observedGeneration"] == json!(generation)
        && s["status"]["singleton"] == json!("true")
}

impl Flow for User {
    /// The steps, under whatever faults and kills the caller arranged.
    async fn run(&self) -> anyhow::Result<()> {
        let u = self;
        u.create_workload().await?;
        u.create_policies().await?;
        u.until("everything delivered and the status returned", |s| {
            ["<run>", "cfg-1", "cfg-2", "common"].iter().all(|n| {
                let key = if *n == "<run>" {
                    "Namespace/<run>".to_owned()
                } else {
                    cm_key(n)
                };
                has(s, "a", &key, None)
            }) && has(s, "a", WEB, Some(web(1, "v1")))
                && has(s, "b", "Namespace/<run>", None)
                && has(s, "b", &cm_key("common"), None)
                && status_is(s, 1, 1)
        })
        .await?;

        // A change of the Deployment (a new WEC generation) and of a ConfigMap.
        Api::<Deployment>::namespaced(u.wds.clone(), &u.ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 2,
                    "template": {"metadata": {"annotations": {"note": "v2"}}}}})),
            )
            .await?;
        Api::<ConfigMap>::namespaced(u.wds.clone(), &u.ns)
            .patch(
                "cfg-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": "2"}})),
            )
            .await?;
        u.until("the changes delivered and the new status returned", |s| {
            has(s, "a", WEB, Some(web(2, "v2")))
                && has(s, "a", &cm_key("cfg-1"), Some(data("2")))
                && status_is(s, 2, 2)
        })
        .await?;

        // `cfg` moves from a to b.
        let cfg = [cm_key("cfg-1"), cm_key("cfg-2")];
        {
            let mut p = u.placement();
            p.unwant(&u.a().name, &cfg);
            p.want(&u.b().name, &cfg);
        }
        u.patch_policy_clusters("cfg", &[&u.b().name]).await?;
        u.until("the cfg ConfigMaps moved from a to b", |s| {
            cfg.iter().all(|k| !has(s, "a", k, None))
                && has(s, "b", &cm_key("cfg-1"), Some(data("2")))
                && has(s, "b", &cm_key("cfg-2"), None)
        })
        .await?;

        // `cfg-2` is deleted.
        u.placement().unwant(&u.b().name, &[cm_key("cfg-2")]);
        Api::<ConfigMap>::namespaced(u.wds.clone(), &u.ns)
            .delete("cfg-2", &DeleteParams::default())
            .await?;
        u.until("cfg-2 gone from b", |s| {
            !has(s, "b", &cm_key("cfg-2"), None)
        })
        .await
    }

    async fn capture(&self) -> anyhow::Result<Value> {
        self.capture_state().await
    }

    /// Whether `state` (see [`User::capture`]) is the converged end of [`User::run`].
    fn settled(&self, s: &Value) -> bool {
        let on = |short: &str| {
            s["wecs"][short]
                .as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>())
        };
        on("a") == Some(vec![cm_key("common"), WEB.into(), "Namespace/<run>".into()])
            && on("b")
                == Some(vec![
                    cm_key("cfg-1"),
                    cm_key("common"),
                    "Namespace/<run>".into(),
                ])
            && has(s, "a", WEB, Some(web(2, "v2")))
            && has(s, "b", &cm_key("cfg-1"), Some(data("2")))
            && status_is(s, 2, 2)
            && ["a", "b"].iter().all(|c| {
                s["works"][c].as_array().is_some_and(|w| {
                    w.iter()
                        .all(|m| m.as_str().is_some_and(|m| m.ends_with(" applied")))
                })
            })
    }

    /// Deletes the policies and the WDS namespace (whatever the flow got to).
    async fn teardown(&self) -> anyhow::Result<()> {
        let u = self;
        {
            let mut p = u.placement();
            p.wanted.clear();
        }
        let dp = DeleteParams::default();
        let api: Api<BindingPolicy> = Api::all(u.wds.clone());
        for short in ["web", "cfg", "common"] {
            if api.get_opt(&u.policy(short)).await?.is_some() {
                api.delete(&u.policy(short), &dp).await?;
            }
        }
        let nss: Api<Namespace> = Api::all(u.wds.clone());
        if nss.get_opt(&u.ns).await?.is_some() {
            nss.delete(&u.ns, &dp).await?;
        }
        Ok(())
    }

    /// What is left after the teardown: policies and Bindings (their finalizers), ManifestWorks
    /// and WorkStatuses in the mailboxes, AppliedManifestWorks and objects on the WECs.
    async fn leftovers(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let u = self;
        let mut out = Vec::new();
        let prefix = format!("{}-", u.ns);
        for p in Api::<BindingPolicy>::all(u.wds.clone())
            .list(&ListParams::default())
            .await?
        {
            if p.name_any().starts_with(&prefix) {
                let what = format!("BindingPolicy {} {:?}", p.name_any(), p.finalizers());
                out.push(("finalizer_not_released", what));
            }
        }
        for b in Api::<Binding>::all(u.wds.clone())
            .list(&ListParams::default())
            .await?
        {
            if b.name_any().starts_with(&prefix) {
                let what = format!("Binding {} {:?}", b.name_any(), b.finalizers());
                out.push(("finalizer_not_released", what));
            }
        }
        for c in &u.clusters {
            for w in u.works(c).await? {
                out.push(("orphaned_child", format!("ManifestWork in {}: {w}", c.name)));
            }
            for w in u.work_statuses(c).await? {
                out.push(("orphaned_child", format!("WorkStatus in {}: {w}", c.name)));
            }
            for amw in Api::<AppliedManifestWork>::all(c.client.clone())
                .list(&ListParams::default())
                .await?
            {
                if amw.spec.agent_id.starts_with(&prefix) {
                    let what = format!("AppliedManifestWork on {}: {}", c.space, amw.name_any());
                    out.push(("orphaned_child", what));
                }
            }
            let lp = ListParams::default().labels(&format!("{RUN_LABEL}={}", u.ns));
            for n in Api::<Namespace>::all(c.client.clone()).list(&lp).await? {
                out.push((
                    "orphaned_child",
                    format!("Namespace on {}: {}", c.space, n.name_any()),
                ));
            }
        }
        Ok(out)
    }
}
