//! The work agent's and the status add-on's pure decisions (OCM's `pkg/work/spoke` and
//! kubestellar/ocm-status-addon).
//!
//! Contract:
//! - [`apply_rank`]: OCM's kind order (namespaces and CRDs first, then cluster
//!   configuration, RBAC, service accounts and policies, config and storage, services,
//!   workloads, admission webhooks and API services last; unknown kinds after workloads).
//! - [`contains`]: whether a live object already carries everything a manifest says
//!   (maps: every key of the manifest present with a contained value; arrays: same length,
//!   element-wise contained; scalars: equal). Server-side defaults in the live object do not
//!   count as differences, so an applied object is not rewritten on every pass.
//! - [`merge_for_update`]: the object to PUT for the `Update` strategy: the manifest, with the
//!   live object's labels, annotations, owner references and finalizers merged in (the
//!   manifest wins per key) and the live resourceVersion.
//! - [`prune`]: what to do with a resource the ManifestWork no longer carries: delete it
//!   when this AppliedManifestWork is its only AppliedManifestWork owner, otherwise only drop
//!   this owner (how overlapping BindingPolicies share a WEC object).
//! - [`work_status_name`]: upstream's WorkStatus name
//!   `<AMW UID>-<group+version lowercased, '/' removed>-<kind lowercased>-<ns>-<name>`,
//!   truncated to 253 characters.
//! - [`status_skipped`]: kinds the status add-on reports nothing for.

use serde_json::{Map, Value};

/// OCM's apply order rank of a kind (lower first).
pub fn apply_rank(kind: &str) -> usize {
    const ORDER: [&str; 33] = [
        "Namespace",
        "NetworkPolicy",
        "ResourceQuota",
        "LimitRange",
        "PodSecurityPolicy",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Secret",
        "SecretList",
        "ConfigMap",
        "StorageClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleList",
        "ClusterRoleBinding",
        "ClusterRoleBindingList",
        "Role",
        "RoleList",
        "RoleBinding",
        "RoleBindingList",
        "Service",
        "DaemonSet",
        "Pod",
        "ReplicationController",
        "ReplicaSet",
        "Deployment",
        "HorizontalPodAutoscaler",
        "StatefulSet",
        "Job",
        "CronJob",
        "IngressClass",
    ];
    const LAST: [&str; 3] = [
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ];
    if let Some(i) = ORDER.iter().position(|k| *k == kind) {
        return i;
    }
    if let Some(i) = LAST.iter().position(|k| *k == kind) {
        return ORDER.len() + 1 + i;
    }
    ORDER.len()
}

/// Whether `live` carries everything `want` says (see the module contract).
pub fn contains(live: &Value, want: &Value) -> bool {
    match (live, want) {
        (Value::Object(l), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| wv.is_null() || l.get(k).is_some_and(|lv| contains(lv, wv))),
        (Value::Array(l), Value::Array(w)) => {
            l.len() == w.len() && l.iter().zip(w).all(|(a, b)| contains(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

fn merged_map(live: &Value, want: &Value) -> Option<Value> {
    let mut out: Map<String, Value> = live.as_object().cloned().unwrap_or_default();
    if let Some(w) = want.as_object() {
        out.extend(w.clone());
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

fn merged_list(live: &Value, want: &Value, key: &str) -> Option<Value> {
    let mut out: Vec<Value> = live.as_array().cloned().unwrap_or_default();
    for w in want.as_array().into_iter().flatten() {
        match out.iter_mut().find(|l| l[key] == w[key]) {
            Some(l) => *l = w.clone(),
            None => out.push(w.clone()),
        }
    }
    (!out.is_empty()).then_some(Value::Array(out))
}

/// The object to PUT for the `Update` strategy (see the module contract).
pub fn merge_for_update(live: &Value, manifest: &Value) -> Value {
    let mut out = manifest.clone();
    let lm = &live["metadata"];
    let wm = &manifest["metadata"];
    let meta = out.as_object_mut().map(|o| {
        o.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
    });
    if let Some(Value::Object(m)) = meta {
        for (field, v) in [
            ("labels", merged_map(&lm["labels"], &wm["labels"])),
            (
                "annotations",
                merged_map(&lm["annotations"], &wm["annotations"]),
            ),
            (
                "ownerReferences",
                merged_list(&lm["ownerReferences"], &wm["ownerReferences"], "uid"),
            ),
        ] {
            match v {
                Some(v) => m.insert(field.into(), v),
                None => m.remove(field),
            };
        }
        if let Some(f) = lm.get("finalizers") {
            m.insert("finalizers".into(), f.clone());
        }
        if let Some(rv) = lm.get("resourceVersion") {
            m.insert("resourceVersion".into(), rv.clone());
        }
    }
    out
}

/// What to do with a resource a ManifestWork dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prune {
    /// This AppliedManifestWork is its only AppliedManifestWork owner: delete it.
    Delete,
    /// Other AppliedManifestWorks own it too: only remove this owner reference.
    Disown,
    /// Not ours (no owner reference of this AppliedManifestWork): leave it.
    Leave,
}

/// Decides [`Prune`] from the resource's owner references (`(kind, uid)` pairs) and this
/// AppliedManifestWork's UID. An orphaning owner reference (UID with a trailing `-`) counts
/// as this AppliedManifestWork's but never makes it the deleting owner.
pub fn prune(owners: &[(String, String)], amw_uid: &str) -> Prune {
    let amw: Vec<&str> = owners
        .iter()
        .filter(|(k, _)| k == "AppliedManifestWork")
        .map(|(_, u)| u.as_str())
        .collect();
    let orphan_uid = format!("{amw_uid}-");
    if amw.contains(&orphan_uid.as_str()) {
        return Prune::Disown;
    }
    if !amw.contains(&amw_uid) {
        return Prune::Leave;
    }
    if amw.iter().all(|u| *u == amw_uid) {
        Prune::Delete
    } else {
        Prune::Disown
    }
}

/// Upstream's WorkStatus name (see the module contract).
pub fn work_status_name(
    amw_uid: &str,
    group: &str,
    version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> String {
    let gv = if group.is_empty() {
        version.to_lowercase()
    } else {
        format!("{group}{version}").to_lowercase()
    };
    let mut s = format!("{amw_uid}-{gv}-{}-{namespace}-{name}", kind.to_lowercase());
    s.truncate(253);
    s
}

/// Kinds the status add-on skips (no WorkStatus): RBAC, Secrets, ConfigMaps and
/// ServiceAccounts.
pub fn status_skipped(group: &str, resource: &str) -> bool {
    matches!(
        (group, resource),
        ("", "secrets" | "configmaps" | "serviceaccounts")
            | (
                "rbac.authorization.k8s.io",
                "roles" | "rolebindings" | "clusterroles" | "clusterrolebindings"
            )
    )
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;
