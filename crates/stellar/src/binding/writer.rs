//! The binding controller's only writer: one pass over every BindingPolicy, from the indexes.
//!
//! Contract of [`pass`]:
//! - Does nothing until every watch has listed once ([`Index::ready`]), so a Binding is never
//!   written from a partial view.
//! - A live policy gets the finalizer `bindingpolicy.kubestellar.io/kscontroller`, and its
//!   Binding (same name, owned by the policy) is created or replaced with the resolution's
//!   spec only when the stored spec (or its owner) differs: a pass with nothing new writes nothing.
//! - The policy's status (`observedGeneration`, `errors` from the singleton rule plus the
//!   Binding's errors, conditions copied from the Binding) is written only when it differs.
//! - A policy being deleted: its Binding is deleted explicitly (its transport finalizer then
//!   holds it until the ManifestWorks are gone), then the policy's finalizer is removed.
//!   A Binding whose policy is gone is deleted.
//! - Errors are per policy: one failing policy does not stop the others; the pass reports
//!   whether anything failed so the caller retries.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use stellar_core::matching::Clause;
use stellar_core::resolve::{Policy, Resolution, binding_spec, resolve, singleton_error};
use stellar_core::selector::LabelSelector;

use super::index::Index;
use crate::api::{Binding, BindingPolicy, BindingPolicyStatus, BindingSpec};
use crate::names;

/// Field manager of the binding controller's writes.
pub const FIELD_MANAGER: &str = "binding-controller";

/// What a pass reads and writes.
pub struct Ctx {
    /// The WDS.
    pub wds: Client,
    /// The indexes.
    pub index: Arc<Mutex<Index>>,
    /// BindingPolicies.
    pub policies: Store<BindingPolicy>,
    /// Bindings.
    pub bindings: Store<Binding>,
}

/// A write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Adding or removing the policy finalizer.
    #[error("finalizer of BindingPolicy {policy}: {source}")]
    Finalizer {
        /// The policy.
        policy: String,
        /// The API error.
        source: kube::Error,
    },
    /// Applying or deleting a Binding.
    #[error("Binding {binding}: {source}")]
    Binding {
        /// The Binding.
        binding: String,
        /// The API error.
        source: kube::Error,
    },
    /// Writing a policy's status.
    #[error("status of BindingPolicy {policy}: {source}")]
    Status {
        /// The policy.
        policy: String,
        /// The API error.
        source: kube::Error,
    },
}

/// The resolution inputs of a policy (its selectors and clauses, in core's types; the API's
/// and core's are the same JSON).
pub fn policy_input(p: &BindingPolicy) -> Policy {
    let selectors: Vec<LabelSelector> =
        serde_json::from_value(json!(p.spec.cluster_selectors)).unwrap_or_default();
    let clauses: Vec<Clause> = serde_json::from_value(json!(p.spec.downsync)).unwrap_or_default();
    Policy {
        cluster_selectors: selectors,
        clauses,
    }
}

/// One pass; `Ok(false)` when the indexes are not ready yet.
pub async fn pass(ctx: &Ctx) -> Result<bool, Vec<WriteError>> {
    let (resolutions, live) = {
        let ix = ctx.index.lock().expect("index lock");
        if !ix.ready() {
            return Ok(false);
        }
        let namespaces = ix.namespaces();
        let mut resolutions = BTreeMap::new();
        let mut live = Vec::new();
        for p in ctx.policies.state() {
            if p.meta().deletion_timestamp.is_some() {
                continue;
            }
            let res = resolve(&policy_input(&p), &ix.clusters, &namespaces, &ix.objects);
            resolutions.insert(p.name_any(), res);
            live.push(p);
        }
        (resolutions, live)
    };
    let mut errors = Vec::new();
    for p in ctx.policies.state() {
        if p.meta().deletion_timestamp.is_some()
            && let Err(e) = retire(ctx, &p).await
        {
            errors.push(e);
        }
    }
    for p in live {
        if let Err(e) = sync_policy(ctx, &p, &resolutions).await {
            errors.push(e);
        }
    }
    for b in ctx.bindings.state() {
        let name = b.name_any();
        let orphan = ctx.policies.state().iter().all(|p| p.name_any() != name);
        if orphan
            && b.meta().deletion_timestamp.is_none()
            && let Err(e) = delete_binding(ctx, &name).await
        {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Ok(true)
    } else {
        Err(errors)
    }
}

async fn sync_policy(
    ctx: &Ctx,
    p: &BindingPolicy,
    resolutions: &BTreeMap<String, Resolution>,
) -> Result<(), WriteError> {
    let name = p.name_any();
    let policies: Api<BindingPolicy> = Api::all(ctx.wds.clone());
    kit::finalizers::add(&policies, p, names::BINDING_POLICY_FINALIZER)
        .await
        .map_err(|source| WriteError::Finalizer {
            policy: name.clone(),
            source,
        })?;
    let res = resolutions.get(&name).cloned().unwrap_or_default();
    let spec: BindingSpec =
        serde_json::from_value(binding_spec(&res)).expect("core's Binding spec is the API's");
    let stored = ctx
        .bindings
        .get(&kube::runtime::reflector::ObjectRef::new(&name));
    let owned = stored.as_ref().is_some_and(|b| {
        b.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == p.uid().as_ref())
    });
    if stored.as_ref().map(|b| &b.spec) != Some(&spec) || !owned {
        apply_binding(ctx, p, stored.as_deref(), &spec).await?;
    }
    let binding_status = stored
        .as_ref()
        .and_then(|b| b.status.clone())
        .unwrap_or_default();
    let mut errs: Vec<String> = singleton_error(&name, resolutions).into_iter().collect();
    errs.extend(binding_status.errors.iter().cloned());
    let status = BindingPolicyStatus {
        conditions: binding_status.conditions.clone(),
        observed_generation: p.meta().generation.unwrap_or_default(),
        errors: errs,
    };
    kit::status::patch_status_if_changed(&policies, p, &status, FIELD_MANAGER)
        .await
        .map_err(|source| WriteError::Status {
            policy: name,
            source,
        })?;
    Ok(())
}

// Create or replace (not server-side apply: applying an empty `workload` after a non-empty
// one makes the apply machinery send `workload: null`, which the schema rejects).
async fn apply_binding(
    ctx: &Ctx,
    p: &BindingPolicy,
    stored: Option<&Binding>,
    spec: &BindingSpec,
) -> Result<(), WriteError> {
    let name = p.name_any();
    let owner = OwnerReference {
        api_version: "control.kubestellar.io/v1alpha1".into(),
        kind: "BindingPolicy".into(),
        name: name.clone(),
        uid: p.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(false),
    };
    let bindings: Api<Binding> = Api::all(ctx.wds.clone());
    let result = match stored {
        Some(b) => {
            let mut b = b.clone();
            b.spec = spec.clone();
            b.metadata.managed_fields = None;
            let mut owners: Vec<OwnerReference> = b
                .owner_references()
                .iter()
                .filter(|o| o.kind != "BindingPolicy")
                .cloned()
                .collect();
            owners.push(owner);
            b.metadata.owner_references = Some(owners);
            bindings.replace(&name, &PostParams::default(), &b).await
        }
        None => {
            let mut b = Binding::new(&name, spec.clone());
            b.metadata.owner_references = Some(vec![owner]);
            bindings.create(&PostParams::default(), &b).await
        }
    };
    result.map_err(|source| WriteError::Binding {
        binding: name.clone(),
        source,
    })?;
    tracing::info!(binding = %name, "wrote Binding");
    Ok(())
}

async fn delete_binding(ctx: &Ctx, name: &str) -> Result<(), WriteError> {
    let bindings: Api<Binding> = Api::all(ctx.wds.clone());
    match bindings.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(binding = %name, "deleted Binding");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(WriteError::Binding {
            binding: name.to_owned(),
            source,
        }),
    }
}

async fn retire(ctx: &Ctx, p: &BindingPolicy) -> Result<(), WriteError> {
    let name = p.name_any();
    let exists = ctx
        .bindings
        .get(&kube::runtime::reflector::ObjectRef::new(&name))
        .is_some_and(|b| b.meta().deletion_timestamp.is_none());
    if exists {
        delete_binding(ctx, &name).await?;
    }
    let policies: Api<BindingPolicy> = Api::all(ctx.wds.clone());
    kit::finalizers::remove(&policies, p, names::BINDING_POLICY_FINALIZER)
        .await
        .map_err(|source| WriteError::Finalizer {
            policy: name,
            source,
        })?;
    Ok(())
}
