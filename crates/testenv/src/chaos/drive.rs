//! The shape every chaos run shares, whatever the operator: the user's steps under faults and
//! kills, calm, convergence to the fault-free run's state, the hot-loop checks, deletion under
//! chaos again, calm, nothing left behind, and the run's report. A scenario supplies its
//! [`Flow`] (the user's steps and how its state is read), its [`Bounds`], its world (namespace,
//! RBAC, servers) and its invariants (an [`super::Observer`] and any probes it runs itself).
//!
//! Contract:
//! - [`drive`] records into the run's [`Violations`]: `progress` (a step or the teardown that
//!   did not complete), `final_state` (never reached the baseline, with the diff),
//!   `state_drifted` (changed after converging), `hot_loop` (the quiet rate over
//!   [`Bounds::quiet_window`] above [`Bounds::quiet`] in two consecutive windows) and each leftover the flow names.
//! - Rates are per process: an operator made of several processes (a controller-manager and
//!   its agents, [`OperatorUnderTest::start_processes`]) keeps [`Bounds`] in each of them
//!   (the peak and quiet rates reported are the highest of any one process); faults and
//!   requests are summed over every proxy.
//! - [`Driven::finish`] checks the peak rate against [`Bounds::peak`], stops the meter and the
//!   operator, and returns the [`RunReport`]; the scenario runs its own final checks (and stops
//!   its observer) between the two.

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::scenario::{self, OperatorUnderTest, RateMeter, RunReport, Violations};

/// The user's side of a scenario.
pub trait Flow {
    /// The user's steps, while faults and kills are on; an error is a `progress` violation.
    fn run(&self) -> impl Future<Output = anyhow::Result<()>>;
    /// The scenario's state, normalized so a seeded run's equals the fault-free run's.
    fn capture(&self) -> impl Future<Output = anyhow::Result<Value>>;
    /// Whether the fault-free run's state is final (it becomes the baseline).
    fn settled(&self, state: &Value) -> bool;
    /// Deletes what the scenario made.
    fn teardown(&self) -> impl Future<Output = anyhow::Result<()>>;
    /// What is still there after the teardown, as `(invariant, what)`.
    fn leftovers(&self) -> impl Future<Output = anyhow::Result<Vec<(&'static str, String)>>>;
}

/// A scenario's limits.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// How long the converged operator is watched for a hot loop.
    pub quiet_window: Duration,
    /// Hot-loop bound once converged, requests per second (reads and writes).
    pub quiet: f64,
    /// Hot-loop bound during the run, requests per second over any 5 s window.
    pub peak: f64,
    /// How long the state may take to converge once the faults stop.
    pub converge: Duration,
    /// How long the deletion may take once the faults stop.
    pub teardown: Duration,
}

/// What [`drive`] measured, for the scenario's own final checks and the report.
pub struct Driven {
    /// The converged state (none if it never converged).
    pub final_state: Option<Value>,
    converge_secs: Option<f64>,
    quiet: f64,
    meter: RateMeter,
    bounds: Bounds,
}

/// Runs `flow` against the supervised `op` under the seed's faults and kills, then deletion;
/// see the module's contract.
pub async fn drive(
    op: &mut OperatorUnderTest,
    flow: &impl Flow,
    seed: Option<u64>,
    baseline: Option<&Value>,
    violations: &Violations,
    bounds: Bounds,
) -> Driven {
    let meter = op.meter();
    op.supervise(scenario::kills(seed, 0));
    if let Err(e) = flow.run().await {
        violations.record("progress", format!("{e:#}"));
    }

    // Faults and kills stop; the state must become the fault-free run's.
    op.calm().await;
    let calm = op.last_disturbance();
    let converged = scenario::converge(
        || flow.capture(),
        baseline,
        |s| flow.settled(s),
        bounds.converge,
    )
    .await;
    let (final_state, converge_secs, quiet) = match converged {
        Ok(c) => {
            let secs = c.at.saturating_duration_since(calm).as_secs_f64();
            // A watch re-established at the calm re-lists and costs every object one more
            // pass, which can fall in the first window; a hot loop fills the next one too.
            let mut quiet = op.quiet_rate(bounds.quiet_window).await;
            if quiet > bounds.quiet {
                quiet = op.quiet_rate(bounds.quiet_window).await;
            }
            if quiet > bounds.quiet {
                violations.record(
                    "hot_loop",
                    format!(
                        "{quiet:.2} requests/s while converged (bound {})",
                        bounds.quiet
                    ),
                );
            }
            if let Ok(after) = flow.capture().await
                && after != c.state
            {
                violations.record("state_drifted", scenario::diff(&c.state, &after).join("; "));
            }
            (Some(c.state), Some(secs), quiet)
        }
        Err(last) => {
            let detail = match (baseline, &last) {
                (Some(b), Some(l)) => scenario::diff(b, l).join("; "),
                _ => format!("never settled; last state {last:?}"),
            };
            violations.record("final_state", detail);
            (None, None, 0.0)
        }
    };

    // Deletion, under faults and kills again, then calm: nothing may be left.
    op.set_rates(scenario::plan(seed).rates);
    op.supervise(scenario::kills(seed, 1));
    if let Err(e) = flow.teardown().await {
        violations.record("progress", format!("teardown: {e:#}"));
    }
    let nothing_left = || async { flow.leftovers().await.ok().filter(Vec::is_empty) };
    let _ = crate::eventually(
        "deletion under chaos",
        Duration::from_secs(20),
        nothing_left,
    )
    .await;
    op.calm().await;
    let gone =
        crate::eventually("every object and child gone", bounds.teardown, nothing_left).await;
    if gone.is_err() {
        for (invariant, what) in flow.leftovers().await.unwrap_or_default() {
            violations.record(invariant, what);
        }
    }
    Driven {
        final_state,
        converge_secs,
        quiet,
        meter,
        bounds,
    }
}

impl Driven {
    /// Checks the peak rate, stops the meter and the operator; the run's report.
    pub async fn finish(
        self,
        op: OperatorUnderTest,
        run: (&str, &str, Option<u64>),
        started: Instant,
        violations: &Violations,
    ) -> RunReport {
        let (operator, scenario, seed) = run;
        let peak = self.meter.peak();
        self.meter.stop().await;
        if peak > self.bounds.peak {
            violations.record(
                "hot_loop",
                format!("{peak:.1} requests/s over 5 s (bound {})", self.bounds.peak),
            );
        }
        let log = op.log().display().to_string();
        let traffic = op.traffic();
        let faults = op.fault_counts();
        let supervised = op.stop().await;
        RunReport {
            operator: operator.into(),
            scenario: scenario.into(),
            seed,
            faults: faults.into_iter().map(|(k, n)| (k.to_owned(), n)).collect(),
            kills: supervised.kills,
            exits: supervised.exits,
            requests: traffic.calls(),
            peak_rate: peak,
            quiet_rate: self.quiet,
            converge_secs: self.converge_secs,
            duration_secs: started.elapsed().as_secs_f64(),
            violations: violations.all(),
            log,
        }
    }
}
