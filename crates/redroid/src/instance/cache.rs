//! The instance controller's watch caches: what is cached of each object, and the indexes
//! every pass and every wake-up looks things up by, so no pass scans or copies a cache.
//!
//! Contract:
//! - Three indexed reflectors ([`kit::index`]): instances, Pods labelled with an instance
//!   (instance Pods, upstream's Pods, task pods and data sidecars) and the operator's
//!   Services. Each index is kept by the same watch events as its store.
//! - What is cached is only what the controller reads ([`slim_pod`], [`slim_service`],
//!   [`slim_instance`]): no managedFields (except the annotations of our own apply entry on
//!   Services, which say which annotations we applied); Pods are decoded into
//!   [`CachedPod`] (names, data volumes and mounts, phase, IP, message, conditions and exit
//!   states), never into a full `Pod`.
//! - Keys ([`Key`]): the data an object uses ([`usage_keys`]: the writable layer, the lower
//!   layer, the base written in baseMode), the instance label, the Pod's controller owner,
//!   and, for instances, whether one is held back by another's data. [`conflict_keys`] are the
//!   keys under which every object whose data conflicts with a given use is found, so peers,
//!   Pods on conflicting data and instances to wake are lookups, never scans.

use k8s_openapi::api::core::v1::Service;
use kit::index::Indexed;
use kube::ResourceExt;

use super::cached_pod::CachedPod;
use crate::crd::RedroidInstance;
use crate::data::Usage;
use crate::names;

/// An index key (see the module docs).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Key {
    /// Overlays writing layer `<diff>/<index>` in namespace `ns`.
    Layer {
        /// Namespace.
        ns: String,
        /// The diff PVC.
        diff: String,
        /// The layer's index.
        index: i32,
    },
    /// Overlays whose read-only lower layer is the shared PVC `base`.
    Lower {
        /// Namespace.
        ns: String,
        /// The shared PVC.
        base: String,
    },
    /// baseMode users writing the shared PVC `base`.
    Writer {
        /// Namespace.
        ns: String,
        /// The shared PVC.
        base: String,
    },
    /// The value of the instance label: a Pod's, or the one an instance's Pods carry.
    Label {
        /// Namespace.
        ns: String,
        /// The label value ([`names::instance_label`]).
        label: String,
    },
    /// Pods whose controller owner has this uid.
    Owner(String),
    /// Instances of namespace `ns` held back by another's data.
    Blocked {
        /// Namespace.
        ns: String,
    },
    /// Every instance held back by another's data, in any namespace.
    AnyBlocked,
}

/// The instance cache.
pub type Instances = Indexed<RedroidInstance, Key>;
/// The Pod cache.
pub type Pods = Indexed<CachedPod, Key>;
/// The Service cache.
pub type Services = Indexed<Service, Key>;

/// The keys a use of data is found under.
pub fn usage_keys(ns: &str, usage: &Usage) -> Vec<Key> {
    let ns = ns.to_owned();
    let base = usage.base.clone();
    match &usage.layer {
        Some((diff, index)) => vec![
            Key::Layer {
                ns: ns.clone(),
                diff: diff.clone(),
                index: *index,
            },
            Key::Lower { ns, base },
        ],
        None => vec![Key::Writer { ns, base }],
    }
}

/// The keys under which every use conflicting with `usage` is found ([`Usage::conflict`]):
/// an overlay conflicts with the same layer and with baseMode on its lower layer; baseMode
/// conflicts with baseMode and with every overlay on the same shared PVC.
pub fn conflict_keys(ns: &str, usage: &Usage) -> Vec<Key> {
    let ns = ns.to_owned();
    let base = usage.base.clone();
    match &usage.layer {
        Some((diff, index)) => vec![
            Key::Layer {
                ns: ns.clone(),
                diff: diff.clone(),
                index: *index,
            },
            Key::Writer { ns, base },
        ],
        None => vec![
            Key::Writer {
                ns: ns.clone(),
                base: base.clone(),
            },
            Key::Lower { ns, base },
        ],
    }
}

/// The keys of an instance.
pub fn instance_keys(inst: &RedroidInstance) -> Vec<Key> {
    let ns = inst.namespace().unwrap_or_default();
    let mut keys = usage_keys(&ns, &Usage::of_spec(&inst.spec));
    keys.push(Key::Label {
        ns: ns.clone(),
        label: names::instance_label(&inst.name_any()),
    });
    if super::blocked(inst) {
        keys.push(Key::Blocked { ns });
        keys.push(Key::AnyBlocked);
    }
    keys
}

/// The keys of a Pod.
pub fn pod_keys(pod: &CachedPod) -> Vec<Key> {
    let ns = pod.namespace().unwrap_or_default();
    let mut keys = Usage::of_cached(pod).map_or_else(Vec::new, |u| usage_keys(&ns, &u));
    if let Some(label) = pod.labels().get(names::INSTANCE_LABEL) {
        keys.push(Key::Label {
            ns,
            label: label.clone(),
        });
    }
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    if let Some(o) = owner {
        keys.push(Key::Owner(o.uid.clone()));
    }
    keys
}

/// What of an instance the controller reads: everything but managedFields and kubectl's
/// copy of the last applied manifest.
pub fn slim_instance(inst: &mut RedroidInstance) {
    inst.managed_fields_mut().clear();
    if let Some(a) = inst.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// What of a Pod the controller reads, beyond what [`CachedPod`] decodes at all: no
/// managedFields, of the volumes only the data volumes, of the mounts only the data mounts.
pub fn slim_pod(pod: &mut CachedPod) {
    pod.managed_fields_mut().clear();
    if let Some(spec) = pod.spec.as_mut() {
        let data = [crate::data::DATA_BASE_VOLUME, crate::data::DATA_DIFF_VOLUME];
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(|v| data.contains(&v.name.as_str()));
        }
        let containers = spec.init_containers.iter_mut().flatten();
        for c in containers.chain(spec.containers.iter_mut()) {
            if let Some(mounts) = c.volume_mounts.as_mut() {
                mounts.retain(|m| m.name == crate::data::DATA_DIFF_VOLUME);
            }
        }
    }
}

/// What of a Service the controller reads ([`super::build::service::up_to_date`]): metadata
/// with only our own apply entry of managedFields, and of its field set only the annotations;
/// the type, selector and ports.
pub fn slim_service(svc: &mut Service) {
    if let Some(fields) = svc.metadata.managed_fields.as_mut() {
        fields.retain(|m| {
            m.manager.as_deref() == Some(names::FIELD_MANAGER)
                && m.operation.as_deref() == Some("Apply")
        });
        // Of that entry's field set, only the annotations are read: the rest (ports,
        // selector, labels, owner) is a tree of maps costing kilobytes per Service.
        for m in fields.iter_mut() {
            let annotations = m
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:metadata")?.get("f:annotations").cloned());
            m.fields_v1 = annotations.map(|a| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                    serde_json::json!({"f:metadata": {"f:annotations": a}}),
                )
            });
        }
    }
    if let Some(spec) = svc.spec.take() {
        svc.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            type_: spec.type_,
            selector: spec.selector,
            ports: spec.ports,
            ..Default::default()
        });
    }
    svc.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    // A cached Service keeps of our apply entry only what says which annotations we applied,
    // and those still read back the same.
    #[test]
    fn a_cached_service_keeps_only_the_annotations_of_our_apply_entry() {
        let mut svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "annotations": {"a": "1", "b": "2"}, "managedFields": [
                {"manager": names::FIELD_MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:a": {}}, "f:labels": {"f:x": {}}},
                              "f:spec": {"f:ports": {"k:{\"port\":5555}": {".": {}, "f:port": {}}}}}},
                {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:b": {}}}}}
            ]},
            "spec": {"type": "ClusterIP", "clusterIP": "127.0.0.10", "selector": {"x": "y"},
                     "ports": [{"port": 5555}]},
            "status": {"loadBalancer": {}}
        }))
        .expect("service");
        let before = crate::instance::build::service::applied_annotations(&svc);
        slim_service(&mut svc);
        let fields = svc.metadata.managed_fields.as_ref().expect("fields");
        assert_eq!(fields.len(), 1);
        assert_eq!(
            fields[0].fields_v1.as_ref().map(|f| f.0.clone()),
            Some(serde_json::json!({"f:metadata": {"f:annotations": {"f:a": {}}}}))
        );
        assert_eq!(
            crate::instance::build::service::applied_annotations(&svc),
            before
        );
        let spec = svc.spec.as_ref().expect("spec");
        assert_eq!(spec.cluster_ip, None);
        assert_eq!(spec.ports.as_ref().map(Vec::len), Some(1));
        assert!(svc.status.is_none());
    }
}
