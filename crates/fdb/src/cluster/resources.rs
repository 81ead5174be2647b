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
    PersistentVolumeClaimVolumeSource, Pod, PodAffinityTerm, PodSpec, Service, ServiceSpec, Volume,
    VolumeMount, VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::crd::{
    FoundationDBCluster, KUBERNETES_CLUSTER_FAULT_DOMAIN_KEY, NONE_FAULT_DOMAIN_KEY, ProcessClass,
    ProcessGroupStatus, ZONE_ID_ENV, select_image,
};

/// Pod annotation: hash of the pod spec.
pub const LAST_SPEC_KEY: &str = "foundationdb.org/last-applied-spec";
/// Pod annotation: hash of the config-map entries the pod uses.
pub const LAST_CONFIG_MAP_KEY: &str = "foundationdb.org/last-applied-config-map";
/// Pod annotation: the image type the pod was built for (upstream's
/// `foundationdb.org/image-type`; always `unified` here).
pub const IMAGE_TYPE_KEY: &str = "foundationdb.org/image-type";
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

/// The fdbserver processes `pod` runs for `class`: the class's servers-per-pod variable
/// (`STORAGE_SERVERS_PER_POD`, `LOG_SERVERS_PER_POD`, …) of any of its containers, else 1
/// (upstream's `GetServersPerPodForPod`; an unreadable value counts as 1).
pub fn servers_per_pod(pod: &Pod, class: &ProcessClass) -> i64 {
    let name = class.servers_per_pod_env_name();
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == name)
        .and_then(|e| e.value.as_deref()?.parse::<i64>().ok())
        .map_or(1, |n| n.max(1))
}

/// The monitor-configuration key of `class`. The unified image has one per class whatever the
/// servers per pod: its monitor starts `--process-count` processes from the same
/// configuration (upstream writes `-density-<n>` keys for the split image only).
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
        // The unified image always gives each process its own data directory and a
        // `process_id` locality `<group>-<n>`, whatever the number of processes per pod (as
        // upstream does), so a pod's layout does not change with the count.
        json!({"type": "Concatenate", "values": [
            literal("--datadir=/var/fdb/data/"), {"type": "ProcessNumber"},
        ]}),
        json!({"type": "Concatenate", "values": [
            literal("--locality_process_id="), {"type": "Environment", "source": "FDB_INSTANCE_ID"},
            literal("-"), {"type": "ProcessNumber"},
        ]}),
        env_arg("--locality_instance_id=", "FDB_INSTANCE_ID"),
        env_arg("--locality_machineid=", "FDB_MACHINE_ID"),
        env_arg("--locality_zoneid=", &cluster.zone_variable_name()),
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
    // During a protocol-incompatible upgrade the processes are to run the new version: the
    // monitor, whose own fdbserver cannot, runs the one the sidecar has copied into the
    // shared volume. The configuration names no binary (the monitor ignores a binary path).
    let version = if cluster.is_being_upgraded_with_incompatible_version() {
        cluster.spec.version.clone()
    } else {
        cluster.running_version()
    };
    json!({
        "version": version,
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

/// The locality variables' sources, as upstream's `getEnvForMonitorConfigSubstitution`:
/// with fault domain `foundationdb.org/none` machine and zone are the pod's name; with
/// `foundationdb.org/kubernetes-cluster` the machine is the node and the zone the fault
/// domain's `value`; otherwise the machine is the node and the zone the field `valueFrom`
/// names (default `spec.nodeName`). A `valueFrom` of `$VAR` adds no zone variable: the
/// monitor configuration then reads `VAR`, which the pod template has to define.
fn locality_env(cluster: &FoundationDBCluster) -> Vec<EnvVar> {
    let fd = &cluster.spec.fault_domain;
    if fd.key == NONE_FAULT_DOMAIN_KEY {
        return vec![
            field_env("FDB_MACHINE_ID", "metadata.name"),
            field_env(ZONE_ID_ENV, "metadata.name"),
        ];
    }
    let machine = field_env("FDB_MACHINE_ID", "spec.nodeName");
    if fd.key == KUBERNETES_CLUSTER_FAULT_DOMAIN_KEY {
        return vec![machine, value_env(ZONE_ID_ENV, &fd.value)];
    }
    if fd.value_from.starts_with('$') {
        return vec![machine];
    }
    let path = if fd.value_from.is_empty() {
        "spec.nodeName"
    } else {
        fd.value_from.as_str()
    };
    vec![machine, field_env(ZONE_ID_ENV, path)]
}

/// The main container's environment on the unified image, upstream's
/// (`configureContainersForUnifiedImages`): the monitor finds its own pod through
/// `FDB_POD_NAME`/`FDB_POD_NAMESPACE` (and its node through `FDB_NODE_NAME`), fdbserver's
/// client traces go to the log volume, and the substitutions of the monitor configuration
/// follow; `FDB_POD_IP` only with an explicit listen address, `FDB_DNS_NAME` only with DNS
/// locality fields.
fn main_env(cluster: &FoundationDBCluster, group: &ProcessGroupStatus) -> Vec<EnvVar> {
    let mut env = vec![
        field_env("FDB_POD_NAME", "metadata.name"),
        field_env("FDB_POD_NAMESPACE", "metadata.namespace"),
        value_env("FDB_NETWORK_OPTION_TRACE_LOG_GROUP", &cluster.log_group()),
        value_env("FDB_NETWORK_OPTION_TRACE_ENABLE", "/var/log/fdb-trace-logs"),
        field_env("FDB_NODE_NAME", "spec.nodeName"),
        field_env("FDB_PUBLIC_IP", "status.podIP"),
    ];
    if cluster.use_explicit_listen_address() {
        env.push(field_env("FDB_POD_IP", "status.podIP"));
    }
    env.extend(locality_env(cluster));
    env.push(value_env(
        "FDB_INSTANCE_ID",
        group.process_group_id.as_str(),
    ));
    if cluster.define_dns_locality_fields() {
        let dns = format!(
            "{}.{}.{}.svc.{}",
            group.pod_name(&cluster.name_any()),
            cluster.name_any(),
            cluster.namespace().unwrap_or_default(),
            cluster.dns_domain()
        );
        env.push(value_env("FDB_DNS_NAME", &dns));
    }
    env
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
    let mut args: Vec<String> = [
        "--input-dir",
        "/var/dynamic-conf",
        "--log-path",
        "/var/log/fdb-trace-logs/monitor.log",
    ]
    .map(String::from)
    .into();
    let env = main.env.get_or_insert_with(Vec::new);
    let id = group.process_group_id.to_string();
    let mut ours = Vec::new();
    // Several fdbserver processes per pod: the monitor's `--process-count`, and the variable
    // the operator reads the pod's count back from (upstream sets both only above 1).
    let servers = cluster.desired_servers_per_pod(class);
    if servers > 1 {
        args.extend(["--process-count".to_owned(), servers.to_string()]);
        ours.push(value_env(
            &class.servers_per_pod_env_name(),
            &servers.to_string(),
        ));
    }
    main.args = Some(args);
    ours.extend(main_env(cluster, group));
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
    spread_over_fault_domains(cluster, class, &mut spec);
    super::delete_pods_for_buggification::apply_to_pod_spec(cluster, &id, &mut spec);
    spec
}

/// Upstream's `setAffinityForFaultDomain`: unless every pod is its own zone
/// (`foundationdb.org/none`) or the Kubernetes cluster is one (`.../kubernetes-cluster`), the
/// pods of a class prefer (weight 1) not to share a fault domain (the fault domain's key,
/// default `kubernetes.io/hostname`) with another pod of the cluster and class; the term is
/// added to those of the pod template.
fn spread_over_fault_domains(
    cluster: &FoundationDBCluster,
    class: &ProcessClass,
    spec: &mut PodSpec,
) {
    let key = match cluster.spec.fault_domain.key.as_str() {
        "" => "kubernetes.io/hostname",
        NONE_FAULT_DOMAIN_KEY | KUBERNETES_CLUSTER_FAULT_DOMAIN_KEY => return,
        key => key,
    };
    let mut labels = cluster.match_labels();
    labels.insert(cluster.process_class_label(), class.to_string());
    let term = WeightedPodAffinityTerm {
        weight: 1,
        pod_affinity_term: PodAffinityTerm {
            topology_key: key.to_owned(),
            label_selector: Some(LabelSelector {
                match_labels: Some(labels),
                ..LabelSelector::default()
            }),
            ..PodAffinityTerm::default()
        },
    };
    spec.affinity
        .get_or_insert_with(Default::default)
        .pod_anti_affinity
        .get_or_insert_with(Default::default)
        .preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(term);
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
    annotations.insert(
        IMAGE_TYPE_KEY.to_owned(),
        cluster.desired_image_type().to_owned(),
    );
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
#[path = "resources_tests.rs"]
mod tests;
