//! Makes generated CRDs read as upstream's controller-gen output does, so they match OCM's and
//! KubeStellar's field for field:
//! - no `nullable` (upstream prunes an explicit null; only fields marked `+nullable` keep it);
//! - no zero-value or object `default`s (`""`, `false`, `[]`, any object) that serde defaults
//!   make schemars write: upstream defaults only scalars, where it says so
//!   (`leaseDurationSeconds: 60`, …);
//! - every `metav1.Condition` list item carries apimachinery's validations (lengths, patterns,
//!   the status enum), as controller-gen copies them from the Go markers.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// Applies the module's rules to `crd`; `nullable` stays on the property paths in `keep`
/// (dot-separated from the schema root, `[]` for list items).
pub fn upstream_style(crd: CustomResourceDefinition, keep: &[&str]) -> CustomResourceDefinition {
    let mut v = serde_json::to_value(&crd).expect("a CRD serialises");
    for version in v["spec"]["versions"].as_array_mut().into_iter().flatten() {
        let root = &mut version["schema"]["openAPIV3Schema"];
        walk(root, "", keep);
    }
    serde_json::from_value(v).expect("the adjusted CRD deserialises")
}

fn walk(s: &mut Value, path: &str, keep: &[&str]) {
    let Some(obj) = s.as_object_mut() else {
        return;
    };
    if !keep.contains(&path) {
        obj.remove("nullable");
    }
    if obj.get("default").is_some_and(is_zero) {
        obj.remove("default");
    }
    // An int-or-string keeps its two alternatives (kube's rewriter empties them).
    if obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        && obj.contains_key("anyOf")
    {
        obj.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    if is_condition(obj) {
        decorate_condition(obj);
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for (k, p) in props.iter_mut() {
            walk(p, &format!("{path}.{k}"), keep);
        }
    }
    if let Some(items) = obj.get_mut("items") {
        walk(items, &format!("{path}[]"), keep);
    }
    if let Some(ap @ Value::Object(_)) = obj.get_mut("additionalProperties") {
        walk(ap, &format!("{path}{{}}"), keep);
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Object(_) => true,
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn is_condition(obj: &serde_json::Map<String, Value>) -> bool {
    let Some(Value::Object(props)) = obj.get("properties") else {
        return false;
    };
    let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys == [
        "lastTransitionTime",
        "message",
        "observedGeneration",
        "reason",
        "status",
        "type",
    ]
}

// apimachinery's `metav1.Condition` markers.
fn decorate_condition(obj: &mut serde_json::Map<String, Value>) {
    let props = obj["properties"].as_object_mut().expect("checked");
    let mut set = |k: &str, extra: Value| {
        if let (Some(Value::Object(p)), Value::Object(e)) = (props.get_mut(k), extra) {
            p.extend(e);
        }
    };
    set("message", json!({"maxLength": 32768}));
    set("observedGeneration", json!({"minimum": 0}));
    set(
        "reason",
        json!({"maxLength": 1024, "minLength": 1, "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"}),
    );
    set("status", json!({"enum": ["True", "False", "Unknown"]}));
    set(
        "type",
        json!({"maxLength": 316, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_defaults_and_nullables_go_and_conditions_get_validations() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "a": {"type": "string", "default": "", "nullable": true},
                "b": {"type": "integer", "default": 60},
                "t": {"type": "string", "nullable": true},
                "conditions": {"type": "array", "items": {"type": "object", "properties": {
                    "lastTransitionTime": {"type": "string"}, "message": {"type": "string"},
                    "observedGeneration": {"type": "integer"}, "reason": {"type": "string"},
                    "status": {"type": "string"}, "type": {"type": "string"}}}}
            }
        });
        walk(&mut s, "", &[".t"]);
        assert_eq!(s["properties"]["a"], json!({"type": "string"}));
        assert_eq!(s["properties"]["b"]["default"], 60);
        assert_eq!(s["properties"]["t"]["nullable"], true);
        let c = &s["properties"]["conditions"]["items"]["properties"];
        assert_eq!(c["status"]["enum"], json!(["True", "False", "Unknown"]));
        assert_eq!(c["message"]["maxLength"], 32768);
    }
}
