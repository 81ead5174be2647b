//! The RedisBackup state machine (pure): what one pass does, and what an instance's answer
//! about a running backup means.
//!
//! Contract of [`decide`]:
//! - `Completed` and `Failed` are final: [`Step::Finished`].
//! - An invalid destination, a missing cluster, a cluster-mode cluster and a cluster without
//!   `backupCredentialsSecret` fail the backup at once, with a message saying which.
//! - Pending (or no phase yet): the instance [`super::target::select`] chooses is started
//!   ([`Step::Start`]); while the cluster's `backupCredentialsSecret` does not exist, or with
//!   no instance, the backup waits ([`Step::Wait`], saying why) — but not past its deadline,
//!   `creationTimestamp + timeout`, after which it fails with the last reason.
//! - Running: the instance named in `targetPod` is followed ([`Step::Follow`]) until
//!   `startedAt + timeout` (the creation time when an older operator left no `startedAt`).
//!
//! Contract of [`follow`] (one `GET /v1/backup/<id>` answer): `Completed`/`Failed` end the
//! backup; `Running` and no answer are asked again ([`poll_interval`]) until the deadline,
//! then the backup fails saying so; a 404 (the instance does not have it: it restarted, or
//! the start request never reached it) starts it again on the same pod if that pod still
//! qualifies, else puts the backup back to `Pending` ([`Next::Reselect`]), so whichever
//! instance qualifies takes it before `creationTimestamp + timeout`: nothing runs it, so
//! nothing is lost by choosing again, and a pod that qualifies a moment later (an instance
//! status read that timed out, a replica link coming back) is no reason to fail. The
//! target pod being gone fails it at once: the backup ran in that pod's memory.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::target::Choice;
use crate::crd::BackupPhase;
use crate::instance_api::BackupResult;

/// How often a backup waiting for an instance looks again.
pub const WAIT_INTERVAL: Duration = Duration::from_secs(5);

/// What the pass knows about the backup's cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cluster {
    /// No RedisCluster of that name.
    Missing,
    /// The RedisCluster, checked: `Err` says why it cannot be backed up at all.
    Present(Result<(), String>),
}

/// Everything [`decide`] reads.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// This pass's clock.
    pub now: Timestamp,
    /// `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// `status.phase`.
    pub phase: Option<BackupPhase>,
    /// `status.startedAt`.
    pub started: Option<Timestamp>,
    /// `status.targetPod`.
    pub target_pod: &'a str,
    /// The destination check ([`crate::crd::BackupDestination::validate`]).
    pub destination: Result<(), String>,
    /// The cluster.
    pub cluster: Cluster,
    /// The chosen instance, or why there is none (only looked at while pending).
    pub choice: Result<Choice, String>,
    /// Whether the cluster's `backupCredentialsSecret` exists: `Err` says it does not.
    pub credentials: Result<(), String>,
    /// How long a backup may wait to start, and then run.
    pub timeout: Duration,
}

/// What one pass does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing: the backup is over.
    Finished,
    /// Fail it with this message.
    Fail(String),
    /// Stay pending; why.
    Wait(String),
    /// Start it on this instance.
    Start(Choice),
    /// Ask the instance in `targetPod` how it goes, until `deadline`.
    Follow {
        /// The deadline.
        deadline: Timestamp,
    },
}

fn deadline(from: Timestamp, timeout: Duration) -> Timestamp {
    let t = SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX);
    from.checked_add(t).unwrap_or(Timestamp::MAX)
}

/// Human form of a timeout (`1h`, `90s`).
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// One pass (see the module contract).
pub fn decide(f: &Facts<'_>) -> Step {
    match f.phase {
        Some(BackupPhase::Completed | BackupPhase::Failed) => return Step::Finished,
        Some(BackupPhase::Running) if !f.target_pod.is_empty() => {
            let from = f.started.unwrap_or(f.created);
            return Step::Follow {
                deadline: deadline(from, f.timeout),
            };
        }
        _ => {}
    }
    if let Err(e) = &f.destination {
        return Step::Fail(format!("invalid destination: {e}"));
    }
    match &f.cluster {
        Cluster::Missing => return Step::Fail("the RedisCluster does not exist".into()),
        Cluster::Present(Err(e)) => return Step::Fail(e.clone()),
        Cluster::Present(Ok(())) => {}
    }
    let late = f.now >= deadline(f.created, f.timeout);
    if let Err(why) = &f.credentials {
        if late {
            return Step::Fail(format!(
                "the backup could not start within {}: {why}",
                human(f.timeout)
            ));
        }
        return Step::Wait(why.clone());
    }
    match &f.choice {
        Ok(c) => Step::Start(c.clone()),
        Err(why) if late => Step::Fail(format!(
            "no instance could take the backup within {}: {why}",
            human(f.timeout)
        )),
        Err(why) => Step::Wait(why.clone()),
    }
}

/// What asking the target instance gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Its answer.
    Answer(BackupResult),
    /// It does not know the backup (404).
    Unknown,
    /// No answer (why): no IP yet, a transport error, an unexpected status.
    NoAnswer(String),
    /// The target pod no longer exists.
    PodGone,
}

/// What to do after a [`Poll`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Completed: record it.
    Complete(BackupResult),
    /// Failed with this message.
    Fail(String),
    /// Ask again after this long.
    Again(Duration),
    /// Start it again on the same pod (it forgot it).
    Restart,
    /// No instance runs it and the target pod does not qualify now: back to `Pending`
    /// (why), to be taken by whichever instance qualifies.
    Reselect(String),
}

/// How long to wait before asking again, `elapsed` after the start: every second at first,
/// a tenth of the elapsed time later on, at most 10 s, and never past the deadline.
pub fn poll_interval(elapsed: Duration, left: Duration) -> Duration {
    (elapsed / 10)
        .clamp(Duration::from_secs(1), Duration::from_secs(10))
        .min(left.max(Duration::from_millis(100)))
}

fn left(now: Timestamp, deadline: Timestamp) -> Duration {
    Duration::try_from(deadline.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// One answer (see the module contract); `started` is when the backup started, `timeout`
/// its allowance, `restartable` whether the target pod still qualifies to take it.
pub fn follow(
    poll: Poll,
    now: Timestamp,
    started: Timestamp,
    timeout: Duration,
    restartable: bool,
) -> Next {
    let deadline = deadline(started, timeout);
    let late = now >= deadline;
    let again = || {
        let elapsed = Duration::try_from(now.duration_since(started)).unwrap_or(Duration::ZERO);
        Next::Again(poll_interval(elapsed, left(now, deadline)))
    };
    match poll {
        Poll::Answer(r) if r.phase == "Completed" => Next::Complete(r),
        Poll::Answer(r) if r.phase == "Failed" => Next::Fail(if r.error.is_empty() {
            "the instance reported the backup failed".into()
        } else {
            r.error
        }),
        Poll::PodGone => Next::Fail(
            "the target pod was deleted while the backup ran; it is lost with the pod".into(),
        ),
        _ if late => Next::Fail(format!(
            "the backup did not finish within {} of its start",
            human(timeout)
        )),
        Poll::Unknown if restartable => Next::Restart,
        Poll::Unknown => Next::Reselect(
            "the target instance does not know the backup (it restarted, or the start never \
             reached it) and does not qualify to take it now"
                .into(),
        ),
        Poll::Answer(_) | Poll::NoAnswer(_) => again(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_secs(3600);

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).expect("ts")
    }

    fn choice() -> Choice {
        Choice {
            pod: "demo-1".into(),
            ip: "10.0.0.2".into(),
            replica: true,
        }
    }

    fn facts(phase: Option<BackupPhase>) -> Facts<'static> {
        Facts {
            now: t(10),
            created: t(0),
            phase,
            started: None,
            target_pod: "",
            destination: Ok(()),
            cluster: Cluster::Present(Ok(())),
            choice: Ok(choice()),
            credentials: Ok(()),
            timeout: H,
        }
    }

    #[test]
    fn terminal_backups_are_left_alone() {
        for p in [BackupPhase::Completed, BackupPhase::Failed] {
            let mut f = facts(Some(p));
            f.destination = Err("bad".into());
            assert_eq!(decide(&f), Step::Finished);
        }
    }

    #[test]
    fn a_pending_backup_starts_waits_or_fails() {
        assert_eq!(decide(&facts(None)), Step::Start(choice()));
        assert_eq!(
            decide(&facts(Some(BackupPhase::Pending))),
            Step::Start(choice())
        );
        let mut f = facts(None);
        f.choice = Err("the primary demo-0 does not answer".into());
        assert_eq!(
            decide(&f),
            Step::Wait("the primary demo-0 does not answer".into())
        );
        f.now = t(3600);
        assert_eq!(
            decide(&f),
            Step::Fail(
                "no instance could take the backup within 1h: the primary demo-0 does not answer"
                    .into()
            )
        );
    }

    #[test]
    fn a_backup_waits_for_the_credentials_secret_until_its_deadline() {
        let mut f = facts(Some(BackupPhase::Pending));
        let why = "Secret backup-credentials does not exist";
        f.credentials = Err(why.into());
        assert_eq!(decide(&f), Step::Wait(why.into()));
        f.now = t(3600);
        assert_eq!(
            decide(&f),
            Step::Fail(format!("the backup could not start within 1h: {why}"))
        );
        // Once started, the Secret is not looked at again.
        let mut f = facts(Some(BackupPhase::Running));
        f.target_pod = "demo-1";
        f.credentials = Err(why.into());
        assert!(matches!(decide(&f), Step::Follow { .. }));
    }

    #[test]
    fn what_cannot_be_backed_up_fails_at_once() {
        let mut f = facts(None);
        f.destination = Err("destination.s3.bucket is required".into());
        assert_eq!(
            decide(&f),
            Step::Fail("invalid destination: destination.s3.bucket is required".into())
        );
        let mut f = facts(Some(BackupPhase::Pending));
        f.cluster = Cluster::Missing;
        assert_eq!(
            decide(&f),
            Step::Fail("the RedisCluster does not exist".into())
        );
        f.cluster = Cluster::Present(Err("no credentials".into()));
        assert_eq!(decide(&f), Step::Fail("no credentials".into()));
    }

    #[test]
    fn a_running_backup_is_followed_until_its_start_plus_the_timeout() {
        let mut f = facts(Some(BackupPhase::Running));
        f.target_pod = "demo-1";
        f.started = Some(t(5));
        // Whatever the cluster looks like now: it started already.
        f.cluster = Cluster::Missing;
        assert_eq!(decide(&f), Step::Follow { deadline: t(3605) });
        f.started = None;
        assert_eq!(decide(&f), Step::Follow { deadline: t(3600) });
        // Running without a target (never started anywhere) is pending.
        f.target_pod = "";
        f.cluster = Cluster::Present(Ok(()));
        assert_eq!(decide(&f), Step::Start(choice()));
    }

    fn result(phase: &str, error: &str) -> BackupResult {
        BackupResult {
            id: "b".into(),
            phase: phase.into(),
            artifact_type: "rdb".into(),
            backup_path: "s3://bk/b.rdb".into(),
            backup_size: 10,
            checksum_sha256: "00".into(),
            error: error.into(),
        }
    }

    #[test]
    fn answers_are_followed() {
        let f = |p: Poll, now: i64, restartable: bool| follow(p, t(now), t(0), H, restartable);
        let done = result("Completed", "");
        assert_eq!(
            f(Poll::Answer(done.clone()), 10, false),
            Next::Complete(done.clone())
        );
        // A result that arrives late still counts: the artifact is there.
        assert_eq!(
            f(Poll::Answer(done.clone()), 4000, false),
            Next::Complete(done)
        );
        assert_eq!(
            f(Poll::Answer(result("Failed", "PUT …: HTTP 403")), 10, true),
            Next::Fail("PUT …: HTTP 403".into())
        );
        assert_eq!(
            f(Poll::Answer(result("Running", "")), 5, true),
            Next::Again(Duration::from_secs(1))
        );
        assert_eq!(
            f(Poll::Answer(result("Running", "")), 600, true),
            Next::Again(Duration::from_secs(10))
        );
        assert_eq!(
            f(Poll::Answer(result("Running", "")), 3600, true),
            Next::Fail("the backup did not finish within 1h of its start".into())
        );
        assert_eq!(
            f(Poll::NoAnswer("timeout".into()), 30, true),
            Next::Again(Duration::from_secs(3))
        );
        assert!(matches!(
            f(Poll::NoAnswer("timeout".into()), 3601, true),
            Next::Fail(_)
        ));
        assert_eq!(f(Poll::Unknown, 30, true), Next::Restart);
        assert!(
            matches!(f(Poll::Unknown, 30, false), Next::Reselect(m) if m.contains("restarted"))
        );
        // Past the deadline a forgotten backup fails like any other.
        assert!(matches!(f(Poll::Unknown, 3600, false), Next::Fail(m) if m.contains("1h")));
        assert!(matches!(f(Poll::PodGone, 30, true), Next::Fail(m) if m.contains("deleted")));
    }

    #[test]
    fn the_interval_never_overshoots_the_deadline() {
        assert_eq!(
            poll_interval(Duration::from_secs(600), Duration::from_secs(2)),
            Duration::from_secs(2)
        );
        assert_eq!(
            poll_interval(Duration::from_secs(600), Duration::ZERO),
            Duration::from_millis(100)
        );
        assert_eq!(human(Duration::from_secs(90)), "90s");
        assert_eq!(human(Duration::from_secs(120)), "2m");
    }
}
