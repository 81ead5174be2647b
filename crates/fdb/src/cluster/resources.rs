//! The Kubernetes objects a cluster owns, as pure functions of the cluster and one process
//! group: the config map `<cluster>-config` (§8), a process group's pod and PVC, and the
//! headless service. Unified image only: the monitor configuration is the JSON the
//! `fdb-kubernetes-monitor` reads, one key per class (`fdbmonitor-conf-<class>-json`).
//!
//! Hashes: `foundationdb.org/last-applied-spec` is the SHA-256 of the pod spec's JSON and
//! `foundationdb.org/last-applied-config-map` the SHA-256 of the config-map entries the pod
//! depends on. Only self-consistency matters (a Go operator computes different hashes).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, KeyToPath,
    ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, Service, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::crd::{
    FoundationDBCluster, NONE_FAULT_DOMAIN_KEY, ProcessClass, ProcessGroupStatus, select_image,
};

/// Pod annotation: hash of the pod spec.
pub const LAST_SPEC_KEY: &str = "foundationdb.org/last-applied-spec";
/// Pod annotation: hash of the config-map entries the pod uses.
pub const LAST_CONFIG_MAP_KEY: &str = "foundationdb.org/last-applied-config-map";
/// The main container.
pub const MAIN_CONTAINER: &str = "foundationdb";
/// The sidecar container: the unified image in sidecar mode, copying its version's binaries
/// into the shared volume, where an incompatible upgrade finds the new fdbserver.
pub const SIDECAR_CONTAINER: &str = "foundationdb-kubernetes-sidecar";
/// Where the sidecar copies binaries (`bin/<version>/fdbserver` below it).
pub const SHARED_BINARIES_DIR: &str = "/var/fdb/shared-binaries";
/// The unified image's default repository.
pub const DEFAULT_MONITOR_IMAGE: &str = "foundationdb/fdb-kubernetes-monitor";
/// Default size of a data volume.
pub const DEFAULT_STORAGE: &str = "128G";

/// `<cluster>-config`.
pub fn config_map_name(cluster: &FoundationDBCluster) -> String {
    format!("{}-config", cluster.name_any())
}

/// The monitor-configuration key of `class`.
pub fn monitor_conf_key(class: &ProcessClass) -> String {
    format!("fdbmonitor-conf-{class}-json")
}

/// The hex SHA-256 of `value`'s JSON.
pub fn hash(value: &impl serde::Serialize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    format!("{:x}", Sha256::digest(bytes))
}

fn literal(v: &str) -> Value {
    json!({"value": v})
}

fn env_arg(flag: &str, var: &str) -> Value {
    json!({"type": "Concatenate", "values": [literal(flag), {"type": "Environment", "source": var}]})
}

/// The unified image's monitor configuration of `class` (§8): version, `runServers` once a
/// connection string exists, and fdbserver's arguments with their substitutions.
pub fn monitor_conf(cluster: &FoundationDBCluster, class: &ProcessClass) -> Value {
    let status = cluster.status.clone().unwrap_or_default();
    let mut args = vec![
        literal("--cluster_file=/var/fdb/data/fdb.cluster"),
        literal("--seed_cluster_file=/var/dynamic-conf/fdb.cluster"),
        json!({"type": "Concatenate", "values": [
            literal("--public_address=["), {"type": "Environment", "source": "FDB_PUBLIC_IP"},
            literal("]:"), {"type": "ProcessNumber", "offset": 4499, "multiplier": 2},
        ]}),
        literal(&format!("--class={class}")),
        literal("--logdir=/var/log/fdb-trace-logs"),
        literal(&format!("--loggroup={}", cluster.log_group())),
        literal("--datadir=/var/fdb/data"),
        env_arg("--locality_instance_id=", "FDB_INSTANCE_ID"),
        env_arg("--locality_machineid=", "FDB_MACHINE_ID"),
        env_arg("--locality_zoneid=", "FDB_ZONE_ID"),
    ];
    for p in cluster
        .process_settings(class)
        .custom_parameters
        .unwrap_or_default()
    {
        args.push(literal(&format!("--{p}")));
    }
    if !cluster.spec.data_center.is_empty() {
        args.push(literal(&format!(
            "--locality_dcid={}",
            cluster.spec.data_center
        )));
    }
    // During a protocol-incompatible upgrade the processes are to run the new version's
    // fdbserver, which the sidecar has copied into the shared volume.
    let (version, binary) = if cluster.is_being_upgraded_with_incompatible_version() {
        let v = cluster.spec.version.clone();
        let path = format!("{SHARED_BINARIES_DIR}/bin/{v}/fdbserver");
        (v, path)
    } else {
        (cluster.running_version(), "fdbserver".to_owned())
    };
    json!({
        "version": version,
        "binaryPath": binary,
        "runServers": !status.connection_string.is_empty(),
        "arguments": args,
    })
}

/// The desired config map (§8): `cluster-file`, `running-version` and one monitor
/// configuration per class with pods, then `spec.configMap.data` merged last.
pub fn config_map(cluster: &FoundationDBCluster) -> ConfigMap {
    let status = cluster.status.clone().unwrap_or_default();
    let mut data = BTreeMap::new();
    if !status.connection_string.is_empty() {
        data.insert("cluster-file".to_owned(), status.connection_string.clone());
    }
    data.insert("running-version".to_owned(), cluster.running_version());
    for (class, count) in cluster.process_counts_with_defaults().map() {
        if count > 0 {
            data.insert(
                monitor_conf_key(&class),
                monitor_conf(cluster, &class).to_string(),
            );
        }
    }
    let template = cluster.spec.config_map.clone().unwrap_or_default();
    data.extend(template.data.unwrap_or_default());
    let mut labels = template.metadata.labels.unwrap_or_default();
    labels.extend(cluster.resource_labels());
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(cluster)),
            namespace: cluster.namespace(),
            labels: Some(labels),
            annotations: template.metadata.annotations,
            owner_references: cluster.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The hash of the config-map entries a pod of `class` depends on.
pub fn config_map_hash(cm: &ConfigMap, class: &ProcessClass) -> String {
    let data = cm.data.clone().unwrap_or_default();
    let keys = ["cluster-file", "running-version", &monitor_conf_key(class)];
    let picked: BTreeMap<&str, &String> = keys
        .iter()
        .filter_map(|k| data.get(*k).map(|v| (*k, v)))
        .collect();
    hash(&picked)
}

/// Labels of a process group's objects.
pub fn group_labels(
    cluster: &FoundationDBCluster,
    group: &ProcessGroupStatus,
) -> BTreeMap<String, String> {
    let mut labels = cluster.match_labels();
    labels.extend(cluster.resource_labels());
    for l in cluster.process_class_labels() {
        labels.insert(l, group.process_class.to_string());
    }
    for l in cluster.process_group_id_labels() {
        labels.insert(l, group.process_group_id.to_string());
    }
    labels
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn value_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

/// The zone variable's source: the pod name with fault domain `foundationdb.org/none`, a
/// fixed value, or a field path (default `spec.nodeName`).
fn zone_env(cluster: &FoundationDBCluster) -> EnvVar {
    let fd = &cluster.spec.fault_domain;
    if fd.key == NONE_FAULT_DOMAIN_KEY {
        return field_env("FDB_ZONE_ID", "metadata.name");
    }
    if !fd.value.is_empty() {
        return value_env("FDB_ZONE_ID", &fd.value);
    }
    let path = if fd.value_from.is_empty() || fd.value_from.starts_with('$') {
        "spec.nodeName"
    } else {
        fd.value_from.as_str()
    };
    field_env("FDB_ZONE_ID", path)
}

/// The image the sidecar container should run: the target version during an incompatible
/// upgrade (UpdateSidecarVersions sets it in place), the pods' version otherwise.
pub fn sidecar_image(cluster: &FoundationDBCluster) -> String {
    select_image(
        &cluster.spec.sidecar_container.image_configs,
        DEFAULT_MONITOR_IMAGE,
        &cluster.spec.version,
    )
}

fn sidecar(image: String) -> Container {
    let mut args: Vec<String> = ["--mode", "sidecar", "--output-dir", SHARED_BINARIES_DIR]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    for binary in ["fdbserver", "fdbcli"] {
        args.extend(["--copy-binary".to_owned(), binary.to_owned()]);
    }
    Container {
        name: SIDECAR_CONTAINER.to_owned(),
        image: Some(image),
        args: Some(args),
        volume_mounts: Some(vec![VolumeMount {
            name: "shared-binaries".into(),
            mount_path: SHARED_BINARIES_DIR.into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    }
}

/// The desired pod spec of `group` (before hashing): the class's pod template with the main
/// container's image, environment and mounts, and the sidecar; then the group's `buggify`
/// options (crash loop, no-schedule affinity: [`super::delete_pods_for_buggification`]).
pub fn pod_spec(cluster: &FoundationDBCluster, group: &ProcessGroupStatus) -> PodSpec {
    let class = &group.process_class;
    let settings = cluster.process_settings(class);
    let mut spec = settings
        .pod_template
        .and_then(|t| t.spec)
        .unwrap_or_default();
    // A patch upgrade puts the new version into the image at once (pods are then recreated
    // by UpdatePods or replaced); an incompatible one keeps the running version until every
    // process was bounced onto the new binaries.
    let version = if cluster.is_being_upgraded_with_incompatible_version() {
        cluster.running_version()
    } else {
        cluster.spec.version.clone()
    };
    let image = select_image(
        &cluster.spec.main_container.image_configs,
        DEFAULT_MONITOR_IMAGE,
        &version,
    );
    let pos = spec
        .containers
        .iter()
        .position(|c| c.name == MAIN_CONTAINER);
    let main = match pos {
        Some(i) => &mut spec.containers[i],
        None => {
            spec.containers.push(Container {
                name: MAIN_CONTAINER.to_owned(),
                ..Container::default()
            });
            spec.containers.last_mut().expect("just pushed")
        }
    };
    main.image = Some(image);
    main.args = Some(vec![
        "--input-dir".into(),
        "/var/dynamic-conf".into(),
        "--log-path".into(),
        "/var/log/fdb-trace-logs/monitor.log".into(),
    ]);
    let env = main.env.get_or_insert_with(Vec::new);
    let id = group.process_group_id.to_string();
    let mut ours = vec![
        field_env("FDB_PUBLIC_IP", "status.podIP"),
        field_env("FDB_POD_IP", "status.podIP"),
        zone_env(cluster),
        field_env("FDB_MACHINE_ID", "spec.nodeName"),
        value_env("FDB_INSTANCE_ID", &id),
    ];
    env.retain(|e| !ours.iter().any(|o| o.name == e.name));
    env.append(&mut ours);
    let mounts = main.volume_mounts.get_or_insert_with(Vec::new);
    for (name, path) in [
        ("data", "/var/fdb/data"),
        ("config-map", "/var/dynamic-conf"),
        ("fdb-trace-logs", "/var/log/fdb-trace-logs"),
        ("shared-binaries", SHARED_BINARIES_DIR),
    ] {
        if !mounts.iter().any(|m| m.name == name) {
            mounts.push(VolumeMount {
                name: name.to_owned(),
                mount_path: path.to_owned(),
                ..VolumeMount::default()
            });
        }
    }
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    let data = match group.pvc_name(&cluster.name_any()) {
        Some(claim) => Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim,
                ..PersistentVolumeClaimVolumeSource::default()
            }),
            ..Volume::default()
        },
        None => Volume {
            name: "data".into(),
            empty_dir: Some(Default::default()),
            ..Volume::default()
        },
    };
    let config = Volume {
        name: "config-map".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name(cluster),
            items: Some(vec![
                KeyToPath {
                    key: monitor_conf_key(class),
                    path: "config.json".into(),
                    ..KeyToPath::default()
                },
                KeyToPath {
                    key: "cluster-file".into(),
                    path: "fdb.cluster".into(),
                    ..KeyToPath::default()
                },
            ]),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    };
    let logs = Volume {
        name: "fdb-trace-logs".into(),
        empty_dir: Some(Default::default()),
        ..Volume::default()
    };
    let shared = Volume {
        name: "shared-binaries".into(),
        empty_dir: Some(Default::default()),
        ..Volume::default()
    };
    for v in [data, config, logs, shared] {
        if !volumes.iter().any(|x| x.name == v.name) {
            volumes.push(v);
        }
    }
    if !spec.containers.iter().any(|c| c.name == SIDECAR_CONTAINER) {
        let image = select_image(
            &cluster.spec.sidecar_container.image_configs,
            DEFAULT_MONITOR_IMAGE,
            &version,
        );
        spec.containers.push(sidecar(image));
    }
    super::delete_pods_for_buggification::apply_to_pod_spec(cluster, &id, &mut spec);
    spec
}

/// The image `pod`'s container `name` runs, if it has that container.
pub fn container_image(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)?
        .image
        .clone()
}

/// The desired pod of `group`; `config_hash` is [`config_map_hash`] of the current map.
pub fn pod(cluster: &FoundationDBCluster, group: &ProcessGroupStatus, config_hash: &str) -> Pod {
    let settings = cluster.process_settings(&group.process_class);
    let template_meta = settings
        .pod_template
        .and_then(|t| t.metadata)
        .unwrap_or_default();
    let spec = pod_spec(cluster, group);
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.extend(group_labels(cluster, group));
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(LAST_SPEC_KEY.to_owned(), hash(&spec));
    annotations.insert(LAST_CONFIG_MAP_KEY.to_owned(), config_hash.to_owned());
    Pod {
        metadata: ObjectMeta {
            name: Some(group.pod_name(&cluster.name_any())),
            namespace: cluster.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: cluster.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        ..Pod::default()
    }
}

/// The desired PVC of a stateful `group` (the class's claim template, 128G by default).
pub fn pvc(
    cluster: &FoundationDBCluster,
    group: &ProcessGroupStatus,
) -> Option<PersistentVolumeClaim> {
    let name = group.pvc_name(&cluster.name_any())?;
    let template = cluster
        .process_settings(&group.process_class)
        .volume_claim_template
        .unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    if spec.access_modes.as_ref().is_none_or(Vec::is_empty) {
        spec.access_modes = Some(vec!["ReadWriteOnce".into()]);
    }
    let resources = spec
        .resources
        .get_or_insert_with(VolumeResourceRequirements::default);
    resources
        .requests
        .get_or_insert_with(BTreeMap::new)
        .entry("storage".into())
        .or_insert_with(|| Quantity(DEFAULT_STORAGE.into()));
    let mut labels = template.metadata.labels.unwrap_or_default();
    labels.extend(group_labels(cluster, group));
    // The spec's hash tells ReplaceMisconfiguredProcessGroups when the claim template changed.
    let mut annotations = template.metadata.annotations.unwrap_or_default();
    annotations.insert(LAST_SPEC_KEY.to_owned(), hash(&spec));
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: cluster.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: cluster.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec { ..spec }),
        ..PersistentVolumeClaim::default()
    })
}

/// The headless service named like the cluster, selecting its pods.
pub fn headless_service(cluster: &FoundationDBCluster) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(cluster.name_any()),
            namespace: cluster.namespace(),
            labels: Some(cluster.resource_labels()),
            owner_references: cluster.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(cluster.match_labels()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{FoundationDBClusterSpec, ProcessGroupId};

    fn cluster() -> FoundationDBCluster {
        let mut c = FoundationDBCluster::new(
            "sample",
            FoundationDBClusterSpec {
                version: "7.1.57".into(),
                ..FoundationDBClusterSpec::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c
    }

    fn group(id: &str, class: &str) -> ProcessGroupStatus {
        ProcessGroupStatus::new(
            ProcessGroupId::new(id),
            ProcessClass::new(class),
            jiff::Timestamp::UNIX_EPOCH,
        )
    }

    #[test]
    fn pods_and_claims_follow_upstreams_names_and_labels() {
        let c = cluster();
        let g = group("storage-7", "storage");
        let pod = pod(&c, &g, "h");
        assert_eq!(pod.name_any(), "sample-storage-7");
        let labels = pod.labels();
        assert_eq!(labels["foundationdb.org/fdb-cluster-name"], "sample");
        assert_eq!(labels["foundationdb.org/fdb-process-class"], "storage");
        assert_eq!(labels["foundationdb.org/fdb-process-group-id"], "storage-7");
        assert_eq!(pod.annotations()[LAST_CONFIG_MAP_KEY], "h");
        assert_eq!(pvc(&c, &g).unwrap().name_any(), "sample-storage-7-data");
        assert!(pvc(&c, &group("stateless-3", "stateless")).is_none());
        let main = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            main.image.as_deref(),
            Some("foundationdb/fdb-kubernetes-monitor:7.1.57")
        );
    }

    #[test]
    fn the_spec_hash_is_stable_and_follows_the_spec() {
        let c = cluster();
        let g = group("log-1", "log");
        let a = pod(&c, &g, "h").annotations()[LAST_SPEC_KEY].clone();
        let b = pod(&c, &g, "h").annotations()[LAST_SPEC_KEY].clone();
        assert_eq!(a, b);
        let mut changed = cluster();
        changed.spec.version = "7.1.63".into();
        assert_ne!(a, pod(&changed, &g, "h").annotations()[LAST_SPEC_KEY]);
    }

    #[test]
    fn config_map_has_one_monitor_conf_per_class_and_the_cluster_file_once_known() {
        let mut c = cluster();
        let cm = config_map(&c);
        let data = cm.data.clone().unwrap();
        assert!(!data.contains_key("cluster-file"));
        assert_eq!(data["running-version"], "7.1.57");
        for class in ["storage", "log", "stateless"] {
            let conf: Value =
                serde_json::from_str(&data[&format!("fdbmonitor-conf-{class}-json")]).unwrap();
            assert_eq!(conf["runServers"], false);
        }
        let before = config_map_hash(&cm, &ProcessClass::new("storage"));
        c.status = Some(crate::crd::FoundationDBClusterStatus {
            connection_string: "sample:abc@127.1.0.1:4501".into(),
            ..Default::default()
        });
        let cm = config_map(&c);
        assert_eq!(
            cm.data.as_ref().unwrap()["cluster-file"],
            "sample:abc@127.1.0.1:4501"
        );
        assert_ne!(before, config_map_hash(&cm, &ProcessClass::new("storage")));
    }
}
