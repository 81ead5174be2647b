//! Prometheus metrics with controller-runtime's names and labels.
//!
//! Contract: one [`Metrics`] per process holds one registry. It pre-registers the metric
//! families that controller-runtime (Go) exports, under the same names and label keys, so the
//! dashboards and alerts written for Go operators work unchanged:
//!
//! | metric | labels |
//! |---|---|
//! | `controller_runtime_reconcile_total` | `controller`, `result` = success, error, requeue, requeue_after |
//! | `controller_runtime_reconcile_errors_total` | `controller` |
//! | `controller_runtime_reconcile_time_seconds` (histogram, controller-runtime buckets) | `controller` |
//! | `controller_runtime_max_concurrent_reconciles` | `controller` |
//! | `controller_runtime_active_workers` | `controller` |
//! | `workqueue_depth` | `name`, `controller` |
//! | `workqueue_adds_total` | `name`, `controller` |
//! | `leader_election_master_status` | `name` |
//!
//! One Flotilla addition, outside controller-runtime's namespace:
//! `flotilla_reconcile_errors_by_category_total{controller,category}`, failures by the
//! error's stable category (see `reconcile::ReconcileError`).
//!
//! Operators add their own metrics to the same registry with [`Metrics::register`] or
//! [`Metrics::with_registry`]; [`Metrics::encode`] renders everything in the text exposition
//! format (OpenMetrics flavour, which Prometheus scrapes natively).

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Metric, Registry},
};

/// The content type of [`Metrics::encode`]'s output, for the `/metrics` response.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`.
pub const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// The `result` label of `controller_runtime_reconcile_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// The reconcile succeeded and asked for no requeue.
    Success,
    /// The reconcile returned an error.
    Error,
    /// A requeue without delay (kept for label parity with controller-runtime).
    Requeue,
    /// The reconcile succeeded and asked to run again after a delay.
    RequeueAfter,
}

impl ReconcileResult {
    /// Every result, in label order.
    pub const ALL: [ReconcileResult; 4] = [
        ReconcileResult::Success,
        ReconcileResult::Error,
        ReconcileResult::Requeue,
        ReconcileResult::RequeueAfter,
    ];

    /// The label value controller-runtime uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CategoryLabels {
    controller: String,
    category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    name: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

#[derive(Debug)]
struct Families {
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    errors_by_category: Family<CategoryLabels, Counter>,
    reconcile_time: HistogramFamily<ControllerLabels>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    queue_depth: Family<QueueLabels, Gauge>,
    queue_adds: Family<QueueLabels, Counter>,
    leader: Family<NameLabels, Gauge>,
}

impl Families {
    fn new() -> Self {
        Self {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            errors_by_category: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_histogram),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            leader: Family::default(),
        }
    }

    fn register(&self, r: &mut Registry) {
        // Counters are registered without `_total`: the encoder appends it.
        let f = self;
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            f.reconcile_total.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            f.reconcile_errors.clone(),
        );
        r.register(
            "flotilla_reconcile_errors_by_category",
            "Total number of reconciliation errors per controller and error category",
            f.errors_by_category.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            f.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            f.max_concurrent.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            f.active_workers.clone(),
        );
        r.register(
            "workqueue_depth",
            "Current depth of workqueue",
            f.queue_depth.clone(),
        );
        r.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            f.queue_adds.clone(),
        );
        r.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            f.leader.clone(),
        );
    }
}

/// The process-wide registry and the controller-runtime metric families. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    families: Arc<Families>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with the controller-runtime families registered.
    pub fn new() -> Self {
        let families = Families::new();
        let mut registry = Registry::default();
        families.register(&mut registry);
        Self {
            registry: Arc::new(Mutex::new(registry)),
            families: Arc::new(families),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while registering leaves the registry usable; metrics must not cascade panics.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers an operator's own metric into the shared registry.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.lock().register(name, help, metric);
    }

    /// Gives mutable access to the registry (sub-registries, units, collectors).
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.lock())
    }

    /// Renders every registered metric in the text exposition format (see [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an encoder error would be a bug in a metric.
        if let Err(e) = text::encode(&mut out, &self.lock()) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        out
    }

    /// The metrics of one controller, pre-bound to its `controller` label.
    pub fn controller(&self, name: &str) -> ControllerMetrics {
        let f = &self.families;
        let c = ControllerLabels {
            controller: name.to_owned(),
        };
        let q = QueueLabels {
            name: name.to_owned(),
            controller: name.to_owned(),
        };
        let results = ReconcileResult::ALL.map(|r| {
            f.reconcile_total.get_or_create_owned(&ResultLabels {
                controller: name.to_owned(),
                result: r.as_str().to_owned(),
            })
        });
        ControllerMetrics {
            name: name.into(),
            results,
            errors: f.reconcile_errors.get_or_create_owned(&c),
            by_category: f.errors_by_category.clone(),
            time: f.reconcile_time.get_or_create_owned(&c),
            max_concurrent: f.max_concurrent.get_or_create_owned(&c),
            active_workers: f.active_workers.get_or_create_owned(&c),
            queue_depth: f.queue_depth.get_or_create_owned(&q),
            queue_adds: f.queue_adds.get_or_create_owned(&q),
        }
    }

    /// Sets `leader_election_master_status{name}` to 1 (leading) or 0 (standby).
    pub fn set_leader(&self, lease_name: &str, leading: bool) {
        let labels = NameLabels {
            name: lease_name.to_owned(),
        };
        self.families
            .leader
            .get_or_create(&labels)
            .set(i64::from(leading));
    }
}

/// Handles on one controller's series; recording is lock-free.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    name: Arc<str>,
    results: [Counter; 4],
    errors: Counter,
    by_category: Family<CategoryLabels, Counter>,
    time: Histogram,
    max_concurrent: Gauge,
    active_workers: Gauge,
    queue_depth: Gauge,
    queue_adds: Counter,
}

impl ControllerMetrics {
    /// The controller name these series carry.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Counts one finished reconcile; an error also counts in `reconcile_errors_total`.
    pub fn record_result(&self, result: ReconcileResult) {
        let idx = ReconcileResult::ALL.iter().position(|r| *r == result);
        if let Some(counter) = idx.and_then(|i| self.results.get(i)) {
            counter.inc();
        }
        if result == ReconcileResult::Error {
            self.errors.inc();
        }
    }

    /// Counts one failure under its stable category.
    pub fn record_error_category(&self, category: &str) {
        let labels = CategoryLabels {
            controller: self.name.to_string(),
            category: category.to_owned(),
        };
        self.by_category.get_or_create(&labels).inc();
    }

    /// Observes one reconcile's duration in the histogram.
    pub fn observe_duration(&self, elapsed: Duration) {
        self.time.observe(elapsed.as_secs_f64());
    }

    /// Sets `controller_runtime_max_concurrent_reconciles`.
    pub fn set_max_concurrent(&self, n: usize) {
        self.max_concurrent
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Marks one worker busy until the returned guard drops.
    pub fn worker(&self) -> GaugeGuard {
        GaugeGuard::new(self.active_workers.clone())
    }

    /// Counts one add to the queue and holds one unit of depth until the guard drops.
    pub fn enqueue(&self) -> GaugeGuard {
        self.queue_adds.inc();
        GaugeGuard::new(self.queue_depth.clone())
    }

    /// The current `workqueue_depth`.
    pub fn queue_depth(&self) -> i64 {
        self.queue_depth.get()
    }

    /// The current `controller_runtime_active_workers`.
    pub fn active_workers(&self) -> i64 {
        self.active_workers.get()
    }

    /// `controller_runtime_reconcile_total` for one result so far.
    pub fn result_count(&self, result: ReconcileResult) -> u64 {
        let idx = ReconcileResult::ALL.iter().position(|r| *r == result);
        idx.and_then(|i| self.results.get(i))
            .map_or(0, Counter::get)
    }
}

/// Increments a gauge on creation and decrements it on drop, so cancellation cannot leak.
#[derive(Debug)]
pub struct GaugeGuard(Gauge);

impl GaugeGuard {
    fn new(gauge: Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn reconcile_results_use_controller_runtime_names_and_labels() {
        let m = Metrics::new();
        let c = m.controller("widget");
        c.record_result(ReconcileResult::Success);
        c.record_result(ReconcileResult::Success);
        c.record_result(ReconcileResult::RequeueAfter);
        c.record_result(ReconcileResult::Error);
        c.record_error_category("apply_failed");
        assert_eq!(c.result_count(ReconcileResult::Success), 2);
        let out = m.encode();
        let get = |p: &str| line(&out, p).unwrap_or_else(|| panic!("{p} missing in\n{out}"));
        assert!(
            get(r#"controller_runtime_reconcile_total{controller="widget",result="success"}"#)
                .ends_with(" 2")
        );
        assert!(
            get(
                r#"controller_runtime_reconcile_total{controller="widget",result="requeue_after"}"#
            )
            .ends_with(" 1")
        );
        assert!(
            get(r#"controller_runtime_reconcile_total{controller="widget",result="error"}"#)
                .ends_with(" 1")
        );
        assert!(
            get(r#"controller_runtime_reconcile_total{controller="widget",result="requeue"}"#)
                .ends_with(" 0")
        );
        assert!(
            get(r#"controller_runtime_reconcile_errors_total{controller="widget"}"#)
                .ends_with(" 1")
        );
        assert!(get(r#"flotilla_reconcile_errors_by_category_total{controller="widget",category="apply_failed"}"#).ends_with(" 1"));
        assert!(out.ends_with("# EOF\n"));
    }

    #[test]
    fn histogram_uses_controller_runtime_buckets() {
        let m = Metrics::new();
        m.controller("widget")
            .observe_duration(Duration::from_millis(30));
        let out = m.encode();
        let bucket = |le: &str| {
            let p = format!(
                r#"controller_runtime_reconcile_time_seconds_bucket{{le="{le}",controller="widget"}}"#
            );
            line(&out, &p)
                .unwrap_or_else(|| panic!("{p} missing in\n{out}"))
                .to_owned()
        };
        assert!(bucket("0.025").ends_with(" 0"));
        assert!(bucket("0.05").ends_with(" 1"));
        assert!(bucket("60.0").ends_with(" 1"));
        assert!(bucket("+Inf").ends_with(" 1"));
        assert!(
            line(
                &out,
                r#"controller_runtime_reconcile_time_seconds_count{controller="widget"} 1"#
            )
            .is_some()
        );
    }

    #[test]
    fn gauges_follow_guards_and_queue_counts_adds() {
        let m = Metrics::new();
        let c = m.controller("widget");
        c.set_max_concurrent(4);
        let w = c.worker();
        let q1 = c.enqueue();
        let q2 = c.enqueue();
        drop(q1);
        let out = m.encode();
        assert!(
            out.contains(r#"controller_runtime_max_concurrent_reconciles{controller="widget"} 4"#)
        );
        assert!(out.contains(r#"controller_runtime_active_workers{controller="widget"} 1"#));
        assert!(out.contains(r#"workqueue_depth{name="widget",controller="widget"} 1"#));
        assert!(out.contains(r#"workqueue_adds_total{name="widget",controller="widget"} 2"#));
        drop((w, q2));
        let out = m.encode();
        assert!(out.contains(r#"controller_runtime_active_workers{controller="widget"} 0"#));
        assert!(out.contains(r#"workqueue_depth{name="widget",controller="widget"} 0"#));
    }

    #[test]
    fn leader_status_and_custom_metrics_share_the_registry() {
        let m = Metrics::new();
        m.set_leader("cocoon-lock", true);
        let mine: Counter = Counter::default();
        m.register("cocoon_vms_started", "VMs started", mine.clone());
        mine.inc_by(3);
        let out = m.encode();
        assert!(out.contains(r#"leader_election_master_status{name="cocoon-lock"} 1"#));
        assert!(out.contains("cocoon_vms_started_total 3"));
        m.set_leader("cocoon-lock", false);
        assert!(
            m.encode()
                .contains(r#"leader_election_master_status{name="cocoon-lock"} 0"#)
        );
    }
}
