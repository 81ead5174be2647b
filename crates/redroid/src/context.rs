//! What every reconcile of the redroid operator gets: the client, operator settings, an Event
//! recorder and the per-object error back-off.

use std::sync::Arc;

use kit::events::{Recorder, Reporter};
use kube::Client;
use tokio::sync::Semaphore;

use crate::names;

/// Operator settings that shape what the controllers build.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Default kmsg-tools image (`RELATED_IMAGE_KMSG_TOOLS`), used when an instance sets none.
    pub kmsg_tools_image: String,
    /// Reconciles each controller runs at once (`--max-concurrent-reconciles`). Passes of one
    /// object never overlap whatever the value; zero is taken as one.
    pub max_concurrent_reconciles: usize,
}

/// Default of [`Settings::max_concurrent_reconciles`]. A pass mostly waits on the API server
/// (the Pod and Service writes, then the status write), so sixteen at once keep its pipeline
/// full; measured at N = 1000 (docs/redroid.md, Performance), 16 reached every Pod Running in
/// 0.72x the time of 4 with less CPU, and 32 was slower again than 16.
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: usize = 16;

impl Default for Settings {
    fn default() -> Self {
        Self {
            kmsg_tools_image: names::DEFAULT_KMSG_TOOLS_IMAGE.into(),
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
        }
    }
}

/// Shared by both controllers.
pub struct Context {
    /// Kubernetes client (the operator's own ServiceAccount in a cluster).
    pub client: Client,
    /// Operator settings.
    pub settings: Settings,
    /// Publishes Events as `redroid-operator`.
    pub recorder: Recorder,
    /// Per-object exponential back-off for failed reconciles.
    pub backoff: kit::reconcile::Backoff,
    /// Permits for Events published in the background ([`BACKGROUND_EVENTS`] at once, first
    /// come first served).
    pub background_events: Arc<Semaphore>,
}

/// Events published in the background that are written at once. client-go's broadcaster
/// writes a controller's Events one after another; here two at a time, so a burst of passes
/// (a thousand instances created together) spends the API server's writes on the Pods and
/// statuses first and its Events follow, instead of every pass's Events competing with the
/// next passes' writes.
pub const BACKGROUND_EVENTS: usize = 2;

impl Context {
    /// A context for `client` with `settings`.
    pub fn new(client: Client, settings: Settings) -> Self {
        let reporter = Reporter {
            controller: names::FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            settings,
            backoff: Default::default(),
            background_events: Arc::new(Semaphore::new(BACKGROUND_EVENTS)),
        }
    }
}
