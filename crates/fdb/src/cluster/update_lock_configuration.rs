//! UpdateLockConfiguration (reference §4 step 2, §5): applies `lockOptions.denyList` to the
//! database when locks are in use and the cluster is configured. Entries with `allow: false`
//! are added, `allow: true` removed; entries absent from the spec are never touched. No lock
//! is taken. A failure is a delayed requeue.

use std::time::Duration;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::Pass;

/// The step.
pub struct UpdateLockConfiguration;

/// Whether the deny list should be written now.
pub fn should_update(use_locks: bool, configured: bool, entries: usize) -> bool {
    use_locks && configured && entries > 0
}

impl Step<Pass> for UpdateLockConfiguration {
    fn name(&self) -> &'static str {
        "update_lock_configuration"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            let entries = pass.cluster.spec.lock_options.deny_list.clone();
            let configured = pass.status().configured;
            if !should_update(pass.cluster.should_use_locks(), configured, entries.len()) {
                return Ok(Flow::Continue);
            }
            if let Err(e) = pass.lock().update_deny_list(&entries).await {
                tracing::warn!(cluster = %pass.name(), error = %e, "updating the deny list failed");
                return Ok(Flow::delay(Duration::from_secs(2)));
            }
            Ok(Flow::Continue)
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_with_locks_configured_and_entries() {
        for (locks, configured, n, want) in [
            (true, true, 1, true),
            (false, true, 1, false),
            (true, false, 1, false),
            (true, true, 0, false),
        ] {
            assert_eq!(super::should_update(locks, configured, n), want);
        }
    }
}
