//! API types only (no client, no IO): `redroid.isning.moe/v1alpha1` RedroidInstance and
//! RedroidTask.

mod instance;
mod task;

pub use instance::*;
pub use task::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Every CRD of the redroid operator, for `cargo xtask gen` and tests.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        kit::crdschema::crd::<RedroidInstance>(),
        kit::crdschema::crd::<RedroidTask>(),
    ]
}
