//! `handle_failed_main`: a main agent that failed (lifecycle `failed` or pod phase `Failed`).
//!
//! Contract (reference §4.1 step 6): a failed main that drifted from the spec is deleted and
//! rebuilt; one that still matches the spec is parked: phase `Failed`, a Warning Event once
//! (when the phase becomes Failed) and the reason in the Ready condition, no requeue. The main
//! is never rebuilt while it matches the spec, because rebuilding would drop the VM's state;
//! changing the spec (or the pod becoming Ready again) is the way out, and recovery is
//! announced with a `RecoveredFromFailure` Event.

use k8s_openapi::api::core::v1::Pod;
use kit::reconcile::Outcome;
use kube::ResourceExt;

use super::pass::Pass;
use super::{AGAIN, Error, Step};
use crate::crd::CocoonSetPhase;
use crate::metrics::PhaseLabels;
use crate::names::lifecycle;
use crate::pods::drift::agent_drifted;
use crate::pods::state;

/// Parks or rebuilds a failed main; `None` when the main is not failed.
pub async fn handle_failed_main(pass: &mut Pass<'_>) -> Result<Step, Error> {
    let Some(main) = pass.pods.main.clone().filter(state::is_terminal) else {
        return Ok(None);
    };
    if agent_drifted(&pass.set, &main) {
        pass.delete_pod(&main.name_any()).await?;
        return Ok(Some(Outcome::RequeueAfter(AGAIN)));
    }
    let (reason, message) = failure_of(pass.namespace(), &main);
    if pass.phase() != Some(CocoonSetPhase::Failed) {
        if reason == "PodLifecycleFailed" {
            let labels = PhaseLabels {
                phase: state::phase(&main).to_owned(),
            };
            pass.ctx
                .metrics
                .lifecycle_state_failed_observed
                .get_or_create(&labels)
                .inc();
        }
        pass.event(true, reason, message.clone()).await;
    }
    pass.write_status_noted(Some(CocoonSetPhase::Failed), Some((reason, message)))
        .await?;
    Ok(Some(Outcome::Done))
}

/// The Event reason and message for a failed main pod.
pub fn failure_of(namespace: &str, main: &Pod) -> (&'static str, String) {
    let name = main.name_any();
    if state::lifecycle_state(main) == Some(lifecycle::FAILED) {
        let why = state::lifecycle_message(main).unwrap_or("vk-cocoon reported the VM failed");
        (
            "PodLifecycleFailed",
            format!("main pod {namespace}/{name}: {why}"),
        )
    } else {
        let phase = state::phase(main);
        (
            "MainAgentFailed",
            format!("main pod {namespace}/{name}: {phase}"),
        )
    }
}

/// Announces that a set which was Failed has a Ready main again.
pub async fn note_recovery(pass: &Pass<'_>) {
    if pass.phase() == Some(CocoonSetPhase::Failed) {
        let note = format!("main pod {}-0 is Ready again", pass.name());
        pass.event(false, "RecoveredFromFailure", note).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).expect("pod yaml")
    }

    #[test]
    fn reason_follows_what_failed() {
        let lf = pod(r#"
metadata:
  name: demo-0
  annotations:
    vm.cocoonstack.io/lifecycle-state: failed
    vm.cocoonstack.io/lifecycle-state-message: "clone: disk full"
"#);
        assert_eq!(
            failure_of("ns", &lf),
            (
                "PodLifecycleFailed",
                "main pod ns/demo-0: clone: disk full".to_owned()
            )
        );
        let pf = pod("{metadata: {name: demo-0}, status: {phase: Failed}}");
        assert_eq!(
            failure_of("ns", &pf),
            ("MainAgentFailed", "main pod ns/demo-0: Failed".to_owned())
        );
    }
}
