//! GenerateInitialClusterFile (reference §4 step 13, §3.2): only while the status has no
//! connection string. Needs at least the desired coordinator count of eligible running
//! pods with an IP (else stop, 15 s); chooses coordinators among them with the selection of
//! [`super::coordinators`] (zone = the pod name with fault domain `foundationdb.org/none`,
//! else its node); writes `desc:genID@addr,…` (description and generation ID from
//! `partialConnectionString` when given, else the cluster name with `-`→`_` and 32 random
//! alphanumerics) into the status.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kit::pipeline::{Flow, Step, StepResult};
use kube::ResourceExt;

use super::coordinators::{self, Candidate};
use super::{Pass, step_error};
use crate::crd::{
    ConnectionString, FoundationDBCluster, NONE_FAULT_DOMAIN_KEY, ProcessClass, process_port,
    sanitize_description,
};

step_error!(
    GenerateInitialClusterFileError,
    "generating the cluster file"
);

/// The step.
pub struct GenerateInitialClusterFile;

/// The coordinator candidates among `pods`: running, with an IP, not being deleted, of a
/// class that may coordinate.
pub fn candidates(cluster: &FoundationDBCluster, pods: &[&Pod]) -> Vec<Candidate> {
    let class_label = cluster.process_class_label();
    let id_label = cluster.process_group_id_label();
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let status = p.status.as_ref()?;
            if status.phase.as_deref() != Some("Running") {
                return None;
            }
            let ip = status.pod_ip.clone()?;
            let class = ProcessClass::new(p.labels().get(&class_label)?.as_str());
            if !cluster.is_eligible_as_coordinator(&class) {
                return None;
            }
            let zone = if cluster.spec.fault_domain.key == NONE_FAULT_DOMAIN_KEY {
                p.name_any()
            } else {
                p.spec.as_ref()?.node_name.clone()?
            };
            Some(Candidate {
                id: p.labels().get(&id_label)?.clone(),
                address: format!("{ip}:{}", process_port(1, false)),
                zone,
                priority: cluster.coordinator_priority(&class),
            })
        })
        .collect()
}

/// The connection string over `coordinators` (see the module docs).
pub fn connection_string(
    cluster: &FoundationDBCluster,
    coordinators: &[Candidate],
) -> ConnectionString {
    let partial = &cluster.spec.partial_connection_string;
    ConnectionString {
        database_name: if partial.database_name.is_empty() {
            sanitize_description(&cluster.name_any())
        } else {
            partial.database_name.clone()
        },
        generation_id: if partial.generation_id.is_empty() {
            ConnectionString::new_generation_id()
        } else {
            partial.generation_id.clone()
        },
        coordinators: coordinators.iter().map(|c| c.address.clone()).collect(),
    }
}

impl GenerateInitialClusterFile {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, GenerateInitialClusterFileError> {
        if !pass.status().connection_string.is_empty() {
            return Ok(Flow::Continue);
        }
        let pods = pass.pods().await?;
        let removing: std::collections::BTreeSet<String> = pass
            .status()
            .process_groups
            .iter()
            .filter(|g| g.is_marked_for_removal())
            .map(|g| g.process_group_id.to_string())
            .collect();
        let pods: Vec<&Pod> = pods
            .iter()
            .filter(|(id, _)| !removing.contains(*id))
            .map(|(_, p)| p)
            .collect();
        let count = pass.cluster.desired_coordinator_count();
        let found = candidates(&pass.cluster, &pods);
        let chosen = match coordinators::choose(&found, count, 1) {
            Ok(c) => c,
            Err(e) => {
                tracing::info!(cluster = %pass.name(), error = %e, "waiting for coordinator pods");
                return Ok(Flow::stop(Duration::from_secs(15)));
            }
        };
        let cs = connection_string(&pass.cluster, &chosen).to_string();
        // Validate as upstream does before writing.
        if let Err(e) = ConnectionString::parse(&cs) {
            tracing::warn!(cluster = %pass.name(), error = %e, "generated an invalid connection string");
            return Ok(Flow::stop(Duration::from_secs(15)));
        }
        tracing::info!(cluster = %pass.name(), connection_string = %cs, "initial cluster file generated");
        pass.event(
            false,
            "GeneratedClusterFile",
            format!("connection string {cs}"),
        )
        .await;
        pass.status().connection_string = cs;
        pass.write_status().await?;
        Ok(Flow::Continue)
    }
}

impl Step<Pass> for GenerateInitialClusterFile {
    fn name(&self) -> &'static str {
        "generate_initial_cluster_file"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::FoundationDBClusterSpec;

    fn pod(name: &str, class: &str, node: &str, ip: Option<&str>, phase: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.labels = Some(
            [
                (
                    "foundationdb.org/fdb-process-class".to_string(),
                    class.to_string(),
                ),
                (
                    "foundationdb.org/fdb-process-group-id".to_string(),
                    name.to_string(),
                ),
            ]
            .into(),
        );
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        });
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            pod_ip: ip.map(Into::into),
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    }

    #[test]
    fn candidates_table() {
        let c = FoundationDBCluster::new(
            "my-db",
            FoundationDBClusterSpec {
                version: "7.1.57".into(),
                ..Default::default()
            },
        );
        let pods = [
            pod("log-1", "log", "n1", Some("127.1.0.1"), "Running"),
            pod(
                "stateless-1",
                "stateless",
                "n1",
                Some("127.1.0.2"),
                "Running",
            ),
            pod("storage-1", "storage", "n2", None, "Running"),
            pod("storage-2", "storage", "n3", Some("127.1.0.4"), "Pending"),
            pod("storage-3", "storage", "n3", Some("127.1.0.5"), "Running"),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let found = candidates(&c, &refs);
        let ids: Vec<_> = found
            .iter()
            .map(|c| (c.id.as_str(), c.zone.as_str(), c.priority))
            .collect();
        assert_eq!(ids, vec![("log-1", "n1", 1), ("storage-3", "n3", 0)]);
        assert_eq!(found[0].address, "127.1.0.1:4501");
        let cs = connection_string(&c, &found);
        assert_eq!(cs.database_name, "my_db");
        assert_eq!(cs.generation_id.len(), 32);
        assert!(ConnectionString::parse(&cs.to_string()).is_ok());
    }
}
