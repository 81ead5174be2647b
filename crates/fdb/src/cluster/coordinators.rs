//! Coordinator selection and validity (reference §3.2), as pure functions.
//!
//! Contract of [`choose`]: candidates are sorted by priority (descending) then ID; a sweep
//! takes every candidate whose zone has fewer than the current per-zone limit; when a sweep
//! takes nobody the limit is raised unless it reached the hard limit (single region: one
//! coordinator per zone), and then selection fails with upstream's message.
//!
//! Contract of [`valid`]: the connection string's coordinators are valid when each is the
//! address of a process in the status that is not excluded and not being removed, they sit
//! in as many distinct zones as the desired count, and each process's class may coordinate.

use std::collections::{BTreeMap, BTreeSet};

use crate::admin::FdbStatus;
use crate::crd::{ConnectionString, FoundationDBCluster, ProcessClass};

/// One process that could coordinate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The process-group ID (`instance_id` locality).
    pub id: String,
    /// Its coordinator address (`ip:port`).
    pub address: String,
    /// Its zone.
    pub zone: String,
    /// Higher is preferred.
    pub priority: i64,
}

/// Why no selection was possible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Could only select {selected} processes, but {required} are required")]
pub struct SelectionError {
    /// How many could be chosen.
    pub selected: usize,
    /// How many were needed.
    pub required: usize,
}

/// Chooses `count` candidates spread over zones, at most `hard_limit` per zone.
pub fn choose(
    candidates: &[Candidate],
    count: usize,
    hard_limit: usize,
) -> Result<Vec<Candidate>, SelectionError> {
    let mut sorted = candidates.to_vec();
    sorted.sort_by(|a, b| {
        (b.priority.cmp(&a.priority))
            .then(a.id.cmp(&b.id))
            .then(a.address.cmp(&b.address))
    });
    sorted.dedup_by(|a, b| a.id == b.id);
    let mut chosen: Vec<Candidate> = Vec::new();
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    let mut limit = 1;
    while chosen.len() < count {
        let mut took = false;
        for c in &sorted {
            if chosen.len() == count {
                break;
            }
            if chosen.iter().any(|x| x.id == c.id) {
                continue;
            }
            let n = per_zone.entry(c.zone.clone()).or_default();
            if *n < limit {
                *n += 1;
                chosen.push(c.clone());
                took = true;
            }
        }
        if !took {
            if limit >= hard_limit {
                return Err(SelectionError {
                    selected: chosen.len(),
                    required: count,
                });
            }
            limit += 1;
        }
    }
    Ok(chosen)
}

/// The candidates among the status's processes: not excluded, class eligible, with a zone,
/// not in `removing`. The address is the process's address (non-TLS).
pub fn candidates_from_status(
    cluster: &FoundationDBCluster,
    status: &FdbStatus,
    removing: &BTreeSet<String>,
) -> Vec<Candidate> {
    status
        .cluster
        .processes
        .values()
        .filter(|p| !p.excluded && !p.under_maintenance)
        .filter_map(|p| {
            let class = ProcessClass::new(p.class_type.as_str());
            let id = p.instance_id()?.to_owned();
            let zone = p.locality.get("zoneid")?.clone();
            (cluster.is_eligible_as_coordinator(&class)
                && !zone.is_empty()
                && !removing.contains(&id))
            .then(|| Candidate {
                priority: cluster.coordinator_priority(&class),
                id,
                address: p.address.clone(),
                zone,
            })
        })
        .collect()
}

/// Whether the current coordinators are valid (see the module docs).
pub fn valid(
    cluster: &FoundationDBCluster,
    connection_string: &str,
    status: &FdbStatus,
    removing: &BTreeSet<String>,
) -> bool {
    let Ok(cs) = ConnectionString::parse(connection_string) else {
        return false;
    };
    let mut zones = BTreeSet::new();
    for coordinator in &cs.coordinators {
        let Some(p) = status
            .cluster
            .processes
            .values()
            .find(|p| &p.address == coordinator)
        else {
            return false;
        };
        let class = ProcessClass::new(p.class_type.as_str());
        let id = p.instance_id().unwrap_or_default();
        if p.excluded || removing.contains(id) || !cluster.is_eligible_as_coordinator(&class) {
            return false;
        }
        zones.insert(p.locality.get("zoneid").cloned().unwrap_or_default());
    }
    zones.len() == cluster.desired_coordinator_count()
        && cs.coordinators.len() == cluster.desired_coordinator_count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, zone: &str, priority: i64) -> Candidate {
        Candidate {
            id: id.into(),
            address: format!("{id}:4501"),
            zone: zone.into(),
            priority,
        }
    }

    fn ids(r: &[Candidate]) -> Vec<&str> {
        r.iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn selection_table() {
        let cases: Vec<(
            &str,
            Vec<Candidate>,
            usize,
            usize,
            Result<Vec<&str>, SelectionError>,
        )> = vec![
            (
                "logs are preferred over storage",
                vec![
                    c("storage-1", "a", 0),
                    c("log-1", "b", 1),
                    c("storage-2", "c", 0),
                    c("log-2", "d", 1),
                ],
                3,
                1,
                Ok(vec!["log-1", "log-2", "storage-1"]),
            ),
            (
                "at most one per zone",
                vec![
                    c("log-1", "a", 1),
                    c("log-2", "a", 1),
                    c("storage-1", "b", 0),
                    c("storage-2", "c", 0),
                ],
                3,
                1,
                Ok(vec!["log-1", "storage-1", "storage-2"]),
            ),
            (
                "too few zones fails like upstream",
                vec![
                    c("log-1", "a", 1),
                    c("log-2", "a", 1),
                    c("storage-1", "b", 0),
                ],
                3,
                1,
                Err(SelectionError {
                    selected: 2,
                    required: 3,
                }),
            ),
            (
                "a higher hard limit fills up zones",
                vec![
                    c("log-1", "a", 1),
                    c("log-2", "a", 1),
                    c("storage-1", "b", 0),
                ],
                3,
                2,
                Ok(vec!["log-1", "storage-1", "log-2"]),
            ),
            (
                "ties break on the ID",
                vec![
                    c("storage-9", "a", 0),
                    c("storage-10", "b", 0),
                    c("storage-2", "c", 0),
                ],
                1,
                1,
                Ok(vec!["storage-10"]),
            ),
        ];
        for (name, candidates, count, hard, want) in cases {
            let got = choose(&candidates, count, hard);
            assert_eq!(
                got.as_ref().map(|r| ids(r)).map_err(Clone::clone),
                want,
                "{name}"
            );
        }
    }
}
