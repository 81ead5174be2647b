//! UpdateRestoreStatus (reference §11 R1 and R3): the restore's state from `fdbrestore
//! status`.
//!
//! Contract:
//! - [`parse_state`] is pure: the word after `State:` in fdbrestore's text, `Unknown` when
//!   the text has none.
//! - [`compute`] is pure: no restore reported (`No restores found`) leaves `state` and
//!   `running` as they are; otherwise `state` is the parsed state and `running` is true until
//!   the state is `completed` or `aborted`; the `Complete` condition follows
//!   ([`crate::backup::conditions`]).
//! - The step keeps what fdbrestore said in the pass for StartRestore, and writes the status
//!   only when it changed.
//! - A restore this pass already saw `completed` is not read again: the pass's last step
//!   (R3) after R1 saw the completion calls nothing, so a completed restore is read once.

use futures::future::BoxFuture;
use jiff::Timestamp;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, step_error};
use crate::admin::AdminError;
use crate::backup::conditions::restore_complete;
use crate::crd::FoundationDBRestoreStatus;

step_error!(UpdateRestoreStatusError, "reading the restore's status");

/// The step.
pub struct UpdateRestoreStatus;

/// See the module docs.
pub fn parse_state(text: &str) -> String {
    text.split("State:")
        .nth(1)
        .and_then(|rest| {
            let word: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (!word.is_empty()).then_some(word)
        })
        .unwrap_or_else(|| "Unknown".into())
}

/// See the module docs.
pub fn compute(
    previous: &FoundationDBRestoreStatus,
    text: Option<&str>,
    now: Timestamp,
) -> FoundationDBRestoreStatus {
    let mut status = previous.clone();
    if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
        status.state = parse_state(text);
        status.running = !matches!(status.state.as_str(), "completed" | "aborted");
    }
    let complete = restore_complete(&status);
    kit::conditions::upsert(&mut status.conditions, complete, now);
    status
}

impl Step<Pass> for UpdateRestoreStatus {
    fn name(&self) -> &'static str {
        "update_restore_status"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            if pass.status().state == "completed" {
                return Ok(Flow::Continue);
            }
            let text = match pass.admin.get_restore_status().await {
                Ok(t) => Some(t),
                Err(AdminError::RestoreDoesNotExist) => None,
                Err(e) => return Err(UpdateRestoreStatusError::from(e).into()),
            };
            let status = compute(&pass.status(), text.as_deref(), pass.now);
            pass.restore_text = text;
            pass.write_status(status)
                .await
                .map_err(UpdateRestoreStatusError::from)?;
            Ok(Flow::Continue)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_is_the_word_after_state() {
        let cases = [
            (
                "Tag: default  UID: ABCD  State: running  Blocks: 1/2",
                "running",
            ),
            ("UID: ABCD, State: completed", "completed"),
            ("State: aborted\n", "aborted"),
            ("Tag: default  UID: ABCD", "Unknown"),
        ];
        for (text, want) in cases {
            assert_eq!(parse_state(text), want, "{text}");
        }
    }

    #[test]
    fn the_status_follows_what_fdbrestore_reports() {
        let now = Timestamp::now();
        let none = FoundationDBRestoreStatus::default();
        let started = FoundationDBRestoreStatus {
            running: true,
            ..Default::default()
        };
        let kept = compute(&none, None, now);
        assert_eq!(
            (kept.running, kept.state.as_str()),
            (false, ""),
            "nothing reported"
        );
        let kept = compute(&started, None, now);
        assert_eq!(
            (kept.running, kept.state.as_str()),
            (true, ""),
            "kept as it is"
        );
        let running = compute(&started, Some("UID: A  State: running"), now);
        assert!(running.running);
        assert_eq!(running.state, "running");
        assert!(!kit::conditions::is_true(&running.conditions, "Complete"));
        let done = compute(&running, Some("UID: A  State: completed"), now);
        assert!(!done.running);
        assert_eq!(done.state, "completed");
        assert!(kit::conditions::is_true(&done.conditions, "Complete"));
        let queued = compute(&none, Some("UID: A  State: queued"), now);
        assert_eq!(queued.state, "queued");
    }
}
