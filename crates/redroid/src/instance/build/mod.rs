//! Pure builders: the validated instance model to its desired children, one file per kind.
//!
//! Contract: no client, no clock; the same model always yields byte-identical objects, so the
//! Pod template hash is stable across passes and operator restarts.

pub mod pod;
pub mod service;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::crd::{RedroidInstance, RedroidInstanceSpec};

/// What the builders need, taken from a validated instance.
#[derive(Clone, Debug)]
pub struct Model<'a> {
    /// Instance name.
    pub name: String,
    /// Instance namespace.
    pub namespace: String,
    /// Instance UID (part of the Pod name).
    pub uid: String,
    /// The spec.
    pub spec: &'a RedroidInstanceSpec,
    /// Controller owner reference to the instance.
    pub owner: OwnerReference,
    /// The operator's default kmsg-tools image.
    pub default_kmsg_image: &'a str,
}

impl<'a> Model<'a> {
    /// The model of `inst`; `None` if the object lacks a name, namespace or uid.
    pub fn new(inst: &'a RedroidInstance, default_kmsg_image: &'a str) -> Option<Self> {
        Some(Model {
            name: inst.meta().name.clone()?,
            namespace: inst.namespace()?,
            uid: inst.uid()?,
            spec: &inst.spec,
            owner: inst.controller_owner_ref(&())?,
            default_kmsg_image,
        })
    }
}
