//! The boot-time guard of a data pod in sentinel mode: Sentinel, not the operator, says who
//! the primary is, and a pod still never elects itself.
//!
//! Contract of [`decide`] (pure; fencing and missing secrets are checked first, as in
//! standalone mode):
//! - A quorum of the Sentinels ([`crate::sentinel::quorum::read`]: two agreeing, answers
//!   naming an address that is not a data pod of this cluster ignored) naming **another**
//!   data pod: start as its replica.
//! - A quorum naming **this** pod (its primary restarted before Sentinel noticed): start as
//!   primary only if `status.currentPrimary` names it too, no Sentinel reports a failover
//!   under way, no other data pod reports itself primary, and no Sentinel sees the master
//!   down while a running replica could take over (one linked to a primary since it started,
//!   [`has_been_linked`]: Sentinel is then about to fail over to it, and starting as primary
//!   now would make two); otherwise wait for Sentinel to finish (it will name another pod).
//!   A replica that never linked does not count: fresh Sentinels (a cluster woken from
//!   hibernation) cannot know it, so waiting for them to promote it would wait forever.
//! - No quorum (Sentinels unreachable, split, or naming a stale address): follow
//!   `status.currentPrimary` when it is another pod with an IP (a replica can never make two
//!   primaries; Sentinel re-points it if needed); when it names this pod, is empty or cannot be
//!   resolved, wait and say why. Never "I am first".
//!
//! [`sight`] gathers the inputs: the cluster's pods from the API, the Sentinels' answers
//! (over TLS when the cluster has it; retried by the boot loop on every pass, so a Sentinel
//! briefly unreachable only delays the boot), and the peers' own reports of their role.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use super::decide::{Boot, PrimaryAddr, View};
use super::dial::Dial;
use super::fence::Fencing;
use super::manager::Instance;
use crate::instance_api::InstanceReport;
use crate::names;
use crate::sentinel::quorum::{self, Answer, Reading};
use crate::sentinel::{QUORUM, client};

const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// What the data pod knows about Sentinel and its peers at boot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sight {
    /// This pod's IP.
    pub my_ip: String,
    /// The data pods' IPs by pod name (this one included).
    pub data: BTreeMap<String, String>,
    /// The Sentinels' answers.
    pub answers: Vec<Answer>,
    /// Other data pods that report themselves primary.
    pub peer_masters: Vec<String>,
    /// Other data pods that run as replicas and have been linked to a primary since they
    /// started ([`has_been_linked`]): the ones Sentinel could promote.
    pub peer_replicas: Vec<String>,
}

/// The boot decision in sentinel mode (see the module contract).
pub fn decide(
    pod: &str,
    view: &View,
    primary: &PrimaryAddr,
    port: u16,
    secrets: Result<(), String>,
    s: &Sight,
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
    let is_member = |ip: &str| s.data.values().any(|d| d == ip);
    let reading = quorum::read(&s.answers, is_member, QUORUM);
    match reading {
        Reading::Agreed { ip, port: p, .. } if ip != s.my_ip => Boot::Replica { host: ip, port: p },
        Reading::Agreed { .. } => {
            if view.current_primary != pod {
                return Boot::Wait(format!(
                    "Sentinel still names this pod as master while status.currentPrimary names {:?}; waiting for Sentinel to fail over",
                    view.current_primary
                ));
            }
            if quorum::failover_in_progress(&s.answers) {
                return Boot::Wait(
                    "Sentinel names this pod but reports a failover under way; waiting for it to finish".into(),
                );
            }
            if let Some(other) = s.peer_masters.first() {
                return Boot::Wait(format!(
                    "Sentinel names this pod but {other} reports itself primary; waiting for Sentinel"
                ));
            }
            if quorum::master_seen_down(&s.answers) && !s.peer_replicas.is_empty() {
                return Boot::Wait(format!(
                    "Sentinel names this pod but sees it down while {} could take over; waiting for Sentinel to fail over",
                    s.peer_replicas.join(", ")
                ));
            }
            Boot::Primary
        }
        Reading::NoQuorum(why) => {
            let current = view.current_primary.as_str();
            match primary {
                PrimaryAddr::Ip(ip) if current != pod && !current.is_empty() => Boot::Replica {
                    host: ip.clone(),
                    port,
                },
                _ => Boot::Wait(format!(
                    "Sentinel gives no answer ({why}) and status.currentPrimary is {current:?}; this pod never elects itself, waiting"
                )),
            }
        }
    }
}

/// Gathers the [`Sight`] of `inst`, reaching the Sentinels with `dial` (see the module
/// contract).
pub async fn sight(inst: &Instance, dial: &Dial) -> Result<Sight, String> {
    let s = &inst.settings;
    let pods: Api<Pod> = Api::namespaced(inst.client.clone(), &s.namespace);
    let lp = ListParams::default().labels(&format!("{}={}", names::LABEL_CLUSTER, s.cluster));
    let list = tokio::time::timeout(ASK_TIMEOUT * 5, pods.list(&lp))
        .await
        .map_err(|_| "listing the cluster's pods: no answer".to_owned())?
        .map_err(|e| format!("listing the cluster's pods: {e}"))?;
    let mut data = BTreeMap::new();
    let mut sentinels = Vec::new();
    for p in list.items {
        let workload = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_WORKLOAD).cloned())
            .unwrap_or_default();
        let (Some(name), Some(ip)) = (
            p.metadata.name.clone(),
            p.status
                .and_then(|st| st.pod_ip)
                .filter(|ip| !ip.is_empty()),
        ) else {
            continue;
        };
        if workload == names::workload::SENTINEL {
            sentinels.push(ip);
        } else if names::ordinal_of(&s.cluster, &name).is_some() {
            data.insert(name, ip);
        }
    }
    let answers = client::ask_all(
        dial,
        &sentinels,
        names::SENTINEL_PORT as u16,
        &s.cluster,
        ASK_TIMEOUT,
    )
    .await;
    let my_ip = s.pod_ip.to_string();
    let peers: Vec<(String, String)> = data
        .iter()
        .filter(|(n, _)| **n != s.pod)
        .map(|(n, ip)| (n.clone(), ip.clone()))
        .collect();
    let reports = futures::future::join_all(
        peers
            .iter()
            .map(|(_, ip)| inst.dialer.status(ip, ASK_TIMEOUT)),
    )
    .await;
    let running_as = |role: &str, also: fn(&InstanceReport) -> bool| -> Vec<String> {
        peers
            .iter()
            .zip(&reports)
            .filter(|(_, r)| {
                r.as_ref().is_ok_and(|r| {
                    r.role == role && r.boot == crate::instance_api::Boot::Running && also(r)
                })
            })
            .map(|((n, _), _)| n.clone())
            .collect()
    };
    Ok(Sight {
        my_ip,
        data,
        answers,
        peer_masters: running_as("master", |_| true),
        peer_replicas: running_as("slave", has_been_linked),
    })
}

/// Whether a replica has had its replication link up since it started: its link is up, or
/// down for a known time (`master_link_down_since_seconds` is -1 until the first link).
///
/// Only such a replica can be what Sentinel is about to promote. One that never linked (every
/// pod of a cluster woken from hibernation, whose fresh Sentinels have never seen a replica
/// through a running master) is unknown to Sentinel: waiting for Sentinel to fail over to it
/// would wait forever while the master Sentinel names stays down.
pub fn has_been_linked(r: &InstanceReport) -> bool {
    r.master_link_status == "up" || r.master_link_down_since_seconds >= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(current: &str) -> View {
        View {
            fencing: Fencing::NotFenced,
            current_primary: current.into(),
            target_primary: String::new(),
            replica_mode: None,
            promote: false,
        }
    }

    fn m(ip: &str) -> Answer {
        Answer::Master {
            ip: ip.into(),
            port: 6379,
            flags: "master".into(),
        }
    }

    fn sight(answers: Vec<Answer>) -> Sight {
        Sight {
            my_ip: "10.0.0.0".into(),
            data: (0..3)
                .map(|i| (format!("demo-{i}"), format!("10.0.0.{i}")))
                .collect(),
            answers,
            peer_masters: vec![],
            peer_replicas: vec![],
        }
    }

    fn down() -> Answer {
        Answer::Unreachable("refused".into())
    }

    fn down_master(ip: &str) -> Answer {
        Answer::Master {
            ip: ip.into(),
            port: 6379,
            flags: "master,s_down".into(),
        }
    }

    #[test]
    fn a_master_seen_down_starts_as_primary_only_with_no_replica_to_take_over() {
        // Every pod was stopped (hibernation, a whole-cluster restart): nobody could take over,
        // so the recorded primary starts even though Sentinel has seen it down.
        let s = sight(vec![
            down_master("10.0.0.0"),
            down_master("10.0.0.0"),
            down(),
        ]);
        assert_eq!(boot("demo-0", PrimaryAddr::NotNeeded, &s), Boot::Primary);
    }

    #[test]
    fn only_a_replica_that_has_linked_since_it_started_could_take_over() {
        let replica = |status: &str, down_since: i64| InstanceReport {
            pod: "demo-1".into(),
            boot: crate::instance_api::Boot::Running,
            fenced: false,
            role: "slave".into(),
            replication_id: String::new(),
            replication_id2: String::new(),
            replication_offset: 1,
            connected_replicas: 0,
            replicas: vec![],
            master_host: "10.0.0.0".into(),
            master_port: 6379,
            master_link_status: status.into(),
            master_sync_in_progress: false,
            master_link_down_since_seconds: down_since,
            min_replicas_to_write: 0,
            writes_refused: false,
            auth_generation: String::new(),
        };
        assert!(has_been_linked(&replica("up", 0)));
        // Its primary went away 7 s ago: Sentinel knew it through that primary.
        assert!(has_been_linked(&replica("down", 7)));
        // redis-server 7 reports -1 until the first link (a cluster woken from hibernation
        // whose replicas started before the primary): Sentinel cannot know it.
        assert!(!has_been_linked(&replica("down", -1)));
    }

    fn boot(current: &str, primary: PrimaryAddr, s: &Sight) -> Boot {
        decide("demo-0", &view(current), &primary, 6379, Ok(()), s)
    }

    fn replica(ip: &str) -> Boot {
        Boot::Replica {
            host: ip.into(),
            port: 6379,
        }
    }

    #[test]
    fn sentinels_quorum_decides_whom_to_follow() {
        let ip1 = PrimaryAddr::Ip("10.0.0.1".into());
        let cases: Vec<(&str, PrimaryAddr, Sight, Boot)> = vec![
            // Sentinel failed over to demo-1: follow it, whatever the status still says.
            (
                "demo-0",
                PrimaryAddr::NotNeeded,
                sight(vec![m("10.0.0.1"), m("10.0.0.1"), down()]),
                replica("10.0.0.1"),
            ),
            (
                "demo-2",
                ip1.clone(),
                sight(vec![m("10.0.0.2"), m("10.0.0.2"), m("10.0.0.1")]),
                replica("10.0.0.2"),
            ),
            // The primary restarted before Sentinel noticed; the status agrees.
            (
                "demo-0",
                PrimaryAddr::NotNeeded,
                sight(vec![m("10.0.0.0"), m("10.0.0.0"), m("10.0.0.0")]),
                Boot::Primary,
            ),
            // No quorum: follow another pod named by the status.
            (
                "demo-1",
                ip1.clone(),
                sight(vec![down(), down(), down()]),
                replica("10.0.0.1"),
            ),
            (
                "demo-1",
                ip1,
                sight(vec![m("10.9.9.9"), m("10.9.9.9"), down()]),
                replica("10.0.0.1"),
            ),
        ];
        for (current, primary, s, want) in cases {
            assert_eq!(
                boot(current, primary, &s),
                want,
                "{current} {:?}",
                s.answers
            );
        }
    }

    #[test]
    fn a_pod_never_elects_itself() {
        let waits: Vec<(&str, Sight)> = vec![
            // Sentinel unreachable and the status names this pod: wait.
            ("demo-0", sight(vec![down(), down(), down()])),
            ("", sight(vec![down(), down(), down()])),
            // One Sentinel is no quorum.
            ("demo-0", sight(vec![m("10.0.0.0"), down(), down()])),
            // Sentinel names this pod but the status has moved on.
            (
                "demo-1",
                sight(vec![m("10.0.0.0"), m("10.0.0.0"), m("10.0.0.0")]),
            ),
            // Sentinel names a deleted pod's address.
            (
                "demo-0",
                sight(vec![m("10.9.9.9"), m("10.9.9.9"), m("10.9.9.9")]),
            ),
            // A failover is under way.
            (
                "demo-0",
                sight(vec![
                    m("10.0.0.0"),
                    Answer::Master {
                        ip: "10.0.0.0".into(),
                        port: 6379,
                        flags: "master,s_down,o_down,failover_in_progress".into(),
                    },
                    down(),
                ]),
            ),
            // Another pod already reports itself primary.
            (
                "demo-0",
                Sight {
                    peer_masters: vec!["demo-1".into()],
                    ..sight(vec![m("10.0.0.0"), m("10.0.0.0"), down()])
                },
            ),
            // Sentinel sees this pod's master down and a replica runs: a failover is coming
            // (the primary's pod deleted for an update came back before Sentinel moved).
            (
                "demo-0",
                Sight {
                    peer_replicas: vec!["demo-1".into()],
                    ..sight(vec![m("10.0.0.0"), down_master("10.0.0.0"), m("10.0.0.0")])
                },
            ),
        ];
        for (current, s) in waits {
            let b = boot(current, PrimaryAddr::NotNeeded, &s);
            assert!(
                matches!(b, Boot::Wait(_)),
                "{current} {:?}: {b:?}",
                s.answers
            );
        }
    }

    #[test]
    fn fencing_and_secrets_come_first() {
        let s = sight(vec![m("10.0.0.1"), m("10.0.0.1")]);
        let mut v = view("demo-1");
        v.fencing = Fencing::Fenced;
        assert!(matches!(
            decide("demo-0", &v, &PrimaryAddr::NotNeeded, 6379, Ok(()), &s),
            Boot::Wait(_)
        ));
        let b = decide(
            "demo-0",
            &view("demo-1"),
            &PrimaryAddr::NotNeeded,
            6379,
            Err("no password".into()),
            &s,
        );
        assert_eq!(b, Boot::Wait("no password".into()));
    }
}
