//! The RedisCluster defaulting webhook: what upstream's defaulter does that the schema's
//! `default`s cannot, as JSON patch operations on the request's object.
//!
//! The schema defaults absent fields (`mode`, `instances`, `imageName`,
//! `primaryUpdateStrategy`, `storage.type`, `storage.size`, `enablePodDisruptionBudget`,
//! `primaryIsolation.*`, `memory.maxMemoryPolicy`, `nodeMaintenanceWindow.reusePVC`,
//! `replicaMode.source.port`), and the API server defaults again after this webhook patched.
//! Upstream's defaulter, a Go round trip, also turns explicit zero values into defaults, and
//! Go's `omitempty` drops zero values the schema would reject; [`defaults`] does the same so
//! every manifest upstream accepts is accepted here:
//! - no `spec` (or no `spec.storage`): `{type: pvc, size: 1Gi}` storage is added (upstream's
//!   `storage` is never omitted);
//! - `mode: ""` → `standalone`; `instances: 0` → 1; `imageName: ""` → `redis:7.2`;
//!   `primaryUpdateStrategy: ""` → `unsupervised`; `storage.type: ""` → `pvc`; a zero
//!   `storage.size` → `1Gi`; `memory.maxMemoryPolicy: ""` → `noeviction`;
//! - `shards: 0` and `replicaMode.source.port: 0` are removed (Go omits them; the port is then
//!   defaulted to 6379);
//! - `resources.requests` absent: memory 128Mi and CPU 100m, each capped at its limit when a
//!   limit is set (upstream sets them even above the limit, which makes every pod invalid).

use serde_json::{Map, Value, json};

use crate::quantity;

const DEFAULT_MEMORY_REQUEST: &str = "128Mi";
const DEFAULT_CPU_REQUEST: &str = "100m";

/// The JSON patch operations that default `obj` (a RedisCluster), in order.
pub fn defaults(obj: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    let empty = Map::new();
    let spec = match obj.get("spec") {
        Some(Value::Object(m)) => m,
        _ => {
            ops.push(op("add", "/spec", json!({})));
            &empty
        }
    };
    let mut replace_zero = |key: &str, zero: Value, value: Value| {
        if spec.get(key) == Some(&zero) {
            ops.push(op("replace", &format!("/spec/{key}"), value));
        }
    };
    replace_zero("mode", json!(""), json!("standalone"));
    replace_zero(
        "imageName",
        json!(""),
        json!(crate::names::DEFAULT_REDIS_IMAGE),
    );
    replace_zero("primaryUpdateStrategy", json!(""), json!("unsupervised"));
    let mode = spec.get("mode").and_then(Value::as_str).unwrap_or("");
    if mode != "cluster" {
        match spec.get("instances") {
            None | Some(Value::Null) => ops.push(op("add", "/spec/instances", json!(1))),
            Some(v) if v.as_i64() == Some(0) => {
                ops.push(op("replace", "/spec/instances", json!(1)))
            }
            _ => {}
        }
    }
    if spec.get("shards").and_then(Value::as_i64) == Some(0) {
        ops.push(json!({"op": "remove", "path": "/spec/shards"}));
    }
    storage(spec, &mut ops);
    resources(spec, &mut ops);
    if let Some(Value::Object(memory)) = spec.get("memory")
        && memory.get("maxMemoryPolicy") == Some(&json!(""))
    {
        ops.push(op(
            "replace",
            "/spec/memory/maxMemoryPolicy",
            json!("noeviction"),
        ));
    }
    if spec
        .get("replicaMode")
        .and_then(|r| r.get("source"))
        .and_then(|s| s.get("port"))
        .and_then(Value::as_i64)
        == Some(0)
    {
        ops.push(json!({"op": "remove", "path": "/spec/replicaMode/source/port"}));
    }
    ops
}

fn op(kind: &str, path: &str, value: Value) -> Value {
    json!({"op": kind, "path": path, "value": value})
}

fn storage(spec: &Map<String, Value>, ops: &mut Vec<Value>) {
    let Some(Value::Object(storage)) = spec.get("storage") else {
        ops.push(op(
            "add",
            "/spec/storage",
            json!({"type": "pvc", "size": "1Gi"}),
        ));
        return;
    };
    if storage.get("type") == Some(&json!("")) {
        ops.push(op("replace", "/spec/storage/type", json!("pvc")));
    }
    let zero_size = match storage.get("size") {
        None | Some(Value::Null) => true,
        Some(v) => quantity::from_json(v) == Some(0),
    };
    if zero_size {
        ops.push(op("add", "/spec/storage/size", json!("1Gi")));
    }
}

fn resources(spec: &Map<String, Value>, ops: &mut Vec<Value>) {
    let resources = spec.get("resources").and_then(Value::as_object);
    if resources.is_some_and(|r| r.get("requests").is_some_and(|q| !q.is_null())) {
        return;
    }
    let limits = resources
        .and_then(|r| r.get("limits"))
        .and_then(Value::as_object);
    let capped = |name: &str, default: &str| -> Value {
        let limit = limits.and_then(|l| l.get(name));
        match (
            limit.and_then(quantity::from_json),
            quantity::parse(default),
        ) {
            (Some(l), Some(d)) if l < d => limit.cloned().unwrap_or_else(|| json!(default)),
            _ => json!(default),
        }
    };
    let requests = json!({
        "memory": capped("memory", DEFAULT_MEMORY_REQUEST),
        "cpu": capped("cpu", DEFAULT_CPU_REQUEST),
    });
    match resources {
        Some(_) => ops.push(op("add", "/spec/resources/requests", requests)),
        None => ops.push(op("add", "/spec/resources", json!({"requests": requests}))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(obj: &Value) -> Value {
        // A small JSON patch applier for the operations `defaults` emits.
        let mut out = obj.clone();
        for o in defaults(obj) {
            let path = o["path"].as_str().expect("path");
            let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let (last, parents) = parts.split_last().expect("non-empty path");
            let mut cur = &mut out;
            for p in parents {
                cur = cur.get_mut(*p).expect("parent exists");
            }
            let map = cur.as_object_mut().expect("object parent");
            match o["op"].as_str() {
                Some("remove") => {
                    map.remove(*last).expect("removed key exists");
                }
                Some("replace") => {
                    assert!(map.contains_key(*last), "replace of a missing {path}");
                    map.insert((*last).to_owned(), o["value"].clone());
                }
                _ => {
                    map.insert((*last).to_owned(), o["value"].clone());
                }
            }
        }
        out
    }

    const STORAGE: &str = r#"{"type":"pvc","size":"1Gi"}"#;

    fn storage() -> Value {
        serde_json::from_str(STORAGE).expect("json")
    }

    #[test]
    fn upstream_zero_values_become_defaults() {
        let cases = [
            (
                json!({"metadata": {"name": "a"}}),
                json!({"instances": 1, "storage": storage(),
                    "resources": {"requests": {"memory": "128Mi", "cpu": "100m"}}}),
            ),
            (
                json!({"spec": {"mode": "", "instances": 0, "imageName": "", "primaryUpdateStrategy": "",
                    "shards": 0, "storage": {"type": "", "size": "0"}, "resources": {}}}),
                json!({"mode": "standalone", "instances": 1, "imageName": "redis:7.2",
                    "primaryUpdateStrategy": "unsupervised", "storage": storage(),
                    "resources": {"requests": {"memory": "128Mi", "cpu": "100m"}}}),
            ),
            (
                json!({"spec": {"instances": 3, "storage": {"size": 0},
                    "memory": {"maxMemoryPolicy": ""},
                    "replicaMode": {"enabled": true, "source": {"host": "h", "port": 0}},
                    "resources": {"requests": {}}}}),
                json!({"instances": 3, "storage": {"size": "1Gi"},
                    "memory": {"maxMemoryPolicy": "noeviction"},
                    "replicaMode": {"enabled": true, "source": {"host": "h"}},
                    "resources": {"requests": {}}}),
            ),
        ];
        for (obj, want) in cases {
            assert_eq!(apply(&obj)["spec"], want, "{obj}");
        }
    }

    #[test]
    fn requests_are_capped_at_limits() {
        let obj = json!({"spec": {"instances": 1, "storage": storage(),
            "resources": {"limits": {"memory": "64Mi", "cpu": "2"}}}});
        assert_eq!(
            apply(&obj)["spec"]["resources"],
            json!({"limits": {"memory": "64Mi", "cpu": "2"},
                "requests": {"memory": "64Mi", "cpu": "100m"}})
        );
        let obj = json!({"spec": {"instances": 1, "storage": storage(),
            "resources": {"limits": {"cpu": "50m"}}}});
        assert_eq!(
            apply(&obj)["spec"]["resources"]["requests"],
            json!({"memory": "128Mi", "cpu": "50m"})
        );
    }

    #[test]
    fn a_complete_spec_is_left_alone() {
        let obj = json!({"spec": {"mode": "sentinel", "instances": 3, "imageName": "redis:7.4",
            "storage": {"type": "emptyDir", "size": "2Gi"},
            "resources": {"requests": {"memory": "1Gi"}}}});
        assert_eq!(defaults(&obj), Vec::<Value>::new());
    }
}
