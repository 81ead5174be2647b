//! The status this process last wrote for each set, for a pass whose cached set has not
//! caught up with that write yet.
//!
//! Contract:
//! - [`WrittenStatus::record`] notes, after a successful status write, the status written, the
//!   `resourceVersion` of the copy the pass decided it on and the one the write produced.
//! - [`WrittenStatus::lagging`] gives that status back while the cached set carries a
//!   `resourceVersion` from before the last write: the one a write was decided on, or one an
//!   earlier write of a quick succession produced (the cache may show the first of two writes
//!   before the second). The pass then compares against what is stored, not against its
//!   stale copy, and does not write the same status twice. The last write's own
//!   `resourceVersion`, or any other one (a newer object), means the cache has moved on: the
//!   note is dropped. `resourceVersion`s are compared for equality only.
//! - Notes are in memory: a restarted process starts without them (a lagging copy then costs
//!   at most one repeated write). [`WrittenStatus::forget`] drops a deleted set's note.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use kube::ResourceExt;

use crate::crd::{CocoonSet, CocoonSetStatus};

/// See the module contract.
#[derive(Default)]
pub struct WrittenStatus(Mutex<HashMap<String, Note>>);

struct Note {
    /// `resourceVersion`s from before the last write.
    before: HashSet<String>,
    /// The last write's.
    last: String,
    status: CocoonSetStatus,
}

impl WrittenStatus {
    /// The status written for `set` when its cached copy has not shown the write yet.
    pub fn lagging(&self, set: &CocoonSet) -> Option<CocoonSetStatus> {
        let uid = set.metadata.uid.as_deref()?;
        let rv = set.resource_version()?;
        let mut notes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match notes.get(uid) {
            Some(note) if note.before.contains(&rv) => Some(note.status.clone()),
            Some(_) => {
                notes.remove(uid);
                None
            }
            None => None,
        }
    }

    /// `status` was written, decided on the copy `set`; the write left the set at `produced`.
    pub fn record(&self, set: &CocoonSet, status: &CocoonSetStatus, produced: &CocoonSet) {
        let uid = set.metadata.uid.clone();
        let (Some(uid), Some(seen), Some(last)) =
            (uid, set.resource_version(), produced.resource_version())
        else {
            return;
        };
        let mut notes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut before = match notes.remove(&uid) {
            // A write decided on a copy from before the previous write extends the chain.
            Some(note) if note.before.contains(&seen) || note.last == seen => {
                let mut before = note.before;
                before.insert(note.last);
                before
            }
            _ => HashSet::new(),
        };
        before.insert(seen);
        let note = Note {
            before,
            last,
            status: status.clone(),
        };
        notes.insert(uid, note);
    }

    /// Set `uid` is gone.
    pub fn forget(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::CocoonSetPhase;

    fn set(rv: &str, phase: Option<CocoonSetPhase>) -> CocoonSet {
        let mut s: CocoonSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "cocoonset.cocoonstack.io/v1",
            "kind": "CocoonSet",
            "metadata": {"name": "a", "uid": "u1", "resourceVersion": rv},
            "spec": {"agent": {"image": "img"}},
        }))
        .expect("set");
        s.status = phase.map(|p| CocoonSetStatus {
            phase: Some(p),
            ..Default::default()
        });
        s
    }

    #[test]
    fn a_copy_older_than_the_write_sees_the_write_until_the_cache_moves_on() {
        let written = WrittenStatus::default();
        let old = set("10", Some(CocoonSetPhase::Pending));
        assert_eq!(written.lagging(&old), None, "nothing written yet");
        let running = status(CocoonSetPhase::Running);
        written.record(&old, &running, &set("11", None));
        assert_eq!(written.lagging(&old), Some(running.clone()));
        assert_eq!(
            written.lagging(&old),
            Some(running),
            "until the cache moves on"
        );
        let caught_up = set("11", Some(CocoonSetPhase::Running));
        assert_eq!(written.lagging(&caught_up), None);
        assert_eq!(
            written.lagging(&old),
            None,
            "the note is dropped once moved on"
        );
    }

    #[test]
    fn a_cache_showing_the_first_of_two_quick_writes_still_lags_the_second() {
        let written = WrittenStatus::default();
        let old = set("10", Some(CocoonSetPhase::Suspended));
        written.record(&old, &status(CocoonSetPhase::Running), &set("11", None));
        // The second write was decided on the same stale copy (the note standing in for it).
        let details = CocoonSetStatus {
            ready_agents: 3,
            ..status(CocoonSetPhase::Running)
        };
        written.record(&old, &details, &set("12", None));
        let first = set("11", Some(CocoonSetPhase::Running));
        assert_eq!(written.lagging(&first), Some(details.clone()));
        assert_eq!(written.lagging(&old), Some(details));
        assert_eq!(written.lagging(&set("12", None)), None, "caught up");
        // A write decided on an unrelated (newer) copy starts a new chain.
        written.record(
            &set("20", None),
            &status(CocoonSetPhase::Scaling),
            &set("21", None),
        );
        assert_eq!(written.lagging(&first), None);
    }

    #[test]
    fn a_forgotten_set_has_no_note() {
        let written = WrittenStatus::default();
        let old = set("10", None);
        written.record(&old, &CocoonSetStatus::default(), &set("11", None));
        written.forget("u1");
        assert_eq!(written.lagging(&old), None);
    }

    fn status(phase: CocoonSetPhase) -> CocoonSetStatus {
        CocoonSetStatus {
            phase: Some(phase),
            ..Default::default()
        }
    }
}
