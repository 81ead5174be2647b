//! The agent's three nodes: their Node objects, Node status and Lease heartbeats.
//!
//! Contract:
//! - Nodes `proc-node-0..2` in zones `zone-a..c`, labelled `flotilla.dev/process-node=true`
//!   and tainted `flotilla.dev/process-node=true:NoSchedule`, with pod CIDRs
//!   `127.<2+slot>.<n>.0/24`, InternalIP = the gateway address and the kubelet endpoint at
//!   `<gateway>:10250` (for `kubectl logs`).
//! - [`register`] creates them or takes them over (an earlier agent's nodes get this agent's
//!   addresses); [`heartbeat`] renews their Leases in `kube-node-lease` every 10 s and their
//!   Ready condition every 60 s, like a kubelet, until cancelled.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{LABEL, NODES, TAINT, network};
use crate::plane::ZONES;

/// Port of the kubelet endpoint on the gateway address.
pub const KUBELET_PORT: u16 = 10250;
/// Lease duration, as the kubelet's default.
const LEASE_SECONDS: i32 = 40;
const MANAGER: &str = "flotilla-proc-node";

/// What each node offers (pods: enough for the benchmarks).
fn capacity() -> serde_json::Value {
    json!({"cpu": "8", "memory": "32Gi", "pods": "250", "ephemeral-storage": "100Gi"})
}

/// Allocatable CPU (cores) and memory (bytes) of a node, for the downward API's defaults.
pub const ALLOCATABLE: (f64, f64) = (8.0, 32.0 * 1024.0 * 1024.0 * 1024.0);

fn node(i: usize, slot: u8) -> serde_json::Value {
    let name = NODES[i];
    let cidr = network::pod_cidr(slot, i);
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                LABEL: "true", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "topology.kubernetes.io/region": "local",
                "topology.kubernetes.io/zone": ZONES[i],
            },
        },
        "spec": {
            "podCIDR": cidr, "podCIDRs": [cidr],
            "taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}],
        },
    })
}

fn status(slot: u8, now: &str) -> serde_json::Value {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({"status": {
        "capacity": capacity(), "allocatable": capacity(),
        "addresses": [{"type": "InternalIP", "address": network::gateway(slot).to_string()},
                      {"type": "Hostname", "address": network::gateway(slot).to_string()}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
        "nodeInfo": {
            "kubeletVersion": format!("v{}-flotilla-proc-node", crate::Versions::pinned().kubernetes.trim_start_matches('v')),
            "containerRuntimeVersion": "flotilla-proc://1", "operatingSystem": "linux",
            "architecture": "amd64", "osImage": "host processes (Flotilla process-backed node)",
            "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
        },
        "conditions": [
            condition("Ready", "True", "KubeletReady", "proc-node agent is posting ready status"),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure"),
        ],
    }})
}

/// Creates (or takes over) the nodes and reports them Ready.
pub async fn register(client: &kube::Client, slot: u8) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let params = PatchParams::apply(MANAGER).force();
    for (i, name) in NODES.iter().enumerate() {
        nodes
            .patch(name, &params, &Patch::Apply(node(i, slot)))
            .await?;
    }
    report_status(client, slot).await?;
    renew_leases(client).await
}

async fn report_status(client: &kube::Client, slot: u8) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    for name in NODES {
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(status(slot, &now)),
            )
            .await?;
    }
    Ok(())
}

async fn renew_leases(client: &kube::Client) -> kube::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    for name in NODES {
        let body = json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now}});
        match leases
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let lease: Lease = serde_json::from_value(
                    json!({"metadata": {"name": name}, "spec": body["spec"]}),
                )
                .map_err(kube::Error::SerdeError)?;
                leases.create(&PostParams::default(), &lease).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Renews Leases every 10 s and Node status every 60 s until `stop` is cancelled.
pub async fn heartbeat(client: kube::Client, slot: u8, stop: tokio_util::sync::CancellationToken) {
    let mut tick = 0u64;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
        tick += 1;
        if let Err(e) = renew_leases(&client).await {
            tracing::warn!(error = %e, "renewing node leases");
        }
        if tick.is_multiple_of(6)
            && let Err(e) = report_status(&client, slot).await
        {
            tracing::warn!(error = %e, "reporting node status");
        }
    }
}
