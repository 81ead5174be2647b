//! `kubectl fdb deprecation`: upstream's normalisation of a cluster spec into its unambiguous,
//! future-proof form, and the difference to the spec as written.
//!
//! Contract of [`normalize`] (upstream's `NormalizeClusterSpec`, on the spec as JSON so that
//! every field is kept as sent): the deprecated `buggify.crashLoop` is always carried into
//! `buggify.crashLoopContainers` (the `foundationdb` entry; `crashLoop` itself is kept, as
//! upstream). Without `only_show_changes`, the defaults are written out as well: with
//! `use_future_defaults`, `imageType: unified`, `useLocalitiesForExclusion` and
//! `useDNSInClusterFile` where unset; every pod template (the `general` one created when
//! missing) gets a `foundationdb` container (first) with requests of 1 CPU and 8Gi and limits
//! equal to its requests where unset, and a `foundationdb-kubernetes-sidecar` container (and,
//! for the split image, a `foundationdb-kubernetes-init` init container) with 100m and 256Mi;
//! the image configs of the image type are added when not present exactly. [`report`] renders
//! both as upstream's minimal YAML (keys sorted, empty maps dropped) and diffs them by line.

use serde_json::{Map, Value, json};

use crate::crd::FoundationDBCluster;

const MAIN: &str = "foundationdb";
const SIDECAR: &str = "foundationdb-kubernetes-sidecar";
const INIT: &str = "foundationdb-kubernetes-init";

/// Upstream's `DeprecationOptions`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Apply the defaults of the next major version rather than those of this one.
    pub use_future_defaults: bool,
    /// Only carry deprecated fields over; do not write out unchanged defaults.
    pub only_show_changes: bool,
}

/// The cluster's spec (as JSON), normalised (see the module docs).
pub fn normalize(cluster: &FoundationDBCluster, opts: Options) -> Value {
    let mut spec = serde_json::to_value(&cluster.spec).unwrap_or_else(|_| json!({}));
    if !spec.is_object() {
        spec = json!({});
    }
    if !opts.only_show_changes {
        let mut unified = cluster.use_unified_image();
        if opts.use_future_defaults {
            if spec.get("imageType").is_none_or(Value::is_null) {
                spec["imageType"] = json!("unified");
                unified = true;
            }
            set_unset(
                &mut spec,
                &["automationOptions", "useLocalitiesForExclusion"],
                true,
            );
            set_unset(&mut spec, &["routing", "useDNSInClusterFile"], true);
        }
        default_pod_templates(&mut spec, unified);
        default_image_configs(&mut spec, unified);
    }
    carry_crash_loop(&mut spec);
    spec
}

// `path` set to `value` where it is missing or null.
fn set_unset(spec: &mut Value, path: &[&str], value: bool) {
    let mut at = spec;
    for key in &path[..path.len() - 1] {
        let obj = object(at);
        at = obj.entry(*key).or_insert_with(|| json!({}));
    }
    let last = path[path.len() - 1];
    let obj = object(at);
    if obj.get(last).is_none_or(Value::is_null) {
        obj.insert(last.to_owned(), json!(value));
    }
}

// `v` as an object, replacing anything else (null) with an empty one.
fn object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("an object")
}

fn default_pod_templates(spec: &mut Value, unified: bool) {
    let processes = object(object(spec).entry("processes").or_insert_with(|| json!({})));
    let general = object(processes.entry("general").or_insert_with(|| json!({})));
    if general.get("podTemplate").is_none_or(Value::is_null) {
        general.insert("podTemplate".into(), json!({}));
    }
    for settings in processes.values_mut() {
        let Some(template) = settings.get_mut("podTemplate").filter(|t| !t.is_null()) else {
            continue;
        };
        let pod = object(object(template).entry("spec").or_insert_with(|| json!({})));
        let containers = list(pod, "containers");
        let main = ensure_container(containers, MAIN, true);
        default_resources(main, "1", "8Gi");
        if !unified {
            let init = ensure_container(list(pod, "initContainers"), INIT, false);
            default_resources(init, "100m", "256Mi");
        }
        let sidecar = ensure_container(list(pod, "containers"), SIDECAR, false);
        default_resources(sidecar, "100m", "256Mi");
    }
}

fn list<'a>(obj: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let v = obj.entry(key).or_insert_with(|| json!([]));
    if !v.is_array() {
        *v = json!([]);
    }
    v.as_array_mut().expect("an array")
}

// The container named `name`, added (first with `first`, else last) when missing.
fn ensure_container<'a>(containers: &'a mut Vec<Value>, name: &str, first: bool) -> &'a mut Value {
    let at = match containers.iter().position(|c| c["name"] == name) {
        Some(i) => i,
        None if first => {
            containers.insert(0, json!({"name": name}));
            0
        }
        None => {
            containers.push(json!({"name": name}));
            containers.len() - 1
        }
    };
    &mut containers[at]
}

fn default_resources(container: &mut Value, cpu: &str, memory: &str) {
    let resources = object(
        object(container)
            .entry("resources")
            .or_insert_with(|| json!({})),
    );
    if resources.get("requests").is_none_or(Value::is_null) {
        resources.insert("requests".into(), json!({"cpu": cpu, "memory": memory}));
    }
    if resources.get("limits").is_none_or(Value::is_null) {
        let requests = resources["requests"].clone();
        resources.insert("limits".into(), requests);
    }
}

fn default_image_configs(spec: &mut Value, unified: bool) {
    let mut ensure = |container: &str, config: Value| {
        let overrides = object(object(spec).entry(container).or_insert_with(|| json!({})));
        let configs = list(overrides, "imageConfigs");
        if !configs.contains(&config) {
            configs.push(config);
        }
    };
    if unified {
        ensure(
            "mainContainer",
            json!({"baseImage": "foundationdb/fdb-kubernetes-monitor"}),
        );
    } else {
        ensure(
            "mainContainer",
            json!({"baseImage": "foundationdb/foundationdb"}),
        );
        ensure(
            "sidecarContainer",
            json!({"baseImage": "foundationdb/foundationdb-kubernetes-sidecar", "tagSuffix": "-1"}),
        );
    }
}

// `buggify.crashLoop` carried into the `foundationdb` entry of `crashLoopContainers`.
fn carry_crash_loop(spec: &mut Value) {
    let crash_loop: Vec<Value> = spec
        .pointer("/buggify/crashLoop")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if crash_loop.is_empty() {
        return;
    }
    let buggify = object(object(spec).entry("buggify").or_insert_with(|| json!({})));
    let entries = list(buggify, "crashLoopContainers");
    let at = match entries.iter().position(|e| e["containerName"] == MAIN) {
        Some(i) => i,
        None => {
            entries.push(json!({"containerName": MAIN, "targets": []}));
            entries.len() - 1
        }
    };
    let targets = list(object(&mut entries[at]), "targets");
    for id in crash_loop {
        if !targets.contains(&id) {
            targets.push(id);
        }
    }
}

/// Upstream's "minimal YAML" of `v`: keys sorted, maps left empty (after dropping their own
/// empty maps) removed.
pub fn minimal_yaml(v: &Value) -> String {
    let mut v = v.clone();
    drop_empty_maps(&mut v);
    serde_yaml::to_string(&sorted(&v)).unwrap_or_default()
}

fn drop_empty_maps(v: &mut Value) {
    if let Value::Object(map) = v {
        for child in map.values_mut() {
            drop_empty_maps(child);
        }
        map.retain(|_, child| !child.as_object().is_some_and(Map::is_empty));
    }
}

// A YAML value with the keys of every map sorted (serde_json's order is not guaranteed).
fn sorted(v: &Value) -> serde_yaml::Value {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = serde_yaml::Mapping::new();
            for k in keys {
                out.insert(serde_yaml::Value::String(k.clone()), sorted(&map[k]));
            }
            serde_yaml::Value::Mapping(out)
        }
        Value::Array(items) => serde_yaml::Value::Sequence(items.iter().map(sorted).collect()),
        other => serde_yaml::to_value(other).unwrap_or(serde_yaml::Value::Null),
    }
}

/// What `deprecation` prints for one cluster, and whether it has deprecations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The text (ending in a newline).
    pub text: String,
    /// The normalised spec differs from the written one.
    pub deprecated: bool,
}

/// Upstream's output for `cluster`: `Cluster N has no deprecation`, or `Cluster N has
/// deprecations` and the line diff (`-` written, `+` normalised); with `show_cluster_spec`,
/// `---` and the normalised spec's YAML instead (nothing when there is no difference).
pub fn report(cluster: &FoundationDBCluster, opts: Options, show_cluster_spec: bool) -> Finding {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let before = minimal_yaml(&serde_json::to_value(&cluster.spec).unwrap_or_default());
    let after = minimal_yaml(&normalize(cluster, opts));
    if before == after {
        let text = if show_cluster_spec {
            String::new()
        } else {
            format!("Cluster {name} has no deprecation\n")
        };
        return Finding {
            text,
            deprecated: false,
        };
    }
    let text = if show_cluster_spec {
        format!("---\n{after}\n")
    } else {
        format!(
            "Cluster {name} has deprecations\n{}\n",
            line_diff(&before, &after).trim_end()
        )
    };
    Finding {
        text,
        deprecated: true,
    }
}

/// Lines of `a` and `b` compared: `- ` only in `a`, `+ ` only in `b`, `  ` in both; runs of
/// more than six shared lines are shortened to three on each side of `  ... // N identical
/// lines`.
pub fn line_diff(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    // Longest common subsequence table, from the ends.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    render(&ops)
}

fn render(ops: &[(char, &str)]) -> String {
    const CONTEXT: usize = 3;
    let mut out = String::new();
    let mut k = 0;
    while k < ops.len() {
        if ops[k].0 != ' ' {
            out.push_str(&format!("{} {}\n", ops[k].0, ops[k].1));
            k += 1;
            continue;
        }
        let end = ops[k..]
            .iter()
            .position(|(op, _)| *op != ' ')
            .map_or(ops.len(), |n| k + n);
        let keep_before = if k == 0 { 0 } else { CONTEXT };
        let keep_after = if end == ops.len() { 0 } else { CONTEXT };
        let run = end - k;
        if run > keep_before + keep_after + 1 {
            for (_, line) in &ops[k..k + keep_before] {
                out.push_str(&format!("  {line}\n"));
            }
            out.push_str(&format!(
                "  ... // {} identical lines\n",
                run - keep_before - keep_after
            ));
            for (_, line) in &ops[end - keep_after..end] {
                out.push_str(&format!("  {line}\n"));
            }
        } else {
            for (_, line) in &ops[k..end] {
                out.push_str(&format!("  {line}\n"));
            }
        }
        k = end;
    }
    out
}

#[cfg(test)]
#[path = "deprecation_tests.rs"]
mod tests;
