//! The user's side of the redis `failover` scenario, as the end-to-end tests do it one by one:
//! a three-instance cluster comes up on the process-backed nodes; a client writes with
//! `WAIT 1` (a write counts once a replica has it) to whichever instance `currentPrimary`
//! names, and a sampler asks every instance, round after round, whether it accepts a write;
//! the primary's container is SIGKILLed until the cluster fails over; the old primary comes
//! back as a replica; the cluster is scaled to two; writes go on throughout. Every wait has a
//! deadline; a step that does not complete is an error (the caller records it as `progress`).
//!
//! Checked by the flow itself at its end ([`User::finish_data`]): no write a replica
//! acknowledged is missing from the final primary (`acked_write_lost`), and no sampled round
//! saw two instances accept a write (`two_primaries`).
//!
//! The converged state ([`settled`]): `c` Healthy with 2 ready instances `c-0`, `c-1`, the
//! primary one of them and reporting `master`, the other its linked replica.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use nix::sys::signal::Signal;
use redis::crd::{ClusterPhase, RedisCluster};
use serde_json::{Value, json};
use testenv::chaos::Flow;
use testenv::chaos::Violations;

use crate::operator::data::{self, Sampler, Writer};

/// The longest any one step may take, faults and kills included.
pub const STEP: Duration = Duration::from_secs(180);
/// The cluster's name.
pub const CLUSTER: &str = "c";

/// Admin access to the scenario's namespace, and the data-plane clients the flow started.
pub struct User {
    pub client: Client,
    pub ns: String,
    pub violations: Violations,
    clients: Mutex<Option<(Writer, Sampler, String)>>,
}

fn labels() -> String {
    format!("redis.io/cluster={CLUSTER},redis.io/workload=data")
}

/// Whether `rc` is Healthy with `n` ready instances for its current generation.
fn healthy(rc: &RedisCluster, n: i32) -> bool {
    rc.status.as_ref().is_some_and(|s| {
        s.phase == Some(ClusterPhase::Healthy)
            && s.ready_instances == n
            && s.observed_generation == rc.metadata.generation.unwrap_or_default()
    })
}

fn current_primary(rc: &RedisCluster) -> String {
    rc.status
        .as_ref()
        .map(|s| s.current_primary.clone())
        .unwrap_or_default()
}

impl User {
    pub fn new(client: Client, ns: String, violations: Violations) -> Self {
        Self {
            client,
            ns,
            violations,
            clients: Mutex::new(None),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn wait(
        &self,
        what: &str,
        cond: impl Fn(&RedisCluster) -> bool + Clone + Send + 'static,
    ) -> anyhow::Result<RedisCluster> {
        testenv::wait_for(&self.api::<RedisCluster>(), CLUSTER, STEP, cond)
            .await
            .map_err(|e| anyhow::anyhow!("{what}: {e:#}"))
    }

    async fn password(&self) -> anyhow::Result<String> {
        let s = self
            .api::<Secret>()
            .get(&redis::names::auth_secret(CLUSTER))
            .await?;
        let data = s.data.unwrap_or_default();
        let b = data
            .get("password")
            .ok_or_else(|| anyhow::anyhow!("no password in the auth Secret"))?;
        Ok(String::from_utf8(b.0.clone())?)
    }

    /// Waits until the writer has `more` further acknowledged writes.
    async fn progress(&self, more: usize) -> anyhow::Result<()> {
        let acked = || {
            let c = self.clients.lock().expect("clients");
            c.as_ref().map_or(0, |(w, _, _)| w.acked())
        };
        let target = acked() + more;
        testenv::eventually(
            &format!("{more} more acknowledged writes"),
            STEP,
            || async { (acked() >= target).then_some(()) },
        )
        .await?;
        Ok(())
    }

    /// Stops the writer and the sampler and records what they prove against the primary
    /// `rc` names (nothing if they were never started).
    pub async fn finish_data(&self) -> anyhow::Result<()> {
        let Some((writer, sampler, pw)) = self.clients.lock().expect("clients").take() else {
            return Ok(());
        };
        let (writes, samples) = (writer.finish().await, sampler.finish().await);
        for split in &samples.split {
            self.violations
                .record("two_primaries", format!("{split:?} accepted a write"));
        }
        let rc = self.api::<RedisCluster>().get(CLUSTER).await?;
        let primary = current_primary(&rc);
        let ip = self
            .api::<Pod>()
            .get(&primary)
            .await?
            .status
            .and_then(|s| s.pod_ip)
            .ok_or_else(|| anyhow::anyhow!("the primary {primary} has no IP"))?;
        let missing = data::missing(&ip, &pw, &writes.acked).await;
        if !missing.is_empty() {
            self.violations.record(
                "acked_write_lost",
                format!(
                    "{} of {} acknowledged writes missing from {primary}: {:?}",
                    missing.len(),
                    writes.acked.len(),
                    &missing[..missing.len().min(5)]
                ),
            );
        }
        tracing::info!(
            acked = writes.acked.len(),
            errors = writes.errors,
            longest_gap = ?writes.longest_gap,
            rounds = samples.rounds,
            "data plane"
        );
        Ok(())
    }
}

impl Flow for User {
    /// The steps, under whatever faults and kills the caller arranged.
    async fn run(&self) -> anyhow::Result<()> {
        let u = self;
        let rc: RedisCluster = serde_json::from_value(json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": CLUSTER},
            "spec": {"instances": 3, "storage": {"size": "1Gi"}},
        }))?;
        u.api::<RedisCluster>()
            .create(&PostParams::default(), &rc)
            .await?;
        let rc = u.wait("3 healthy instances", |c| healthy(c, 3)).await?;
        let first = current_primary(&rc);

        let pw = u.password().await?;
        let (clusters, pods) = (u.api::<RedisCluster>(), u.api::<Pod>());
        let writer = Writer::start(clusters, pods.clone(), CLUSTER, pw.clone(), 1);
        let sampler = Sampler::start(pods, CLUSTER, pw.clone());
        *u.clients.lock().expect("clients") = Some((writer, sampler, pw));
        u.progress(100).await?;

        // The primary's container is SIGKILLed whenever it runs until another instance is primary.
        let (admin, ns) = (u.client.clone(), u.ns.clone());
        testenv::eventually("a failover", STEP, || async {
            let rc = u.api::<RedisCluster>().get(CLUSTER).await.ok()?;
            let now = current_primary(&rc);
            if !now.is_empty() && now != first {
                return Some(());
            }
            let _ = testenv::procnode::signal(&admin, &ns, &first, "redis", Signal::SIGKILL).await;
            None
        })
        .await?;
        u.progress(100).await?;
        // The old primary comes back as a replica of the new one.
        let back = first.clone();
        u.wait("the old primary back as a replica", move |c| {
            healthy(c, 3)
                && c.status.as_ref().is_some_and(|s| {
                    s.instances_status
                        .get(&back)
                        .is_some_and(|i| i.role == "slave" && i.master_link_status == "up")
                })
        })
        .await?;

        u.api::<RedisCluster>()
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"instances": 2}})),
            )
            .await?;
        u.wait("2 healthy instances", |c| healthy(c, 2)).await?;
        u.progress(100).await?;
        u.finish_data().await
    }

    /// The scenario's state, normalized so a seeded run's equals the fault-free run's (which
    /// replica was promoted is not part of it).
    async fn capture(&self) -> anyhow::Result<Value> {
        let u = self;
        let lp = ListParams::default().labels(&labels());
        let pods: Vec<String> = u
            .api::<Pod>()
            .list(&lp)
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        let pvcs: Vec<String> = u
            .api::<PersistentVolumeClaim>()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        let Some(rc) = u.api::<RedisCluster>().get_opt(CLUSTER).await? else {
            return Ok(json!({"cluster": null, "pods": pods, "pvcs": pvcs}));
        };
        let st = rc.status.clone().unwrap_or_default();
        let primary = current_primary(&rc);
        let roles: BTreeMap<&str, String> = st
            .instances_status
            .iter()
            .filter(|(name, _)| pods.contains(*name))
            .map(|(name, i)| {
                let linked = i.role == "slave" && i.master_link_status == "up";
                let role = match (name.as_str() == primary, i.role.as_str()) {
                    (true, "master") => "primary",
                    (false, "slave") if linked => "linked replica",
                    _ => "other",
                };
                (name.as_str(), role.to_owned())
            })
            .collect();
        let mut role_counts: BTreeMap<String, usize> = BTreeMap::new();
        for r in roles.values() {
            *role_counts.entry(r.clone()).or_default() += 1;
        }
        Ok(json!({
            "cluster": {
                "phase": st.phase,
                "instances": rc.spec.instances,
                "ready": st.ready_instances,
                "current": st.observed_generation == rc.metadata.generation.unwrap_or_default(),
                "primary_is_a_pod": pods.contains(&primary),
                "roles": role_counts,
            },
            "pods": pods,
            "pvcs": pvcs,
        }))
    }

    /// Whether `state` (see [`capture`]) is the converged end of [`run`].
    fn settled(&self, state: &Value) -> bool {
        let c = &state["cluster"];
        c["phase"] == "Healthy"
            && c["ready"] == 2
            && c["current"] == true
            && c["primary_is_a_pod"] == true
            && c["roles"] == json!({"primary": 1, "linked replica": 1})
            && state["pods"] == json!(["c-0", "c-1"])
    }

    /// Deletes the cluster (whatever the flow got to).
    async fn teardown(&self) -> anyhow::Result<()> {
        let u = self;
        let api = u.api::<RedisCluster>();
        if api.get_opt(CLUSTER).await?.is_some() {
            api.delete(CLUSTER, &DeleteParams::default()).await?;
        }
        Ok(())
    }

    /// What is left of the cluster and its pods after the teardown: `(invariant, what)` pairs.
    async fn leftovers(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let u = self;
        let mut out = Vec::new();
        if let Some(rc) = u.api::<RedisCluster>().get_opt(CLUSTER).await? {
            out.push((
                "finalizer_not_released",
                format!("RedisCluster {} {:?}", rc.name_any(), rc.finalizers()),
            ));
        }
        let lp = ListParams::default().labels(&format!("redis.io/cluster={CLUSTER}"));
        for p in u.api::<Pod>().list(&lp).await?.items {
            out.push(("orphaned_child", format!("Pod {}", p.name_any())));
        }
        Ok(out)
    }
}
