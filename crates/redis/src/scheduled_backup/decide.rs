//! The RedisScheduledBackup decisions (pure): when the next backup is due, whether one is due
//! now and under which name, the status, and which old backups to delete.
//!
//! Contract of [`plan`] (upstream's semantics, with [`crate::schedule`]):
//! - The schedule is read in `timeZone` (or the expression's own `CRON_TZ=`). One that does
//!   not parse, names an unknown zone or never fires sets `ScheduleValid=False`
//!   (`InvalidSchedule`, with the reason) and nothing is scheduled until the spec changes; so
//!   does a name longer than 63 characters (it is the value of label
//!   `redis.io/scheduled-backup`). Otherwise `ScheduleValid=True` (`ScheduleParsed`).
//! - `suspend: true`: phase `Suspended`, no `nextScheduleTime`, nothing created.
//! - The next run is the first tick after `lastScheduleTime`, or after the creation time for
//!   the first one (so the first backup comes at the first tick after creation). Not due:
//!   phase `Active`, `nextScheduleTime` set, look again then (at least 1 s later).
//! - Due (also long after, when the operator was down or the schedule suspended): **one**
//!   backup, named `<name>-<unix seconds of the due tick>` (the same name if a pass is
//!   repeated before its status was written, so a retry never creates a second one);
//!   `lastScheduleTime` becomes now, so missed ticks never pile up, and the next run is the
//!   first tick after now.
//!
//! Contract of [`prune`]: completed backups beyond `successfulBackupsHistoryLimit` and failed
//! ones beyond `failedBackupsHistoryLimit` (3 each by default), oldest by creation time first
//! (ties by name); pending and running ones are never pruned.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kit::conditions::{self, Desired};
use kube::ResourceExt;

use crate::crd::{
    BackupPhase, CONDITION_SCHEDULE_VALID, RedisBackup, RedisScheduledBackupSpec,
    RedisScheduledBackupStatus, ScheduledBackupPhase,
};
use crate::schedule::{Schedule, load_zone};

/// The longest name a scheduled backup may have (a label value).
pub const MAX_NAME: usize = 63;

/// What [`plan`] reads.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// The scheduled backup's name.
    pub name: &'a str,
    /// Its creation time.
    pub created: Timestamp,
    /// Its generation.
    pub generation: Option<i64>,
    /// Its spec.
    pub spec: &'a RedisScheduledBackupSpec,
    /// Its status.
    pub status: &'a RedisScheduledBackupStatus,
    /// This pass's clock.
    pub now: Timestamp,
}

/// What a pass does.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The status to write.
    pub status: RedisScheduledBackupStatus,
    /// The RedisBackup to create now, by name.
    pub create: Option<String>,
    /// When to look again (`None`: when the object changes).
    pub requeue: Option<Duration>,
    /// Why the schedule is invalid, when it is.
    pub invalid: Option<String>,
}

fn parse(f: &Facts<'_>) -> Result<(Schedule, jiff::tz::TimeZone), String> {
    if f.name.len() > MAX_NAME {
        return Err(format!(
            "the name must be at most {MAX_NAME} characters: it is the value of label \
             redis.io/scheduled-backup on the backups"
        ));
    }
    let zone = load_zone(&f.spec.time_zone).map_err(|e| format!("invalid timeZone: {e}"))?;
    let schedule = Schedule::parse(&f.spec.schedule)
        .map_err(|e| format!("invalid schedule {:?}: {e}", f.spec.schedule))?;
    Ok((schedule, zone))
}

fn valid(
    f: &Facts<'_>,
    result: &Result<(), String>,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let mut c = f.status.conditions.clone();
    let d = match result {
        Ok(()) => Desired::new(
            CONDITION_SCHEDULE_VALID,
            true,
            "ScheduleParsed",
            "Schedule parsed successfully",
        ),
        Err(e) => Desired::new(
            CONDITION_SCHEDULE_VALID,
            false,
            "InvalidSchedule",
            e.clone(),
        ),
    };
    conditions::upsert(&mut c, d.observed(f.generation), f.now);
    c
}

fn until(now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(now))
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_secs(1))
}

/// One pass (see the module contract).
pub fn plan(f: &Facts<'_>) -> Plan {
    let parsed = parse(f).and_then(|(s, z)| {
        let base = f
            .status
            .last_schedule_time
            .as_ref()
            .map_or(f.created, |t| t.0);
        let next = s
            .next_after(base, &z)
            .ok_or_else(|| format!("schedule {:?} has no upcoming occurrences", f.spec.schedule))?;
        Ok((s, z, next))
    });
    let mut status = RedisScheduledBackupStatus {
        conditions: valid(f, &parsed.as_ref().map(|_| ()).map_err(Clone::clone)),
        ..f.status.clone()
    };
    let (schedule, zone, next) = match parsed {
        Err(e) => {
            status.phase = Some(ScheduledBackupPhase::Active);
            return Plan {
                status,
                create: None,
                requeue: None,
                invalid: Some(e),
            };
        }
        Ok(p) => p,
    };
    if f.spec.suspend == Some(true) {
        status.phase = Some(ScheduledBackupPhase::Suspended);
        status.next_schedule_time = None;
        return Plan {
            status,
            create: None,
            requeue: None,
            invalid: None,
        };
    }
    status.phase = Some(ScheduledBackupPhase::Active);
    if next > f.now {
        status.next_schedule_time = Some(Time(next));
        let requeue = Some(until(f.now, next));
        return Plan {
            status,
            create: None,
            requeue,
            invalid: None,
        };
    }
    let name = format!("{}-{}", f.name, next.as_second());
    let after = schedule.next_after(f.now, &zone);
    status.last_schedule_time = Some(Time(f.now));
    status.last_backup_name = name.clone();
    status.next_schedule_time = after.map(Time);
    Plan {
        status,
        create: Some(name),
        requeue: after.map(|a| until(f.now, a)),
        invalid: None,
    }
}

fn oldest_first(mut v: Vec<&RedisBackup>) -> Vec<&RedisBackup> {
    v.sort_by(|a, b| {
        let key = |x: &RedisBackup| {
            (
                x.metadata.creation_timestamp.as_ref().map(|t| t.0),
                x.name_any(),
            )
        };
        key(a).cmp(&key(b))
    });
    v
}

fn beyond(v: Vec<&RedisBackup>, limit: Option<i32>) -> Vec<String> {
    let keep = usize::try_from(limit.unwrap_or(3).max(0)).unwrap_or(0);
    let v = oldest_first(v);
    let excess = v.len().saturating_sub(keep);
    v[..excess].iter().map(|b| b.name_any()).collect()
}

/// The backups to delete (see the module contract).
pub fn prune(children: &[&RedisBackup], spec: &RedisScheduledBackupSpec) -> Vec<String> {
    let of = |p: BackupPhase| -> Vec<&RedisBackup> {
        children
            .iter()
            .copied()
            .filter(|b| b.status.as_ref().and_then(|s| s.phase) == Some(p))
            .collect()
    };
    let mut out = beyond(
        of(BackupPhase::Completed),
        spec.successful_backups_history_limit,
    );
    out.extend(beyond(
        of(BackupPhase::Failed),
        spec.failed_backups_history_limit,
    ));
    out
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
