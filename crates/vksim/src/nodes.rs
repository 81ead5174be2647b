//! Making the local plane's kwok nodes eligible for cocoon pods: cocoon pods carry a hard
//! nodeSelector `cocoonstack.io/pool=<pool>` (vk-cocoon nodes are labelled with their pool).

use cocoon::names;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::patch::FIELD_MANAGER;

/// Annotation kwok puts on (and we put on) the nodes it simulates.
const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// Labels every kwok node `cocoonstack.io/pool=<pool>` (idempotent: nodes already labelled
/// so are not patched). A node carries one pool: labelling with another pool moves it there.
/// Fails when the cluster has no kwok node.
pub async fn label_nodes(client: &kube::Client, pool: &str) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let nodes = api.list(&ListParams::default()).await?.items;
    let kwok: Vec<&Node> = nodes.iter().filter(|n| is_kwok(n)).collect();
    anyhow::ensure!(!kwok.is_empty(), "no kwok nodes to label");
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    for node in kwok {
        let labelled = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::NODE_POOL))
            .is_some_and(|p| p == pool);
        if labelled {
            continue;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        let body = json!({"metadata": {"labels": {names::NODE_POOL: pool}}});
        api.patch(&name, &params, &Patch::Merge(&body)).await?;
        tracing::info!(node = %name, pool, "labelled node");
    }
    Ok(())
}

fn is_kwok(node: &Node) -> bool {
    let annotated = node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.get(KWOK_NODE_ANNOTATION).is_some_and(|v| v == "fake"));
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get("type").is_some_and(|v| v == "kwok"));
    annotated || labelled
}
