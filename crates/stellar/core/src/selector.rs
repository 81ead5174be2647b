//! Label selectors as Kubernetes evaluates them (`metav1.LabelSelector`): `matchLabels` and
//! `matchExpressions` ANDed; an empty selector matches everything.
//!
//! Contract: [`LabelSelector::matches`] agrees with apimachinery's
//! `LabelSelectorAsSelector(...).Matches(...)`, and [`LabelSelector::validate`] refuses what
//! that conversion refuses (unknown operator, values where none are allowed, no values where
//! some are required). An invalid selector matches nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A label selector, wire-compatible with `metav1.LabelSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be present with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements that must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

/// One requirement of a selector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values (required for In/NotIn, forbidden for Exists/DoesNotExist).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// True for `{}`: no labels, no expressions (it matches everything).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Why the selector is not valid, if it is not.
    pub fn validate(&self) -> Result<(), String> {
        for r in &self.match_expressions {
            match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Err(format!(
                        "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty (key {:?})",
                        r.key
                    ));
                }
                "Exists" | "DoesNotExist" if !r.values.is_empty() => {
                    return Err(format!(
                        "values: Invalid value: {:?}: values set must be empty for exists and does not exist (key {:?})",
                        r.values, r.key
                    ));
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            }
        }
        Ok(())
    }

    /// Whether `labels` satisfy the selector; an invalid selector matches nothing.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.validate().is_err() {
            return false;
        }
        let labels_ok = self
            .match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        labels_ok
            && self.match_expressions.iter().all(|r| {
                let got = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => got.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => got.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => got.is_some(),
                    "DoesNotExist" => got.is_none(),
                    _ => false,
                }
            })
    }
}

/// True when `labels` satisfy at least one of `selectors` (none given: false).
pub fn any_matches(selectors: &[LabelSelector], labels: &BTreeMap<String, String>) -> bool {
    selectors.iter().any(|s| s.matches(labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(json: serde_json::Value) -> LabelSelector {
        serde_json::from_value(json).expect("selector")
    }

    #[test]
    fn selectors_match_as_kubernetes_does() {
        use serde_json::json;
        let l = labels(&[("app", "nginx"), ("tier", "web")]);
        let cases = [
            (json!({}), true),
            (json!({"matchLabels": {"app": "nginx"}}), true),
            (
                json!({"matchLabels": {"app": "nginx", "tier": "db"}}),
                false,
            ),
            (json!({"matchLabels": {"missing": ""}}), false),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "nginx"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["nginx"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["x"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}),
                true,
            ),
            (
                json!({"matchLabels": {"app": "nginx"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]}),
                false,
            ),
            // Invalid selectors match nothing.
            (
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}),
                false,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(sel(s.clone()).matches(&l), want, "{s}");
        }
    }

    #[test]
    fn any_of_several_selectors() {
        let l = labels(&[("region", "east")]);
        let west = sel(serde_json::json!({"matchLabels": {"region": "west"}}));
        let east = sel(serde_json::json!({"matchLabels": {"region": "east"}}));
        assert!(!any_matches(&[], &l));
        assert!(!any_matches(std::slice::from_ref(&west), &l));
        assert!(any_matches(&[west, east], &l));
        assert!(LabelSelector::default().is_empty());
    }
}
