//! Reads only: the instance's Pods, its Service, the instances sharing its data and their
//! Pods, and unfinished data-sidecar pods using its data.
//!
//! Contract: no writes. Instance Pods are those labelled with the instance name that are not
//! task pods (`component=instance`, or no component and no task label: Pods of the upstream
//! operator, so a migrated instance never gets a second Pod beside its old one). Peers come
//! from the controller's instance store when there is one, else from a namespaced list.

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;

use crate::context::Context;
use crate::crd::RedroidInstance;
use crate::names;

/// What a reconcile pass saw.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Pods backing (or having backed) this instance.
    pub pods: Vec<Pod>,
    /// The instance Service, if it exists.
    pub service: Option<Service>,
    /// Other instances in the namespace sharing this instance's writable layer.
    pub peers: Vec<RedroidInstance>,
    /// Existing instance Pods of those peers.
    pub peer_pods: Vec<Pod>,
    /// Unfinished data-sidecar task pods on this instance's data.
    pub sidecars: Vec<Pod>,
}

/// Observing failed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Listing Pods failed.
    #[error("list pods of instance {instance}: {source}")]
    ListPods {
        instance: String,
        source: kube::Error,
    },
    /// Reading the Service failed.
    #[error("get service {name}: {source}")]
    GetService { name: String, source: kube::Error },
    /// Listing instances failed.
    #[error("list instances in {namespace}: {source}")]
    ListInstances {
        namespace: String,
        source: kube::Error,
    },
}

impl kit::reconcile::ReconcileError for ObserveError {
    fn category(&self) -> &'static str {
        match self {
            ObserveError::ListPods { .. } => "list_pods",
            ObserveError::GetService { .. } => "get_service",
            ObserveError::ListInstances { .. } => "list_instances",
        }
    }
}

/// Whether `pod` is an instance Pod (not a task pod).
pub fn is_instance_pod(pod: &Pod) -> bool {
    let l = pod.labels();
    match l.get(names::COMPONENT_LABEL) {
        Some(c) => c == names::COMPONENT_INSTANCE,
        None => !l.contains_key(names::TASK_LABEL),
    }
}

fn unfinished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Observes everything one pass needs for `inst`.
pub async fn observe(
    ctx: &Context,
    store: Option<&Store<RedroidInstance>>,
    inst: &RedroidInstance,
) -> Result<Observed, ObserveError> {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let list_pods = |selector: String| {
        let api = pods_api.clone();
        let instance = name.clone();
        async move {
            api.list(&ListParams::default().labels(&selector))
                .await
                .map(|l| l.items)
                .map_err(|source| ObserveError::ListPods { instance, source })
        }
    };
    let mut pods = list_pods(format!("{}={name}", names::INSTANCE_LABEL)).await?;
    pods.retain(is_instance_pod);
    let sidecars = list_pods(format!(
        "{}={name},{}=true",
        names::INSTANCE_LABEL,
        names::SIDECAR_LABEL
    ))
    .await?;
    let sidecars = sidecars.into_iter().filter(unfinished).collect();
    let svc_name = names::service_name(&name);
    let service = Api::<Service>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&svc_name)
        .await
        .map_err(|source| ObserveError::GetService {
            name: svc_name,
            source,
        })?;
    let peers = peers(ctx, store, inst).await?;
    let peer_pods = if peers.is_empty() {
        Vec::new()
    } else {
        let names: Vec<String> = peers.iter().map(ResourceExt::name_any).collect();
        let mut pods = list_pods(format!(
            "{} in ({})",
            names::INSTANCE_LABEL,
            names.join(",")
        ))
        .await?;
        pods.retain(is_instance_pod);
        pods
    };
    Ok(Observed {
        pods,
        service,
        peers,
        peer_pods,
        sidecars,
    })
}

async fn peers(
    ctx: &Context,
    store: Option<&Store<RedroidInstance>>,
    inst: &RedroidInstance,
) -> Result<Vec<RedroidInstance>, ObserveError> {
    let ns = inst.namespace().unwrap_or_default();
    let all: Vec<RedroidInstance> = match store {
        Some(store) => store
            .state()
            .iter()
            .filter(|i| i.namespace().as_deref() == Some(&ns))
            .map(|i| (**i).clone())
            .collect(),
        None => {
            let api: Api<RedroidInstance> = Api::namespaced(ctx.client.clone(), &ns);
            let list = api.list(&ListParams::default()).await;
            list.map_err(|source| ObserveError::ListInstances {
                namespace: ns.clone(),
                source,
            })?
            .items
        }
    };
    let me = inst.name_any();
    Ok(all
        .into_iter()
        .filter(|p| p.name_any() != me && super::validate::shares_data(&p.spec, &inst.spec))
        .collect())
}
