//! The agent steps: `stamp_generation`, `unsuspend`, `ensure_main`, `ensure_sub_agents`.
//!
//! Contract:
//! - Every owned pod carries the set's generation stamp (vk-cocoon echoes it with its
//!   lifecycle state; that is how a hibernation is tied to the current round).
//! - Unsuspend removes the hibernate key (deletes it; never writes "false") except on pods a
//!   CocoonHibernation holds.
//! - The main comes first: drifted → deleted and rebuilt; missing → built (restoring from
//!   `:hibernate` when a CocoonHibernation says the VM is hibernated and the tag exists; a
//!   registry error aborts the create); not Ready → phase Pending, look again in 5 s.
//! - Sub-agents by slot 1..replicas: missing ones are created (at most 8 at once), drifted
//!   ones deleted, failed ones rebuilt with back-off 0/1/5/30 s and left in dead-letter after
//!   4 rebuilds (a spec change gives a dead-lettered slot a fresh budget), slots above
//!   replicas deleted. A slot whose rebuilt pod stays healthy for [`HISTORY_RESET`] gets a
//!   fresh budget too (upstream counts rebuilds for the set's whole life).

use std::time::Duration;

use futures::TryStreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kit::reconcile::Outcome;
use kube::ResourceExt;

use super::pass::{Created, Pass};
use super::{AGAIN, Error, POLL, Step};
use crate::crd::{CocoonSet, CocoonSetPhase};
use crate::metrics::CocoonMetrics;
use crate::names;
use crate::pods::build;
use crate::pods::drift::agent_drifted;
use crate::pods::rebuild::{MAX_REBUILDS, RebuildEntry, RebuildHistory};
use crate::pods::state;

/// A rebuilt sub-agent healthy this long since its last rebuild starts a fresh budget.
pub const HISTORY_RESET: Duration = Duration::from_secs(600);
/// Sub-agent pods created at once.
const CREATE_CONCURRENCY: usize = 8;

/// Queues the set's generation stamp for every owned pod whose stamp differs: it rides along
/// with the pod's next annotation patch of this pass (the hibernate flag of a suspend or
/// unsuspend), or goes alone when the pass ends ([`Pass::flush_stamps`]).
pub fn stamp_generation(pass: &Pass<'_>) {
    let generation = pass.generation().to_string();
    for pod in pass
        .pods
        .all
        .iter()
        .filter(|p| state::annotation(p, names::ANN_GENERATION) != Some(generation.as_str()))
    {
        pass.stamp_later(&pod.name_any(), generation.clone());
    }
}

/// Removes the hibernate key from every pod that carries it and no CocoonHibernation holds.
pub async fn unsuspend(pass: &mut Pass<'_>) -> Result<(), Error> {
    let flagged: Vec<String> = pass
        .pods
        .all
        .iter()
        .filter(|p| state::hibernate_requested(p))
        .map(|p| p.name_any())
        .collect();
    if flagged.is_empty() {
        return Ok(());
    }
    // The set's pods are resumed at once (each patch is independent and idempotent).
    let clear = [(names::ANN_HIBERNATE, None)];
    let resume = flagged.iter().filter(|p| !pass.held_by_cr(p));
    futures::future::try_join_all(resume.map(|pod| pass.annotate_pod(pod, &clear))).await?;
    Ok(())
}

/// Builds, rebuilds or waits for the main agent; `Some` ends the pass.
pub async fn ensure_main(pass: &mut Pass<'_>) -> Result<Step, Error> {
    if let Some(main) = &pass.pods.main {
        if agent_drifted(&pass.set, main) {
            pass.delete_pod(&main.name_any()).await?;
            return Ok(Some(Outcome::RequeueAfter(AGAIN)));
        }
        if state::is_ready(main) {
            super::failure::note_recovery(pass).await;
            return Ok(None);
        }
        pass.write_status(Some(CocoonSetPhase::Pending)).await?;
        return Ok(Some(Outcome::RequeueAfter(POLL)));
    }
    let mut pod = build::main_pod(&pass.set);
    if restore_wanted(pass, &pod).await? {
        build::mark_restore(&mut pod);
    }
    let outcome = match pass.create_pod(&pod).await? {
        Created::Yes => Outcome::RequeueAfter(AGAIN),
        // The old main is still terminating.
        Created::AlreadyExists => Outcome::RequeueAfter(POLL),
    };
    pass.write_status(Some(CocoonSetPhase::Pending)).await?;
    Ok(Some(outcome))
}

/// Whether a pod about to be built must restore from `:hibernate`: a CocoonHibernation says
/// its VM is hibernated (or waking) and the tag exists. Registry errors fail closed.
pub async fn restore_wanted(pass: &mut Pass<'_>, pod: &Pod) -> Result<bool, Error> {
    if !pass.restore_intent(&pod.name_any()) {
        return Ok(false);
    }
    let vm = state::vm_name(pod).unwrap_or_default().to_owned();
    pass.has_tag(&vm, names::TAG_HIBERNATE).await
}

/// Converges the sub-agent slots. Returns whether anything was written and, when a failed
/// slot waits out its back-off, how long until it may be rebuilt.
pub async fn ensure_sub_agents(pass: &mut Pass<'_>) -> Result<(bool, Option<Duration>), Error> {
    let replicas = pass.set.spec.agent.replicas();
    let mut history = RebuildHistory::parse(pass.set_annotation(names::ANN_REBUILD_HISTORY));
    let before = history.to_annotation(replicas);
    let now = Timestamp::now();
    let (mut changed, mut wait) = (false, None::<Duration>);
    let mut missing = Vec::new();
    for slot in 1..=replicas {
        let Some(pod) = pass.pods.subs.get(&slot).cloned() else {
            missing.push(slot);
            continue;
        };
        match slot_action(&pass.set, &history, slot, &pod, now) {
            SlotAction::Keep => {}
            SlotAction::ResetBudget => {
                history.0.remove(&slot);
            }
            SlotAction::Wait(d) => wait = Some(wait.map_or(d, |w| w.min(d))),
            SlotAction::DeadLetter => dead_letter(pass, slot, &pod).await?,
            SlotAction::Delete { fresh_budget } => {
                if fresh_budget {
                    history.0.remove(&slot);
                    save_history(pass, &history, replicas).await?;
                }
                pass.delete_pod(&pod.name_any()).await?;
                changed = true;
            }
            SlotAction::Rebuild(count) => {
                history.0.insert(
                    slot,
                    RebuildEntry {
                        count,
                        last_deleted: now,
                    },
                );
                // Recorded before the delete, so a crash in between cannot grant a free rebuild.
                save_history(pass, &history, replicas).await?;
                rebuild(pass, slot, &pod, count).await?;
                changed = true;
            }
        }
    }
    if history.to_annotation(replicas) != before {
        save_history(pass, &history, replicas).await?;
    }
    changed |= create_missing(pass, &missing).await?;
    changed |= delete_extras(pass, replicas).await?;
    Ok((changed, wait))
}

/// What to do with an existing sub-agent pod.
#[derive(Debug, PartialEq, Eq)]
enum SlotAction {
    Keep,
    ResetBudget,
    Wait(Duration),
    DeadLetter,
    Delete { fresh_budget: bool },
    Rebuild(u32),
}

fn slot_action(
    set: &CocoonSet,
    history: &RebuildHistory,
    slot: i32,
    pod: &Pod,
    now: Timestamp,
) -> SlotAction {
    let drifted = agent_drifted(set, pod);
    if state::flag(pod, names::ANN_DEAD_LETTER) {
        return if drifted {
            SlotAction::Delete { fresh_budget: true }
        } else {
            SlotAction::Keep
        };
    }
    let entry = history.0.get(&slot);
    if state::is_terminal(pod) {
        let count = entry.map_or(0, |e| e.count);
        if count >= MAX_REBUILDS {
            return SlotAction::DeadLetter;
        }
        let since = entry.map(|e| elapsed(e.last_deleted, now));
        let backoff = RebuildHistory::backoff(count);
        return match since {
            Some(since) if since < backoff => SlotAction::Wait(backoff - since),
            _ => SlotAction::Rebuild(count + 1),
        };
    }
    if drifted {
        return SlotAction::Delete {
            fresh_budget: false,
        };
    }
    match entry {
        Some(e) if state::is_ready(pod) && elapsed(e.last_deleted, now) >= HISTORY_RESET => {
            SlotAction::ResetBudget
        }
        _ => SlotAction::Keep,
    }
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

async fn save_history(
    pass: &Pass<'_>,
    history: &RebuildHistory,
    replicas: i32,
) -> Result<(), Error> {
    let value = history.to_annotation(replicas);
    pass.annotate_set(&[(names::ANN_REBUILD_HISTORY, Some(&value))])
        .await
        .map(|_| ())
}

async fn dead_letter(pass: &Pass<'_>, slot: i32, pod: &Pod) -> Result<(), Error> {
    let name = pod.name_any();
    pass.annotate_pod(&name, &[(names::ANN_DEAD_LETTER, Some("true"))])
        .await?;
    let labels = CocoonMetrics::set(pass.namespace(), &pass.name());
    pass.ctx
        .metrics
        .subagent_dead_letter
        .get_or_create(&labels)
        .inc();
    let note =
        format!("slot {slot} exhausted {MAX_REBUILDS} rebuilds; pod {name} left in dead-letter");
    pass.event(true, "SubAgentDeadLetter", note).await;
    Ok(())
}

async fn rebuild(pass: &Pass<'_>, slot: i32, pod: &Pod, attempt: u32) -> Result<(), Error> {
    pass.delete_pod(&pod.name_any()).await?;
    let labels = CocoonMetrics::set(pass.namespace(), &pass.name());
    pass.ctx
        .metrics
        .subagent_rebuild
        .get_or_create(&labels)
        .inc();
    let note = format!("slot {slot} attempt {attempt}/{MAX_REBUILDS}");
    pass.event(false, "SubAgentRebuilding", note).await;
    Ok(())
}

async fn create_missing(pass: &mut Pass<'_>, slots: &[i32]) -> Result<bool, Error> {
    if slots.is_empty() {
        return Ok(false);
    }
    let main = pass.pods.main.as_ref();
    let main_node = main.and_then(state::node_name).map(str::to_owned);
    let main_vm = main
        .and_then(state::vm_name)
        .map_or_else(|| pass.main_vm(), str::to_owned);
    let mut pods = Vec::with_capacity(slots.len());
    for &slot in slots {
        let mut pod = build::sub_agent_pod(&pass.set, slot, &main_vm, main_node.as_deref());
        if restore_wanted(pass, &pod).await? {
            build::mark_restore(&mut pod);
        }
        pods.push(pod);
    }
    let pass = &*pass;
    futures::stream::iter(pods.iter().map(Ok))
        .try_for_each_concurrent(CREATE_CONCURRENCY, |pod| async move {
            pass.create_pod(pod).await.map(|_| ())
        })
        .await?;
    Ok(true)
}

async fn delete_extras(pass: &Pass<'_>, replicas: i32) -> Result<bool, Error> {
    let extras: Vec<String> = pass
        .pods
        .subs
        .range(replicas + 1..)
        .map(|(_, p)| p.name_any())
        .collect();
    for pod in &extras {
        pass.delete_pod(pod).await?;
    }
    Ok(!extras.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(annotations: &str, phase: &str) -> Pod {
        let set = crate::pods::build::tests::set("agent: {image: img, replicas: 1}");
        let mut pod = build::sub_agent_pod(&set, 1, "vk-ns-demo-0", None);
        let extra: std::collections::BTreeMap<String, String> =
            serde_yaml::from_str(annotations).expect("annotations");
        pod.metadata
            .annotations
            .get_or_insert_default()
            .extend(extra);
        let status = format!("{{phase: {phase}, conditions: [{{type: Ready, status: \"True\"}}]}}");
        pod.status = Some(serde_yaml::from_str(&status).expect("status"));
        pod
    }

    fn history(count: u32, secs_ago: i64, now: Timestamp) -> RebuildHistory {
        let last_deleted = now - jiff::SignedDuration::from_secs(secs_ago);
        RebuildHistory(
            [(
                1,
                RebuildEntry {
                    count,
                    last_deleted,
                },
            )]
            .into(),
        )
    }

    #[test]
    fn failed_sub_agents_back_off_then_dead_letter() {
        let set = crate::pods::build::tests::set("agent: {image: img, replicas: 1}");
        let now = Timestamp::now();
        let failed = sub("{}", "Failed");
        let none = RebuildHistory::default();
        assert_eq!(
            slot_action(&set, &none, 1, &failed, now),
            SlotAction::Rebuild(1)
        );
        // After the first rebuild, 1 s; after the second, 5 s; then 30 s.
        assert_eq!(
            slot_action(&set, &history(1, 0, now), 1, &failed, now),
            SlotAction::Wait(Duration::from_secs(1))
        );
        assert_eq!(
            slot_action(&set, &history(2, 2, now), 1, &failed, now),
            SlotAction::Wait(Duration::from_secs(3))
        );
        assert_eq!(
            slot_action(&set, &history(3, 31, now), 1, &failed, now),
            SlotAction::Rebuild(4)
        );
        assert_eq!(
            slot_action(&set, &history(4, 600, now), 1, &failed, now),
            SlotAction::DeadLetter
        );
        let lifecycle = sub("{vm.cocoonstack.io/lifecycle-state: failed}", "Running");
        assert_eq!(
            slot_action(&set, &none, 1, &lifecycle, now),
            SlotAction::Rebuild(1)
        );
    }

    #[test]
    fn dead_letter_stays_until_the_spec_changes() {
        let set = crate::pods::build::tests::set("agent: {image: img, replicas: 1}");
        let now = Timestamp::now();
        let dead = sub("{cocoonset.cocoonstack.io/dead-letter: \"true\"}", "Failed");
        assert_eq!(
            slot_action(&set, &history(4, 5, now), 1, &dead, now),
            SlotAction::Keep
        );
        let changed = crate::pods::build::tests::set("agent: {image: img2, replicas: 1}");
        assert_eq!(
            slot_action(&changed, &history(4, 5, now), 1, &dead, now),
            SlotAction::Delete { fresh_budget: true }
        );
    }

    #[test]
    fn drift_deletes_and_a_long_healthy_run_resets_the_budget() {
        let set = crate::pods::build::tests::set("agent: {image: img, replicas: 1}");
        let now = Timestamp::now();
        let healthy = sub("{}", "Running");
        assert_eq!(
            slot_action(&set, &history(2, 60, now), 1, &healthy, now),
            SlotAction::Keep
        );
        assert_eq!(
            slot_action(&set, &history(2, 601, now), 1, &healthy, now),
            SlotAction::ResetBudget
        );
        let changed = crate::pods::build::tests::set("agent: {image: img2, replicas: 1}");
        assert_eq!(
            slot_action(&changed, &RebuildHistory::default(), 1, &healthy, now),
            SlotAction::Delete {
                fresh_budget: false
            }
        );
    }

    #[test]
    fn elapsed_never_negative() {
        let now = Timestamp::now();
        let later = now + jiff::SignedDuration::from_secs(10);
        assert_eq!(elapsed(later, now), Duration::ZERO);
        assert_eq!(elapsed(now, later), Duration::from_secs(10));
    }
}
