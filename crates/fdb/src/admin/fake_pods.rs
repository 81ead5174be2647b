//! The fake database's processes following the pods (upstream's mock does the same), with
//! the unified image's monitor as [`crate::admin::fake_monitor`] says it behaves.

use std::collections::BTreeMap;

use super::{FakeDatabase, FakeProcess};
use crate::admin::fake_monitor::{self, Launch};
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
    /// with an IP and per fdbserver its monitor starts ([`fake_monitor::process_count`]):
    /// process `n` at `<pod IP>:<4499 + 2n>` (4501, 4503, …) with `process_id` `<group>-<n>`,
    /// class and instance ID from the pod's labels, zone = the pod's `FDB_ZONE_ID` (its name
    /// or its node). Pods without an IP, being deleted, or in phase Failed or Succeeded have
    /// no process. A pod whose monitor published its configuration ([`fake_monitor`]) runs
    /// fdbserver only once that configuration says `runServers`, with the command line
    /// rendered from it and the version of the pod's image; a pod without those annotations
    /// runs `version` with a fixed command line. A process already running keeps its command
    /// line, version and start time until killed.
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
            let started = Started {
                pod,
                ip: &ip,
                class,
                id,
                version,
                now,
            };
            for n in 1..=fake_monitor::process_count(pod) {
                if let Some(process) = started.process(&st.processes, n) {
                    next.insert(process.address.clone(), process);
                }
            }
        }
        // A process started in a drained one's place (a new pod) holds data like any other.
        let fresh: Vec<String> = next
            .values()
            .filter(|p| {
                st.processes
                    .get(&p.address)
                    .is_none_or(|old| old.pod != p.pod || old.key() != p.key())
            })
            .map(|p| p.key().to_owned())
            .collect();
        for key in &fresh {
            st.drained.remove(key);
        }
        st.processes = next;
        let heal = st.heal_reads;
        let holding: Vec<String> = st
            .processes
            .values()
            .filter(|p| p.class.is_stateful() && st.excluded(p).is_none())
            .map(|p| p.key().to_owned())
            .collect();
        for key in holding {
            st.stateful.insert(key, heal);
        }
    }
}

/// One pod's processes as [`FakeDatabase::sync_pods`] derives them.
struct Started<'a> {
    pod: &'a k8s_openapi::api::core::v1::Pod,
    ip: &'a str,
    class: &'a str,
    id: &'a str,
    version: &'a str,
    now: i64,
}

impl Started<'_> {
    /// Process `n` of the pod, given the processes running so far (`None`: it runs none).
    fn process(&self, running: &BTreeMap<String, FakeProcess>, n: u32) -> Option<FakeProcess> {
        let (ip, id) = (self.ip, self.id);
        let address = format!("{ip}:{}", 4499 + 2 * n);
        let uid = self.pod.metadata.uid.clone().unwrap_or_default();
        let same = running
            .get(&address)
            .filter(|r| r.instance_id == id && r.pod == uid);
        let fresh = match fake_monitor::launch(self.pod, n) {
            Launch::NotMonitored => (
                format!("/usr/bin/fdbserver --public_address={address}"),
                self.version.to_owned(),
            ),
            // A running process keeps running; a kill would leave it as it is.
            Launch::Idle => {
                return same.map(|r| FakeProcess {
                    restart_with: None,
                    ..r.clone()
                });
            }
            Launch::Run {
                command_line,
                version,
            } => (command_line, version),
        };
        Some(match same {
            Some(r) => FakeProcess {
                restart_with: Some(fresh),
                zone: zone_of(self.pod),
                ..r.clone()
            },
            None => FakeProcess {
                address,
                class: ProcessClass::new(self.class),
                instance_id: id.to_owned(),
                process_id: format!("{id}-{n}"),
                zone: zone_of(self.pod),
                version: fresh.1.clone(),
                command_line: fresh.0.clone(),
                started: self.now,
                restart_with: Some(fresh),
                pod: uid,
            },
        })
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
