//! DeleteTerminalPods (reference §4 step 6): a pod in phase Failed or Succeeded never runs
//! again by itself (the kubelet does not restart a terminal pod), so it is deleted and
//! AddPods recreates it with the same process group, name and PVC.
//!
//! Contract:
//! - [`decide`] is pure: over the groups in the status (never one with
//!   `ResourcesTerminating`, whose pod is already going away), a pod that exists, is not being
//!   deleted and is in a terminal phase is deleted once it is at least
//!   `--minimum-age-for-terminal-pod-deletion` (30 s) old; a younger one is waited for.
//! - The step deletes those pods (a pod already gone is fine), records a
//!   `DeletedTerminalPod` Event per pod (a Flotilla addition: upstream only logs), and asks
//!   for a delayed requeue after the shortest remaining wait, so later steps still run.
//!   A failed delete fails the step.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::DeleteParams;

use super::{Pass, step_error};
use crate::crd::{ProcessGroupStatus, condition};

step_error!(DeleteTerminalPodsError, "deleting terminal pods");

/// The step.
pub struct DeleteTerminalPods;

/// A pod to delete: its name and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminalPod {
    /// The pod's name.
    pub pod: String,
    /// The process group.
    pub group: String,
    /// `Failed` or `Succeeded`, with the pod's reason when it has one.
    pub phase: String,
}

/// What to do with the terminal pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Old enough: delete.
    pub delete: Vec<TerminalPod>,
    /// The shortest time until a younger terminal pod may be deleted.
    pub wait: Option<Duration>,
}

/// See the module docs; `pods` are by process-group ID.
pub fn decide(
    groups: &[ProcessGroupStatus],
    pods: &BTreeMap<String, Pod>,
    now: Timestamp,
    min_age: Duration,
) -> Decision {
    let mut d = Decision::default();
    for g in groups {
        if g.has_condition(condition::RESOURCES_TERMINATING) {
            continue;
        }
        let Some(pod) = pods.get(g.process_group_id.as_str()) else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let status = pod.status.clone().unwrap_or_default();
        let phase = status.phase.unwrap_or_default();
        if phase != "Failed" && phase != "Succeeded" {
            continue;
        }
        let created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        let age = now.duration_since(created).as_secs_f64().max(0.0);
        let remaining = min_age.as_secs_f64() - age;
        if remaining > 0.0 {
            let r = Duration::from_secs_f64(remaining);
            d.wait = Some(d.wait.map_or(r, |w| w.min(r)));
            continue;
        }
        let phase = match status.reason {
            Some(reason) if !reason.is_empty() => format!("{phase} ({reason})"),
            _ => phase,
        };
        d.delete.push(TerminalPod {
            pod: pod.metadata.name.clone().unwrap_or_default(),
            group: g.process_group_id.to_string(),
            phase,
        });
    }
    d
}

impl DeleteTerminalPods {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, DeleteTerminalPodsError> {
        let pods = pass.pods().await?;
        let groups = pass.status().process_groups.clone();
        let min_age = pass.ctx.options.minimum_age_for_terminal_pod_deletion;
        let d = decide(&groups, &pods, pass.now, min_age);
        let api = pass.api::<Pod>();
        for t in &d.delete {
            tracing::info!(cluster = %pass.name(), group = %t.group, pod = %t.pod, phase = %t.phase, "deleting a pod stuck in a terminal phase");
            match api.delete(&t.pod, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => return Err(e.into()),
            }
            let note = format!(
                "Deleted pod {} of process group {}: it is {} and will be recreated",
                t.pod, t.group, t.phase
            );
            pass.event(false, "DeletedTerminalPod", note).await;
        }
        Ok(match d.wait {
            Some(after) => {
                tracing::info!(cluster = %pass.name(), ?after, "a pod in a terminal phase is too young to be deleted");
                Flow::delay(after)
            }
            None => Flow::Continue,
        })
    }
}

impl Step<Pass> for DeleteTerminalPods {
    fn name(&self) -> &'static str {
        "delete_terminal_pods"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::crd::{ProcessClass, ProcessGroupId};

    const NOW: i64 = 1_000_000;

    fn group(id: &str, terminating: bool) -> ProcessGroupStatus {
        let mut g = ProcessGroupStatus::new(
            ProcessGroupId::new(id),
            ProcessClass::new("storage"),
            Timestamp::UNIX_EPOCH,
        );
        g.process_group_conditions.clear();
        if terminating {
            g.update_condition(
                condition::RESOURCES_TERMINATING,
                true,
                Timestamp::UNIX_EPOCH,
            );
        }
        g
    }

    fn pod(id: &str, phase: &str, age_secs: i64, deleting: bool) -> (String, Pod) {
        let mut p = Pod::default();
        p.metadata.name = Some(format!("c-{id}"));
        p.metadata.creation_timestamp = Some(Time(Timestamp::from_second(NOW - age_secs).unwrap()));
        if deleting {
            p.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(NOW).unwrap()));
        }
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some(phase.into()),
            reason: (phase == "Failed").then(|| "Evicted".into()),
            ..Default::default()
        });
        (id.to_owned(), p)
    }

    #[test]
    fn terminal_pods_old_enough_are_deleted_younger_ones_waited_for() {
        let now = Timestamp::from_second(NOW).unwrap();
        let min = Duration::from_secs(30);
        type Case = (
            &'static str,
            bool,
            Option<(&'static str, i64, bool)>,
            Decision,
        );
        let del = |phase: &str| Decision {
            delete: vec![TerminalPod {
                pod: "c-s1".into(),
                group: "s1".into(),
                phase: phase.into(),
            }],
            wait: None,
        };
        let cases: Vec<Case> = vec![
            (
                "running",
                false,
                Some(("Running", 100, false)),
                Decision::default(),
            ),
            (
                "pending",
                false,
                Some(("Pending", 100, false)),
                Decision::default(),
            ),
            (
                "failed and old",
                false,
                Some(("Failed", 100, false)),
                del("Failed (Evicted)"),
            ),
            (
                "succeeded and old",
                false,
                Some(("Succeeded", 30, false)),
                del("Succeeded"),
            ),
            (
                "failed and young",
                false,
                Some(("Failed", 10, false)),
                Decision {
                    delete: vec![],
                    wait: Some(Duration::from_secs(20)),
                },
            ),
            (
                "already being deleted",
                false,
                Some(("Failed", 100, true)),
                Decision::default(),
            ),
            (
                "group terminating",
                true,
                Some(("Failed", 100, false)),
                Decision::default(),
            ),
            ("no pod", false, None, Decision::default()),
        ];
        for (name, terminating, p, want) in cases {
            let pods: BTreeMap<String, Pod> = p
                .into_iter()
                .map(|(phase, age, deleting)| pod("s1", phase, age, deleting))
                .collect();
            let got = decide(&[group("s1", terminating)], &pods, now, min);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn the_shortest_wait_wins() {
        let now = Timestamp::from_second(NOW).unwrap();
        let groups = [group("a", false), group("b", false), group("c", false)];
        let pods: BTreeMap<String, Pod> = [
            pod("a", "Failed", 5, false),
            pod("b", "Failed", 25, false),
            pod("c", "Failed", 31, false),
        ]
        .into_iter()
        .collect();
        let d = decide(&groups, &pods, now, Duration::from_secs(30));
        assert_eq!(d.wait, Some(Duration::from_secs(5)));
        assert_eq!(d.delete.len(), 1);
        assert_eq!(d.delete[0].group, "c");
    }
}
