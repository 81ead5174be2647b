//! AddProcessGroups (reference §4 step 9, §1.5): for each class, adds
//! `desired − current non-removed` groups with random IDs `[<prefix>-]<class>-<n>`,
//! n in 1..=99 999, never reusing an ID in the status (removed ones included), one the spec
//! removes, or one excluded by locality in the database. Writes the status when it added.

use std::collections::BTreeSet;

use futures::future::BoxFuture;
use jiff::Timestamp;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, step_error};
use crate::crd::{
    FoundationDBCluster, MAX_PROCESS_GROUP_ID_NUM, ProcessGroupId, ProcessGroupStatus,
};

step_error!(AddProcessGroupsError, "adding process groups");

/// The step.
pub struct AddProcessGroups;

/// The groups to add to `groups` (see the module docs); `rng` draws the numbers.
pub fn new_groups(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    excluded: &BTreeSet<ProcessGroupId>,
    rng: &mut fastrand::Rng,
    now: Timestamp,
) -> Vec<ProcessGroupStatus> {
    let mut used: BTreeSet<ProcessGroupId> =
        groups.iter().map(|g| g.process_group_id.clone()).collect();
    let mut added = Vec::new();
    for (class, want) in cluster.process_counts_with_defaults().map() {
        let have = groups
            .iter()
            .filter(|g| g.process_class == class && !g.is_marked_for_removal())
            .count() as i64;
        for _ in have..want.max(0) {
            let id = loop {
                let id = cluster.process_group_id(&class, rng.u32(1..=MAX_PROCESS_GROUP_ID_NUM));
                if !used.contains(&id) && cluster.new_process_group_id_allowed(&id, excluded) {
                    break id;
                }
            };
            used.insert(id.clone());
            added.push(ProcessGroupStatus::new(id, class.clone(), now));
        }
    }
    added
}

impl AddProcessGroups {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, AddProcessGroupsError> {
        let excluded: BTreeSet<ProcessGroupId> = pass
            .db
            .as_ref()
            .map(|db| {
                db.excluded_localities()
                    .into_iter()
                    .map(ProcessGroupId::new)
                    .collect()
            })
            .unwrap_or_default();
        let now = pass.now;
        let groups = pass.status().process_groups.clone();
        let added = new_groups(
            &pass.cluster,
            &groups,
            &excluded,
            &mut fastrand::Rng::new(),
            now,
        );
        if added.is_empty() {
            return Ok(Flow::Continue);
        }
        tracing::info!(cluster = %pass.name(), added = ?added.iter().map(|g| g.process_group_id.to_string()).collect::<Vec<_>>(), "adding process groups");
        let status = pass.status();
        status.process_groups.extend(added);
        status
            .process_groups
            .sort_by(|a, b| a.process_group_id.cmp(&b.process_group_id));
        pass.write_status().await?;
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for AddProcessGroups {
    fn name(&self) -> &'static str {
        "add_process_groups"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{FoundationDBClusterSpec, ProcessClass};

    fn cluster(prefix: &str) -> FoundationDBCluster {
        FoundationDBCluster::new(
            "c",
            FoundationDBClusterSpec {
                version: "7.1.57".into(),
                process_group_id_prefix: prefix.into(),
                ..FoundationDBClusterSpec::default()
            },
        )
    }

    fn counts(groups: &[ProcessGroupStatus], class: &str) -> usize {
        groups
            .iter()
            .filter(|g| g.process_class.as_str() == class)
            .count()
    }

    #[test]
    fn an_empty_double_cluster_gets_3_storage_4_log_9_stateless() {
        let c = cluster("");
        let added = new_groups(
            &c,
            &[],
            &BTreeSet::new(),
            &mut fastrand::Rng::with_seed(1),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(
            (
                counts(&added, "storage"),
                counts(&added, "log"),
                counts(&added, "stateless")
            ),
            (3, 4, 9)
        );
        let ids: BTreeSet<_> = added.iter().map(|g| g.process_group_id.clone()).collect();
        assert_eq!(ids.len(), 16, "IDs are unique");
        for g in &added {
            assert!(g.has_condition("MissingPod") && g.has_condition("MissingProcesses"));
            assert_eq!(g.has_condition("MissingPVC"), g.process_class.is_stateful());
        }
        // A second pass adds nothing: the IDs are stable.
        let again = new_groups(
            &c,
            &added,
            &BTreeSet::new(),
            &mut fastrand::Rng::with_seed(2),
            Timestamp::UNIX_EPOCH,
        );
        assert!(again.is_empty());
    }

    #[test]
    fn removed_groups_are_replaced_and_their_ids_never_reused() {
        let c = cluster("pfx");
        let mut groups = new_groups(
            &c,
            &[],
            &BTreeSet::new(),
            &mut fastrand::Rng::with_seed(1),
            Timestamp::UNIX_EPOCH,
        );
        let victim = groups
            .iter_mut()
            .find(|g| g.process_class.as_str() == "storage")
            .unwrap();
        victim.mark_for_removal(Timestamp::UNIX_EPOCH);
        let victim = victim.process_group_id.clone();
        let added = new_groups(
            &c,
            &groups,
            &BTreeSet::new(),
            &mut fastrand::Rng::with_seed(1),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].process_class, ProcessClass::new("storage"));
        assert_ne!(added[0].process_group_id, victim);
        assert!(
            added[0]
                .process_group_id
                .as_str()
                .starts_with("pfx-storage-")
        );
    }

    #[test]
    fn locality_excluded_ids_are_skipped() {
        let mut c = cluster("");
        c.spec.process_counts.storage = 1;
        c.spec.process_counts.log = -1;
        c.spec.process_counts.stateless = -1;
        // Seed 7's first storage draw, excluded: the next draw is taken instead.
        let first = new_groups(
            &c,
            &[],
            &BTreeSet::new(),
            &mut fastrand::Rng::with_seed(7),
            Timestamp::UNIX_EPOCH,
        );
        let excluded: BTreeSet<_> = [first[0].process_group_id.clone()].into();
        let second = new_groups(
            &c,
            &[],
            &excluded,
            &mut fastrand::Rng::with_seed(7),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(second.len(), 1);
        assert_ne!(second[0].process_group_id, first[0].process_group_id);
    }
}
