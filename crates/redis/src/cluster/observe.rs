//! Reads only: the watch caches the controller keeps, and one cluster's slice of them.
//!
//! Contract:
//! - Every child kind the operator writes is watched through the label `redis.io/cluster`
//!   (pods, PVCs, Services, PDBs, its own Secrets, ServiceAccounts, Roles, RoleBindings,
//!   Leases); Secrets of every name are watched by metadata only (rotation of the Secrets a
//!   cluster references, whose content the operator never caches); Nodes for cordons.
//! - [`Caches::observe`] reads nothing from the API server: a pass reads its cluster's
//!   children from the caches, which are complete (the driver waits for them at start-up).
//! - The few contents that are not cached (a user-provided auth password for the connection
//!   Secret) are read with a GET when needed ([`password`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

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

impl Caches {
    /// Waits until every cache has its first complete list.
    pub async fn ready(&self) {
        let _ = futures::join!(
            self.pods.wait_until_ready(),
            self.pvcs.wait_until_ready(),
            self.services.wait_until_ready(),
            self.pdbs.wait_until_ready(),
            self.secrets.wait_until_ready(),
            self.secret_meta.wait_until_ready(),
            self.accounts.wait_until_ready(),
            self.roles.wait_until_ready(),
            self.bindings.wait_until_ready(),
            self.leases.wait_until_ready(),
            self.nodes.wait_until_ready(),
        );
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
