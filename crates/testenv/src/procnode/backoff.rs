//! Crash-loop back-off per container, as the kubelet computes it (`flowcontrol.Backoff` used by
//! `doBackOff`).
//!
//! Contract:
//! - The first restart after a container exits is immediate; each later one waits `initial`,
//!   then twice as long, up to `max`, counted from when the container last finished.
//! - A container that stays up (no exit recorded) for more than `2 × max` since the last
//!   recorded exit starts over with an immediate restart.
//! - Pure: times are passed in, nothing sleeps here.

use std::time::{Duration, Instant};

/// The back-off parameters (kubelet defaults: 10 s, doubling, at most 300 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Delay before the second restart.
    pub initial: Duration,
    /// Upper bound of the delay.
    pub max: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
        }
    }
}

/// The back-off state of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackOff {
    /// (current delay, finish time of the exit it was computed for)
    entry: Option<(Duration, Instant)>,
}

impl BackOff {
    /// When the container that finished at `finished` may be started again, recording the
    /// exit. Call once per exit.
    pub fn next_start(&mut self, policy: Policy, finished: Instant) -> Instant {
        let fresh = |(_, last): (Duration, Instant)| {
            finished.saturating_duration_since(last) > policy.max * 2
        };
        match self.entry {
            None => {
                self.entry = Some((policy.initial, finished));
                finished
            }
            Some(e) if fresh(e) => {
                self.entry = Some((policy.initial, finished));
                finished
            }
            Some((delay, _)) => {
                self.entry = Some(((delay * 2).min(policy.max), finished));
                finished + delay
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_from_zero_to_the_cap_and_reset_after_a_quiet_spell() {
        let policy = Policy {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(40),
        };
        let t0 = Instant::now();
        let mut b = BackOff::default();
        let s = |n: u64| Duration::from_secs(n);
        // (finished at, expected wait before the restart)
        let cases = [
            (0, 0),   // first exit: restart at once
            (1, 10),  // second: 10 s
            (12, 20), // third: 20 s
            (33, 40), // fourth: 40 s (cap)
            (80, 40), // stays at the cap
            (121, 40),
            (202, 0), // more than 2 × max after the last exit: fresh start
            (203, 10),
        ];
        for (finished, wait) in cases {
            let at = t0 + s(finished);
            assert_eq!(
                b.next_start(policy, at).duration_since(at),
                s(wait),
                "exit at {finished}s"
            );
        }
    }
}
