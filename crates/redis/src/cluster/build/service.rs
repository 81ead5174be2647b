//! The client Services, all ClusterIP on port 6379 (`redis`), labelled with and owned by the
//! cluster:
//!
//! | Service | selects |
//! |---|---|
//! | `<cluster>-leader` | the one instance holding the primary role: `redis.io/instance=<pod>` |
//! | `<cluster>-replica` | `redis.io/role=replica` data pods |
//! | `<cluster>-any` | every data pod (`redis.io/workload=data`) |
//!
//! Contract: pure. The `-leader` selector pins one pod by its immutable instance label rather
//! than the role label (which lags a failover), and the caller says which pod: the current
//! primary, or during a handoff whatever the handoff step last set (the selector never flaps
//! back and forth, upstream's defect 8). In replica mode the `-leader` Service carries
//! `redis.io/replica-mode: "true"`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::owned_meta;
use crate::cluster::model::Model;
use crate::names;

fn service(m: &Model, name: String, selector: BTreeMap<String, String>) -> Service {
    Service {
        metadata: owned_meta(m, &name, BTreeMap::new()),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("redis".into()),
                port: names::REDIS_PORT,
                target_port: Some(IntOrString::Int(names::REDIS_PORT)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn selector(m: &Model, key: &str, value: &str) -> BTreeMap<String, String> {
    let mut s = m.cluster_labels();
    s.insert(key.to_owned(), value.to_owned());
    s
}

/// `<cluster>-leader`, selecting `leader` (a pod name).
pub fn leader(m: &Model, leader: &str) -> Service {
    let mut s = service(
        m,
        names::leader_service(&m.name),
        selector(m, names::LABEL_INSTANCE, leader),
    );
    if m.replica_mode {
        s.metadata.annotations = Some(BTreeMap::from([(
            names::ANN_REPLICA_MODE.to_owned(),
            "true".to_owned(),
        )]));
    }
    s
}

/// `<cluster>-replica`.
pub fn replica(m: &Model) -> Service {
    service(
        m,
        names::replica_service(&m.name),
        selector(m, names::LABEL_ROLE, names::role::REPLICA),
    )
}

/// `<cluster>-any`.
pub fn any(m: &Model) -> Service {
    service(
        m,
        names::any_service(&m.name),
        selector(m, names::LABEL_WORKLOAD, names::workload::DATA),
    )
}

/// The pod the live `-leader` Service selects, if any.
pub fn leader_of(live: &Service) -> Option<String> {
    live.spec
        .as_ref()?
        .selector
        .as_ref()?
        .get(names::LABEL_INSTANCE)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::build::fixtures::{model, model_with};
    use serde_json::json;

    #[test]
    fn services_select_as_documented() {
        let m = model(json!({"storage": {"size": "1Gi"}}));
        let l = leader(&m, "demo-1");
        assert_eq!(l.metadata.name.as_deref(), Some("demo-leader"));
        assert_eq!(leader_of(&l).as_deref(), Some("demo-1"));
        assert!(l.metadata.annotations.is_none());
        let sel = |s: &Service| s.spec.clone().and_then(|s| s.selector).expect("selector");
        assert_eq!(sel(&replica(&m))["redis.io/role"], "replica");
        assert_eq!(sel(&any(&m))["redis.io/workload"], "data");
        for s in [&l, &replica(&m), &any(&m)] {
            assert_eq!(sel(s)["redis.io/cluster"], "demo");
            let port = &s
                .spec
                .as_ref()
                .and_then(|s| s.ports.clone())
                .expect("ports")[0];
            assert_eq!((port.port, port.name.as_deref()), (6379, Some("redis")));
            assert!(s.metadata.owner_references.is_some());
        }
    }

    #[test]
    fn replica_mode_marks_the_leader() {
        let m = model_with(
            json!({"storage": {"size": "1Gi"}, "replicaMode": {"enabled": true, "source": {"host": "10.0.0.1"}}}),
            json!({}),
            json!({}),
        );
        let l = leader(&m, "demo-0");
        assert_eq!(
            l.metadata.annotations.expect("ann")["redis.io/replica-mode"],
            "true"
        );
    }
}
