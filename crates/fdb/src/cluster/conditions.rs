//! Kubernetes-style `status.conditions` on a FoundationDBCluster (a Flotilla addition:
//! upstream reports only its own fields), so `kubectl wait --for=condition=Ready` and generic
//! tooling work.
//!
//! Contract: [`desired`] is pure and computes, from the status UpdateStatus just built:
//! - `Ready`: `True` (`Reconciled`) when `generations.reconciled` equals the cluster's
//!   generation; otherwise `False` with the reason of the first thing still pending, in a
//!   fixed order, and a message listing every pending thing;
//! - `DatabaseAvailable`: `True`/`False` from the database's own availability, `Unknown`
//!   (`NotConfigured`) before `configure new`;
//! - `SpecValid`: `True`, or `False` (`InvalidSpec`) with the problems only the operator can
//!   see (an unsupported version, storage engine, coordinator class…); the controller then
//!   does nothing else until the spec changes.
//!
//! [`apply`] sets them with `kit::conditions::upsert`: the transition time moves only when a
//! status flips, so a pass with nothing new writes nothing.

use jiff::Timestamp;
use kit::conditions::{Desired, Status, upsert};

use crate::crd::{FoundationDBCluster, FoundationDBClusterStatus};

/// Condition type: the spec is rolled out.
pub const READY: &str = "Ready";
/// Condition type: the database reports itself available.
pub const DATABASE_AVAILABLE: &str = "DatabaseAvailable";
/// Condition type: the operator can work with the spec.
pub const SPEC_VALID: &str = "SpecValid";

/// The three conditions (see the module docs); `problem` is the spec's validation error.
pub fn desired(
    cluster: &FoundationDBCluster,
    status: &FoundationDBClusterStatus,
    problem: Option<&str>,
) -> Vec<Desired> {
    let generation = cluster.metadata.generation;
    let spec_valid = match problem {
        None => Desired::new(SPEC_VALID, true, "Valid", "the spec is valid"),
        Some(p) => Desired::new(SPEC_VALID, false, "InvalidSpec", p),
    };
    let available = if !status.configured {
        Desired::new(
            DATABASE_AVAILABLE,
            Status::Unknown,
            "NotConfigured",
            "the database has not been configured yet",
        )
    } else if status.health.available {
        Desired::new(
            DATABASE_AVAILABLE,
            true,
            "Available",
            "the database is available",
        )
    } else {
        Desired::new(
            DATABASE_AVAILABLE,
            false,
            "Unavailable",
            "the database does not report itself available",
        )
    };
    vec![
        ready(cluster, status, problem).observed(generation),
        available.observed(generation),
        spec_valid.observed(generation),
    ]
}

fn ready(
    cluster: &FoundationDBCluster,
    status: &FoundationDBClusterStatus,
    problem: Option<&str>,
) -> Desired {
    if let Some(p) = problem {
        return Desired::new(READY, false, "InvalidSpec", p);
    }
    let generation = cluster.metadata.generation.unwrap_or(0);
    let g = &status.generations;
    if status.configured && g.reconciled == generation {
        return Desired::new(READY, true, "Reconciled", "the spec is rolled out");
    }
    let unhealthy = status
        .process_groups
        .iter()
        .filter(|p| !p.is_marked_for_removal() && !p.process_group_conditions.is_empty())
        .count();
    let unhealthy = format!("{unhealthy} process groups have conditions");
    let pending: Vec<(&str, &str)> = [
        (
            !status.configured,
            "NotConfigured",
            "the database is not configured yet",
        ),
        (
            g.database_unavailable == generation,
            "DatabaseUnavailable",
            "the database is unavailable",
        ),
        (
            g.needs_configuration_change == generation,
            "ConfigurationChangePending",
            "the database configuration differs from the spec",
        ),
        (
            g.needs_coordinator_change == generation,
            "CoordinatorChangePending",
            "the coordinators must change",
        ),
        (
            g.needs_grow == generation,
            "ProcessGroupsMissing",
            "process groups are being added",
        ),
        (
            g.needs_shrink == generation,
            "ProcessGroupsBeingRemoved",
            "process groups are being removed",
        ),
        (
            g.has_unhealthy_process == generation,
            "ProcessGroupsUnhealthy",
            unhealthy.as_str(),
        ),
        (
            g.needs_monitor_conf_update == generation,
            "ConfigMapOutdated",
            "the config map is out of date",
        ),
        (
            g.needs_service_update == generation,
            "ServicesOutdated",
            "the services are out of date",
        ),
        (
            g.needs_lock_configuration_changes == generation,
            "LockConfigurationPending",
            "the lock deny list is not applied yet",
        ),
    ]
    .into_iter()
    .filter(|(pending, _, _)| *pending)
    .map(|(_, reason, text)| (reason, text))
    .collect();
    match pending.first() {
        Some((reason, _)) => {
            let texts: Vec<&str> = pending.iter().map(|(_, t)| *t).collect();
            Desired::new(READY, false, *reason, texts.join("; "))
        }
        None => Desired::new(READY, false, "Reconciling", "the spec is being rolled out"),
    }
}

/// Sets the conditions on `status`.
pub fn apply(
    cluster: &FoundationDBCluster,
    status: &mut FoundationDBClusterStatus,
    problem: Option<&str>,
    now: Timestamp,
) {
    for d in desired(cluster, status, problem) {
        upsert(&mut status.conditions, d, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::FoundationDBClusterSpec;

    fn cluster() -> FoundationDBCluster {
        let mut c = FoundationDBCluster::new("c", FoundationDBClusterSpec::default());
        c.metadata.generation = Some(3);
        c
    }

    fn find<'a>(d: &'a [Desired], t: &str) -> &'a Desired {
        d.iter().find(|c| c.type_ == t).expect("condition")
    }

    #[test]
    fn ready_names_the_first_pending_thing_and_lists_all() {
        let c = cluster();
        type Change = fn(&mut FoundationDBClusterStatus);
        let cases: [(&str, Change, Status, &str); 5] = [
            ("new", |_| {}, Status::False, "NotConfigured"),
            (
                "reconciled",
                |s| {
                    s.configured = true;
                    s.generations.reconciled = 3;
                },
                Status::True,
                "Reconciled",
            ),
            (
                "an older reconciled generation",
                |s| {
                    s.configured = true;
                    s.generations.reconciled = 2;
                    s.generations.needs_shrink = 3;
                    s.generations.has_unhealthy_process = 3;
                },
                Status::False,
                "ProcessGroupsBeingRemoved",
            ),
            (
                "unavailable comes first",
                |s| {
                    s.configured = true;
                    s.generations.needs_grow = 3;
                    s.generations.database_unavailable = 3;
                },
                Status::False,
                "DatabaseUnavailable",
            ),
            (
                "nothing named yet",
                |s| s.configured = true,
                Status::False,
                "Reconciling",
            ),
        ];
        for (name, change, want, reason) in cases {
            let mut s = FoundationDBClusterStatus::default();
            change(&mut s);
            let d = desired(&c, &s, None);
            let r = find(&d, READY);
            assert_eq!((r.status, r.reason.as_str()), (want, reason), "{name}");
            assert_eq!(r.observed_generation, Some(3), "{name}");
        }
        let mut s = FoundationDBClusterStatus {
            configured: true,
            ..Default::default()
        };
        s.generations.needs_shrink = 3;
        s.generations.has_unhealthy_process = 3;
        let d = desired(&c, &s, None);
        assert_eq!(
            find(&d, READY).message,
            "process groups are being removed; 0 process groups have conditions"
        );
    }

    #[test]
    fn availability_and_spec_validity() {
        let c = cluster();
        let mut s = FoundationDBClusterStatus::default();
        let d = desired(&c, &s, None);
        assert_eq!(find(&d, DATABASE_AVAILABLE).status, Status::Unknown);
        assert_eq!(find(&d, SPEC_VALID).status, Status::True);
        s.configured = true;
        s.health.available = true;
        assert_eq!(
            find(&desired(&c, &s, None), DATABASE_AVAILABLE).status,
            Status::True
        );
        s.health.available = false;
        assert_eq!(
            find(&desired(&c, &s, None), DATABASE_AVAILABLE).reason,
            "Unavailable"
        );
        let d = desired(&c, &s, Some("version: 6.2.30 is not supported"));
        assert_eq!(find(&d, SPEC_VALID).reason, "InvalidSpec");
        assert_eq!(find(&d, READY).reason, "InvalidSpec");
        assert_eq!(find(&d, READY).message, "version: 6.2.30 is not supported");
    }

    #[test]
    fn applying_twice_changes_nothing() {
        let c = cluster();
        let mut s = FoundationDBClusterStatus {
            configured: true,
            ..Default::default()
        };
        apply(&c, &mut s, None, Timestamp::from_second(100).unwrap());
        let first = s.clone();
        apply(&c, &mut s, None, Timestamp::from_second(200).unwrap());
        assert_eq!(s, first);
        s.health.available = true;
        apply(&c, &mut s, None, Timestamp::from_second(300).unwrap());
        let t = s
            .conditions
            .iter()
            .find(|c| c.type_ == DATABASE_AVAILABLE)
            .unwrap();
        assert_eq!(t.last_transition_time.0.as_second(), 300);
    }
}
