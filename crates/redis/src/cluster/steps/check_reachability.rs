//! Step 8, `check_reachability`: no disruption on stale knowledge. When a wanted instance
//! whose pod has an IP does not answer, the plan's disruptive action (a rolling-update or
//! drain deletion, a switchover) becomes a wait; hibernation, removing replicas beyond
//! `instances` (never the primary), creating missing pods and fixing labels go on.
//!
//! Contract: pure apart from rewriting the pass's plan; never stops the pass.

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use crate::cluster::Pass;
use crate::cluster::facts::Poll;
use crate::cluster::plan::{Action, Why};

/// The step.
pub struct CheckReachability;

impl Step<Pass> for CheckReachability {
    fn name(&self) -> &'static str {
        "check_reachability"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            let unreachable: Vec<String> = pass
                .members
                .iter()
                .filter(|x| x.ordinal < pass.model.instances)
                .filter(|x| matches!(x.poll, Poll::Failed(_)))
                .map(|x| x.name.clone())
                .collect();
            let Some(plan) = pass.plan.as_mut() else {
                return Ok(Flow::Continue);
            };
            let disruptive = match &plan.action {
                Action::Delete { why, .. } => !matches!(why, Why::Hibernate | Why::ScaleDown),
                Action::Switchover { .. } => true,
                _ => false,
            };
            if disruptive && !unreachable.is_empty() {
                let why = match &plan.action {
                    Action::Delete { why, .. } | Action::Switchover { why, .. } => *why,
                    _ => Why::Update,
                };
                plan.action = Action::Wait {
                    why,
                    reason: format!("{} does not answer", unreachable.join(", ")),
                };
            }
            Ok(Flow::Continue)
        })
    }
}
