//! Sub-agent rebuild history (reference §4.2), persisted on the CocoonSet in the
//! `cocoonset.cocoonstack.io/rebuild-history` annotation. Pure.
//!
//! Contract:
//! - Wire format: a JSON object keyed by slot number (as a string), each value
//!   `{"count": n, "lastDeleted": "<RFC 3339>"}`. A missing, corrupt or `null` annotation reads
//!   as an empty history; an entry whose key is not an integer is dropped.
//! - Counts are cumulative for the life of the set (never reset on success); only
//!   [`RebuildHistory::forget`] (dead-letter + drift) clears a slot.
//! - Writing drops entries for slots outside `1..=replicas`.
//! - A terminal sub-agent is rebuilt at most [`MAX_REBUILDS`] times; before each rebuild the
//!   back-off for the prior count ([`RebuildHistory::backoff`]) must have passed since
//!   `lastDeleted`.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Rebuilds allowed per slot before its pod is left in dead-letter.
pub const MAX_REBUILDS: u32 = 4;

/// Rebuild record of one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RebuildEntry {
    /// Rebuilds so far.
    pub count: u32,
    /// When the slot's pod was last deleted for a rebuild.
    pub last_deleted: Timestamp,
}

/// Rebuild records by slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RebuildHistory(pub BTreeMap<i32, RebuildEntry>);

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEntry {
    count: u32,
    last_deleted: String,
}

impl RebuildHistory {
    /// Reads the annotation; absent, corrupt or `null` gives an empty history.
    pub fn parse(annotation: Option<&str>) -> Self {
        let wire: Option<BTreeMap<String, WireEntry>> = annotation
            .filter(|a| !a.trim().is_empty())
            .and_then(|a| serde_json::from_str(a).ok())
            .flatten();
        let Some(wire) = wire else {
            return Self::default();
        };
        let mut entries = BTreeMap::new();
        for (slot, e) in wire {
            let Ok(slot) = slot.parse::<i32>() else {
                continue;
            };
            let Ok(last_deleted) = e.last_deleted.parse::<Timestamp>() else {
                return Self::default();
            };
            entries.insert(
                slot,
                RebuildEntry {
                    count: e.count,
                    last_deleted,
                },
            );
        }
        RebuildHistory(entries)
    }

    /// The annotation value, without entries for slots outside `1..=replicas`.
    pub fn to_annotation(&self, replicas: i32) -> String {
        let wire: BTreeMap<String, WireEntry> = self
            .0
            .iter()
            .filter(|(slot, _)| (1..=replicas).contains(*slot))
            .map(|(slot, e)| {
                let entry = WireEntry {
                    count: e.count,
                    last_deleted: e.last_deleted.to_string(),
                };
                (slot.to_string(), entry)
            })
            .collect();
        serde_json::to_string(&wire).unwrap_or_else(|_| "{}".into())
    }

    /// Back-off before the next rebuild after `count` earlier ones: 0 s, 1 s, 5 s, then 30 s.
    pub fn backoff(count: u32) -> Duration {
        Duration::from_secs(match count {
            0 => 0,
            1 => 1,
            2 => 5,
            _ => 30,
        })
    }

    /// Rebuilds so far of `slot`.
    pub fn count(&self, slot: i32) -> u32 {
        self.0.get(&slot).map_or(0, |e| e.count)
    }

    /// Whether `slot` used up its rebuilds (its pod goes to dead-letter).
    pub fn exhausted(&self, slot: i32) -> bool {
        self.count(slot) >= MAX_REBUILDS
    }

    /// How long `slot` must still wait at `now` before its next rebuild (zero: go).
    pub fn wait(&self, slot: i32, now: Timestamp) -> Duration {
        let Some(e) = self.0.get(&slot) else {
            return Duration::ZERO;
        };
        let elapsed = now.duration_since(e.last_deleted);
        let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
        Self::backoff(e.count).saturating_sub(elapsed)
    }

    /// Records a rebuild of `slot` at `now`; returns the new count (the attempt number).
    pub fn record(&mut self, slot: i32, now: Timestamp) -> u32 {
        let count = self.count(slot) + 1;
        let entry = RebuildEntry {
            count,
            last_deleted: now,
        };
        self.0.insert(slot, entry);
        count
    }

    /// Clears `slot` (fresh budget); returns whether it had an entry.
    pub fn forget(&mut self, slot: i32) -> bool {
        self.0.remove(&slot).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn history(entries: &[(i32, u32, &str)]) -> RebuildHistory {
        let map = entries
            .iter()
            .map(|(slot, count, at)| {
                (
                    *slot,
                    RebuildEntry {
                        count: *count,
                        last_deleted: t(at),
                    },
                )
            })
            .collect();
        RebuildHistory(map)
    }

    #[test]
    fn json_round_trip() {
        let h = history(&[
            (1, 2, "2026-08-01T10:00:00Z"),
            (3, 1, "2026-08-01T10:00:05.25Z"),
        ]);
        let json = h.to_annotation(3);
        let wire: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(wire["1"]["count"], 2);
        assert_eq!(wire["1"]["lastDeleted"], "2026-08-01T10:00:00Z");
        assert_eq!(RebuildHistory::parse(Some(&json)), h);
    }

    #[test]
    fn reads_what_the_go_operator_wrote() {
        let json = r#"{"2":{"count":4,"lastDeleted":"2026-08-01T10:00:00.123456789+02:00"}}"#;
        let h = RebuildHistory::parse(Some(json));
        assert_eq!(h.count(2), 4);
        assert!(h.exhausted(2));
        assert_eq!(h.0[&2].last_deleted, t("2026-08-01T08:00:00.123456789Z"));
    }

    #[test]
    fn stale_slots_are_dropped_on_write() {
        let at = "2026-08-01T10:00:00Z";
        let h = history(&[(1, 1, at), (2, 1, at), (5, 3, at)]);
        let kept = RebuildHistory::parse(Some(&h.to_annotation(2)));
        assert_eq!(kept.0.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(h.to_annotation(0), "{}");
    }

    #[test]
    fn backoff_schedule() {
        let secs: Vec<u64> = (0..6)
            .map(|c| RebuildHistory::backoff(c).as_secs())
            .collect();
        assert_eq!(secs, [0, 1, 5, 30, 30, 30]);
    }

    #[test]
    fn corrupt_or_null_annotation_is_empty() {
        for raw in [
            None,
            Some(""),
            Some("null"),
            Some("{"),
            Some("[]"),
            Some(r#"{"1":{"count":"x"}}"#),
            Some(r#"{"1":{"count":1,"lastDeleted":"yesterday"}}"#),
        ] {
            assert_eq!(
                RebuildHistory::parse(raw),
                RebuildHistory::default(),
                "{raw:?}"
            );
        }
        let junk_key = r#"{"x":{"count":1,"lastDeleted":"2026-08-01T10:00:00Z"},"1":{"count":2,"lastDeleted":"2026-08-01T10:00:00Z"}}"#;
        assert_eq!(
            RebuildHistory::parse(Some(junk_key))
                .0
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            [1]
        );
    }

    #[test]
    fn record_wait_and_forget() {
        let mut h = RebuildHistory::default();
        let t0 = t("2026-08-01T10:00:00Z");
        assert_eq!(h.wait(1, t0), Duration::ZERO, "first rebuild goes at once");
        assert_eq!(h.record(1, t0), 1);
        assert_eq!(h.wait(1, t0), Duration::from_secs(1));
        assert_eq!(
            h.wait(1, t("2026-08-01T10:00:00.4Z")),
            Duration::from_millis(600)
        );
        assert_eq!(h.wait(1, t("2026-08-01T10:00:02Z")), Duration::ZERO);
        assert_eq!(h.record(1, t0), 2);
        assert_eq!(h.wait(1, t("2026-08-01T10:00:03Z")), Duration::from_secs(2));
        assert_eq!(
            h.wait(1, t("2026-08-01T09:59:00Z")),
            Duration::from_secs(5),
            "clock skew"
        );
        h.record(1, t0);
        h.record(1, t0);
        assert!(h.exhausted(1));
        assert!(h.forget(1));
        assert!(!h.forget(1));
        assert_eq!(h.count(1), 0);
    }
}
