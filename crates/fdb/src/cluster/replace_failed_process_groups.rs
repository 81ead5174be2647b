//! ReplaceFailedProcessGroups (reference §4 step 8): a process group that has been failing for
//! longer than `automationOptions.replacements.failureDetectionTimeSeconds` (7200 s) is marked
//! for removal; AddProcessGroups then adds its replacement and the usual path runs (exclude,
//! verify, delete, include).
//!
//! Contract:
//! - Skipped with `buggify.emptyMonitorConf` (every process is expected to be missing).
//!   Without a cached status: delayed requeue; an unavailable database: delayed requeue (5 s)
//!   without marking anything, as upstream (no good decision is possible).
//! - [`choose`] is pure. Nothing happens when automatic replacements are disabled
//!   (`replacements.enabled: false`) or their budget is 0, or when every group crash-loops
//!   (`*`). Groups already marked, in the database's maintenance zone or crash-looping on
//!   purpose (`buggify.crashLoop`, `crashLoopContainers`) are left alone. A group qualifies
//!   by the earliest of its replacement conditions older than the failure time, or
//!   `NodeTaintReplacing` (set by UpdateStatus, see taints.rs) older than
//!   `taintReplacementTimeSeconds` (1800), and that only with `taintReplacementOptions` and
//!   while no more fault domains are tainted than `maxFaultDomainsWithTaintedProcessGroups`
//!   (10 %, at least 1; an unparsable value allows none). The budget is
//!   `maxConcurrentReplacements` (1) minus the groups marked and not yet excluded, counted
//!   per group, or per fault domain with
//!   `faultDomainBasedReplacements`. A group with no address is replaced only with locality
//!   exclusions, or when the database has its desired fault tolerance, and then skips its
//!   exclusion (it never ran anywhere).
//! - Any replacement: the status is written and the pass stops for an immediate requeue.
//!   More candidates than budget: delayed requeue (5 min). A `ReplacingProcessGroup` Event
//!   names each replaced group, its condition and since when (a Flotilla addition).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use kit::pipeline::{Flow, Step, StepResult};
use kube::ResourceExt;

use super::fault_tolerance::has_desired_fault_tolerance;
use super::{Pass, step_error};

use crate::crd::{FoundationDBCluster, ProcessGroupId, ProcessGroupStatus, condition};

step_error!(ReplaceFailedError, "replacing failed process groups");

/// The step.
pub struct ReplaceFailedProcessGroups;

/// One replacement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replacement {
    /// The group to mark for removal.
    pub id: ProcessGroupId,
    /// The condition that made it fail.
    pub condition: String,
    /// When that condition was first seen (Unix seconds).
    pub since: i64,
    /// Remove without exclusion (the group has no address).
    pub skip_exclusion: bool,
}

/// What [`choose`] decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    /// Groups to mark now.
    pub replace: Vec<Replacement>,
    /// Failed groups left for later because the budget is spent.
    pub more: bool,
}

/// The taint window when no taint is configured: about a year, i.e. never.
const NEVER: i64 = 8760 * 3600;

/// Groups crash-looping on purpose; `None` when every group is (`*`).
fn crash_looping(cluster: &FoundationDBCluster) -> Option<BTreeSet<String>> {
    let buggify = &cluster.spec.buggify;
    let mut ids: BTreeSet<String> = buggify
        .crash_loop
        .iter()
        .chain(
            buggify
                .crash_loop_containers
                .iter()
                .flat_map(|c| &c.targets),
        )
        .map(|id| id.to_string())
        .collect();
    if ids.remove("*") {
        return None;
    }
    Some(ids)
}

/// Upstream's `nodeTaintReplacementsAllowed`: taint options are set and no more fault domains
/// hold a `NodeTaintReplacing` group than `maxFaultDomainsWithTaintedProcessGroups` allows (a
/// guard against something tainting many nodes at once). Groups without a fault domain do not
/// count.
pub fn taint_replacements_allowed(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
) -> bool {
    if !super::taints::enabled(cluster) {
        return false;
    }
    let mut domains = BTreeSet::new();
    let mut tainted = BTreeSet::new();
    for g in groups.iter().filter(|g| !g.fault_domain.is_empty()) {
        domains.insert(g.fault_domain.as_str());
        if g.has_condition(condition::NODE_TAINT_REPLACING) {
            tainted.insert(g.fault_domain.as_str());
        }
    }
    match cluster.max_fault_domains_with_tainted_process_groups(domains.len()) {
        Ok(max) => {
            let allowed = max >= tainted.len() as i64;
            if !allowed {
                tracing::info!(cluster = %cluster.name_any(), tainted = tainted.len(), fault_domains = domains.len(), max, "not replacing for node taints: too many fault domains are tainted");
            }
            allowed
        }
        Err(e) => {
            tracing::warn!(cluster = %cluster.name_any(), error = %e, "not replacing for node taints");
            false
        }
    }
}

/// See the module docs. `maintenance_zone` is the database's (empty when none).
pub fn choose(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    maintenance_zone: &str,
    desired_fault_tolerance: bool,
    now: Timestamp,
) -> Choice {
    let max = cluster.max_concurrent_automatic_replacements();
    let mut choice = Choice::default();
    if !cluster.automatic_replacements_enabled() || max <= 0 {
        return choice;
    }
    let Some(ignore) = crash_looping(cluster) else {
        return choice;
    };
    let in_flight: Vec<&ProcessGroupStatus> = groups
        .iter()
        .filter(|g| g.is_marked_for_removal() && !g.is_excluded())
        .collect();
    let mut budget = max - in_flight.len() as i64;
    let mut domains: BTreeSet<String> = in_flight.iter().map(|g| g.fault_domain.clone()).collect();
    let by_domain = cluster
        .spec
        .automation_options
        .replacements
        .fault_domain_based_replacements
        .unwrap_or(false);
    let taint_secs = if taint_replacements_allowed(cluster, groups) {
        cluster.taint_replacement_time_seconds()
    } else {
        NEVER
    };
    let failure_secs = cluster.failure_detection_time_seconds();
    for g in groups {
        if g.is_marked_for_removal() || ignore.contains(g.process_group_id.as_str()) {
            continue;
        }
        if !maintenance_zone.is_empty() && g.fault_domain == maintenance_zone {
            continue;
        }
        let Some((condition, since)) = g.needs_replacement(failure_secs, taint_secs, now) else {
            continue;
        };
        let mut skip_exclusion = false;
        if g.addresses.is_empty() && !cluster.use_localities_for_exclusion() {
            if !desired_fault_tolerance {
                continue;
            }
            skip_exclusion = true;
        }
        let allowed = if by_domain {
            let n = domains.len() as i64;
            n < max || (n == max && domains.contains(&g.fault_domain))
        } else {
            budget > 0
        };
        if !allowed {
            choice.more = true;
            continue;
        }
        budget -= 1;
        domains.insert(g.fault_domain.clone());
        choice.replace.push(Replacement {
            id: g.process_group_id.clone(),
            condition,
            since,
            skip_exclusion,
        });
    }
    choice
}

impl ReplaceFailedProcessGroups {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, ReplaceFailedError> {
        if pass.cluster.spec.buggify.empty_monitor_conf {
            return Ok(Flow::Continue);
        }
        let Some(db) = pass.db.clone() else {
            return Ok(Flow::delay(Duration::from_secs(5)));
        };
        if !db.client.database_status.available {
            tracing::info!(cluster = %pass.name(), "not replacing failed process groups: the database is unavailable");
            return Ok(Flow::delay(Duration::from_secs(5)));
        }
        let tolerant = has_desired_fault_tolerance(&db, &pass.cluster);
        let groups = pass.status().process_groups.clone();
        let choice = choose(
            &pass.cluster,
            &groups,
            &db.cluster.maintenance_zone,
            tolerant,
            pass.now,
        );
        if choice.replace.is_empty() {
            return Ok(if choice.more {
                Flow::delay(Duration::from_secs(300))
            } else {
                Flow::Continue
            });
        }
        let now = pass.now;
        for r in &choice.replace {
            if let Some(g) = pass
                .status()
                .process_groups
                .iter_mut()
                .find(|g| g.process_group_id == r.id)
            {
                g.mark_for_removal(now);
                g.exclusion_skipped = r.skip_exclusion;
            }
        }
        pass.write_status().await?;
        for r in &choice.replace {
            let since = Timestamp::from_second(r.since)
                .map_or_else(|_| r.since.to_string(), |t| t.to_string());
            tracing::info!(cluster = %pass.name(), group = %r.id, condition = %r.condition, %since, skip_exclusion = r.skip_exclusion, "replacing a failed process group");
            let note = format!(
                "Replacing process group {}: {} since {since}",
                r.id, r.condition
            );
            pass.event(true, "ReplacingProcessGroup", note).await;
        }
        Ok(Flow::stop(Duration::ZERO))
    }
}

impl Step<Pass> for ReplaceFailedProcessGroups {
    fn name(&self) -> &'static str {
        "replace_failed_process_groups"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
#[path = "replace_failed_process_groups_tests.rs"]
mod tests;
