//! The fake database's processes following the pods (upstream's mock does the same), with
//! the unified image's monitor as [`crate::admin::fake_monitor`] says it behaves.

use std::collections::BTreeMap;

use super::{FakeDatabase, FakeProcess};
use crate::crd::ProcessClass;

impl FakeDatabase {
    /// Makes the process of group `instance_id` speak an incompatible protocol, as one
    /// that missed an upgrade's kill: it leaves the process list and its address shows in
    /// `cluster.incompatible_connections` until its pod is replaced (a new pod is a new,
    /// compatible process).
    pub fn make_incompatible(&self, instance_id: &str) {
        let mut st = self.st();
        let pod = st
            .processes
            .values()
            .find(|p| p.instance_id == instance_id)
            .map(|p| p.pod.clone())
            .unwrap_or_default();
        st.incompatible.insert(instance_id.to_owned(), pod);
    }

    /// Derives the processes from pods as upstream's mock does: one process per running pod
    /// with an IP, at `<pod IP>:4501`, class and instance ID from the pod's labels, zone = the
    /// pod's `FDB_ZONE_ID` (its name or its node). Pods without an IP, being deleted, or in
    /// phase Failed or Succeeded have no process. A pod whose monitor published its configuration
    /// ([`crate::admin::fake_monitor`]) runs fdbserver only once that configuration says
    /// `runServers`, with the command line rendered from it and the version of the pod's
    /// image; a pod without those annotations runs `version` with a fixed command line. A
    /// process already running keeps its command line, version and start time until killed.
    pub fn sync_pods(
        &self,
        pods: &[k8s_openapi::api::core::v1::Pod],
        class_label: &str,
        id_label: &str,
        version: &str,
    ) {
        let mut st = self.st();
        let now = st.now();
        let mut next = BTreeMap::new();
        for pod in pods {
            // A pod being deleted, or whose containers have ended (phase Failed or
            // Succeeded), runs no fdbserver.
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if pod.metadata.deletion_timestamp.is_some()
                || matches!(phase, Some("Failed" | "Succeeded"))
            {
                continue;
            }
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                continue;
            };
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let (Some(class), Some(id)) = (labels.get(class_label), labels.get(id_label)) else {
                continue;
            };
            let address = format!("{ip}:4501");
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let fresh = match crate::admin::fake_monitor::launch(pod) {
                crate::admin::fake_monitor::Launch::NotMonitored => (
                    format!("/usr/bin/fdbserver --public_address={ip}:4501"),
                    version.to_owned(),
                ),
                // A running process keeps running; a kill would leave it as it is.
                crate::admin::fake_monitor::Launch::Idle => match st.processes.get(&address) {
                    Some(running) if running.instance_id == *id && running.pod == uid => {
                        next.insert(
                            address.clone(),
                            FakeProcess {
                                restart_with: None,
                                ..running.clone()
                            },
                        );
                        continue;
                    }
                    _ => continue,
                },
                crate::admin::fake_monitor::Launch::Run {
                    command_line,
                    version,
                } => (command_line, version),
            };
            let process = match st.processes.get(&address) {
                Some(running) if running.instance_id == *id && running.pod == uid => FakeProcess {
                    restart_with: Some(fresh),
                    zone: zone_of(pod),
                    ..running.clone()
                },
                _ => FakeProcess {
                    address: address.clone(),
                    class: ProcessClass::new(class.as_str()),
                    instance_id: id.clone(),
                    zone: zone_of(pod),
                    version: fresh.1.clone(),
                    command_line: fresh.0.clone(),
                    started: now,
                    restart_with: Some(fresh),
                    pod: uid.clone(),
                },
            };
            next.insert(address, process);
        }
        st.processes = next;
        let heal = st.heal_reads;
        let holding: Vec<String> = st
            .processes
            .values()
            .filter(|p| p.class.is_stateful() && st.excluded(p).is_none())
            .map(|p| p.instance_id.clone())
            .collect();
        for id in holding {
            st.stateful.insert(id, heal);
        }
    }
}

/// The pod's `FDB_ZONE_ID` as the monitor would substitute it: a literal value, the pod's
/// name or its node (the default).
pub(super) fn zone_of(pod: &k8s_openapi::api::core::v1::Pod) -> String {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let env = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == "FDB_ZONE_ID");
    match env {
        Some(e) if e.value.is_some() => e.value.clone().unwrap_or_default(),
        Some(e) => match e
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str())
        {
            Some("metadata.name") => name,
            _ => node,
        },
        None => node,
    }
}
