//! StartRestore (reference §11 R2): starts the restore, once.
//!
//! Contract: [`decide`] is pure. The restore is started (`fdbrestore start -r <url>` with
//! the key ranges, backup version and encryption key of the spec) only when the status shows
//! it was never started (`running` false, no `state`) and `fdbrestore status`, read by
//! UpdateRestoreStatus in this pass, reports no restore. The start is written to the status
//! (`running: true`) at once, so neither a later pass nor a restarted operator starts it
//! again; Event `StartedRestore`.

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, step_error};
use crate::backup::finalizer::redact;
use crate::crd::FoundationDBRestoreStatus;

step_error!(StartRestoreError, "starting the restore");

/// The step.
pub struct StartRestore;

/// See the module docs; `text` is what `fdbrestore status` said (`None`: no restore).
pub fn decide(status: &FoundationDBRestoreStatus, text: Option<&str>) -> bool {
    let never_started = !status.running && status.state.is_empty();
    let none_reported = text.is_none_or(|t| t.trim().is_empty());
    never_started && none_reported
}

impl Step<Pass> for StartRestore {
    fn name(&self) -> &'static str {
        "start_restore"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            if !decide(&pass.status(), pass.restore_text.as_deref()) {
                return Ok(Flow::Continue);
            }
            let r = pass.restore.clone();
            let url = r.backup_url().unwrap_or_default();
            pass.admin
                .start_restore(&url, &r)
                .await
                .map_err(StartRestoreError::from)?;
            pass.event(
                false,
                "StartedRestore",
                format!(
                    "started restoring {} into cluster {}",
                    redact(&url),
                    r.spec.destination_cluster_name
                ),
            )
            .await;
            let mut status = FoundationDBRestoreStatus {
                running: true,
                ..pass.status()
            };
            let complete = crate::backup::conditions::restore_complete(&status);
            kit::conditions::upsert(&mut status.conditions, complete, pass.now);
            pass.write_status(status)
                .await
                .map_err(StartRestoreError::from)?;
            Ok(Flow::Continue)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn started_only_when_never_started_and_none_is_reported() {
        let fresh = FoundationDBRestoreStatus::default();
        let started = FoundationDBRestoreStatus {
            running: true,
            ..Default::default()
        };
        let done = FoundationDBRestoreStatus {
            state: "completed".into(),
            ..Default::default()
        };
        // (status, fdbrestore status) -> start
        let cases = [
            (&fresh, None, true),
            (&fresh, Some(""), true),
            (&fresh, Some("UID: A State: running"), false),
            (&started, None, false),
            (&done, None, false),
        ];
        for (status, text, want) in cases {
            assert_eq!(decide(status, text), want, "{status:?} {text:?}");
        }
    }
}
