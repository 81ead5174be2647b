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
//! making no request, each by an index lookup (the instance label, the data used, see
//! [`super::cache`]) whose cost is what it finds, never a scan or copy of a namespace;
//! without (tests, tools), from the API. The caches may lag the API by a
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

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;

use super::cache::{self, Key};
use super::cached_pod::CachedPod;
use crate::context::Context;
use crate::crd::RedroidInstance;
use crate::data::Usage;
use crate::names;

/// The controller's indexed watch caches ([`cache`]): instances, Pods carrying the instance
/// label (instance, upstream and task pods) and the operator's Services.
#[derive(Clone)]
pub struct Caches {
    /// Every RedroidInstance in scope.
    pub instances: cache::Instances,
    /// Pods labelled with [`names::INSTANCE_LABEL`].
    pub pods: cache::Pods,
    /// Services labelled `managed-by`; ours are, since every apply sets the label.
    pub services: cache::Services,
    synced: Arc<tokio::sync::OnceCell<()>>,
}

impl Caches {
    /// Caches over these stores.
    pub fn new(instances: cache::Instances, pods: cache::Pods, services: cache::Services) -> Self {
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
                let _ = self.instances.store().wait_until_ready().await;
                let _ = self.pods.store().wait_until_ready().await;
                let _ = self.services.store().wait_until_ready().await;
            })
            .await;
    }

    fn service(&self, ns: &str, name: &str) -> Option<Service> {
        let key = ObjectRef::new(name).within(ns);
        self.services.get_ref(&key).map(|s| (*s).clone())
    }
}

/// What a reconcile pass saw.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Pods backing (or having backed) this instance.
    pub pods: Vec<CachedPod>,
    /// The instance Service, if it exists.
    pub service: Option<Service>,
    /// Other instances in the namespace whose data conflict with this instance's.
    pub peers: Vec<RedroidInstance>,
    /// Instance Pods of those peers, and other instances' instance Pods and unfinished
    /// data-sidecar pods whose volumes use conflicting data.
    pub peer_pods: Vec<CachedPod>,
    /// Unfinished data-sidecar task pods on this instance's data.
    pub sidecars: Vec<CachedPod>,
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
pub fn is_instance_pod(pod: &impl kube::Resource) -> bool {
    let l = pod.labels();
    match l.get(names::COMPONENT_LABEL) {
        Some(c) => c == names::COMPONENT_INSTANCE,
        None => !l.contains_key(names::TASK_LABEL),
    }
}

fn unfinished(pod: &CachedPod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether `pod` is a task pod running redroid on an instance's data.
pub fn is_sidecar(pod: &impl kube::Resource) -> bool {
    pod.labels().get(names::SIDECAR_LABEL).map(String::as_str) == Some("true")
}

/// Observes everything one pass needs for `inst`.
pub async fn observe(
    ctx: &Context,
    caches: Option<&Caches>,
    inst: &RedroidInstance,
) -> Result<Observed, ObserveError> {
    match caches {
        Some(c) => observe_cached(ctx, c, inst).await,
        None => observe_api(ctx, inst).await,
    }
}

// From the caches: every read is an index lookup costing what it finds, never a scan of a
// namespace, so a pass costs the same however many instances there are.
async fn observe_cached(
    ctx: &Context,
    c: &Caches,
    inst: &RedroidInstance,
) -> Result<Observed, ObserveError> {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let owned = |objs: Vec<Arc<CachedPod>>| -> Vec<CachedPod> {
        objs.iter().map(|p| (**p).clone()).collect()
    };
    let own = owned(c.pods.get(&Key::Label {
        ns: ns.clone(),
        label: names::instance_label(&name),
    }));
    let service = c.service(&ns, &names::service_name(&name));
    let mine = Usage::of_spec(&inst.spec);
    let conflicts = cache::conflict_keys(&ns, &mine);
    let peers: Vec<RedroidInstance> = c
        .instances
        .get_any(&conflicts)
        .iter()
        .filter(|p| p.name_any() != name && super::validate::shares_data(&p.spec, &inst.spec))
        .map(|p| (**p).clone())
        .collect();
    let mut keys = conflicts;
    keys.extend(peers.iter().map(|p| Key::Label {
        ns: ns.clone(),
        label: names::instance_label(&p.name_any()),
    }));
    let others = owned(c.pods.get_any(&keys));
    let mut seen = assemble(inst, own, others, peers, service);
    if !seen.peers.is_empty() {
        // Peers' Pods fresh from the API: one created a moment ago must not be missed.
        let labels: Vec<String> = seen
            .peers
            .iter()
            .map(|p| names::instance_label(&p.name_any()))
            .collect();
        let selector = format!("{} in ({})", names::INSTANCE_LABEL, labels.join(","));
        let fresh = list_pods(ctx, &ns, &name, &selector).await?;
        let relevant = relevant(&mine, &labels);
        seen.peer_pods
            .retain(|p| !fresh.iter().any(|f| f.name_any() == p.name_any()));
        seen.peer_pods
            .extend(fresh.into_iter().filter(|p| relevant(p)));
    }
    Ok(seen)
}

// From the API (tests, tools): the instance label's Pods, the Service, every instance.
async fn observe_api(ctx: &Context, inst: &RedroidInstance) -> Result<Observed, ObserveError> {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let labelled = list_pods(ctx, &ns, &name, names::INSTANCE_LABEL).await?;
    let service = get_service(ctx, &ns, &name).await?;
    let me = names::instance_label(&name);
    let (own, others): (Vec<CachedPod>, Vec<CachedPod>) = labelled
        .into_iter()
        .partition(|p| p.labels().get(names::INSTANCE_LABEL) == Some(&me));
    let api: Api<RedroidInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let all = api.list(&ListParams::default()).await;
    let all = all
        .map_err(|source| ObserveError::ListInstances {
            namespace: ns.clone(),
            source,
        })?
        .items;
    let peers = all
        .into_iter()
        .filter(|p| p.name_any() != name && super::validate::shares_data(&p.spec, &inst.spec))
        .collect();
    Ok(assemble(inst, own, others, peers, service))
}

// Whether a Pod of another instance matters to one using `mine` with these peers' labels:
// an instance Pod or an unfinished data sidecar, on conflicting data or of a peer.
fn relevant<'a>(mine: &'a Usage, peer_labels: &'a [String]) -> impl Fn(&CachedPod) -> bool + 'a {
    move |p: &CachedPod| {
        let label = p.labels().get(names::INSTANCE_LABEL);
        let holds = is_instance_pod(p) || (is_sidecar(p) && unfinished(p));
        let conflicts = Usage::of_cached(p).is_some_and(|u| mine.conflict(&u).is_some());
        holds && (conflicts || label.is_some_and(|l| peer_labels.contains(l)))
    }
}

// What a pass saw, from the instance's own labelled Pods, candidate Pods of others (any
// superset of the relevant ones) and its peers.
fn assemble(
    inst: &RedroidInstance,
    own: Vec<CachedPod>,
    others: Vec<CachedPod>,
    peers: Vec<RedroidInstance>,
    service: Option<Service>,
) -> Observed {
    let me = names::instance_label(&inst.name_any());
    let (sidecars, mut pods): (Vec<CachedPod>, Vec<CachedPod>) =
        own.into_iter().partition(is_sidecar);
    pods.retain(is_instance_pod);
    let sidecars = sidecars.into_iter().filter(unfinished).collect();
    let mine = Usage::of_spec(&inst.spec);
    let peer_labels: Vec<String> = peers
        .iter()
        .map(|p| names::instance_label(&p.name_any()))
        .collect();
    let relevant = relevant(&mine, &peer_labels);
    let peer_pods = others
        .into_iter()
        .filter(|p| p.labels().get(names::INSTANCE_LABEL) != Some(&me))
        .filter(|p| relevant(p))
        .collect();
    Observed {
        pods,
        service,
        peers,
        peer_pods,
        sidecars,
    }
}

async fn list_pods(
    ctx: &Context,
    ns: &str,
    instance: &str,
    selector: &str,
) -> Result<Vec<CachedPod>, ObserveError> {
    let api: Api<CachedPod> = Api::namespaced(ctx.client.clone(), ns);
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::runtime::watcher::Event;

    use super::*;

    // Many passes wait for the caches at once, as at operator start-up; every one of them must
    // go on once the stores are synced (kube-runtime's own wait wakes only the last waiter).
    #[tokio::test]
    async fn every_pass_waiting_for_the_caches_goes_on_once_they_sync() {
        let (instances, mut iw) = kit::index::store(cache::instance_keys);
        let (pods, mut pw) = kit::index::store(cache::pod_keys);
        let (services, mut sw) = kit::index::store(|_: &Service| Vec::new());
        iw.apply(&Event::Init);
        iw.apply(&Event::InitDone);
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
        pw.apply(&Event::Init);
        pw.apply(&Event::InitDone);
        sw.apply(&Event::Init);
        sw.apply(&Event::InitDone);
        for w in waiting {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("every waiting pass goes on")
                .expect("join");
        }
    }
}
