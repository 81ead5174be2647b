//! Progress reports that may wait: a set on its way to a new generation's steady phase
//! reports `Pending`, `Scaling` or `Suspending` only when the way takes a while.
//!
//! Contract:
//! - A write of a transitional phase ([`transitional`]: `Pending`, `Scaling`, `Suspending`)
//!   without a failure note waits while the status does not describe the set's current
//!   generation yet (no status, or an older `observedGeneration`: a reader sees it is stale)
//!   and this generation's transition started less than [`GRACE`] ago. A set whose pods come
//!   up (or hibernate) within that writes its status once, with the phase it arrived at.
//! - A transition that takes longer reports its phase as before; a status already describing
//!   this generation (e.g. `Running` whose main vanished) is updated at once.
//! - The clock is in memory ([`ProgressClock`]), per set uid and generation: a restart starts
//!   it again. A deferred pass asks to look again when the grace ends, so the report comes
//!   even if no pod changes.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::crd::CocoonSetPhase;

/// How long a transition may go unreported.
pub const GRACE: Duration = Duration::from_secs(10);

/// Whether `phase` is a step on the way rather than where a set settles.
pub fn transitional(phase: CocoonSetPhase) -> bool {
    matches!(
        phase,
        CocoonSetPhase::Pending | CocoonSetPhase::Scaling | CocoonSetPhase::Suspending
    )
}

/// How long the write of `phase` may still wait (see the module contract); `None`: write now.
pub fn defer(
    phase: CocoonSetPhase,
    noted: bool,
    observed: Option<i64>,
    generation: i64,
    age: Duration,
) -> Option<Duration> {
    let stale = observed.is_none_or(|g| g < generation);
    (transitional(phase) && !noted && stale && age < GRACE).then(|| GRACE - age)
}

/// When each set's current transition started, by uid.
#[derive(Default)]
pub struct ProgressClock(Mutex<HashMap<String, (i64, Instant)>>);

impl ProgressClock {
    /// How long set `uid` has been in transition to `generation` (the first call starts it).
    pub fn age(&self, uid: &str, generation: i64) -> Duration {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map
            .entry(uid.to_owned())
            .or_insert((generation, Instant::now()));
        if entry.0 != generation {
            *entry = (generation, Instant::now());
        }
        entry.1.elapsed()
    }

    /// Set `uid` settled (or is gone).
    pub fn settled(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CocoonSetPhase::*;

    #[test]
    fn only_young_transitions_of_a_new_generation_wait() {
        let s = Duration::from_secs;
        // (phase, noted, observedGeneration, generation, age) → waits
        let cases = [
            (Pending, false, None, 1, s(1), Some(s(9))),
            (Scaling, false, Some(1), 2, s(3), Some(s(7))),
            (Suspending, false, Some(2), 3, s(0), Some(s(10))),
            (Pending, false, None, 1, s(10), None),
            (Pending, true, None, 1, s(1), None),
            (Scaling, false, Some(2), 2, s(1), None),
            (Running, false, None, 1, s(1), None),
            (Suspended, false, Some(1), 2, s(1), None),
            (Waking, false, Some(1), 2, s(1), None),
            (Failed, false, None, 1, s(1), None),
        ];
        for (phase, noted, observed, generation, age, want) in cases {
            assert_eq!(
                defer(phase, noted, observed, generation, age),
                want,
                "{phase:?} noted={noted} observed={observed:?} generation={generation} age={age:?}"
            );
        }
    }

    #[test]
    fn the_clock_restarts_for_a_new_generation() {
        let clock = ProgressClock::default();
        let first = clock.age("uid", 1);
        assert!(first < GRACE);
        assert!(clock.age("uid", 1) >= first);
        clock.settled("uid");
        assert!(clock.age("uid", 2) < GRACE);
    }
}
