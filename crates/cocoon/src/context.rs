//! What every reconcile of the cocoon operator gets: the client, the snapshot registry, an
//! Event recorder, the operator's metrics, per-object back-off, the per-VM locks and the
//! bookkeeping that lets passes trust the watch caches ([`crate::cache`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kit::events::{Recorder, Reporter};
use kube::Client;

use crate::metrics::CocoonMetrics;
use crate::names;
use crate::registry::SharedRegistry;

/// Shared by both controllers.
pub struct Context {
    /// Kubernetes client (the operator's own ServiceAccount in a cluster).
    pub client: Client,
    /// The snapshot registry.
    pub registry: SharedRegistry,
    /// Publishes Events as `cocoon-operator`.
    pub recorder: Recorder,
    /// `cocoon_operator_*` metrics.
    pub metrics: CocoonMetrics,
    /// Per-object exponential back-off for failed reconciles.
    pub backoff: kit::reconcile::Backoff,
    /// Serialises work on one VM across CocoonHibernations.
    pub vm_locks: VmLocks,
    /// Pods created and not yet shown by the pod cache, per set.
    pub expectations: crate::cache::Expectations,
    /// `:hibernate` tags confirmed present this round.
    pub hibernate_tags: crate::cache::HibernateTags,
    /// When each set's current transition started (progress reports may wait).
    pub progress: crate::cocoonset::progress::ProgressClock,
    /// The status last written per set, for passes whose cached copy lags the write.
    pub written: kit::written::Written<crate::crd::CocoonSetStatus>,
}

impl Context {
    /// A context for `client` and `registry`.
    pub fn new(client: Client, registry: SharedRegistry, metrics: CocoonMetrics) -> Self {
        let reporter = Reporter {
            controller: names::FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            registry,
            metrics,
            backoff: Default::default(),
            vm_locks: VmLocks::default(),
            expectations: Default::default(),
            hibernate_tags: Default::default(),
            progress: Default::default(),
            written: Default::default(),
        }
    }
}

/// One async lock per VM name: passes that act on the same VM run one after another.
#[derive(Default)]
pub struct VmLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl VmLocks {
    /// Waits for and takes the lock of `vm`.
    pub async fn lock(&self, vm: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            // Drop locks nobody holds or waits for, so the map follows the live VMs.
            map.retain(|_, l| Arc::strong_count(l) > 1);
            map.entry(vm.to_owned()).or_default().clone()
        };
        lock.lock_owned().await
    }
}
