//! The operator's own metrics under upstream's names (reference §4.9), in the same registry as
//! kit's controller-runtime families, so one `/metrics` serves both:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `redis_cluster_instances_total` | gauge | `namespace`, `cluster`, `type` (`desired` or `actual`) |
//! | `redis_cluster_phase` | gauge, one-hot | `namespace`, `cluster`, `phase` (every phase, and `Unknown`) |
//! | `redis_reconcile_duration_seconds` | histogram (Prometheus' default buckets) | `namespace`, `cluster` |
//! | `redis_failover_total` | counter | `namespace`, `cluster` |
//! | `redis_switchover_total` | counter | `namespace`, `cluster` (an addition: planned handovers) |
//!
//! Contract: [`RedisMetrics::forget`] drops a deleted cluster's series.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::crd::ClusterPhase;

/// Prometheus' default histogram buckets (upstream's `prometheus.DefBuckets`).
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Every phase label value, as upstream (`Unknown` for none).
pub const PHASES: [&str; 11] = [
    "Creating",
    "Healthy",
    "Degraded",
    "FailingOver",
    "Scaling",
    "Updating",
    "WaitingForUser",
    "Deleting",
    "Hibernating",
    "Replicating",
    "Unknown",
];

/// `{namespace, cluster}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// The cluster's namespace.
    pub namespace: String,
    /// The cluster's name.
    pub cluster: String,
}

/// `{namespace, cluster, type}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstancesLabels {
    /// The cluster's namespace.
    pub namespace: String,
    /// The cluster's name.
    pub cluster: String,
    /// `desired` or `actual`.
    pub r#type: String,
}

/// `{namespace, cluster, phase}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The cluster's namespace.
    pub namespace: String,
    /// The cluster's name.
    pub cluster: String,
    /// The phase.
    pub phase: String,
}

fn buckets() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// Every `redis_*` family. Cheap to clone.
#[derive(Clone)]
pub struct RedisMetrics {
    instances: Family<InstancesLabels, Gauge>,
    phase: Family<PhaseLabels, Gauge>,
    duration: Family<ClusterLabels, Histogram, fn() -> Histogram>,
    failovers: Family<ClusterLabels, Counter>,
    switchovers: Family<ClusterLabels, Counter>,
}

impl Default for RedisMetrics {
    fn default() -> Self {
        Self {
            instances: Family::default(),
            phase: Family::default(),
            duration: Family::new_with_constructor(buckets),
            failovers: Family::default(),
            switchovers: Family::default(),
        }
    }
}

fn labels(namespace: &str, cluster: &str) -> ClusterLabels {
    ClusterLabels {
        namespace: namespace.into(),
        cluster: cluster.into(),
    }
}

/// The label value of a phase.
pub fn phase_name(p: Option<ClusterPhase>) -> &'static str {
    match p {
        None => "Unknown",
        Some(p) => match p {
            ClusterPhase::Creating => "Creating",
            ClusterPhase::Healthy => "Healthy",
            ClusterPhase::Degraded => "Degraded",
            ClusterPhase::Replicating => "Replicating",
            ClusterPhase::FailingOver => "FailingOver",
            ClusterPhase::Scaling => "Scaling",
            ClusterPhase::Updating => "Updating",
            ClusterPhase::WaitingForUser => "WaitingForUser",
            ClusterPhase::Deleting => "Deleting",
            ClusterPhase::Hibernating => "Hibernating",
        },
    }
}

impl RedisMetrics {
    /// Fresh families registered into `metrics`.
    pub fn register(metrics: &kit::metrics::Metrics) -> Self {
        let m = Self::default();
        metrics.register(
            "redis_cluster_instances_total",
            "Redis cluster instance counts by type (desired or actual).",
            m.instances.clone(),
        );
        metrics.register(
            "redis_cluster_phase",
            "Current Redis cluster phase as one-hot gauge labels.",
            m.phase.clone(),
        );
        metrics.register(
            "redis_reconcile_duration_seconds",
            "Duration of Redis cluster reconciliation loops in seconds.",
            m.duration.clone(),
        );
        metrics.register(
            "redis_failover",
            "Total number of successful Redis failovers.",
            m.failovers.clone(),
        );
        metrics.register(
            "redis_switchover",
            "Total number of completed planned switchovers.",
            m.switchovers.clone(),
        );
        m
    }

    /// Records the desired and actual instance counts and the phase of a cluster.
    pub fn observe(
        &self,
        namespace: &str,
        cluster: &str,
        desired: i32,
        actual: i32,
        phase: Option<ClusterPhase>,
    ) {
        for (t, v) in [("desired", desired), ("actual", actual)] {
            let l = InstancesLabels {
                namespace: namespace.into(),
                cluster: cluster.into(),
                r#type: t.into(),
            };
            self.instances.get_or_create(&l).set(i64::from(v));
        }
        let now = phase_name(phase);
        for p in PHASES {
            let l = PhaseLabels {
                namespace: namespace.into(),
                cluster: cluster.into(),
                phase: p.into(),
            };
            self.phase.get_or_create(&l).set(i64::from(p == now));
        }
    }

    /// Records a pass's duration.
    pub fn reconciled(&self, namespace: &str, cluster: &str, seconds: f64) {
        self.duration
            .get_or_create(&labels(namespace, cluster))
            .observe(seconds);
    }

    /// Counts a completed failover.
    pub fn failover(&self, namespace: &str, cluster: &str) {
        self.failovers
            .get_or_create(&labels(namespace, cluster))
            .inc();
    }

    /// Counts a completed switchover.
    pub fn switchover(&self, namespace: &str, cluster: &str) {
        self.switchovers
            .get_or_create(&labels(namespace, cluster))
            .inc();
    }

    /// Drops every series of a deleted cluster.
    pub fn forget(&self, namespace: &str, cluster: &str) {
        let l = labels(namespace, cluster);
        self.duration.remove(&l);
        self.failovers.remove(&l);
        self.switchovers.remove(&l);
        for t in ["desired", "actual"] {
            self.instances.remove(&InstancesLabels {
                namespace: namespace.into(),
                cluster: cluster.into(),
                r#type: t.into(),
            });
        }
        for p in PHASES {
            self.phase.remove(&PhaseLabels {
                namespace: namespace.into(),
                cluster: cluster.into(),
                phase: p.into(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_names_are_exported() {
        let reg = kit::metrics::Metrics::new();
        let m = RedisMetrics::register(&reg);
        m.observe("ns", "demo", 3, 2, Some(ClusterPhase::Degraded));
        m.reconciled("ns", "demo", 0.02);
        m.failover("ns", "demo");
        let out = reg.encode();
        for want in [
            r#"redis_cluster_instances_total{namespace="ns",cluster="demo",type="desired"} 3"#,
            r#"redis_cluster_instances_total{namespace="ns",cluster="demo",type="actual"} 2"#,
            r#"redis_cluster_phase{namespace="ns",cluster="demo",phase="Degraded"} 1"#,
            r#"redis_cluster_phase{namespace="ns",cluster="demo",phase="Healthy"} 0"#,
            r#"redis_reconcile_duration_seconds_count{namespace="ns",cluster="demo"} 1"#,
            r#"redis_failover_total{namespace="ns",cluster="demo"} 1"#,
        ] {
            assert!(out.contains(want), "{want} in\n{out}");
        }
        m.forget("ns", "demo");
        assert!(!reg.encode().contains(r#"cluster="demo""#));
    }
}
