//! The instance manager's role decisions, pure: what to do before redis-server starts (the
//! boot-time split-brain guard) and while it runs (fencing, promote, demote, re-point).
//!
//! Contract:
//! - [`View::of`] reduces the RedisCluster to what the decisions read.
//! - [`boot`]: a fenced pod (or one whose fencing annotation is unreadable) does not start;
//!   neither does one whose secrets are not all projected yet. In replica mode every pod
//!   follows the external source, except the designated leader (`status.currentPrimary`) once
//!   `promote` is set. Otherwise a pod starts as primary **only** if it is
//!   `status.currentPrimary` and no handoff to another pod is in progress
//!   (`status.targetPrimary` empty or itself); any other pod starts with `replicaof <primary
//!   pod IP> <port>` whatever its local data, and waits (redis-server not started) while the
//!   primary is unknown, its pod is missing or has no IP, or the API cannot say. A pod never
//!   elects itself: an empty `currentPrimary` means wait, never "I am first".
//! - [`running`]: fenced → stop redis-server (it stays down; the process stays up). An
//!   operator command through the API ([`Hold`]) wins over the cluster view until the view
//!   confirms it, so a stale view never undoes a promotion or switchover the operator just
//!   made (upstream's instance managers reverted them). During a handoff (`targetPrimary` ≠
//!   `currentPrimary`) nothing changes by itself. Else the current primary promotes itself if
//!   it is a replica; any other instance follows the current primary's pod IP, killing normal
//!   and pub/sub clients when it stops being a primary; a primary that is not
//!   `currentPrimary` and cannot find the current one stops rather than keep taking writes.

use crate::crd::RedisCluster;
use crate::instance::fence::{self, Fencing};
use crate::instance::info::Info;

/// An external primary (replica mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// Host name or IP.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// What the decisions read from the RedisCluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// This pod's fencing.
    pub fencing: Fencing,
    /// `status.currentPrimary`.
    pub current_primary: String,
    /// `status.targetPrimary`.
    pub target_primary: String,
    /// `spec.replicaMode` when enabled: the source (`None` inside when its host is empty).
    pub replica_mode: Option<Option<Source>>,
    /// `spec.replicaMode.promote`.
    pub promote: bool,
}

impl View {
    /// The view of `cluster` from `pod`.
    pub fn of(cluster: &RedisCluster, pod: &str) -> Self {
        let status = cluster.status.clone().unwrap_or_default();
        let rm = cluster.spec.replica_mode.as_ref().filter(|r| r.enabled);
        Self {
            fencing: fence::fencing(cluster.metadata.annotations.as_ref(), pod),
            current_primary: status.current_primary,
            target_primary: status.target_primary,
            replica_mode: rm.map(|r| {
                r.source
                    .as_ref()
                    .filter(|s| !s.host.trim().is_empty())
                    .map(|s| Source {
                        host: s.host.trim().to_owned(),
                        port: u16::try_from(s.port)
                            .ok()
                            .filter(|p| *p > 0)
                            .unwrap_or(6379),
                    })
            }),
            promote: rm.is_some_and(|r| r.promote),
        }
    }

    fn handoff_elsewhere(&self, pod: &str) -> Option<&str> {
        let t = self.target_primary.as_str();
        (!t.is_empty() && t != self.current_primary && t != pod).then_some(t)
    }
}

/// Where the current primary's pod is, as the API said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrimaryAddr {
    /// Not looked up (this pod is the primary, or there is none).
    NotNeeded,
    /// Its pod IP.
    Ip(String),
    /// The pod does not exist.
    Missing,
    /// The pod exists without an IP.
    NoIp,
    /// The API could not say (the error).
    Unknown(String),
}

/// How redis-server starts, or why it does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Boot {
    /// As primary (no `replicaof`).
    Primary,
    /// As a replica of `host:port`.
    Replica {
        /// The primary's address.
        host: String,
        /// Its port.
        port: u16,
    },
    /// Not at all, for now; the sentence says why.
    Wait(String),
}

/// The boot-time decision (see the module contract). `secrets` is `Err(why)` while a
/// secret redis-server needs is not projected yet; `port` is the port every instance
/// listens on.
pub fn boot(
    pod: &str,
    view: &View,
    primary: &PrimaryAddr,
    port: u16,
    secrets: Result<(), String>,
) -> Boot {
    match &view.fencing {
        Fencing::Fenced => {
            return Boot::Wait(format!("fenced: {pod} is listed in the fencing annotation"));
        }
        Fencing::Unreadable(why) => return Boot::Wait(why.clone()),
        Fencing::NotFenced => {}
    }
    if let Err(why) = secrets {
        return Boot::Wait(why);
    }
    if let Some(source) = &view.replica_mode {
        if view.promote && view.current_primary == pod {
            return Boot::Primary;
        }
        return match source {
            Some(s) => Boot::Replica {
                host: s.host.clone(),
                port: s.port,
            },
            None => Boot::Wait("replica mode is enabled without a source host".into()),
        };
    }
    let current = view.current_primary.as_str();
    if current.is_empty() {
        return Boot::Wait(
            "status.currentPrimary is empty: waiting for the operator to name the primary".into(),
        );
    }
    if current == pod {
        if let Some(target) = view.handoff_elsewhere(pod) {
            return Boot::Wait(format!(
                "a handoff of the primary role to {target} is in progress; waiting for it to finish"
            ));
        }
        return Boot::Primary;
    }
    match primary {
        PrimaryAddr::Ip(ip) => Boot::Replica {
            host: ip.clone(),
            port,
        },
        PrimaryAddr::Missing => Boot::Wait(format!("the primary's pod {current} does not exist")),
        PrimaryAddr::NoIp => Boot::Wait(format!("the primary's pod {current} has no IP yet")),
        PrimaryAddr::Unknown(e) => {
            Boot::Wait(format!("cannot resolve the primary's pod {current}: {e}"))
        }
        PrimaryAddr::NotNeeded => {
            Boot::Wait(format!("the primary's pod {current} was not resolved"))
        }
    }
}

/// A role an operator command set, held until the cluster view agrees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// `/v1/promote` made this instance primary.
    Primary,
    /// `/v1/demote` or `/v1/switchover` made it a replica.
    Replica,
}

/// What to do to a running redis-server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing; `Some` carries a sentence worth reporting (why nothing is done).
    Nothing(Option<String>),
    /// Shut redis-server down and keep it down.
    Stop(String),
    /// `REPLICAOF NO ONE`.
    Promote(String),
    /// `REPLICAOF host port`, then kill normal and pub/sub clients when `kill_clients`.
    Follow {
        /// The primary.
        host: String,
        /// Its port.
        port: u16,
        /// Whether this instance was a primary (its clients must reconnect elsewhere).
        kill_clients: bool,
        /// Why.
        reason: String,
    },
}

fn follow(info: &Info, host: &str, port: u16, reason: String) -> Action {
    if info.is_master() {
        return Action::Follow {
            host: host.to_owned(),
            port,
            kill_clients: true,
            reason,
        };
    }
    match info.master() {
        Some((h, p)) if h == host && p == port => Action::Nothing(None),
        _ => Action::Follow {
            host: host.to_owned(),
            port,
            kill_clients: false,
            reason,
        },
    }
}

/// Whether the view confirms `hold` (so it can be dropped).
fn confirmed(hold: Hold, view: &View, pod: &str) -> bool {
    let names_me = view.current_primary == pod || view.target_primary == pod;
    match hold {
        Hold::Primary => names_me,
        Hold::Replica => !view.current_primary.is_empty() && !names_me,
    }
}

/// The decision for a running redis-server (see the module contract), with the hold to
/// keep.
pub fn running(
    pod: &str,
    view: &View,
    primary: &PrimaryAddr,
    port: u16,
    info: &Info,
    hold: Option<Hold>,
) -> (Action, Option<Hold>) {
    match &view.fencing {
        Fencing::Fenced => {
            return (
                Action::Stop(format!("fenced: {pod} is listed in the fencing annotation")),
                hold,
            );
        }
        Fencing::Unreadable(why) => return (Action::Nothing(Some(why.clone())), hold),
        Fencing::NotFenced => {}
    }
    let hold = hold.filter(|h| !confirmed(*h, view, pod));
    if let Some(h) = hold {
        let why = format!(
            "holding the role set by the operator ({h:?}) until the cluster status confirms it"
        );
        return (Action::Nothing(Some(why)), Some(h));
    }
    if let Some(source) = &view.replica_mode {
        if view.promote && view.current_primary == pod {
            return match info.is_master() {
                true => (Action::Nothing(None), None),
                false => (
                    Action::Promote("replica mode promotion of the designated leader".into()),
                    None,
                ),
            };
        }
        return match source {
            Some(s) => (
                follow(
                    info,
                    &s.host,
                    s.port,
                    format!("replica mode: following the source {}:{}", s.host, s.port),
                ),
                None,
            ),
            None => (
                Action::Nothing(Some("replica mode is enabled without a source host".into())),
                None,
            ),
        };
    }
    let current = view.current_primary.as_str();
    if current.is_empty() {
        return (
            Action::Nothing(Some("status.currentPrimary is empty".into())),
            None,
        );
    }
    if !view.target_primary.is_empty() && view.target_primary != current {
        let why = format!(
            "a handoff from {current} to {} is in progress",
            view.target_primary
        );
        return (Action::Nothing(Some(why)), None);
    }
    if current == pod {
        return match info.is_master() {
            true => (Action::Nothing(None), None),
            false => (
                Action::Promote(format!("status.currentPrimary names {pod}")),
                None,
            ),
        };
    }
    let action = match primary {
        PrimaryAddr::Ip(ip) => follow(info, ip, port, format!("{current} is the primary")),
        other if info.is_master() => {
            let what = match other {
                PrimaryAddr::Unknown(e) => {
                    return (
                        Action::Nothing(Some(format!(
                            "cannot resolve the primary's pod {current}: {e}"
                        ))),
                        None,
                    );
                }
                PrimaryAddr::Missing => "does not exist",
                _ => "has no IP",
            };
            Action::Stop(format!(
                "this instance is a primary but {current} is the current primary and its pod {what}; stopping rather than taking writes"
            ))
        }
        _ => Action::Nothing(None),
    };
    (action, None)
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
