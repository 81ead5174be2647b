//! UpdateBackupAgents (reference §11 B2): the agents' Deployment follows the backup, and
//! agent pods stuck in a terminal phase are deleted so the Deployment replaces them.
//!
//! Contract:
//! - [`decide`] is pure: no Deployment and one wanted ⇒ create; one whose labels or
//!   annotations (the spec hash among them) differ from the desired ones ⇒ update; one that
//!   is not wanted (`agentCount: 0`) and carries this backup's `backup-for` label ⇒ delete
//!   (a Deployment of that name that is not this backup's is left alone, with a Warning
//!   Event); otherwise nothing, so a converged pass writes nothing.
//! - Create and update are one server-side apply of the whole desired Deployment with the
//!   operator's field manager (what is removed from the spec disappears from the object).
//! - [`terminal_pods`] is pure: agent pods (label `foundationdb.org/deployment-name`) in
//!   phase Failed or Succeeded, not being deleted, at least the minimum age old, are
//!   deleted (Event `DeletedTerminalAgentPod`); a younger one asks for a delayed requeue after
//!   its remaining time.

use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kit::pipeline::{Flow, Step, StepResult};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};

use super::{BACKUP_FOR_LABEL, DEPLOYMENT_NAME_LABEL, Pass, deployment, step_error};
use crate::cluster::FIELD_MANAGER;

step_error!(UpdateBackupAgentsError, "updating the backup agents");

/// The step.
pub struct UpdateBackupAgents;

/// What to do with the Deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It is as desired (or absent and not wanted).
    Nothing,
    /// Create it.
    Create,
    /// Apply the desired one over it.
    Update,
    /// Delete it.
    Delete,
    /// Not wanted, but not this backup's: leave it.
    Foreign,
}

/// See the module docs.
pub fn decide(existing: Option<&Deployment>, desired: Option<&Deployment>, uid: &str) -> Decision {
    match (existing, desired) {
        (None, None) => Decision::Nothing,
        (None, Some(_)) => Decision::Create,
        (Some(e), Some(d)) if deployment::matches(e, d) => Decision::Nothing,
        (Some(_), Some(_)) => Decision::Update,
        (Some(e), None) => {
            let ours = e.labels().get(BACKUP_FOR_LABEL).is_some_and(|v| v == uid);
            if ours {
                Decision::Delete
            } else {
                Decision::Foreign
            }
        }
    }
}

/// Terminal agent pods: the names to delete now, and the shortest wait for a younger one.
pub fn terminal_pods(
    pods: &[Pod],
    now: Timestamp,
    min_age: Duration,
) -> (Vec<String>, Option<Duration>) {
    let mut delete = Vec::new();
    let mut wait: Option<Duration> = None;
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase != "Failed" && phase != "Succeeded" {
            continue;
        }
        let created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        let age = Duration::from_secs_f64(now.duration_since(created).as_secs_f64().max(0.0));
        if age >= min_age {
            delete.push(pod.name_any());
        } else {
            let left = min_age - age;
            wait = Some(wait.map_or(left, |w| w.min(left)));
        }
    }
    (delete, wait)
}

impl Step<Pass> for UpdateBackupAgents {
    fn name(&self) -> &'static str {
        "update_backup_agents"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            let name = deployment::name(&pass.backup);
            let api = pass.api::<Deployment>();
            let existing = api
                .get_opt(&name)
                .await
                .map_err(UpdateBackupAgentsError::from)?;
            let desired = deployment::desired(&pass.backup);
            let uid = pass.backup.uid().unwrap_or_default();
            match decide(existing.as_ref(), desired.as_ref(), &uid) {
                Decision::Nothing => {}
                d @ (Decision::Create | Decision::Update) => {
                    let want = desired.unwrap_or_default();
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    api.patch(&name, &params, &Patch::Apply(&want))
                        .await
                        .map_err(UpdateBackupAgentsError::from)?;
                    let (reason, verb) = if d == Decision::Create {
                        ("CreatedBackupAgents", "created")
                    } else {
                        ("UpdatedBackupAgents", "updated")
                    };
                    let replicas = pass.backup.desired_agent_count();
                    pass.event(
                        false,
                        reason,
                        format!("{verb} Deployment {name} with {replicas} backup agents"),
                    )
                    .await;
                }
                Decision::Delete => {
                    match api.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => return Err(UpdateBackupAgentsError::from(e).into()),
                    }
                    pass.event(
                        false,
                        "DeletedBackupAgents",
                        format!("deleted Deployment {name}: agentCount is 0"),
                    )
                    .await;
                }
                Decision::Foreign => {
                    pass.event(true, "ForeignDeployment", format!("Deployment {name} is not this backup's (no {BACKUP_FOR_LABEL}={uid} label); it is left alone")).await;
                }
            }
            let pods = pass
                .api::<Pod>()
                .list(&ListParams::default().labels(&format!("{DEPLOYMENT_NAME_LABEL}={name}")))
                .await
                .map_err(UpdateBackupAgentsError::from)?
                .items;
            let min_age = pass.ctx.options.minimum_age_for_terminal_pod_deletion;
            let (delete, wait) = terminal_pods(&pods, pass.now, min_age);
            for pod in delete {
                match pass
                    .api::<Pod>()
                    .delete(&pod, &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(UpdateBackupAgentsError::from(e).into()),
                }
                pass.event(
                    false,
                    "DeletedTerminalAgentPod",
                    format!("deleted backup agent pod {pod}: it had stopped for good"),
                )
                .await;
            }
            Ok(wait.map_or(Flow::Continue, Flow::delay))
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::crd::FoundationDBBackup;

    fn backup(agents: i64) -> FoundationDBBackup {
        let mut b: FoundationDBBackup = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
            "metadata": {"name": "b", "namespace": "db", "uid": "u"},
            "spec": {"version": "7.1.57", "clusterName": "c", "agentCount": agents,
                     "blobStoreConfiguration": {"accountName": "a@h"}},
        }))
        .unwrap();
        b.metadata.uid = Some("u".into());
        b
    }

    #[test]
    fn the_deployment_follows_the_agent_count() {
        let two = deployment::desired(&backup(2)).unwrap();
        let three = deployment::desired(&backup(3)).unwrap();
        let mut foreign = two.clone();
        foreign.metadata.labels = None;
        let cases = [
            (None, None, Decision::Nothing),
            (None, Some(&two), Decision::Create),
            (Some(&two), Some(&two), Decision::Nothing),
            (Some(&two), Some(&three), Decision::Update),
            (Some(&two), None, Decision::Delete),
            (Some(&foreign), None, Decision::Foreign),
        ];
        for (existing, desired, want) in cases {
            assert_eq!(decide(existing, desired, "u"), want);
        }
    }

    fn pod(name: &str, phase: &str, age_secs: i64, now: Timestamp) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.creation_timestamp = Some(Time(now - jiff::SignedDuration::from_secs(age_secs)));
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        });
        p
    }

    #[test]
    fn only_old_terminal_pods_are_deleted() {
        let now = Timestamp::now();
        let pods = [
            pod("running", "Running", 100, now),
            pod("failed-old", "Failed", 60, now),
            pod("done-young", "Succeeded", 10, now),
        ];
        let (delete, wait) = terminal_pods(&pods, now, Duration::from_secs(30));
        assert_eq!(delete, vec!["failed-old"]);
        let wait = wait.unwrap().as_secs();
        assert!((19..=20).contains(&wait), "{wait}");
    }
}
