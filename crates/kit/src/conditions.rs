//! Pure helpers over `Vec<metav1.Condition>`.
//!
//! Contract:
//! - [`upsert`] sets a condition by type. `lastTransitionTime` moves to `now` only when the
//!   condition is new or its `status` changes; reason, message and observedGeneration updates
//!   keep it, so a status computed every pass stays byte-identical when nothing changed.
//! - [`reset`] sets a condition and always moves `lastTransitionTime` to `now`, for a phase that
//!   restarts with the same status (e.g. a wake re-entered whose time budget must restart).
//! - New types are appended; existing ones stay in place: order is insertion order, never
//!   re-sorted, so status output is deterministic.
//! - `now` is a parameter and is truncated to whole seconds, the precision `metav1.Time`
//!   serialises, so what is stored equals what is read back.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `"True"`
    True,
    /// `"False"`
    False,
    /// `"Unknown"`
    Unknown,
}

impl Status {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(b: bool) -> Self {
        if b { Status::True } else { Status::False }
    }
}

/// The desired state of one condition, without its transition time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Condition type, e.g. `Ready`.
    pub type_: String,
    /// Condition status.
    pub status: Status,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The object generation this condition was computed from.
    pub observed_generation: Option<i64>,
}

impl Desired {
    /// A condition without observedGeneration; add it with [`Desired::observed`].
    pub fn new(
        type_: impl Into<String>,
        status: impl Into<Status>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Desired {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: None,
        }
    }

    /// Sets observedGeneration.
    #[must_use]
    pub fn observed(mut self, generation: Option<i64>) -> Self {
        self.observed_generation = generation;
        self
    }
}

/// Sets a condition; `lastTransitionTime` moves only if it is new or its status changed.
/// Returns whether anything changed.
pub fn upsert(conds: &mut Vec<Condition>, desired: Desired, now: Timestamp) -> bool {
    set(conds, desired, now, false)
}

/// Sets a condition and always moves `lastTransitionTime` to `now`. Returns whether anything
/// changed.
pub fn reset(conds: &mut Vec<Condition>, desired: Desired, now: Timestamp) -> bool {
    set(conds, desired, now, true)
}

/// The condition of type `type_`, if present.
pub fn get<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

/// True when the condition of type `type_` is present with status `True`.
pub fn is_true(conds: &[Condition], type_: &str) -> bool {
    get(conds, type_).is_some_and(|c| c.status == Status::True.as_str())
}

/// Removes the condition of type `type_`; returns whether it was present.
pub fn remove(conds: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conds.len();
    conds.retain(|c| c.type_ != type_);
    conds.len() != before
}

fn set(conds: &mut Vec<Condition>, desired: Desired, now: Timestamp, force: bool) -> bool {
    let now = Time(Timestamp::from_second(now.as_second()).unwrap_or(now));
    let Some(existing) = conds.iter_mut().find(|c| c.type_ == desired.type_) else {
        conds.push(condition(desired, now));
        return true;
    };
    let transition = force || existing.status != desired.status.as_str();
    let time = if transition {
        now
    } else {
        existing.last_transition_time.clone()
    };
    let updated = condition(desired, time);
    let changed = *existing != updated;
    *existing = updated;
    changed
}

fn condition(d: Desired, last_transition_time: Time) -> Condition {
    Condition {
        last_transition_time,
        message: d.message,
        observed_generation: d.observed_generation,
        reason: d.reason,
        status: d.status.as_str().to_owned(),
        type_: d.type_,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn ready(ok: bool, reason: &str) -> Desired {
        Desired::new("Ready", ok, reason, format!("{reason} message"))
    }

    fn ltt(conds: &[Condition], type_: &str) -> Timestamp {
        get(conds, type_).unwrap().last_transition_time.0
    }

    #[test]
    fn insert_sets_transition_time_to_now() {
        let mut c = Vec::new();
        assert!(upsert(&mut c, ready(true, "Up").observed(Some(3)), t(100)));
        let got = get(&c, "Ready").unwrap();
        assert_eq!(got.status, "True");
        assert_eq!(got.reason, "Up");
        assert_eq!(got.message, "Up message");
        assert_eq!(got.observed_generation, Some(3));
        assert_eq!(got.last_transition_time.0, t(100));
    }

    #[test]
    fn same_status_keeps_transition_time_but_updates_the_rest() {
        let mut c = Vec::new();
        upsert(&mut c, ready(false, "Starting"), t(100));
        assert!(upsert(
            &mut c,
            ready(false, "Waiting").observed(Some(2)),
            t(200)
        ));
        let got = get(&c, "Ready").unwrap();
        assert_eq!(
            (got.reason.as_str(), got.observed_generation),
            ("Waiting", Some(2))
        );
        assert_eq!(ltt(&c, "Ready"), t(100));
    }

    #[test]
    fn identical_upsert_reports_no_change() {
        let mut c = Vec::new();
        upsert(&mut c, ready(true, "Up"), t(100));
        let before = c.clone();
        assert!(!upsert(&mut c, ready(true, "Up"), t(200)));
        assert_eq!(c, before);
    }

    #[test]
    fn status_change_moves_transition_time() {
        let mut c = Vec::new();
        upsert(&mut c, ready(false, "Starting"), t(100));
        assert!(upsert(&mut c, ready(true, "Up"), t(200)));
        assert_eq!(ltt(&c, "Ready"), t(200));
        assert!(is_true(&c, "Ready"));
    }

    #[test]
    fn reset_moves_transition_time_even_with_same_status() {
        let mut c = Vec::new();
        upsert(&mut c, ready(true, "Waking"), t(100));
        assert!(reset(&mut c, ready(true, "Waking"), t(300)));
        assert_eq!(ltt(&c, "Ready"), t(300));
    }

    #[test]
    fn order_is_insertion_order() {
        let mut c = Vec::new();
        upsert(&mut c, Desired::new("Ready", false, "A", ""), t(1));
        upsert(&mut c, Desired::new("Available", true, "B", ""), t(1));
        upsert(&mut c, Desired::new("Degraded", false, "C", ""), t(1));
        upsert(&mut c, Desired::new("Ready", true, "D", ""), t(2));
        let types: Vec<&str> = c.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Available", "Degraded"]);
    }

    #[test]
    fn now_is_truncated_to_seconds() {
        let mut c = Vec::new();
        let now = Timestamp::new(100, 750_000_000).unwrap();
        upsert(&mut c, ready(true, "Up"), now);
        assert_eq!(ltt(&c, "Ready"), t(100));
    }

    #[test]
    fn get_is_true_and_remove() {
        let mut c = Vec::new();
        assert!(get(&c, "Ready").is_none());
        assert!(!is_true(&c, "Ready"));
        upsert(
            &mut c,
            Desired::new("Ready", Status::Unknown, "Probing", ""),
            t(1),
        );
        assert!(!is_true(&c, "Ready"));
        assert_eq!(get(&c, "Ready").unwrap().status, "Unknown");
        assert!(remove(&mut c, "Ready"));
        assert!(!remove(&mut c, "Ready"));
        assert!(c.is_empty());
    }
}
