//! Reconcile outcomes, error categories and per-object error backoff.
//!
//! Contract:
//! - [`Outcome`] is what a *successful* reconcile returns: `Done`, or `RequeueAfter` for an
//!   expected wait (a pod still starting, a lock held elsewhere). A wait is not an error: it
//!   never counts toward the error backoff and it resets it.
//! - Errors implement [`ReconcileError`]: a stable `category()` (metric label and Event reason),
//!   `is_permanent()` (an invalid spec: retrying cannot help until the object changes) and
//!   `retry_within()` (the latest a retry may come, e.g. because a deadline falls due then).
//! - [`Backoff`] turns results into [`Action`]s: transient errors back off per object
//!   (by UID, else namespace/name) from `base` doubling to `cap`, never later than the error's
//!   `retry_within()`; a success forgets the object; a permanent error waits for a change
//!   without touching the counter.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

/// The result of a reconcile pass that did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Converged: nothing more to do until a watch event arrives.
    Done,
    /// An expected wait: look again after this delay.
    RequeueAfter(Duration),
}

impl Outcome {
    /// The sooner of two outcomes: a requeue beats `Done`, the shorter delay wins.
    #[must_use]
    pub fn sooner(self, other: Outcome) -> Outcome {
        match (self, other) {
            (Outcome::Done, o) | (o, Outcome::Done) => o,
            (Outcome::RequeueAfter(a), Outcome::RequeueAfter(b)) => Outcome::RequeueAfter(a.min(b)),
        }
    }
}

impl From<Outcome> for Action {
    fn from(outcome: Outcome) -> Action {
        match outcome {
            Outcome::Done => Action::await_change(),
            Outcome::RequeueAfter(after) => Action::requeue(after),
        }
    }
}

/// An error a reconcile can fail with.
pub trait ReconcileError: std::error::Error {
    /// A short, stable, lower_snake_case name: a metric label value and an Event reason.
    fn category(&self) -> &'static str;

    /// True when retrying cannot help until the object itself changes (e.g. an invalid spec).
    fn is_permanent(&self) -> bool {
        false
    }

    /// The latest the failed pass must be retried, whatever the back-off says: a deadline
    /// that falls due then must be checked on time. `None` (the default) leaves the delay to
    /// the back-off.
    fn retry_within(&self) -> Option<Duration> {
        None
    }
}

/// Per-object exponential backoff for transient reconcile errors.
///
/// Keep one per controller in its context; call [`Backoff::succeeded`] at the end of reconcile
/// and [`Backoff::failed`] from `error_policy`.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    /// 1 second doubling to a 5 minute cap.
    fn default() -> Self {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Backoff {
    /// A backoff whose first retry waits `base` and whose delays never exceed `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Backoff {
            base,
            cap,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The delay after `failures` consecutive transient errors (1 → `base`, doubling, capped).
    pub fn delay(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1);
        let factor = 1u32.checked_shl(exponent).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// Records a successful pass (a wait included) and converts its outcome to an [`Action`].
    pub fn succeeded<K: Resource>(&self, obj: &K, outcome: Outcome) -> Action {
        self.forget(obj);
        outcome.into()
    }

    /// Records a failed pass and returns when to retry: the back-off delay, capped at the
    /// error's [`ReconcileError::retry_within`].
    ///
    /// Permanent errors wait for the object to change and leave the counter alone.
    pub fn failed<K: Resource, E: ReconcileError + ?Sized>(&self, obj: &K, err: &E) -> Action {
        if err.is_permanent() {
            return Action::await_change();
        }
        let failures = {
            let mut map = self.lock();
            let n = map.entry(key(obj)).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let delay = self.delay(failures);
        Action::requeue(err.retry_within().map_or(delay, |latest| delay.min(latest)))
    }

    /// Consecutive transient failures currently recorded for `obj`.
    pub fn failures<K: Resource>(&self, obj: &K) -> u32 {
        self.lock().get(&key(obj)).copied().unwrap_or(0)
    }

    /// Drops the state kept for `obj` (call when it is deleted).
    pub fn forget<K: Resource>(&self, obj: &K) {
        self.lock().remove(&key(obj));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // The map holds plain counters: a panic elsewhere cannot leave it inconsistent.
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

// UID first so a deleted-and-recreated object starts afresh.
fn key<K: Resource>(obj: &K) -> String {
    obj.uid()
        .unwrap_or_else(|| format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    #[derive(Debug, thiserror::Error)]
    enum TestError {
        #[error("transient")]
        Transient,
        #[error("invalid spec")]
        Invalid,
        #[error("transient, due within {0:?}")]
        Due(Duration),
    }

    impl ReconcileError for TestError {
        fn category(&self) -> &'static str {
            match self {
                TestError::Transient => "transient",
                TestError::Invalid => "invalid_spec",
                TestError::Due(_) => "due",
            }
        }
        fn is_permanent(&self) -> bool {
            matches!(self, TestError::Invalid)
        }
        fn retry_within(&self) -> Option<Duration> {
            match self {
                TestError::Due(d) => Some(*d),
                _ => None,
            }
        }
    }

    fn cm(name: &str, uid: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: uid.map(Into::into),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn secs(s: u64) -> Action {
        Action::requeue(Duration::from_secs(s))
    }

    #[test]
    fn outcome_converts_to_action() {
        assert_eq!(Action::from(Outcome::Done), Action::await_change());
        assert_eq!(
            Action::from(Outcome::RequeueAfter(Duration::from_secs(7))),
            secs(7)
        );
    }

    #[test]
    fn sooner_prefers_requeue_and_shorter_delay() {
        let r = |s| Outcome::RequeueAfter(Duration::from_secs(s));
        assert_eq!(Outcome::Done.sooner(Outcome::Done), Outcome::Done);
        assert_eq!(Outcome::Done.sooner(r(5)), r(5));
        assert_eq!(r(5).sooner(Outcome::Done), r(5));
        assert_eq!(r(5).sooner(r(3)), r(3));
    }

    #[test]
    fn transient_errors_double_to_the_cap() {
        let b = Backoff::default();
        let obj = cm("a", Some("uid-a"));
        let got: Vec<Action> = (0..11)
            .map(|_| b.failed(&obj, &TestError::Transient))
            .collect();
        let want: Vec<Action> = [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
            .into_iter()
            .map(secs)
            .collect();
        assert_eq!(got, want);
        assert_eq!(b.failures(&obj), 11);
    }

    #[test]
    fn delay_saturates_for_huge_failure_counts() {
        let b = Backoff::default();
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(300));
        assert_eq!(b.delay(0), Duration::from_secs(1));
    }

    #[test]
    fn success_and_waits_reset_the_backoff() {
        let b = Backoff::default();
        let obj = cm("a", Some("uid-a"));
        b.failed(&obj, &TestError::Transient);
        b.failed(&obj, &TestError::Transient);
        let wait = Outcome::RequeueAfter(Duration::from_secs(10));
        assert_eq!(b.succeeded(&obj, wait), secs(10));
        assert_eq!(b.failures(&obj), 0);
        assert_eq!(b.failed(&obj, &TestError::Transient), secs(1));
    }

    #[test]
    fn backoff_is_per_object() {
        let b = Backoff::default();
        let a = cm("a", Some("uid-a"));
        let other = cm("b", None);
        b.failed(&a, &TestError::Transient);
        b.failed(&a, &TestError::Transient);
        assert_eq!(b.failed(&other, &TestError::Transient), secs(1));
        assert_eq!(b.failed(&a, &TestError::Transient), secs(4));
    }

    #[test]
    fn recreated_object_with_new_uid_starts_afresh() {
        let b = Backoff::default();
        b.failed(&cm("a", Some("uid-1")), &TestError::Transient);
        assert_eq!(
            b.failed(&cm("a", Some("uid-2")), &TestError::Transient),
            secs(1)
        );
    }

    #[test]
    fn permanent_errors_wait_for_change_without_counting() {
        let b = Backoff::default();
        let obj = cm("a", Some("uid-a"));
        assert_eq!(b.failed(&obj, &TestError::Invalid), Action::await_change());
        assert_eq!(b.failures(&obj), 0);
        assert_eq!(TestError::Invalid.category(), "invalid_spec");
    }

    #[test]
    fn a_due_retry_caps_the_backoff_but_still_counts() {
        let b = Backoff::default();
        let obj = cm("a", Some("uid-a"));
        // 1, 2, 4, … would reach 128 s; a deadline 10 s away caps every later delay at 10 s.
        let due = TestError::Due(Duration::from_secs(10));
        let got: Vec<Action> = (0..6).map(|_| b.failed(&obj, &due)).collect();
        let want: Vec<Action> = [1, 2, 4, 8, 10, 10].into_iter().map(secs).collect();
        assert_eq!(got, want);
        assert_eq!(b.failures(&obj), 6, "capped failures still count");
        // Without the cap the count carries on doubling from where it was.
        assert_eq!(b.failed(&obj, &TestError::Transient), secs(64));
        // A deadline already due asks for an immediate retry.
        let now = TestError::Due(Duration::ZERO);
        assert_eq!(b.failed(&obj, &now), Action::requeue(Duration::ZERO));
    }

    #[derive(Debug, thiserror::Error)]
    #[error("plain")]
    struct Plain;

    impl ReconcileError for Plain {
        fn category(&self) -> &'static str {
            "plain"
        }
    }

    #[test]
    fn errors_leave_the_delay_to_the_backoff_by_default() {
        assert_eq!(Plain.retry_within(), None);
        assert!(!Plain.is_permanent());
        let b = Backoff::default();
        let obj = cm("a", Some("uid-a"));
        assert_eq!(b.failed(&obj, &Plain), secs(1));
        assert_eq!(b.failed(&obj, &Plain), secs(2));
    }
}
