//! The simulated processes following the pods: what each FoundationDB pod's
//! `fdb-kubernetes-monitor` and fdbserver would do, played from outside the pods (the test
//! plane's FoundationDB pods run no process).
//!
//! Contract:
//! - [`play_monitors`]: every pod that mounts the cluster's config map gets the annotations its
//!   monitor would publish for the configuration it loads ([`fake_monitor`]), on the API
//!   server and on the caller's copies.
//! - [`follow_once`]: one pass for one cluster: the monitors played, then the database's
//!   processes set from the pods ([`FakeDatabase::sync_pods`]).
//! - [`follow_namespace`]: `fdb-sim serve --follow-namespace`: every half second, one pass per
//!   cluster with pods in the namespace (by the `foundationdb.org/fdb-cluster-name` label),
//!   against the database its config map's cluster file reaches, or before there is one the
//!   registry's database named by the cluster's description; until `shutdown`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::server::Registry;
use crate::admin::fake::FakeDatabase;
use crate::admin::fake_monitor;
use crate::crd::sanitize_description;

/// The label naming a pod's cluster.
pub const CLUSTER_LABEL: &str = "foundationdb.org/fdb-cluster-name";
/// The label naming a pod's process class.
pub const CLASS_LABEL: &str = "foundationdb.org/fdb-process-class";
/// The label naming a pod's process group.
pub const ID_LABEL: &str = "foundationdb.org/fdb-process-group-id";
/// The version a pod without a monitor configuration runs.
pub const DEFAULT_VERSION: &str = "7.1.57";

/// Plays the monitor of every pod in `list` that mounts config map `cm_name` (see the module
/// contract). A pod deleted in between is no error.
pub async fn play_monitors(
    pods: &Api<Pod>,
    configs: &Api<ConfigMap>,
    cm_name: &str,
    list: &mut [Pod],
) {
    let Ok(Some(cm)) = configs.get_opt(cm_name).await else {
        return;
    };
    let mounts_it = |pod: &Pod| {
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| v.config_map.as_ref().is_some_and(|c| c.name == cm_name))
    };
    for pod in list.iter_mut().filter(|p| mounts_it(p)) {
        let Some(annotations) = fake_monitor::monitor_annotations(pod, &cm) else {
            continue;
        };
        let name = pod.name_any();
        let patch = json!({"metadata": {"annotations": annotations}});
        if pods
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .is_ok()
        {
            pod.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(annotations);
        }
    }
}

/// One pass for `cluster`'s `list` of pods (see the module contract).
pub async fn follow_once(
    db: &FakeDatabase,
    pods: &Api<Pod>,
    configs: &Api<ConfigMap>,
    cluster: &str,
    list: &mut [Pod],
) {
    play_monitors(pods, configs, &format!("{cluster}-config"), list).await;
    db.sync_pods(list, CLASS_LABEL, ID_LABEL, DEFAULT_VERSION);
}

/// The database `cluster`'s pods belong to: the one its config map's cluster file reaches
/// (a deleted cluster's database, with an older connection string, may share the name), else
/// the one named by its description (claimed by the operator's first cluster file).
async fn database_of(registry: &Registry, configs: &Api<ConfigMap>, cluster: &str) -> FakeDatabase {
    let file = configs
        .get_opt(&format!("{cluster}-config"))
        .await
        .ok()
        .flatten()
        .and_then(|cm| cm.data?.get("cluster-file").cloned())
        .filter(|f| !f.is_empty());
    if let Some(keys) = file.and_then(|f| registry.resolve(&f).ok()) {
        return keys.fake;
    }
    registry.database(&sanitize_description(cluster))
}

/// Follows every cluster's pods in `namespace` until `shutdown` (see the module contract).
pub async fn follow_namespace(
    registry: Registry,
    client: Client,
    namespace: String,
    shutdown: CancellationToken,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let configs: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let list = match pods
            .list(&ListParams::default().labels(CLUSTER_LABEL))
            .await
        {
            Ok(l) => l.items,
            Err(e) => {
                tracing::warn!(error = %e, %namespace, "listing the pods to follow");
                continue;
            }
        };
        let mut by_cluster: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
        for p in list {
            if let Some(c) = p.labels().get(CLUSTER_LABEL).cloned() {
                by_cluster.entry(c).or_default().push(p);
            }
        }
        for (cluster, mut list) in by_cluster {
            let db = database_of(&registry, &configs, &cluster).await;
            follow_once(&db, &pods, &configs, &cluster, &mut list).await;
        }
    }
}
