//! OCM API types only (no client, no IO): `cluster.open-cluster-management.io/v1`
//! ManagedCluster and `work.open-cluster-management.io/v1` ManifestWork and
//! AppliedManifestWork, with OCM's names, scopes and schemas.

mod applied_manifest_work;
mod managed_cluster;
mod manifest_work;

pub use applied_manifest_work::*;
pub use managed_cluster::*;
pub use manifest_work::*;

use crate::schema::upstream_style;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The hub CRDs an ITS needs: ManagedCluster and ManifestWork.
pub fn hub_crds() -> Vec<CustomResourceDefinition> {
    vec![
        // Only a taint's `timeAdded` is `+nullable` upstream.
        upstream_style(
            kit::crdschema::crd::<ManagedCluster>(),
            &[".spec.taints[].timeAdded"],
        ),
        upstream_style(kit::crdschema::crd::<ManifestWork>(), &[]),
    ]
}

/// The CRD a WEC needs: AppliedManifestWork.
pub fn agent_crds() -> Vec<CustomResourceDefinition> {
    vec![upstream_style(
        kit::crdschema::crd::<AppliedManifestWork>(),
        &[],
    )]
}
