//! ChooseRemovals (reference §4 step 19): for each class with more groups than desired
//! (removed ones included) beyond those already removed, keeps `desired` groups spread over
//! as many zones as possible, preferring groups whose processes are in the status, and marks
//! every other group of that class for removal. Writes the status when it marked.

use std::collections::BTreeSet;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::coordinators::{Candidate, choose};
use super::{Pass, step_error};
use crate::crd::{FoundationDBCluster, ProcessGroupId, ProcessGroupStatus};

step_error!(ChooseRemovalsError, "choosing removals");

/// The step.
pub struct ChooseRemovals;

/// The groups to mark for removal; `reporting` holds the IDs with processes in the status.
pub fn removals(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    reporting: &BTreeSet<String>,
) -> Vec<ProcessGroupId> {
    let mut marked = Vec::new();
    for (class, want) in cluster.process_counts_with_defaults().map() {
        let want = want.max(0) as usize;
        let of_class: Vec<&ProcessGroupStatus> =
            groups.iter().filter(|g| g.process_class == class).collect();
        let removed = of_class
            .iter()
            .filter(|g| g.is_marked_for_removal())
            .count();
        if of_class.len().saturating_sub(want) <= removed {
            continue;
        }
        let candidates: Vec<Candidate> = of_class
            .iter()
            .filter(|g| !g.is_marked_for_removal())
            .map(|g| Candidate {
                id: g.process_group_id.to_string(),
                address: String::new(),
                zone: if g.fault_domain.is_empty() {
                    g.process_group_id.to_string()
                } else {
                    g.fault_domain.clone()
                },
                priority: i64::from(reporting.contains(g.process_group_id.as_str())),
            })
            .collect();
        let keep: BTreeSet<String> = choose(&candidates, want, usize::MAX)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.id)
            .collect();
        marked.extend(
            candidates
                .iter()
                .filter(|c| !keep.contains(&c.id))
                .map(|c| ProcessGroupId::new(c.id.as_str())),
        );
    }
    marked
}

impl ChooseRemovals {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, ChooseRemovalsError> {
        let reporting: BTreeSet<String> = pass
            .db
            .as_ref()
            .map(|db| {
                db.cluster
                    .processes
                    .values()
                    .filter_map(|p| p.instance_id().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let groups = pass.status().process_groups.clone();
        let marked = removals(&pass.cluster, &groups, &reporting);
        if marked.is_empty() {
            return Ok(Flow::Continue);
        }
        tracing::info!(cluster = %pass.name(), groups = ?marked.iter().map(ToString::to_string).collect::<Vec<_>>(), "marking process groups for removal");
        let now = pass.now;
        for g in &mut pass.status().process_groups {
            if marked.contains(&g.process_group_id) {
                g.mark_for_removal(now);
            }
        }
        pass.write_status().await?;
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for ChooseRemovals {
    fn name(&self) -> &'static str {
        "choose_removals"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{FoundationDBClusterSpec, ProcessClass};
    use jiff::Timestamp;

    fn cluster(storage: i64) -> FoundationDBCluster {
        let mut c = FoundationDBCluster::new(
            "c",
            FoundationDBClusterSpec {
                version: "7.1.57".into(),
                ..Default::default()
            },
        );
        c.spec.process_counts.storage = storage;
        c.spec.process_counts.log = -1;
        c.spec.process_counts.stateless = -1;
        c
    }

    fn g(id: &str, zone: &str, removed: bool) -> ProcessGroupStatus {
        let mut g = ProcessGroupStatus::new(
            ProcessGroupId::new(id),
            ProcessClass::new("storage"),
            Timestamp::UNIX_EPOCH,
        );
        g.fault_domain = zone.into();
        if removed {
            g.mark_for_removal(Timestamp::UNIX_EPOCH);
        }
        g
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn removal_table() {
        let all: BTreeSet<String> = [
            "storage-1",
            "storage-2",
            "storage-3",
            "storage-4",
            "storage-5",
        ]
        .map(String::from)
        .into();
        let cases: Vec<(
            &str,
            i64,
            Vec<ProcessGroupStatus>,
            BTreeSet<String>,
            Vec<&str>,
        )> = vec![
            (
                "nothing to shrink",
                3,
                vec![
                    g("storage-1", "a", false),
                    g("storage-2", "b", false),
                    g("storage-3", "c", false),
                ],
                all.clone(),
                vec![],
            ),
            (
                "keep zone spread",
                2,
                vec![
                    g("storage-1", "a", false),
                    g("storage-2", "a", false),
                    g("storage-3", "b", false),
                ],
                all.clone(),
                vec!["storage-2"],
            ),
            (
                "already removed counts",
                2,
                vec![
                    g("storage-1", "a", false),
                    g("storage-2", "b", false),
                    g("storage-3", "c", true),
                ],
                all.clone(),
                vec![],
            ),
            (
                "prefer groups that report",
                1,
                vec![g("storage-1", "a", false), g("storage-2", "b", false)],
                ["storage-2".to_string()].into(),
                vec!["storage-1"],
            ),
        ];
        for (name, storage, groups, reporting, want) in cases {
            let got: Vec<String> = removals(&cluster(storage), &groups, &reporting)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
