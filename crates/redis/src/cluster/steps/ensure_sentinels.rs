//! Step 5 of sentinel mode, `ensure_sentinels`: the three Sentinel pods and their Service,
//! then follow what the Sentinels say (the operator never fails over in sentinel mode).
//!
//! Contract (nothing happens outside sentinel mode):
//! - The `<cluster>-sentinel` Service is applied; hibernated, the Sentinel pods are deleted
//!   (their state is on emptyDir; they are seeded afresh on resume); otherwise missing ones
//!   are created, and one whose spec hash is stale is replaced, one at a time and only while
//!   the three are Ready.
//! - Every Sentinel with an IP is asked `SENTINEL get-master-addr-by-name <cluster>` (all at
//!   once, short timeout), over TLS trusting `caSecret`'s `ca.crt` (read from the API at
//!   every pass; user Secrets are not cached) when the cluster has TLS: a CA that cannot be
//!   read is a wait, said in `phaseReason`. The answers are read by
//!   [`crate::sentinel::quorum::read`]: an address that is not a data pod of this cluster is
//!   ignored; two Sentinels must agree.
//! - [`follow`] decides: when the agreed master is another data pod **and it reports itself
//!   primary**, the `-leader` Service is pointed at it first, then `currentPrimary` and
//!   `targetPrimary` name it (written by `update_status` right after, with the role labels
//!   following in `ensure_pods`), Event `SentinelFailoverFollowed`. Anything else is a wait,
//!   said in `phaseReason` (the cluster is not `Healthy` meanwhile).
//! - Stale entries: when everything agrees and the three Sentinels are Ready, a Sentinel that
//!   knows more other Sentinels than there are, or more replicas than there are data pods
//!   (a replaced pod's old address stays in its memory and would count in its failover
//!   majority), gets `SENTINEL RESET <cluster>`, one Sentinel per pass (Event `SentinelReset`).
//! - A `targetPrimary` naming another pod than `currentPrimary` (a `kubectl redis promote`)
//!   is withdrawn with a Warning `SwitchoverNotSupported`: Sentinel owns the primary role.
//! - Requeues soon while Sentinel and the status disagree.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;
use kube::{Api, ResourceExt};

use crate::cluster::apply::WriteError;
use crate::cluster::build::secret::value;
use crate::cluster::build::{sentinel as build, service};
use crate::cluster::facts::{Members, PodFacts};
use crate::cluster::{FAST, Pass};
use crate::instance::dial::{Ca, Dial};
use crate::names;
use crate::sentinel::quorum::{self, Reading};
use crate::sentinel::{QUORUM, SENTINELS, client};

/// The step.
pub struct EnsureSentinels;

/// How long one Sentinel may take to answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// Why it failed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct SentinelsError(#[from] WriteError);

impl ReconcileError for SentinelsError {
    fn category(&self) -> &'static str {
        self.0.category()
    }
}

/// What to do about Sentinel's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Sentinel names the current primary.
    Stay,
    /// Sentinel moved the primary role to this data pod, which reports itself primary.
    Move(String),
    /// Nothing to follow yet; why.
    Wait(String),
}

/// The decision (pure): `current` is `status.currentPrimary`.
pub fn follow(current: &str, reading: &Reading, members: &Members) -> Follow {
    let ip = match reading {
        Reading::Agreed { ip, .. } => ip,
        Reading::NoQuorum(why) => return Follow::Wait(format!("Sentinel: {why}")),
    };
    let Some(m) = members.iter().find(|m| m.ip() == Some(ip.as_str())) else {
        return Follow::Wait(format!("Sentinel names {ip}, which is no data pod"));
    };
    if m.name == current {
        return Follow::Stay;
    }
    if !m.is_master() {
        return Follow::Wait(format!(
            "Sentinel names {}, which does not report itself primary yet",
            m.name
        ));
    }
    Follow::Move(m.name.clone())
}

/// Sentinel pods Ready.
pub fn ready_count(pass: &Pass) -> i32 {
    pass.seen
        .sentinels
        .values()
        .filter(|p| PodFacts::of(p, false).ready)
        .count() as i32
}

async fn ensure_pods(pass: &mut Pass) -> Result<bool, WriteError> {
    let m = &pass.model;
    let w = pass.writer();
    let mut moved = false;
    if m.hibernation {
        for (name, p) in &pass.seen.sentinels {
            if p.metadata.deletion_timestamp.is_none() {
                w.delete::<Pod>(name, None).await?;
                moved = true;
            }
        }
        return Ok(moved);
    }
    let settings = &pass.ctx.settings.pod;
    let mut stale = None;
    for i in 0..SENTINELS {
        let desired = build::pod(m, settings, i);
        let name = desired.name_any();
        match pass.seen.sentinels.get(&name) {
            None => {
                if w.create(&desired).await? {
                    w.event(false, "CreatedPod", format!("created Sentinel pod {name}"))
                        .await;
                    moved = true;
                }
            }
            Some(live) => {
                let want = desired.annotations().get(names::ANN_SPEC_HASH);
                if stale.is_none() && live.annotations().get(names::ANN_SPEC_HASH) != want {
                    stale = Some(name);
                }
            }
        }
    }
    let settled = ready_count(pass) == SENTINELS
        && pass
            .seen
            .sentinels
            .values()
            .all(|p| p.metadata.deletion_timestamp.is_none());
    if let Some(name) = stale.filter(|_| settled && !moved) {
        w.delete::<Pod>(&name, None).await?;
        w.event(
            false,
            "DeletedPod",
            format!("deleted Sentinel pod {name} (rolling update)"),
        )
        .await;
        moved = true;
    }
    Ok(moved)
}

/// How the operator reaches the Sentinels: TLS trusting `caSecret`'s `ca.crt` when the
/// cluster has TLS; why not when that CA cannot be read.
async fn dial(pass: &Pass) -> Result<Dial, String> {
    let Some(ca) = pass.model.spec.ca_secret.as_ref() else {
        return Ok(Dial::Tcp);
    };
    if !crate::instance::config::tls_enabled(&pass.model.spec) {
        return Ok(Dial::Tcp);
    }
    let api: Api<Secret> = Api::namespaced(pass.ctx.client.clone(), &pass.model.namespace);
    let read = tokio::time::timeout(Duration::from_secs(5), api.get_opt(&ca.name)).await;
    let secret = match read {
        Err(_) => return Err(format!("reading caSecret {}: no answer", ca.name)),
        Ok(Err(e)) => return Err(format!("reading caSecret {}: {e}", ca.name)),
        Ok(Ok(None)) => return Err(format!("caSecret {} does not exist", ca.name)),
        Ok(Ok(Some(s))) => s,
    };
    match value(&secret, names::KEY_CA_CRT).filter(|v| !v.trim().is_empty()) {
        Some(pem) => Ok(Dial::Tls(Ca::Pem(pem))),
        None => Err(format!(
            "caSecret {} has no {} to reach the Sentinels over TLS",
            ca.name,
            names::KEY_CA_CRT
        )),
    }
}

async fn read_sentinels(pass: &Pass, dial: &Dial) -> (Reading, Vec<quorum::Answer>) {
    let ips: Vec<String> = pass
        .seen
        .sentinels
        .values()
        .filter_map(|p| PodFacts::of(p, false).ip)
        .collect();
    let answers = client::ask_all(
        dial,
        &ips,
        names::SENTINEL_PORT as u16,
        &pass.model.name,
        ASK_TIMEOUT,
    )
    .await;
    let data: BTreeMap<&str, &str> = pass
        .members
        .iter()
        .filter_map(|m| Some((m.ip()?, m.name.as_str())))
        .collect();
    let reading = quorum::read(&answers, |ip| data.contains_key(ip), QUORUM);
    (reading, answers)
}

/// Whether a Sentinel knowing `replicas` replicas and `others` other Sentinels holds stale
/// entries, with `data_pods` data pods in the cluster (pure).
pub fn stale(replicas: i64, others: i64, data_pods: usize) -> bool {
    others > i64::from(SENTINELS - 1) || replicas > data_pods as i64 - 1
}

async fn reset_stale(pass: &Pass, dial: &Dial) -> bool {
    let data_pods = pass.members.iter().filter(|m| m.pod.is_some()).count();
    let port = names::SENTINEL_PORT as u16;
    for (name, p) in &pass.seen.sentinels {
        let Some(ip) = PodFacts::of(p, false).ip else {
            continue;
        };
        let Some((replicas, others)) =
            client::known(dial, &ip, port, &pass.model.name, ASK_TIMEOUT).await
        else {
            continue;
        };
        if !stale(replicas, others, data_pods) {
            continue;
        }
        match client::reset(dial, &ip, port, &pass.model.name, ASK_TIMEOUT).await {
            Ok(()) => {
                let note = format!(
                    "{name} knew {others} other Sentinels and {replicas} replicas for {data_pods} data pods; SENTINEL RESET"
                );
                pass.writer().event(false, "SentinelReset", note).await;
            }
            Err(e) => tracing::warn!(sentinel = %name, error = %e, "SENTINEL RESET failed"),
        }
        return true;
    }
    false
}

async fn withdraw_switchover(pass: &mut Pass) {
    let st = &mut pass.model.status;
    if st.target_primary.is_empty() || st.target_primary == st.current_primary {
        return;
    }
    let note = format!(
        "in sentinel mode Sentinel owns the primary role; the handoff to {} is withdrawn",
        st.target_primary
    );
    st.target_primary = st.current_primary.clone();
    pass.writer()
        .event(true, "SwitchoverNotSupported", note)
        .await;
}

async fn move_to(pass: &mut Pass, to: String) -> Result<(), WriteError> {
    let svc = service::leader(&pass.model, &to);
    let live = pass.seen.services.get(&svc.name_any()).cloned();
    pass.writer().apply(&svc, live.as_deref()).await?;
    let mut updated = svc.clone();
    if let Some(l) = live {
        updated.metadata = l.metadata.clone();
    }
    pass.seen
        .services
        .insert(svc.name_any(), std::sync::Arc::new(updated));
    let now = jiff::Timestamp::from_second(pass.now.as_second()).unwrap_or(pass.now);
    let st = &mut pass.model.status;
    let from = std::mem::replace(&mut st.current_primary, to.clone());
    st.target_primary = to.clone();
    st.current_primary_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    st.target_primary_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    st.current_primary_failing_since_timestamp = None;
    let (ns, name) = (pass.model.namespace.clone(), pass.model.name.clone());
    pass.ctx.metrics.failover(&ns, &name);
    pass.writer()
        .event(
            false,
            "SentinelFailoverFollowed",
            format!("Sentinel moved the primary role from {from} to {to}; -leader and currentPrimary follow"),
        )
        .await;
    Ok(())
}

impl Step<Pass> for EnsureSentinels {
    fn name(&self) -> &'static str {
        "ensure_sentinels"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            if !pass.model.sentinel() {
                return Ok(Flow::Continue);
            }
            let svc = build::service(&pass.model);
            let live = pass.seen.services.get(&svc.name_any()).cloned();
            pass.writer()
                .apply(&svc, live.as_deref())
                .await
                .map_err(SentinelsError)?;
            let moved = ensure_pods(pass).await.map_err(SentinelsError)?;
            if pass.model.hibernation || pass.model.status.current_primary.is_empty() {
                return Ok(if moved {
                    Flow::delay(FAST)
                } else {
                    Flow::Continue
                });
            }
            withdraw_switchover(pass).await;
            let dial = match dial(pass).await {
                Ok(d) => d,
                Err(why) => {
                    pass.sentinel = Some(why);
                    return Ok(Flow::delay(FAST * 2));
                }
            };
            let (reading, answers) = read_sentinels(pass, &dial).await;
            let current = pass.model.status.current_primary.clone();
            let ready = ready_count(pass);
            let mut wait = match follow(&current, &reading, &pass.members) {
                Follow::Stay => None,
                Follow::Move(to) => {
                    move_to(pass, to).await.map_err(SentinelsError)?;
                    None
                }
                Follow::Wait(why) => Some(why),
            };
            if wait.is_none() && ready < SENTINELS {
                wait = Some(format!("{ready} of {SENTINELS} Sentinels are Ready"));
            }
            let settled = wait.is_none() && !moved && !quorum::failover_in_progress(&answers);
            let reset = settled && reset_stale(pass, &dial).await;
            let soon = wait.is_some() || moved || reset;
            pass.sentinel = wait;
            Ok(if soon {
                Flow::delay(FAST * 2)
            } else {
                Flow::Continue
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::facts::fixtures::{members, primary, replica, with_pod};

    fn with_ip(m: crate::cluster::facts::Member, ip: &str) -> crate::cluster::facts::Member {
        with_pod(m, |p| p.ip = Some(ip.into()))
    }

    fn agreed(ip: &str) -> Reading {
        Reading::Agreed {
            ip: ip.into(),
            port: 6379,
            votes: 2,
        }
    }

    #[test]
    fn stale_entries_are_more_than_there_are() {
        let cases = [
            (2, 2, 3, false),
            (1, 2, 2, false),
            (3, 2, 3, true),
            (2, 3, 3, true),
            (0, 0, 1, false),
        ];
        for (replicas, others, pods, want) in cases {
            assert_eq!(
                stale(replicas, others, pods),
                want,
                "{replicas} {others} {pods}"
            );
        }
    }

    #[test]
    fn the_operator_follows_only_a_data_pod_that_is_primary() {
        // demo-1 was promoted by Sentinel and reports master; demo-0 is down.
        let promoted = members(vec![
            with_ip(replica(0, 1, "r", 10), "10.0.0.1"),
            with_ip(primary(1, "r2", 20), "10.0.0.2"),
            with_ip(replica(2, 1, "r2", 20), "10.0.0.3"),
        ]);
        // Sentinel already names demo-1, which is still a replica.
        let lagging = members(vec![
            with_ip(primary(0, "r", 10), "10.0.0.1"),
            with_ip(replica(1, 0, "r", 10), "10.0.0.2"),
            with_ip(replica(2, 0, "r", 10), "10.0.0.3"),
        ]);
        let cases: Vec<(&str, Reading, &Members, Follow)> = vec![
            ("demo-0", agreed("10.0.0.1"), &lagging, Follow::Stay),
            (
                "demo-0",
                agreed("10.0.0.2"),
                &promoted,
                Follow::Move("demo-1".into()),
            ),
            ("demo-1", agreed("10.0.0.2"), &promoted, Follow::Stay),
        ];
        for (current, reading, ms, want) in cases {
            assert_eq!(follow(current, &reading, ms), want, "{current} {reading:?}");
        }
        let Follow::Wait(why) = follow("demo-0", &agreed("10.0.0.2"), &lagging) else {
            panic!("a replica is never followed");
        };
        assert!(why.contains("does not report itself primary"), "{why}");
        let Follow::Wait(why) = follow("demo-0", &Reading::NoQuorum("split".into()), &promoted)
        else {
            panic!("no quorum, no move");
        };
        assert!(why.contains("split"), "{why}");
        assert!(matches!(
            follow("demo-0", &agreed("10.9.9.9"), &promoted),
            Follow::Wait(_)
        ));
    }
}
