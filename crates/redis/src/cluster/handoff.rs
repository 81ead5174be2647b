//! The primary handoff, pure: failure detection, candidate selection and the failover /
//! switchover state machine over the durable intent in the status (CloudNativePG's
//! `targetPrimary`), the fencing annotations and the primary Lease.
//!
//! Contract: [`decide`] looks at durable state and this pass's observations and names the one
//! next [`Step`]; the executor carries it out, re-observes what it touched and asks again, so
//! every step is idempotent and a pass (or an operator restart) can stop between any two.
//!
//! The durable state, and what each stage means (`current` = `status.currentPrimary`,
//! `target` = `status.targetPrimary`):
//!
//! | stage | durable state | next |
//! |---|---|---|
//! | idle | `target` empty or = `current` | watch the primary; release the operator's fences of pods known stopped or following `current`; start a planned switchover |
//! | failover, electing | `target` = `pending` | fence `current` → confirm it cannot take writes → elect, or abort when nobody may be promoted |
//! | failover, promoting | `target` = X, `current` in the operator's fences | move the Lease to X → `POST /v1/promote` to X → point `-leader` at X → publish `current` = X |
//! | switchover | `target` = X, `current` not fenced by the operator | check X → move the Lease → `POST /v1/switchover` to `current` (Redis `FAILOVER TO X`) → point `-leader` → publish |
//!
//! Rules:
//! - **Detection**: the first bad observation of the current primary is recorded in
//!   `currentPrimaryFailingSinceTimestamp` (any good one clears it). The primary is failing
//!   only after [`DETECTION_MISSES`] consecutive bad observations spanning at least
//!   [`DETECTION_WINDOW`] (or, after an operator restart, [`RESUMED_MISSES`] once the recorded
//!   mark spans the window) **and** corroboration: its pod is gone, finished or not Ready, or
//!   every replica that answers sees its link down. Then `failoverDelay` must pass from
//!   `currentPrimaryFailingSinceTimestamp`. A primary fenced by
//!   the user is never failed over; neither during maintenance, in replica mode, in sentinel
//!   mode, hibernated, or while the fencing annotation is unreadable.
//! - **Intent first**: `target = pending` is written before any fence or promotion; a planned
//!   switchover writes `target = X` before anything else.
//! - **Fence and confirm**: the old primary is added to `redis.io/fencedInstances` (and to
//!   `redis.io/operatorFencedInstances`, so only the operator's own fences are released), and
//!   nobody is elected until it is confirmed unable to take writes: its pod is gone or finished,
//!   or it reports fenced with redis-server not running. An old primary that does not answer
//!   (or does not stop within [`STOP_TIMEOUT`]) has its pod deleted; the kubelet stops it.
//! - **Candidates** ([`candidate`]): a running, unfenced replica within `instances` of the
//!   last primary's replication history ([`history`]), with no full sync in progress, whose
//!   link was up until the failure (down for at most the time since the failure plus
//!   `minSyncReplicasMaxLag`); the highest offset wins, then the lowest ordinal. The link's
//!   age is not held against a replica when the old primary restarted in place since its
//!   replicas synchronised and every replica within `instances` answers with the history: their
//!   links went down when that incarnation ended, maybe long before the failure was seen, and
//!   the highest offset of a complete set holds every acknowledged write. The history is
//!   the old primary's last replication ID when a replica has it; otherwise the newest one a
//!   replica was seen in sync with (`status.syncedReplicationID`): a primary restarted in place
//!   (or just promoted) takes a new replication ID, and until a replica has synchronised from
//!   it no write it took was acknowledged by a replica, while its replicas still hold every
//!   write acknowledged before. A replica that never synchronised has its own replication ID
//!   and is never a candidate. With none, the failover is aborted: nobody was promoted, the
//!   fence is lifted and the old primary comes back.
//! - **The Lease** `<cluster>-primary` names the one instance allowed to be primary. Before
//!   any promotion or handover it is moved to the target by compare-and-swap, and only from
//!   the old primary or from an instance known not to have become primary, so two promotions
//!   cannot both happen.
//! - **Order**: promote, then point `-leader` at the new primary, then publish
//!   `currentPrimary`; the operator's fence of the old primary is released only once
//!   `currentPrimary` names another instance (so it can only boot as a replica) and the old
//!   primary is known stopped or already a replica.
//! - A switchover whose target is not in sync is aborted before anything moved; one that
//!   Redis abandons (the target did not catch up within `switchoverDelay`) moves the Lease
//!   back and is aborted: the old primary kept its role and resumes writes. A switchover whose
//!   old primary fails on the way becomes a failover.

use std::time::Duration;

use jiff::Timestamp;

use super::facts::{Member, Members};
use super::model::Fencing;
use crate::instance_api::{Boot, PromoteRequest};

/// The `targetPrimary` value of a failover that has not elected a replica yet.
pub const PENDING: &str = "pending";
/// Consecutive bad observations of the primary before it may be failing.
pub const DETECTION_MISSES: u32 = 3;
/// How long the bad observations must span.
pub const DETECTION_WINDOW: Duration = Duration::from_secs(4);
/// Bad observations an operator process needs when the durable failing mark already spans
/// [`DETECTION_WINDOW`] (a restarted operator resumes the detection instead of starting over).
pub const RESUMED_MISSES: u32 = 2;
/// How long a reachable, fenced old primary may take to stop redis-server before its pod is
/// deleted.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack between the first bad observation and the recorded failure time, for the link check.
pub const FAILURE_SLACK: Duration = Duration::from_secs(10);

/// Bad observations of the current primary in a row, kept in memory. The first one is also
/// recorded durably (`currentPrimaryFailingSinceTimestamp`, cleared by any good observation),
/// so an operator restart resumes the detection rather than starting it over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streak {
    /// How many.
    pub misses: u32,
    /// When the first was seen.
    pub since: Option<Timestamp>,
}

impl Streak {
    /// The streak after one more observation at `now`.
    #[must_use]
    pub fn observe(self, good: bool, now: Timestamp) -> Streak {
        if good {
            return Streak::default();
        }
        Streak {
            misses: self.misses.saturating_add(1),
            since: self.since.or(Some(now)),
        }
    }
}

/// A planned switchover someone asked for (rolling update, scale-down, drain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The replica to hand over to.
    pub target: String,
    /// Why, in words.
    pub reason: String,
}

/// Everything [`decide`] reads.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// This pass's clock.
    pub now: Timestamp,
    /// `status.currentPrimary`.
    pub current: &'a str,
    /// `status.targetPrimary`.
    pub target: &'a str,
    /// `status.targetPrimaryTimestamp`.
    pub target_since: Option<Timestamp>,
    /// `status.currentPrimaryFailingSinceTimestamp`.
    pub failing_since: Option<Timestamp>,
    /// The instances as observed.
    pub members: &'a Members,
    /// `instances`: only ordinals below it may become primary.
    pub instances: i32,
    /// `redis.io/fencedInstances`.
    pub fencing: &'a Fencing,
    /// `redis.io/operatorFencedInstances`.
    pub operator_fenced: &'a Fencing,
    /// The primary Lease's holder (`None`: no Lease yet).
    pub lease_holder: Option<&'a str>,
    /// The pod the live `-leader` Service selects.
    pub leader: Option<&'a str>,
    /// Bad observations of the current primary, this one included.
    pub streak: Streak,
    /// The last known replication ID of the current primary (from the status).
    pub primary_replid: &'a str,
    /// `status.syncedReplicationID`: the newest replication ID of the primary a replica was
    /// seen in sync with.
    pub synced_replid: &'a str,
    /// `failoverDelay`.
    pub failover_delay: Duration,
    /// `minSyncReplicasMaxLag`.
    pub max_lag: Duration,
    /// `switchoverDelay`.
    pub switchover_timeout: Duration,
    /// Whether the operator may fail over by itself now (see the module rules).
    pub automatic: bool,
    /// A planned switchover wanted now.
    pub request: Option<Request>,
    /// The target that refused a promotion or handover on this pass, and why.
    pub refused: Option<(&'a str, &'a str)>,
}

/// The one next thing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do.
    Idle,
    /// The primary looks bad; look again soon.
    Watch(String),
    /// The failure is confirmed; record when (`currentPrimaryFailingSinceTimestamp`).
    MarkFailing(String),
    /// The primary recovered: clear `currentPrimaryFailingSinceTimestamp`.
    ClearFailing,
    /// Confirmed, waiting for `failoverDelay`.
    Delay {
        /// Why.
        reason: String,
        /// Time left.
        remaining: Duration,
    },
    /// Write `targetPrimary = pending` (the failover's intent).
    StartFailover(String),
    /// Write `targetPrimary = target` (a planned switchover's intent).
    StartSwitchover(Request),
    /// Add `pod` to the fencing annotations.
    Fence(String),
    /// Delete `pod` so the kubelet stops it (it cannot be confirmed stopped otherwise).
    StopPod {
        /// The old primary's pod.
        pod: String,
        /// Why.
        reason: String,
    },
    /// Write `targetPrimary = target` (the elected replica).
    Elect {
        /// The replica.
        target: String,
        /// Why it.
        reason: String,
    },
    /// Undo a handoff that promoted nobody: move the Lease back to `current` when it moved,
    /// write `targetPrimary = current`, and lift the operator's fence of `current`.
    Abort(String),
    /// Move the Lease from `from` (`None`: create it) to `to`.
    MoveLease {
        /// The present holder.
        from: Option<String>,
        /// The new holder.
        to: String,
    },
    /// `POST /v1/promote` to `target`.
    Promote {
        /// The pod.
        target: String,
        /// Its IP.
        ip: String,
        /// The guard.
        request: PromoteRequest,
    },
    /// `POST /v1/switchover` to the old primary `from`, handing over to `target`.
    HandOver {
        /// The old primary.
        from: String,
        /// Its IP.
        from_ip: String,
        /// The new primary.
        target: String,
        /// Its IP.
        target_ip: String,
        /// How long writes may stay paused.
        timeout_ms: u64,
    },
    /// Point `-leader` at `target`.
    PointLeader(String),
    /// Write `currentPrimary = target`.
    Publish(String),
    /// Remove `pods` from the operator's fences.
    Release(Vec<String>),
    /// Blocked; why.
    Wait(String),
}

impl Step {
    /// The step's name (its variant), as crash-point tests name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Idle => "Idle",
            Step::Watch(_) => "Watch",
            Step::MarkFailing(_) => "MarkFailing",
            Step::ClearFailing => "ClearFailing",
            Step::Delay { .. } => "Delay",
            Step::StartFailover(_) => "StartFailover",
            Step::StartSwitchover(_) => "StartSwitchover",
            Step::Fence(_) => "Fence",
            Step::StopPod { .. } => "StopPod",
            Step::Elect { .. } => "Elect",
            Step::Abort(_) => "Abort",
            Step::MoveLease { .. } => "MoveLease",
            Step::Promote { .. } => "Promote",
            Step::HandOver { .. } => "HandOver",
            Step::PointLeader(_) => "PointLeader",
            Step::Publish(_) => "Publish",
            Step::Release(_) => "Release",
            Step::Wait(_) => "Wait",
        }
    }
}

/// The primary's health this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Reachable, running, primary.
    Healthy,
    /// Bad, not (yet) confirmed.
    Suspect(String),
    /// Confirmed failing.
    Failed(String),
}

/// Whether this pass's observation of `m` (the current primary) is good.
pub fn good(m: Option<&Member>) -> bool {
    m.is_some_and(|m| m.is_master() && m.report().is_some_and(|r| !r.fenced))
}

fn what_is_wrong(m: Option<&Member>) -> String {
    let Some(m) = m else {
        return "its pod does not exist".into();
    };
    match &m.poll {
        super::facts::Poll::NotPolled => "its pod has no IP".into(),
        super::facts::Poll::Failed(e) => format!("its instance manager does not answer ({e})"),
        super::facts::Poll::Report(r) => match &r.boot {
            Boot::Waiting { reason } => format!("redis-server is not running ({reason})"),
            Boot::Stopping => "redis-server is stopping".into(),
            Boot::Running if r.fenced => "it is fenced".into(),
            Boot::Running => format!("it reports role {:?}", r.role),
        },
    }
}

/// Detection (see the module rules).
pub fn health(i: &Inputs<'_>) -> Health {
    let m = i.members.get(i.current);
    if good(m) {
        return Health::Healthy;
    }
    let what = format!("primary {} is unhealthy: {}", i.current, what_is_wrong(m));
    let spans = |s: Timestamp| i.now.duration_since(s).unsigned_abs() >= DETECTION_WINDOW;
    let fresh = i.streak.misses >= DETECTION_MISSES && i.streak.since.is_some_and(spans);
    // The durable mark of the first bad observation spans a restart of the operator; this
    // process still needs bad observations of its own.
    let resumed = i.streak.misses >= RESUMED_MISSES && i.failing_since.is_some_and(spans);
    if !(fresh || resumed) {
        // No counters in the words: they become the phase reason, which must not change
        // every pass.
        return Health::Suspect(format!("{what}; confirming"));
    }
    match corroboration(i, m) {
        Some(why) => Health::Failed(format!("{what}; {why}")),
        None => Health::Suspect(format!(
            "{what}, but neither its pod nor its replicas confirm it"
        )),
    }
}

fn corroboration(i: &Inputs<'_>, m: Option<&Member>) -> Option<String> {
    match m.and_then(|m| m.pod.as_ref()) {
        None => return Some("its pod is gone".into()),
        Some(p) if p.deleting || p.terminal => return Some("its pod is going away".into()),
        Some(p) if !p.ready => return Some("its pod is not Ready".into()),
        Some(_) => {}
    }
    let replicas: Vec<&Member> = i
        .members
        .iter()
        .filter(|r| r.name != i.current && r.is_replica())
        .collect();
    let down = replicas
        .iter()
        .all(|r| r.report().is_some_and(|r| r.master_link_status != "up"));
    (!replicas.is_empty() && down).then(|| "every replica sees its link down".into())
}

/// When the failure started, for the link check of candidates.
fn failure_start(i: &Inputs<'_>) -> Option<Timestamp> {
    let slack = jiff::SignedDuration::try_from(FAILURE_SLACK).unwrap_or_default();
    i.failing_since.map(|t| t - slack)
}

/// The replication ID a candidate must have (see the module rules): the old primary's last
/// one when an instance other than it reports it, else the newest one a replica was seen in
/// sync with, else (not known) the old primary's.
pub fn history<'m>(i: &Inputs<'m>) -> &'m str {
    let latest = i.primary_replid;
    let reported = i
        .members
        .iter()
        .filter(|m| m.name != i.current)
        .filter_map(Member::report)
        .any(|r| r.replication_id == latest);
    if latest.is_empty() || reported || i.synced_replid.is_empty() {
        latest
    } else {
        i.synced_replid
    }
}

/// The replica to promote (see the module rules), with why it.
pub fn candidate<'m>(i: &Inputs<'m>) -> Option<(&'m Member, String)> {
    let replid = history(i);
    i.members
        .iter()
        .filter(|m| m.name != i.current && m.ordinal < i.instances)
        .filter(|m| rejection(i, m).is_none())
        .max_by_key(|m| {
            let offset = m.report().map_or(0, |r| r.replication_offset);
            (offset, -m.ordinal)
        })
        .map(|m| {
            let offset = m.report().map_or(0, |r| r.replication_offset);
            let why = format!(
                "{} has the highest offset ({offset}) of the replicas in sync with replication ID {replid}",
                m.name
            );
            (m, why)
        })
}

/// Why no replica may be promoted, replica by replica (for the status and the logs).
pub fn no_candidate(i: &Inputs<'_>) -> String {
    if history(i).is_empty() {
        return "the old primary's replication ID is unknown".to_owned();
    }
    let why: Vec<String> = i
        .members
        .iter()
        .filter(|m| m.name != i.current && m.ordinal < i.instances)
        .filter_map(|m| rejection(i, m).map(|r| format!("{}: {r}", m.name)))
        .collect();
    if why.is_empty() {
        "there is no other instance".to_owned()
    } else {
        why.join("; ")
    }
}

/// Why `m` may not be promoted, `None` when it may.
fn rejection(i: &Inputs<'_>, m: &Member) -> Option<String> {
    let replid = history(i);
    if replid.is_empty() {
        return Some("the old primary's replication ID is unknown".into());
    }
    // Seconds a link may have been down: since the failure, plus the lag bound; or as long as
    // another replica of the history has had its link down (plus the bound). Replicas that
    // lost the primary at the same moment saw it die (or get cut off) then, even when the
    // operator, down or cut off itself, recorded the failure much later: its record alone
    // would hold them all back forever. A lone replica, or one whose link went down long
    // before another's, is still judged by the recorded failure.
    let allowed = failure_start(i).map_or(0, |start| {
        let since = i.now.duration_since(start).as_secs().max(0);
        since.max(last_linked_peer(i, m, replid)) + secs(i.max_lag)
    });
    if !m.pod_live() || m.ip().is_none() {
        return Some("its pod is not running with an IP".into());
    }
    if i.fencing.fences(&m.name) {
        return Some("it is fenced".into());
    }
    if !m.is_replica() {
        return Some("it is not a running replica".into());
    }
    let r = m.report()?;
    if r.fenced {
        return Some("it reports fenced".into());
    }
    if r.master_sync_in_progress {
        return Some("a full synchronisation is in progress".into());
    }
    if r.replication_id != replid {
        return Some(format!(
            "its replication ID {} is not the old primary's ({replid})",
            r.replication_id
        ));
    }
    // Offset 0 with the history's replication ID is a replica synchronised before the first
    // write (a new cluster): it has everything. A replica that never synchronised has its own
    // replication ID, whatever its offset.
    if r.master_link_status != "up"
        && r.master_link_down_since_seconds > allowed
        && !restarted_with_every_replica_reporting(i)
    {
        return Some(format!(
            "its link has been down {} s, more than the {allowed} s allowed",
            r.master_link_down_since_seconds
        ));
    }
    None
}

/// Seconds since another replica of the history (not `m`) was last linked to the old
/// primary: 0 while one still is; 0 when there is no other.
fn last_linked_peer(i: &Inputs<'_>, m: &Member, replid: &str) -> i64 {
    i.members
        .iter()
        .filter(|p| p.name != m.name && p.name != i.current && p.ordinal < i.instances)
        .filter(|p| p.is_replica())
        .filter_map(Member::report)
        .filter(|r| r.replication_id == replid && !r.master_sync_in_progress)
        .map(|r| match r.master_link_status.as_str() {
            "up" => 0,
            _ => r.master_link_down_since_seconds.max(0),
        })
        .min()
        .unwrap_or(0)
}

/// The old primary restarted in place since its replicas last synchronised (the history is
/// not its replication ID: no replica followed the new incarnation, so none of its writes was
/// acknowledged by a replica), and every replica within `instances` answers as a running,
/// unfenced replica of that history with no full sync in progress. Their links went down when
/// the incarnation they followed ended, which can be well before the operator saw the failure
/// (a primary restarting in place answers between its crashes), so the link's age says
/// nothing; and with every replica seen, the highest offset holds every write a replica
/// acknowledged. Then the link's age is not held against a candidate.
fn restarted_with_every_replica_reporting(i: &Inputs<'_>) -> bool {
    let replid = history(i);
    if replid.is_empty() || i.primary_replid.is_empty() || replid == i.primary_replid {
        return false;
    }
    i.members
        .iter()
        .filter(|m| m.name != i.current && m.ordinal < i.instances)
        .all(|m| {
            m.pod_live()
                && m.ip().is_some()
                && !i.fencing.fences(&m.name)
                && m.is_replica()
                && m.report().is_some_and(|r| {
                    !r.fenced && !r.master_sync_in_progress && r.replication_id == replid
                })
        })
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Whether `name` is known not to have become a primary: its pod is gone, or it answers as
/// something other than a running primary.
fn not_promoted(i: &Inputs<'_>, name: &str) -> bool {
    match i.members.get(name) {
        None => true,
        Some(m) if m.pod_gone() => true,
        Some(m) => m.report().is_some() && !m.is_master(),
    }
}

/// Whether the old primary `pod` can take no writes: gone, or fenced and stopped.
fn confirmed_stopped(m: Option<&Member>) -> bool {
    let Some(m) = m else {
        return true;
    };
    m.pod_gone()
        || m.report()
            .is_some_and(|r| r.fenced && r.boot != Boot::Running)
}

/// Whether the operator may lift its fence of `pod`: the cluster's primary is another
/// instance, and `pod` is stopped or already replicates from it.
fn releasable(i: &Inputs<'_>, pod: &str) -> bool {
    if pod == i.current {
        // An aborted failover: `target` is back on `current` (or empty), nobody was promoted.
        return i.target.is_empty() || i.target == i.current;
    }
    let m = i.members.get(pod);
    if confirmed_stopped(m) {
        return true;
    }
    let primary_ip = i.members.get(i.current).and_then(Member::ip);
    m.is_some_and(|m| m.is_replica() && primary_ip.is_some_and(|ip| m.in_sync_with(Some(ip))))
}

/// The first primary of a cluster whose status names none: an instance that already runs
/// as a primary (the status was lost), else ordinal 0.
pub fn first_primary(i: &Inputs<'_>, ordinal_zero: &str) -> String {
    i.members
        .masters()
        .into_iter()
        .filter(|m| m.ordinal < i.instances)
        .max_by_key(|m| (m.report().map_or(0, |r| r.connected_replicas), -m.ordinal))
        .map_or_else(|| ordinal_zero.to_owned(), |m| m.name.clone())
}

/// The next step (see the module contract). `ordinal_zero` names the pod that becomes the
/// first primary of a new cluster.
pub fn decide(i: &Inputs<'_>, ordinal_zero: &str) -> Step {
    if i.current.is_empty() {
        return Step::Publish(first_primary(i, ordinal_zero));
    }
    if i.target.is_empty() || i.target == i.current {
        return idle(i);
    }
    if i.target == PENDING {
        return electing(i);
    }
    if i.operator_fenced.fences(i.current) {
        return promoting(i, i.target);
    }
    switching(i, i.target)
}

fn idle(i: &Inputs<'_>) -> Step {
    let release: Vec<String> = i
        .operator_fenced
        .pods
        .iter()
        .filter(|p| releasable(i, p))
        .cloned()
        .collect();
    if !release.is_empty() {
        return Step::Release(release);
    }
    match i.lease_holder {
        None => {
            return Step::MoveLease {
                from: None,
                to: i.current.to_owned(),
            };
        }
        Some(h) if h != i.current => {
            if not_promoted(i, h) {
                return Step::MoveLease {
                    from: Some(h.to_owned()),
                    to: i.current.to_owned(),
                };
            }
            return Step::Wait(format!(
                "the primary Lease names {h}, which may be a primary, while currentPrimary is {}",
                i.current
            ));
        }
        Some(_) => {}
    }
    if let Some(why) = &i.fencing.unreadable {
        return Step::Wait(format!("no automatic failover: {why}"));
    }
    if i.fencing.fences(i.current) {
        // A fenced primary is the user's choice: never failed over.
        return Step::Idle;
    }
    match health(i) {
        Health::Healthy if i.failing_since.is_some() => Step::ClearFailing,
        Health::Healthy => match &i.request {
            Some(r) => Step::StartSwitchover(r.clone()),
            None => Step::Idle,
        },
        // The first bad observation is recorded before anything else: detection and the
        // candidates' link check count from it, across operator restarts.
        Health::Suspect(why) if i.automatic && i.failing_since.is_none() => Step::MarkFailing(why),
        Health::Suspect(why) => Step::Watch(why),
        Health::Failed(why) => failed(i, why),
    }
}

fn failed(i: &Inputs<'_>, why: String) -> Step {
    if !i.automatic {
        return Step::Wait(format!("{why}; automatic failover is off"));
    }
    let Some(since) = i.failing_since else {
        return Step::MarkFailing(why);
    };
    let elapsed = i.now.duration_since(since).unsigned_abs();
    if elapsed < i.failover_delay {
        return Step::Delay {
            reason: why,
            remaining: i.failover_delay - elapsed,
        };
    }
    match candidate(i) {
        Some(_) => Step::StartFailover(why),
        None => Step::Wait(format!(
            "{why}; no replica is in sync with it, so none may be promoted ({})",
            no_candidate(i)
        )),
    }
}

fn electing(i: &Inputs<'_>) -> Step {
    let old = i.current;
    if !i.fencing.fences(old) {
        return Step::Fence(old.to_owned());
    }
    let m = i.members.get(old);
    if !confirmed_stopped(m) {
        let overdue = i
            .target_since
            .is_some_and(|t| i.now.duration_since(t).unsigned_abs() >= STOP_TIMEOUT);
        return match m {
            Some(m) if m.pod.as_ref().is_some_and(|p| p.deleting) => {
                Step::Wait(format!("waiting for the old primary's pod {old} to stop"))
            }
            Some(m) if m.report().is_some() && !overdue => Step::Wait(format!(
                "waiting for the old primary {old} to stop redis-server (fenced)"
            )),
            _ => Step::StopPod {
                pod: old.to_owned(),
                reason: format!(
                    "the old primary {old} cannot be confirmed stopped: {}",
                    what_is_wrong(m)
                ),
            },
        };
    }
    match candidate(i) {
        Some((m, why)) => Step::Elect {
            target: m.name.clone(),
            reason: why,
        },
        None => Step::Abort(format!(
            "no replica is in sync with the old primary {old} ({}); nobody is promoted and it keeps its role",
            no_candidate(i)
        )),
    }
}

/// The Lease step before acting for `target`, if one is due.
fn lease_step(i: &Inputs<'_>, target: &str) -> Option<Step> {
    match i.lease_holder {
        Some(h) if h == target => None,
        None => Some(Step::MoveLease {
            from: None,
            to: target.to_owned(),
        }),
        Some(h) if h == i.current || not_promoted(i, h) => Some(Step::MoveLease {
            from: Some(h.to_owned()),
            to: target.to_owned(),
        }),
        Some(h) => Some(Step::Wait(format!(
            "the primary Lease names {h}, which may have been promoted; not promoting {target}"
        ))),
    }
}

/// Once `target` runs as primary: point `-leader`, then publish.
fn finish(i: &Inputs<'_>, target: &str) -> Step {
    if i.leader != Some(target) {
        return Step::PointLeader(target.to_owned());
    }
    Step::Publish(target.to_owned())
}

fn promoting(i: &Inputs<'_>, target: &str) -> Step {
    if let Some(step) = lease_step(i, target) {
        return step;
    }
    let Some(m) = i.members.get(target) else {
        return Step::StartFailover(format!("the elected replica {target} is gone"));
    };
    if m.is_master() {
        return finish(i, target);
    }
    if let Some((who, why)) = i.refused.filter(|(who, _)| *who == target) {
        return Step::StartFailover(format!("{who} refused the promotion: {why}"));
    }
    match (m.report(), m.ip()) {
        (Some(r), Some(ip)) if m.is_replica() => Step::Promote {
            target: target.to_owned(),
            ip: ip.to_owned(),
            request: PromoteRequest {
                expected_replication_id: history(i).to_owned(),
                min_offset: r.replication_offset,
            },
        },
        _ if m.pod_gone() => Step::StartFailover(format!("the elected replica {target} is gone")),
        _ => Step::Wait(format!(
            "waiting for the elected replica {target} to answer"
        )),
    }
}

/// Whether `m` may take over from the healthy primary `primary` in a switchover.
fn switch_ready(i: &Inputs<'_>, m: &Member, primary: &Member) -> Result<(), String> {
    if m.ordinal >= i.instances || !m.pod_live() {
        return Err(format!("{} is not a live instance of the cluster", m.name));
    }
    if i.fencing.fences(&m.name) {
        return Err(format!("{} is fenced", m.name));
    }
    if !m.in_sync_with(primary.ip()) {
        return Err(format!(
            "{} is not a replica of {} with its link up and no sync in progress",
            m.name, primary.name
        ));
    }
    let replid = primary.report().map(|r| r.replication_id.as_str());
    if m.report().map(|r| r.replication_id.as_str()) != replid {
        return Err(format!(
            "{} does not share {}'s replication ID",
            m.name, primary.name
        ));
    }
    Ok(())
}

fn switching(i: &Inputs<'_>, target: &str) -> Step {
    let old = i.members.get(i.current);
    let new = i.members.get(target);
    if new.is_some_and(Member::is_master) && i.lease_holder == Some(target) {
        return finish(i, target);
    }
    if let Some((who, why)) = i.refused.filter(|(who, _)| *who == i.current) {
        return Step::Abort(format!(
            "the switchover to {target} was not done by {who}: {why}"
        ));
    }
    let Some(old) = old.filter(|m| m.is_master()) else {
        // The old primary failed on the way: unless it already handed over, fail over.
        return match health(i) {
            Health::Failed(why) if i.automatic => {
                Step::StartFailover(format!("{why} during the switchover to {target}"))
            }
            Health::Failed(why) | Health::Suspect(why) => {
                Step::Wait(format!("switchover to {target} waits: {why}"))
            }
            Health::Healthy => Step::Wait(format!("switchover to {target} in progress")),
        };
    };
    let Some(new) = new else {
        return Step::Abort(format!("the switchover target {target} does not exist"));
    };
    if i.lease_holder != Some(target) {
        if let Err(why) = switch_ready(i, new, old) {
            return Step::Abort(format!("cannot switch over to {target}: {why}"));
        }
        if let Some(step) = lease_step(i, target) {
            return step;
        }
    }
    match (old.ip(), new.ip()) {
        (Some(from_ip), Some(target_ip)) => Step::HandOver {
            from: old.name.clone(),
            from_ip: from_ip.to_owned(),
            target: target.to_owned(),
            target_ip: target_ip.to_owned(),
            timeout_ms: u64::try_from(i.switchover_timeout.as_millis()).unwrap_or(u64::MAX),
        },
        _ => Step::Wait(format!("switchover to {target}: waiting for pod IPs")),
    }
}

#[cfg(test)]
#[path = "handoff_tests.rs"]
mod tests;
