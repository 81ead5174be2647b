//! Passwords: how the default user is configured, and password rotation without a lockout.
//!
//! Contract (pure):
//! - Passwords are never written in clear except as `masterauth` (Redis needs it to
//!   authenticate to its primary): the default user accepts SHA-256 hashes (`#<hex>`), both in
//!   redis.conf ([`default_user_rules`]) and in the ACL file ([`acl_file`], which keeps the
//!   user's own `user default` line and adds the hashes to it, or adds one). A running
//!   instance changes them with `ACL SETUSER default #<new>` / `!<old>` ([`add_args`],
//!   [`remove_args`]): nothing else about the user changes and no client is disconnected.
//! - [`Rotation::next`] is one step of a rotation. A new projected password is accepted at
//!   once **in addition to** the old ones (two passwords on the default user), so clients with
//!   either work. `masterauth` moves to the new password only once the instance this one
//!   replicates from reports that it accepts it (its [`generation`]); a primary moves at once.
//!   The old passwords are dropped only when every peer reports the new generation, so no
//!   replica is ever left with a `masterauth` its primary refuses.
//! - [`Rotation::generation`] is what the instance reports: the generation of the password
//!   it both accepts and uses as `masterauth`. A generation is a short salted hash: it
//!   identifies a password without revealing it.

use sha2::{Digest, Sha256};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a password in hex, as Redis ACL `#<hash>` rules take it.
pub fn hash(password: &str) -> String {
    hex(&Sha256::digest(password.as_bytes()))
}

/// The generation of a password: 12 hex digits of a salted SHA-256 (not the ACL hash).
pub fn generation(password: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"redis.io instance auth generation\0");
    h.update(password.as_bytes());
    hex(&h.finalize()[..6])
}

/// The default user's rules accepting `hashes` (full access, as `requirepass` gives).
pub fn default_user_rules(hashes: &[String]) -> String {
    let mut r = String::from("on");
    for h in hashes {
        r.push_str(" #");
        r.push_str(h);
    }
    r.push_str(" ~* &* +@all");
    r
}

/// The live `ACL SETUSER default #<hash>…` adding `hashes` to the default user's passwords
/// (nothing else about the user changes, and no client is disconnected).
pub fn add_args(hashes: &[String]) -> Vec<String> {
    let mut a = vec!["ACL".to_owned(), "SETUSER".to_owned(), "default".to_owned()];
    a.extend(hashes.iter().map(|h| format!("#{h}")));
    a
}

/// The live `ACL SETUSER default !<hash>` removing one password.
pub fn remove_args(hash: &str) -> Vec<String> {
    ["ACL", "SETUSER", "default"]
        .map(str::to_owned)
        .into_iter()
        .chain([format!("!{hash}")])
        .collect()
}

/// The ACL file: the user's ACL with the default user accepting `hashes` (added to the
/// user's own `user default` line, or a full-access default user when there is none).
pub fn acl_file(user_acl: &str, hashes: &[String]) -> String {
    let extra: String = hashes.iter().map(|h| format!(" #{h}")).collect();
    let mut out = String::new();
    let mut has_default = false;
    for line in user_acl.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let mut words = t.split_whitespace();
        if words.next() == Some("user") && words.next() == Some("default") {
            has_default = true;
            out.push_str(t);
            out.push_str(&extra);
        } else {
            out.push_str(t);
        }
        out.push('\n');
    }
    if !has_default {
        out.push_str(&format!("user default {}\n", default_user_rules(hashes)));
    }
    out
}

/// Where this instance's replication comes from, for choosing `masterauth`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// Nobody in this cluster: it is the primary, or it follows an external source
    /// (replica mode), so `masterauth` towards peers can be the newest password.
    Me,
    /// A peer that reports this generation (`None`: not known right now).
    Peer(Option<String>),
}

/// The passwords of one instance during and between rotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// The newest projected password.
    pub current: String,
    /// Older passwords still accepted, newest first.
    pub older: Vec<String>,
    /// Hashes still accepted whose passwords this process never saw (kept across a restart).
    pub older_hashes: Vec<String>,
    /// The password used as `masterauth` towards peers.
    pub masterauth: String,
}

impl Rotation {
    /// A fresh start with `password`, still accepting `kept_hashes` from before the restart.
    pub fn start(password: &str, kept_hashes: &[String]) -> Self {
        let h = hash(password);
        Self {
            current: password.to_owned(),
            older: Vec::new(),
            older_hashes: kept_hashes.iter().filter(|k| **k != h).cloned().collect(),
            masterauth: password.to_owned(),
        }
    }

    /// Every hash the default user accepts, newest first, without repeats.
    pub fn accepted(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let all = std::iter::once(hash(&self.current))
            .chain(self.older.iter().map(|p| hash(p)))
            .chain(self.older_hashes.iter().cloned());
        for h in all {
            if !out.contains(&h) {
                out.push(h);
            }
        }
        out
    }

    /// Passwords to try, newest first, for this instance's own connections.
    pub fn candidates(&self) -> Vec<String> {
        std::iter::once(self.current.clone())
            .chain(self.older.iter().cloned())
            .collect()
    }

    /// What this instance reports (see the module contract).
    pub fn generation(&self) -> String {
        generation(&self.masterauth)
    }

    /// Whether older passwords are still accepted.
    pub fn rotating(&self) -> bool {
        !self.older.is_empty() || !self.older_hashes.is_empty()
    }

    /// One step: `projected` is the password in the projected Secret now; `upstream` says
    /// what the instance this one replicates from accepts; `peers_on_current` whether every
    /// peer reports the generation of `current`.
    pub fn next(&self, projected: &str, upstream: &Upstream, peers_on_current: bool) -> Self {
        let mut r = self.clone();
        if !projected.is_empty() && projected != r.current {
            let old = std::mem::replace(&mut r.current, projected.to_owned());
            r.older.retain(|p| *p != old && p != projected);
            r.older.insert(0, old);
        }
        r.masterauth = match upstream {
            Upstream::Me => r.current.clone(),
            Upstream::Peer(Some(g)) => r
                .candidates()
                .into_iter()
                .find(|p| generation(p) == *g)
                .unwrap_or_else(|| r.masterauth.clone()),
            Upstream::Peer(None) => r.masterauth.clone(),
        };
        if peers_on_current && r.masterauth == r.current {
            r.older.clear();
            r.older_hashes.clear();
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_redis_acl_sha256() {
        // sha256("foobar"), as `ACL GETUSER` shows for `>foobar`.
        assert_eq!(
            hash("foobar"),
            "c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2"
        );
        assert_eq!(generation("foobar").len(), 12);
        assert_ne!(generation("foobar"), hash("foobar")[..12]);
    }

    #[test]
    fn the_acl_file_always_protects_the_default_user() {
        let h = vec!["aa".to_owned(), "bb".to_owned()];
        assert_eq!(
            acl_file("user app on >x ~app:* +get\n\n", &h),
            "user app on >x ~app:* +get\nuser default on #aa #bb ~* &* +@all\n"
        );
        assert_eq!(
            acl_file("user default on nopass ~* +@read\nuser app on >x\n", &h),
            "user default on nopass ~* +@read #aa #bb\nuser app on >x\n",
            "a password added after nopass switches nopass off"
        );
        assert_eq!(add_args(&h).join(" "), "ACL SETUSER default #aa #bb");
        assert_eq!(remove_args("aa").join(" "), "ACL SETUSER default !aa");
    }

    fn step(r: &Rotation, projected: &str, upstream: Upstream, peers: bool) -> Rotation {
        r.next(projected, &upstream, peers)
    }

    #[test]
    fn a_replica_rotates_without_a_lockout() {
        let r0 = Rotation::start("p1", &[]);
        assert!(!r0.rotating());
        // The new password arrives before the primary has it: both accepted, masterauth kept.
        let r1 = step(&r0, "p2", Upstream::Peer(Some(generation("p1"))), false);
        assert_eq!(r1.accepted(), vec![hash("p2"), hash("p1")]);
        assert_eq!(r1.masterauth, "p1");
        assert_eq!(r1.generation(), generation("p1"));
        // Primary unreachable for a moment: nothing moves.
        let r2 = step(&r1, "p2", Upstream::Peer(None), false);
        assert_eq!(r2, r1);
        // The primary reports p2: masterauth moves; peers not all there yet, p1 kept.
        let r3 = step(&r2, "p2", Upstream::Peer(Some(generation("p2"))), false);
        assert_eq!((r3.masterauth.as_str(), r3.rotating()), ("p2", true));
        // Every peer on p2: p1 retired.
        let r4 = step(&r3, "p2", Upstream::Peer(Some(generation("p2"))), true);
        assert_eq!(r4.accepted(), vec![hash("p2")]);
        assert!(!r4.rotating());
    }

    #[test]
    fn a_primary_moves_at_once_and_retires_only_when_peers_follow() {
        let r = step(&Rotation::start("p1", &[]), "p2", Upstream::Me, false);
        assert_eq!(
            (r.masterauth.as_str(), r.generation()),
            ("p2", generation("p2"))
        );
        assert_eq!(r.accepted().len(), 2);
        // "Peers on current" is not enough while masterauth lags (cannot happen for a
        // primary, but a replica must not retire the password it still uses).
        let lagging = step(
            &Rotation::start("p1", &[]),
            "p2",
            Upstream::Peer(None),
            true,
        );
        assert_eq!(lagging.accepted().len(), 2);
        assert!(!step(&r, "p2", Upstream::Me, true).rotating());
    }

    #[test]
    fn a_second_rotation_mid_way_keeps_every_unretired_password() {
        let r = step(
            &Rotation::start("p1", &[]),
            "p2",
            Upstream::Peer(None),
            false,
        );
        let r = step(&r, "p3", Upstream::Peer(Some(generation("p2"))), false);
        assert_eq!(r.accepted(), vec![hash("p3"), hash("p2"), hash("p1")]);
        assert_eq!(
            r.masterauth, "p2",
            "the newest password the primary accepts"
        );
        assert_eq!(r.candidates(), vec!["p3", "p2", "p1"]);
    }

    #[test]
    fn hashes_kept_across_a_restart_stay_accepted_until_retired() {
        let r = Rotation::start("p2", &[hash("p1"), hash("p2")]);
        assert_eq!(r.accepted(), vec![hash("p2"), hash("p1")]);
        assert!(r.rotating());
        assert!(!step(&r, "p2", Upstream::Me, true).rotating());
    }
}
