//! The floor: what the API server, vksim and the registry need for each phase when no
//! operator logic sits in between.
//!
//! The harness writes the sets exactly as for the operator; a plain client (counted like the
//! operator) does per set only the writes that carry the protocol, each one request, with the
//! pods built by the operator's own pure builders and the status computed by its own pure
//! function, `--floor-concurrency` writes in flight:
//! - create: the finalizer, the main pod; once it is Ready, the sub-agents (bound to its node,
//!   forked from its VM, as the protocol requires) and the toolbox; once all are Ready, one
//!   status write (`Running`).
//! - suspend: one annotation patch per pod (the generation stamp and `hibernate=true`
//!   together); once vksim reports every VM hibernated for that generation, one status write
//!   (`Suspended`). No registry probe: vksim's push is the tag.
//! - unsuspend: one annotation patch per pod (stamp, `hibernate` removed), one status write.
//! - delete: after the harness's collection delete, each pod is deleted; once vksim released
//!   them all, each VM's `:hibernate` tag is deleted (HEAD for the digest, DELETE: distribution
//!   deletes by digest only) and the finalizer removed.
//!
//! What the floor waits on (pods Ready, VMs hibernated, pods gone) it learns from one indexed
//! pod watch, as an operator at its best would.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cocoon::crd::{CocoonSet, CocoonSetPhase};
use cocoon::names;
use cocoon::pods::{build, classify::classify, state, status};
use cocoon::registry::SharedRegistry;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kit::index::Indexed;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

use super::harness;
use super::{Bench, Figures, PhaseSpec};

/// The pods of the floor's namespace by set name, and a wake-up on every change.
#[derive(Clone)]
struct PodView {
    pods: Indexed<Pod, String>,
    changed: Arc<Notify>,
}

impl PodView {
    async fn start(client: &Client, ns: &str) -> anyhow::Result<(Self, JoinHandle<()>)> {
        let (pods, writer) = kit::index::store(|p: &Pod| {
            p.labels()
                .get(names::LABEL_SET)
                .cloned()
                .into_iter()
                .collect()
        });
        let changed = Arc::new(Notify::new());
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let events = watcher(api, watcher::Config::default().labels(names::LABEL_SET))
            .default_backoff()
            .modify(|p| p.managed_fields_mut().clear());
        let notify = changed.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(kit::index::reflect(writer, events));
            while events.next().await.is_some() {
                notify.notify_waiters();
            }
        });
        pods.store().wait_until_ready().await?;
        Ok((Self { pods, changed }, task))
    }

    fn of(&self, set: &str) -> Vec<Pod> {
        self.pods
            .get(&set.to_owned())
            .iter()
            .map(|p| (**p).clone())
            .collect()
    }

    /// Waits until `ready` says yes to the set's pods.
    async fn until<T>(&self, set: &str, ready: impl Fn(&[Pod]) -> Option<T>) -> T {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if let Some(t) = ready(&self.of(set)) {
                return t;
            }
            changed.await;
        }
    }
}

/// The floor's client, its pod view and its write budget.
struct Floor {
    sets: Api<CocoonSet>,
    pods: Api<Pod>,
    view: PodView,
    writes: Semaphore,
    registry: SharedRegistry,
    tasks: Mutex<Vec<JoinHandle<anyhow::Result<()>>>>,
}

impl Floor {
    /// Runs `work` for `set` in its own task (awaited by [`Floor::join`]).
    fn spawn<F>(self: &Arc<Self>, set: CocoonSet, work: fn(Arc<Floor>, CocoonSet) -> F)
    where
        F: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let task = tokio::spawn(work(self.clone(), set));
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }

    async fn join(&self) -> anyhow::Result<()> {
        let tasks: Vec<_> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for t in tasks {
            t.await??;
        }
        Ok(())
    }

    async fn create_pod(&self, pod: &Pod) -> anyhow::Result<()> {
        let _permit = self.writes.acquire().await?;
        self.pods.create(&PostParams::default(), pod).await?;
        Ok(())
    }

    async fn annotate(&self, pod: &str, annotations: serde_json::Value) -> anyhow::Result<()> {
        let _permit = self.writes.acquire().await?;
        let patch = json!({"metadata": {"annotations": annotations}});
        self.pods
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    async fn patch_set(&self, set: &str, patch: serde_json::Value) -> anyhow::Result<CocoonSet> {
        let _permit = self.writes.acquire().await?;
        Ok(self
            .sets
            .patch(set, &PatchParams::default(), &Patch::Merge(&patch))
            .await?)
    }

    async fn write_status(
        &self,
        set: &CocoonSet,
        pods: Vec<Pod>,
        phase: Option<CocoonSetPhase>,
    ) -> anyhow::Result<()> {
        let status = status::compute(set, &classify(set, pods), phase, Timestamp::now());
        let _permit = self.writes.acquire().await?;
        self.sets
            .patch_status(
                &set.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
        Ok(())
    }
}

async fn create_one(f: Arc<Floor>, set: CocoonSet) -> anyhow::Result<()> {
    let name = set.name_any();
    let set = f
        .patch_set(
            &name,
            json!({"metadata": {"finalizers": [names::COCOONSET_FINALIZER]}}),
        )
        .await?;
    f.create_pod(&build::main_pod(&set)).await?;
    let main = f
        .view
        .until(&name, |pods| {
            pods.iter()
                .find(|p| state::label(p, names::LABEL_ROLE) == Some("main") && state::is_ready(p))
                .cloned()
        })
        .await;
    let (vm, node) = (
        state::vm_name(&main).unwrap_or_default(),
        state::node_name(&main),
    );
    let mut rest: Vec<Pod> = (1..=set.spec.agent.replicas())
        .map(|slot| build::sub_agent_pod(&set, slot, vm, node))
        .collect();
    for tb in set.spec.toolboxes.iter().flatten() {
        rest.push(build::toolbox_pod(&set, tb));
    }
    futures::future::try_join_all(rest.iter().map(|p| f.create_pod(p))).await?;
    let want = 1 + rest.len();
    let pods = f
        .view
        .until(&name, |pods| {
            (pods.len() == want && pods.iter().all(state::is_ready)).then(|| pods.to_vec())
        })
        .await;
    f.write_status(&set, pods, None).await
}

async fn suspend_one(f: Arc<Floor>, set: CocoonSet) -> anyhow::Result<()> {
    flag_all(&f, &set, Some("true")).await?;
    let (name, generation) = (set.name_any(), set.metadata.generation.unwrap_or(0));
    let pods = f
        .view
        .until(&name, |pods| {
            pods.iter()
                .all(|p| state::hibernated_for(p, generation))
                .then(|| pods.to_vec())
        })
        .await;
    f.write_status(&set, pods, Some(CocoonSetPhase::Suspended))
        .await
}

async fn unsuspend_one(f: Arc<Floor>, set: CocoonSet) -> anyhow::Result<()> {
    flag_all(&f, &set, None).await?;
    let pods = f.view.of(&set.name_any());
    f.write_status(&set, pods, None).await
}

/// One patch per pod: the set's generation stamp and the hibernate flag (`None` removes it).
async fn flag_all(f: &Floor, set: &CocoonSet, flag: Option<&str>) -> anyhow::Result<()> {
    let generation = set.metadata.generation.unwrap_or(0).to_string();
    let pods: Vec<String> = f
        .view
        .of(&set.name_any())
        .iter()
        .map(|p| p.name_any())
        .collect();
    let annotations = json!({names::ANN_GENERATION: generation, names::ANN_HIBERNATE: flag});
    futures::future::try_join_all(pods.iter().map(|p| f.annotate(p, annotations.clone()))).await?;
    Ok(())
}

async fn delete_one(f: Arc<Floor>, set: CocoonSet) -> anyhow::Result<()> {
    let name = set.name_any();
    let pods = f.view.of(&name);
    let vms: Vec<String> = pods
        .iter()
        .filter_map(state::vm_name)
        .map(str::to_owned)
        .collect();
    futures::future::try_join_all(pods.iter().map(|p| async {
        let _permit = f.writes.acquire().await?;
        f.pods
            .delete(&p.name_any(), &DeleteParams::default())
            .await?;
        anyhow::Ok(())
    }))
    .await?;
    f.view
        .until(&name, |pods| pods.is_empty().then_some(()))
        .await;
    for vm in &vms {
        f.registry.delete_manifest(vm, names::TAG_HIBERNATE).await?;
    }
    f.patch_set(&name, json!({"metadata": {"finalizers": null}}))
        .await?;
    Ok(())
}

/// Measures the floor's four phases in namespace `ns` (its simulator running).
pub async fn measure(bench: &Bench, ns: &str) -> anyhow::Result<Figures> {
    let (client, counts) = testenv::counting_client().await;
    let (view, watch) = PodView::start(&client, ns).await?;
    let registry = bench.registry_client()?;
    let floor = Arc::new(Floor {
        sets: Api::namespaced(client.clone(), ns),
        pods: Api::namespaced(client.clone(), ns),
        view,
        writes: Semaphore::new(bench.args.floor_concurrency),
        registry,
        tasks: Mutex::new(Vec::new()),
    });
    let admin_sets: Api<CocoonSet> = Api::namespaced(bench.admin.clone(), ns);
    let n = bench.args.sets;
    let mut figures = Figures::default();
    let f = &floor;

    let create = async {
        harness::create_sets(&admin_sets, n, |s| f.spawn(s, create_one)).await?;
        f.join().await
    };
    let done = harness::until_all(admin_sets.clone(), n, CocoonSetPhase::Running);
    figures.phases.push(
        bench
            .phase(PhaseSpec::Create, &counts, done, create)
            .await?,
    );

    let suspend = async {
        harness::set_suspend(&admin_sets, n, true, |s| f.spawn(s, suspend_one)).await?;
        f.join().await
    };
    let done = harness::until_all(admin_sets.clone(), n, CocoonSetPhase::Suspended);
    figures.phases.push(
        bench
            .phase(PhaseSpec::Suspend, &counts, done, suspend)
            .await?,
    );

    let unsuspend = async {
        harness::set_suspend(&admin_sets, n, false, |s| f.spawn(s, unsuspend_one)).await?;
        f.join().await
    };
    let done = harness::until_all(admin_sets.clone(), n, CocoonSetPhase::Running);
    figures.phases.push(
        bench
            .phase(PhaseSpec::Unsuspend, &counts, done, unsuspend)
            .await?,
    );

    let delete = async {
        let sets = admin_sets.list(&Default::default()).await?.items;
        harness::delete_sets(&admin_sets).await?;
        for s in sets {
            f.spawn(s, delete_one);
        }
        f.join().await
    };
    let done = harness::until_no_sets(admin_sets.clone());
    figures.phases.push(
        bench
            .phase(PhaseSpec::Delete, &counts, done, delete)
            .await?,
    );
    watch.abort();
    let _ = tokio::time::timeout(Duration::from_secs(1), watch).await;
    Ok(figures)
}
