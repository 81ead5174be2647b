//! Flotilla stellar: a drop-in replacement for KubeStellar (`control.kubestellar.io/v1alpha1`)
//! together with the Open Cluster Management pieces it relies on (the work API and the
//! status add-on's WorkStatus), across real separate control planes: a workload description
//! space (WDS), an inventory and transport space (ITS) and workload execution clusters (WECs).
//!
//! - [`api`]: the control API (BindingPolicy, Binding, CustomTransform, StatusCollector,
//!   CombinedStatus) and WorkStatus.
//! - [`ocm`]: ManagedCluster, ManifestWork, AppliedManifestWork.
//! - [`names`]: the well-known labels, annotations, finalizers and namespaces.
//! - The pure decisions (selection, resolution, transforms, status) live in the
//!   `stellar-core` crate, which has no Kubernetes client.

pub mod agent;
pub mod api;
pub mod binding;
pub mod discover;
pub mod elect;
pub mod hub;
pub mod names;
pub mod ocm;
pub mod retry;
pub mod run;
mod schema;
pub mod status;
pub mod transport;
pub mod whereis;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Every CRD, for `cargo xtask gen` (deploy/stellar/crds) and tests.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut all = api::control_crds();
    all.push(api::work_status_crd());
    all.extend(ocm::hub_crds());
    all.extend(ocm::agent_crds());
    all
}
