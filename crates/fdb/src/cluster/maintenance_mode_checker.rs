//! MaintenanceModeChecker (reference §4 step 23): turns the database's maintenance mode off
//! once every storage process the operator took down in the maintenance zone has restarted,
//! and keeps the operator's maintenance list (`<lock prefix>/maintenance/<group>` in the
//! database, written by UpdatePods) tidy.
//!
//! Contract:
//! - Runs only when `maintenanceModeOptions` lets the operator reset maintenance
//!   (`UseMaintenanceModeChecker` or `resetMaintenanceMode`).
//! - Database not available ⇒ delayed requeue (5 s).
//! - [`classify`] is pure: for every storage process of the status whose group is on the
//!   list, a process started after its entry's timestamp is finished; one in another zone
//!   than the one in maintenance is still waited for while its entry is younger than
//!   `--maintenance-list-wait-duration` (5 min) and is stale once older than
//!   `--maintenance-list-stale-duration` (4 h); one in the zone is waited for. Listed groups
//!   without a process are stale when older than the stale duration, or when their ID has
//!   this cluster's prefix and no storage group of that ID is in the status (removed);
//!   otherwise waited for.
//! - Finished and stale entries are removed from the list. With no zone in maintenance,
//!   that is all. With processes still to restart ⇒ delayed requeue (5 s).
//! - Otherwise the database must be safe (available, at most 10 active generations, worst
//!   storage data and durability lag at most 60 s, worst log and storage queue at most
//!   250 MiB; else delayed requeue, 15 s), the global lock is taken, and `maintenance off`
//!   resets the mode (Event `MaintenanceModeReset`, a Flotilla addition). Database errors
//!   are delayed requeues (15 s), as upstream's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, step_error};
use crate::admin::FdbStatus;
use crate::crd::{FoundationDBCluster, ProcessGroupStatus};

step_error!(MaintenanceModeCheckerError, "checking maintenance mode");

/// The step.
pub struct MaintenanceModeChecker;

/// Worst storage data or durability lag (seconds) that still allows a reset.
pub const MAXIMUM_DATA_LAG: f64 = 60.0;
/// Worst log or storage queue (bytes) that still allows a reset.
pub const MAXIMUM_QUEUE_BYTES: i64 = 250 * 1024 * 1024;

/// The maintenance list sorted out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classified {
    /// Restarted since they were taken down: their entries go.
    pub finished: BTreeSet<String>,
    /// Entries nobody needs any more: they go.
    pub stale: BTreeSet<String>,
    /// Still to restart: the zone stays in maintenance.
    pub to_update: BTreeSet<String>,
}

/// See the module docs; `now` is Unix seconds with their fraction. A process's start is
/// `now` minus its whole seconds of uptime, as upstream computes it (so a process started
/// in the same second as its entry counts as restarted).
pub fn classify(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    db: &FdbStatus,
    listed: &BTreeMap<String, i64>,
    now: f64,
    stale_after: Duration,
    wait_other_zone: Duration,
) -> Classified {
    let mut c = Classified::default();
    let mut left = listed.clone();
    let (stale_secs, wait_secs) = (stale_after.as_secs_f64(), wait_other_zone.as_secs_f64());
    let zone = db.cluster.maintenance_zone.as_str();
    // A pod may run several storage processes: the longest running one decides for its
    // group (the group restarted once all of them did).
    let mut processes: Vec<_> = db.cluster.processes.values().collect();
    processes.sort_by(|a, b| b.uptime_seconds.total_cmp(&a.uptime_seconds));
    for p in processes {
        if p.class_type != "storage" {
            continue;
        }
        let (Some(id), Some(pzone)) = (p.instance_id(), p.locality.get("zoneid")) else {
            continue;
        };
        let Some(since) = left.remove(id) else {
            continue;
        };
        let started = now - p.uptime_seconds.trunc();
        let age = now - since as f64;
        if started > since as f64 {
            c.finished.insert(id.to_owned());
        } else if pzone != zone {
            if age < wait_secs {
                c.to_update.insert(id.to_owned());
            }
            if age > stale_secs {
                c.stale.insert(id.to_owned());
            }
        } else {
            c.to_update.insert(id.to_owned());
        }
    }
    let prefix = &cluster.spec.process_group_id_prefix;
    let storage: BTreeSet<&str> = groups
        .iter()
        .filter(|g| g.process_class.as_str() == "storage")
        .map(|g| g.process_group_id.as_str())
        .collect();
    for (id, since) in left {
        let removed = id.starts_with(prefix.as_str()) && !storage.contains(id.as_str());
        if now - since as f64 > stale_secs || removed {
            c.stale.insert(id);
        } else {
            c.to_update.insert(id);
        }
    }
    c
}

/// Why the maintenance mode may not be reset now (`None`: it may).
pub fn unsafe_to_reset(db: &FdbStatus, max_generations: i64) -> Option<String> {
    let qos = &db.cluster.qos;
    if !db.client.database_status.available {
        return Some("the database is not available".into());
    }
    if db.cluster.recovery_state.active_generations > max_generations {
        return Some("too many active generations".into());
    }
    let lag = qos
        .worst_data_lag_storage_server
        .seconds
        .max(qos.worst_durability_lag_storage_server.seconds);
    if lag > MAXIMUM_DATA_LAG {
        return Some(format!("worst storage lag is {lag:.2} s"));
    }
    let queue = qos
        .worst_queue_bytes_log_server
        .max(qos.worst_queue_bytes_storage_server);
    if queue > MAXIMUM_QUEUE_BYTES {
        return Some(format!("worst queue is {queue} bytes"));
    }
    None
}

impl MaintenanceModeChecker {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, MaintenanceModeCheckerError> {
        if !pass.cluster.reset_maintenance_mode() {
            return Ok(Flow::Continue);
        }
        let Some(db) = pass.db.clone() else {
            return Ok(Flow::delay(Duration::from_secs(5)));
        };
        if !db.client.database_status.available {
            return Ok(Flow::delay(Duration::from_secs(5)));
        }
        let admin = pass.admin();
        let listed = match admin.get_processes_under_maintenance().await {
            Ok(l) => l,
            Err(e) => return Ok(retry(pass, "reading the maintenance list", &e)),
        };
        let zone = db.cluster.maintenance_zone.clone();
        let groups = pass.status().process_groups.clone();
        let opts = &pass.ctx.options;
        let c = classify(
            &pass.cluster,
            &groups,
            &db,
            &listed,
            pass.now.as_millisecond() as f64 / 1000.0,
            opts.maintenance_list_stale_duration,
            opts.maintenance_list_wait_duration,
        );
        tracing::debug!(cluster = %pass.name(), %zone, ?c, "maintenance information");
        let done: Vec<String> = c.finished.union(&c.stale).cloned().collect();
        if !done.is_empty() {
            tracing::info!(cluster = %pass.name(), finished = ?c.finished, stale = ?c.stale, "removing entries from the maintenance list");
            if let Err(e) = admin.remove_processes_under_maintenance(&done).await {
                return Ok(retry(pass, "updating the maintenance list", &e));
            }
        }
        if zone.is_empty() {
            return Ok(Flow::Continue);
        }
        if !c.to_update.is_empty() {
            tracing::info!(cluster = %pass.name(), %zone, waiting = ?c.to_update, "Waiting for processes in the maintenance zone to be updated");
            return Ok(Flow::delay(Duration::from_secs(5)));
        }
        if let Some(why) = unsafe_to_reset(&db, pass.ctx.options.max_active_generations) {
            tracing::info!(cluster = %pass.name(), %zone, %why, "maintenance mode not reset yet");
            return Ok(Flow::delay(Duration::from_secs(15)));
        }
        if let Err(e) = pass.take_lock().await {
            return Ok(retry(pass, "taking the lock", &e));
        }
        if let Err(e) = admin.reset_maintenance_mode().await {
            return Ok(retry(pass, "maintenance off", &e));
        }
        tracing::info!(cluster = %pass.name(), %zone, "switched off maintenance mode");
        let note = format!("every listed process of zone {zone} restarted: maintenance off");
        pass.event(false, "MaintenanceModeReset", note).await;
        Ok(Flow::Continue)
    }
}

fn retry(pass: &Pass, what: &str, e: &crate::admin::AdminError) -> Flow {
    tracing::info!(cluster = %pass.name(), error = %e, "{what} failed");
    Flow::delay(Duration::from_secs(15))
}

impl Step<Pass> for MaintenanceModeChecker {
    fn name(&self) -> &'static str {
        "maintenance_mode_checker"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
#[path = "maintenance_mode_checker_tests.rs"]
mod tests;
