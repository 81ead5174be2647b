//! The instance managers' identity: ServiceAccount, Role and RoleBinding `<cluster>`, owned
//! by the cluster. The Role is read-only (status is pulled by the operator; the instance
//! managers never write the API).
//!
//! Contract: pure; the rules are the instance manager's own list
//! ([`crate::instance::role_rules`]), so its needs are written down once.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};

use super::owned_meta;
use crate::cluster::model::Model;
use crate::names;

/// ServiceAccount `<cluster>`.
pub fn service_account(m: &Model) -> ServiceAccount {
    ServiceAccount {
        metadata: owned_meta(
            m,
            &names::instance_service_account(&m.name),
            BTreeMap::new(),
        ),
        ..ServiceAccount::default()
    }
}

/// Role `<cluster>`.
pub fn role(m: &Model) -> Role {
    Role {
        metadata: owned_meta(
            m,
            &names::instance_service_account(&m.name),
            BTreeMap::new(),
        ),
        rules: Some(crate::instance::role_rules(&m.name)),
    }
}

/// RoleBinding `<cluster>` of Role `<cluster>` to ServiceAccount `<cluster>`.
pub fn role_binding(m: &Model) -> RoleBinding {
    let name = names::instance_service_account(&m.name);
    RoleBinding {
        metadata: owned_meta(m, &name, BTreeMap::new()),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name,
            namespace: Some(m.namespace.clone()),
            ..Subject::default()
        }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::build::fixtures::model;

    #[test]
    fn the_role_is_read_only_and_bound_to_the_cluster_account() {
        let m = model(serde_json::json!({"storage": {"size": "1Gi"}}));
        let r = role(&m);
        for rule in r.rules.expect("rules") {
            for verb in &rule.verbs {
                assert!(["get", "list", "watch"].contains(&verb.as_str()), "{verb}");
            }
        }
        let rb = role_binding(&m);
        assert_eq!(rb.role_ref.name, "demo");
        assert_eq!(
            rb.subjects.expect("subjects")[0].namespace.as_deref(),
            Some("ns")
        );
        assert_eq!(service_account(&m).metadata.name.as_deref(), Some("demo"));
    }
}
