//! The status controller's decisions (upstream's `pkg/status`): which WECs' reported status
//! goes back into a WDS object, and how several are combined.
//!
//! Contract:
//! - [`plan`] (upstream's table): with S/M = some policy requests singleton/multi-WEC return
//!   for the object and QS/QM the union of those policies' destinations (the *qualified*
//!   WECs): S and M: Q = QS ∪ QM, one WEC ⇒ singleton from it, else multi over Q; S with one
//!   qualified WEC, or M with one ⇒ singleton; M with several ⇒ multi; otherwise clear.
//! - [`aggregate`]: multi-WEC status of several non-null statuses: Deployment (minimum of
//!   replicas/updatedReplicas/readyReplicas/availableReplicas/observedGeneration, maximum of
//!   unavailableReplicas, the first Progressing condition), ReplicaSet (minimum of the
//!   counters, the first ReplicaFailure condition), DaemonSet (minimum of the counters,
//!   maximum of numberMisscheduled); other kinds: none. Zero counters and empty conditions
//!   are omitted, as the API server stores them.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// What the status controller does for one WDS object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Copy the status reported from this WEC.
    Singleton(String),
    /// Combine the statuses reported from these WECs.
    Multi(BTreeSet<String>),
    /// Clear what was returned before (`.status: {}`, labels removed).
    Clear,
}

/// Decides the [`Plan`] (see the module contract).
pub fn plan(s: bool, qs: &BTreeSet<String>, m: bool, qm: &BTreeSet<String>) -> Plan {
    let one = |q: &BTreeSet<String>| (q.len() == 1).then(|| q.iter().next().cloned()).flatten();
    if s && m {
        let q: BTreeSet<String> = qs.union(qm).cloned().collect();
        return match one(&q) {
            Some(w) => Plan::Singleton(w),
            None if q.is_empty() => Plan::Clear,
            None => Plan::Multi(q),
        };
    }
    if s && let Some(w) = one(qs) {
        return Plan::Singleton(w);
    }
    if m && let Some(w) = one(qm) {
        return Plan::Singleton(w);
    }
    if m && qm.len() > 1 {
        return Plan::Multi(qm.clone());
    }
    Plan::Clear
}

fn fold(statuses: &[Value], field: &str, pick: fn(i64, i64) -> i64) -> Option<i64> {
    statuses
        .iter()
        .map(|s| s[field].as_i64().unwrap_or(0))
        .reduce(pick)
}

fn first_condition(statuses: &[Value], types: &[&str]) -> Value {
    statuses
        .iter()
        .flat_map(|s| s["conditions"].as_array().cloned().unwrap_or_default())
        .find(|c| types.contains(&c["type"].as_str().unwrap_or_default()))
        .map(|c| json!([c]))
        .unwrap_or_else(|| json!([]))
}

/// Multi-WEC status of `group/kind` from several statuses (see the module contract).
pub fn aggregate(group: &str, kind: &str, statuses: &[Value]) -> Option<Value> {
    let (mins, maxes, conds): (&[&str], &[&str], &[&str]) = match (group, kind) {
        ("apps", "Deployment") => (
            &[
                "replicas",
                "updatedReplicas",
                "readyReplicas",
                "availableReplicas",
                "observedGeneration",
            ],
            &["unavailableReplicas"],
            &["Progressing", "ProgressDeadlineExceeded"],
        ),
        ("apps", "ReplicaSet") => (
            &[
                "replicas",
                "fullyLabeledReplicas",
                "readyReplicas",
                "availableReplicas",
                "observedGeneration",
            ],
            &[],
            &["ReplicaFailure"],
        ),
        ("apps", "DaemonSet") => (
            &[
                "currentNumberScheduled",
                "desiredNumberScheduled",
                "numberReady",
                "observedGeneration",
                "updatedNumberScheduled",
                "numberAvailable",
                "numberUnavailable",
            ],
            &["numberMisscheduled"],
            &[],
        ),
        _ => return None,
    };
    if statuses.is_empty() {
        return None;
    }
    let mut out = Map::new();
    for f in mins {
        out.insert((*f).into(), json!(fold(statuses, f, i64::min)));
    }
    for f in maxes {
        out.insert((*f).into(), json!(fold(statuses, f, i64::max)));
    }
    if !conds.is_empty() {
        out.insert("conditions".into(), first_condition(statuses, conds));
    }
    // As the API server stores it (Go's omitempty): no zero counters, no empty conditions;
    // otherwise every pass would see a difference and rewrite.
    out.retain(|_, v| !(v == &json!(0) || v == &json!([])));
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(xs: &[&str]) -> BTreeSet<String> {
        xs.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn plan_follows_upstreams_table() {
        let cases = [
            (
                true,
                set(&["a"]),
                false,
                set(&[]),
                Plan::Singleton("a".into()),
            ),
            (true, set(&["a", "b"]), false, set(&[]), Plan::Clear),
            (true, set(&[]), false, set(&[]), Plan::Clear),
            (
                false,
                set(&[]),
                true,
                set(&["b"]),
                Plan::Singleton("b".into()),
            ),
            (
                false,
                set(&[]),
                true,
                set(&["a", "b"]),
                Plan::Multi(set(&["a", "b"])),
            ),
            (
                true,
                set(&["a"]),
                true,
                set(&["a"]),
                Plan::Singleton("a".into()),
            ),
            (
                true,
                set(&["a"]),
                true,
                set(&["b"]),
                Plan::Multi(set(&["a", "b"])),
            ),
            (false, set(&["a"]), false, set(&["a"]), Plan::Clear),
        ];
        for (s, qs, m, qm, want) in cases {
            assert_eq!(plan(s, &qs, m, &qm), want, "{s} {qs:?} {m} {qm:?}");
        }
    }

    #[test]
    fn deployments_aggregate_by_min_and_max() {
        let a = json!({"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2,
                       "observedGeneration": 3, "unavailableReplicas": 0,
                       "conditions": [{"type": "Available"}, {"type": "Progressing", "status": "True"}]});
        let b = json!({"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 2,
                       "observedGeneration": 2, "unavailableReplicas": 1});
        assert_eq!(
            aggregate("apps", "Deployment", &[a, b]),
            Some(
                json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1,
                        "observedGeneration": 2, "unavailableReplicas": 1,
                        "conditions": [{"type": "Progressing", "status": "True"}]})
            )
        );
        assert_eq!(aggregate("", "ConfigMap", &[json!({})]), None);
        assert_eq!(aggregate("apps", "Deployment", &[]), None);
    }
}
