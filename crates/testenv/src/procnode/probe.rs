//! Probe state machines (startup, liveness, readiness), as the kubelet's prober workers keep
//! them.
//!
//! Contract:
//! - A probe's result starts at its kind's initial value: readiness `Failure` (not ready until
//!   proven), liveness `Success`, startup `Unknown`.
//! - A result flips only after `successThreshold` consecutive successes or `failureThreshold`
//!   consecutive failures; a run of the other outcome resets the count.
//! - [`Tracker::record`] returns the new result when it changed, so the caller acts only on
//!   transitions (a liveness or startup `Failure` kills the container; readiness changes the
//!   container's `ready`).
//! - Timing: the first run is `initialDelaySeconds` after the container started, then every
//!   `periodSeconds` ([`Timing`]). A restarted container gets fresh trackers.
//! - Pure: the probe runners (`probe_run`) perform the checks.

use std::time::Duration;

use k8s_openapi::api::core::v1::Probe;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Gates the other two; failing it restarts the container.
    Startup,
    /// Failing it restarts the container.
    Liveness,
    /// Decides the container's `ready`.
    Readiness,
}

impl Kind {
    /// The kubelet's name in events ("Liveness probe failed: …").
    pub fn title(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }
}

/// A probe's current verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not decided yet (startup before its first conclusion).
    Unknown,
    /// Passing.
    Success,
    /// Failing.
    Failure,
}

/// The thresholds and timing of one probe, with Kubernetes' defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Before the first run.
    pub initial_delay: Duration,
    /// Between runs.
    pub period: Duration,
    /// Per run.
    pub timeout: Duration,
    /// Consecutive successes to pass (1 for liveness and startup).
    pub success_threshold: u32,
    /// Consecutive failures to fail.
    pub failure_threshold: u32,
}

impl Timing {
    /// Reads a probe spec: defaults initialDelay 0, period 10 s, timeout 1 s, thresholds 1 / 3.
    pub fn of(probe: &Probe) -> Self {
        let secs = |v: Option<i32>, default: i32, min: i32| {
            Duration::from_secs(v.unwrap_or(default).max(min) as u64)
        };
        let count = |v: Option<i32>, default: i32| v.unwrap_or(default).max(1) as u32;
        Self {
            initial_delay: secs(probe.initial_delay_seconds, 0, 0),
            period: secs(probe.period_seconds, 10, 1),
            timeout: secs(probe.timeout_seconds, 1, 1),
            success_threshold: count(probe.success_threshold, 1),
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// The consecutive-result counter of one probe of one container instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracker {
    kind: Kind,
    timing: Timing,
    verdict: Verdict,
    successes: u32,
    failures: u32,
}

impl Tracker {
    /// A tracker at the kind's initial verdict.
    pub fn new(kind: Kind, timing: Timing) -> Self {
        let verdict = match kind {
            Kind::Startup => Verdict::Unknown,
            Kind::Liveness => Verdict::Success,
            Kind::Readiness => Verdict::Failure,
        };
        Self {
            kind,
            timing,
            verdict,
            successes: 0,
            failures: 0,
        }
    }

    /// Records one run's outcome; returns the new verdict when it changed.
    pub fn record(&mut self, passed: bool) -> Option<Verdict> {
        let success_threshold = match self.kind {
            // Kubernetes validation forces 1 for these; be as lenient as the kubelet.
            Kind::Liveness | Kind::Startup => 1,
            Kind::Readiness => self.timing.success_threshold,
        };
        let next = if passed {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            (self.successes >= success_threshold).then_some(Verdict::Success)
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            (self.failures >= self.timing.failure_threshold).then_some(Verdict::Failure)
        };
        match next {
            Some(v) if v != self.verdict => {
                self.verdict = v;
                Some(v)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(success: u32, failure: u32) -> Timing {
        Timing {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    /// (kind, success threshold, failure threshold, outcomes, transitions expected per run)
    #[test]
    fn verdicts_flip_only_at_the_thresholds() {
        use Verdict::*;
        type Case<'a> = (Kind, u32, u32, &'a [bool], &'a [Option<Verdict>]);
        let cases: &[Case] = &[
            // Readiness starts failing; one success makes it ready with threshold 1.
            (Kind::Readiness, 1, 3, &[true], &[Some(Success)]),
            // Threshold 2: the second consecutive success counts; a failure in between resets.
            (
                Kind::Readiness,
                2,
                3,
                &[true, false, true, true],
                &[None, None, None, Some(Success)],
            ),
            // Ready, then three failures make it unready (not two).
            (
                Kind::Readiness,
                1,
                3,
                &[true, false, false, false],
                &[Some(Success), None, None, Some(Failure)],
            ),
            // Liveness starts passing: successes change nothing; the third failure flips it.
            (
                Kind::Liveness,
                1,
                3,
                &[true, false, false, true, false, false, false],
                &[None, None, None, None, None, None, Some(Failure)],
            ),
            // Liveness successThreshold is always 1.
            (
                Kind::Liveness,
                5,
                1,
                &[false, true],
                &[Some(Failure), Some(Success)],
            ),
            // Startup is undecided until either threshold.
            (Kind::Startup, 1, 2, &[false, true], &[None, Some(Success)]),
            (Kind::Startup, 1, 2, &[false, false], &[None, Some(Failure)]),
        ];
        for (i, (kind, s, f, outcomes, want)) in cases.iter().enumerate() {
            let mut t = Tracker::new(*kind, timing(*s, *f));
            let got: Vec<_> = outcomes.iter().map(|o| t.record(*o)).collect();
            assert_eq!(&got, want, "case {i} ({kind:?})");
        }
    }

    #[test]
    fn timing_defaults_follow_kubernetes() {
        let t = Timing::of(&Probe::default());
        assert_eq!(t.initial_delay, Duration::ZERO);
        assert_eq!(t.period, Duration::from_secs(10));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!((t.success_threshold, t.failure_threshold), (1, 3));
        let t = Timing::of(&Probe {
            period_seconds: Some(2),
            failure_threshold: Some(1),
            initial_delay_seconds: Some(5),
            ..Probe::default()
        });
        assert_eq!(t.period, Duration::from_secs(2));
        assert_eq!(t.initial_delay, Duration::from_secs(5));
        assert_eq!(t.failure_threshold, 1);
    }
}
