//! Reads only: the instance's Pods, its Service, the instances whose data conflict with its
//! own, other Pods that may use conflicting data, and unfinished data-sidecar pods using its
//! data.
//!
//! Contract: no writes. Instance Pods are those labelled with the instance name that are not
//! task pods (`component=instance`, or no component and no task label: Pods of the upstream
//! operator, so a migrated instance never gets a second Pod beside its old one).
//!
//! Where the reads come from: with [`Caches`] (the running controller), the instance's Pods,
//! its data-sidecar pods, its Service and its peers come from the controller's watch caches,
//! making no request; without (tests, tools), from the API. The caches may lag the API by a
//! few events, which is safe here because every write they lead to is idempotent: the
//! instance Pod's name is deterministic, so creating a Pod the cache has not seen yet fails
//! with AlreadyExists and counts as "already there" (see `apply::pods`); deleting a Pod that
//! is already gone is a 404 and counts as done; the Service is server-side applied, so a
//! stale or missing cached copy costs at most one redundant apply. Every such write causes a
//! watch event that triggers another pass over the caught-up cache. The Pods of peers are the
//! one exception, always listed from the API (only when there are peers): the conflict rule
//! forbids two Pods on conflicting data, and a peer's Pod created a moment ago must not be
//! missed. Reconciles of instances whose data conflict never overlap (see `super::LayerLocks`),
//! so that list sees every Pod a peer's earlier pass created. Pods of instances that are no
//! longer peers (deleted, or changed their data) come from the cache, chosen by the data their
//! volumes mount: they were created long before and are still seen until they are gone.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::context::Context;
use crate::crd::RedroidInstance;
use crate::data::Usage;
use crate::names;

/// The controller's watch caches: instances, Pods carrying the instance label (instance,
/// upstream and task pods) and the operator's Services.
#[derive(Clone)]
pub struct Caches {
    /// Every RedroidInstance in scope.
    pub instances: Store<RedroidInstance>,
    /// Pods labelled with [`names::INSTANCE_LABEL`].
    pub pods: Store<Pod>,
    /// Services labelled `managed-by`; ours are, since every apply sets the label.
    pub services: Store<Service>,
    synced: Arc<tokio::sync::OnceCell<()>>,
}

impl Caches {
    /// Caches over these stores.
    pub fn new(
        instances: Store<RedroidInstance>,
        pods: Store<Pod>,
        services: Store<Service>,
    ) -> Self {
        Self {
            instances,
            pods,
            services,
            synced: Arc::default(),
        }
    }

    /// Waits until every cache has seen its first full list, so nothing is missed at start-up.
    ///
    /// One pass waits on the stores and the others wait on it: kube-runtime's
    /// `Store::wait_until_ready` wakes only the waiter that polled it last, so passes waiting
    /// on it side by side at start-up could wait forever (kube-runtime 5's `DelayedInit` keeps
    /// one waker). The instance store is always ready before any pass runs (the controller
    /// holds passes until it is), so it never has a second waiter either.
    pub async fn ready(&self) {
        self.synced
            .get_or_init(|| async {
                let _ = self.instances.wait_until_ready().await;
                let _ = self.pods.wait_until_ready().await;
                let _ = self.services.wait_until_ready().await;
            })
            .await;
    }

    fn pods_in(&self, ns: &str) -> Vec<Pod> {
        self.pods
            .state()
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns))
            .map(|p| (**p).clone())
            .collect()
    }

    fn service(&self, ns: &str, name: &str) -> Option<Service> {
        let key = ObjectRef::new(name).within(ns);
        self.services.get(&key).map(|s| (*s).clone())
    }
}

/// What a reconcile pass saw.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Pods backing (or having backed) this instance.
    pub pods: Vec<Pod>,
    /// The instance Service, if it exists.
    pub service: Option<Service>,
    /// Other instances in the namespace whose data conflict with this instance's.
    pub peers: Vec<RedroidInstance>,
    /// Instance Pods of those peers, and other instances' instance Pods and unfinished
    /// data-sidecar pods whose volumes use conflicting data.
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

/// Whether `pod` is a task pod running redroid on an instance's data.
pub fn is_sidecar(pod: &Pod) -> bool {
    pod.labels().get(names::SIDECAR_LABEL).map(String::as_str) == Some("true")
}

/// Observes everything one pass needs for `inst`.
pub async fn observe(
    ctx: &Context,
    caches: Option<&Caches>,
    inst: &RedroidInstance,
) -> Result<Observed, ObserveError> {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let (labelled, service) = match caches {
        Some(c) => (c.pods_in(&ns), c.service(&ns, &names::service_name(&name))),
        None => {
            let pods = list_pods(ctx, &ns, &name, names::INSTANCE_LABEL).await?;
            (pods, get_service(ctx, &ns, &name).await?)
        }
    };
    let me = names::instance_label(&name);
    let (own, others): (Vec<Pod>, Vec<Pod>) = labelled
        .into_iter()
        .partition(|p| p.labels().get(names::INSTANCE_LABEL) == Some(&me));
    let (sidecars, mut pods): (Vec<Pod>, Vec<Pod>) = own.into_iter().partition(is_sidecar);
    pods.retain(is_instance_pod);
    let sidecars = sidecars.into_iter().filter(unfinished).collect();
    let peers = peers(ctx, caches.map(|c| &c.instances), inst).await?;
    let mine = Usage::of_spec(&inst.spec);
    let peer_labels: Vec<String> = peers
        .iter()
        .map(|p| names::instance_label(&p.name_any()))
        .collect();
    let relevant = |p: &Pod| {
        let label = p.labels().get(names::INSTANCE_LABEL);
        let holds = is_instance_pod(p) || (is_sidecar(p) && unfinished(p));
        let conflicts = Usage::of_pod(p).is_some_and(|u| mine.conflict(&u).is_some());
        holds && (conflicts || label.is_some_and(|l| peer_labels.contains(l)))
    };
    let mut peer_pods: Vec<Pod> = others.into_iter().filter(|p| relevant(p)).collect();
    if caches.is_some() && !peers.is_empty() {
        // Peers' Pods fresh from the API: one created a moment ago must not be missed.
        let selector = format!("{} in ({})", names::INSTANCE_LABEL, peer_labels.join(","));
        let fresh = list_pods(ctx, &ns, &name, &selector).await?;
        peer_pods.retain(|p| !fresh.iter().any(|f| f.name_any() == p.name_any()));
        peer_pods.extend(fresh.into_iter().filter(|p| relevant(p)));
    }
    Ok(Observed {
        pods,
        service,
        peers,
        peer_pods,
        sidecars,
    })
}

async fn list_pods(
    ctx: &Context,
    ns: &str,
    instance: &str,
    selector: &str,
) -> Result<Vec<Pod>, ObserveError> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    api.list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .map_err(|source| ObserveError::ListPods {
            instance: instance.to_owned(),
            source,
        })
}

async fn get_service(
    ctx: &Context,
    ns: &str,
    instance: &str,
) -> Result<Option<Service>, ObserveError> {
    let name = names::service_name(instance);
    Api::<Service>::namespaced(ctx.client.clone(), ns)
        .get_opt(&name)
        .await
        .map_err(|source| ObserveError::GetService { name, source })
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    // Many passes wait for the caches at once, as at operator start-up; every one of them must
    // go on once the stores are synced (kube-runtime's own wait wakes only the last waiter).
    #[tokio::test]
    async fn every_pass_waiting_for_the_caches_goes_on_once_they_sync() {
        let (instances, mut iw) = reflector::store::<RedroidInstance>();
        let (pods, mut pw) = reflector::store::<Pod>();
        let (services, mut sw) = reflector::store::<Service>();
        iw.apply_watcher_event(&Event::Init);
        iw.apply_watcher_event(&Event::InitDone);
        let caches = Caches::new(instances, pods, services);
        let waiting: Vec<_> = (0..8)
            .map(|_| {
                let c = caches.clone();
                tokio::spawn(async move { c.ready().await })
            })
            .collect();
        // Let every pass start waiting before the stores sync.
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        pw.apply_watcher_event(&Event::Init);
        pw.apply_watcher_event(&Event::InitDone);
        sw.apply_watcher_event(&Event::Init);
        sw.apply_watcher_event(&Event::InitDone);
        for w in waiting {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("every waiting pass goes on")
                .expect("join");
        }
    }
}
