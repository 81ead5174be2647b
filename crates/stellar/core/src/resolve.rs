//! A BindingPolicy's resolution and the Binding spec it becomes: which WECs (by the live
//! inventory) and which workload objects (by the clause test), as pure functions of indexes
//! the controller keeps from its watches.
//!
//! Contract:
//! - [`destinations`]: the inventory clusters whose labels match at least one cluster
//!   selector (none given: none), sorted by name. Availability is not considered (as upstream).
//! - [`resolve`]: every indexed object that passes the policy's clauses, with the merged
//!   modulation, keyed by [`ObjRef`] (so the result is ordered); objects being deleted still
//!   count. An object whose Namespace is unknown fails namespace selectors.
//! - [`binding_spec`]: the Binding's spec in upstream's shape (`workload.clusterScope`,
//!   `workload.namespaceScope`, `destinations`), entries in [`ObjRef`] order (group, version,
//!   resource, namespace, name), destinations sorted. Same resolution, same JSON: a no-op
//!   pass writes nothing.
//! - [`watched`]: whether a served resource is watched at all (upstream's exclusions).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::matching::{Clause, Modulation, ObjectFacts, test_object};
use crate::selector::{LabelSelector, any_matches};

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

/// Identity of a workload object in the WDS. Ordered as the Binding lists them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjRef {
    /// API group (`""` for core).
    pub group: String,
    /// The version it is watched in.
    pub version: String,
    /// Resource (lowercase plural).
    pub resource: String,
    /// Namespace (`""` for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What the index keeps about a workload object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjInfo {
    /// metadata.uid.
    pub uid: String,
    /// metadata.resourceVersion.
    pub resource_version: String,
    /// metadata.labels.
    pub labels: Labels,
}

/// The parts of a BindingPolicy its resolution depends on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// spec.clusterSelectors.
    pub cluster_selectors: Vec<LabelSelector>,
    /// spec.downsync.
    pub clauses: Vec<Clause>,
}

/// A policy's resolution.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resolution {
    /// The selected WECs.
    pub destinations: BTreeSet<String>,
    /// The selected objects with their resource versions and merged modulations.
    pub objects: BTreeMap<ObjRef, (String, Modulation)>,
}

/// The inventory clusters a policy selects.
pub fn destinations(
    selectors: &[LabelSelector],
    clusters: &BTreeMap<String, Labels>,
) -> BTreeSet<String> {
    clusters
        .iter()
        .filter(|(_, labels)| any_matches(selectors, labels))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Resolves `policy` against the indexes.
pub fn resolve(
    policy: &Policy,
    clusters: &BTreeMap<String, Labels>,
    namespaces: &BTreeMap<String, Labels>,
    objects: &BTreeMap<ObjRef, ObjInfo>,
) -> Resolution {
    let mut out = Resolution {
        destinations: destinations(&policy.cluster_selectors, clusters),
        objects: BTreeMap::new(),
    };
    for (r, info) in objects {
        let facts = ObjectFacts {
            group: &r.group,
            resource: &r.resource,
            namespace: &r.namespace,
            name: &r.name,
            labels: &info.labels,
            namespace_labels: (!r.namespace.is_empty())
                .then(|| namespaces.get(&r.namespace))
                .flatten(),
        };
        if let Some(m) = test_object(&policy.clauses, &facts) {
            out.objects
                .insert(r.clone(), (info.resource_version.clone(), m));
        }
    }
    out
}

fn modulation_fields(entry: &mut serde_json::Map<String, Value>, m: &Modulation) {
    if let Value::Object(fields) = serde_json::to_value(m).expect("a modulation serialises") {
        entry.extend(fields);
    }
}

/// The Binding spec of a resolution, in upstream's JSON shape.
pub fn binding_spec(res: &Resolution) -> Value {
    let mut cluster_scope = Vec::new();
    let mut namespace_scope = Vec::new();
    for (r, (rv, m)) in &res.objects {
        let mut e = serde_json::Map::new();
        e.insert("group".into(), json!(r.group));
        e.insert("version".into(), json!(r.version));
        e.insert("resource".into(), json!(r.resource));
        if !r.namespace.is_empty() {
            e.insert("namespace".into(), json!(r.namespace));
        }
        e.insert("name".into(), json!(r.name));
        e.insert("resourceVersion".into(), json!(rv));
        modulation_fields(&mut e, m);
        if r.namespace.is_empty() {
            cluster_scope.push(Value::Object(e));
        } else {
            namespace_scope.push(Value::Object(e));
        }
    }
    let mut workload = serde_json::Map::new();
    if !cluster_scope.is_empty() {
        workload.insert("clusterScope".into(), Value::Array(cluster_scope));
    }
    if !namespace_scope.is_empty() {
        workload.insert("namespaceScope".into(), Value::Array(namespace_scope));
    }
    let mut spec = serde_json::Map::new();
    spec.insert("workload".into(), Value::Object(workload));
    if !res.destinations.is_empty() {
        spec.insert(
            "destinations".into(),
            res.destinations
                .iter()
                .map(|d| json!({"clusterId": d}))
                .collect(),
        );
    }
    Value::Object(spec)
}

/// The error upstream reports on a policy when an object it selects requests singleton status
/// return but does not have exactly one qualified WEC: the union of the destinations of every
/// policy (in `all`) that requests singleton return for that object. At most four examples.
pub fn singleton_error(policy: &str, all: &BTreeMap<String, Resolution>) -> Option<String> {
    let own = all.get(policy)?;
    let mut examples = Vec::new();
    for (r, (_, m)) in &own.objects {
        if !m.want_singleton_reported_state {
            continue;
        }
        let qualified: BTreeSet<&String> = all
            .values()
            .filter(|res| {
                res.objects
                    .get(r)
                    .is_some_and(|(_, m)| m.want_singleton_reported_state)
            })
            .flat_map(|res| res.destinations.iter())
            .collect();
        if qualified.len() != 1 {
            examples.push(format!(
                "{}/{} {}/{}: {} WECs",
                r.group,
                r.resource,
                r.namespace,
                r.name,
                qualified.len()
            ));
        }
    }
    if examples.is_empty() {
        return None;
    }
    examples.truncate(4);
    Some(format!(
        "Singleton reported status return is requested but some objects have the wrong number of associated WECs, for example: [{}]",
        examples.join(", ")
    ))
}

/// Groups whose resources are never watched (upstream's exclusions): KubeStellar's own
/// objects are never downsynced, and API-machinery bookkeeping never is either.
pub const EXCLUDED_GROUPS: [&str; 5] = [
    "flowcontrol.apiserver.k8s.io",
    "discovery.k8s.io",
    "apiregistration.k8s.io",
    "coordination.k8s.io",
    "control.kubestellar.io",
];

/// (group, resource) pairs never watched (upstream's exclusions).
pub const EXCLUDED_RESOURCES: [(&str, &str); 7] = [
    ("", "events"),
    ("events.k8s.io", "events"),
    ("", "nodes"),
    ("", "endpoints"),
    ("storage.k8s.io", "csistoragecapacities"),
    ("storage.k8s.io", "csinodes"),
    ("control.kubestellar.io", "workstatuses"),
];

/// Whether a served resource is watched: it lists and watches, is not a subresource, and is
/// not excluded; `api_groups`, when not empty, further limits the groups (upstream's
/// `--api-groups`; `apiextensions.k8s.io` stays watched so CRDs come and go).
pub fn watched(group: &str, resource: &str, verbs: &[String], api_groups: &[String]) -> bool {
    let can = |v: &str| verbs.iter().any(|x| x == v);
    if resource.contains('/') || !can("list") || !can("watch") {
        return false;
    }
    if EXCLUDED_GROUPS.contains(&group) || EXCLUDED_RESOURCES.contains(&(group, resource)) {
        return false;
    }
    api_groups.is_empty()
        || group == "apiextensions.k8s.io"
        || api_groups.iter().any(|g| g == group)
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
