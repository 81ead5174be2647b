//! Wiring of the RedisCluster controller: its watches, their caches, and what wakes a cluster.
//!
//! Contract:
//! - RedisClusters wake their own pass on a change of generation, labels, annotations,
//!   deletion or `status.targetPrimary` (a requested switchover); the operator's own status
//!   writes do not (the periodic poll follows them).
//! - Children carrying the cluster's controller owner reference (pods, Services, PDBs, the
//!   operator's Secrets, ServiceAccount, Role, RoleBinding, Lease) wake their cluster; PVCs by
//!   their `redis.io/cluster` label; a Secret of any name wakes the clusters of its namespace
//!   that reference it (rotation); a Node whose `unschedulable` flips wakes the clusters with a
//!   pod on it (the pre-drain switchover).
//! - Every watch feeds the cache the pass reads ([`Caches`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::events::scoped;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::observe::Caches;
use super::{Reconciler, error_policy, pipeline, reconcile};
use crate::context::Context;
use crate::crd::RedisCluster;
use crate::names;

/// A reflector over `api` with `config`: the store, and the objects it changed (after the
/// store has them). `managedFields` are dropped: nothing reads them.
fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(|o| o.managed_fields_mut().clear());
    let events = reflector::reflector(writer, stream);
    (store, events.touched_objects().boxed())
}

/// What of a RedisCluster wakes its pass (see the module contract).
fn interesting(rc: &RedisCluster) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    rc.metadata.generation.hash(&mut h);
    rc.metadata.labels.hash(&mut h);
    rc.metadata.annotations.hash(&mut h);
    rc.metadata.deletion_timestamp.is_some().hash(&mut h);
    rc.status
        .as_ref()
        .map(|s| s.target_primary.clone())
        .hash(&mut h);
    Some(h.finish())
}

/// The clusters in `secret`'s namespace that reference it.
fn referencing(
    store: &Store<RedisCluster>,
    ns: Option<String>,
    name: &str,
) -> Vec<ObjectRef<RedisCluster>> {
    store
        .state()
        .into_iter()
        .filter(|rc| rc.namespace() == ns)
        .filter(|rc| {
            let s = &rc.spec;
            let refs = [
                &s.auth_secret,
                &s.acl_config_secret,
                &s.tls_secret,
                &s.ca_secret,
                &s.backup_credentials_secret,
            ];
            let source = s
                .replica_mode
                .as_ref()
                .and_then(|r| r.source.as_ref())
                .map(|s| s.auth_secret_name.as_str());
            refs.iter().flat_map(|r| r.iter()).any(|r| r.name == name)
                || source == Some(name)
                || (s.auth_secret.is_none() && names::auth_secret(&rc.name_any()) == name)
        })
        .map(|rc| ObjectRef::from(&*rc))
        .collect()
}

/// Runs the controller until `rc.shutdown`, over `namespace` (every namespace when `None`).
pub async fn run(
    ctx: Arc<Context>,
    rc: RunContext,
    namespace: Option<String>,
) -> anyhow::Result<()> {
    let ns = namespace.as_deref();
    let client = &ctx.client;
    let labelled = || watcher::Config::default().labels(names::LABEL_CLUSTER);
    let (clusters, writer) = reflector::store();
    let cluster_events = watcher(
        scoped::<RedisCluster>(client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects()
    .predicate_filter(interesting, Default::default());
    let (pods, pod_events) = cached(scoped::<Pod>(client, ns), labelled());
    let (pvcs, pvc_events) = cached(scoped::<PersistentVolumeClaim>(client, ns), labelled());
    let (services, service_events) = cached(scoped::<Service>(client, ns), labelled());
    let (pdbs, pdb_events) = cached(scoped::<PodDisruptionBudget>(client, ns), labelled());
    let (secrets, secret_events) = cached(scoped::<Secret>(client, ns), labelled());
    let (accounts, account_events) = cached(scoped::<ServiceAccount>(client, ns), labelled());
    let (roles, role_events) = cached(scoped::<Role>(client, ns), labelled());
    let (bindings, binding_events) = cached(scoped::<RoleBinding>(client, ns), labelled());
    let (leases, lease_events) = cached(scoped::<Lease>(client, ns), labelled());
    let (nodes, node_events) = cached(Api::<Node>::all(client.clone()), watcher::Config::default());
    let (secret_meta, meta_writer) = reflector::store();
    let meta_api: Api<PartialObjectMeta<Secret>> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let meta_events = watcher(meta_api, watcher::Config::default())
        .default_backoff()
        .reflect(meta_writer)
        .touched_objects();
    let caches = Caches {
        pods: pods.clone(),
        pvcs,
        services,
        pdbs,
        secrets,
        secret_meta,
        accounts,
        roles,
        bindings,
        leases,
        nodes,
    };
    let by_label = |o: PersistentVolumeClaim| {
        o.labels()
            .get(names::LABEL_CLUSTER)
            .map(|c| ObjectRef::<RedisCluster>::new(c).within(&o.namespace().unwrap_or_default()))
    };
    let secret_store = clusters.clone();
    let secret_map = move |s: PartialObjectMeta<Secret>| {
        referencing(&secret_store, s.namespace(), &s.name_any())
    };
    let cordons: Arc<Mutex<HashMap<String, bool>>> = Arc::default();
    let pod_store = pods.clone();
    let node_map = move |n: Node| {
        let now = n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let before = cordons
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(n.name_any(), now);
        if before.unwrap_or(false) == now {
            return Vec::new();
        }
        pod_store
            .state()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&n.name_any()))
            .filter_map(|p| {
                p.labels().get(names::LABEL_CLUSTER).map(|c| {
                    ObjectRef::<RedisCluster>::new(c).within(&p.namespace().unwrap_or_default())
                })
            })
            .collect::<Vec<_>>()
    };
    let controller = Controller::for_stream(cluster_events, clusters)
        .owns_stream(pod_events)
        .owns_stream(service_events)
        .owns_stream(pdb_events)
        .owns_stream(secret_events)
        .owns_stream(account_events)
        .owns_stream(role_events)
        .owns_stream(binding_events)
        .owns_stream(lease_events)
        .watches_stream(pvc_events, by_label)
        .watches_stream(meta_events, secret_map)
        .watches_stream(node_events, node_map);
    let reconciler = Arc::new(Reconciler {
        ctx: ctx.clone(),
        caches,
        pipeline: pipeline(),
    });
    let mut settings = ControllerSettings::new(names::controller::CLUSTER);
    settings.max_concurrent_reconciles = ctx.settings.max_concurrent_reconciles;
    run_controller(
        controller,
        &settings,
        &rc,
        reconcile,
        error_policy,
        reconciler,
    )
    .await;
    Ok(())
}
