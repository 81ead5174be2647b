//! The backup agents' Deployment, built as upstream builds it (pure: no client).
//!
//! Contract of [`desired`]:
//! - `None` when `agentCount` is 0: no Deployment is wanted.
//! - Name `<backup>-backup-agents`, the backup's namespace, a controller owner reference to
//!   the backup, `backupDeploymentMetadata`'s labels and annotations, the label
//!   `foundationdb.org/backup-for=<backup UID>` and the annotation
//!   `foundationdb.org/last-applied-spec` (the SHA-256 of the Deployment spec's JSON; a Go
//!   operator hashes differently, so only self-consistency holds).
//! - `agentCount` replicas; selector and pod label `foundationdb.org/deployment-name=<name>`.
//! - The pod template is `podTemplateSpec` with: the main container `foundationdb` (added
//!   first when absent) running `backup_agent --log --logdir /var/log/fdb-trace-logs` plus
//!   `--<p>` per custom parameter, image from `mainContainer.imageConfigs` and the backup's
//!   version (default `foundationdb/fdb-kubernetes-monitor` for the unified image, the
//!   getter's default, or `foundationdb/foundationdb` for `split`) unless the template's
//!   container names one (without a tag: the backup's version is added), `FDB_CLUSTER_FILE=
//!   /var/dynamic-conf/fdb.cluster` unless set, the `logs` and `dynamic-conf` mounts and
//!   requests of 1 CPU / 1Gi (limits = requests) unless the template sets them; the init
//!   container `foundationdb-kubernetes-init` copying `fdb.cluster` from the cluster's
//!   config map (`<cluster>-config`, key `cluster-file`) into `dynamic-conf`; and the
//!   volumes `logs`, `dynamic-conf` (emptyDirs) and `config-map`.
//! - Blob-store credentials are the user's: the template's volumes (a Secret mounted as a
//!   file, named by `FDB_BLOB_CREDENTIALS`, as upstream's samples do) are kept as written;
//!   the operator adds no environment variable from a Secret and reads no Secret.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, KeyToPath, PodTemplateSpec,
    ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::{Resource, ResourceExt};

use super::{BACKUP_FOR_LABEL, DEPLOYMENT_NAME_LABEL, LAST_SPEC_KEY};
use crate::cluster::resources::{DEFAULT_MONITOR_IMAGE, MAIN_CONTAINER, hash};
use crate::crd::{FoundationDBBackup, select_image};

/// The split image's main repository.
pub const SPLIT_IMAGE: &str = "foundationdb/foundationdb";
/// The split image's sidecar repository (tag `<version>-1`).
pub const SPLIT_SIDECAR_IMAGE: &str = "foundationdb/foundationdb-kubernetes-sidecar";
/// The init container that copies the cluster file.
pub const INIT_CONTAINER: &str = "foundationdb-kubernetes-init";
/// Where the agents find the cluster file.
pub const CLUSTER_FILE: &str = "/var/dynamic-conf/fdb.cluster";

/// `<backup>-backup-agents`.
pub fn name(backup: &FoundationDBBackup) -> String {
    format!("{}-backup-agents", backup.name_any())
}

/// The main container's image.
pub fn image(backup: &FoundationDBBackup) -> String {
    let base = if backup.uses_unified_image() {
        DEFAULT_MONITOR_IMAGE
    } else {
        SPLIT_IMAGE
    };
    select_image(
        &backup.spec.main_container.image_configs,
        base,
        &backup.spec.version,
    )
}

fn init_image(backup: &FoundationDBBackup) -> String {
    if backup.uses_unified_image() {
        return image(backup);
    }
    let configs = &backup.spec.sidecar_container.image_configs;
    if configs.is_empty() {
        return format!("{SPLIT_SIDECAR_IMAGE}:{}-1", backup.spec.version);
    }
    select_image(configs, SPLIT_SIDECAR_IMAGE, &backup.spec.version)
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// The main container's image when the pod template names one: with a tag it is used as
/// written; without, it is the base image and the backup's version is the tag.
fn template_image(written: &str, version: &str) -> String {
    let last = written.rsplit('/').next().unwrap_or(written);
    if last.contains(':') || written.contains('@') {
        written.to_owned()
    } else {
        format!("{written}:{version}")
    }
}

fn main_container(backup: &FoundationDBBackup, c: &mut Container) {
    c.image = Some(match c.image.as_deref().filter(|i| !i.is_empty()) {
        Some(written) => template_image(written, &backup.spec.version),
        None => image(backup),
    });
    c.command = Some(vec!["backup_agent".into()]);
    let mut args: Vec<String> = ["--log", "--logdir", "/var/log/fdb-trace-logs"]
        .map(String::from)
        .into();
    args.extend(
        backup
            .spec
            .custom_parameters
            .iter()
            .map(|p| format!("--{p}")),
    );
    c.args = Some(args);
    let env = c.env.get_or_insert_with(Vec::new);
    if !env.iter().any(|e| e.name == "FDB_CLUSTER_FILE") {
        env.push(EnvVar {
            name: "FDB_CLUSTER_FILE".into(),
            value: Some(CLUSTER_FILE.into()),
            ..EnvVar::default()
        });
    }
    let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
    mounts.push(mount("logs", "/var/log/fdb-trace-logs"));
    mounts.push(mount("dynamic-conf", "/var/dynamic-conf"));
    let resources = c
        .resources
        .get_or_insert_with(ResourceRequirements::default);
    let requests = resources.requests.get_or_insert_with(|| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity("1".into())),
            ("memory".to_owned(), Quantity("1Gi".into())),
        ])
    });
    let requests = requests.clone();
    resources.limits.get_or_insert(requests);
}

fn init_container(backup: &FoundationDBBackup, c: &mut Container) {
    let mut args: Vec<String> = [
        "--copy-file",
        "fdb.cluster",
        "--require-not-empty",
        "fdb.cluster",
    ]
    .map(String::from)
    .into();
    if backup.uses_unified_image() {
        args.extend(
            [
                "--mode",
                "init",
                "--output-dir",
                "/var/output-files",
                "--input-dir",
                "/var/input-files",
            ]
            .map(String::from),
        );
    } else {
        args.push("--init-mode".into());
    }
    c.args = Some(args);
    c.image = Some(init_image(backup));
    let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
    mounts.push(mount("config-map", "/var/input-files"));
    mounts.push(mount("dynamic-conf", "/var/output-files"));
}

fn template(backup: &FoundationDBBackup, name: &str) -> PodTemplateSpec {
    let mut t = backup.spec.pod_template_spec.clone().unwrap_or_default();
    let spec = t.spec.get_or_insert_with(Default::default);
    if !spec.containers.iter().any(|c| c.name == MAIN_CONTAINER) {
        spec.containers.insert(
            0,
            Container {
                name: MAIN_CONTAINER.into(),
                ..Container::default()
            },
        );
    }
    for c in spec
        .containers
        .iter_mut()
        .filter(|c| c.name == MAIN_CONTAINER)
    {
        main_container(backup, c);
    }
    let inits = spec.init_containers.get_or_insert_with(Vec::new);
    if !inits.iter().any(|c| c.name == INIT_CONTAINER) {
        inits.push(Container {
            name: INIT_CONTAINER.into(),
            ..Container::default()
        });
    }
    for c in inits.iter_mut().filter(|c| c.name == INIT_CONTAINER) {
        init_container(backup, c);
    }
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    volumes.push(empty_dir("logs"));
    volumes.push(empty_dir("dynamic-conf"));
    volumes.push(Volume {
        name: "config-map".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: format!("{}-config", backup.spec.cluster_name),
            items: Some(vec![KeyToPath {
                key: "cluster-file".into(),
                path: "fdb.cluster".into(),
                ..KeyToPath::default()
            }]),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    });
    t.metadata
        .get_or_insert_with(ObjectMeta::default)
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(DEPLOYMENT_NAME_LABEL.into(), name.into());
    t
}

/// See the module docs.
pub fn desired(backup: &FoundationDBBackup) -> Option<Deployment> {
    let replicas = backup.desired_agent_count();
    if replicas <= 0 {
        return None;
    }
    let name = name(backup);
    let spec = DeploymentSpec {
        replicas: Some(i32::try_from(replicas).unwrap_or(i32::MAX)),
        selector: LabelSelector {
            match_labels: Some(BTreeMap::from([(
                DEPLOYMENT_NAME_LABEL.into(),
                name.clone(),
            )])),
            ..LabelSelector::default()
        },
        template: template(backup, &name),
        ..DeploymentSpec::default()
    };
    let custom = backup
        .spec
        .backup_deployment_metadata
        .clone()
        .unwrap_or_default();
    let mut labels = custom.labels.unwrap_or_default();
    labels.insert(BACKUP_FOR_LABEL.into(), backup.uid().unwrap_or_default());
    let mut annotations = custom.annotations.unwrap_or_default();
    annotations.insert(LAST_SPEC_KEY.into(), hash(&spec));
    Some(Deployment {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: backup.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: backup.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// Whether `existing` carries `desired`'s labels exactly and its annotations (the spec hash
/// among them): upstream's test for an up-to-date Deployment.
pub fn matches(existing: &Deployment, desired: &Deployment) -> bool {
    let labels = existing.metadata.labels.clone().unwrap_or_default();
    let annotations = existing.metadata.annotations.clone().unwrap_or_default();
    labels == desired.metadata.labels.clone().unwrap_or_default()
        && desired
            .metadata
            .annotations
            .iter()
            .flatten()
            .all(|(k, v)| annotations.get(k) == Some(v))
}

#[cfg(test)]
#[path = "deployment_tests.rs"]
mod tests;
