//! Admission tests: create or patch custom resources as a user would and get the API
//! server's verdict, so a test can assert on the exact message a rejected manifest gets.

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// One namespaced custom kind, written through the dynamic API (no typed defaults applied by
/// the client: what the server stores is what its schema made of the manifest).
pub struct Kind {
    api: Api<DynamicObject>,
    api_version: String,
    kind: String,
}

impl Kind {
    /// `group/version` `kind` in `namespace`.
    pub fn new(client: &Client, namespace: &str, group: &str, version: &str, kind: &str) -> Self {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        Kind {
            api: Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk)),
            api_version: format!("{group}/{version}"),
            kind: kind.to_owned(),
        }
    }

    /// Creates `name` with `spec`: the stored object, or the rejection's message.
    pub async fn create(&self, name: &str, spec: Value) -> Result<DynamicObject, String> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.api_version, "kind": self.kind,
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("object");
        self.api
            .create(&PostParams::default(), &obj)
            .await
            .map_err(rejection)
    }

    /// Creates `name` with no `spec` at all: the stored object, or the rejection's message.
    pub async fn create_without_spec(&self, name: &str) -> Result<DynamicObject, String> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.api_version, "kind": self.kind, "metadata": {"name": name},
        }))
        .expect("object");
        self.api
            .create(&PostParams::default(), &obj)
            .await
            .map_err(rejection)
    }

    /// Server-side applies `spec` of `name` as field manager `manager` (no force), as
    /// `kubectl apply --server-side --field-manager=<manager>` would: the stored object, or
    /// the API server's message (a conflict included).
    pub async fn apply_spec(
        &self,
        name: &str,
        manager: &str,
        spec: Value,
    ) -> Result<DynamicObject, String> {
        let obj = json!({
            "apiVersion": self.api_version, "kind": self.kind,
            "metadata": {"name": name}, "spec": spec,
        });
        self.api
            .patch(name, &PatchParams::apply(manager), &Patch::Apply(&obj))
            .await
            .map_err(|e| match e {
                kube::Error::Api(s) => s.message,
                other => panic!("unexpected error: {other}"),
            })
    }

    /// Merge-patches `spec` of `name`, as `kubectl patch --type=merge` would.
    pub async fn patch_spec(&self, name: &str, spec: Value) -> Result<DynamicObject, String> {
        let patch = Patch::Merge(json!({ "spec": spec }));
        self.api
            .patch(name, &PatchParams::default(), &patch)
            .await
            .map_err(rejection)
    }
}

/// The API server's message of a validation rejection (422); panics on anything else.
pub fn rejection(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "rejections are validation errors: {s:?}");
            s.message
        }
        other => panic!("unexpected error: {other}"),
    }
}

/// Asserts that every value in `sent` is in `stored` unchanged (the server may add defaults,
/// but must not prune or alter anything a manifest set), naming the first path that differs.
pub fn assert_kept(sent: &Value, stored: &Value) {
    if let Err(path) = kept(sent, stored, String::new()) {
        panic!("the API server did not keep {path} as sent\nsent: {sent:#}\nstored: {stored:#}");
    }
}

fn kept(sent: &Value, stored: &Value, path: String) -> Result<(), String> {
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => a.iter().try_for_each(|(k, v)| {
            let p = format!("{path}.{k}");
            b.get(k).map_or(Err(p.clone()), |w| kept(v, w, p))
        }),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .try_for_each(|(i, (v, w))| kept(v, w, format!("{path}[{i}]"))),
        (a, b) if a == b => Ok(()),
        _ => Err(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_allows_defaults_but_not_pruning_or_changes() {
        let sent = json!({"a": 1, "b": {"c": [1, {"d": "x"}]}});
        let with_defaults = json!({"a": 1, "z": true, "b": {"c": [1, {"d": "x", "e": 0}]}});
        assert_eq!(kept(&sent, &with_defaults, String::new()), Ok(()));
        let pruned = json!({"a": 1, "b": {"c": [1, {}]}});
        assert_eq!(kept(&sent, &pruned, String::new()), Err(".b.c[1].d".into()));
        let changed = json!({"a": 2, "b": {"c": [1, {"d": "x"}]}});
        assert_eq!(kept(&sent, &changed, String::new()), Err(".a".into()));
    }
}
