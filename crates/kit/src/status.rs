//! Status writes: through the status subresource, and only when something changed.
//!
//! Contract:
//! - [`differs`] is pure: it compares the live status with the desired one as JSON, treating a
//!   missing status like `{}`, a `null` field like an absent one, and `1` like `1.0`.
//! - [`patch_status_if_changed`] makes no request at all when [`differs`] says they are equal,
//!   so a reconcile with nothing to do makes zero writes; otherwise exactly one PATCH of the
//!   status subresource.
//! - [`observed_generation`] is the generation to record as `status.observedGeneration`.

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::core::object::HasStatus;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// `metadata.generation` of `obj`: the value to record as `status.observedGeneration`.
pub fn observed_generation<K: Resource>(obj: &K) -> Option<i64> {
    obj.meta().generation
}

/// Whether writing `desired` would change the live status (see the module docs).
pub fn differs(live: Option<&Value>, desired: &Value) -> bool {
    let empty = Value::Object(Map::new());
    let live = match live {
        None | Some(Value::Null) => &empty,
        Some(v) => v,
    };
    let desired = if desired.is_null() { &empty } else { desired };
    !same(live, desired)
}

/// Patches `obj`'s status to `desired` if it [`differs`] from `obj`'s live status.
///
/// Returns whether a write was made. `obj` should be the freshly observed object.
pub async fn patch_status_if_changed<K>(
    api: &Api<K>,
    obj: &K,
    desired: &K::Status,
    field_manager: &str,
) -> Result<bool, kube::Error>
where
    K: Resource + HasStatus + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
    K::Status: Serialize,
{
    let live = obj.status().map(serde_json::to_value).transpose();
    let live = live.map_err(kube::Error::SerdeError)?;
    let desired = serde_json::to_value(desired).map_err(kube::Error::SerdeError)?;
    if !differs(live.as_ref(), &desired) {
        return Ok(false);
    }
    // Server-side apply rather than a JSON merge patch: a field the status no longer carries
    // (an Option that became None, pruned here from the body) is removed because this field
    // manager owned it, without hand-built `null`s; ownership shows in managedFields; and it is
    // the same single-writer mechanism the operators use for children. `force` because the
    // controller is the status's only rightful writer.
    let dt = K::DynamicType::default();
    let body = serde_json::json!({
        "apiVersion": K::api_version(&dt),
        "kind": K::kind(&dt),
        "status": without_nulls(desired),
    });
    let params = PatchParams::apply(field_manager).force();
    api.patch_status(&obj.name_any(), &params, &Patch::Apply(body))
        .await?;
    Ok(true)
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let present = |m: &Map<String, Value>| m.iter().filter(|(_, v)| !v.is_null()).count();
            present(a) == present(b)
                && a.iter()
                    .filter(|(_, v)| !v.is_null())
                    .all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(v, w)| same(v, w))
        }
        (Value::Number(a), Value::Number(b)) if a.is_f64() || b.is_f64() => {
            a.as_f64() == b.as_f64()
        }
        _ => a == b,
    }
}

fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use serde_json::json;

    #[test]
    fn missing_status_equals_empty_desired() {
        assert!(!differs(None, &json!({})));
        assert!(!differs(None, &json!(null)));
        assert!(!differs(Some(&json!(null)), &json!({"phase": null})));
    }

    #[test]
    fn missing_status_differs_from_content() {
        assert!(differs(None, &json!({"phase": "Ready"})));
        assert!(differs(None, &json!({"conditions": []})));
    }

    #[test]
    fn null_field_equals_absent_field_both_ways() {
        let live = json!({"phase": "Ready"});
        assert!(!differs(
            Some(&live),
            &json!({"phase": "Ready", "message": null})
        ));
        let live = json!({"phase": "Ready", "message": null});
        assert!(!differs(Some(&live), &json!({"phase": "Ready"})));
    }

    #[test]
    fn nested_nulls_are_ignored_but_values_compared() {
        let live = json!({"a": {"b": 1, "c": null}});
        assert!(!differs(Some(&live), &json!({"a": {"b": 1}})));
        assert!(differs(Some(&live), &json!({"a": {"b": 2}})));
    }

    #[test]
    fn key_order_does_not_matter() {
        let live = json!({"a": 1, "b": "x"});
        assert!(!differs(Some(&live), &json!({"b": "x", "a": 1})));
    }

    #[test]
    fn integral_float_equals_integer() {
        assert!(!differs(Some(&json!({"ratio": 1})), &json!({"ratio": 1.0})));
        assert!(differs(Some(&json!({"ratio": 1})), &json!({"ratio": 1.5})));
    }

    #[test]
    fn arrays_compare_in_order() {
        let live = json!({"conditions": [{"type": "A"}, {"type": "B"}]});
        assert!(!differs(
            Some(&live),
            &json!({"conditions": [{"type": "A"}, {"type": "B"}]})
        ));
        assert!(differs(
            Some(&live),
            &json!({"conditions": [{"type": "B"}, {"type": "A"}]})
        ));
        assert!(differs(
            Some(&live),
            &json!({"conditions": [{"type": "A"}]})
        ));
    }

    #[test]
    fn live_extra_field_differs() {
        let live = json!({"phase": "Ready", "old": "x"});
        assert!(differs(Some(&live), &json!({"phase": "Ready"})));
    }

    #[test]
    fn nulls_are_pruned_from_the_apply_body() {
        let body = without_nulls(json!({"a": null, "b": {"c": null, "d": 1}, "e": [null, 2]}));
        assert_eq!(body, json!({"b": {"d": 1}, "e": [null, 2]}));
    }

    #[test]
    fn observed_generation_reads_metadata_generation() {
        let mut cm = ConfigMap {
            metadata: ObjectMeta::default(),
            ..ConfigMap::default()
        };
        assert_eq!(observed_generation(&cm), None);
        cm.metadata.generation = Some(4);
        assert_eq!(observed_generation(&cm), Some(4));
    }
}
