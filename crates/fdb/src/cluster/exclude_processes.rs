//! ExcludeProcesses (reference §4 step 20): excludes the processes of groups marked for
//! removal that are not excluded yet (class `test` never is), with `exclude no_wait`.
//! - Addresses: `locality_instance_id:<id>` when locality exclusions are in use, else the
//!   group's pod IPs without ports. Exclusions already in the database count as ongoing.
//! - Safety: available, at most 10 active generations, last recovery at least
//!   `--minimum-recovery-time-for-exclusion` (120 s) ago; else delayed requeue (10 s).
//! - Budget per class ([`budget`]): valid groups + fault tolerance − desired − ongoing;
//!   a group of the class missing its processes for under 5 minutes makes it 0. A budget
//!   ≤ 0 for a transaction-system class cancels the whole round (storage included).
//! - The global lock is taken before excluding. If an excluded process is a coordinator,
//!   new coordinators are chosen and written at once. Not everything excluded ⇒ delayed
//!   requeue (5 min); otherwise the next steps verify and remove.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, change_coordinators, step_error};
use crate::crd::{ProcessAddress, ProcessClass, ProcessGroupStatus, condition};

step_error!(ExcludeProcessesError, "excluding processes");

/// The step.
pub struct ExcludeProcesses;

/// How many more groups of one class may be excluded now (see the module docs).
pub fn budget(
    valid: i64,
    fault_tolerance: i64,
    desired: i64,
    ongoing: i64,
    recently_missing: bool,
) -> i64 {
    if recently_missing {
        0
    } else {
        valid + fault_tolerance - desired - ongoing
    }
}

/// The exclusion targets of `group`.
pub fn targets(group: &ProcessGroupStatus, by_locality: bool) -> Vec<ProcessAddress> {
    if by_locality {
        return vec![ProcessAddress {
            host: group.exclusion_string(),
            ..ProcessAddress::default()
        }];
    }
    group
        .addresses
        .iter()
        .map(|ip| ProcessAddress {
            host: ip.clone(),
            ..ProcessAddress::default()
        })
        .collect()
}

impl ExcludeProcesses {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, ExcludeProcessesError> {
        let Some(db) = pass.db.clone() else {
            return Ok(Flow::Continue);
        };
        let by_locality = pass.cluster.use_localities_for_exclusion();
        let already: BTreeSet<String> = db.exclusions().into_iter().collect();
        let groups = pass.status().process_groups.clone();
        let wanted: Vec<&ProcessGroupStatus> = groups
            .iter()
            .filter(|g| g.is_marked_for_removal() && !g.is_excluded())
            .filter(|g| g.process_class.as_str() != "test")
            .filter(|g| {
                let t = targets(g, by_locality);
                !t.is_empty() && !t.iter().all(|a| already.contains(&a.host))
            })
            .collect();
        if wanted.is_empty() {
            return Ok(Flow::Continue);
        }
        if !pass.safe_for_destructive_steps()
            || !pass.recovered_for(pass.ctx.options.minimum_recovery_time_for_exclusion)
        {
            tracing::info!(cluster = %pass.name(), "exclusion deferred: the database is not ready for it");
            return Ok(Flow::delay(Duration::from_secs(10)));
        }
        let f = pass.cluster.desired_fault_tolerance();
        let desired = pass.cluster.process_counts_with_defaults();
        let now = pass.now.as_second();
        let mut budgets: BTreeMap<ProcessClass, i64> = BTreeMap::new();
        for class in wanted
            .iter()
            .map(|g| g.process_class.clone())
            .collect::<BTreeSet<_>>()
        {
            let of_class = groups.iter().filter(|g| g.process_class == class);
            let valid = of_class
                .clone()
                .filter(|g| !(g.is_marked_for_removal() && g.is_excluded()))
                .filter(|g| !g.has_condition(condition::MISSING_PROCESSES))
                .count() as i64;
            let recently_missing = of_class.clone().any(|g| {
                g.condition_time(condition::MISSING_PROCESSES)
                    .is_some_and(|t| now - t < 300)
            });
            let ongoing = of_class
                .filter(|g| g.is_marked_for_removal() && !g.is_excluded())
                .filter(|g| {
                    targets(g, by_locality)
                        .iter()
                        .all(|a| already.contains(&a.host))
                })
                .count() as i64;
            let b = budget(
                valid,
                f,
                desired.get(&class).max(0),
                ongoing,
                recently_missing,
            );
            if b <= 0 && class.is_transaction() {
                tracing::info!(cluster = %pass.name(), class = %class, "exclusion round cancelled: no budget for a transaction class");
                return Ok(Flow::delay(Duration::from_secs(60)));
            }
            budgets.insert(class, b);
        }
        let mut chosen = Vec::new();
        for g in &wanted {
            let b = budgets.get_mut(&g.process_class).expect("budget per class");
            if *b > 0 {
                *b -= 1;
                chosen.push(*g);
            }
        }
        if chosen.is_empty() {
            return Ok(Flow::delay(Duration::from_secs(60)));
        }
        if let Err(e) = pass.take_lock().await {
            tracing::info!(cluster = %pass.name(), error = %e, "waiting for the lock");
            return Ok(Flow::delay(Duration::from_secs(10)));
        }
        let addresses: Vec<ProcessAddress> = chosen
            .iter()
            .flat_map(|g| targets(g, by_locality))
            .collect();
        tracing::info!(cluster = %pass.name(), addresses = ?addresses.iter().map(|a| a.host.clone()).collect::<Vec<_>>(), "excluding");
        pass.admin().exclude(&addresses, true).await?;
        pass.event(
            false,
            "ExcludedProcesses",
            format!(
                "excluded {}",
                addresses
                    .iter()
                    .map(|a| a.host.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        )
        .await;
        // An excluded coordinator: choose new coordinators now.
        let ids: BTreeSet<String> = chosen
            .iter()
            .map(|g| g.process_group_id.to_string())
            .collect();
        if db
            .coordinator_instance_ids()
            .iter()
            .any(|id| ids.contains(id))
        {
            pass.db = pass.admin().get_status().await.ok();
            change_coordinators::change(pass)
                .await
                .map_err(|e| match e {
                    change_coordinators::ChangeCoordinatorsError::Kube(k) => {
                        ExcludeProcessesError::Kube(k)
                    }
                    change_coordinators::ChangeCoordinatorsError::Admin(a) => {
                        ExcludeProcessesError::Admin(a)
                    }
                })?;
        }
        pass.db = pass.admin().get_status().await.ok();
        if chosen.len() < wanted.len() {
            return Ok(Flow::delay(Duration::from_secs(300)));
        }
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for ExcludeProcesses {
    fn name(&self) -> &'static str {
        "exclude_processes"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ProcessGroupId;
    use jiff::Timestamp;

    #[test]
    fn budget_table() {
        // (valid, F, desired, ongoing, recently missing) -> budget
        for (args, want) in [
            ((4, 1, 3, 0, false), 2),
            ((4, 1, 3, 2, false), 0),
            ((3, 1, 3, 0, false), 1),
            ((5, 1, 3, 0, true), 0),
            ((3, 0, 3, 0, false), 0),
        ] {
            let (v, f, d, o, m) = args;
            assert_eq!(budget(v, f, d, o, m), want, "{args:?}");
        }
    }

    #[test]
    fn targets_by_locality_or_ip() {
        let mut g = ProcessGroupStatus::new(
            ProcessGroupId::new("storage-4"),
            ProcessClass::new("storage"),
            Timestamp::UNIX_EPOCH,
        );
        g.addresses = vec!["127.1.0.9".into()];
        assert_eq!(targets(&g, true)[0].host, "locality_instance_id:storage-4");
        assert_eq!(targets(&g, false)[0].host, "127.1.0.9");
    }
}
