//! Continuous invariant checks: watch caches of the objects a scenario cares about (through
//! the plane's admin client, never through the fault proxy) and checks that run after every
//! event any of them applies, and on a timer.
//!
//! Contract:
//! - [`Observer::watch`] starts a reflector over an API and returns its store. Every event is
//!   applied to the store *before* the checks run, and the checks run after each event (under
//!   one lock, so they see the stores one event at a time), so a state that lasts from one
//!   event to the next is seen even if it lasts a millisecond. Checks also run every
//!   [`TICK`], for rules about time (an override whose task is gone for too long).
//! - [`Observer::ready`] waits until every store has its first list.
//! - [`Observer::stop`] ends the watches; the checks stop with them.

use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// How often the checks run without an event.
pub const TICK: Duration = Duration::from_millis(250);

type Check = Box<dyn FnMut() + Send>;

/// Watches and the checks run over them.
pub struct Observer {
    checks: Arc<Mutex<Vec<Check>>>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    ready: Vec<futures::future::BoxFuture<'static, ()>>,
}

impl Observer {
    /// No watches and no checks yet.
    pub fn new() -> Self {
        let checks: Arc<Mutex<Vec<Check>>> = Arc::default();
        let stop = CancellationToken::new();
        let (c, token) = (checks.clone(), stop.clone());
        let ticker = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(TICK) => run(&c), // the timer of time-based rules
                }
            }
        });
        Self {
            checks,
            stop,
            tasks: vec![ticker],
            ready: Vec::new(),
        }
    }

    /// Watches `api` (optionally narrowed by `config`) into a store the checks may read.
    pub fn watch<K>(&mut self, api: Api<K>, config: watcher::Config) -> Store<K>
    where
        K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let (store, writer) = reflector::store();
        let checks = self.checks.clone();
        let token = self.stop.clone();
        let events = watcher(api, config).default_backoff().reflect(writer);
        self.tasks.push(tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    e = events.next() => match e {
                        Some(_) => run(&checks),
                        None => break,
                    },
                }
            }
        }));
        let waiting = store.clone();
        self.ready.push(Box::pin(async move {
            let _ = waiting.wait_until_ready().await;
        }));
        store
    }

    /// Runs `check` after every event and every [`TICK`].
    pub fn check(&mut self, check: impl FnMut() + Send + 'static) {
        self.checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(check));
    }

    /// Waits until every store has listed its objects once.
    pub async fn ready(&mut self) {
        for r in self.ready.drain(..) {
            r.await;
        }
    }

    /// Runs every check once now.
    pub fn check_now(&self) {
        run(&self.checks);
    }

    /// Stops the watches and the checks.
    pub async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

impl Default for Observer {
    fn default() -> Self {
        Self::new()
    }
}

fn run(checks: &Mutex<Vec<Check>>) {
    let mut checks = checks.lock().unwrap_or_else(PoisonError::into_inner);
    for c in checks.iter_mut() {
        c();
    }
}
