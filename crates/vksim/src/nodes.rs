//! The nodes a simulator is vk-cocoon on. A real vk-cocoon is the kubelet of its own virtual
//! node; a simulator likewise owns a set of the plane's (kwok) nodes, named or selected by
//! label, labels only those with its pool (`cocoonstack.io/pool=<pool>`: cocoon pods carry
//! that hard nodeSelector) and plays only the pods bound to them. Two simulators with
//! different pools and different nodes therefore never touch each other's nodes or pods, and a
//! simulator refuses to start on a node that is already in another pool (it would take it from
//! whoever put it there) instead of relabelling it.

use std::collections::BTreeSet;

use cocoon::names;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::patch::FIELD_MANAGER;

/// The label selector of the local plane's kwok nodes.
pub const KWOK_NODES: &str = "type=kwok";

/// Which nodes a simulator owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nodes {
    /// Exactly these nodes (each must exist).
    Named(Vec<String>),
    /// The nodes matching this label selector when the simulator starts (at least one).
    Selector(String),
}

impl Default for Nodes {
    /// The local plane's kwok nodes ([`KWOK_NODES`]).
    fn default() -> Self {
        Nodes::Selector(KWOK_NODES.to_owned())
    }
}

impl Nodes {
    /// Parses a flag value: `name,name,…` or `selector:<label selector>`.
    pub fn parse(value: &str) -> Nodes {
        match value.strip_prefix("selector:") {
            Some(selector) => Nodes::Selector(selector.trim().to_owned()),
            None => Nodes::Named(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
        }
    }
}

/// Resolves `nodes` and labels each with `pool` (nodes already labelled so are not patched);
/// returns their names. Fails, before labelling anything, when the selection is empty, a named
/// node does not exist or a node is in another pool ([`needs_label`]). Nodes outside the
/// selection are never patched.
pub async fn claim(client: &kube::Client, nodes: &Nodes, pool: &str) -> anyhow::Result<Claimed> {
    let api: Api<Node> = Api::all(client.clone());
    let found: Vec<Node> = match nodes {
        Nodes::Named(names) => {
            anyhow::ensure!(!names.is_empty(), "no nodes named");
            let mut found = Vec::with_capacity(names.len());
            for name in names {
                let node = api.get_opt(name).await?;
                found.push(node.ok_or_else(|| anyhow::anyhow!("node {name} does not exist"))?);
            }
            found
        }
        Nodes::Selector(selector) => {
            let listed = api.list(&ListParams::default().labels(selector)).await?;
            anyhow::ensure!(!listed.items.is_empty(), "no node matches {selector:?}");
            listed.items
        }
    };
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let mut plan = Vec::with_capacity(found.len());
    for node in &found {
        let name = node.metadata.name.clone().unwrap_or_default();
        let label = needs_label(pool_of(node), pool)
            .map_err(|other| anyhow::anyhow!("node {name} is in pool {other:?}, not {pool:?}: another simulator's? Name other nodes, or relabel it first"))?;
        plan.push((name, label));
    }
    let mut claimed = BTreeSet::new();
    for (name, label) in plan {
        if label {
            let body = json!({"metadata": {"labels": {names::NODE_POOL: pool}}});
            api.patch(&name, &params, &Patch::Merge(&body)).await?;
            tracing::info!(node = %name, pool, "labelled node");
        }
        claimed.insert(name);
    }
    Ok(Claimed(claimed))
}

/// Whether a node whose pool label is `current` must be labelled to join `pool`: `Ok(true)`
/// without a pool label, `Ok(false)` when already in `pool`; `Err(current)` when it is in
/// another pool (never taken over).
pub fn needs_label<'a>(current: Option<&'a str>, pool: &str) -> Result<bool, &'a str> {
    match current {
        None | Some("") => Ok(true),
        Some(p) if p == pool => Ok(false),
        Some(other) => Err(other),
    }
}

/// The pool label of `node`.
pub fn pool_of(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::NODE_POOL))
        .map(String::as_str)
}

/// The names of the nodes a simulator owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claimed(BTreeSet<String>);

impl Claimed {
    /// Whether `node` is one of them.
    pub fn owns(&self, node: Option<&str>) -> bool {
        node.is_some_and(|n| self.0.contains(n))
    }

    /// The node names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.0.iter().cloned().collect()
    }
}

impl FromIterator<String> for Claimed {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Self {
        Claimed(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_name_nodes_or_select_them() {
        assert_eq!(
            Nodes::parse("a, b,,c"),
            Nodes::Named(vec!["a".into(), "b".into(), "c".into()])
        );
        assert_eq!(
            Nodes::parse("selector:type=kwok"),
            Nodes::Selector("type=kwok".into())
        );
        assert_eq!(Nodes::default(), Nodes::Selector(KWOK_NODES.into()));
    }

    #[test]
    fn a_node_in_another_pool_is_never_taken_over() {
        assert_eq!(needs_label(None, "gpu"), Ok(true));
        assert_eq!(needs_label(Some(""), "gpu"), Ok(true));
        assert_eq!(needs_label(Some("gpu"), "gpu"), Ok(false));
        assert_eq!(needs_label(Some("default"), "gpu"), Err("default"));
    }

    #[test]
    fn only_claimed_nodes_are_owned() {
        let claimed: Claimed = ["kwok-node-0".to_owned()].into_iter().collect();
        assert!(claimed.owns(Some("kwok-node-0")));
        assert!(!claimed.owns(Some("kwok-node-1")));
        assert!(!claimed.owns(None), "an unbound pod is nobody's yet");
    }
}
