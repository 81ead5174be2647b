//! Whether the database has the fault tolerance its redundancy mode promises, read from
//! `status json` (upstream's `HasDesiredFaultToleranceFromStatus`, used before replacing a
//! process group that never got an address).
//!
//! Contract: [`has_desired_fault_tolerance`] is pure and true only when the database is
//! available, every data-distribution team tracker has at least R replicas left (R = the
//! mode's fault tolerance + 1), every current log set tolerates R − 1 failures with R
//! replicas, and the coordinators are all reachable with a quorum. Anything it cannot read
//! (no team tracker) counts as not having it.

use crate::admin::FdbStatus;
use crate::crd::FoundationDBCluster;

/// See the module docs.
pub fn has_desired_fault_tolerance(status: &FdbStatus, cluster: &FoundationDBCluster) -> bool {
    let replicas = cluster.desired_fault_tolerance() + 1;
    let coordinators = &status.client.coordinators;
    status.client.database_status.available
        && !status.cluster.data.team_trackers.is_empty()
        && status
            .cluster
            .data
            .team_trackers
            .iter()
            .all(|t| t.state.min_replicas_remaining >= replicas)
        && status
            .cluster
            .logs
            .iter()
            .filter(|l| l.current)
            .all(|l| l.log_replication_factor == replicas && l.log_fault_tolerance + 1 == replicas)
        && coordinators.quorum_reachable
        && coordinators.coordinators.iter().all(|c| c.reachable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::status::{Coordinator, DataState, LogInfo, TeamTracker};
    use crate::crd::FoundationDBClusterSpec;

    fn cluster(mode: &str) -> FoundationDBCluster {
        let mut c = FoundationDBCluster::new("c", FoundationDBClusterSpec::default());
        c.spec.database_configuration.redundancy_mode = mode.into();
        c
    }

    fn healthy() -> FdbStatus {
        let mut s = FdbStatus::default();
        s.client.database_status.available = true;
        s.client.coordinators.quorum_reachable = true;
        s.client.coordinators.coordinators = vec![Coordinator {
            address: "127.0.0.1:4501".into(),
            reachable: true,
        }];
        s.cluster.data.team_trackers = vec![TeamTracker {
            primary: true,
            state: DataState {
                min_replicas_remaining: 2,
                ..DataState::default()
            },
            unhealthy_servers: Some(0),
        }];
        s.cluster.logs = vec![LogInfo {
            current: true,
            log_fault_tolerance: 1,
            log_replication_factor: 2,
            ..LogInfo::default()
        }];
        s
    }

    #[test]
    fn each_part_of_the_check() {
        type Break = fn(&mut FdbStatus);
        let cases: [(&str, Break, bool); 7] = [
            ("healthy double", |_| {}, true),
            (
                "unavailable",
                |s| s.client.database_status.available = false,
                false,
            ),
            (
                "a team lost a replica",
                |s| s.cluster.data.team_trackers[0].state.min_replicas_remaining = 1,
                false,
            ),
            (
                "no team tracker",
                |s| s.cluster.data.team_trackers.clear(),
                false,
            ),
            (
                "the log set lost a replica",
                |s| s.cluster.logs[0].log_fault_tolerance = 0,
                false,
            ),
            (
                "an old log generation does not count",
                |s| {
                    s.cluster.logs.push(LogInfo {
                        current: false,
                        ..LogInfo::default()
                    })
                },
                true,
            ),
            (
                "a coordinator unreachable",
                |s| s.client.coordinators.coordinators[0].reachable = false,
                false,
            ),
        ];
        for (name, change, want) in cases {
            let mut s = healthy();
            change(&mut s);
            assert_eq!(
                has_desired_fault_tolerance(&s, &cluster("double")),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn replicas_follow_the_redundancy_mode() {
        let s = healthy();
        assert!(
            has_desired_fault_tolerance(&s, &cluster("")),
            "unset is double"
        );
        assert!(!has_desired_fault_tolerance(&s, &cluster("triple")));
        let mut single = healthy();
        single.cluster.logs[0].log_fault_tolerance = 0;
        single.cluster.logs[0].log_replication_factor = 1;
        assert!(has_desired_fault_tolerance(&single, &cluster("single")));
    }
}
