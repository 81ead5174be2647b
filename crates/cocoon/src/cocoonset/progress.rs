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
//! - Once this process reported a transition of the current generation, the next transitional
//!   report (more pods Ready, `Pending` → `Scaling`) waits until [`REFRESH`] after that report;
//!   arriving where the set settles (`Running`, `Suspended`, ...), a failure note, or a status
//!   that described a settled phase is written at once. A transition is thus reported at most
//!   once per [`REFRESH`], and the status of a slow create costs two writes, not one per pod.
//! - Arriving at `Running` waits up to [`DETAILS`] while a VM whose pod runs has no id or IP
//!   reported by vk-cocoon yet ([`await_details`]): the pods turn Ready a moment before their
//!   VMs are reported, and `Running` with every VM's address is one write instead of two.
//! - The clock is in memory ([`ProgressClock`]), per set uid and generation: a restart starts
//!   it again (and reports at once what it finds). A deferred pass asks to look again when the
//!   wait ends, so the report comes even if no pod changes.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::crd::CocoonSetPhase;

/// How long a transition may go unreported. Long enough that a set created or changed among
/// hundreds (the API server's write rate spreads their pods over tens of seconds) still has
/// its status written once; short enough that a stuck one shows its phase within half a minute.
pub const GRACE: Duration = Duration::from_secs(30);
/// How long a reported transition waits before reporting its progress again.
pub const REFRESH: Duration = Duration::from_secs(30);
/// How long arriving at `Running` may wait for vk-cocoon to report the VMs.
pub const DETAILS: Duration = Duration::from_secs(5);

/// How long the write of `phase` may still wait for the VMs' ids and IPs (see the module
/// contract); `pending`: some running pod's VM has none yet, `waited`: since that was first
/// seen.
pub fn await_details(phase: CocoonSetPhase, pending: bool, waited: Duration) -> Option<Duration> {
    (phase == CocoonSetPhase::Running && pending && waited < DETAILS).then(|| DETAILS - waited)
}

/// Whether `phase` is a step on the way rather than where a set settles.
pub fn transitional(phase: CocoonSetPhase) -> bool {
    matches!(
        phase,
        CocoonSetPhase::Pending | CocoonSetPhase::Scaling | CocoonSetPhase::Suspending
    )
}

/// What the stored status says, for [`defer`].
#[derive(Clone, Copy, Debug)]
pub struct Live {
    /// `status.observedGeneration`.
    pub observed: Option<i64>,
    /// `status.phase`.
    pub phase: Option<CocoonSetPhase>,
}

/// The transition's clock, for [`defer`].
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Since the transition to this generation started.
    pub age: Duration,
    /// Since this process last reported it (`None`: not yet).
    pub since_report: Option<Duration>,
}

/// How long the write of `phase` may still wait (see the module contract); `None`: write now.
pub fn defer(
    phase: CocoonSetPhase,
    noted: bool,
    live: Live,
    generation: i64,
    clock: Clock,
) -> Option<Duration> {
    if !transitional(phase) || noted {
        return None;
    }
    let stale = live.observed.is_none_or(|g| g < generation);
    // A stale status after this process's report is a cache that has not seen it yet.
    let reporting = stale || live.phase.is_some_and(transitional);
    match clock.since_report {
        Some(since) if reporting && since < REFRESH => Some(REFRESH - since),
        Some(_) => None,
        None if stale && clock.age < GRACE => Some(GRACE - clock.age),
        None => None,
    }
}

/// Each set's current transition, by uid: its generation, when it started and when this
/// process last reported it.
#[derive(Default)]
pub struct ProgressClock(Mutex<HashMap<String, Transition>>);

struct Transition {
    generation: i64,
    started: Instant,
    reported: Option<Instant>,
    details: Option<Instant>,
}

impl Transition {
    fn new(generation: i64) -> Self {
        Self {
            generation,
            started: Instant::now(),
            reported: None,
            details: None,
        }
    }
}

impl ProgressClock {
    /// Set `uid`'s transition to `generation` (the first call starts it).
    pub fn clock(&self, uid: &str, generation: i64) -> Clock {
        self.with(uid, generation, |t| Clock {
            age: t.started.elapsed(),
            since_report: t.reported.map(|r| r.elapsed()),
        })
    }

    /// How long set `uid` has been in transition to `generation` (the first call starts it).
    pub fn age(&self, uid: &str, generation: i64) -> Duration {
        self.clock(uid, generation).age
    }

    /// This process just reported set `uid`'s transition to `generation`.
    pub fn reported(&self, uid: &str, generation: i64) {
        self.with(uid, generation, |t| t.reported = Some(Instant::now()));
    }

    /// How long set `uid`, arriving at `generation`, has waited for its VMs to be reported
    /// (the first call starts the wait).
    pub fn awaiting_details(&self, uid: &str, generation: i64) -> Duration {
        self.with(uid, generation, |t| {
            t.details.get_or_insert_with(Instant::now).elapsed()
        })
    }

    fn with<T>(&self, uid: &str, generation: i64, f: impl FnOnce(&mut Transition) -> T) -> T {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map
            .entry(uid.to_owned())
            .or_insert_with(|| Transition::new(generation));
        if entry.generation != generation {
            *entry = Transition::new(generation);
        }
        f(entry)
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
        let live = |observed, phase| Live { observed, phase };
        let young = |age| Clock {
            age,
            since_report: None,
        };
        // (phase, noted, live, generation, clock) → waits
        let cases = [
            (
                Pending,
                false,
                live(None, None),
                1,
                young(s(1)),
                Some(s(29)),
            ),
            (
                Scaling,
                false,
                live(Some(1), Some(Running)),
                2,
                young(s(3)),
                Some(s(27)),
            ),
            (
                Suspending,
                false,
                live(Some(2), None),
                3,
                young(s(0)),
                Some(s(30)),
            ),
            (Pending, false, live(None, None), 1, young(s(30)), None),
            (Pending, true, live(None, None), 1, young(s(1)), None),
            (
                Scaling,
                false,
                live(Some(2), Some(Running)),
                2,
                young(s(1)),
                None,
            ),
            (Running, false, live(None, None), 1, young(s(1)), None),
            (Suspended, false, live(Some(1), None), 2, young(s(1)), None),
            (Waking, false, live(Some(1), None), 2, young(s(1)), None),
            (Failed, false, live(None, None), 1, young(s(1)), None),
        ];
        for (phase, noted, live, generation, clock, want) in cases {
            assert_eq!(
                defer(phase, noted, live, generation, clock),
                want,
                "{phase:?} noted={noted} {live:?} generation={generation} {clock:?}"
            );
        }
    }

    #[test]
    fn a_reported_transition_reports_again_only_after_the_refresh() {
        let s = Duration::from_secs;
        let reported = |since| Clock {
            age: s(40),
            since_report: since,
        };
        let live = |phase| Live {
            observed: Some(1),
            phase: Some(phase),
        };
        // (phase, noted, live phase, clock) → waits
        let cases = [
            // More pods Ready, or Pending → Scaling, soon after the report: wait.
            (Pending, false, Pending, reported(Some(s(5))), Some(s(25))),
            (Scaling, false, Pending, reported(Some(s(29))), Some(s(1))),
            (
                Suspending,
                false,
                Suspending,
                reported(Some(s(0))),
                Some(s(30)),
            ),
            // The refresh is due.
            (Scaling, false, Pending, reported(Some(s(30))), None),
            // Another process (or one before a restart) reported it: write now.
            (Scaling, false, Pending, reported(None), None),
            // Arrived, noted, or the status described a settled phase: write now.
            (Running, false, Scaling, reported(Some(s(1))), None),
            (Scaling, true, Scaling, reported(Some(s(1))), None),
            (Scaling, false, Running, reported(Some(s(1))), None),
        ];
        for (phase, noted, live_phase, clock, want) in cases {
            assert_eq!(
                defer(phase, noted, live(live_phase), 1, clock),
                want,
                "{phase:?} noted={noted} live={live_phase:?} {clock:?}"
            );
        }
        // A cache that has not seen this process's report yet (no status, or the previous
        // generation's) still waits.
        let unseen = Live {
            observed: None,
            phase: None,
        };
        assert_eq!(
            defer(Scaling, false, unseen, 1, reported(Some(s(2)))),
            Some(s(28))
        );
    }

    #[test]
    fn running_waits_briefly_for_the_vms_to_be_reported() {
        let s = Duration::from_secs;
        let cases = [
            (Running, true, s(0), Some(s(5))),
            (Running, true, s(4), Some(s(1))),
            (Running, true, s(5), None),
            (Running, false, s(0), None),
            (Scaling, true, s(0), None),
            (Suspended, true, s(0), None),
        ];
        for (phase, pending, waited, want) in cases {
            assert_eq!(
                await_details(phase, pending, waited),
                want,
                "{phase:?} pending={pending} waited={waited:?}"
            );
        }
        let clock = ProgressClock::default();
        let first = clock.awaiting_details("uid", 1);
        assert!(
            clock.awaiting_details("uid", 1) >= first,
            "the wait keeps its start"
        );
        clock.settled("uid");
        assert!(clock.awaiting_details("uid", 1) < DETAILS);
    }

    #[test]
    fn the_clock_restarts_for_a_new_generation() {
        let clock = ProgressClock::default();
        let first = clock.age("uid", 1);
        assert!(first < GRACE);
        assert!(clock.age("uid", 1) >= first);
        clock.reported("uid", 1);
        assert!(clock.clock("uid", 1).since_report.is_some());
        clock.settled("uid");
        assert!(clock.age("uid", 2) < GRACE);
        assert_eq!(clock.clock("uid", 2).since_report, None);
    }
}
