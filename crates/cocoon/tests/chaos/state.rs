//! The scenario's observable end state, normalized so two runs compare: phases, condition
//! reasons, which pods exist with which role and VM state, whether the migrated main is on
//! its target node, which `:hibernate` tags are in the registry; without UIDs, node names
//! (the scheduler picks them), timestamps, messages or the namespace.

use std::collections::BTreeMap;

use cocoon::crd::{CocoonHibernation, CocoonSet};
use cocoon::names;
use cocoon::pods::state;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn conditions(c: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> Value {
    let mut m: BTreeMap<&str, String> = BTreeMap::new();
    for c in c {
        m.insert(&c.type_, format!("{}/{}", c.status, c.reason));
    }
    json!(m)
}

/// The normalized state of namespace `ns`; `registry` is probed for `:hibernate` tags.
pub async fn capture(client: &Client, ns: &str, registry: &str) -> anyhow::Result<Value> {
    let lp = ListParams::default();
    let sets = Api::<CocoonSet>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items;
    let mut out_sets = BTreeMap::new();
    let mut targets = BTreeMap::new();
    for s in &sets {
        let st = s.status.clone().unwrap_or_default();
        let reported = st.agents.len() as i32 == st.desired_agents
            && st.toolboxes.len() as i32 == st.desired_toolboxes
            && st.agents.iter().all(|a| !a.vm_id.is_empty())
            && st.toolboxes.iter().all(|t| !t.vm_id.is_empty());
        if let Some(n) = &s.spec.node_name {
            targets.insert(s.name_any(), n.clone());
        }
        out_sets.insert(
            s.name_any(),
            json!({
                "phase": st.phase.map(|p| p.as_str()),
                "current": st.observed_generation == s.metadata.generation,
                "conditions": conditions(&st.conditions),
                "agents": [st.ready_agents, st.desired_agents],
                "toolboxes": [st.ready_toolboxes, st.desired_toolboxes],
                "vms_reported": reported,
                "hibernated_on_node": s.annotations().contains_key(names::ANN_HIBERNATED_ON_NODE),
                "finalizers": s.finalizers(),
            }),
        );
    }
    let mut pods = BTreeMap::new();
    let mut tags = BTreeMap::new();
    for p in Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items
    {
        let set = state::label(&p, names::LABEL_SET)
            .unwrap_or_default()
            .to_owned();
        let on_target = targets
            .get(&set)
            .map(|t| state::node_name(&p) == Some(t.as_str()));
        if let Some(vm) = state::vm_name(&p) {
            let there =
                testenv::registry::tag_exists(registry, None, vm, names::TAG_HIBERNATE).await?;
            tags.insert(p.name_any(), there);
        }
        pods.insert(
            p.name_any(),
            json!({
                "role": state::label(&p, names::LABEL_ROLE),
                "lifecycle": state::lifecycle_state(&p),
                "hibernate": state::hibernate_requested(&p),
                "restored": state::flag(&p, names::ANN_RESTORE),
                "live": state::vm_live(&p),
                "deleting": p.metadata.deletion_timestamp.is_some(),
                "on_target": on_target,
            }),
        );
    }
    let mut hibernations = BTreeMap::new();
    for h in Api::<CocoonHibernation>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items
    {
        let st = h.status.clone().unwrap_or_default();
        hibernations.insert(
            h.name_any(),
            json!({"phase": st.phase.map(|p| p.as_str()), "conditions": conditions(&st.conditions)}),
        );
    }
    Ok(json!({
        "sets": out_sets,
        "pods": pods,
        "hibernate_tags": tags,
        "hibernations": hibernations,
    }))
}
