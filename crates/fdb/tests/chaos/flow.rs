//! The user's side of the fdb `lifecycle` scenario, as the end-to-end tests do it one by one:
//! a cluster with five storage process groups is created and configured; storage is scaled to
//! three (two groups excluded, drained, removed and included again); a knob
//! (`customParameters` of the storage processes) changes, which the operator rolls out with
//! one bounce. Every wait has a deadline; a step that does not complete is an error (the
//! caller records it as `progress`).
//!
//! The converged state ([`User::settled`]): configured and reconciled for the current
//! generation, three storage groups, no group marked or with a condition, a pod per group,
//! every storage process running the knob, nothing excluded in the database, one `configure
//! new` and one bounce in the database's history.

use std::collections::BTreeMap;
use std::time::Duration;

use fdb::admin::fake::FakeDatabase;
use fdb::crd::FoundationDBCluster;
use fdb::sim::follow::{CLASS_LABEL, CLUSTER_LABEL};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testenv::chaos::Flow;

/// The longest any one step may take, faults and kills included.
pub const STEP: Duration = Duration::from_secs(240);
/// The cluster's name (also its database's name in the simulator).
pub const CLUSTER: &str = "c";
/// The knob the scenario sets on the storage processes.
const KNOB: &str = "knob_max_trace_lines=1000";

/// How many times `configure new` ran against `db`.
pub fn configure_new_calls(db: &FakeDatabase) -> usize {
    db.calls()
        .iter()
        .filter(|c| c.starts_with("configure new"))
        .count()
}

/// Admin access to the scenario's namespace and the simulated database.
pub struct User {
    client: Client,
    ns: String,
    db: FakeDatabase,
}

fn groups(c: &FoundationDBCluster) -> Vec<fdb::crd::ProcessGroupStatus> {
    c.status.clone().unwrap_or_default().process_groups
}

/// Configured, reconciled for the current generation, nothing marked for removal.
fn reconciled(c: &FoundationDBCluster) -> bool {
    let s = c.status.clone().unwrap_or_default();
    s.configured
        && s.generations.reconciled == c.metadata.generation.unwrap_or(-1)
        && !s.process_groups.iter().any(|g| g.is_marked_for_removal())
}

fn storage_count(c: &FoundationDBCluster) -> usize {
    groups(c)
        .iter()
        .filter(|g| g.process_class.as_str() == "storage")
        .count()
}

impl User {
    pub fn new(client: Client, ns: String, db: FakeDatabase) -> Self {
        Self { client, ns, db }
    }

    fn clusters(&self) -> Api<FoundationDBCluster> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn wait(
        &self,
        what: &str,
        cond: impl Fn(&FoundationDBCluster) -> bool + Clone + Send + 'static,
    ) -> anyhow::Result<FoundationDBCluster> {
        testenv::wait_for(&self.clusters(), CLUSTER, STEP, cond)
            .await
            .map_err(|e| anyhow::anyhow!("{what}: {e:#}; database calls {:?}", self.db.calls()))
    }

    async fn patch(&self, spec: Value) -> anyhow::Result<()> {
        self.clusters()
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await?;
        Ok(())
    }

    /// The storage processes not running the knob (their instance IDs).
    fn without_knob(&self, c: &FoundationDBCluster) -> Vec<String> {
        let flag = format!("--{KNOB}");
        let storage: Vec<String> = groups(c)
            .iter()
            .filter(|g| g.process_class.as_str() == "storage")
            .map(|g| g.process_group_id.to_string())
            .collect();
        storage
            .into_iter()
            .filter(|id| {
                !self
                    .db
                    .processes()
                    .iter()
                    .any(|p| p.instance_id == *id && p.command_line.contains(&flag))
            })
            .collect()
    }

    /// How many `kill` rounds the database saw (a bounce is one).
    fn kills(&self) -> usize {
        self.db
            .calls()
            .iter()
            .filter(|c| c.starts_with("kill"))
            .count()
    }
}

impl Flow for User {
    /// The steps, under whatever faults and kills the caller arranged.
    async fn run(&self) -> anyhow::Result<()> {
        let cluster: FoundationDBCluster = serde_json::from_value(json!({
            "apiVersion": "apps.foundationdb.org/v1beta2",
            "kind": "FoundationDBCluster",
            "metadata": {"name": CLUSTER},
            "spec": {
                "version": fdb::sim::follow::DEFAULT_VERSION,
                "faultDomain": {"key": "foundationdb.org/none"},
                "routing": {"useDNSInClusterFile": false},
                "processCounts": {"storage": 5},
                "processes": {"general": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "1G"}}}}}},
                "automationOptions": {"waitBetweenRemovalsSeconds": 0},
                "minimumUptimeSecondsForBounce": 60,
            },
        }))?;
        self.clusters()
            .create(&PostParams::default(), &cluster)
            .await?;
        self.wait("configured with five storage groups", |c| {
            reconciled(c) && storage_count(c) == 5
        })
        .await?;

        self.patch(json!({"processCounts": {"storage": 3}})).await?;
        self.wait("scaled down to three storage groups", |c| {
            reconciled(c) && storage_count(c) == 3
        })
        .await?;

        self.patch(json!({"processes": {"storage": {"customParameters": [KNOB]}}}))
            .await?;
        let u = self;
        testenv::eventually("the knob running everywhere", STEP, || async {
            let c = u.clusters().get(CLUSTER).await.ok()?;
            (reconciled(&c) && u.without_knob(&c).is_empty()).then_some(())
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e:#}; database calls {:?}", self.db.calls()))?;
        Ok(())
    }

    /// The scenario's state, normalized so a seeded run's equals the fault-free run's (no
    /// random group IDs, addresses or times).
    async fn capture(&self) -> anyhow::Result<Value> {
        let lp = ListParams::default().labels(&format!("{CLUSTER_LABEL}={CLUSTER}"));
        let mut pods: BTreeMap<String, usize> = BTreeMap::new();
        for p in self.pods().list(&lp).await?.items {
            if p.metadata.deletion_timestamp.is_none() {
                let class = p.labels().get(CLASS_LABEL).cloned().unwrap_or_default();
                *pods.entry(class).or_default() += 1;
            }
        }
        let database = json!({
            "excluded": self.db.exclusions(),
            "configure_new": configure_new_calls(&self.db),
            "kills": self.kills(),
        });
        let Some(c) = self.clusters().get_opt(CLUSTER).await? else {
            return Ok(json!({"cluster": null, "pods": pods, "database": database}));
        };
        let mut classes: BTreeMap<String, usize> = BTreeMap::new();
        for g in groups(&c) {
            *classes
                .entry(g.process_class.as_str().to_owned())
                .or_default() += 1;
        }
        let s = c.status.clone().unwrap_or_default();
        Ok(json!({
            "cluster": {
                "configured": s.configured,
                "current": s.generations.reconciled == c.metadata.generation.unwrap_or(-1),
                "groups": classes,
                "marked": groups(&c).iter().filter(|g| g.is_marked_for_removal()).count(),
                "with_conditions": groups(&c).iter().filter(|g| !g.process_group_conditions.is_empty()).count(),
                "storage_without_knob": self.without_knob(&c).len(),
            },
            "pods": pods,
            "database": database,
        }))
    }

    /// Whether `state` (see [`Flow::capture`]) is the converged end of [`Flow::run`].
    fn settled(&self, state: &Value) -> bool {
        let c = &state["cluster"];
        c["configured"] == true
            && c["current"] == true
            && c["groups"]["storage"] == 3
            && c["marked"] == 0
            && c["with_conditions"] == 0
            && c["storage_without_knob"] == 0
            && state["pods"] == c["groups"]
            && state["database"]["excluded"] == json!([])
    }

    /// Deletes the cluster (whatever the flow got to); its pods go with it.
    async fn teardown(&self) -> anyhow::Result<()> {
        if self.clusters().get_opt(CLUSTER).await?.is_some() {
            self.clusters()
                .delete(CLUSTER, &DeleteParams::foreground())
                .await?;
        }
        Ok(())
    }

    /// What is left of the cluster and its pods after the teardown: `(invariant, what)` pairs.
    async fn leftovers(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let mut out = Vec::new();
        if let Some(c) = self.clusters().get_opt(CLUSTER).await? {
            out.push((
                "finalizer_not_released",
                format!("FoundationDBCluster {} {:?}", c.name_any(), c.finalizers()),
            ));
        }
        let lp = ListParams::default().labels(&format!("{CLUSTER_LABEL}={CLUSTER}"));
        for p in self.pods().list(&lp).await?.items {
            out.push(("orphaned_child", format!("Pod {}", p.name_any())));
        }
        Ok(out)
    }
}
