//! What a controller last wrote per object, for a pass whose cached copy has not caught up
//! with that write yet.
//!
//! Contract:
//! - [`Written::record`] notes, after a successful write, a value standing for what was
//!   written (the status, or the whole object as stored), the `resourceVersion` of the copy
//!   the pass decided it on and the one the write produced.
//! - [`Written::lagging`] gives that value back while the cached copy carries a
//!   `resourceVersion` from before the last write: the one a write was decided on, or one an
//!   earlier write of a quick succession produced (the cache may show the first of two writes
//!   before the second). The pass then works from what is stored, not from its stale copy, and
//!   does not write the same thing twice or repeat the Events of a transition. The last
//!   write's own `resourceVersion`, or any other one (a newer object), means the cache has
//!   moved on: the note is dropped and the cache rules. `resourceVersion`s are compared for
//!   equality only.
//! - Notes are in memory, by uid: a restarted process starts without them (a lagging copy
//!   then costs at most one repeated write). [`Written::forget`] drops a deleted object's.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

/// See the module contract.
pub struct Written<V>(Mutex<HashMap<String, Note<V>>>);

struct Note<V> {
    /// `resourceVersion`s from before the last write.
    before: HashSet<String>,
    /// The last write's.
    last: String,
    value: V,
}

impl<V> Default for Written<V> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<V: Clone> Written<V> {
    /// What was last written for object `uid` when its cached copy (at `rv`) has not shown the
    /// write yet.
    pub fn lagging(&self, uid: &str, rv: &str) -> Option<V> {
        let mut notes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match notes.get(uid) {
            Some(note) if note.before.contains(rv) => Some(note.value.clone()),
            Some(_) => {
                notes.remove(uid);
                None
            }
            None => None,
        }
    }

    /// `value` was written for object `uid`, decided on its copy at `seen`; the write left it
    /// at `produced`.
    pub fn record(&self, uid: &str, seen: &str, produced: &str, value: V) {
        let mut notes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut before = match notes.remove(uid) {
            // A write decided on a copy from before the previous write extends the chain.
            Some(note) if note.before.contains(seen) || note.last == seen => {
                let mut before = note.before;
                before.insert(note.last);
                before
            }
            _ => HashSet::new(),
        };
        before.insert(seen.to_owned());
        let note = Note {
            before,
            last: produced.to_owned(),
            value,
        };
        notes.insert(uid.to_owned(), note);
    }

    /// Object `uid` is gone.
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

    #[test]
    fn a_copy_older_than_the_write_sees_the_write_until_the_cache_moves_on() {
        let written = Written::default();
        assert_eq!(written.lagging("u1", "10"), None, "nothing written yet");
        written.record("u1", "10", "11", "running");
        assert_eq!(written.lagging("u1", "10"), Some("running"));
        assert_eq!(
            written.lagging("u1", "10"),
            Some("running"),
            "until the cache moves on"
        );
        assert_eq!(written.lagging("u2", "10"), None, "per object");
        assert_eq!(written.lagging("u1", "11"), None, "caught up");
        assert_eq!(
            written.lagging("u1", "10"),
            None,
            "the note is dropped once moved on"
        );
    }

    #[test]
    fn a_cache_showing_the_first_of_two_quick_writes_still_lags_the_second() {
        let written = Written::default();
        written.record("u1", "10", "11", "running");
        // The second write was decided on the same stale copy (the note standing in for it).
        written.record("u1", "10", "12", "running with addresses");
        assert_eq!(written.lagging("u1", "11"), Some("running with addresses"));
        assert_eq!(written.lagging("u1", "10"), Some("running with addresses"));
        // Decided on the first write's copy: the chain goes on.
        written.record("u1", "11", "13", "ready");
        assert_eq!(written.lagging("u1", "12"), Some("ready"));
        assert_eq!(written.lagging("u1", "13"), None, "caught up");
        // A write decided on an unrelated (newer) copy starts a new chain.
        written.record("u1", "10", "11", "a");
        written.record("u1", "20", "21", "b");
        assert_eq!(written.lagging("u1", "11"), None);
    }

    #[test]
    fn a_forgotten_object_has_no_note() {
        let written = Written::default();
        written.record("u1", "10", "11", 1);
        written.forget("u1");
        assert_eq!(written.lagging("u1", "10"), None);
    }
}
