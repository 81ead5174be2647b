//! Sentinel mode's children: the Sentinel pods `<cluster>-sentinel-<i>` and the
//! `<cluster>-sentinel` Service (port 26379).
//!
//! Contract (pure, as every builder):
//! - A Sentinel pod runs the instance manager with `--role=sentinel` (one binary, as
//!   upstream: the `copy-manager` init container installs it) in a container `sentinel` of
//!   image `spec.imageName`; the instance manager renders `sentinel.conf` into the pod's
//!   emptyDir `/data` (Sentinel's state lives and dies with the pod) and runs Redis in
//!   Sentinel mode. Ports 26379 `sentinel` and 8080 `http` (HTTPS: `/healthz`, `/readyz`,
//!   and `/v1/status` behind the API token, read by the data pods during a password
//!   rotation). It sees the cluster's password (`auth-pass`) through the same projected
//!   Secret as the data pods, the instance API's serving certificate and its token. With TLS (`tlsSecret` and `caSecret`) the user's certificate,
//!   key and CA are projected read-only at `/tls` as in the data pods (Sentinel then listens
//!   with TLS only), so the spec hash, and with it the Sentinel pods, follow TLS.
//! - Labels `redis.io/instance=<pod>`, `redis.io/role=sentinel`, `redis.io/workload=sentinel`;
//!   the `redis.io/spec-hash` annotation covers the pod spec (operator image left out).
//! - The Service selects `{cluster, role=sentinel}` (upstream's selector).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, Pod, PodSecurityContext, PodSpec,
    ProjectedVolumeSource, SeccompProfile, Service, ServicePort, ServiceSpec, Toleration, Volume,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::{
    PROCESS_NODE_KEY, READINESS_PERIOD_SECONDS, REDIS_UID, copy_manager, field_env, https_probe,
    mount, port, restricted, secret_items, secret_volume, spec_hash, tls_mount, tls_volume,
};
use super::{PodSettings, owned_meta};
use crate::cluster::model::Model;
use crate::{instance_api, names, sentinel};

/// Seconds Sentinel may take to exit after SIGTERM before SIGKILL (it exits at once).
pub const SHUTDOWN_GRACE_SECONDS: i64 = 5;
/// Grace of a Sentinel pod's stop.
pub const TERMINATION_GRACE_SECONDS: i64 = SHUTDOWN_GRACE_SECONDS + 5;

/// The desired Sentinel pod `i`.
pub fn pod(m: &Model, s: &PodSettings, i: i32) -> Pod {
    let name = names::sentinel_pod_name(&m.name, i);
    let spec = spec(m, s);
    let labels = BTreeMap::from([
        (names::LABEL_INSTANCE.to_owned(), name.clone()),
        (
            names::LABEL_ROLE.to_owned(),
            names::role::SENTINEL.to_owned(),
        ),
        (
            names::LABEL_WORKLOAD.to_owned(),
            names::workload::SENTINEL.to_owned(),
        ),
    ]);
    let mut meta = owned_meta(m, &name, labels);
    meta.annotations = Some(BTreeMap::from([(
        names::ANN_SPEC_HASH.to_owned(),
        spec_hash(&spec),
    )]));
    Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    }
}

fn spec(m: &Model, s: &PodSettings) -> PodSpec {
    let mut tolerations = m.spec.tolerations.clone().unwrap_or_default();
    let mut node_selector = m.spec.node_selector.clone();
    if s.process_nodes {
        tolerations.push(Toleration {
            key: Some(PROCESS_NODE_KEY.into()),
            operator: Some("Equal".into()),
            value: Some("true".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        });
        node_selector.insert(PROCESS_NODE_KEY.into(), "true".into());
    }
    PodSpec {
        service_account_name: Some(names::instance_service_account(&m.name)),
        automount_service_account_token: Some(true),
        enable_service_links: Some(false),
        termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
        security_context: Some(PodSecurityContext {
            run_as_user: Some(REDIS_UID),
            run_as_group: Some(REDIS_UID),
            fs_group: Some(REDIS_UID),
            run_as_non_root: Some(true),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        init_containers: Some(vec![copy_manager(s)]),
        containers: vec![container(m)],
        volumes: Some(volumes(m)),
        node_selector: (!node_selector.is_empty()).then_some(node_selector),
        affinity: m.spec.affinity.clone(),
        tolerations: (!tolerations.is_empty()).then_some(tolerations),
        topology_spread_constraints: m.spec.topology_spread_constraints.clone(),
        ..PodSpec::default()
    }
}

fn container(m: &Model) -> Container {
    let mut liveness = https_probe(names::PATH_HEALTHZ);
    liveness.initial_delay_seconds = Some(10);
    liveness.period_seconds = Some(10);
    liveness.failure_threshold = Some(3);
    let mut readiness = https_probe(names::PATH_READYZ);
    readiness.period_seconds = Some(READINESS_PERIOD_SECONDS);
    readiness.timeout_seconds = Some(2);
    readiness.failure_threshold = Some(3);
    Container {
        name: sentinel::CONTAINER.into(),
        image: Some(m.spec.image_name.clone()),
        command: Some(vec![
            names::MANAGER_BINARY.into(),
            "instance".into(),
            "--role=sentinel".into(),
        ]),
        env: Some(vec![
            EnvVar {
                name: "CLUSTER_NAME".into(),
                value: Some(m.name.clone()),
                ..EnvVar::default()
            },
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_IP", "status.podIP"),
            EnvVar {
                name: "SHUTDOWN_GRACE_SECONDS".into(),
                value: Some(SHUTDOWN_GRACE_SECONDS.to_string()),
                ..EnvVar::default()
            },
        ]),
        ports: Some(vec![
            port("sentinel", names::SENTINEL_PORT),
            port("http", names::INSTANCE_HTTP_PORT),
        ]),
        liveness_probe: Some(liveness),
        readiness_probe: Some(readiness),
        volume_mounts: Some(
            [
                mount("data", names::DATA_DIR, false),
                mount("controller", names::CONTROLLER_DIR, false),
                mount("projected", names::PROJECTED_DIR, true),
                mount("instance-tls", instance_api::TLS_MOUNT, true),
                mount("instance-token", instance_api::TOKEN_MOUNT, true),
            ]
            .into_iter()
            .chain(tls_mount(m))
            .collect(),
        ),
        security_context: Some(restricted()),
        ..Container::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

fn volumes(m: &Model) -> Vec<Volume> {
    [
        empty_dir("data"),
        empty_dir("controller"),
        Volume {
            name: "projected".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![secret_items(
                    &m.auth_secret,
                    &[(
                        names::KEY_PASSWORD,
                        format!("{}/{}", m.auth_secret, names::KEY_PASSWORD),
                    )],
                )]),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        },
        secret_volume("instance-tls", instance_api::server_secret(&m.name)),
        secret_volume("instance-token", instance_api::token_secret(&m.name)),
    ]
    .into_iter()
    .chain(tls_volume(m))
    .collect()
}

/// `<cluster>-sentinel` on port 26379, selecting the Sentinel pods.
pub fn service(m: &Model) -> Service {
    let mut selector = m.cluster_labels();
    selector.insert(names::LABEL_ROLE.into(), names::role::SENTINEL.into());
    Service {
        metadata: owned_meta(m, &names::sentinel_service(&m.name), BTreeMap::new()),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("sentinel".into()),
                port: names::SENTINEL_PORT,
                target_port: Some(IntOrString::Int(names::SENTINEL_PORT)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::build::fixtures::model;
    use serde_json::json;

    fn settings() -> PodSettings {
        PodSettings {
            operator_image: "ghcr.io/flotilla/redis-operator:0.1.0".into(),
            process_nodes: true,
        }
    }

    #[test]
    fn a_sentinel_pod_runs_the_instance_manager_as_sentinel() {
        let m = model(json!({"instances": 3, "mode": "sentinel", "storage": {"size": "1Gi"}}));
        let p = pod(&m, &settings(), 1);
        assert_eq!(p.metadata.name.as_deref(), Some("demo-sentinel-1"));
        let labels = p.metadata.labels.clone().expect("labels");
        assert_eq!(labels[names::LABEL_CLUSTER], "demo");
        assert_eq!(labels[names::LABEL_ROLE], "sentinel");
        assert_eq!(labels[names::LABEL_WORKLOAD], "sentinel");
        assert_eq!(labels[names::LABEL_INSTANCE], "demo-sentinel-1");
        let s = p.spec.as_ref().expect("spec");
        let c = &s.containers[0];
        assert_eq!(
            c.command.as_deref().expect("command"),
            ["/controller/manager", "instance", "--role=sentinel"]
        );
        let ports: Vec<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
        assert_eq!(ports, [26379, 8080]);
        let data = s
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "data")
            .expect("data");
        assert!(data.empty_dir.is_some(), "Sentinel state is on an emptyDir");
        let mounts: Vec<&str> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|v| v.mount_path.as_str())
            .collect();
        assert!(
            mounts.contains(&instance_api::TOKEN_MOUNT),
            "the API token, for /v1/status"
        );
        assert!(
            p.metadata
                .annotations
                .expect("ann")
                .contains_key(names::ANN_SPEC_HASH)
        );
    }

    #[test]
    fn with_tls_the_users_certificates_are_mounted_and_the_hash_changes() {
        let plain = model(json!({"instances": 3, "mode": "sentinel", "storage": {"size": "1Gi"}}));
        let tls = model(
            json!({"instances": 3, "mode": "sentinel", "storage": {"size": "1Gi"},
            "tlsSecret": {"name": "srv"}, "caSecret": {"name": "ca"}}),
        );
        let (p, t) = (pod(&plain, &settings(), 0), pod(&tls, &settings(), 0));
        let hash =
            |p: &Pod| p.metadata.annotations.as_ref().expect("ann")[names::ANN_SPEC_HASH].clone();
        assert_ne!(hash(&p), hash(&t), "TLS on rolls the Sentinel pods");
        let spec = |p: &Pod| p.spec.clone().expect("spec");
        let mount_of = |p: &Pod| {
            spec(p).containers[0]
                .volume_mounts
                .iter()
                .flatten()
                .find(|v| v.mount_path == names::TLS_DIR)
                .cloned()
        };
        assert_eq!(mount_of(&p), None);
        let m = mount_of(&t).expect("/tls mounted");
        assert_eq!((m.name.as_str(), m.read_only), ("tls", Some(true)));
        let v = spec(&t)
            .volumes
            .into_iter()
            .flatten()
            .find(|v| v.name == "tls")
            .expect("tls volume");
        let sources = v.projected.expect("projected").sources.expect("sources");
        let named: Vec<(String, Vec<String>)> = sources
            .iter()
            .filter_map(|s| s.secret.as_ref())
            .map(|s| {
                let keys = s.items.iter().flatten().map(|i| i.path.clone()).collect();
                (s.name.clone(), keys)
            })
            .collect();
        assert_eq!(
            named,
            [
                (
                    "srv".to_owned(),
                    vec!["tls.crt".to_owned(), "tls.key".to_owned()]
                ),
                ("ca".to_owned(), vec!["ca.crt".to_owned()]),
            ]
        );
    }

    #[test]
    fn the_service_selects_the_sentinels_on_26379() {
        let m = model(json!({"instances": 3, "mode": "sentinel", "storage": {"size": "1Gi"}}));
        let svc = service(&m);
        assert_eq!(svc.metadata.name.as_deref(), Some("demo-sentinel"));
        let spec = svc.spec.expect("spec");
        let sel = spec.selector.expect("selector");
        assert_eq!(sel["redis.io/cluster"], "demo");
        assert_eq!(sel["redis.io/role"], "sentinel");
        assert_eq!(spec.ports.expect("ports")[0].port, 26379);
    }
}
