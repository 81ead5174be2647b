//! API types only (no client, no IO): `cocoonset.cocoonstack.io/v1` CocoonSet and
//! CocoonHibernation.

mod cocoonset;
mod hibernation;

pub use cocoonset::*;
pub use hibernation::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Every CRD of the cocoon operator, for `cargo xtask gen` and tests.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        kit::crdschema::crd::<CocoonSet>(),
        kit::crdschema::crd::<CocoonHibernation>(),
    ]
}

/// OSType defines the guest operating system type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OsType {
    /// Linux (connects over ssh by default).
    #[default]
    Linux,
    /// Windows (rdp by default).
    Windows,
    /// Android (adb by default).
    Android,
    /// macOS.
    Macos,
}

impl OsType {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            OsType::Linux => "linux",
            OsType::Windows => "windows",
            OsType::Android => "android",
            OsType::Macos => "macos",
        }
    }
}

/// Backend selects the hypervisor backend used to run a VM.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Backend {
    /// Cloud Hypervisor.
    #[default]
    #[serde(rename = "cloud-hypervisor")]
    CloudHypervisor,
    /// Firecracker (direct kernel boot, OCI VM images only).
    #[serde(rename = "firecracker")]
    Firecracker,
}

impl Backend {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::CloudHypervisor => "cloud-hypervisor",
            Backend::Firecracker => "firecracker",
        }
    }
}

/// ConnType is the connection protocol advertised for a VM.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConnType {
    /// SSH.
    Ssh,
    /// Remote desktop.
    Rdp,
    /// VNC.
    Vnc,
    /// Android debug bridge.
    Adb,
}

impl ConnType {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnType::Ssh => "ssh",
            ConnType::Rdp => "rdp",
            ConnType::Vnc => "vnc",
            ConnType::Adb => "adb",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_without_spec_reads_as_the_empty_spec() {
        let set: CocoonSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonSet",
            "metadata": {"name": "bare", "namespace": "ns"}
        }))
        .expect("a spec-less set deserialises");
        assert_eq!(set.spec, CocoonSetSpec::default());
        assert!(set.spec.agent.image.is_empty());
        let null: CocoonHibernation = serde_json::from_value(serde_json::json!({
            "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonHibernation",
            "metadata": {"name": "bare"}, "spec": null
        }))
        .expect("a null spec deserialises");
        assert!(null.spec.pod_ref.name.is_empty());
    }

    #[test]
    fn a_present_spec_still_round_trips() {
        let v = serde_json::json!({
            "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonHibernation",
            "metadata": {"name": "h"}, "spec": {"podRef": {"name": "p"}, "desire": "Hibernate"}
        });
        let h: CocoonHibernation = serde_json::from_value(v.clone()).expect("deserialise");
        assert_eq!(h.spec.desire, Desire::Hibernate);
        assert_eq!(
            serde_json::to_value(&h).expect("serialise")["spec"],
            v["spec"]
        );
        let bad = serde_json::json!({"apiVersion": "cocoonset.cocoonstack.io/v1",
            "kind": "CocoonHibernation", "metadata": {"name": "h"}, "spec": {"desire": "Sleep"}});
        assert!(
            serde_json::from_value::<CocoonHibernation>(bad).is_err(),
            "bad values still fail"
        );
    }
}
