//! UpdateDatabaseConfiguration (reference §4 step 18): skipped when
//! `automationOptions.configureDatabase` is false.
//! - Not configured: `configure new <desired>` without lock or safety checks, then
//!   `status.configured = true` is written at once; `configured` is sticky, so `configure new`
//!   runs exactly once per cluster.
//! - Configured, available, live ≠ desired: the safety gate ([`change_is_safe`]), then the
//!   lock, then `configure <desired>`. Unsafe ⇒ delayed requeue (10 s). The last recovery
//!   must be `--minimum-uptime-for-configuration-changes` (1m) old.
//!   Staged region changes are not built (single region only).

use std::time::Duration;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, step_error};
use crate::admin::FdbStatus;

step_error!(UpdateDatabaseConfigurationError, "configuring the database");

/// The step.
pub struct UpdateDatabaseConfiguration;

/// Why a configuration change must wait, or `None` when it is safe: the database is
/// available with at most `max_generations` active generations, data distribution is
/// healthy, the configuration is readable and the last recovery is at least `min_uptime` ago.
pub fn change_is_safe(db: &FdbStatus, max_generations: i64, min_uptime: f64) -> Option<String> {
    if !db.client.database_status.available {
        return Some("the database is unavailable".into());
    }
    if db.cluster.recovery_state.active_generations > max_generations {
        return Some(format!(
            "{} active generations",
            db.cluster.recovery_state.active_generations
        ));
    }
    if !db.cluster.data.state.healthy {
        return Some(format!(
            "data distribution is {}",
            db.cluster.data.state.name
        ));
    }
    if db
        .cluster
        .messages
        .iter()
        .any(|m| m.name == "unreadable_configuration")
    {
        return Some("the configuration is unreadable".into());
    }
    if db.cluster.recovery_state.seconds_since_last_recovered < min_uptime {
        return Some(format!(
            "the last recovery was {:.0} s ago",
            db.cluster.recovery_state.seconds_since_last_recovered
        ));
    }
    None
}

impl UpdateDatabaseConfiguration {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, UpdateDatabaseConfigurationError> {
        if !pass.cluster.configure_database_enabled() || pass.status().connection_string.is_empty()
        {
            return Ok(Flow::Continue);
        }
        let desired = pass.cluster.desired_database_configuration();
        if !pass.status().configured {
            tracing::info!(cluster = %pass.name(), "configuring a new database");
            if let Err(e) = pass.admin().configure_database(&desired, true).await {
                tracing::warn!(cluster = %pass.name(), error = %e, "configure new failed");
                return Ok(Flow::delay(Duration::from_secs(5)));
            }
            pass.event(
                false,
                "ConfiguredNewDatabase",
                format!(
                    "configure new {}",
                    desired.configuration_string().unwrap_or_default()
                ),
            )
            .await;
            pass.status().configured = true;
            pass.write_status().await?;
            pass.db = pass.admin().get_status().await.ok();
            return Ok(Flow::Continue);
        }
        let Some(db) = pass.db.clone() else {
            return Ok(Flow::Continue);
        };
        let live = db
            .cluster
            .configuration
            .normalized(&pass.cluster.spec.database_configuration);
        if live == desired {
            return Ok(Flow::Continue);
        }
        let options = &pass.ctx.options;
        let (generations, uptime) = (
            options.max_active_generations,
            options.minimum_uptime_for_configuration_changes,
        );
        if let Some(why) = change_is_safe(&db, generations, uptime) {
            tracing::info!(cluster = %pass.name(), reason = %why, "configuration change deferred");
            pass.event(
                false,
                "ConfigurationChangeDeferred",
                format!("not safe yet: {why}"),
            )
            .await;
            return Ok(Flow::delay(Duration::from_secs(10)));
        }
        if let Err(e) = pass.take_lock().await {
            tracing::info!(cluster = %pass.name(), error = %e, "waiting for the lock");
            return Ok(Flow::delay(Duration::from_secs(10)));
        }
        tracing::info!(cluster = %pass.name(), "changing the database configuration");
        pass.admin().configure_database(&desired, false).await?;
        pass.event(
            false,
            "ConfigurationChanged",
            "database configuration changed".into(),
        )
        .await;
        pass.db = pass.admin().get_status().await.ok();
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for UpdateDatabaseConfiguration {
    fn name(&self) -> &'static str {
        "update_database_configuration"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> FdbStatus {
        let mut s = FdbStatus::default();
        s.client.database_status.available = true;
        s.cluster.data.state.healthy = true;
        s.cluster.recovery_state.active_generations = 1;
        s.cluster.recovery_state.seconds_since_last_recovered = 600.0;
        s
    }

    #[test]
    fn safety_gate_table() {
        type Edit = fn(&mut FdbStatus);
        let cases: [(&str, Edit, bool); 5] = [
            ("healthy", |_| {}, true),
            (
                "unavailable",
                |s| s.client.database_status.available = false,
                false,
            ),
            (
                "data distribution unhealthy",
                |s| s.cluster.data.state.healthy = false,
                false,
            ),
            (
                "too many generations",
                |s| s.cluster.recovery_state.active_generations = 11,
                false,
            ),
            (
                "recent recovery",
                |s| s.cluster.recovery_state.seconds_since_last_recovered = 5.0,
                false,
            ),
        ];
        for (name, edit, safe) in cases {
            let mut s = healthy();
            edit(&mut s);
            assert_eq!(change_is_safe(&s, 10, 60.0).is_none(), safe, "{name}");
        }
    }
}
