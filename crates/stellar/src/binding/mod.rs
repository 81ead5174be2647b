//! The binding controller (runs against a WDS and its ITS): keeps, for every BindingPolicy, a
//! Binding of the same name listing the workload objects it selects (with resource versions
//! and modulations) and the WECs it selects by the live inventory.
//!
//! Shape (linkerd policy-controller style): watches write in-memory indexes
//! ([`index::Index`]): every served resource of the WDS ([`workloads`], started and stopped
//! as CRDs come and go), the ManagedClusters of the ITS, the policies and Bindings; one
//! writer ([`writer::pass`]) reads them and makes the only writes, after a short debounce
//! so a burst of events becomes one pass. The decisions are `stellar_core::resolve`.

pub mod index;
pub mod workloads;
pub mod writer;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;

use crate::api::{Binding, BindingPolicy};
use crate::ocm::ManagedCluster;
use index::Index;

/// How the binding controller runs.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only these API groups are downsynced (upstream's `--api-groups`); empty: all.
    pub api_groups: Vec<String>,
}

/// Quiet time after an event before a pass, so bursts coalesce.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Runs the binding controller until the future is dropped.
pub async fn run(wds: Client, its: Client, opts: Options) -> anyhow::Result<()> {
    let index = Arc::new(Mutex::new(Index::default()));
    let wake = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();

    let (policies, pw) = reflector::store::<BindingPolicy>();
    let stream = reflector(
        pw,
        watcher(Api::all(wds.clone()), watcher::Config::default()),
    );
    tasks.spawn(drive(stream, wake.clone(), index.clone(), Flag::Policies));
    let (bindings, bw) = reflector::store::<Binding>();
    let stream = reflector(
        bw,
        watcher(Api::all(wds.clone()), watcher::Config::default()),
    );
    tasks.spawn(drive(stream, wake.clone(), index.clone(), Flag::None));
    tasks.spawn(watch_inventory(its, index.clone(), wake.clone()));

    let workloads = Arc::new(workloads::Workloads::new(
        wds.clone(),
        index.clone(),
        wake.clone(),
        opts.api_groups,
    ));
    // The first discovery must succeed before the watches start; an API error here is
    // transient (the watch of CRDs re-runs it on every change later), so it is retried.
    let mut retry = Duration::from_millis(200);
    while let Err(e) = workloads.sync().await {
        tracing::warn!(error = %e, "discovery of the workload resources failed; retrying");
        tokio::time::sleep(retry).await; // back-off before the next attempt
        retry = (retry * 2).min(Duration::from_secs(10));
    }
    tasks.spawn(workloads::watch_crds(wds.clone(), workloads.clone()));

    let ctx = writer::Ctx {
        wds,
        index,
        policies,
        bindings,
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        wake.notified().await;
        tokio::time::sleep(DEBOUNCE).await;
        match writer::pass(&ctx).await {
            Ok(_) => backoff = Duration::from_millis(100),
            Err(errors) => {
                for e in &errors {
                    tracing::warn!(error = %e, "binding controller write failed; retrying");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
                wake.notify_one();
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Flag {
    None,
    Policies,
}

async fn drive<K, S>(stream: S, wake: Arc<Notify>, index: Arc<Mutex<Index>>, flag: Flag)
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let stream = stream.default_backoff();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::InitDone) => {
                if let Flag::Policies = flag {
                    index.lock().expect("index lock").policies_synced = true;
                }
                wake.notify_one();
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(_) => wake.notify_one(),
            Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
        }
    }
}

async fn watch_inventory(its: Client, index: Arc<Mutex<Index>>, wake: Arc<Notify>) {
    let api: Api<ManagedCluster> = Api::all(its);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut relist = std::collections::BTreeMap::new();
    while let Some(ev) = stream.next().await {
        let mut ix = index.lock().expect("index lock");
        let changed = match ev {
            Ok(watcher::Event::Init) => {
                relist.clear();
                false
            }
            Ok(watcher::Event::InitApply(mc)) => {
                relist.insert(mc.name_any(), mc.labels().clone());
                false
            }
            Ok(watcher::Event::InitDone) => {
                ix.clusters = std::mem::take(&mut relist);
                ix.inventory_synced = true;
                true
            }
            Ok(watcher::Event::Apply(mc)) => {
                let labels = mc.labels().clone();
                ix.clusters.insert(mc.name_any(), labels.clone()) != Some(labels)
            }
            Ok(watcher::Event::Delete(mc)) => ix.clusters.remove(&mc.name_any()).is_some(),
            Err(e) => {
                tracing::warn!(error = %e, "ManagedCluster watch failed; retrying");
                false
            }
        };
        drop(ix);
        if changed {
            wake.notify_one();
        }
    }
}
