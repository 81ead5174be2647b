//! Which workload objects a BindingPolicy selects: upstream's clause test
//! (`pkg/binding/selectors.go`), as a pure function of the object's identity and labels and
//! of its Namespace's labels.
//!
//! Contract of [`test_object`]:
//! - An object is selected when it passes at least one clause; the modulations of every
//!   passing clause merge: `createOnly`, `wantSingletonReportedState` and
//!   `wantMultiWECReportedState` by OR, `statusCollectors` by union.
//! - Within a clause every present criterion must hold:
//!   - `apiGroup`: absent matches any group, else it must equal the object's (`""` = core);
//!   - `resources`, `namespaces`, `objectNames`: empty or containing `"*"` matches any, else
//!     the object's resource / namespace / name must be listed. A cluster-scoped object has
//!     namespace `""`, so it passes an empty `namespaces` or `"*"` (upstream's code, looser
//!     than its API comment);
//!   - `objectSelectors`: empty matches any, else one selector must match the object's labels;
//!   - `namespaceSelectors`: ignored when empty or when any member is `{}`; else the object's
//!     Namespace must exist (a cluster-scoped object has none) and one selector must match its
//!     labels.
//! - Objects being deleted still match (the caller decides what deletion means).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::selector::{LabelSelector, any_matches};

/// One clause of a BindingPolicy's `downsync`, wire-compatible with upstream's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Clause {
    /// `apiGroup`: `None` matches every group.
    #[serde(default)]
    pub api_group: Option<String>,
    /// `resources`.
    #[serde(default)]
    pub resources: Vec<String>,
    /// `namespaces`.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// `namespaceSelectors`.
    #[serde(default)]
    pub namespace_selectors: Vec<LabelSelector>,
    /// `objectSelectors`.
    #[serde(default)]
    pub object_selectors: Vec<LabelSelector>,
    /// `objectNames`.
    #[serde(default)]
    pub object_names: Vec<String>,
    /// How matching objects are downsynced.
    #[serde(flatten)]
    pub modulation: Modulation,
}

/// How an object is downsynced and what status comes back, wire-compatible with upstream's
/// `DownsyncModulation`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Modulation {
    /// Create in the WEC when missing, never update.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_only: bool,
    /// StatusCollector names.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub status_collectors: BTreeSet<String>,
    /// Singleton status return requested.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub want_singleton_reported_state: bool,
    /// Multi-WEC status return requested.
    #[serde(
        rename = "wantMultiWECReportedState",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub want_multi_wec_reported_state: bool,
}

impl Modulation {
    /// Merges `other` in: ORs the flags, unions the collectors.
    pub fn merge(&mut self, other: &Modulation) {
        self.create_only |= other.create_only;
        self.want_singleton_reported_state |= other.want_singleton_reported_state;
        self.want_multi_wec_reported_state |= other.want_multi_wec_reported_state;
        self.status_collectors
            .extend(other.status_collectors.iter().cloned());
    }
}

/// What the clause test needs to know about a workload object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFacts<'a> {
    /// API group (`""` for core).
    pub group: &'a str,
    /// Resource (lowercase plural).
    pub resource: &'a str,
    /// Namespace (`""` for cluster-scoped).
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// The object's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The labels of the object's Namespace, `None` when it has none or it does not exist.
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
}

fn listed(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|v| v == "*" || v == value)
}

/// Whether `obj` passes `clause`.
pub fn clause_matches(clause: &Clause, obj: &ObjectFacts<'_>) -> bool {
    if clause.api_group.as_deref().is_some_and(|g| g != obj.group) {
        return false;
    }
    if !listed(&clause.resources, obj.resource)
        || !listed(&clause.namespaces, obj.namespace)
        || !listed(&clause.object_names, obj.name)
    {
        return false;
    }
    if !clause.object_selectors.is_empty() && !any_matches(&clause.object_selectors, obj.labels) {
        return false;
    }
    let ns_test = !clause.namespace_selectors.is_empty()
        && !clause
            .namespace_selectors
            .iter()
            .any(LabelSelector::is_empty);
    if ns_test {
        return obj
            .namespace_labels
            .is_some_and(|l| any_matches(&clause.namespace_selectors, l));
    }
    true
}

/// Tests `obj` against every clause: `Some(merged modulation)` when at least one passes.
pub fn test_object(clauses: &[Clause], obj: &ObjectFacts<'_>) -> Option<Modulation> {
    let mut out: Option<Modulation> = None;
    for c in clauses.iter().filter(|c| clause_matches(c, obj)) {
        out.get_or_insert_with(Modulation::default)
            .merge(&c.modulation);
    }
    out
}

/// True when `clause` needs the object's Namespace labels (so callers can skip the lookup).
pub fn needs_namespace_labels(clause: &Clause) -> bool {
    !clause.namespace_selectors.is_empty()
        && !clause
            .namespace_selectors
            .iter()
            .any(LabelSelector::is_empty)
}

#[cfg(test)]
#[path = "matching_tests.rs"]
mod tests;
