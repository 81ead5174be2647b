//! The PodDisruptionBudgets, split as CloudNativePG does:
//!
//! - `<cluster>-primary`: `minAvailable: 1` over the pod labelled `redis.io/role=primary`, so
//!   a drain never evicts the primary; the operator switches over away from a cordoned node
//!   first, the label moves, and the drain proceeds;
//! - `<cluster>-replicas`: `minAvailable: instances - 2` over the replicas, only when that is
//!   at least 1 (three or more instances): one replica at a time may go.
//!
//! Contract: pure; [`desired`] is empty when `enablePodDisruptionBudget` is false, during node
//! maintenance (`nodeMaintenanceWindow.inProgress`) and while hibernated (no pods to protect),
//! and the writer deletes the cluster's PDBs it no longer wants.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::owned_meta;
use crate::cluster::model::Model;
use crate::names;

fn pdb(m: &Model, name: String, role: &str, min: i32) -> PodDisruptionBudget {
    let mut selector = m.cluster_labels();
    selector.insert(names::LABEL_ROLE.into(), role.into());
    selector.insert(names::LABEL_WORKLOAD.into(), names::workload::DATA.into());
    PodDisruptionBudget {
        metadata: owned_meta(m, &name, BTreeMap::new()),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min)),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

/// The PDBs the cluster should have (see the module contract).
pub fn desired(m: &Model) -> Vec<PodDisruptionBudget> {
    if !m.spec.enable_pod_disruption_budget || m.maintenance || m.hibernation {
        return Vec::new();
    }
    let mut out = vec![pdb(
        m,
        names::primary_pdb_name(&m.name),
        names::role::PRIMARY,
        1,
    )];
    let replicas_min = m.instances - 2;
    if replicas_min >= 1 {
        out.push(pdb(
            m,
            names::replicas_pdb_name(&m.name),
            names::role::REPLICA,
            replicas_min,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::build::fixtures::{model, model_with};
    use serde_json::json;

    fn summary(m: &Model) -> Vec<(String, i32, String)> {
        desired(m)
            .into_iter()
            .map(|p| {
                let spec = p.spec.expect("spec");
                let min = match spec.min_available {
                    Some(IntOrString::Int(n)) => n,
                    _ => -1,
                };
                let role =
                    spec.selector.and_then(|s| s.match_labels).expect("labels")["redis.io/role"]
                        .clone();
                (p.metadata.name.expect("name"), min, role)
            })
            .collect()
    }

    #[test]
    fn the_budgets_follow_cloudnativepg() {
        let one = model(json!({"instances": 1, "storage": {"size": "1Gi"}}));
        assert_eq!(
            summary(&one),
            [("demo-primary".into(), 1, "primary".into())]
        );
        let two = model(json!({"instances": 2, "storage": {"size": "1Gi"}}));
        assert_eq!(summary(&two).len(), 1);
        let five = model(json!({"instances": 5, "storage": {"size": "1Gi"}}));
        assert_eq!(
            summary(&five),
            [
                ("demo-primary".into(), 1, "primary".into()),
                ("demo-replicas".into(), 3, "replica".into())
            ]
        );
    }

    #[test]
    fn no_budgets_when_disabled_in_maintenance_or_hibernated() {
        for (spec, ann) in [
            (
                json!({"instances": 3, "storage": {"size": "1Gi"}, "enablePodDisruptionBudget": false}),
                json!({}),
            ),
            (
                json!({"instances": 3, "storage": {"size": "1Gi"}, "nodeMaintenanceWindow": {"inProgress": true}}),
                json!({}),
            ),
            (
                json!({"instances": 3, "storage": {"size": "1Gi"}}),
                json!({"redis.io/hibernation": "on"}),
            ),
        ] {
            assert!(desired(&model_with(spec, ann, json!({}))).is_empty());
        }
    }
}
