//! The reads of the CocoonHibernation controller, all straight from the API server.
//!
//! Contract: a pass decides on a fresh read of its CR (not the watch cache), so the phase
//! and Ready time it compares against include its own previous write, and a transition's
//! Events cannot fire twice on a lagging cache. Pods and sibling CRs are read the same way.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::context::Context;
use crate::crd::CocoonHibernation;

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
        }
    }
}

/// The CR as the API server has it now; `None` once it is gone.
pub async fn current(
    api: &Api<CocoonHibernation>,
    namespace: &str,
    name: &str,
) -> Result<Option<CocoonHibernation>, ObserveError> {
    api.get_opt(name)
        .await
        .map_err(|source| ObserveError::GetCr {
            cr: format!("{namespace}/{name}"),
            source,
        })
}

/// The pod `name` in `namespace`; `None` when absent (or when `name` is empty).
pub async fn pod(ctx: &Context, namespace: &str, name: &str) -> Result<Option<Pod>, ObserveError> {
    if name.is_empty() {
        return Ok(None);
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
