//! Status writes: through the status subresource, and only when something changed.
//!
//! Contract:
//! - [`differs`] is pure: it compares the live status with the desired one as JSON, treating a
//!   missing status like `{}`, a `null` field like an absent one, and `1` like `1.0`.
//! - [`patch_status_if_changed`] makes no request at all when [`differs`] says they are equal,
//!   so a reconcile with nothing to do makes zero writes; otherwise exactly one PATCH of the
//!   status subresource.
//! - [`patch_status_if_changed_at`] does the same, conditional on `obj`'s `resourceVersion`:
//!   when the object changed since `obj` was read (a pass working from a watch cache that has
//!   not yet seen a newer write), the API server answers 409 Conflict and nothing is written
//!   (check with [`is_conflict`]); when it writes, it returns the object as stored, whose
//!   `resourceVersion` the caller's next conditional write starts from. Opt-in: the
//!   unconditional [`patch_status_if_changed`] is unchanged.
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
    let written = write(api, obj, desired, field_manager, None).await?;
    Ok(written.is_some())
}

/// Like [`patch_status_if_changed`], returning the object as the write left it (`None` when
/// nothing was written): its resourceVersion tells a cache that has caught up with the write
/// from one that has not.
pub async fn write_status_if_changed<K>(
    api: &Api<K>,
    obj: &K,
    desired: &K::Status,
    field_manager: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + HasStatus + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
    K::Status: Serialize,
{
    write(api, obj, desired, field_manager, None).await
}

/// Patches `obj`'s status to `desired` if it [`differs`] from `obj`'s live status, only if the
/// object's `resourceVersion` is still `obj`'s (see the module docs).
///
/// Returns the object as stored after the write, or `None` when no write was needed. A 409
/// Conflict ([`is_conflict`]) means `obj` is older than the stored object: read it again. An
/// `obj` without a `resourceVersion` (never read from the API server) is written
/// unconditionally.
pub async fn patch_status_if_changed_at<K>(
    api: &Api<K>,
    obj: &K,
    desired: &K::Status,
    field_manager: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + HasStatus + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
    K::Status: Serialize,
{
    let rv = obj.meta().resource_version.clone();
    write(api, obj, desired, field_manager, rv.as_deref()).await
}

/// Whether `err` is the API server's 409 Conflict (a write conditional on a `resourceVersion`
/// that is no longer the object's).
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

async fn write<K>(
    api: &Api<K>,
    obj: &K,
    desired: &K::Status,
    field_manager: &str,
    resource_version: Option<&str>,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + HasStatus + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
    K::Status: Serialize,
{
    let live = obj.status().map(serde_json::to_value).transpose();
    let live = live.map_err(kube::Error::SerdeError)?;
    let desired = serde_json::to_value(desired).map_err(kube::Error::SerdeError)?;
    if !differs(live.as_ref(), &desired) {
        return Ok(None);
    }
    // Server-side apply rather than a JSON merge patch: a field the status no longer carries
    // (an Option that became None, pruned here from the body) is removed because this field
    // manager owned it, without hand-built `null`s; ownership shows in managedFields; and it is
    // the same single-writer mechanism the operators use for children. `force` because the
    // controller is the status's only rightful writer.
    let dt = K::DynamicType::default();
    let body = apply_body(
        &K::api_version(&dt),
        &K::kind(&dt),
        desired,
        resource_version,
    );
    let params = PatchParams::apply(field_manager).force();
    let stored = api
        .patch_status(&obj.name_any(), &params, &Patch::Apply(body))
        .await?;
    Ok(Some(stored))
}

/// The server-side apply body of a status write; a `resourceVersion` in it is a precondition
/// (the API server refuses the apply with 409 Conflict when the object's differs).
fn apply_body(
    api_version: &str,
    kind: &str,
    status: Value,
    resource_version: Option<&str>,
) -> Value {
    let mut body = serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "status": without_nulls(status),
    });
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({"resourceVersion": rv});
    }
    body
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
    fn the_apply_body_carries_the_resource_version_only_when_guarded() {
        let open = apply_body("v1", "ConfigMap", json!({"a": 1, "b": null}), None);
        assert_eq!(
            open,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "status": {"a": 1}})
        );
        let guarded = apply_body("v1", "ConfigMap", json!({"a": 1}), Some("42"));
        assert_eq!(
            guarded,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"resourceVersion": "42"},
                "status": {"a": 1},
            })
        );
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
