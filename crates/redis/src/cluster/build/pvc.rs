//! The PVC `<cluster>-data-<ordinal>` of one instance.
//!
//! Contract: pure; labelled with the cluster and **without** an owner reference, so the data
//! outlives the RedisCluster and a scale-down (upstream's policy: a scaled-down instance's
//! PVC is kept, reported in `status.danglingPVC`, and reused when the cluster scales back up,
//! where the instance resynchronises from the primary).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::model::Model;
use crate::names;

/// The desired PVC of `ordinal`.
pub fn pvc(m: &Model, ordinal: i32) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names::pvc_name(&m.name, ordinal)),
            namespace: Some(m.namespace.clone()),
            labels: Some(m.cluster_labels()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: m.spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    m.spec.storage.size.clone(),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::build::fixtures::model;

    #[test]
    fn a_pvc_is_labelled_sized_and_not_owned() {
        let m = model(serde_json::json!({"storage": {"size": "2Gi", "storageClassName": "fast"}}));
        let p = pvc(&m, 1);
        assert_eq!(p.metadata.name.as_deref(), Some("demo-data-1"));
        assert!(p.metadata.owner_references.is_none());
        assert_eq!(
            p.metadata.labels.clone().expect("labels")["redis.io/cluster"],
            "demo"
        );
        let spec = p.spec.expect("spec");
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        let req = spec.resources.and_then(|r| r.requests).expect("requests");
        assert_eq!(req["storage"].0, "2Gi");
    }
}
