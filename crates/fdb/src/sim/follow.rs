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
//!   cluster with pods in the namespace (by the `foundationdb.org/fdb-cluster-name` label and
//!   the owning cluster's UID, so a re-created cluster of the same name is a new database),
//!   against the database its own config map's cluster file reaches, or before there is one
//!   the database its pods went to before, or an unclaimed one named by the cluster's
//!   description; until `shutdown`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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

/// The process groups of `db` whose processes still hold data while none of `pods` (the
/// ones not being deleted) carries their `ID_LABEL`: a pod gone too early.
pub fn gone_holding_data(db: &FakeDatabase, pods: &[Pod]) -> Vec<String> {
    let present: std::collections::BTreeSet<&str> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.labels().get(ID_LABEL).map(String::as_str))
        .collect();
    db.holding_data()
        .into_iter()
        .filter(|id| !present.contains(id.as_str()))
        .collect()
}

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

/// The UID of the FoundationDBCluster owning an object (`""` without one).
fn owner_uid(meta: &ObjectMeta) -> String {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "FoundationDBCluster")
        .map(|o| o.uid.clone())
        .unwrap_or_default()
}

/// The database of the pods of cluster `cluster` owned by the cluster with UID `uid`: the
/// one its config map's cluster file reaches (only a config map of that same cluster: a
/// deleted cluster of the same name may still have one), else the one these pods went to
/// before, else one named by its description that no cluster file reached yet (the operator's
/// first cluster file claims it).
async fn database_of(
    registry: &Registry,
    configs: &Api<ConfigMap>,
    cluster: &str,
    uid: &str,
    assigned: &mut HashMap<String, FakeDatabase>,
) -> FakeDatabase {
    let file = configs
        .get_opt(&format!("{cluster}-config"))
        .await
        .ok()
        .flatten()
        .filter(|cm| owner_uid(&cm.metadata) == uid)
        .and_then(|cm| cm.data?.get("cluster-file").cloned())
        .filter(|f| !f.is_empty());
    if let Some(keys) = file.and_then(|f| registry.resolve(&f).ok()) {
        assigned.insert(uid.to_owned(), keys.fake.clone());
        return keys.fake;
    }
    assigned
        .entry(uid.to_owned())
        .or_insert_with(|| registry.unclaimed(&sanitize_description(cluster)))
        .clone()
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
    let mut assigned = HashMap::new();
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
        let mut by_cluster: BTreeMap<(String, String), Vec<Pod>> = BTreeMap::new();
        for p in list {
            if let Some(c) = p.labels().get(CLUSTER_LABEL).cloned() {
                let uid = owner_uid(&p.metadata);
                by_cluster.entry((c, uid)).or_default().push(p);
            }
        }
        for ((cluster, uid), mut list) in by_cluster {
            let db = database_of(&registry, &configs, &cluster, &uid, &mut assigned).await;
            follow_once(&db, &pods, &configs, &cluster, &mut list).await;
        }
    }
}
