//! API types only (no client, no IO): `apps.foundationdb.org/v1beta2` FoundationDBCluster
//! (`fdb`), FoundationDBBackup (`fdbbackup`) and FoundationDBRestore (`fdbrestore`), field for
//! field compatible with FoundationDB/fdb-kubernetes-operator v2: the same JSON names, types,
//! CRD-level defaults, enums, bounds, patterns and printer columns, so existing manifests apply
//! unchanged.
//!
//! Contract:
//! - [`crds`] generates every CRD through `kit::crdschema`, then narrows every embedded
//!   `ObjectMeta` (pod templates, claim templates, the config map, the backup deployment's
//!   metadata) to the five fields upstream's CRDs keep (`name`, `namespace`, `labels`,
//!   `annotations`, `finalizers`), as controller-gen's `generateEmbeddedObjectMeta` does.
//! - Effective defaults (what upstream's Go getters return for an unset field) are methods
//!   beside the types, never written back into the object: an object round-trips unchanged.
//! - `spec` is optional at the root, as in upstream's CRDs.

mod address;
mod backup;
mod cluster;
mod cluster_defaults;
mod cluster_status;
mod common;
mod database;
mod process;
mod restore;
mod version;

pub use address::*;
pub use backup::*;
pub use cluster::*;
pub use cluster_defaults::*;
pub use cluster_status::*;
pub use common::*;
pub use database::*;
pub use process::*;
pub use restore::*;
pub use version::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};

/// The API group.
pub const GROUP: &str = "apps.foundationdb.org";
/// The API version.
pub const VERSION: &str = "v1beta2";
/// The upstream release whose API these types match (CRD annotation `foundationdb.org/release`).
pub const UPSTREAM_RELEASE: &str = "v2.33.0";

/// Every CRD of the FoundationDB operator, for `cargo xtask gen` and tests.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        kit::crdschema::crd::<FoundationDBCluster>(),
        kit::crdschema::crd::<FoundationDBBackup>(),
        kit::crdschema::crd::<FoundationDBRestore>(),
    ]
    .into_iter()
    .map(finish)
    .collect()
}

fn finish(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("foundationdb.org/release".into(), UPSTREAM_RELEASE.into());
    for v in &mut crd.spec.versions {
        if let Some(root) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            for part in ["spec", "status"] {
                if let Some(p) = root.properties.as_mut().and_then(|p| p.get_mut(part)) {
                    narrow_embedded_metadata(p);
                }
            }
        }
    }
    crd
}

// Replaces the schema of every embedded object's `metadata` below `node` with upstream's
// five-field form. An embedded object is one whose properties hold `metadata` beside `spec`,
// `data` or `binaryData` (a pod or claim template, a config map), or the backup's
// `backupDeploymentMetadata` itself.
fn narrow_embedded_metadata(node: &mut JSONSchemaProps) {
    default_list_map_protocols(node);
    if let Some(props) = node.properties.as_mut() {
        let embedded = props.contains_key("metadata")
            && ["spec", "data", "binaryData"]
                .iter()
                .any(|k| props.contains_key(*k));
        for (name, child) in props.iter_mut() {
            if (embedded && name == "metadata") || name == "backupDeploymentMetadata" {
                let description = child.description.take();
                *child = embedded_object_meta();
                child.description = description;
            } else {
                narrow_embedded_metadata(child);
            }
        }
    }
    if let Some(
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items),
    ) = node.items.as_mut()
    {
        narrow_embedded_metadata(items);
    }
    if let Some(
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool::Schema(extra),
    ) = node.additional_properties.as_mut()
    {
        narrow_embedded_metadata(extra);
    }
}

// A list keyed by `protocol` (a container's `ports`) needs the key defaulted, as Kubernetes'
// own schema (`TCP`) and controller-gen have it; the API server refuses the CRD otherwise.
fn default_list_map_protocols(node: &mut JSONSchemaProps) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        JSON, JSONSchemaPropsOrArray,
    };
    let keyed = node
        .x_kubernetes_list_map_keys
        .as_ref()
        .is_some_and(|keys| keys.iter().any(|k| k == "protocol"));
    if !keyed {
        return;
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = node.items.as_mut()
        && let Some(protocol) = items
            .properties
            .as_mut()
            .and_then(|p| p.get_mut("protocol"))
        && protocol.default.is_none()
    {
        protocol.default = Some(JSON(serde_json::json!("TCP")));
    }
}

fn embedded_object_meta() -> JSONSchemaProps {
    serde_json::from_value(serde_json::json!({
        "type": "object",
        "properties": {
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "name": {"type": "string"},
            "namespace": {"type": "string"},
        },
    }))
    .expect("a static schema")
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

#[cfg(test)]
mod tests;
