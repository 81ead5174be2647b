//! What every reconcile of the redroid operator gets: the client, operator settings, an Event
//! recorder and the per-object error back-off.

use kit::events::{Recorder, Reporter};
use kube::Client;

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

/// Default of [`Settings::max_concurrent_reconciles`].
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: usize = 4;

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
}

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
        }
    }
}
