//! The backup controller's metrics, upstream's names and labels:
//! `redis_backup_phase_count{namespace,cluster,phase}` (RedisBackups by phase, every phase
//! present, `Unknown` for none yet) and `redis_last_successful_backup_timestamp{namespace,
//! cluster}` (Unix seconds of the newest completed backup, or of the cluster's
//! `lastSuccessfulBackup` when that is newer, 0 when none). Both are recomputed
//! from the controller's cache of RedisBackups after every pass of a backup of the cluster
//! ([`super::summary`]), so they follow deletions too.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::summary;
use crate::crd::{BackupPhase, RedisBackup};

/// `{namespace, cluster}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// The namespace.
    pub namespace: String,
    /// The RedisCluster.
    pub cluster: String,
}

/// `{namespace, cluster, phase}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The namespace.
    pub namespace: String,
    /// The RedisCluster.
    pub cluster: String,
    /// The phase.
    pub phase: String,
}

/// The families.
#[derive(Clone, Debug, Default)]
pub struct BackupMetrics {
    phases: Family<PhaseLabels, Gauge>,
    last_success: Family<ClusterLabels, Gauge>,
}

impl BackupMetrics {
    /// Fresh families registered into `metrics`.
    pub fn register(metrics: &kit::metrics::Metrics) -> Self {
        let m = Self::default();
        metrics.register(
            "redis_backup_phase_count",
            "Current number of RedisBackup resources by phase.",
            m.phases.clone(),
        );
        metrics.register(
            "redis_last_successful_backup_timestamp",
            "Unix timestamp of the last successful Redis backup per cluster.",
            m.last_success.clone(),
        );
        m
    }

    /// Sets both families for `cluster` from its `backups`; the timestamp is never older than
    /// `floor` (the cluster's `lastSuccessfulBackup`, which survives pruning).
    pub fn refresh(
        &self,
        namespace: &str,
        cluster: &str,
        backups: &[&RedisBackup],
        floor: Option<jiff::Timestamp>,
    ) {
        for (phase, n) in summary::phase_counts(backups) {
            self.phases
                .get_or_create(&PhaseLabels {
                    namespace: namespace.to_owned(),
                    cluster: cluster.to_owned(),
                    phase: phase.to_owned(),
                })
                .set(n);
        }
        let last = summary::newest(backups, BackupPhase::Completed)
            .and_then(summary::finished_at)
            .max(floor)
            .map_or(0, |t| t.as_second());
        self.last_success
            .get_or_create(&ClusterLabels {
                namespace: namespace.to_owned(),
                cluster: cluster.to_owned(),
            })
            .set(last);
    }
}
