//! Reads only: the watch caches the controller keeps, and one cluster's slice of them.
//!
//! Contract:
//! - Every child kind the operator writes is watched through the label `redis.io/cluster`
//!   (pods, PVCs, Services, PDBs, its own Secrets, ServiceAccounts, Roles, RoleBindings,
//!   Leases); Secrets of every name are watched by metadata only (rotation of the Secrets a
//!   cluster references, whose content the operator never caches); Nodes for cordons.
//! - [`Caches::observe`] reads nothing from the API server: a pass reads its cluster's
//!   children from the caches, which are complete: the driver waits for them, for a bounded
//!   time ([`Caches::ready`]), and tries again later when one is still incomplete.
//! - The few contents that are not cached (a user-provided auth password for the connection
//!   Secret) are read with a GET when needed ([`password`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use super::model::Model;
use crate::names;

/// The controller's watch caches.
#[derive(Clone)]
pub struct Caches {
    /// Data and Sentinel pods.
    pub pods: Store<Pod>,
    /// PVCs.
    pub pvcs: Store<PersistentVolumeClaim>,
    /// Services.
    pub services: Store<Service>,
    /// PodDisruptionBudgets.
    pub pdbs: Store<PodDisruptionBudget>,
    /// The operator's own Secrets (labelled).
    pub secrets: Store<Secret>,
    /// Every Secret's metadata.
    pub secret_meta: Store<PartialObjectMeta<Secret>>,
    /// ServiceAccounts.
    pub accounts: Store<ServiceAccount>,
    /// Roles.
    pub roles: Store<Role>,
    /// RoleBindings.
    pub bindings: Store<RoleBinding>,
    /// Leases.
    pub leases: Store<Lease>,
    /// Nodes.
    pub nodes: Store<Node>,
}

/// One cluster's children, as cached.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Data pods by name.
    pub pods: BTreeMap<String, Arc<Pod>>,
    /// Sentinel pods by name.
    pub sentinels: BTreeMap<String, Arc<Pod>>,
    /// PVCs by name.
    pub pvcs: BTreeMap<String, Arc<PersistentVolumeClaim>>,
    /// Services by name.
    pub services: BTreeMap<String, Arc<Service>>,
    /// PDBs by name.
    pub pdbs: BTreeMap<String, Arc<PodDisruptionBudget>>,
    /// The operator's Secrets of the cluster, by name.
    pub secrets: BTreeMap<String, Arc<Secret>>,
    /// resourceVersion of every Secret in the namespace, by name.
    pub secret_versions: BTreeMap<String, String>,
    /// ServiceAccount `<cluster>`.
    pub account: Option<Arc<ServiceAccount>>,
    /// Role `<cluster>`.
    pub role: Option<Arc<Role>>,
    /// RoleBinding `<cluster>`.
    pub binding: Option<Arc<RoleBinding>>,
    /// The primary Lease.
    pub lease: Option<Arc<Lease>>,
    /// Cordoned nodes.
    pub cordoned: BTreeSet<String>,
}

fn of<K>(store: &Store<K>, m: &Model) -> BTreeMap<String, Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .into_iter()
        .filter(|o| o.namespace().as_deref() == Some(m.namespace.as_str()))
        .filter(|o| o.labels().get(names::LABEL_CLUSTER) == Some(&m.name))
        .map(|o| (o.name_any(), o))
        .collect()
}

/// Whether `store` has its first complete list within `timeout`.
fn listed<K>(store: &Store<K>, timeout: Duration) -> BoxFuture<'_, bool>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    Box::pin(async move {
        matches!(
            tokio::time::timeout(timeout, store.wait_until_ready()).await,
            Ok(Ok(()))
        )
    })
}

impl Caches {
    /// Waits at most `timeout` until every cache has its first complete list; otherwise
    /// names the caches still without one (a watch the API refuses, for example while the
    /// operator's RBAC or the namespace goes away, never completes one).
    pub async fn ready(&self, timeout: Duration) -> Result<(), Vec<&'static str>> {
        let t = timeout;
        let waits = [
            ("pods", listed(&self.pods, t)),
            ("persistentvolumeclaims", listed(&self.pvcs, t)),
            ("services", listed(&self.services, t)),
            ("poddisruptionbudgets", listed(&self.pdbs, t)),
            ("secrets", listed(&self.secrets, t)),
            ("secret metadata", listed(&self.secret_meta, t)),
            ("serviceaccounts", listed(&self.accounts, t)),
            ("roles", listed(&self.roles, t)),
            ("rolebindings", listed(&self.bindings, t)),
            ("leases", listed(&self.leases, t)),
            ("nodes", listed(&self.nodes, t)),
        ];
        let (names, futures): (Vec<_>, Vec<_>) = waits.into_iter().unzip();
        let done = futures::future::join_all(futures).await;
        let missing: Vec<&'static str> = names
            .into_iter()
            .zip(done)
            .filter_map(|(n, ok)| (!ok).then_some(n))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing)
        }
    }

    /// The children of `m`.
    pub fn observe(&self, m: &Model) -> Observed {
        let all_pods = of(&self.pods, m);
        let workload = |p: &Pod| p.labels().get(names::LABEL_WORKLOAD).cloned();
        let (pods, sentinels): (BTreeMap<_, _>, BTreeMap<_, _>) = all_pods
            .into_iter()
            .filter(|(n, p)| {
                names::ordinal_of(&m.name, n).is_some()
                    || workload(p).as_deref() == Some(names::workload::SENTINEL)
            })
            .partition(|(_, p)| workload(p).as_deref() != Some(names::workload::SENTINEL));
        let own = names::instance_service_account(&m.name);
        Observed {
            pods,
            sentinels,
            pvcs: of(&self.pvcs, m),
            services: of(&self.services, m),
            pdbs: of(&self.pdbs, m),
            secrets: of(&self.secrets, m),
            secret_versions: self
                .secret_meta
                .state()
                .into_iter()
                .filter(|s| s.namespace().as_deref() == Some(m.namespace.as_str()))
                .map(|s| (s.name_any(), s.resource_version().unwrap_or_default()))
                .collect(),
            account: of(&self.accounts, m).remove(&own),
            role: of(&self.roles, m).remove(&own),
            binding: of(&self.bindings, m).remove(&own),
            lease: of(&self.leases, m).remove(&names::primary_lease(&m.name)),
            cordoned: self
                .nodes
                .state()
                .into_iter()
                .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
                .map(|n| n.name_any())
                .collect(),
        }
    }
}

/// The password in key `password` of Secret `name` (read from the API: user Secrets are not
/// cached); `None` when the Secret or the key is missing.
pub async fn password(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|s| super::build::secret::value(&s, names::KEY_PASSWORD)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;

    fn caches() -> (Caches, reflector::store::Writer<Node>) {
        let (nodes, writer) = reflector::store();
        let c = Caches {
            pods: reflector::store().0,
            pvcs: reflector::store().0,
            services: reflector::store().0,
            pdbs: reflector::store().0,
            secrets: reflector::store().0,
            secret_meta: reflector::store().0,
            accounts: reflector::store().0,
            roles: reflector::store().0,
            bindings: reflector::store().0,
            leases: reflector::store().0,
            nodes,
        };
        (c, writer)
    }

    #[tokio::test]
    async fn caches_that_never_list_do_not_hold_a_pass() {
        let (c, mut writer) = caches();
        let started = std::time::Instant::now();
        let missing = c
            .ready(Duration::from_millis(200))
            .await
            .expect_err("not ready");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(missing.len(), 11, "{missing:?}");
        // One cache listed: the others are still named.
        writer.apply_watcher_event(&kube::runtime::watcher::Event::InitDone);
        let missing = c
            .ready(Duration::from_millis(50))
            .await
            .expect_err("not ready");
        assert!(!missing.contains(&"nodes"), "{missing:?}");
        assert_eq!(missing.len(), 10);
    }
}
