//! `kubectl fdb recover-multi-region-cluster`: the pure part of upstream's forced recovery of
//! a cluster that lost a majority of its coordinators for good.
//!
//! Contract: [`check_should_recover`] refuses a database that is available or healthy or
//! whose coordinator quorum answers (upstream's order). [`plan`] reads the cluster's last
//! connection string and its running pods: a pod at a coordinator's address (its DNS name with
//! DNS in the cluster file, else its pod IP) is a surviving coordinator and the source of the
//! coordination state; other stateful pods are candidates, taken in order until the cluster
//! has its desired number of coordinators (port 4500 with `:tls` when the coordinators use TLS,
//! else 4501). The new connection string keeps the description and generation ID, the
//! surviving coordinators first. The `kubectl exec` arguments of each step are built here too.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::decide::in_main_container;
use crate::admin::status::FdbStatus;
use crate::crd::{
    ConnectionString, DataCenter, FoundationDBCluster, ProcessAddress, ProcessClass, Region,
};

/// The coordination files copied to new coordinators.
pub const COORDINATION_FILES: [&str; 2] = ["coordination-0.fdq", "coordination-1.fdq"];

/// Where the pods' processes keep their data.
pub const DATA_DIR: &str = "/var/fdb/data";

/// `Err` with upstream's reason when the database must not be force-recovered.
pub fn check_should_recover(status: &FdbStatus) -> Result<(), String> {
    if status.client.database_status.available {
        return Err("cluster is available, will abort any further actions".into());
    }
    if status.client.database_status.healthy {
        return Err("cluster is healthy, will abort any further actions".into());
    }
    if status.client.coordinators.quorum_reachable {
        return Err("quorum of coordinators are reachable, will abort any further actions".into());
    }
    Ok(())
}

/// What the recovery will do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What was found, one line each (upstream's log lines).
    pub lines: Vec<String>,
    /// The running coordinator's pod the coordination state is copied from.
    pub source: String,
    /// The pods that become coordinators, with their classes.
    pub new_coordinators: Vec<(String, ProcessClass)>,
    /// The connection string over the surviving and the new coordinators.
    pub connection_string: String,
}

/// The recovery of `cluster` with its `running` pods (see the module docs).
pub fn plan(cluster: &FoundationDBCluster, running: &[Pod]) -> Result<Plan, String> {
    let last = cluster
        .status
        .as_ref()
        .map(|s| s.connection_string.clone())
        .unwrap_or_default();
    let cs = ConnectionString::parse(&last).map_err(|e| e.to_string())?;
    let dns = cluster.use_dns_in_cluster_file();
    let mut lines = vec![format!(
        "current connection string {last} cluster uses DNS: {dns}"
    )];
    let coordinators: Vec<ProcessAddress> = cs
        .coordinators
        .iter()
        .map(|c| ProcessAddress::parse(c).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let tls = coordinators.iter().any(ProcessAddress::is_tls);
    let class_label = cluster.process_class_label();
    let mut kept: Vec<String> = Vec::new();
    let mut source = None;
    let mut candidates: Vec<(String, ProcessClass, String)> = Vec::new();
    for pod in running {
        let name = pod.name_any();
        let Some(host) = pod_host(cluster, pod) else {
            lines.push(format!("Found no public IPs for pod: {name}"));
            continue;
        };
        if let Some(c) = coordinators.iter().find(|c| c.host == host) {
            lines.push(format!(
                "Found coordinator for cluster {name} address {host}"
            ));
            kept.push(c.to_string());
            source = Some(name);
            continue;
        }
        let class = ProcessClass::new(
            pod.labels()
                .get(&class_label)
                .map(String::as_str)
                .unwrap_or_default(),
        );
        if class.is_stateful() {
            candidates.push((name, class, host));
        }
    }
    let source = source.ok_or("could not find any running coordinator for this cluster")?;
    // Counted for the single-region configuration the recovery sets (upstream changed the
    // cluster in place before counting).
    let mut single = cluster.clone();
    let db = &mut single.spec.database_configuration;
    db.usable_regions = 1;
    db.regions = vec![Region {
        data_centers: vec![DataCenter {
            id: cluster.spec.data_center.clone(),
            ..DataCenter::default()
        }],
        ..Region::default()
    }];
    let wanted = single.desired_coordinator_count();
    let missing = wanted.saturating_sub(kept.len());
    if missing > candidates.len() {
        return Err(format!(
            "not enough coordinator candidates: need {missing}, have {}",
            candidates.len()
        ));
    }
    let mut all = kept;
    let mut new_coordinators = Vec::new();
    for (name, class, host) in candidates.into_iter().take(missing) {
        let address = ProcessAddress::new(&host, if tls { 4500 } else { 4501 }, tls).to_string();
        lines.push(format!("Adding new coordinator: {address}"));
        all.push(address);
        new_coordinators.push((name, class));
    }
    let connection_string = ConnectionString {
        coordinators: all,
        ..cs
    }
    .to_string();
    lines.push(format!("new connection string: {connection_string}"));
    Ok(Plan {
        lines,
        source,
        new_coordinators,
        connection_string,
    })
}

// A pod's address host as the cluster file names it: its DNS name, or its pod IP.
fn pod_host(cluster: &FoundationDBCluster, pod: &Pod) -> Option<String> {
    if cluster.use_dns_in_cluster_file() {
        return Some(format!(
            "{}.{}.{}.svc.{}",
            pod.name_any(),
            cluster.name_any(),
            cluster.namespace().unwrap_or_default(),
            cluster.dns_domain()
        ));
    }
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// The merge patch of the spec that drops the multi-region configuration: one region with
/// the cluster's own data center, one usable region, no seed connection string.
pub fn single_region_patch(cluster: &FoundationDBCluster) -> Value {
    json!({"spec": {
        "databaseConfiguration": {
            "usable_regions": 1,
            "regions": [{"datacenters": [{"id": cluster.spec.data_center}]}],
        },
        "seedConnectionString": null,
    }})
}

/// The directory of `pod` the coordination files go to, given the directory they were found
/// in on the source: `<data>/1` with the unified image, or with the split image for a class
/// running more than one server per pod; the data directory itself otherwise.
pub fn target_data_dir(
    found_in: &str,
    cluster: &FoundationDBCluster,
    class: &ProcessClass,
) -> String {
    let base = if found_in == DATA_DIR {
        found_in
    } else {
        Path::new(found_in)
            .parent()
            .and_then(Path::to_str)
            .unwrap_or(DATA_DIR)
    };
    let per_pod = if class.is_log_process() {
        cluster.spec.log_servers_per_pod
    } else if class.as_str() == "storage" {
        cluster.spec.storage_servers_per_pod
    } else {
        1
    };
    if cluster.use_unified_image() || per_pod > 1 {
        format!("{base}/1")
    } else {
        base.to_owned()
    }
}

/// `kubectl` arguments that print the path of the first `coordination-0.fdq` under the data
/// directory of `pod`.
pub fn find_coordination_file_argv(namespace: &str, pod: &str) -> Vec<String> {
    bash(
        namespace,
        pod,
        "find /var/fdb/data/ -type f -name 'coordination-0.fdq' -print -quit | head -n 1",
    )
}

/// `kubectl` arguments that print the file `path` of `pod` (bytes as they are).
pub fn download_argv(namespace: &str, pod: &str, path: &str) -> Vec<String> {
    in_main_container(namespace, pod, false, &["/bin/cp", path, "/dev/stdout"])
}

/// `kubectl` arguments that write their standard input to `path` in `pod` (replacing it;
/// upstream appended with `tee -a`).
pub fn upload_argv(namespace: &str, pod: &str, path: &str) -> Vec<String> {
    in_main_container(namespace, pod, true, &["tee", path])
}

/// `kubectl` arguments that stop `pod`'s fdbserver processes and delete its local cluster
/// file, so they start again from the seed cluster file (the config map's).
pub fn restart_from_seed_argv(namespace: &str, pod: &str) -> Vec<String> {
    bash(
        namespace,
        pod,
        "pkill fdbserver && rm -f /var/fdb/data/fdb.cluster && pkill fdbserver || true",
    )
}

/// `kubectl` arguments that print the cluster file `pod` mounts from the config map.
pub fn seed_cluster_file_argv(namespace: &str, pod: &str) -> Vec<String> {
    in_main_container(
        namespace,
        pod,
        false,
        &["cat", "/var/dynamic-conf/fdb.cluster"],
    )
}

/// `kubectl` arguments (run in `pod`) that make the split image's sidecar at `ip` copy its
/// files again (`tls`: through its TLS endpoint).
pub fn copy_files_argv(namespace: &str, pod: &str, ip: &str, tls: bool) -> Vec<String> {
    let scheme = if tls {
        " --cacert ${FDB_TLS_CA_FILE} --cert ${FDB_TLS_CERTIFICATE_FILE} --key ${FDB_TLS_KEY_FILE} -k https://"
    } else {
        " http://"
    };
    bash(
        namespace,
        pod,
        &format!("curl -X POST{scheme}{ip}:8080/copy_files > /dev/null"),
    )
}

/// `kubectl` arguments that force the recovery of the database into data center `dc`.
pub fn force_recovery_argv(namespace: &str, pod: &str, dc: &str) -> Vec<String> {
    let command = format!("force_recovery_with_data_loss {dc}");
    in_main_container(namespace, pod, false, &["fdbcli", "--exec", &command])
}

fn bash(namespace: &str, pod: &str, command: &str) -> Vec<String> {
    in_main_container(namespace, pod, false, &["/bin/bash", "-c", command])
}

#[cfg(test)]
#[path = "recover_tests.rs"]
mod tests;
