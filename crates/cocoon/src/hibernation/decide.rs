//! The CocoonHibernation state machine, pure (no client, no clock): what the CR's status
//! says, what the pod says and (for a hibernate) what the registry says go in; the phase to
//! write, its Ready message and when to look again come out.
//!
//! Contract:
//! - A desire runs as its [`Flow`], except that a reverse desire first finishes the transition
//!   in flight: `Hibernate` while `Waking` finishes the wake, `Wake` while `Hibernating`
//!   finishes the hibernate. A pass that settles such a transition (`Hibernated`, `Active` or
//!   `Failed` against the desire) says [`Next::Now`]: the desired flow starts on the next pass
//!   at once. Nothing else would start it: the CR watch ignores the controller's own status
//!   writes, and a settled pod changes no more ([`decide`], [`settle`]).
//! - Hibernate is confirmed only by the lifecycle contract **and** the registry: lifecycle
//!   `hibernated` written for the pod's current generation stamp (a stale round is rejected),
//!   then `<vm>:hibernate` present. A tag alone proves nothing (it may be left from an earlier
//!   round). Once `Hibernated` for a VM that is still reported hibernated, the registry is not
//!   asked again.
//! - A registry error before the deadline keeps `Hibernating` and fails the pass (retried with
//!   back-off, but never later than the deadline: [`Next::RetryError`] carries the time left);
//!   at the deadline it becomes the timeout like any other unconfirmed hibernate.
//! - Wake completes when a container runs **and** vk-cocoon reported a VM id.
//! - Deadlines count from the Ready condition's lastTransitionTime, which moves whenever
//!   `Hibernating`/`Waking` is entered from another phase (so a retry after `Failed` starts a
//!   fresh budget). A deadline applies only while the CR is already in that phase. A timeout's
//!   Ready message and Warning Event use upstream's exact words (`hibernate not confirmed
//!   within 3m0s`, `wake timed out after 5m0s; vk-cocoon never reported the container
//!   running`): alerting matches on them.
//! - A bad reference (no pod, no VM name) is `Pending` with a message, except that `Hibernated`
//!   and `Waking` are never demoted (they carry restore intent).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::crd::{CocoonHibernation, Desire, HibernationPhase};
use crate::pods::state;

use HibernationPhase::{Active, Failed, Hibernated, Hibernating, Pending, Waking};

/// Upstream's hibernate deadline.
pub const HIBERNATE_TIMEOUT: Duration = Duration::from_secs(180);
/// Upstream's wake deadline.
pub const WAKE_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a transition in flight is looked at again.
pub const POLL: Duration = Duration::from_secs(5);
/// Backstop re-check of a bad reference; the pod watch normally notices the fix first.
pub const BAD_REF_RECHECK: Duration = Duration::from_secs(30);

/// Environment knob (seconds) overriding [`HIBERNATE_TIMEOUT`]; for tests and tuning.
pub const ENV_HIBERNATE_TIMEOUT: &str = "COCOON_HIBERNATE_TIMEOUT_SECONDS";
/// Environment knob (seconds) overriding [`WAKE_TIMEOUT`]; for tests and tuning.
pub const ENV_WAKE_TIMEOUT: &str = "COCOON_WAKE_TIMEOUT_SECONDS";

/// The time budgets of the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From entering `Hibernating` to `Failed`.
    pub hibernate: Duration,
    /// From entering `Waking` to `Failed`.
    pub wake: Duration,
    /// Re-check interval of a transition in flight.
    pub poll: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            hibernate: HIBERNATE_TIMEOUT,
            wake: WAKE_TIMEOUT,
            poll: POLL,
        }
    }
}

impl Timeouts {
    /// The defaults with [`ENV_HIBERNATE_TIMEOUT`] / [`ENV_WAKE_TIMEOUT`] applied.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The defaults with overrides read through `lookup`; a missing, unparsable or zero value
    /// keeps the default.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let secs = |key: &str, default: Duration| {
            lookup(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|s| *s > 0)
                .map_or(default, Duration::from_secs)
        };
        Self {
            hibernate: secs(ENV_HIBERNATE_TIMEOUT, HIBERNATE_TIMEOUT),
            wake: secs(ENV_WAKE_TIMEOUT, WAKE_TIMEOUT),
            poll: POLL,
        }
    }
}

/// What the CR's status says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// `status.phase`.
    pub phase: Option<HibernationPhase>,
    /// The Ready condition's lastTransitionTime: when the current phase was entered.
    pub since: Option<Timestamp>,
    /// `status.vmName`.
    pub vm_name: Option<String>,
    /// The Ready condition's message.
    pub message: Option<String>,
}

impl Seen {
    /// Reads the status of `cr`.
    pub fn of(cr: &CocoonHibernation) -> Self {
        let Some(s) = cr.status.as_ref() else {
            return Self::default();
        };
        let ready = kit::conditions::get(&s.conditions, "Ready");
        Self {
            phase: s.phase,
            since: ready.map(|c| c.last_transition_time.0),
            vm_name: s.vm_name.clone().filter(|v| !v.is_empty()),
            message: ready.map(|c| c.message.clone()),
        }
    }
}

/// What the pod says about its VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFacts {
    /// `vm.cocoonstack.io/name`: the VM and its registry repository.
    pub vm: String,
    /// The hibernate annotation is `"true"`.
    pub hibernate_set: bool,
    /// Lifecycle `hibernated` for the pod's current generation stamp.
    pub hibernated: bool,
    /// A container runs and vk-cocoon reported a VM id.
    pub live: bool,
}

/// Why the CR's pod cannot be acted on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadRef {
    /// `spec.podRef.name` is empty (the schema forbids it).
    NoPodRef,
    /// The pod does not exist.
    PodMissing(String),
    /// The pod carries no VM name; the String is `namespace/name`.
    NoVmName(String),
}

impl BadRef {
    /// The Ready message.
    pub fn message(&self) -> String {
        match self {
            BadRef::NoPodRef => "spec.podRef.name is required".into(),
            BadRef::PodMissing(p) => format!("pod {p} not yet present"),
            BadRef::NoVmName(p) => format!("pod {p} has no vm.cocoonstack.io/name annotation yet"),
        }
    }

    /// The Warning Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            BadRef::NoPodRef => "InvalidPodRef",
            BadRef::PodMissing(_) => "PodNotFound",
            BadRef::NoVmName(_) => "NoVMName",
        }
    }
}

/// Reads the facts of `pod` (the CR's pod in `namespace`, `None` when absent).
pub fn facts(namespace: &str, pod_name: &str, pod: Option<&Pod>) -> Result<PodFacts, BadRef> {
    if pod_name.is_empty() {
        return Err(BadRef::NoPodRef);
    }
    let full = format!("{namespace}/{pod_name}");
    let pod = pod.ok_or_else(|| BadRef::PodMissing(full.clone()))?;
    let vm = state::vm_name(pod).ok_or(BadRef::NoVmName(full))?;
    Ok(PodFacts {
        vm: vm.to_owned(),
        hibernate_set: state::hibernate_requested(pod),
        hibernated: state::hibernated_for(pod, state::generation_stamp(pod)),
        live: state::vm_live(pod),
    })
}

/// Which transition a pass drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Towards `Hibernated`.
    Hibernate,
    /// Towards `Active`.
    Wake,
}

impl Flow {
    /// The flow `desire` asks for once nothing is in flight.
    pub fn of(desire: Desire) -> Flow {
        match desire {
            Desire::Hibernate => Flow::Hibernate,
            Desire::Wake => Flow::Wake,
        }
    }

    /// The desire's name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Flow::Hibernate => "Hibernate",
            Flow::Wake => "Wake",
        }
    }
}

/// The flow of `desire`; a transition in flight the other way is finished first.
pub fn flow(desire: Desire, phase: Option<HibernationPhase>) -> Flow {
    match (desire, phase) {
        (Desire::Hibernate, Some(Waking)) => Flow::Wake,
        (Desire::Wake, Some(Hibernating)) => Flow::Hibernate,
        (Desire::Hibernate, _) => Flow::Hibernate,
        (Desire::Wake, _) => Flow::Wake,
    }
}

/// What the registry said about `<vm>:hibernate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The tag exists.
    Present,
    /// The tag does not exist (404).
    Absent,
    /// The registry could not answer; the category of the error.
    Error(&'static str),
}

/// When to look again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Converged: wait for a change.
    Done,
    /// Look again after this delay.
    After(Duration),
    /// Write the status, then fail the pass with the registry error: retried with back-off,
    /// but within this long at the latest (the deadline's check).
    RetryError(Duration),
    /// A transition the desire no longer wants has settled: look again now, to start the
    /// desired one.
    Now,
}

/// The outcome of one pass of the state machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The phase to write.
    pub phase: HibernationPhase,
    /// The Ready message; `None` means the phase name.
    pub message: Option<String>,
    /// When to look again.
    pub next: Next,
    /// The note of the Warning Event a timeout publishes (upstream words it differently from
    /// the Ready message).
    pub alert: Option<String>,
}

impl Decision {
    fn done(phase: HibernationPhase) -> Self {
        Self {
            phase,
            message: None,
            next: Next::Done,
            alert: None,
        }
    }
}

/// One pass for `desire`: the flow it runs as ([`flow`]), that flow's step ([`hibernate`] or
/// [`wake`]; `probe` is read by a hibernate only), then [`settle`].
pub fn decide(
    desire: Desire,
    seen: &Seen,
    pod: &PodFacts,
    probe: Option<&Probe>,
    now: Timestamp,
    t: &Timeouts,
) -> Decision {
    let flow = flow(desire, seen.phase);
    let d = match flow {
        Flow::Hibernate => hibernate(seen, pod, probe, now, t),
        Flow::Wake => wake(seen, pod, now, t),
    };
    settle(desire, flow, d)
}

/// A decision of `flow` for `desire`: when it settles a transition the desire does not want
/// (the reverse flow finished in flight ends `Done`), look again [`Next::Now`] so the desired
/// flow starts; anything else is kept.
pub fn settle(desire: Desire, flow: Flow, d: Decision) -> Decision {
    if d.next == Next::Done && flow != Flow::of(desire) {
        return Decision {
            next: Next::Now,
            ..d
        };
    }
    d
}

/// Whether a hibernate pass must ask the registry: vk-cocoon reports the VM hibernated, and
/// the CR has not already confirmed that for this VM.
pub fn needs_probe(seen: &Seen, pod: &PodFacts) -> bool {
    pod.hibernated && !confirmed(seen, pod)
}

fn confirmed(seen: &Seen, pod: &PodFacts) -> bool {
    seen.phase == Some(Hibernated) && seen.vm_name.as_deref() == Some(pod.vm.as_str())
}

/// One hibernate pass; `probe` is the registry's answer when [`needs_probe`] asked for it.
pub fn hibernate(
    seen: &Seen,
    pod: &PodFacts,
    probe: Option<&Probe>,
    now: Timestamp,
    t: &Timeouts,
) -> Decision {
    let left = remaining(seen, Hibernating, t.hibernate, now);
    if pod.hibernated {
        match (probe, left) {
            (None, _) if confirmed(seen, pod) => return Decision::done(Hibernated),
            (Some(Probe::Present), _) => return Decision::done(Hibernated),
            (Some(Probe::Error(category)), Some(left)) => {
                return Decision {
                    phase: Hibernating,
                    message: Some(format!(
                        "confirming {}:hibernate in the registry failed ({category}); retrying",
                        pod.vm
                    )),
                    next: Next::RetryError(past(left)),
                    alert: None,
                };
            }
            _ => {}
        }
    }
    match left {
        None => failed(
            format!(
                "hibernate not confirmed within {}",
                go_duration(t.hibernate)
            ),
            format!(
                "snapshot {} not confirmed in the registry within {}",
                pod.vm,
                go_duration(t.hibernate)
            ),
        ),
        Some(left) => waiting(Hibernating, left, t.poll),
    }
}

/// One wake pass.
pub fn wake(seen: &Seen, pod: &PodFacts, now: Timestamp, t: &Timeouts) -> Decision {
    if pod.live {
        return Decision::done(Active);
    }
    match remaining(seen, Waking, t.wake, now) {
        None => failed(
            format!(
                "wake timed out after {}; vk-cocoon never reported the container running",
                go_duration(t.wake)
            ),
            format!(
                "vk-cocoon did not report the container running within {}",
                go_duration(t.wake)
            ),
        ),
        Some(left) => waiting(Waking, left, t.poll),
    }
}

/// A bad reference: `Pending` (or `Failed` without a podRef) with its message, or `None`
/// when the phase must be kept (`Hibernated` and `Waking` are never demoted).
pub fn bad_ref(seen: &Seen, bad: &BadRef) -> Option<Decision> {
    let phase = match bad {
        BadRef::NoPodRef => Failed,
        _ if matches!(seen.phase, Some(Hibernated | Waking)) => return None,
        _ => Pending,
    };
    Some(Decision {
        phase,
        message: Some(bad.message()),
        next: Next::After(BAD_REF_RECHECK),
        alert: None,
    })
}

/// Whether writing `d` reports a bad reference anew (its Warning Event is due): the Ready
/// message changes to it.
pub fn bad_ref_is_news(seen: &Seen, d: &Decision) -> bool {
    seen.phase != Some(d.phase) || seen.message != d.message
}

/// The time left before the deadline of `phase`; `Some(budget)` when the CR is not yet in
/// `phase` (entering it restarts the clock), `None` once the budget is spent.
pub fn remaining(
    seen: &Seen,
    phase: HibernationPhase,
    budget: Duration,
    now: Timestamp,
) -> Option<Duration> {
    let since = match (seen.phase, seen.since) {
        (Some(p), Some(since)) if p == phase => since,
        _ => return Some(budget),
    };
    let spent = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    // Upstream fails once the phase is *older* than the budget.
    (spent <= budget).then(|| budget - spent)
}

fn waiting(phase: HibernationPhase, left: Duration, poll: Duration) -> Decision {
    Decision {
        phase,
        message: None,
        next: Next::After(poll.min(past(left))),
        alert: None,
    }
}

// Just past a deadline `left` away: lastTransitionTime has whole-second precision.
fn past(left: Duration) -> Duration {
    left + Duration::from_secs(1)
}

fn failed(message: String, alert: String) -> Decision {
    Decision {
        phase: Failed,
        message: Some(message),
        next: Next::Done,
        alert: Some(alert),
    }
}

/// A duration as Go prints it: `3m0s`, `5m0s`, `45s`, `1h0m0s`.
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, m, sec) => format!("{h}h{m}m{sec}s"),
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
