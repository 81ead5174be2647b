//! What the transport does to a workload object on its way from the WDS to one WEC, and how
//! it wraps it (upstream's `pkg/transport/generic`, `filtering/`, `pkg/jsonpath`,
//! `pkg/customize`), as pure functions.
//!
//! Contract:
//! - [`clean`]: the WEC-independent built-in transforms: drop `metadata.managedFields`,
//!   `finalizers`, `generation`, `ownerReferences`, `selfLink`, `resourceVersion`, `uid`,
//!   `generateName`, the `kubectl.kubernetes.io/last-applied-configuration` annotation and
//!   `.status`; Service (core v1) and Job (batch v1) cleaning as upstream.
//! - [`parse_path`] / [`remove_path`]: CustomTransform paths, upstream's subset: `$` then one
//!   or more `.name` (identifier-shaped) or `["…"]` segments; a bare `$` is an error; a path
//!   that does not resolve through maps removes nothing.
//! - [`properties`]: a WEC's customization properties, later overriding earlier:
//!   `clusterName` → ManagedCluster labels → annotations → property ConfigMap `data`; only
//!   keys that are Go identifiers.
//! - [`expand`]: per-WEC template expansion of every string containing `{{` (map keys are
//!   not expanded). Supported actions: `{{ .key }}` (with optional `-` trim markers); a
//!   missing key or any other action is an error (deliberately a subset of Go's
//!   `text/template`; docs/stellar.md).
//! - [`manifest_work_name`]: `<Binding UID>-<WDS name>-<object UID>` (upstream's name with one
//!   object per ManifestWork).
//! - [`manifest_work_spec`] and [`content_hash`]: the ManifestWork spec of one object and a
//!   digest of it, so the transport rewrites a ManifestWork only when its content changed
//!   (not on every change of any object of the Binding, as upstream).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Removes what must not travel (see the module contract), in place.
pub fn clean(obj: &mut Value) {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "managedFields",
            "finalizers",
            "generation",
            "ownerReferences",
            "selfLink",
            "resourceVersion",
            "uid",
            "generateName",
        ] {
            meta.remove(f);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Service") => clean_service(obj),
        ("batch/v1", "Job") => clean_job(obj),
        _ => {}
    }
}

fn clean_service(obj: &mut Value) {
    let keep_node_ports = obj["metadata"]["annotations"]["control.kubestellar.io/preserve"]
        .as_str()
        == Some("nodeport");
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for f in [
        "ipFamilies",
        "externalTrafficPolicy",
        "internalTrafficPolicy",
        "ipFamilyPolicy",
        "sessionAffinity",
    ] {
        spec.remove(f);
    }
    if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
        spec.remove("clusterIP");
    }
    if let Some(ips) = spec.get("clusterIPs").and_then(Value::as_array) {
        let none: Vec<Value> = ips
            .iter()
            .filter(|v| v.as_str() == Some("None"))
            .cloned()
            .collect();
        if none.is_empty() {
            spec.remove("clusterIPs");
        } else {
            spec.insert("clusterIPs".into(), Value::Array(none));
        }
    }
    if !keep_node_ports && let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.remove("nodePort");
        }
    }
}

fn clean_job(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("selector");
        spec.remove("suspend");
    }
    if let Some(a) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove("batch.kubernetes.io/job-tracking");
    }
    for p in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(l) = obj.pointer_mut(p).and_then(Value::as_object_mut) {
            l.remove("controller-uid");
            l.remove("batch.kubernetes.io/controller-uid");
        }
    }
}

/// Parses a CustomTransform path into its segments.
pub fn parse_path(path: &str) -> Result<Vec<String>, String> {
    let rest = path
        .strip_prefix('$')
        .ok_or_else(|| "a path must start with '$'".to_string())?;
    let mut segs = Vec::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                let mut name = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        name.push(c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                    return Err(format!("expected an identifier after '.' in {path:?}"));
                }
                segs.push(name);
            }
            '[' => {
                if chars.next() != Some('"') {
                    return Err(format!("expected '\"' after '[' in {path:?}"));
                }
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('n') => name.push('\n'),
                            Some('t') => name.push('\t'),
                            Some(c @ ('"' | '\\' | '/')) => name.push(c),
                            _ => return Err(format!("bad escape in {path:?}")),
                        },
                        Some(c) => name.push(c),
                        None => return Err(format!("unterminated string in {path:?}")),
                    }
                }
                if chars.next() != Some(']') {
                    return Err(format!("expected ']' in {path:?}"));
                }
                segs.push(name);
            }
            c => return Err(format!("unexpected {c:?} in {path:?}")),
        }
    }
    if segs.is_empty() {
        return Err("the path identifies the whole object".into());
    }
    Ok(segs)
}

/// Removes the member `segs` leads to, if it resolves through maps.
pub fn remove_path(obj: &mut Value, segs: &[String]) {
    let Some((last, parents)) = segs.split_last() else {
        return;
    };
    let mut cur = obj;
    for s in parents {
        match cur.get_mut(s.as_str()) {
            Some(next) if next.is_object() => cur = next,
            _ => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// The errors of a CustomTransform's `remove` list, as upstream words them.
pub fn remove_errors(remove: &[String]) -> Vec<String> {
    remove
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            parse_path(p)
                .err()
                .map(|e| format!("Error in spec.remove[{i}]: {e}"))
        })
        .collect()
}

/// Whether `s` is a Go identifier (and not a keyword).
pub fn is_go_identifier(s: &str) -> bool {
    const KEYWORDS: [&str; 25] = [
        "break",
        "case",
        "chan",
        "const",
        "continue",
        "default",
        "defer",
        "else",
        "fallthrough",
        "for",
        "func",
        "go",
        "goto",
        "if",
        "import",
        "interface",
        "map",
        "package",
        "range",
        "return",
        "select",
        "struct",
        "switch",
        "type",
        "var",
    ];
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&s)
}

/// A WEC's customization properties (see the module contract).
pub fn properties(
    cluster_name: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    config_map: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("clusterName".to_string(), cluster_name.to_string());
    for source in [labels, annotations, config_map] {
        for (k, v) in source {
            if is_go_identifier(k) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// Expands one template string.
pub fn expand_string(s: &str, props: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        let mut before = &rest[..start];
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("template: unclosed action in {s:?}"))?;
        let mut action = &after[..end];
        rest = &after[end + 2..];
        if let Some(a) = action.strip_prefix("- ") {
            before = before.trim_end();
            action = a;
        }
        if let Some(a) = action.strip_suffix(" -") {
            rest = rest.trim_start();
            action = a;
        }
        out.push_str(before);
        let key = action
            .trim()
            .strip_prefix('.')
            .filter(|k| is_go_identifier(k))
            .ok_or_else(|| {
                format!(
                    "template: unsupported action {{{{{action}}}}} in {s:?} (only {{{{ .property }}}})"
                )
            })?;
        let v = props
            .get(key)
            .ok_or_else(|| format!("template: map has no entry for key {key:?} in {s:?}"))?;
        out.push_str(v);
    }
    out.push_str(rest);
    Ok(out)
}

/// Expands every string containing `{{` in `obj`; all errors, or the expanded object.
pub fn expand(obj: &Value, props: &BTreeMap<String, String>) -> Result<Value, Vec<String>> {
    fn walk(v: &Value, props: &BTreeMap<String, String>, errs: &mut Vec<String>) -> Value {
        match v {
            Value::String(s) if s.contains("{{") => match expand_string(s, props) {
                Ok(x) => Value::String(x),
                Err(e) => {
                    errs.push(e);
                    v.clone()
                }
            },
            Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, props, errs)).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| (k.clone(), walk(x, props, errs)))
                    .collect::<Map<String, Value>>(),
            ),
            other => other.clone(),
        }
    }
    let mut errs = Vec::new();
    let out = walk(obj, props, &mut errs);
    if errs.is_empty() { Ok(out) } else { Err(errs) }
}

/// Whether `obj` asks for template expansion.
pub fn wants_expansion(obj: &Value) -> bool {
    obj["metadata"]["annotations"]["control.kubestellar.io/expand-templates"].as_str()
        == Some("true")
}

/// The name of the ManifestWork carrying one object of one Binding.
pub fn manifest_work_name(binding_uid: &str, wds: &str, object_uid: &str) -> String {
    format!("{binding_uid}-{wds}-{object_uid}")
}

/// The ManifestWork spec carrying `obj` (already transformed), identified as
/// `group`/`resource`, CreateOnly when `create_only`.
pub fn manifest_work_spec(obj: &Value, group: &str, resource: &str, create_only: bool) -> Value {
    let mut spec = json!({"workload": {"manifests": [obj]}});
    if create_only {
        spec["manifestConfigs"] = json!([{
            "resourceIdentifier": {
                "group": group,
                "resource": resource,
                "namespace": obj["metadata"]["namespace"].as_str().unwrap_or_default(),
                "name": obj["metadata"]["name"].as_str().unwrap_or_default(),
            },
            "updateStrategy": {"type": "CreateOnly"},
        }]);
    }
    spec
}

/// A stable digest of a JSON value (FNV-1a 64 over its canonical serialisation; serde_json
/// maps are ordered, so equal values hash equal).
pub fn content_hash(v: &Value) -> String {
    let bytes = serde_json::to_vec(v).expect("JSON serialises");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
