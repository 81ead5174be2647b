//! Pure builders: the validated [`Model`] to the desired children, one file per kind.
//!
//! Contract: no client, no clock, no randomness (the generated secrets take their random
//! material as an argument); the same model and settings always give byte-identical objects,
//! so hashes are stable across passes and operator restarts. Everything that should go with
//! the cluster carries its controller owner reference; PVCs do not (data outlives the
//! RedisCluster, as upstream).

pub mod pdb;
pub mod pod;
pub mod pvc;
pub mod rbac;
pub mod secret;
pub mod sentinel;
pub mod service;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::model::Model;

/// What the operator process contributes to the pod template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSettings {
    /// The operator image the `copy-manager` init container runs (`RELATED_IMAGE_OPERATOR`).
    pub operator_image: String,
    /// Tolerate and select the plane's process-backed nodes (tests only; never by default).
    pub process_nodes: bool,
}

/// Metadata of a namespaced child named `name`, labelled with the cluster (plus `labels`) and
/// owned by it.
pub fn owned_meta(m: &Model, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    let mut all = m.cluster_labels();
    all.extend(labels);
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(m.namespace.clone()),
        labels: Some(all),
        owner_references: Some(vec![m.owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// Hex SHA-256 of `bytes`, shortened to 16 characters (hash annotations).
pub fn short_hash(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
pub(crate) mod fixtures {
    use crate::cluster::model::Model;
    use crate::crd::RedisCluster;

    /// A validated cluster from a spec (as JSON) and annotations.
    pub fn model(spec: serde_json::Value) -> Model {
        model_with(spec, serde_json::json!({}), serde_json::json!({}))
    }

    /// A validated cluster from a spec, annotations and status.
    pub fn model_with(
        spec: serde_json::Value,
        annotations: serde_json::Value,
        status: serde_json::Value,
    ) -> Model {
        let rc: RedisCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "u-1", "generation": 2,
                "annotations": annotations},
            "spec": spec,
            "status": status,
        }))
        .expect("cluster");
        Model::of(&rc).expect("valid")
    }
}
