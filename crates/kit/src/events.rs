//! Events and namespace scoping shared by the operators' controllers.
//!
//! Contract:
//! - [`Recorder::publish`] records one `events.k8s.io/v1` Event. Repeats of the *same* Event
//!   (same regarding object, type, reason, note and related object) within [`SERIES_TTL`] of
//!   the last one are folded into the first Event's `series` (count and lastObservedTime), as
//!   client-go does. An Event whose note differs is a new Event: every distinct message stays
//!   visible in `kubectl describe` (kube-runtime's recorder keys on the reason only and so
//!   shows the first message of a reason forever).
//! - [`publish`] never fails the caller: an Event is a courtesy, so a refused one is logged,
//!   not returned. `action` equals `reason`.
//! - The recorder remembers at most [`MAX_SERIES`] series; the oldest is forgotten first, so
//!   a long-running operator's memory stays bounded.
//! - [`scoped`] is the `Api` of a namespaced kind over one namespace, or over all of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::{EventType, Reporter};

/// How long after its last occurrence an Event is still continued as a series (client-go
/// and kube-runtime use 6 minutes).
pub const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);

/// How many series a recorder remembers at most.
pub const MAX_SERIES: usize = 4096;

/// What makes two Events "the same" (see the module contract).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    type_: &'static str,
    reason: String,
    note: String,
    regarding: RefKey,
    related: Option<RefKey>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RefKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl From<&ObjectReference> for RefKey {
    fn from(r: &ObjectReference) -> Self {
        Self {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }
    }
}

/// A published Event the next repeat continues.
#[derive(Clone, Debug)]
struct Series {
    name: String,
    namespace: String,
    count: i32,
    last: Timestamp,
}

/// Records Events for one reporting controller (see the module contract). Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    series: Arc<Mutex<SeriesCache>>,
}

/// The series a recorder continues: pure bookkeeping, no client.
#[derive(Debug, Default)]
struct SeriesCache(HashMap<Key, Series>);

impl SeriesCache {
    /// Whether publishing `key` at `now` creates an Event or continues one; forgets series
    /// older than [`SERIES_TTL`].
    fn step(&mut self, key: &Key, now: Timestamp) -> Step {
        self.0.retain(|_, s| s.last + SERIES_TTL > now);
        match self.0.get(key) {
            Some(s) => Step::Continue {
                name: s.name.clone(),
                namespace: s.namespace.clone(),
                count: s.count.saturating_add(1),
            },
            None => Step::Create,
        }
    }

    /// Records that `key` was published as Event `name` with `count` occurrences; past
    /// [`MAX_SERIES`] the least recently seen series is forgotten.
    fn remember(&mut self, key: Key, name: String, namespace: String, count: i32, now: Timestamp) {
        if self.0.len() >= MAX_SERIES && !self.0.contains_key(&key) {
            let oldest = self
                .0
                .iter()
                .min_by_key(|(_, s)| s.last)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.0.remove(&k);
            }
        }
        self.0.insert(
            key,
            Series {
                name,
                namespace,
                count,
                last: now,
            },
        );
    }
}

/// What to do for one publish, decided from the remembered series.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    /// Create a new Event.
    Create,
    /// Continue the series of the named Event with this count.
    Continue {
        name: String,
        namespace: String,
        count: i32,
    },
}

impl Recorder {
    /// A recorder reporting as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            series: Arc::default(),
        }
    }

    /// Records `note` (`reason`, `type_`) about `regarding`, optionally `related` to another
    /// object: a new Event, or the next occurrence of the same one.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
        related: Option<&ObjectReference>,
    ) -> Result<(), kube::Error> {
        let key = Key {
            type_: type_name(type_),
            reason: reason.to_owned(),
            note: note.to_owned(),
            regarding: regarding.into(),
            related: related.map(RefKey::from),
        };
        let now = Timestamp::now();
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let step = self.step(&key, now);
        let name = match step {
            Step::Continue {
                name,
                namespace,
                count,
            } => {
                let patch = serde_json::json!({"series": EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                }});
                let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        self.remember(key, name, namespace, count, now);
                        return Ok(());
                    }
                    // The Event expired on the server (its TTL is shorter than ours): start anew.
                    Err(kube::Error::Api(s)) if s.code == 404 => self.event_name(regarding, now),
                    Err(e) => return Err(e),
                }
            }
            Step::Create => self.event_name(regarding, now),
        };
        let event = self.event(&name, regarding, type_, reason, note, related, now);
        events.create(&PostParams::default(), &event).await?;
        self.remember(key, name, namespace, 1, now);
        Ok(())
    }

    fn step(&self, key: &Key, now: Timestamp) -> Step {
        self.lock().step(key, now)
    }

    fn remember(&self, key: Key, name: String, namespace: String, count: i32, now: Timestamp) {
        self.lock().remember(key, name, namespace, count, now);
    }

    fn event_name(&self, regarding: &ObjectReference, now: Timestamp) -> String {
        let base = regarding
            .name
            .as_deref()
            .unwrap_or(&self.reporter.controller);
        format!("{base}.{:x}", now.as_nanosecond())
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &self,
        name: &str,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
        related: Option<&ObjectReference>,
        now: Timestamp,
    ) -> K8sEvent {
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some(reason.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note.to_owned()),
            type_: Some(type_name(type_).to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: related.cloned(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            ..K8sEvent::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SeriesCache> {
        // Plain bookkeeping: a panic elsewhere cannot leave it inconsistent.
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// Records a Normal (or, with `warning`, Warning) Event `reason` on `regarding`, optionally
/// about a `related` object; a failure is logged.
pub async fn publish(
    recorder: &Recorder,
    regarding: &ObjectReference,
    warning: bool,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    if let Err(e) = recorder
        .publish(regarding, type_, reason, &note, related.as_ref())
        .await
    {
        tracing::warn!(error = %e, reason, "recording an Event failed");
    }
}

/// `Api<K>` over `namespace`, or over every namespace when `None`.
pub fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(reason: &str, note: &str) -> Key {
        Key {
            type_: "Normal",
            reason: reason.into(),
            note: note.into(),
            regarding: RefKey::from(&ObjectReference {
                kind: Some("CocoonSet".into()),
                namespace: Some("ns".into()),
                name: Some("set".into()),
                uid: Some("u1".into()),
                ..ObjectReference::default()
            }),
            related: None,
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("time")
    }

    #[test]
    fn the_same_event_continues_its_series() {
        let mut c = SeriesCache::default();
        let k = key("SubAgentRebuild", "slot 1 attempt 1/4");
        assert_eq!(c.step(&k, at(0)), Step::Create);
        c.remember(k.clone(), "set.1".into(), "ns".into(), 1, at(0));
        let next = Step::Continue {
            name: "set.1".into(),
            namespace: "ns".into(),
            count: 2,
        };
        assert_eq!(c.step(&k, at(10)), next);
    }

    #[test]
    fn a_different_message_under_the_same_reason_is_a_new_event() {
        let mut c = SeriesCache::default();
        let first = key("SubAgentRebuild", "slot 1 attempt 1/4");
        c.remember(first, "set.1".into(), "ns".into(), 1, at(0));
        let second = key("SubAgentRebuild", "slot 1 attempt 2/4");
        assert_eq!(c.step(&second, at(1)), Step::Create);
    }

    #[test]
    fn a_series_expires_after_its_ttl() {
        let mut c = SeriesCache::default();
        let k = key("Created", "pod a");
        c.remember(k.clone(), "set.1".into(), "ns".into(), 3, at(0));
        let ttl = SERIES_TTL.as_secs();
        assert!(matches!(
            c.step(&k, at(ttl - 1)),
            Step::Continue { count: 4, .. }
        ));
        assert_eq!(c.step(&k, at(ttl)), Step::Create);
        assert!(c.0.is_empty(), "expired series are forgotten");
    }

    #[test]
    fn memory_is_bounded_by_forgetting_the_oldest_series() {
        let mut c = SeriesCache::default();
        for i in 0..MAX_SERIES {
            c.remember(
                key("R", &i.to_string()),
                format!("e{i}"),
                "ns".into(),
                1,
                at(i as i64),
            );
        }
        c.remember(
            key("R", "new"),
            "new".into(),
            "ns".into(),
            1,
            at(MAX_SERIES as i64),
        );
        assert_eq!(c.0.len(), MAX_SERIES);
        assert!(c.0.contains_key(&key("R", "new")));
        assert!(!c.0.contains_key(&key("R", "0")), "the oldest went first");
    }
}
