//! Which instance takes a backup (pure).
//!
//! Contract of [`select`]:
//! - Only data pods of the cluster are candidates (`<cluster>-<ordinal>`, label
//!   `redis.io/workload=data`): a Sentinel pod never is, whatever it reports.
//! - Nothing is chosen while the cluster has no primary or a handoff moves it
//!   (`targetPrimary` set to another pod): the answer says what it waits for.
//! - The primary qualifies when its pod is Ready, not being deleted, and its instance reports
//!   redis-server running as `master`, not fenced.
//! - `prefer-replica`: the replica with the smallest lag among those in sync — pod Ready and
//!   not being deleted, instance running as `slave` of the primary's IP, not fenced, link
//!   `up`, no full sync in progress, the **same replication ID as the primary**, and at most
//!   [`MAX_LAG_BYTES`] behind its offset (ties by name); with none, the primary. Without an
//!   answering primary no replica can be shown to be in sync, so nothing is chosen.
//! - `primary`: the primary.

use crate::crd::BackupTarget;
use crate::instance_api::{Boot, InstanceReport};

/// The most a replica may lag the primary's replication offset to take a backup.
pub const MAX_LAG_BYTES: i64 = 1 << 20;

/// One data pod of the cluster, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The pod.
    pub pod: String,
    /// Its IP, when it has one.
    pub ip: Option<String>,
    /// The pod's Ready condition.
    pub ready: bool,
    /// The pod is being deleted.
    pub terminating: bool,
    /// Its instance's `/v1/status`, `None` when it did not answer.
    pub report: Option<InstanceReport>,
}

/// The cluster's primary, as its status names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Primary {
    /// `status.currentPrimary`.
    pub current: String,
    /// `status.targetPrimary`.
    pub target: String,
}

/// The chosen instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The pod.
    pub pod: String,
    /// Its IP.
    pub ip: String,
    /// Whether it is a replica (else the primary).
    pub replica: bool,
}

fn usable(c: &Candidate) -> Option<(&str, &InstanceReport)> {
    let r = c.report.as_ref()?;
    let ip = c.ip.as_deref()?;
    (c.ready && !c.terminating && r.boot == Boot::Running && !r.fenced).then_some((ip, r))
}

fn why_not_primary(p: Option<&Candidate>, name: &str) -> String {
    let Some(c) = p else {
        return format!("the primary {name} has no pod");
    };
    match (&c.ip, &c.report) {
        (None, _) => format!("the primary {name} has no IP yet"),
        (_, None) => format!("the primary {name} does not answer"),
        (_, Some(r)) if r.fenced => format!("the primary {name} is fenced"),
        (_, Some(r)) if r.boot != Boot::Running => format!("the primary {name} is not running"),
        (_, Some(r)) if r.role != "master" => format!("{name} does not run as a primary"),
        _ if c.terminating => format!("the primary {name} is being deleted"),
        _ => format!("the primary {name} is not Ready"),
    }
}

// The primary and the in-sync replicas with their lag, or why there is no usable primary.
fn qualifying(
    primary: &Primary,
    candidates: &[Candidate],
) -> Result<(Choice, Vec<(i64, Choice)>), String> {
    if primary.current.is_empty() {
        return Err("the cluster has no primary yet".into());
    }
    if !primary.target.is_empty() && primary.target != primary.current {
        return Err(format!(
            "a primary handoff from {} to {} is in progress",
            primary.current, primary.target
        ));
    }
    let p = candidates.iter().find(|c| c.pod == primary.current);
    let Some((pip, pr)) = p.and_then(usable).filter(|(_, r)| r.role == "master") else {
        return Err(why_not_primary(p, &primary.current));
    };
    let replicas = candidates
        .iter()
        .filter(|c| c.pod != primary.current)
        .filter_map(|c| {
            let (ip, r) = usable(c)?;
            let lag = pr.replication_offset - r.replication_offset;
            let in_sync = r.role == "slave"
                && r.master_host == pip
                && r.master_link_status == "up"
                && !r.master_sync_in_progress
                && !r.replication_id.is_empty()
                && r.replication_id == pr.replication_id
                && lag <= MAX_LAG_BYTES;
            let choice = Choice {
                pod: c.pod.clone(),
                ip: ip.to_owned(),
                replica: true,
            };
            in_sync.then_some((lag.max(0), choice))
        })
        .collect();
    let p = Choice {
        pod: primary.current.clone(),
        ip: pip.to_owned(),
        replica: false,
    };
    Ok((p, replicas))
}

/// Chooses the instance for a backup with `target` (see the module contract); `Err` says
/// what the backup waits for.
pub fn select(
    target: BackupTarget,
    primary: &Primary,
    candidates: &[Candidate],
) -> Result<Choice, String> {
    let (p, replicas) = qualifying(primary, candidates)?;
    if target == BackupTarget::Primary {
        return Ok(p);
    }
    let best = replicas
        .into_iter()
        .min_by(|a, b| (a.0, &a.1.pod).cmp(&(b.0, &b.1.pod)));
    Ok(best.map_or(p, |(_, c)| c))
}

/// Whether `pod` may take a backup with `target` now: the primary, or (with
/// `prefer-replica`) any in-sync replica.
pub fn qualifies(
    target: BackupTarget,
    primary: &Primary,
    candidates: &[Candidate],
    pod: &str,
) -> bool {
    match qualifying(primary, candidates) {
        Ok((p, _)) if p.pod == pod => true,
        Ok((_, replicas)) => {
            target == BackupTarget::PreferReplica && replicas.iter().any(|(_, c)| c.pod == pod)
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(role: &str, replid: &str, offset: i64, master: &str) -> InstanceReport {
        InstanceReport {
            pod: String::new(),
            boot: Boot::Running,
            fenced: false,
            role: role.into(),
            replication_id: replid.into(),
            replication_id2: String::new(),
            replication_offset: offset,
            connected_replicas: 0,
            replicas: vec![],
            master_host: master.into(),
            master_port: 6379,
            master_link_status: if role == "slave" {
                "up".into()
            } else {
                String::new()
            },
            master_sync_in_progress: false,
            master_link_down_since_seconds: 0,
            min_replicas_to_write: 0,
            writes_refused: false,
            auth_generation: String::new(),
        }
    }

    fn pod(name: &str, ip: &str, r: Option<InstanceReport>) -> Candidate {
        Candidate {
            pod: name.into(),
            ip: Some(ip.into()),
            ready: true,
            terminating: false,
            report: r,
        }
    }

    fn primary() -> Primary {
        Primary {
            current: "demo-0".into(),
            target: "demo-0".into(),
        }
    }

    // A healthy three-instance cluster: demo-0 primary at offset 1000, demo-1 and demo-2
    // replicas at 900 and 950.
    fn healthy() -> Vec<Candidate> {
        vec![
            pod("demo-0", "10.0.0.1", Some(report("master", "R", 1000, ""))),
            pod(
                "demo-1",
                "10.0.0.2",
                Some(report("slave", "R", 900, "10.0.0.1")),
            ),
            pod(
                "demo-2",
                "10.0.0.3",
                Some(report("slave", "R", 950, "10.0.0.1")),
            ),
        ]
    }

    fn chosen(target: BackupTarget, p: &Primary, c: &[Candidate]) -> Result<String, String> {
        select(target, p, c).map(|c| c.pod)
    }

    #[test]
    fn prefer_replica_takes_the_least_lagging_in_sync_replica() {
        let c = healthy();
        assert_eq!(
            chosen(BackupTarget::PreferReplica, &primary(), &c),
            Ok("demo-2".into())
        );
        assert_eq!(
            chosen(BackupTarget::Primary, &primary(), &c),
            Ok("demo-0".into())
        );
    }

    #[test]
    fn replicas_out_of_sync_are_passed_over() {
        type Edit = fn(&mut Candidate);
        let cases: [(&str, Edit); 10] = [
            ("not ready", |c| c.ready = false),
            ("terminating", |c| c.terminating = true),
            ("no IP", |c| c.ip = None),
            ("no answer", |c| c.report = None),
            ("fenced", |c| c.report.as_mut().unwrap().fenced = true),
            ("link down", |c| {
                c.report.as_mut().unwrap().master_link_status = "down".into()
            }),
            ("full sync", |c| {
                c.report.as_mut().unwrap().master_sync_in_progress = true
            }),
            ("other replication ID", |c| {
                c.report.as_mut().unwrap().replication_id = "OTHER".into()
            }),
            ("too far behind", |c| {
                c.report.as_mut().unwrap().replication_offset = 1000 - MAX_LAG_BYTES - 1
            }),
            ("follows another primary", |c| {
                c.report.as_mut().unwrap().master_host = "10.9.9.9".into()
            }),
        ];
        for (what, edit) in cases {
            let mut c = healthy();
            edit(&mut c[2]);
            assert_eq!(
                chosen(BackupTarget::PreferReplica, &primary(), &c),
                Ok("demo-1".into()),
                "demo-2 {what}"
            );
            edit(&mut c[1]);
            assert_eq!(
                chosen(BackupTarget::PreferReplica, &primary(), &c),
                Ok("demo-0".into()),
                "both replicas {what}: the primary"
            );
        }
    }

    #[test]
    fn a_sentinel_or_stray_pod_is_never_chosen() {
        // The caller lists data pods only; even a sentinel that slipped in must be in sync
        // with the primary's replication ID to qualify, which a sentinel never reports.
        let mut c = healthy();
        c.truncate(1);
        let mut sentinel = pod("demo-sentinel-0", "10.0.0.9", None);
        sentinel.report = Some(report("", "", 0, ""));
        c.push(sentinel);
        assert_eq!(
            chosen(BackupTarget::PreferReplica, &primary(), &c),
            Ok("demo-0".into())
        );
    }

    type Case = (&'static str, Primary, fn(&mut Vec<Candidate>), &'static str);

    #[test]
    fn nothing_is_chosen_without_a_usable_primary() {
        let cases: [Case; 7] = [
            (
                "no primary named",
                Primary::default(),
                |_| {},
                "no primary yet",
            ),
            (
                "handoff",
                Primary {
                    current: "demo-0".into(),
                    target: "demo-1".into(),
                },
                |_| {},
                "handoff from demo-0 to demo-1",
            ),
            (
                "primary pod gone",
                primary(),
                |c| {
                    c.remove(0);
                },
                "has no pod",
            ),
            (
                "primary silent",
                primary(),
                |c| c[0].report = None,
                "does not answer",
            ),
            (
                "primary fenced",
                primary(),
                |c| c[0].report.as_mut().unwrap().fenced = true,
                "is fenced",
            ),
            (
                "primary demoted",
                primary(),
                |c| c[0].report.as_mut().unwrap().role = "slave".into(),
                "does not run as a primary",
            ),
            (
                "primary not ready",
                primary(),
                |c| c[0].ready = false,
                "is not Ready",
            ),
        ];
        for (what, p, edit, why) in cases {
            let mut c = healthy();
            edit(&mut c);
            for target in [BackupTarget::PreferReplica, BackupTarget::Primary] {
                let err = chosen(target, &p, &c).expect_err(what);
                assert!(err.contains(why), "{what}: {err}");
            }
        }
    }

    #[test]
    fn qualifying_pods_are_the_primary_and_with_prefer_replica_any_in_sync_replica() {
        let mut c = healthy();
        for pod in ["demo-0", "demo-1", "demo-2"] {
            assert!(
                qualifies(BackupTarget::PreferReplica, &primary(), &c, pod),
                "{pod}"
            );
        }
        assert!(qualifies(BackupTarget::Primary, &primary(), &c, "demo-0"));
        assert!(!qualifies(BackupTarget::Primary, &primary(), &c, "demo-1"));
        c[1].report.as_mut().unwrap().master_link_status = "down".into();
        assert!(!qualifies(
            BackupTarget::PreferReplica,
            &primary(),
            &c,
            "demo-1"
        ));
        c[0].report = None;
        assert!(!qualifies(
            BackupTarget::PreferReplica,
            &primary(),
            &c,
            "demo-2"
        ));
    }

    #[test]
    fn an_idle_target_primary_equal_to_current_is_no_handoff() {
        let p = Primary {
            current: "demo-0".into(),
            target: String::new(),
        };
        assert_eq!(
            chosen(BackupTarget::Primary, &p, &healthy()),
            Ok("demo-0".into())
        );
    }
}
