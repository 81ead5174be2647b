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
