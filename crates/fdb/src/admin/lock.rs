//! The global lock's semantics as pure decisions (reference §5), shared by the real lock
//! client (which carries them out inside one FoundationDB transaction) and tests.
//!
//! [`take`]: no record ⇒ write (me, now, now+duration); my ID on the deny list ⇒ refuse, even
//! when I hold the lock; the record expired or its owner is denied ⇒ overwrite with my ID,
//! keeping the old start (upstream's quirk); I own it ⇒ extend the end, keep the start;
//! anyone else ⇒ refuse, naming the owner and the expiry. An unreadable record is an error.
//!
//! [`release`]: only my own, already started, unexpired lock is cleared.

/// The lock record: `(owner, start, end)` in Unix seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRecord {
    /// The owner's lock ID.
    pub owner: String,
    /// When it was taken.
    pub start: i64,
    /// When it expires.
    pub end: i64,
}

/// What taking the lock decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TakeDecision {
    /// Write this record.
    Write(LockRecord),
    /// I am on the deny list.
    Denied,
    /// Someone else holds it.
    Held(LockRecord),
}

/// Decides a take (see the module docs). `current` is the record, `me_denied` whether my ID
/// is on the deny list, `owner_denied` whether the current owner's is.
pub fn take(
    current: Option<&LockRecord>,
    me: &str,
    me_denied: bool,
    owner_denied: bool,
    now: i64,
    duration_secs: i64,
) -> TakeDecision {
    let end = now + duration_secs;
    let Some(cur) = current else {
        return TakeDecision::Write(LockRecord {
            owner: me.to_owned(),
            start: now,
            end,
        });
    };
    if me_denied {
        return TakeDecision::Denied;
    }
    if cur.end < now || owner_denied || cur.owner == me {
        // Upstream keeps the old start when it takes over or extends (a start of 0 would be
        // replaced by now).
        let start = if cur.start == 0 { now } else { cur.start };
        return TakeDecision::Write(LockRecord {
            owner: me.to_owned(),
            start,
            end,
        });
    }
    TakeDecision::Held(cur.clone())
}

/// Whether a release clears the record.
pub fn release(current: Option<&LockRecord>, me: &str, now: i64) -> bool {
    current.is_some_and(|c| c.owner == me && c.start <= now && c.end >= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(owner: &str, start: i64, end: i64) -> LockRecord {
        LockRecord {
            owner: owner.into(),
            start,
            end,
        }
    }

    #[test]
    fn take_table() {
        let now = 1000;
        let d = 600;
        let cases = [
            // (current, me_denied, owner_denied, want)
            (
                None,
                false,
                false,
                TakeDecision::Write(rec("a", 1000, 1600)),
            ),
            (None, true, false, TakeDecision::Write(rec("a", 1000, 1600))),
            (
                Some(rec("a", 900, 1200)),
                false,
                false,
                TakeDecision::Write(rec("a", 900, 1600)),
            ),
            (Some(rec("a", 900, 1200)), true, false, TakeDecision::Denied),
            (
                Some(rec("b", 900, 1200)),
                false,
                false,
                TakeDecision::Held(rec("b", 900, 1200)),
            ),
            (
                Some(rec("b", 900, 999)),
                false,
                false,
                TakeDecision::Write(rec("a", 900, 1600)),
            ),
            (
                Some(rec("b", 900, 1200)),
                false,
                true,
                TakeDecision::Write(rec("a", 900, 1600)),
            ),
            (Some(rec("b", 900, 999)), true, false, TakeDecision::Denied),
            (
                Some(rec("b", 0, 1200)),
                false,
                true,
                TakeDecision::Write(rec("a", 1000, 1600)),
            ),
        ];
        for (current, me_denied, owner_denied, want) in cases {
            assert_eq!(
                take(current.as_ref(), "a", me_denied, owner_denied, now, d),
                want,
                "{current:?} me_denied={me_denied} owner_denied={owner_denied}"
            );
        }
    }

    #[test]
    fn release_table() {
        assert!(release(Some(&rec("a", 900, 1200)), "a", 1000));
        assert!(!release(Some(&rec("b", 900, 1200)), "a", 1000));
        assert!(
            !release(Some(&rec("a", 1100, 1200)), "a", 1000),
            "not started yet"
        );
        assert!(!release(Some(&rec("a", 900, 999)), "a", 1000), "expired");
        assert!(!release(None, "a", 1000));
    }
}
