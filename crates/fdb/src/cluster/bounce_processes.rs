//! BounceProcesses (reference §4 step 22): restarts, with `kill`, the processes whose command
//! line or version is wrong (`IncorrectCommandLine`), so they pick up the configuration their
//! pod's monitor has loaded.
//!
//! Contract:
//! - Nothing when `automationOptions.killProcesses` is false.
//! - Candidates ([`choose`]): groups with `IncorrectCommandLine` and none of
//!   `IncorrectPodSpec` (the pod is recreated instead) or `SidecarUnreachable`; not class
//!   `test`, not removed-and-excluded, resources not terminating, not pending, not missing
//!   processes for longer than `ignoreMissingProcessesSeconds` (30 s). If any candidate's pod
//!   has not loaded the new configuration yet (`IncorrectConfigMap`), nobody is bounced:
//!   delayed requeue until every pod has it, so they restart together.
//! - Safety ([`uptime_gate`]): the database is available with at most 10 active
//!   generations, `bounce_impact.can_clean_bounce` is not false, and the minimum of every
//!   non-excluded process's uptime and the time since the last recovery is at least
//!   `minimumUptimeSecondsForBounce` (600 s); otherwise stop, requeue after the remaining
//!   time (at least 15 s). This gate is also what keeps a restarted operator from bouncing
//!   twice: a kill restarts the processes (uptime 0) and the recovery timer, both in the
//!   database, so a second kill waits a full minimum uptime whatever the operator remembers.
//! - Then the global lock, and one `kill` of every candidate address at once (upstream's
//!   default: all processes together, not zone by zone), an Event `BouncedProcesses`, and the
//!   cached status's recovery timer reset so later steps of the pass see the recovery.
//! - Addresses on the machines of groups in `buggify.ignoreDuringRestart` are left out of
//!   every kill ([`without_ignored`]); nothing left means nothing is killed.
//! - Protocol-incompatible upgrades (reference §6, upstream's `bounce_processes.go`): groups
//!   with `IncorrectPodSpec` and groups removed and excluded are bounced too, and a group waits
//!   while its config map or its sidecar image (the staged binaries) is not current. The ready
//!   groups must have at least [`expected_processes`] processes (each pod counting its servers
//!   per pod) (else delayed requeue, 5 s). Without locks (one operator instance), their
//!   processes are the ones killed. With locks, upstream's order: first every local group is
//!   registered as a pending upgrade, then the lock is taken, then every process of the status
//!   not on the target version (class `test` aside) must be registered by some operator
//!   instance ([`split_by_registration`]; else an Event `UpgradeRequeued` "Waiting for
//!   processes to be updated: [...]" and stop, 15 s), then the pending upgrades are cleared
//!   and all those processes, this instance's and the others', are the ones killed.
//!   Registering before waiting is what lets two instances sharing a database each see the
//!   other's registration. Then one `kill_for_upgrade` (kill twice), and the pass stops so
//!   the next one reads the new versions.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, step_error};
use crate::admin::FdbStatus;
use crate::crd::{FoundationDBCluster, ProcessAddress, ProcessGroupStatus, condition};

step_error!(BounceProcessesError, "bouncing processes");

/// The step.
pub struct BounceProcesses;

/// Which groups to bounce.
#[derive(Clone, Debug, PartialEq)]
pub enum Choice {
    /// Nothing needs a bounce.
    Nothing,
    /// Some pods have not loaded the new configuration yet.
    WaitForConfig(Vec<String>),
    /// These groups.
    Bounce(Vec<String>),
}

/// Picks the groups to bounce (see the module docs); `ignore_missing_secs` is
/// `ignoreMissingProcessesSeconds`.
pub fn choose(
    groups: &[ProcessGroupStatus],
    now: Timestamp,
    ignore_missing_secs: i64,
    upgrading: bool,
) -> Choice {
    let (mut bounce, mut unsynced) = (Vec::new(), Vec::new());
    for g in groups {
        let id = g.process_group_id.to_string();
        let missing_long = g
            .condition_time(condition::MISSING_PROCESSES)
            .is_some_and(|t| now.as_second() - t > ignore_missing_secs);
        let skip = g.process_class.as_str() == "test"
            || (g.is_marked_for_removal() && g.is_excluded() && !upgrading)
            || g.has_condition(condition::RESOURCES_TERMINATING)
            || g.has_condition(condition::POD_PENDING)
            || missing_long
            || !g.has_condition(condition::INCORRECT_COMMAND_LINE)
            || (g.has_condition(condition::INCORRECT_POD_SPEC) && !upgrading)
            || g.has_condition(condition::SIDECAR_UNREACHABLE);
        if skip {
            continue;
        }
        if g.has_condition(condition::INCORRECT_CONFIG_MAP)
            || (upgrading && g.has_condition(condition::INCORRECT_SIDECAR_IMAGE))
        {
            unsynced.push(id);
        } else {
            bounce.push(id);
        }
    }
    match (unsynced.is_empty(), bounce.is_empty()) {
        (false, _) => Choice::WaitForConfig(unsynced),
        (true, true) => Choice::Nothing,
        (true, false) => Choice::Bounce(bounce),
    }
}

/// Seconds still to wait before a bounce is safe: `Ok(())` when it is, `Err(seconds)`
/// otherwise (`f64::INFINITY` when the database does not allow it at all).
pub fn uptime_gate(db: &FdbStatus, minimum_uptime: f64, max_generations: i64) -> Result<(), f64> {
    let usable = db.client.database_status.available
        && db.cluster.recovery_state.active_generations <= max_generations
        && db.cluster.bounce_impact.can_clean_bounce != Some(false);
    if !usable {
        return Err(f64::INFINITY);
    }
    let uptime = db
        .cluster
        .processes
        .values()
        .filter(|p| !p.excluded)
        .map(|p| p.uptime_seconds)
        .fold(
            db.cluster.recovery_state.seconds_since_last_recovered,
            f64::min,
        );
    if uptime >= minimum_uptime {
        Ok(())
    } else {
        Err(minimum_uptime - uptime)
    }
}

/// The addresses of `ids`' processes in the status.
fn addresses(db: &FdbStatus, ids: &[String]) -> Vec<ProcessAddress> {
    db.cluster
        .processes
        .values()
        .filter(|p| {
            p.instance_id()
                .is_some_and(|id| ids.iter().any(|i| i == id))
        })
        .filter_map(|p| p.parsed_address())
        .collect()
}

/// `targets` without the machines of the process groups in `buggify.ignoreDuringRestart`
/// (by the status's `instance_id` locality, matched on the IP as upstream does).
pub fn without_ignored(
    cluster: &FoundationDBCluster,
    db: &FdbStatus,
    targets: Vec<ProcessAddress>,
) -> Vec<ProcessAddress> {
    let ignored = &cluster.spec.buggify.ignore_during_restart;
    if ignored.is_empty() {
        return targets;
    }
    let hosts: BTreeSet<String> = db
        .cluster
        .processes
        .values()
        .filter(|p| {
            p.instance_id()
                .is_some_and(|id| ignored.iter().any(|i| i.as_str() == id))
        })
        .filter_map(|p| Some(p.parsed_address()?.host))
        .collect();
    targets
        .into_iter()
        .filter(|a| !hosts.contains(&a.host))
        .collect()
}

impl BounceProcesses {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, BounceProcessesError> {
        if !pass.cluster.kill_processes_enabled() {
            return Ok(Flow::Continue);
        }
        let ignore = pass.cluster.ignore_missing_processes().as_secs() as i64;
        let now = pass.now;
        let upgrading = pass.cluster.is_being_upgraded_with_incompatible_version();
        let ids = match choose(&pass.status().process_groups, now, ignore, upgrading) {
            Choice::Nothing => return Ok(Flow::Continue),
            Choice::WaitForConfig(ids) => {
                tracing::info!(cluster = %pass.name(), groups = ?ids, "waiting for the config map to reach every pod before bouncing");
                return Ok(Flow::delay(Duration::from_secs(15)));
            }
            Choice::Bounce(ids) => ids,
        };
        let Some(db) = pass.db.clone() else {
            return Ok(Flow::delay(Duration::from_secs(15)));
        };
        let minimum = pass.cluster.minimum_uptime_seconds_for_bounce() as f64;
        if let Err(left) = uptime_gate(&db, minimum, pass.ctx.options.max_active_generations) {
            tracing::info!(cluster = %pass.name(), groups = ?ids, wait_seconds = left, "bounce deferred: minimum uptime not reached or the database is not ready");
            let secs = if left.is_finite() { left.ceil() } else { 15.0 };
            return Ok(Flow::stop(Duration::from_secs_f64(secs.max(15.0))));
        }
        if upgrading {
            return upgrade(pass, &db, &ids).await;
        }
        let targets = addresses(&db, &ids);
        if targets.is_empty() {
            return Ok(Flow::delay(Duration::from_secs(15)));
        }
        let targets = without_ignored(&pass.cluster, &db, targets);
        if targets.is_empty() {
            tracing::info!(cluster = %pass.name(), groups = ?ids, "every process to bounce is in buggify.ignoreDuringRestart");
            return Ok(Flow::Continue);
        }
        if let Err(e) = pass.take_lock().await {
            tracing::info!(cluster = %pass.name(), error = %e, "waiting for the lock");
            return Ok(Flow::delay(Duration::from_secs(10)));
        }
        let list: Vec<String> = targets.iter().map(ToString::to_string).collect();
        tracing::info!(cluster = %pass.name(), addresses = ?list, "bouncing processes");
        pass.admin().kill(&targets).await?;
        pass.event(
            false,
            "BouncedProcesses",
            format!(
                "restarted {} (process groups {})",
                list.join(" "),
                ids.join(" ")
            ),
        )
        .await;
        if let Some(db) = pass.db.as_mut() {
            db.cluster.recovery_state.seconds_since_last_recovered = 0.0;
        }
        Ok(Flow::Continue)
    }
}

/// How many processes an incompatible upgrade's kill must reach (upstream's
/// `checkIfEnoughProcessesAreRunning`): per class, the desired groups minus those missing
/// their processes for longer than `ignore_missing_secs`, plus those marked for removal (each
/// has a replacement beside it), times the class's servers per pod. Class `test` and groups
/// whose resources are terminating do not count.
pub fn expected_processes(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    now: Timestamp,
    ignore_missing_secs: i64,
) -> i64 {
    let mut adjust: std::collections::BTreeMap<crate::crd::ProcessClass, i64> = Default::default();
    for g in groups {
        if g.process_class.as_str() == "test" || g.has_condition(condition::RESOURCES_TERMINATING) {
            continue;
        }
        let entry = adjust.entry(g.process_class.clone()).or_default();
        if g.is_marked_for_removal() {
            *entry += 1;
            if g.is_excluded() {
                continue;
            }
        }
        if g.condition_time(condition::MISSING_PROCESSES)
            .is_some_and(|t| now.as_second() - t > ignore_missing_secs)
        {
            *entry -= 1;
        }
    }
    cluster
        .process_counts_with_defaults()
        .map()
        .into_iter()
        .map(|(class, count)| {
            let groups = count + adjust.get(&class).copied().unwrap_or(0);
            groups * cluster.desired_servers_per_pod(&class)
        })
        .sum()
}

/// Processes of the status not yet on `version`: `(instance ID, address)`; tester processes
/// (never restarted by a kill) and processes without `instance_id` left out, as upstream.
pub fn not_upgraded(db: &FdbStatus, version: &str) -> Vec<(String, ProcessAddress)> {
    db.cluster
        .processes
        .values()
        .filter(|p| p.version != version && p.class_type != "test")
        .filter_map(|p| Some((p.instance_id()?.to_owned(), p.parsed_address()?)))
        .collect()
}

/// Whether pending-upgrade records for `version` are left over (`registered` non-empty while
/// every process of the database already runs `version`). An instance whose pass read the
/// status before another instance's kill registers its groups after that kill cleared the
/// records; nothing would clear them again (upstream keeps such records until the next
/// upgrade). `update_status` clears them when the cluster reaches reconciliation.
pub fn leftover_registrations(
    db: &FdbStatus,
    version: &str,
    registered: &BTreeSet<String>,
) -> bool {
    !registered.is_empty() && not_upgraded(db, version).is_empty()
}

/// The processes not yet on `version` split by whether some operator instance registered
/// their group as a pending upgrade (`registered`): the addresses to kill, and the IDs still
/// waiting (upstream's `getUpgradeAddressesFromStatus`).
pub fn split_by_registration(
    db: &FdbStatus,
    version: &str,
    registered: &BTreeSet<String>,
) -> (Vec<ProcessAddress>, Vec<String>) {
    let (mut ready, mut waiting) = (Vec::new(), Vec::new());
    for (id, address) in not_upgraded(db, version) {
        if registered.contains(&id) {
            ready.push(address);
        } else {
            waiting.push(id);
        }
    }
    waiting.sort();
    waiting.dedup();
    (ready, waiting)
}

/// The incompatible upgrade's kill: once this instance's groups are ready (and, with locks,
/// every process not on the target version is registered as a pending upgrade by some
/// operator instance, after this one registered its own), all of them are killed together,
/// twice (`kill_for_upgrade`); then the pass stops so the next one reads the new versions.
async fn upgrade(
    pass: &mut Pass,
    db: &FdbStatus,
    ids: &[String],
) -> Result<Flow, BounceProcessesError> {
    let version = pass.cluster.spec.version.clone();
    let ignore = pass.cluster.ignore_missing_processes().as_secs() as i64;
    let groups = pass.status().process_groups.clone();
    let expected = expected_processes(&pass.cluster, &groups, pass.now, ignore);
    let local = addresses(db, ids);
    if (local.len() as i64) < expected {
        tracing::info!(cluster = %pass.name(), expected, ready = local.len(), "upgrade waits for every expected process to be ready to restart");
        return Ok(Flow::delay(Duration::from_secs(5)));
    }
    let targets = if pass.cluster.should_use_locks() {
        let lock = pass.lock();
        let mine: Vec<String> = groups
            .iter()
            .map(|g| g.process_group_id.to_string())
            .collect();
        lock.add_pending_upgrades(&version, &mine).await?;
        if let Err(e) = pass.take_lock().await {
            tracing::info!(cluster = %pass.name(), error = %e, "waiting for the lock");
            return Ok(Flow::delay(Duration::from_secs(10)));
        }
        let registered = lock.get_pending_upgrades(&version).await?;
        let (ready, waiting) = split_by_registration(db, &version, &registered);
        if !waiting.is_empty() {
            let note = format!("Waiting for processes to be updated: {waiting:?}");
            tracing::info!(cluster = %pass.name(), %note, "upgrade deferred");
            pass.event(false, "UpgradeRequeued", note).await;
            return Ok(Flow::stop(Duration::from_secs(15)));
        }
        lock.clear_pending_upgrades().await?;
        ready
    } else {
        local
    };
    let targets = without_ignored(&pass.cluster, db, targets);
    if targets.is_empty() {
        return Ok(Flow::Continue);
    }
    let list: Vec<String> = targets.iter().map(ToString::to_string).collect();
    tracing::info!(cluster = %pass.name(), %version, addresses = ?list, "upgrading: killing every process");
    pass.admin().kill_for_upgrade(&targets).await?;
    let note = format!("upgrade to {version}: restarted {}", list.join(" "));
    pass.event(false, "BouncedProcesses", note).await;
    Ok(Flow::stop(Duration::from_secs(1)))
}

impl Step<Pass> for BounceProcesses {
    fn name(&self) -> &'static str {
        "bounce_processes"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
#[path = "bounce_processes_tests.rs"]
mod tests;
