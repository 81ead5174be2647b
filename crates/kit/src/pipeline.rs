//! The subreconciler pipeline (the FoundationDB operator's shape): an ordered list of named
//! steps run against one narrow, operator-specific context.
//!
//! Contract of [`Pipeline::run`]:
//! - steps run in order; each returns a [`Flow`] or a [`StepError`];
//! - `Flow::Continue` goes on to the next step;
//! - `Flow::Requeue { stop: true, after }` ends the pass now; the pass requeues after `after`,
//!   whatever delayed requeues came before it;
//! - `Flow::Requeue { stop: false, after }` is a delayed requeue: later steps still run, and a
//!   pass that reaches the end requeues after the *shortest* delayed requeue seen;
//! - an error ends the pass; the [`PipelineError`] names the failing step;
//! - every step that ran is listed in the [`Report`] with its duration, and a `debug` tracing
//!   event records each step's name, duration and result.

use std::fmt;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::reconcile::{Outcome, ReconcileError};

/// What a step asks the pipeline to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on to the next step.
    Continue,
    /// Requeue after `after`; `stop` ends the pass now, otherwise later steps still run.
    Requeue { after: Duration, stop: bool },
}

impl Flow {
    /// Ends the pass now and requeues after `after`.
    pub fn stop(after: Duration) -> Flow {
        Flow::Requeue { after, stop: true }
    }

    /// Lets later steps run; the pass requeues after the shortest such delay.
    pub fn delay(after: Duration) -> Flow {
        Flow::Requeue { after, stop: false }
    }
}

/// The result of one step.
pub type StepResult = Result<Flow, StepError>;

/// Any step's own error enum, boxed; `?` converts every [`ReconcileError`] into it.
pub struct StepError(Box<dyn ReconcileError + Send + Sync + 'static>);

impl<E: ReconcileError + Send + Sync + 'static> From<E> for StepError {
    fn from(err: E) -> Self {
        StepError(Box::new(err))
    }
}

impl StepError {
    /// The wrapped error's category.
    pub fn category(&self) -> &'static str {
        self.0.category()
    }

    /// Whether the wrapped error is permanent.
    pub fn is_permanent(&self) -> bool {
        self.0.is_permanent()
    }

    /// The wrapped error, e.g. to downcast via `source()` chains or to render.
    pub fn inner(&self) -> &(dyn ReconcileError + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Debug for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for StepError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A failed pass: the step that failed and its error.
#[derive(Debug, thiserror::Error)]
#[error("step {step} failed: {source}")]
pub struct PipelineError {
    /// The failing step's name.
    pub step: &'static str,
    /// The step's error.
    #[source]
    pub source: StepError,
}

impl ReconcileError for PipelineError {
    fn category(&self) -> &'static str {
        self.source.category()
    }

    fn is_permanent(&self) -> bool {
        self.source.is_permanent()
    }
}

/// One subreconciler. `C` is the operator's narrow context for this pipeline.
///
/// Boxed futures keep the trait dyn-compatible, so a pipeline is a `Vec<Box<dyn Step<C>>>`:
/// ```
/// use std::time::Duration;
/// use futures::future::BoxFuture;
/// use kit::pipeline::{Flow, Pipeline, Step, StepResult};
/// use kit::reconcile::Outcome;
///
/// struct Ctx { pods_ready: bool }
/// struct WaitForPods;
///
/// impl Step<Ctx> for WaitForPods {
///     fn name(&self) -> &'static str { "wait_for_pods" }
///     fn run<'a>(&'a self, ctx: &'a mut Ctx) -> BoxFuture<'a, StepResult> {
///         Box::pin(async move {
///             Ok(if ctx.pods_ready { Flow::Continue } else { Flow::stop(Duration::from_secs(5)) })
///         })
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let pipeline = Pipeline::new().step(WaitForPods);
/// let report = pipeline.run(&mut Ctx { pods_ready: false }).await;
/// assert_eq!(report.into_result().unwrap(), Outcome::RequeueAfter(Duration::from_secs(5)));
/// # });
/// ```
pub trait Step<C>: Send + Sync {
    /// `<verb>_<noun>`, used in logs, reports and errors.
    fn name(&self) -> &'static str;

    /// Runs the step once.
    fn run<'a>(&'a self, ctx: &'a mut C) -> BoxFuture<'a, StepResult>;
}

/// A step that ran, and how long it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRun {
    /// The step's name.
    pub name: &'static str,
    /// Wall time spent in the step.
    pub elapsed: Duration,
}

/// What one pass did.
#[derive(Debug)]
pub struct Report {
    /// The steps that ran, in order (the failing or stopping step included).
    pub ran: Vec<StepRun>,
    /// The pass's outcome, or the error naming the failing step.
    pub result: Result<Outcome, PipelineError>,
}

impl Report {
    /// Names of the steps that ran, in order.
    pub fn ran_names(&self) -> Vec<&'static str> {
        self.ran.iter().map(|r| r.name).collect()
    }

    /// The outcome, dropping the per-step record.
    pub fn into_result(self) -> Result<Outcome, PipelineError> {
        self.result
    }
}

/// An ordered list of steps.
pub struct Pipeline<C> {
    steps: Vec<Box<dyn Step<C>>>,
}

impl<C> Default for Pipeline<C> {
    fn default() -> Self {
        Pipeline { steps: Vec::new() }
    }
}

impl<C: Send> Pipeline<C> {
    /// An empty pipeline.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a step.
    #[must_use]
    pub fn step(mut self, step: impl Step<C> + 'static) -> Self {
        self.steps.push(Box::new(step));
        self
    }

    /// The step names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.name()).collect()
    }

    /// Runs one pass; see the module docs for the rules.
    pub async fn run(&self, ctx: &mut C) -> Report {
        let mut ran = Vec::with_capacity(self.steps.len());
        let mut delayed = Outcome::Done;
        for step in &self.steps {
            let name = step.name();
            let started = Instant::now();
            let result = step.run(ctx).await;
            let elapsed = started.elapsed();
            tracing::debug!(step = name, elapsed_ms = elapsed.as_secs_f64() * 1e3, result = ?result, "step finished");
            ran.push(StepRun { name, elapsed });
            match result {
                Ok(Flow::Continue) => {}
                Ok(Flow::Requeue { after, stop: false }) => {
                    delayed = delayed.sooner(Outcome::RequeueAfter(after));
                }
                Ok(Flow::Requeue { after, stop: true }) => {
                    let result = Ok(Outcome::RequeueAfter(after));
                    return Report { ran, result };
                }
                Err(source) => {
                    let result = Err(PipelineError { step: name, source });
                    return Report { ran, result };
                }
            }
        }
        Report {
            ran,
            result: Ok(delayed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom;

    impl ReconcileError for Boom {
        fn category(&self) -> &'static str {
            "boom"
        }
    }

    // A step that records its name in the context and returns a fixed result.
    struct Fixed {
        name: &'static str,
        flow: Option<Flow>,
    }

    impl Step<Vec<&'static str>> for Fixed {
        fn name(&self) -> &'static str {
            self.name
        }

        fn run<'a>(&'a self, ctx: &'a mut Vec<&'static str>) -> BoxFuture<'a, StepResult> {
            Box::pin(async move {
                ctx.push(self.name);
                self.flow.ok_or_else(|| Boom.into())
            })
        }
    }

    fn go(name: &'static str) -> Fixed {
        Fixed {
            name,
            flow: Some(Flow::Continue),
        }
    }
    fn stop(name: &'static str, s: u64) -> Fixed {
        Fixed {
            name,
            flow: Some(Flow::stop(Duration::from_secs(s))),
        }
    }
    fn delay(name: &'static str, s: u64) -> Fixed {
        Fixed {
            name,
            flow: Some(Flow::delay(Duration::from_secs(s))),
        }
    }
    fn fail(name: &'static str) -> Fixed {
        Fixed { name, flow: None }
    }

    async fn run(p: Pipeline<Vec<&'static str>>) -> (Vec<&'static str>, Report) {
        let mut ctx = Vec::new();
        let report = p.run(&mut ctx).await;
        assert_eq!(
            report.ran_names(),
            ctx,
            "report lists exactly the steps that ran"
        );
        (ctx, report)
    }

    fn requeue(s: u64) -> Outcome {
        Outcome::RequeueAfter(Duration::from_secs(s))
    }

    #[tokio::test]
    async fn all_continue_is_done() {
        let p = Pipeline::new().step(go("a")).step(go("b")).step(go("c"));
        assert_eq!(p.names(), ["a", "b", "c"]);
        let (ran, report) = run(p).await;
        assert_eq!(ran, ["a", "b", "c"]);
        assert_eq!(report.into_result().unwrap(), Outcome::Done);
    }

    #[tokio::test]
    async fn stop_requeue_halts_later_steps() {
        let p = Pipeline::new()
            .step(go("a"))
            .step(stop("b", 30))
            .step(go("c"));
        let (ran, report) = run(p).await;
        assert_eq!(ran, ["a", "b"]);
        assert_eq!(report.into_result().unwrap(), requeue(30));
    }

    #[tokio::test]
    async fn delayed_requeues_run_later_steps_and_min_wins() {
        let p = Pipeline::new()
            .step(delay("a", 20))
            .step(delay("b", 5))
            .step(delay("c", 10))
            .step(go("d"));
        let (ran, report) = run(p).await;
        assert_eq!(ran, ["a", "b", "c", "d"]);
        assert_eq!(report.into_result().unwrap(), requeue(5));
    }

    #[tokio::test]
    async fn error_halts_later_steps_and_names_the_step() {
        let p = Pipeline::new()
            .step(delay("a", 5))
            .step(fail("b"))
            .step(go("c"));
        let (ran, report) = run(p).await;
        assert_eq!(ran, ["a", "b"]);
        let err = report.into_result().unwrap_err();
        assert_eq!(err.step, "b");
        assert_eq!(err.category(), "boom");
        assert!(!err.is_permanent());
        assert_eq!(err.to_string(), "step b failed: boom");
    }

    #[tokio::test]
    async fn stop_after_delayed_requeue_uses_the_stop_delay() {
        let p = Pipeline::new()
            .step(delay("a", 5))
            .step(stop("b", 60))
            .step(go("c"));
        let (ran, report) = run(p).await;
        assert_eq!(ran, ["a", "b"]);
        assert_eq!(report.into_result().unwrap(), requeue(60));
    }
}
