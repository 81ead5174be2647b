//! The instance Service: named like the instance (or derived from it, see
//! [`names::service_name`]), selecting only its instance Pod
//! (`component=instance`, so task pods never match), one port `adb`.
//!
//! Contract: [`service`] is pure and is applied with server-side apply, so removing an
//! annotation from `spec.service` removes it from the Service while foreign annotations stay.
//! [`up_to_date`] says whether the live Service already carries everything we would apply,
//! and no annotation we applied earlier that the spec has since dropped, so a converged
//! instance makes no write.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;

use super::Model;
use crate::names;

/// The desired Service.
pub fn service(model: &Model) -> Service {
    let svc = model.spec.service.clone().unwrap_or_default();
    let labels = BTreeMap::from([
        (
            names::MANAGED_BY_LABEL.to_string(),
            names::MANAGED_BY.to_string(),
        ),
        (
            names::INSTANCE_LABEL.into(),
            names::instance_label(&model.name),
        ),
    ]);
    let selector = BTreeMap::from([
        (
            names::INSTANCE_LABEL.to_string(),
            names::instance_label(&model.name),
        ),
        (
            names::COMPONENT_LABEL.into(),
            names::COMPONENT_INSTANCE.into(),
        ),
    ]);
    let port = ServicePort {
        name: Some("adb".into()),
        port: model.spec.adb_port,
        target_port: Some(IntOrString::Int(model.spec.adb_port)),
        protocol: Some("TCP".into()),
        node_port: svc.node_port.filter(|p| *p > 0),
        ..ServicePort::default()
    };
    Service {
        metadata: ObjectMeta {
            name: Some(names::service_name(&model.name)),
            namespace: Some(model.namespace.clone()),
            labels: Some(labels),
            annotations: (!svc.annotations.is_empty()).then_some(svc.annotations),
            owner_references: Some(vec![model.owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some(svc.type_.as_str().into()),
            selector: Some(selector),
            ports: Some(vec![port]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Annotation keys our field manager applied on the live Service (from managedFields).
pub fn applied_annotations(live: &Service) -> BTreeSet<String> {
    let entries = live.metadata.managed_fields.iter().flatten();
    let ours = entries.filter(|m| {
        m.manager.as_deref() == Some(names::FIELD_MANAGER)
            && m.operation.as_deref() == Some("Apply")
    });
    ours.filter_map(|m| m.fields_v1.as_ref())
        .filter_map(|f| {
            f.0.get("f:metadata")?
                .get("f:annotations")?
                .as_object()
                .cloned()
        })
        .flat_map(|o| {
            o.into_iter()
                .filter_map(|(k, _)| k.strip_prefix("f:").map(str::to_string))
        })
        .collect()
}

fn contains(
    live: &Option<BTreeMap<String, String>>,
    want: &Option<BTreeMap<String, String>>,
) -> bool {
    let live = live.clone().unwrap_or_default();
    want.iter().flatten().all(|(k, v)| live.get(k) == Some(v))
}

/// Whether `live` already matches `desired` (see the module docs).
pub fn up_to_date(live: &Service, desired: &Service) -> bool {
    let (lm, dm) = (&live.metadata, &desired.metadata);
    let wanted: BTreeSet<String> = dm
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .collect();
    let owned = lm.owner_references == dm.owner_references;
    let meta = owned
        && contains(&lm.labels, &dm.labels)
        && contains(&lm.annotations, &dm.annotations)
        && applied_annotations(live) == wanted;
    let (Some(ls), Some(ds)) = (&live.spec, &desired.spec) else {
        return false;
    };
    let ports = match (ls.ports.as_deref(), ds.ports.as_deref()) {
        (Some([l]), Some([d])) => {
            l.name == d.name
                && l.port == d.port
                && l.target_port == d.target_port
                && (d.node_port.is_none() || l.node_port == d.node_port)
        }
        _ => false,
    };
    meta && ports && ls.type_ == ds.type_ && ls.selector == ds.selector
}
