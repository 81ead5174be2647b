//! The operator's own metrics, under upstream's names (namespace `cocoon_operator_`), in the
//! same registry as the controller-runtime families so one `/metrics` serves both.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// Buckets of the hibernate and wake phase durations (seconds), as upstream.
pub const PHASE_BUCKETS: [f64; 6] = [10.0, 30.0, 60.0, 180.0, 600.0, 1800.0];

/// `{namespace, cocoonset}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SetLabels {
    /// The set's namespace.
    pub namespace: String,
    /// The set's name.
    pub cocoonset: String,
}

/// `{namespace, cocoonset, placement}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlacementLabels {
    /// The set's namespace.
    pub namespace: String,
    /// The set's name.
    pub cocoonset: String,
    /// `hint-node` when the main came back on the node it hibernated on, else `pool`.
    pub placement: String,
}

/// `{result}`: `ok` or `timeout`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok` or `timeout`.
    pub result: String,
}

/// `{phase}`: the lifecycle phase in which a `failed` state was seen.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// Where it was observed, e.g. `main`.
    pub phase: String,
}

fn phase_histogram() -> Histogram {
    Histogram::new(PHASE_BUCKETS)
}

/// Every `cocoon_operator_*` family. Cheap to clone.
#[derive(Clone)]
pub struct CocoonMetrics {
    /// Sub-agent pods deleted for a rebuild.
    pub subagent_rebuild: Family<SetLabels, Counter>,
    /// Sub-agent pods left in dead-letter.
    pub subagent_dead_letter: Family<SetLabels, Counter>,
    /// Seconds from Hibernating to Hibernated (or to the timeout).
    pub hibernate_phase_duration: Family<ResultLabels, Histogram, fn() -> Histogram>,
    /// Seconds from Waking to Active (or to the timeout).
    pub wake_phase_duration: Family<ResultLabels, Histogram, fn() -> Histogram>,
    /// `failed` lifecycle states observed.
    pub lifecycle_state_failed_observed: Family<PhaseLabels, Counter>,
    /// Pods deleted by a release-policy suspend.
    pub slot_release_pods_deleted: Family<SetLabels, Counter>,
    /// Released sets woken, by placement.
    pub slot_release_wake: Family<PlacementLabels, Counter>,
    /// Released wakes whose main pod could not be scheduled.
    pub slot_release_wake_unschedulable: Family<SetLabels, Counter>,
}

impl Default for CocoonMetrics {
    fn default() -> Self {
        Self {
            subagent_rebuild: Family::default(),
            subagent_dead_letter: Family::default(),
            hibernate_phase_duration: Family::new_with_constructor(phase_histogram),
            wake_phase_duration: Family::new_with_constructor(phase_histogram),
            lifecycle_state_failed_observed: Family::default(),
            slot_release_pods_deleted: Family::default(),
            slot_release_wake: Family::default(),
            slot_release_wake_unschedulable: Family::default(),
        }
    }
}

impl CocoonMetrics {
    /// Fresh families registered into `metrics`.
    pub fn register(metrics: &kit::metrics::Metrics) -> Self {
        let m = Self::default();
        let p = "cocoon_operator_";
        metrics.register(
            &format!("{p}subagent_rebuild"),
            "Sub-agent pods deleted for a rebuild",
            m.subagent_rebuild.clone(),
        );
        metrics.register(
            &format!("{p}subagent_dead_letter"),
            "Sub-agent pods left in dead-letter after exhausting rebuilds",
            m.subagent_dead_letter.clone(),
        );
        metrics.register(
            &format!("{p}hibernate_phase_duration_seconds"),
            "Time from Hibernating to Hibernated or timeout",
            m.hibernate_phase_duration.clone(),
        );
        metrics.register(
            &format!("{p}wake_phase_duration_seconds"),
            "Time from Waking to Active or timeout",
            m.wake_phase_duration.clone(),
        );
        metrics.register(
            &format!("{p}lifecycle_state_failed_observed"),
            "Lifecycle state failed observed on a pod",
            m.lifecycle_state_failed_observed.clone(),
        );
        metrics.register(
            &format!("{p}slot_release_pods_deleted"),
            "Pods deleted by a release-policy suspend",
            m.slot_release_pods_deleted.clone(),
        );
        metrics.register(
            &format!("{p}slot_release_wake"),
            "Released sets woken, by placement",
            m.slot_release_wake.clone(),
        );
        metrics.register(
            &format!("{p}slot_release_wake_unschedulable"),
            "Released wakes whose main pod was unschedulable",
            m.slot_release_wake_unschedulable.clone(),
        );
        m
    }

    /// Labels of a set.
    pub fn set(namespace: &str, cocoonset: &str) -> SetLabels {
        SetLabels {
            namespace: namespace.into(),
            cocoonset: cocoonset.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_upstreams() {
        let registry = kit::metrics::Metrics::new();
        let m = CocoonMetrics::register(&registry);
        m.subagent_rebuild
            .get_or_create(&CocoonMetrics::set("ns", "demo"))
            .inc();
        m.hibernate_phase_duration
            .get_or_create(&ResultLabels {
                result: "ok".into(),
            })
            .observe(12.0);
        let out = registry.encode();
        assert!(
            out.contains(
                r#"cocoon_operator_subagent_rebuild_total{namespace="ns",cocoonset="demo"} 1"#
            ),
            "{out}"
        );
        assert!(out.contains(r#"cocoon_operator_hibernate_phase_duration_seconds_bucket{le="30.0",result="ok"} 1"#), "{out}");
    }
}
