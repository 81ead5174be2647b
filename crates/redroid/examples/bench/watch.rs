//! What the harness waits for: counts of objects in a state, seen through a watch (one
//! request, however many objects), and collections becoming empty.

use std::collections::HashSet;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use redroid::crd::{InstancePhase, RedroidInstance};
use serde::de::DeserializeOwned;

/// Resolves once `n` instances report `Running`.
pub async fn count_instances_running(api: Api<RedroidInstance>, n: usize) -> anyhow::Result<()> {
    count(api, n, |i: &RedroidInstance| {
        i.status.as_ref().and_then(|s| s.phase) == Some(InstancePhase::Running)
    })
    .await
}

/// Resolves once `n` Pods are `Running`.
pub async fn count_pods_running(api: Api<Pod>, n: usize) -> anyhow::Result<()> {
    count(api, n, |p: &Pod| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await
}

async fn count<K>(api: Api<K>, n: usize, done: fn(&K) -> bool) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut seen: HashSet<String> = HashSet::new();
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.try_next().await? {
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                if done(&o) {
                    seen.insert(o.name_any());
                } else {
                    seen.remove(&o.name_any());
                }
            }
            watcher::Event::Delete(o) => {
                seen.remove(&o.name_any());
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
        if seen.len() >= n {
            return Ok(());
        }
    }
    anyhow::bail!("the watch ended")
}

/// Polls (a list of at most one object, every 250 ms) until `api` has no object left.
pub async fn until_empty<K>(api: &Api<K>, timeout: Duration) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    testenv::bench::poll_until(
        "collection empty",
        timeout,
        Duration::from_millis(250),
        || async {
            Ok(api
                .list(&ListParams::default().limit(1))
                .await?
                .items
                .is_empty())
        },
    )
    .await
    .map(|_| ())
}
