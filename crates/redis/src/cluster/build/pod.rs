//! The data pod `<cluster>-<ordinal>`, exactly as the instance manager expects it (the contract
//! in [`crate::instance_api`] and docs/redis.md):
//!
//! - init container `copy-manager`: the operator image, `/redis-operator copy-binary
//!   /controller/manager`, installing the instance manager into the `controller` emptyDir;
//!   with `spec.bootstrap`, ordinal 0 also runs `restore-data` (`/redis-operator restore
//!   --backup-name <backup>`) before Redis first starts, only while the bootstrap is not over
//!   (`status.bootstrapCompleted`, set when the cluster is first Healthy): a pod 0 recreated
//!   later, on a new PVC, resynchronises from the primary instead of needing the RedisBackup;
//! - container `redis`: image `spec.imageName`, command `/controller/manager instance`, env
//!   `CLUSTER_NAME`, `POD_NAME`, `POD_NAMESPACE`, `POD_IP` (downward API), ports 6379 `redis`
//!   and 8080 `http` (HTTPS), liveness `/healthz` and readiness `/readyz` over HTTPS;
//! - volumes: `data` at `/data` (the PVC `<cluster>-data-<ordinal>` or an emptyDir),
//!   `controller` at `/controller`, the referenced Secrets projected at
//!   `/projected/<secret>/<key>`, the API token at [`instance_api::TOKEN_MOUNT`], the API's
//!   serving certificate at [`instance_api::TLS_MOUNT`], the user's TLS at `/tls`, backup
//!   credentials at `/backup-credentials` (an optional Secret volume, so Redis runs before the
//!   Secret exists; a bootstrap restore without them fails with the store's reason and is
//!   retried by the kubelet);
//! - ServiceAccount `<cluster>` (read-only on its own cluster).
//!
//! Contract: [`pod`] is pure. [`spec_hash`] covers the pod spec (with the operator image left
//! out, so an operator upgrade alone does not roll every pod, upstream's defect 13) and the
//! instance API version (an incompatible instance manager is rolled); it is the
//! `redis.io/spec-hash` annotation that drives the rolling update. The `restore-data` init
//! container is left out of the hash too: its removal once the bootstrap is over is no reason
//! to restart the primary.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, KeyToPath, ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod,
    PodSecurityContext, PodSpec, Probe, ProjectedVolumeSource, SeccompProfile, SecretProjection,
    SecretVolumeSource, SecurityContext, Toleration, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{PodSettings, owned_meta, short_hash};
use crate::cluster::model::Model;
use crate::crd::StorageType;
use crate::instance_api;
use crate::names;

/// The Redis container's name.
pub const REDIS_CONTAINER: &str = "redis";
/// The init container's name.
pub const COPY_CONTAINER: &str = "copy-manager";
/// The bootstrap restore's init container (ordinal 0 of a cluster with `bootstrap`).
pub const RESTORE_CONTAINER: &str = "restore-data";
/// uid/gid of the Redis process (the official image's `redis` user).
pub const REDIS_UID: i64 = 999;
/// Seconds the instance manager's graceful stop may take (`SHUTDOWN_GRACE_SECONDS`).
pub const SHUTDOWN_GRACE_SECONDS: i64 = 25;
/// The pod's termination grace: the stop's grace plus time to exit.
pub const TERMINATION_GRACE_SECONDS: i64 = SHUTDOWN_GRACE_SECONDS + 5;
/// Readiness probe period (seconds): a frozen or dead primary turns NotReady within three
/// periods, which corroborates a failover.
pub const READINESS_PERIOD_SECONDS: i32 = 2;
/// The label and taint of the local plane's process-backed nodes.
pub const PROCESS_NODE_KEY: &str = "flotilla.dev/process-node";

/// The desired data pod of `ordinal` with role label `role`.
pub fn pod(m: &Model, s: &PodSettings, ordinal: i32, role: &str) -> Pod {
    let name = m.pod_name(ordinal);
    let spec = spec(m, s, ordinal);
    let hash = spec_hash(&spec);
    let labels = BTreeMap::from([
        (names::LABEL_INSTANCE.to_owned(), name.clone()),
        (names::LABEL_ROLE.to_owned(), role.to_owned()),
        (
            names::LABEL_WORKLOAD.to_owned(),
            names::workload::DATA.to_owned(),
        ),
    ]);
    let mut meta = owned_meta(m, &name, labels);
    meta.annotations = Some(BTreeMap::from([(names::ANN_SPEC_HASH.to_owned(), hash)]));
    Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    }
}

/// The `redis.io/spec-hash` of a pod spec built by [`pod`] (see the module contract).
pub fn spec_hash(spec: &PodSpec) -> String {
    let mut s = spec.clone();
    if let Some(init) = s.init_containers.as_mut() {
        init.retain(|c| c.name != RESTORE_CONTAINER);
        for c in init.iter_mut() {
            c.image = None;
        }
    }
    let json = serde_json::to_vec(&s).unwrap_or_default();
    let mut input = instance_api::API_VERSION.as_bytes().to_vec();
    input.push(0);
    input.extend(json);
    short_hash(&input)
}

fn spec(m: &Model, s: &PodSettings, ordinal: i32) -> PodSpec {
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
        init_containers: Some(init_containers(m, s, ordinal)),
        containers: vec![redis(m)],
        volumes: Some(volumes(m, ordinal)),
        node_selector: (!node_selector.is_empty()).then_some(node_selector),
        affinity: m.spec.affinity.clone(),
        tolerations: (!tolerations.is_empty()).then_some(tolerations),
        topology_spread_constraints: m.spec.topology_spread_constraints.clone(),
        ..PodSpec::default()
    }
}

pub(crate) fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

pub(crate) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

pub(crate) fn copy_manager(s: &PodSettings) -> Container {
    Container {
        name: COPY_CONTAINER.into(),
        image: Some(s.operator_image.clone()),
        command: Some(vec![
            format!("/{}", names::OPERATOR_NAME),
            "copy-binary".into(),
            names::MANAGER_BINARY.into(),
        ]),
        volume_mounts: Some(vec![mount("controller", names::CONTROLLER_DIR, false)]),
        security_context: Some(restricted()),
        ..Container::default()
    }
}

fn init_containers(m: &Model, s: &PodSettings, ordinal: i32) -> Vec<Container> {
    let mut out = vec![copy_manager(s)];
    // The bootstrap restore into the first primary's storage, only until the bootstrap is
    // over: a pod 0 recreated afterwards (on a new PVC, its RedisBackup perhaps deleted since)
    // resynchronises from the primary. Its marker file makes a re-run on the same PVC a no-op.
    let backup = m.spec.bootstrap.as_ref().map(|b| b.backup_name.clone());
    if let Some(backup) = backup.filter(|_| bootstrapping(m) && ordinal == 0) {
        let mut mounts = vec![mount("data", names::DATA_DIR, false)];
        if m.spec.backup_credentials_secret.is_some() {
            mounts.push(mount(
                "backup-credentials",
                names::BACKUP_CREDENTIALS_DIR,
                true,
            ));
        }
        out.push(Container {
            name: RESTORE_CONTAINER.into(),
            image: Some(s.operator_image.clone()),
            command: Some(vec![
                format!("/{}", names::OPERATOR_NAME),
                "restore".into(),
                "--backup-name".into(),
                backup,
            ]),
            env: Some(vec![field_env("POD_NAMESPACE", "metadata.namespace")]),
            volume_mounts: Some(mounts),
            security_context: Some(restricted()),
            ..Container::default()
        });
    }
    out
}

pub(crate) fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

pub(crate) fn https_probe(path: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            scheme: Some("HTTPS".into()),
            ..HTTPGetAction::default()
        }),
        ..Probe::default()
    }
}

// ceil(apiServerTimeout + peerTimeout + 2 s), upstream's liveness timeout (12 s by default).
fn liveness_timeout(m: &Model) -> i32 {
    let iso = m.spec.primary_isolation.clone().unwrap_or_default();
    let secs = |d: Option<&String>| {
        d.and_then(|d| crate::schedule::parse_go_duration(d).ok())
            .map_or(5.0, |d| d.as_secs_f64())
    };
    let total = secs(iso.api_server_timeout.as_ref()) + secs(iso.peer_timeout.as_ref()) + 2.0;
    i32::try_from(total.ceil() as i64).unwrap_or(12).max(1)
}

fn redis(m: &Model) -> Container {
    let mut liveness = https_probe(names::PATH_HEALTHZ);
    liveness.initial_delay_seconds = Some(10);
    liveness.period_seconds = Some(10);
    liveness.failure_threshold = Some(3);
    liveness.timeout_seconds = Some(liveness_timeout(m));
    let mut readiness = https_probe(names::PATH_READYZ);
    readiness.period_seconds = Some(READINESS_PERIOD_SECONDS);
    readiness.timeout_seconds = Some(2);
    readiness.failure_threshold = Some(3);
    let mut mounts = vec![
        mount("data", names::DATA_DIR, false),
        mount("controller", names::CONTROLLER_DIR, false),
        mount("projected", names::PROJECTED_DIR, true),
        mount("instance-token", instance_api::TOKEN_MOUNT, true),
        mount("instance-tls", instance_api::TLS_MOUNT, true),
    ];
    mounts.extend(tls_mount(m));
    if m.spec.backup_credentials_secret.is_some() {
        mounts.push(mount(
            "backup-credentials",
            names::BACKUP_CREDENTIALS_DIR,
            true,
        ));
    }
    Container {
        name: REDIS_CONTAINER.into(),
        image: Some(m.spec.image_name.clone()),
        command: Some(vec![names::MANAGER_BINARY.into(), "instance".into()]),
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
            port("redis", names::REDIS_PORT),
            port("http", names::INSTANCE_HTTP_PORT),
        ]),
        liveness_probe: Some(liveness),
        readiness_probe: Some(readiness),
        resources: m.spec.resources.clone(),
        volume_mounts: Some(mounts),
        security_context: Some(restricted()),
        ..Container::default()
    }
}

pub(crate) fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    }
}

pub(crate) fn secret_items(secret: &str, keys: &[(&str, String)]) -> VolumeProjection {
    VolumeProjection {
        secret: Some(SecretProjection {
            name: secret.into(),
            items: Some(
                keys.iter()
                    .map(|(key, path)| KeyToPath {
                        key: (*key).into(),
                        path: path.clone(),
                        ..KeyToPath::default()
                    })
                    .collect(),
            ),
            ..SecretProjection::default()
        }),
        ..VolumeProjection::default()
    }
}

/// The `/projected/<secret>/<key>` sources: auth `password`, ACL `acl`, replica-mode source
/// `password`.
fn projected(m: &Model) -> Vec<VolumeProjection> {
    let mut out = vec![secret_items(
        &m.auth_secret,
        &[(
            names::KEY_PASSWORD,
            format!("{}/{}", m.auth_secret, names::KEY_PASSWORD),
        )],
    )];
    if let Some(acl) = &m.spec.acl_config_secret {
        out.push(secret_items(
            &acl.name,
            &[(names::KEY_ACL, format!("{}/{}", acl.name, names::KEY_ACL))],
        ));
    }
    let source = m.spec.replica_mode.as_ref().and_then(|r| r.source.as_ref());
    if let Some(src) = source.filter(|s| !s.auth_secret_name.is_empty()) {
        let n = &src.auth_secret_name;
        if n != &m.auth_secret {
            out.push(secret_items(
                n,
                &[(names::KEY_PASSWORD, format!("{n}/{}", names::KEY_PASSWORD))],
            ));
        }
    }
    out
}

pub(crate) fn secret_volume(name: &str, secret: String) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn volumes(m: &Model, ordinal: i32) -> Vec<Volume> {
    let data = match m.spec.storage.r#type {
        StorageType::Pvc => Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: names::pvc_name(&m.name, ordinal),
                ..PersistentVolumeClaimVolumeSource::default()
            }),
            ..Volume::default()
        },
        StorageType::EmptyDir => Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(m.spec.storage.size.clone()),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
    };
    let mut out = vec![
        data,
        Volume {
            name: "controller".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: "projected".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(projected(m)),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        },
        secret_volume("instance-token", instance_api::token_secret(&m.name)),
        secret_volume("instance-tls", instance_api::server_secret(&m.name)),
    ];
    out.extend(tls_volume(m));
    if let Some(b) = &m.spec.backup_credentials_secret {
        // Only backups and the bootstrap restore read it: Redis runs without it (the kubelet
        // projects it once it exists). Always optional, so the pod spec (and its hash) does
        // not change when the bootstrap ends, and a pod recreated after the Secret was deleted
        // still starts; while bootstrapping the cluster waits for the Secret
        // (`ensure_secrets`), and a restore without credentials fails saying so.
        let mut v = secret_volume("backup-credentials", b.name.clone());
        if let Some(s) = v.secret.as_mut() {
            s.optional = Some(true);
        }
        out.push(v);
    }
    out
}

/// Whether the cluster's first primary is restored from a backup (`spec.bootstrap`).
pub fn bootstraps(m: &Model) -> bool {
    m.spec
        .bootstrap
        .as_ref()
        .is_some_and(|b| !b.backup_name.is_empty())
}

/// Whether the bootstrap restore is still to happen: the cluster bootstraps from a backup
/// and has not been Healthy yet (`status.bootstrapCompleted`).
pub fn bootstrapping(m: &Model) -> bool {
    bootstraps(m) && !m.status.bootstrap_completed
}

/// The user's TLS (`tlsSecret`'s `tls.crt`/`tls.key`, `caSecret`'s `ca.crt`) projected into
/// one volume `tls`, when the cluster has TLS (data and Sentinel pods alike).
pub fn tls_volume(m: &Model) -> Option<Volume> {
    let (Some(tls), Some(ca)) = (&m.spec.tls_secret, &m.spec.ca_secret) else {
        return None;
    };
    Some(Volume {
        name: "tls".into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                secret_items(
                    &tls.name,
                    &[
                        (names::KEY_TLS_CRT, names::KEY_TLS_CRT.into()),
                        (names::KEY_TLS_KEY, names::KEY_TLS_KEY.into()),
                    ],
                ),
                secret_items(&ca.name, &[(names::KEY_CA_CRT, names::KEY_CA_CRT.into())]),
            ]),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    })
}

/// Its read-only mount at [`names::TLS_DIR`], with [`tls_volume`].
pub fn tls_mount(m: &Model) -> Option<VolumeMount> {
    tls_volume(m).map(|_| mount("tls", names::TLS_DIR, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::build::fixtures::model;
    use serde_json::json;

    fn settings(process_nodes: bool) -> PodSettings {
        PodSettings {
            operator_image: "ghcr.io/flotilla/redis-operator:0.1.0".into(),
            process_nodes,
        }
    }

    fn spec_of(p: &Pod) -> &PodSpec {
        p.spec.as_ref().expect("spec")
    }

    #[test]
    fn the_pod_matches_the_instance_manager_contract() {
        let m = model(json!({"instances": 3, "storage": {"size": "1Gi"}}));
        let p = pod(&m, &settings(false), 2, names::role::REPLICA);
        assert_eq!(p.metadata.name.as_deref(), Some("demo-2"));
        let labels = p.metadata.labels.clone().expect("labels");
        assert_eq!(labels[names::LABEL_CLUSTER], "demo");
        assert_eq!(labels[names::LABEL_INSTANCE], "demo-2");
        assert_eq!(labels[names::LABEL_ROLE], "replica");
        assert_eq!(labels[names::LABEL_WORKLOAD], "data");
        assert_eq!(
            p.metadata.owner_references.as_ref().expect("owner")[0].uid,
            "u-1"
        );
        let s = spec_of(&p);
        assert_eq!(s.service_account_name.as_deref(), Some("demo"));
        let init = &s.init_containers.as_ref().expect("init")[0];
        assert_eq!(init.name, "copy-manager");
        assert_eq!(
            init.command.clone().expect("cmd"),
            ["/redis-operator", "copy-binary", "/controller/manager"]
        );
        let c = &s.containers[0];
        assert_eq!(c.image.as_deref(), Some("redis:7.2"));
        assert_eq!(
            c.command.clone().expect("cmd"),
            ["/controller/manager", "instance"]
        );
        let env: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
        for want in ["CLUSTER_NAME", "POD_NAME", "POD_NAMESPACE", "POD_IP"] {
            assert!(env.contains(&want), "{want} in {env:?}");
        }
        let mounts: BTreeMap<&str, &str> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|v| (v.mount_path.as_str(), v.name.as_str()))
            .collect();
        for path in [
            "/data",
            "/controller",
            "/projected",
            "/instance-token",
            "/instance-tls",
        ] {
            assert!(mounts.contains_key(path), "{path} mounted");
        }
        let vols = s.volumes.as_ref().expect("volumes");
        let data = vols.iter().find(|v| v.name == "data").expect("data");
        assert_eq!(
            data.persistent_volume_claim
                .as_ref()
                .expect("pvc")
                .claim_name,
            "demo-data-2"
        );
        let projected = vols
            .iter()
            .find(|v| v.name == "projected")
            .expect("projected");
        let paths: Vec<String> = projected
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
            .flat_map(|s| s.secret.iter().flat_map(|s| s.items.iter().flatten()))
            .map(|i| i.path.clone())
            .collect();
        assert_eq!(paths, ["demo-auth/password"]);
        assert_eq!(
            c.liveness_probe.as_ref().and_then(|p| p.timeout_seconds),
            Some(12),
            "upstream's ceil(5s + 5s + 2s)"
        );
        assert!(s.tolerations.is_none() && s.node_selector.is_none());
        assert_eq!(s.init_containers.as_ref().expect("init").len(), 1);
    }

    #[test]
    fn a_bootstrapped_cluster_restores_into_ordinal_zero() {
        let m = model(
            json!({"storage": {"size": "1Gi"}, "bootstrap": {"backupName": "nightly"},
            "backupCredentialsSecret": {"name": "s3"}}),
        );
        let p = pod(&m, &settings(false), 0, names::role::PRIMARY);
        let init = spec_of(&p).init_containers.clone().expect("init");
        assert_eq!(init[1].name, "restore-data");
        assert_eq!(
            init[1].command.clone().expect("cmd"),
            ["/redis-operator", "restore", "--backup-name", "nightly"]
        );
        let other = pod(&m, &settings(false), 1, names::role::REPLICA);
        assert_eq!(
            spec_of(&other)
                .init_containers
                .as_ref()
                .expect("init")
                .len(),
            1
        );
    }

    // Once the cluster was Healthy, a recreated pod 0 (a new PVC, its RedisBackup perhaps
    // deleted since) resynchronises from the primary: no restore, which would wait forever
    // for a missing backup; and the pod's hash is the same, so the end of the bootstrap rolls
    // nothing.
    #[test]
    fn the_restore_runs_only_until_the_bootstrap_is_over() {
        let spec = json!({"storage": {"size": "1Gi"}, "bootstrap": {"backupName": "nightly"},
            "backupCredentialsSecret": {"name": "s3"}});
        let during = model(spec.clone());
        let mut after = model(spec);
        after.status.bootstrap_completed = true;
        assert!(bootstrapping(&during) && !bootstrapping(&after));
        let init = |m: &Model| {
            let p = pod(m, &settings(false), 0, names::role::PRIMARY);
            let names: Vec<String> = spec_of(&p)
                .init_containers
                .iter()
                .flatten()
                .map(|c| c.name.clone())
                .collect();
            let hash = p.metadata.annotations.expect("ann")[names::ANN_SPEC_HASH].clone();
            (names, hash)
        };
        let (before, h1) = init(&during);
        let (later, h2) = init(&after);
        assert_eq!(before, ["copy-manager", "restore-data"]);
        assert_eq!(later, ["copy-manager"]);
        assert_eq!(
            h1, h2,
            "the end of the bootstrap is no reason to restart pod 0"
        );
    }

    #[test]
    fn optional_secrets_and_process_nodes_add_what_they_need() {
        let m = model(json!({
            "storage": {"type": "emptyDir", "size": "2Gi"},
            "authSecret": {"name": "pw"},
            "aclConfigSecret": {"name": "acl"},
            "tlsSecret": {"name": "tls"}, "caSecret": {"name": "ca"},
            "backupCredentialsSecret": {"name": "s3"},
            "primaryIsolation": {"apiServerTimeout": "1500ms", "peerTimeout": "1s"},
        }));
        let p = pod(&m, &settings(true), 0, names::role::PRIMARY);
        let s = spec_of(&p);
        let vols = s.volumes.as_ref().expect("volumes");
        let data = vols.iter().find(|v| v.name == "data").expect("data");
        assert_eq!(
            data.empty_dir.as_ref().and_then(|e| e.size_limit.clone()),
            Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                "2Gi".into()
            ))
        );
        for v in ["tls", "backup-credentials"] {
            assert!(vols.iter().any(|x| x.name == v), "{v}");
        }
        // Redis runs without the backup credentials; a bootstrap restore needs them.
        let optional = |m: &Model| {
            let p = pod(m, &settings(true), 0, names::role::PRIMARY);
            let vols = spec_of(&p).volumes.clone().expect("volumes");
            let v = vols.into_iter().find(|x| x.name == "backup-credentials");
            v.and_then(|v| v.secret).and_then(|s| s.optional)
        };
        assert_eq!(optional(&m), Some(true));
        let restoring = model(json!({
            "storage": {"size": "1Gi"}, "bootstrap": {"backupName": "nightly"},
            "backupCredentialsSecret": {"name": "s3"},
        }));
        assert_eq!(optional(&restoring), Some(true), "also while bootstrapping");
        let c = &s.containers[0];
        assert_eq!(
            c.liveness_probe.as_ref().and_then(|p| p.timeout_seconds),
            Some(5)
        );
        assert_eq!(
            s.node_selector.clone().expect("selector")[PROCESS_NODE_KEY],
            "true"
        );
        assert_eq!(s.tolerations.as_ref().expect("tolerations").len(), 1);
    }

    #[test]
    fn the_hash_ignores_the_operator_image_and_follows_the_spec() {
        let m = model(json!({"storage": {"size": "1Gi"}}));
        let a = pod(&m, &settings(false), 0, "primary");
        let mut other = settings(false);
        other.operator_image = "ghcr.io/flotilla/redis-operator:9.9.9".into();
        let b = pod(&m, &other, 0, "replica");
        let hash =
            |p: &Pod| p.metadata.annotations.clone().expect("ann")[names::ANN_SPEC_HASH].clone();
        assert_eq!(hash(&a), hash(&b), "operator image and role do not roll");
        let m2 = model(json!({"storage": {"size": "1Gi"}, "imageName": "redis:7.4"}));
        assert_ne!(hash(&a), hash(&pod(&m2, &settings(false), 0, "primary")));
        assert_eq!(hash(&a), spec_hash(spec_of(&a)));
    }
}
