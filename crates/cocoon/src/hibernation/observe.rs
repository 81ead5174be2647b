//! The reads of the CocoonHibernation controller: watch caches, with the API server asked
//! only where a cache could mislead.
//!
//! Contract:
//! - A pass decides on a CR that includes its own previous writes, so the phase and Ready time
//!   it compares against are current and a transition's Events cannot fire twice on a lagging
//!   cache: [`Written`] keeps the resourceVersion of this controller's last write of each CR
//!   until the cache shows exactly that version; until then [`current`] reads the CR from the
//!   API server instead of the cache. A CR this controller has not written since the cache
//!   showed its last write comes from the cache.
//! - Pods come from the controller's pod cache (what the pass reads of a pod changes only by
//!   events that trigger the pass again); a pod missing there is looked up in the API server
//!   before it is reported as a bad reference.
//! - Siblings (who else holds a VM's tag when a CR is deleted) are listed from the API server:
//!   a CR created a moment ago must keep the tag it needs.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::cache::Hibernations;
use crate::context::Context;
use crate::crd::CocoonHibernation;

/// The resourceVersion of this controller's last write of each CR (by uid), until the cache
/// shows it.
#[derive(Debug, Default)]
pub struct Written(Mutex<HashMap<String, String>>);

impl Written {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This controller wrote `cr` (the object the write returned).
    pub fn record(&self, cr: &CocoonHibernation) {
        if let (Some(uid), Some(rv)) = (cr.uid(), cr.resource_version()) {
            self.map().insert(uid, rv);
        }
    }

    /// The CR is gone.
    pub fn forget(&self, uid: &str) {
        self.map().remove(uid);
    }

    /// Whether the cache's copy `cached` may miss a write of this controller; `false` also
    /// ends the wait once it shows that write.
    pub fn cache_lags(&self, cached: &CocoonHibernation) -> bool {
        let uid = cached.uid().unwrap_or_default();
        let mut map = self.map();
        match map.get(&uid) {
            None => false,
            Some(rv) if cached.resource_version().as_ref() == Some(rv) => {
                map.remove(&uid);
                false
            }
            Some(_) => true,
        }
    }
}

/// A failed read.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Reading the CR failed.
    #[error("reading CocoonHibernation {cr}: {source}")]
    GetCr {
        /// `namespace/name`.
        cr: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading the pod failed.
    #[error("reading pod {pod}: {source}")]
    GetPod {
        /// `namespace/name`.
        pod: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The pod cache has not completed its first list.
    #[error("the pod cache is not ready (its watch cannot list pods)")]
    CacheNotReady,
    /// Listing the namespace's CRs failed.
    #[error("listing CocoonHibernations in {namespace}: {source}")]
    ListCrs {
        /// The namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ObserveError {
    /// The metric label of this failure.
    pub fn category(&self) -> &'static str {
        match self {
            ObserveError::GetCr { .. } => "get_cocoonhibernation",
            ObserveError::GetPod { .. } => "get_pod",
            ObserveError::ListCrs { .. } => "list_cocoonhibernations",
            ObserveError::CacheNotReady => "cache_not_ready",
        }
    }
}

/// The CR to decide on (see the module contract); `None` once it is gone.
pub async fn current(
    api: &Api<CocoonHibernation>,
    crs: &Hibernations,
    written: &Written,
    obj: &CocoonHibernation,
) -> Result<Option<CocoonHibernation>, ObserveError> {
    let cached = crs.get_ref(&ObjectRef::from_obj(obj));
    if let Some(cached) = &cached
        && !written.cache_lags(cached)
    {
        return Ok(Some((**cached).clone()));
    }
    let (namespace, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let fresh = api
        .get_opt(&name)
        .await
        .map_err(|source| ObserveError::GetCr {
            cr: format!("{namespace}/{name}"),
            source,
        })?;
    if let (Some(fresh), Some(cached)) = (&fresh, &cached)
        && fresh.resource_version() == cached.resource_version()
    {
        // The cache is current (past this controller's write): it serves the next pass.
        written.forget(&fresh.uid().unwrap_or_default());
    }
    Ok(fresh)
}

/// The pod `name` in `namespace` from `pods`, or from the API server when the cache has none;
/// `None` when absent (or when `name` is empty).
pub async fn pod(
    ctx: &Context,
    pods: &Store<Pod>,
    namespace: &str,
    name: &str,
) -> Result<Option<Pod>, ObserveError> {
    if name.is_empty() {
        return Ok(None);
    }
    if let Some(pod) = pods.get(&ObjectRef::new(name).within(namespace)) {
        return Ok(Some((*pod).clone()));
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    api.get_opt(name)
        .await
        .map_err(|source| ObserveError::GetPod {
            pod: format!("{namespace}/{name}"),
            source,
        })
}

/// Every CR in `namespace`.
pub async fn siblings(
    api: &Api<CocoonHibernation>,
    namespace: &str,
) -> Result<Vec<CocoonHibernation>, ObserveError> {
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|source| ObserveError::ListCrs {
            namespace: namespace.to_owned(),
            source,
        })
}
