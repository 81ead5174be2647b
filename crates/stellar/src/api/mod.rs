//! API types only (no client, no IO): `control.kubestellar.io/v1alpha1` BindingPolicy,
//! Binding, CustomTransform, StatusCollector, CombinedStatus and the status add-on's
//! WorkStatus, with upstream's names, scopes, short names, printer columns and schemas.

mod binding;
mod binding_policy;
mod combined_status;
mod custom_transform;
mod status_collector;
mod work_status;

pub use binding::*;
pub use binding_policy::*;
pub use combined_status::*;
pub use custom_transform::*;
pub use status_collector::*;
pub use work_status::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::json;

/// The five control CRDs the controller manager installs in a WDS.
pub fn control_crds() -> Vec<CustomResourceDefinition> {
    let mut cs = kit::crdschema::crd::<CombinedStatus>();
    // Upstream declares an empty subresources object (no status subresource).
    cs.spec.versions[0].subresources = Some(Default::default());
    vec![
        binding_policy_crd(),
        upstream(kit::crdschema::crd::<Binding>()),
        upstream(kit::crdschema::crd::<CustomTransform>()),
        upstream(kit::crdschema::crd::<StatusCollector>()),
        upstream(cs),
    ]
}

/// The WorkStatus CRD (installed in an ITS).
pub fn work_status_crd() -> CustomResourceDefinition {
    upstream(kit::crdschema::crd::<WorkStatus>())
}

fn upstream(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crate::schema::upstream_style(crd, &[])
}

// Label values, label keys and operators, as upstream's kustomize patch checks them.
const LABEL_VALUE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
const LABEL_KEY: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
const OPERATOR: &str = "^(In|NotIn|Exists|DoesNotExist)$";
/// The six object tests of a downsync clause: at least one must be present.
pub const OBJECT_TESTS: [&str; 6] = [
    "apiGroup",
    "resources",
    "namespaces",
    "namespaceSelectors",
    "objectSelectors",
    "objectNames",
];

/// BindingPolicy's CRD: the generated schema plus upstream's extra validations (label
/// patterns on cluster selectors; each downsync clause must test something).
pub fn binding_policy_crd() -> CustomResourceDefinition {
    let crd = upstream(kit::crdschema::crd::<BindingPolicy>());
    let mut v = serde_json::to_value(&crd).expect("a CRD serialises");
    let spec = &mut v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let sel = &mut spec["clusterSelectors"]["items"]["properties"];
    sel["matchLabels"]["additionalProperties"]["pattern"] = json!(LABEL_VALUE);
    let expr = &mut sel["matchExpressions"]["items"]["properties"];
    expr["key"]["pattern"] = json!(LABEL_KEY);
    expr["operator"]["pattern"] = json!(OPERATOR);
    expr["values"]["items"]["pattern"] = json!(LABEL_VALUE);
    spec["downsync"]["items"]["anyOf"] = serde_json::Value::Array(
        OBJECT_TESTS
            .iter()
            .map(|t| json!({"required": [t]}))
            .collect(),
    );
    serde_json::from_value(v).expect("the patched CRD deserialises")
}

#[cfg(test)]
mod tests;
