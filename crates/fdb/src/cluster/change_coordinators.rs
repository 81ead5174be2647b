//! ChangeCoordinators (reference §4 step 21): only when configured and the current
//! coordinators are not valid ([`super::coordinators::valid`]).
//! - Safety: if a coordinator has no process in the status, the last recovery must be at
//!   least `--minimum-uptime-for-coordinator-change-with-missing-process` (2m) ago; otherwise
//!   the database must be available with at most 10 active generations and the last recovery
//!   at least `--minimum-uptime-for-coordinator-change-with-undesired-process` (5m) ago.
//!   Else delayed requeue.
//! - Then the lock, a new selection (2R−1 coordinators, at most one per zone, logs
//!   preferred), `coordinators …`, and the new connection string goes into the status.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, coordinators, step_error};
use crate::admin::FdbStatus;
use crate::crd::{ConnectionString, ProcessAddress};

step_error!(ChangeCoordinatorsError, "changing coordinators");

/// The step.
pub struct ChangeCoordinators;

/// Whether some coordinator of `connection_string` has no process in `db`.
pub fn coordinator_missing(connection_string: &str, db: &FdbStatus) -> bool {
    ConnectionString::parse(connection_string).is_ok_and(|cs| {
        cs.coordinators
            .iter()
            .any(|c| !db.cluster.processes.values().any(|p| &p.address == c))
    })
}

fn removing(pass: &mut Pass) -> BTreeSet<String> {
    pass.status()
        .process_groups
        .iter()
        .filter(|g| g.is_marked_for_removal())
        .map(|g| g.process_group_id.to_string())
        .collect()
}

/// Chooses and writes new coordinators (no safety checks: callers gate). Returns whether it
/// changed them; a selection that cannot be made is logged and changes nothing.
pub async fn change(pass: &mut Pass) -> Result<bool, ChangeCoordinatorsError> {
    let Some(db) = pass.db.clone() else {
        return Ok(false);
    };
    let removing = removing(pass);
    let candidates = coordinators::candidates_from_status(&pass.cluster, &db, &removing);
    let chosen =
        match coordinators::choose(&candidates, pass.cluster.desired_coordinator_count(), 1) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(cluster = %pass.name(), error = %e, "cannot choose coordinators");
                pass.event(true, "CoordinatorSelectionFailed", e.to_string())
                    .await;
                return Ok(false);
            }
        };
    let addresses: Vec<ProcessAddress> = chosen
        .iter()
        .filter_map(|c| ProcessAddress::parse(&c.address).ok())
        .collect();
    pass.take_lock().await?;
    tracing::info!(cluster = %pass.name(), coordinators = ?chosen.iter().map(|c| c.address.clone()).collect::<Vec<_>>(), "changing coordinators");
    let cs = pass.admin().change_coordinators(&addresses).await?;
    pass.event(
        false,
        "ChangedCoordinators",
        format!("new connection string {cs}"),
    )
    .await;
    pass.status().connection_string = cs;
    pass.status().needs_new_coordinators = false;
    pass.write_status().await?;
    pass.db = pass.admin().get_status().await.ok();
    Ok(true)
}

impl ChangeCoordinators {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, ChangeCoordinatorsError> {
        if !pass.status().configured {
            return Ok(Flow::Continue);
        }
        let Some(db) = pass.db.clone() else {
            return Ok(Flow::Continue);
        };
        let cs = pass.status().connection_string.clone();
        let removing = removing(pass);
        if coordinators::valid(&pass.cluster, &cs, &db, &removing) {
            return Ok(Flow::Continue);
        }
        let opts = pass.ctx.options.clone();
        let ready = if coordinator_missing(&cs, &db) {
            pass.recovered_for(opts.minimum_recovery_time_for_missing_coordinator_change)
        } else {
            pass.safe_for_destructive_steps()
                && pass.recovered_for(opts.minimum_uptime_for_coordinator_change)
        };
        if !ready {
            tracing::info!(cluster = %pass.name(), "coordinator change deferred until the last recovery is old enough");
            return Ok(Flow::delay(Duration::from_secs(10)));
        }
        match change(pass).await {
            Ok(_) => Ok(Flow::Continue),
            Err(ChangeCoordinatorsError::Admin(e)) => {
                tracing::warn!(cluster = %pass.name(), error = %e, "changing coordinators failed");
                Ok(Flow::delay(Duration::from_secs(10)))
            }
            Err(e) => Err(e),
        }
    }
}

impl Step<Pass> for ChangeCoordinators {
    fn name(&self) -> &'static str {
        "change_coordinators"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::status::ProcessInfo;

    #[test]
    fn missing_coordinator_table() {
        let mut db = FdbStatus::default();
        db.cluster.processes.insert(
            "a".into(),
            ProcessInfo {
                address: "127.1.0.1:4501".into(),
                ..Default::default()
            },
        );
        for (cs, want) in [
            ("d:g@127.1.0.1:4501", false),
            ("d:g@127.1.0.1:4501,127.1.0.2:4501", true),
            ("garbage", false),
        ] {
            assert_eq!(coordinator_missing(cs, &db), want, "{cs}");
        }
    }
}
