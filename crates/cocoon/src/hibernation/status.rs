//! The CocoonHibernation status and what a phase transition publishes.
//!
//! Contract:
//! - [`compute`] is pure: `observedGeneration`, `phase`, `vmName` (kept when the pass does
//!   not know the VM) and the one condition, `Ready`: `Hibernated`/`Active` → True/`Done`;
//!   `Failed` → False/`Failed`; any other phase → False/`Pending`; the message is the phase
//!   name unless the decision gave one. Entering `Hibernating` or `Waking` from another phase
//!   moves Ready's lastTransitionTime to now even though Ready stays False: that time is the
//!   start of the transition's time budget. Otherwise lastTransitionTime moves only when
//!   Ready's status changes, so a pass with nothing new computes an identical status.
//! - [`write`] patches the status subresource only when it differs.
//! - [`transition`] lists the Events and the phase-duration sample of a transition; it is
//!   called only after the status write succeeded, and the previous phase comes from a fresh
//!   read, so each fires once per transition. A timeout's Warning Event carries the decision's
//!   `alert` (upstream's Event wording), its Ready condition the decision's message.

use std::time::Duration;

use jiff::Timestamp;
use kit::conditions::{self, Desired};
use kube::api::Api;
use kube::runtime::events::EventType;

use super::decide::{Decision, Flow, Seen};
use crate::crd::{CocoonHibernation, CocoonHibernationStatus, HibernationPhase};
use crate::names;

use HibernationPhase::{Active, Failed, Hibernated, Hibernating, Waking};

/// The condition type.
pub const READY: &str = "Ready";

/// A failed status write.
#[derive(Debug, thiserror::Error)]
#[error("patching the status of CocoonHibernation {name}: {source}")]
pub struct StatusError {
    /// `namespace/name` of the CR.
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

impl StatusError {
    /// The metric label of this failure.
    pub fn category(&self) -> &'static str {
        "patch_status"
    }
}

/// The Ready condition of `phase` (see the module contract).
pub fn ready(phase: HibernationPhase, message: Option<&str>) -> Desired {
    let (ok, reason) = match phase {
        Hibernated | Active => (true, "Done"),
        Failed => (false, "Failed"),
        _ => (false, "Pending"),
    };
    Desired::new(READY, ok, reason, message.unwrap_or(phase.as_str()))
}

/// The status after writing `phase` (see the module contract).
pub fn compute(
    cr: &CocoonHibernation,
    phase: HibernationPhase,
    vm: Option<&str>,
    message: Option<&str>,
    now: Timestamp,
) -> CocoonHibernationStatus {
    let prev = cr.status.clone().unwrap_or_default();
    let generation = cr.metadata.generation;
    let mut conds = prev.conditions;
    let desired = ready(phase, message).observed(generation);
    let entering = prev.phase != Some(phase) && matches!(phase, Hibernating | Waking);
    if entering {
        conditions::reset(&mut conds, desired, now);
    } else {
        conditions::upsert(&mut conds, desired, now);
    }
    CocoonHibernationStatus {
        observed_generation: generation,
        phase: Some(phase),
        vm_name: vm.map(str::to_owned).or(prev.vm_name),
        conditions: conds,
    }
}

/// Writes `desired` when it differs from `cr`'s status; returns the CR as written (`None`:
/// nothing to write).
pub async fn write(
    api: &Api<CocoonHibernation>,
    cr: &CocoonHibernation,
    desired: &CocoonHibernationStatus,
) -> Result<Option<CocoonHibernation>, StatusError> {
    kit::status::write_status_if_changed(api, cr, desired, names::FIELD_MANAGER)
        .await
        .map_err(|source| StatusError {
            name: full_name(cr),
            source,
        })
}

/// An Event to publish on the CR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub type_: EventType,
    /// The reason.
    pub reason: &'static str,
    /// The note.
    pub message: String,
}

/// A phase-duration sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Which histogram: hibernate or wake.
    pub flow: Flow,
    /// `ok` or `timeout`.
    pub result: &'static str,
    /// Seconds the phase took.
    pub seconds: f64,
}

/// What the transition from `seen` to `d` publishes (see the module contract). `vm` and
/// `pod` (`namespace/name`) go into the notes.
pub fn transition(
    flow: Flow,
    seen: &Seen,
    d: &Decision,
    vm: &str,
    pod: &str,
    now: Timestamp,
) -> (Vec<Note>, Option<Sample>) {
    let mut notes = Vec::new();
    if seen.phase == Some(d.phase) {
        return (notes, None);
    }
    if seen.phase == Some(Failed) {
        notes.push(normal(
            "RetryRequested",
            format!("retrying {} after prior failure", flow.as_str()),
        ));
    }
    let from = |phase| {
        if seen.phase == Some(phase) {
            elapsed(seen, now)
        } else {
            0.0
        }
    };
    let sample = |flow, result, seconds| {
        Some(Sample {
            flow,
            result,
            seconds,
        })
    };
    let metric = match d.phase {
        Hibernated => {
            notes.push(normal(
                "Hibernated",
                format!("snapshot {vm} pushed to the registry"),
            ));
            sample(Flow::Hibernate, "ok", from(Hibernating))
        }
        Active => {
            notes.push(normal("WokenActive", format!("pod {pod} is running")));
            sample(Flow::Wake, "ok", from(Waking))
        }
        Failed => {
            let (reason, phase) = match flow {
                Flow::Hibernate => ("HibernateTimedOut", Hibernating),
                Flow::Wake => ("WakeTimedOut", Waking),
            };
            let message = d.alert.clone().or_else(|| d.message.clone());
            let message = message.unwrap_or_default();
            notes.push(Note {
                type_: EventType::Warning,
                reason,
                message,
            });
            sample(flow, "timeout", from(phase))
        }
        _ => None,
    };
    (notes, metric)
}

fn normal(reason: &'static str, message: String) -> Note {
    Note {
        type_: EventType::Normal,
        reason,
        message,
    }
}

fn elapsed(seen: &Seen, now: Timestamp) -> f64 {
    seen.since
        .and_then(|s| Duration::try_from(now.duration_since(s)).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `namespace/name` of `cr`.
pub fn full_name(cr: &CocoonHibernation) -> String {
    format!(
        "{}/{}",
        cr.metadata.namespace.as_deref().unwrap_or_default(),
        cr.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
