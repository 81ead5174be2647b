//! Counters of what the simulator did, for benchmarks and test assertions. Shared by every
//! worker through an `Arc`; [`Stats`] is a plain snapshot of them.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the simulator's counters (monotonic since [`crate::Simulator::start`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// VMs created for a pod (fresh boots and restores from a snapshot).
    pub vms_created: u64,
    /// VMs hibernated (snapshot pushed as `:hibernate`, VM removed).
    pub vms_hibernated: u64,
    /// Hibernated VMs woken in place (restored from `:hibernate`).
    pub vms_woken: u64,
    /// VMs removed because their pod was deleted.
    pub vms_deleted: u64,
    /// Lifecycle `failed` writes (faults, missing snapshots, registry errors).
    pub failures: u64,
    /// Tags pushed to the registry (`:hibernate` and `:latest`).
    pub tags_pushed: u64,
    /// Tags pulled from the registry (found or not).
    pub tags_pulled: u64,
    /// Tags deleted from the registry (only by the failed-hibernation fault).
    pub tags_deleted: u64,
    /// Pod annotation patches sent to the API server.
    pub patches: u64,
}

/// What a worker counts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    Created,
    Hibernated,
    Woken,
    Deleted,
    Failed,
    Pushed,
    Pulled,
    TagDeleted,
    Patched,
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    values: [AtomicU64; 9],
    sequence: AtomicU64,
}

impl Counters {
    /// Adds one to `c`.
    pub(crate) fn bump(&self, c: Counter) {
        self.values[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A number never handed out before by this simulator (VM ids, snapshot payloads).
    pub(crate) fn next_sequence(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A snapshot of every counter.
    pub(crate) fn snapshot(&self) -> Stats {
        let v = |c: Counter| self.values[c as usize].load(Ordering::Relaxed);
        Stats {
            vms_created: v(Counter::Created),
            vms_hibernated: v(Counter::Hibernated),
            vms_woken: v(Counter::Woken),
            vms_deleted: v(Counter::Deleted),
            failures: v(Counter::Failed),
            tags_pushed: v(Counter::Pushed),
            tags_pulled: v(Counter::Pulled),
            tags_deleted: v(Counter::TagDeleted),
            patches: v(Counter::Patched),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_land_in_their_own_fields() {
        let c = Counters::default();
        c.bump(Counter::Created);
        c.bump(Counter::Pushed);
        c.bump(Counter::Pushed);
        c.bump(Counter::Patched);
        let s = c.snapshot();
        assert_eq!(s.vms_created, 1);
        assert_eq!(s.tags_pushed, 2);
        assert_eq!(s.patches, 1);
        assert_eq!(s.vms_hibernated + s.vms_woken + s.tags_pulled, 0);
        assert_eq!(c.next_sequence(), 1);
        assert_eq!(c.next_sequence(), 2);
    }
}
