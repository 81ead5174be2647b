//! API types only (no client, no IO): `redis.io/v1` RedisCluster, RedisBackup and
//! RedisScheduledBackup, field-for-field compatible with howl-cloud/redis-operator (same JSON
//! names, types, defaults, enums, bounds and printer columns), plus the few CloudNativePG-style
//! additions docs/redis.md lists under "Differences from upstream".
//!
//! Contract:
//! - [`crds`] generates every CRD through `kit::crdschema`; `cargo xtask gen` writes them to
//!   `deploy/redis/crds/`.
//! - Every rule the API server can check from the object alone is in the schema (bounds, enums,
//!   patterns, CEL `x-kubernetes-validations`, including the `oldSelf` transition rules); what
//!   needs other objects or is a warning is in [`crate::admission`].
//! - `spec` is optional at the root (as upstream's controller-gen CRDs): an object without one
//!   deserialises to the spec's `Default`, which equals what the API server would store for
//!   `spec: {}` after defaulting.

mod backup;
mod cluster;
mod scheduled_backup;

pub use backup::*;
pub use cluster::*;
pub use scheduled_backup::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "redis.io";
/// The API version.
pub const VERSION: &str = "v1";

/// Every CRD of the Redis operator, for `cargo xtask gen` and tests.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        kit::crdschema::crd::<RedisCluster>(),
        kit::crdschema::crd::<RedisBackup>(),
        kit::crdschema::crd::<RedisScheduledBackup>(),
    ]
}

/// A reference to a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectReference {
    /// Name of the referent.
    pub name: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests;
