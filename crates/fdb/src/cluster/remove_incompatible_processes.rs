//! RemoveIncompatibleProcesses (reference §4 step 14): a process the upgrade's kill missed
//! keeps running the old protocol; the database lists its address among
//! `cluster.incompatible_connections` (and no longer in its process list). Its pod is
//! deleted so AddPods recreates it with the current version.
//!
//! Contract:
//! - Runs only with `--enable-restart-incompatible-processes` (on by default), once the
//!   cluster is configured and while it is not being upgraded (running version = spec
//!   version).
//! - [`incompatible_hosts`] is pure: the hosts of the incompatible connections, minus every
//!   host that a process of this data center in the status runs on (a host still in the
//!   process list is not incompatible). Addresses that do not parse are logged and skipped.
//! - [`pods_to_delete`] is pure: groups in the status with an address among those hosts,
//!   whose pod exists and is not being deleted.
//! - Their pods are deleted without any safety check (they cannot talk to the database
//!   anyway), with an Event `RemovedIncompatibleProcesses` (a Flotilla addition); the pass
//!   goes on. Failures are delayed requeues (15 s), as upstream's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kit::pipeline::{Flow, Step, StepResult};
use kube::api::DeleteParams;

use super::{Pass, step_error};
use crate::admin::FdbStatus;
use crate::crd::{FoundationDBCluster, ProcessAddress, ProcessGroupStatus};

step_error!(
    RemoveIncompatibleProcessesError,
    "removing incompatible processes"
);

/// The step.
pub struct RemoveIncompatibleProcesses;

/// See the module docs.
pub fn incompatible_hosts(cluster: &FoundationDBCluster, db: &FdbStatus) -> BTreeSet<String> {
    let dc = &cluster.spec.data_center;
    let known: BTreeSet<String> = db
        .cluster
        .processes
        .values()
        .filter(|p| dc.is_empty() || p.locality.get("dcid").is_some_and(|d| d == dc))
        .filter_map(|p| Some(p.parsed_address()?.host))
        .collect();
    let mut out = BTreeSet::new();
    for text in &db.cluster.incompatible_connections {
        match ProcessAddress::parse(text) {
            Ok(a) if !known.contains(&a.host) => {
                out.insert(a.host);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(address = %text, error = %e, "cannot parse an incompatible connection")
            }
        }
    }
    out
}

/// See the module docs: `(group, pod name)` of the pods to delete.
pub fn pods_to_delete(
    groups: &[ProcessGroupStatus],
    pods: &BTreeMap<String, Pod>,
    hosts: &BTreeSet<String>,
) -> Vec<(String, String)> {
    groups
        .iter()
        .filter(|g| g.addresses.iter().any(|a| hosts.contains(a)))
        .filter_map(|g| {
            let id = g.process_group_id.to_string();
            let pod = pods.get(&id)?;
            if pod.metadata.deletion_timestamp.is_some() {
                return None;
            }
            Some((id, pod.metadata.name.clone()?))
        })
        .collect()
}

impl RemoveIncompatibleProcesses {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, RemoveIncompatibleProcessesError> {
        let configured = pass.status().configured;
        if !pass.ctx.options.restart_incompatible_processes
            || !configured
            || pass.cluster.is_being_upgraded()
        {
            return Ok(Flow::Continue);
        }
        let Some(db) = pass.db.clone() else {
            return Ok(Flow::Continue);
        };
        if db.cluster.incompatible_connections.is_empty() {
            return Ok(Flow::Continue);
        }
        tracing::info!(cluster = %pass.name(), connections = ?db.cluster.incompatible_connections, "incompatible connections");
        let hosts = incompatible_hosts(&pass.cluster, &db);
        let pods = match pass.pods().await {
            Ok(p) => p,
            Err(e) => return Ok(retry(pass, &e)),
        };
        let groups = pass.status().process_groups.clone();
        let doomed = pods_to_delete(&groups, &pods, &hosts);
        let api = pass.api::<Pod>();
        for (id, pod) in &doomed {
            tracing::info!(cluster = %pass.name(), group = %id, %pod, "recreate Pod for process group with incompatible version");
            match api.delete(pod, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Ok(retry(pass, &e)),
            }
        }
        if !doomed.is_empty() {
            let names: Vec<&str> = doomed.iter().map(|(_, p)| p.as_str()).collect();
            let note = format!(
                "deleted {}: their processes run an incompatible protocol",
                names.join(" ")
            );
            pass.event(false, "RemovedIncompatibleProcesses", note)
                .await;
        }
        Ok(Flow::Continue)
    }
}

fn retry(pass: &Pass, e: &kube::Error) -> Flow {
    tracing::info!(cluster = %pass.name(), error = %e, "removing incompatible processes failed");
    Flow::delay(Duration::from_secs(15))
}

impl Step<Pass> for RemoveIncompatibleProcesses {
    fn name(&self) -> &'static str {
        "remove_incompatible_processes"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;
    use crate::admin::status::ProcessInfo;
    use crate::crd::{ProcessClass, ProcessGroupId};

    fn cluster(dc: &str) -> FoundationDBCluster {
        serde_json::from_value(json!({
            "apiVersion": "apps.foundationdb.org/v1beta2",
            "kind": "FoundationDBCluster",
            "metadata": {"name": "c"},
            "spec": {"version": "7.1.57", "dataCenter": dc},
        }))
        .unwrap()
    }

    fn status(processes: &[(&str, &str)], incompatible: &[&str]) -> FdbStatus {
        let mut s = FdbStatus::default();
        for (address, dc) in processes {
            s.cluster.processes.insert(
                (*address).into(),
                ProcessInfo {
                    address: (*address).into(),
                    locality: [("dcid".to_string(), dc.to_string())].into(),
                    ..Default::default()
                },
            );
        }
        s.cluster.incompatible_connections = incompatible.iter().map(|a| a.to_string()).collect();
        s
    }

    fn hosts(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn incompatible_hosts_table() {
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, FdbStatus, BTreeSet<String>)> = vec![
            ("none", "", status(&[("127.1.0.1:4501", "")], &[]), hosts(&[])),
            ("not in the process list", "", status(&[("127.1.0.1:4501", "")], &["127.1.0.9:4501"]), hosts(&["127.1.0.9"])),
            ("still in the process list: a false report", "", status(&[("127.1.0.1:4501", "")], &["127.1.0.1:4501:tls"]), hosts(&[])),
            ("a process of another DC does not count", "dc1", status(&[("127.1.0.1:4501", "dc2")], &["127.1.0.1:4501"]), hosts(&["127.1.0.1"])),
            ("a process of our DC does", "dc1", status(&[("127.1.0.1:4501", "dc1")], &["127.1.0.1:4501"]), hosts(&[])),
            ("unparsable is skipped", "", status(&[], &["127.1.0.8:port", "127.1.0.7:4501"]), hosts(&["127.1.0.7"])),
        ];
        for (name, dc, db, want) in cases {
            assert_eq!(incompatible_hosts(&cluster(dc), &db), want, "{name}");
        }
    }

    #[test]
    fn only_our_groups_pods_that_are_not_going_away() {
        let group = |id: &str, ip: &str| {
            let mut g = ProcessGroupStatus::new(
                ProcessGroupId::new(id),
                ProcessClass::new("storage"),
                Timestamp::UNIX_EPOCH,
            );
            g.addresses = vec![ip.into()];
            g
        };
        let pod = |name: &str, deleting: bool| {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            if deleting {
                p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            }
            p
        };
        let groups = [
            group("storage-1", "127.1.0.1"),
            group("storage-2", "127.1.0.2"),
            group("storage-3", "127.1.0.3"),
            group("storage-4", "127.1.0.4"),
        ];
        let pods = BTreeMap::from([
            ("storage-1".to_string(), pod("c-storage-1", false)),
            ("storage-2".to_string(), pod("c-storage-2", false)),
            ("storage-3".to_string(), pod("c-storage-3", true)),
        ]);
        let got = pods_to_delete(
            &groups,
            &pods,
            &hosts(&["127.1.0.1", "127.1.0.3", "127.1.0.4", "127.1.0.99"]),
        );
        assert_eq!(
            got,
            vec![("storage-1".to_string(), "c-storage-1".to_string())]
        );
    }
}
