//! Reading the Sentinels, pure: what the answers of `SENTINEL get-master-addr-by-name` say
//! about the master, for the operator (which follows it) and for a data pod's boot guard
//! (which replicates from it).
//!
//! Contract of [`read`]:
//! - An answer naming an address that is not a data pod of this cluster (a deleted pod's old
//!   IP, anything else) is ignored and said so: it never becomes the primary.
//! - Only [`super::QUORUM`] or more Sentinels naming the same address make an answer
//!   ([`Reading::Agreed`]); anything less (unreachable Sentinels, disagreement, ignored
//!   answers) is [`Reading::NoQuorum`] with the reason in words. Never a guess.
//! - [`failover_in_progress`]: a Sentinel that answered reports a failover of the master
//!   under way (its flags), so an answer naming the old master may be about to change.

use std::collections::BTreeMap;

/// One Sentinel's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It names the master's address, with the master's flags as it sees them
    /// (`master,s_down,o_down,failover_in_progress`, …).
    Master {
        /// The master's IP.
        ip: String,
        /// Its port.
        port: u16,
        /// Its flags, comma-separated (empty when not asked).
        flags: String,
    },
    /// It does not monitor the master name (nil).
    Unknown,
    /// It could not be asked (why).
    Unreachable(String),
}

/// What the answers say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// At least a quorum names this data pod address.
    Agreed {
        /// The master's IP.
        ip: String,
        /// Its port.
        port: u16,
        /// How many Sentinels named it.
        votes: usize,
    },
    /// No quorum; why.
    NoQuorum(String),
}

impl Reading {
    /// The agreed IP, if any.
    pub fn ip(&self) -> Option<&str> {
        match self {
            Reading::Agreed { ip, .. } => Some(ip),
            Reading::NoQuorum(_) => None,
        }
    }
}

/// Reads `answers` (see the module contract); `is_member(ip)` says whether `ip` is a data
/// pod of this cluster; `needed` Sentinels must agree.
pub fn read(answers: &[Answer], is_member: impl Fn(&str) -> bool, needed: usize) -> Reading {
    let mut votes: BTreeMap<(String, u16), usize> = BTreeMap::new();
    let (mut ignored, mut unknown, mut unreachable) = (Vec::new(), 0, 0);
    for a in answers {
        match a {
            Answer::Master { ip, port, .. } if is_member(ip) => {
                *votes.entry((ip.clone(), *port)).or_default() += 1;
            }
            Answer::Master { ip, port, .. } => ignored.push(format!("{ip}:{port}")),
            Answer::Unknown => unknown += 1,
            Answer::Unreachable(_) => unreachable += 1,
        }
    }
    let best = votes
        .iter()
        .max_by_key(|(addr, n)| (**n, std::cmp::Reverse((*addr).clone())));
    if let Some(((ip, port), n)) = best.filter(|(_, n)| **n >= needed.max(1)) {
        return Reading::Agreed {
            ip: ip.clone(),
            port: *port,
            votes: *n,
        };
    }
    let mut parts = vec![format!(
        "no {needed} of the {} Sentinels agree on the master",
        answers.len()
    )];
    if !votes.is_empty() {
        let named: Vec<String> = votes
            .iter()
            .map(|((ip, port), n)| format!("{ip}:{port} by {n}"))
            .collect();
        parts.push(format!("named: {}", named.join(", ")));
    }
    if !ignored.is_empty() {
        parts.push(format!(
            "ignored (not a data pod of this cluster): {}",
            ignored.join(", ")
        ));
    }
    if unknown > 0 {
        parts.push(format!("{unknown} do not monitor it"));
    }
    if unreachable > 0 {
        parts.push(format!("{unreachable} unreachable"));
    }
    Reading::NoQuorum(parts.join("; "))
}

/// Whether an answering Sentinel sees the master down (`s_down` or `o_down`): a failover may
/// be about to start.
pub fn master_seen_down(answers: &[Answer]) -> bool {
    answers.iter().any(|a| match a {
        Answer::Master { flags, .. } => flags
            .split(',')
            .any(|f| matches!(f.trim(), "s_down" | "o_down")),
        _ => false,
    })
}

/// Whether an answering Sentinel reports a failover of the master under way.
pub fn failover_in_progress(answers: &[Answer]) -> bool {
    answers.iter().any(|a| match a {
        Answer::Master { flags, .. } => flags
            .split(',')
            .any(|f| f.trim().starts_with("failover_in_progress")),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(ip: &str) -> Answer {
        Answer::Master {
            ip: ip.into(),
            port: 6379,
            flags: "master".into(),
        }
    }

    fn down() -> Answer {
        Answer::Unreachable("connection refused".into())
    }

    const PODS: [&str; 3] = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];

    fn reading(answers: &[Answer]) -> Reading {
        read(answers, |ip| PODS.contains(&ip), 2)
    }

    #[test]
    fn a_majority_naming_a_data_pod_is_the_answer() {
        let cases: Vec<(Vec<Answer>, Option<&str>)> = vec![
            (
                vec![m("10.0.0.1"), m("10.0.0.1"), m("10.0.0.1")],
                Some("10.0.0.1"),
            ),
            (
                vec![m("10.0.0.2"), m("10.0.0.2"), m("10.0.0.1")],
                Some("10.0.0.2"),
            ),
            (vec![m("10.0.0.2"), down(), m("10.0.0.2")], Some("10.0.0.2")),
            // One Sentinel is not a quorum, whatever the others do.
            (vec![m("10.0.0.2"), down(), down()], None),
            (vec![m("10.0.0.1"), m("10.0.0.2"), m("10.0.0.3")], None),
            (vec![m("10.0.0.1"), Answer::Unknown, down()], None),
            (vec![], None),
            // An address that is not a data pod never counts (a deleted pod's old IP).
            (vec![m("10.9.9.9"), m("10.9.9.9"), m("10.0.0.1")], None),
            (
                vec![m("10.9.9.9"), m("10.0.0.1"), m("10.0.0.1")],
                Some("10.0.0.1"),
            ),
        ];
        for (answers, want) in cases {
            assert_eq!(reading(&answers).ip(), want, "{answers:?}");
        }
    }

    #[test]
    fn no_quorum_says_why() {
        let r = reading(&[m("10.9.9.9"), m("10.0.0.1"), down()]);
        let Reading::NoQuorum(why) = r else {
            panic!("{r:?}")
        };
        assert!(why.contains("10.9.9.9:6379"), "{why}");
        assert!(why.contains("not a data pod"), "{why}");
        assert!(why.contains("1 unreachable"), "{why}");
        assert!(why.contains("10.0.0.1:6379 by 1"), "{why}");
    }

    #[test]
    fn agreed_counts_the_votes() {
        let r = reading(&[m("10.0.0.3"), m("10.0.0.3"), m("10.0.0.3")]);
        assert_eq!(
            r,
            Reading::Agreed {
                ip: "10.0.0.3".into(),
                port: 6379,
                votes: 3
            }
        );
    }

    #[test]
    fn a_failover_under_way_is_seen_in_any_answer() {
        let busy = Answer::Master {
            ip: "10.0.0.1".into(),
            port: 6379,
            flags: "master,s_down,o_down,failover_in_progress".into(),
        };
        assert!(failover_in_progress(&[m("10.0.0.1"), busy, down()]));
        assert!(!failover_in_progress(&[m("10.0.0.1"), down()]));
    }
}
