//! Validate once: the RedisCluster reduced to the typed model every builder and decision reads
//! (pure, no client).
//!
//! Contract:
//! - [`Model::of`] never fails on what admission already rejects in the schema; it returns
//!   [`Invalid`] only for what the operator cannot act on at all (`mode: cluster`, reserved;
//!   an object without a namespace or UID), and the driver then sets a condition and waits
//!   for a change.
//! - The fencing annotations are parsed here ([`Fencing`]): an annotation that is not a JSON
//!   array of pod names is *unreadable*, never "nobody fenced" (upstream's reading, which let a
//!   fenced primary start); while it is unreadable the operator starts no failover.
//! - Builders take the model, never the raw object.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::crd::{ClusterMode, RedisCluster, RedisClusterSpec, RedisClusterStatus, StorageType};
use crate::names;

/// The fencing annotation, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fencing {
    /// Every instance is fenced (`"*"`).
    pub all: bool,
    /// The pods listed by name.
    pub pods: BTreeSet<String>,
    /// Why the annotation could not be read (then nothing is known about fencing).
    pub unreadable: Option<String>,
}

impl Fencing {
    /// Parses the JSON array `raw` of annotation `key` (absent or blank: nobody).
    pub fn parse(key: &str, raw: Option<&str>) -> Fencing {
        let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else {
            return Fencing::default();
        };
        match serde_json::from_str::<Vec<String>>(raw) {
            Ok(list) => Fencing {
                all: list.iter().any(|p| p == names::FENCE_ALL),
                pods: list.into_iter().filter(|p| p != names::FENCE_ALL).collect(),
                unreadable: None,
            },
            Err(e) => Fencing {
                unreadable: Some(format!(
                    "annotation {key} is not a JSON array of pod names ({e}): {raw:?}"
                )),
                ..Fencing::default()
            },
        }
    }

    /// Whether `pod` is fenced (by name or by the wildcard).
    pub fn fences(&self, pod: &str) -> bool {
        self.all || self.pods.contains(pod)
    }

    /// The annotation value listing `pods` (and the wildcard when set), sorted.
    pub fn render(all: bool, pods: &BTreeSet<String>) -> String {
        let mut list: Vec<&str> = Vec::with_capacity(pods.len() + 1);
        if all {
            list.push(names::FENCE_ALL);
        }
        list.extend(pods.iter().map(String::as_str));
        serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
    }
}

/// Why the operator cannot act on a RedisCluster.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// `mode: cluster` (admission rejects it; an object from before the rule may still have it).
    #[error("cluster mode is reserved and not supported yet; use standalone or sentinel")]
    ClusterMode,
    /// No namespace or UID (never the case for a stored object).
    #[error("the RedisCluster has no {0}")]
    Incomplete(&'static str),
}

/// The validated RedisCluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its UID (owner references).
    pub uid: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The spec as stored (defaults applied by the API server).
    pub spec: RedisClusterSpec,
    /// Data instances wanted (at least 1).
    pub instances: i32,
    /// `redis.io/fencedInstances`.
    pub fencing: Fencing,
    /// `redis.io/operatorFencedInstances`: the fences the operator added itself.
    pub operator_fenced: Fencing,
    /// `redis.io/hibernation` is `on`/`true`.
    pub hibernation: bool,
    /// `redis.io/approve-primary-update: "true"`.
    pub approved: bool,
    /// `nodeMaintenanceWindow.inProgress`.
    pub maintenance: bool,
    /// `nodeMaintenanceWindow.reusePVC` (default true).
    pub reuse_pvc: bool,
    /// Replica mode enabled.
    pub replica_mode: bool,
    /// `replicaMode.promote`.
    pub promote: bool,
    /// The auth Secret's name (`spec.authSecret`, or the generated `<cluster>-auth` until the
    /// spec names it).
    pub auth_secret: String,
    /// The controller owner reference children carry.
    pub owner: OwnerReference,
    /// The status as stored (the durable part the decisions read).
    pub status: RedisClusterStatus,
}

impl Model {
    /// Validates `rc` (see the module contract).
    pub fn of(rc: &RedisCluster) -> Result<Model, Invalid> {
        if rc.spec.mode == ClusterMode::Cluster {
            return Err(Invalid::ClusterMode);
        }
        let namespace = rc.namespace().ok_or(Invalid::Incomplete("namespace"))?;
        let uid = rc.uid().ok_or(Invalid::Incomplete("uid"))?;
        let name = rc.name_any();
        let ann = rc.annotations();
        let get = |k: &str| ann.get(k).map(String::as_str);
        let truthy = |k: &str| {
            get(k).is_some_and(|v| v.eq_ignore_ascii_case("on") || v.eq_ignore_ascii_case("true"))
        };
        let window = rc.spec.node_maintenance_window.as_ref();
        let rm = rc.spec.replica_mode.as_ref().filter(|r| r.enabled);
        let owner = rc
            .controller_owner_ref(&())
            .ok_or(Invalid::Incomplete("uid"))?;
        Ok(Model {
            auth_secret: rc
                .spec
                .auth_secret
                .as_ref()
                .map(|s| s.name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| names::auth_secret(&name)),
            instances: rc.spec.instances.max(1),
            fencing: Fencing::parse(
                names::ANN_FENCED_INSTANCES,
                get(names::ANN_FENCED_INSTANCES),
            ),
            operator_fenced: Fencing::parse(
                names::ANN_OPERATOR_FENCED,
                get(names::ANN_OPERATOR_FENCED),
            ),
            hibernation: truthy(names::ANN_HIBERNATION),
            approved: get(names::ANN_APPROVE_PRIMARY_UPDATE) == Some("true"),
            maintenance: window.is_some_and(|w| w.in_progress),
            reuse_pvc: window.and_then(|w| w.reuse_pvc).unwrap_or(true),
            replica_mode: rm.is_some(),
            promote: rm.is_some_and(|r| r.promote),
            generation: rc.meta().generation,
            spec: rc.spec.clone(),
            status: rc.status.clone().unwrap_or_default(),
            owner,
            name,
            namespace,
            uid,
        })
    }

    /// Pod name of `ordinal`.
    pub fn pod_name(&self, ordinal: i32) -> String {
        names::pod_name(&self.name, ordinal)
    }

    /// Whether data lives on PVCs (rather than emptyDir).
    pub fn uses_pvcs(&self) -> bool {
        self.spec.storage.r#type == StorageType::Pvc
    }

    /// Sentinel mode.
    pub fn sentinel(&self) -> bool {
        self.spec.mode == ClusterMode::Sentinel
    }

    /// The labels every child of the cluster carries.
    pub fn cluster_labels(&self) -> std::collections::BTreeMap<String, String> {
        std::collections::BTreeMap::from([(names::LABEL_CLUSTER.to_owned(), self.name.clone())])
    }

    /// `status.currentPrimary`.
    pub fn current_primary(&self) -> &str {
        &self.status.current_primary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(annotations: serde_json::Value, spec: serde_json::Value) -> RedisCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "u-1", "generation": 3,
                "annotations": annotations},
            "spec": spec,
        }))
        .expect("cluster")
    }

    #[test]
    fn fencing_reads_names_the_wildcard_and_refuses_garbage() {
        let cases: &[(Option<&str>, bool, &[&str], bool)] = &[
            (None, false, &[], false),
            (Some(""), false, &[], false),
            (Some("[]"), false, &[], false),
            (Some(r#"["demo-1"]"#), false, &["demo-1"], false),
            (Some(r#"["*","demo-0"]"#), true, &["demo-0"], false),
            (Some("demo-0"), false, &[], true),
            (Some("[1]"), false, &[], true),
        ];
        for (raw, all, pods, unreadable) in cases {
            let f = Fencing::parse("k", *raw);
            assert_eq!(f.all, *all, "{raw:?}");
            assert_eq!(
                f.pods.iter().map(String::as_str).collect::<Vec<_>>(),
                *pods,
                "{raw:?}"
            );
            assert_eq!(f.unreadable.is_some(), *unreadable, "{raw:?}");
        }
        let f = Fencing::parse("k", Some(r#"["*"]"#));
        assert!(f.fences("anything"));
        let both = BTreeSet::from(["b".to_owned(), "a".to_owned()]);
        assert_eq!(Fencing::render(true, &both), r#"["*","a","b"]"#);
        assert_eq!(Fencing::render(false, &BTreeSet::new()), "[]");
    }

    #[test]
    fn the_model_reads_annotations_and_defaults() {
        let m = Model::of(&rc(
            serde_json::json!({"redis.io/hibernation": "ON", "redis.io/approve-primary-update": "true"}),
            serde_json::json!({"instances": 3, "storage": {"size": "1Gi"}}),
        ))
        .expect("valid");
        assert!(m.hibernation && m.approved && !m.maintenance && m.reuse_pvc);
        assert_eq!(m.auth_secret, "demo-auth");
        assert_eq!(m.instances, 3);
        assert_eq!(m.owner.uid, "u-1");
        assert_eq!(m.owner.controller, Some(true));
        assert_eq!(m.pod_name(2), "demo-2");
    }

    #[test]
    fn cluster_mode_is_invalid() {
        let err = Model::of(&rc(
            serde_json::json!({}),
            serde_json::json!({"mode": "cluster", "storage": {"size": "1Gi"}}),
        ))
        .unwrap_err();
        assert_eq!(err, Invalid::ClusterMode);
    }

    #[test]
    fn sentinel_mode_is_valid_with_and_without_tls() {
        let tls = Model::of(&rc(
            serde_json::json!({}),
            serde_json::json!({"mode": "sentinel", "instances": 3, "storage": {"size": "1Gi"},
                "tlsSecret": {"name": "t"}, "caSecret": {"name": "c"}}),
        ))
        .expect("sentinel mode with TLS is valid (upstream accepts it)");
        assert!(tls.sentinel());
        assert!(crate::instance::config::tls_enabled(&tls.spec));
        let ok = Model::of(&rc(
            serde_json::json!({}),
            serde_json::json!({"mode": "sentinel", "instances": 3, "storage": {"size": "1Gi"}}),
        ))
        .expect("valid");
        assert!(ok.sentinel());
    }
}
