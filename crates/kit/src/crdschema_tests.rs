use super::*;
use k8s_openapi::api::core::v1::{EnvVar, LocalObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// A kind embedding no Kubernetes type.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default)]
#[kube(
    group = "test.flotilla.dev",
    version = "v1",
    kind = "Plain",
    namespaced
)]
pub struct PlainSpec {
    /// How many.
    pub size: i32,
    /// What for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// A mode.
    #[serde(default)]
    pub mode: Mode,
    /// The field's own words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub later: Option<Mode>,
}

/// A mode.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default)]
pub enum Mode {
    /// The default.
    #[default]
    Fast,
    /// The other.
    Slow,
}

/// A kind embedding Kubernetes types.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default)]
#[kube(
    group = "test.flotilla.dev",
    version = "v1",
    kind = "Embedding",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddingSpec {
    /// Which pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Pull secrets.
    #[serde(default)]
    pub pull_secrets: Vec<LocalObjectReference>,
    /// One variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one: Option<EnvVar>,
}

fn schema(crd: &CustomResourceDefinition) -> Value {
    let s = crd.spec.versions[0].schema.as_ref().expect("schema");
    serde_json::to_value(s.open_api_v3_schema.as_ref().expect("v3")).expect("json")
}

fn facts() -> K8sFacts {
    let openapi = serde_json::json!({
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector": {
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "matchExpressions": {"type": "array", "x-kubernetes-list-type": "atomic"}
            }
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement": {
            "required": ["key", "operator"],
            "properties": {"values": {"type": "array", "x-kubernetes-list-type": "atomic"}}
        },
        "io.k8s.apimachinery.pkg.api.resource.Quantity": {},
        "io.k8s.api.core.v1.LocalObjectReference": {
            "x-kubernetes-map-type": "atomic",
            "properties": {"name": {"type": "string", "default": ""}}
        },
        "io.k8s.api.core.v1.SecretKeySelector": {
            "required": ["key"],
            "x-kubernetes-map-type": "atomic",
            "properties": {"name": {"type": "string", "default": ""}, "key": {"type": "string"}}
        },
        "io.k8s.api.core.v1.ConfigMapKeySelector": {
            "required": ["key"], "x-kubernetes-map-type": "atomic",
            "properties": {"name": {"type": "string", "default": ""}}
        },
        "io.k8s.api.core.v1.ObjectFieldSelector": {"required": ["fieldPath"], "x-kubernetes-map-type": "atomic"},
        "io.k8s.api.core.v1.ResourceFieldSelector": {"required": ["resource"], "x-kubernetes-map-type": "atomic"},
        "io.k8s.api.core.v1.FileKeySelector": {"required": ["key", "path", "volumeName"]},
        "io.k8s.api.core.v1.EnvVar": {
            "required": ["name"],
            "properties": {"name": {"type": "string", "default": ""}}
        },
        "io.k8s.api.core.v1.EnvVarSource": {},
        "not.kubernetes.Foo": {"required": ["x"]}
    });
    K8sFacts::from_openapi("v1.36.4", openapi.as_object().expect("map"))
}

#[test]
fn a_kind_without_kubernetes_types_gets_kube_derive_schema_without_required_spec() {
    let ours = schema(&crd_with::<Plain>(&K8sFacts::default()).expect("crd"));
    let mut theirs = schema(&Plain::crd());
    let obj = theirs.as_object_mut().expect("object");
    assert_eq!(obj.remove("required"), Some(serde_json::json!(["spec"])));
    // kube-derive shows an optional enum field with its type's doc; ours keeps the field's.
    let later = &mut theirs["properties"]["spec"]["properties"]["later"];
    assert_eq!(later["description"], "A mode.");
    later["description"] = "The field's own words.".into();
    assert_eq!(ours, theirs);
}

#[test]
fn facts_keep_markers_required_and_reference_name_defaults_only() {
    let f = facts();
    assert!(!f.types.contains_key("not.kubernetes.Foo"));
    let env = &f.types["io.k8s.api.core.v1.EnvVar"];
    assert_eq!(env.required, ["name"]);
    assert_eq!(
        env.properties.get("name"),
        None,
        "a required name keeps no default"
    );
    let req = &f.types["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement"];
    assert_eq!(
        req.properties["values"].list_type.as_deref(),
        Some("atomic")
    );
    let r = &f.types["io.k8s.api.core.v1.LocalObjectReference"];
    assert_eq!(r.map_type.as_deref(), Some("atomic"));
    assert_eq!(r.properties["name"].default, Some(Value::from("")));
}

#[test]
fn embedded_kubernetes_types_carry_their_markers() {
    let s = schema(&crd_with::<Embedding>(&facts()).expect("crd"));
    let spec = &s["properties"]["spec"]["properties"];
    let selector = &spec["selector"];
    assert_eq!(selector["x-kubernetes-map-type"], "atomic");
    let exprs = &selector["properties"]["matchExpressions"];
    assert_eq!(exprs["x-kubernetes-list-type"], "atomic");
    assert_eq!(
        exprs["items"]["required"],
        serde_json::json!(["key", "operator"])
    );
    assert_eq!(
        exprs["items"]["properties"]["values"]["x-kubernetes-list-type"],
        "atomic"
    );
    let one = &spec["one"];
    assert_eq!(one["required"], serde_json::json!(["name"]));
    let secret_ref = &one["properties"]["valueFrom"]["properties"]["secretKeyRef"];
    assert_eq!(secret_ref["x-kubernetes-map-type"], "atomic");
    assert_eq!(secret_ref["required"], serde_json::json!(["key"]));
    assert_eq!(secret_ref["properties"]["name"]["default"], "");
    let pull = &spec["pullSecrets"]["items"];
    assert_eq!(pull["x-kubernetes-map-type"], "atomic");
    assert!(pull.get("required").is_none(), "{pull}");
    assert_eq!(pull["properties"]["name"]["default"], "");
    // The field's own description wins over the type's.
    assert_eq!(spec["one"]["description"], "One variable.");
    assert!(s.get("required").is_none(), "spec is optional");
    assert!(!s.to_string().contains("$ref"), "everything is inlined");
}

#[test]
fn an_unknown_kubernetes_type_names_itself_and_the_fix() {
    let mut f = facts();
    f.types.remove("io.k8s.api.core.v1.EnvVar");
    let e = crd_with::<Embedding>(&f).expect_err("unknown type");
    let msg = e.to_string();
    assert!(msg.contains("io.k8s.api.core.v1.EnvVar"), "{msg}");
    assert!(msg.contains("cargo xtask gen-k8s-facts"), "{msg}");
}
