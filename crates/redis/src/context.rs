//! What every reconcile of the Redis operator gets: the client, the operator settings, an Event
//! recorder, the per-object error back-off, the instance API connector, the metrics, and the
//! little the cluster controller remembers between passes.
//!
//! Contract: what is remembered in memory ([`Memory`]) only ever delays a decision when it is
//! lost (an operator restart starts a new failure streak); every decision that must survive a
//! restart is in the RedisCluster's status or annotations.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kit::events::{Recorder, Reporter};
use kube::Client;

use crate::cluster::build::PodSettings;
use crate::cluster::handoff::Streak;
use crate::instance_client::Connector;
use crate::metrics::RedisMetrics;
use crate::names;

/// Default operator image of the data pods' `copy-manager` init container.
pub fn default_operator_image() -> String {
    format!(
        "ghcr.io/flotilla/{}:{}",
        names::OPERATOR_NAME,
        env!("CARGO_PKG_VERSION")
    )
}

/// Operator settings that shape what the cluster controller builds and how often it looks.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The pod template's operator-side parts.
    pub pod: PodSettings,
    /// RedisClusters reconciled at once.
    pub max_concurrent_reconciles: usize,
    /// How often a converged cluster's instances are polled.
    pub poll_interval: Duration,
    /// Crash points for tests (none in the operator binary).
    pub handoff_hook: Option<HandoffHook>,
}

/// Asked after each failover or switchover step has been carried out (durable writes done),
/// with the cluster's namespace and the step's [`crate::cluster::handoff::Step::kind`]; `true`
/// stops the pass there for good, as if the operator had crashed right after that step, until
/// its task is dropped. Tests use it to restart the operator after every step in turn,
/// deterministically; the operator binary never sets one.
#[derive(Clone)]
pub struct HandoffHook(pub Arc<HandoffHookFn>);

/// The function of a [`HandoffHook`]: (namespace, step kind) → stop here.
pub type HandoffHookFn = dyn Fn(&str, &'static str) -> bool + Send + Sync;

impl std::fmt::Debug for HandoffHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandoffHook")
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            pod: PodSettings {
                operator_image: default_operator_image(),
                process_nodes: false,
            },
            max_concurrent_reconciles: 5,
            poll_interval: Duration::from_secs(5),
            handoff_hook: None,
        }
    }
}

/// What a cluster's passes remember.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// Bad observations of the current primary in a row.
    pub streak: Streak,
    /// Whom the streak is about (a new primary starts afresh).
    pub streak_of: String,
    /// A target that refused a promotion or handover, and why (cleared on the next pass).
    pub refused: Option<(String, String)>,
    /// The last pass found the cluster paused (`redis.io/reconciliationLoop: disabled`), so
    /// the pause and the resumption are each announced once.
    pub paused: bool,
}

/// Shared by the controllers.
pub struct Context {
    /// Kubernetes client (the operator's own ServiceAccount in a cluster).
    pub client: Client,
    /// Operator settings.
    pub settings: Settings,
    /// Publishes Events as `redis-operator`.
    pub recorder: Recorder,
    /// Per-object exponential back-off for failed reconciles.
    pub backoff: kit::reconcile::Backoff,
    /// Makes the per-cluster instance API clients.
    pub connector: Arc<dyn Connector>,
    /// `redis_*` metrics.
    pub metrics: RedisMetrics,
    memory: Mutex<HashMap<String, Memory>>,
}

impl Context {
    /// A context for `client`.
    pub fn new(
        client: Client,
        settings: Settings,
        connector: Arc<dyn Connector>,
        metrics: RedisMetrics,
    ) -> Self {
        let reporter = Reporter {
            controller: names::FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            settings,
            backoff: Default::default(),
            connector,
            metrics,
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// What the passes of the cluster with UID `uid` remember.
    pub fn memory(&self, uid: &str) -> Memory {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    /// Replaces what the cluster with UID `uid` remembers.
    pub fn remember(&self, uid: &str, m: Memory) {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.to_owned(), m);
    }

    /// Forgets a deleted cluster.
    pub fn forget(&self, uid: &str) {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}
