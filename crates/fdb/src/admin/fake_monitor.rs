//! A stand-in for `fdb-kubernetes-monitor`, the unified image's launcher, for tests: pods on
//! the test plane run nothing, so a test loop plays the monitor of each pod with these pure
//! functions, and [`super::fake::FakeDatabase::sync_pods`] starts processes as it would.
//!
//! Contract (the parts of the real monitor the operator relies on, reference §9):
//! - [`monitor_annotations`]: at start-up (no configuration loaded yet) the monitor loads its
//!   configuration file, the config-map entry its pod mounts as `config.json`, and publishes
//!   it with its substitutions (`FDB_*` environment resolved from the pod: literal values,
//!   `status.podIP`, `metadata.name`, `spec.nodeName`). Later the mounted file only changes
//!   when the kubelet resyncs the volume, which the stand-in models as "when the operator has
//!   poked the pod" (`foundationdb.org/outdated-config-map-seen` is set): stricter than a real
//!   kubelet, which also resyncs on its own after a minute or so.
//! - [`launch`]: what fdbserver the pod runs: nothing until the loaded configuration says
//!   `runServers`, then the command line rendered from it, at the version of the pod's image,
//!   or, when the configuration points at a binary the sidecar stages
//!   (`/var/fdb/shared-binaries/bin/<version>/fdbserver`), at that version once the sidecar
//!   runs that version's image (nothing before: the binary is not there).
//!   Loading a configuration does not restart fdbserver; the fake's `kill` does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};

use crate::cluster::monitor::{
    self, LAUNCHER_CONFIGURATION_KEY, LAUNCHER_ENVIRONMENT_KEY, OUTDATED_CONFIG_MAP_KEY,
};
use crate::cluster::resources::{self, MAIN_CONTAINER};

/// What a pod's fdbserver would be started with.
#[derive(Clone, Debug, PartialEq)]
pub enum Launch {
    /// No monitor annotations: not played by the stand-in.
    NotMonitored,
    /// The monitor runs no server (no configuration, or `runServers` false).
    Idle,
    /// fdbserver with this command line and version.
    Run {
        /// The rendered command line.
        command_line: String,
        /// The image's version.
        version: String,
    },
}

/// The substitutions the monitor of `pod` would use.
pub fn environment(pod: &Pod) -> BTreeMap<String, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    let main = spec.containers.iter().find(|c| c.name == MAIN_CONTAINER);
    let mut env = BTreeMap::new();
    for e in main.into_iter().flat_map(|c| c.env.iter().flatten()) {
        let path = e
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        let value = match (e.value.as_ref(), path) {
            (Some(v), _) => v.clone(),
            (None, Some("status.podIP")) => ip.clone(),
            (None, Some("metadata.name")) => pod.metadata.name.clone().unwrap_or_default(),
            (None, Some("spec.nodeName")) => spec.node_name.clone().unwrap_or_default(),
            _ => continue,
        };
        env.insert(e.name.clone(), value);
    }
    env
}

/// The config-map key `pod` mounts as the monitor's `config.json`.
fn mounted_key(pod: &Pod) -> Option<String> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    volumes
        .iter()
        .filter_map(|v| v.config_map.as_ref()?.items.as_ref())
        .flatten()
        .find(|i| i.path == "config.json")
        .map(|i| i.key.clone())
}

/// The annotations the monitor of `pod` would write now given the live config map, or `None`
/// when it has nothing to change.
pub fn monitor_annotations(pod: &Pod, cm: &ConfigMap) -> Option<BTreeMap<String, String>> {
    pod.status.as_ref().and_then(|s| s.pod_ip.as_ref())?;
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let file = cm.data.as_ref()?.get(&mounted_key(pod)?)?.clone();
    let loaded = annotations.get(LAUNCHER_CONFIGURATION_KEY);
    let resynced = loaded.is_none() || annotations.contains_key(OUTDATED_CONFIG_MAP_KEY);
    if !resynced || monitor::configuration_current(pod, &file) {
        return None;
    }
    let env = serde_json::to_string(&environment(pod)).ok()?;
    Some(BTreeMap::from([
        (LAUNCHER_CONFIGURATION_KEY.to_owned(), file),
        (LAUNCHER_ENVIRONMENT_KEY.to_owned(), env),
    ]))
}

fn image_tag(pod: &Pod, container: &str) -> Option<String> {
    let image = resources::container_image(pod, container)?;
    image.rsplit_once(':').map(|(_, tag)| tag.to_owned())
}

/// What `pod`'s fdbserver would be started with now: the image's fdbserver, or one the
/// sidecar staged in the shared volume (`<dir>/bin/<version>/fdbserver`, present only while
/// the sidecar runs that version's image).
pub fn launch(pod: &Pod) -> Launch {
    let Some(conf) = monitor::loaded_configuration(pod) else {
        return Launch::NotMonitored;
    };
    let env = monitor::substitutions(pod).unwrap_or_default();
    let binary = conf
        .get("binaryPath")
        .and_then(|b| b.as_str())
        .unwrap_or("");
    let staged = binary
        .strip_prefix(&format!("{}/bin/", resources::SHARED_BINARIES_DIR))
        .and_then(|rest| rest.split('/').next());
    let version = match staged {
        Some(v) if image_tag(pod, resources::SIDECAR_CONTAINER).as_deref() == Some(v) => {
            v.to_owned()
        }
        Some(_) => return Launch::Idle,
        None => image_tag(pod, MAIN_CONTAINER)
            .or_else(|| conf.get("version")?.as_str().map(str::to_owned))
            .unwrap_or_default(),
    };
    match monitor::command_line(&conf, &env, 1) {
        Some(command_line) if monitor::runs_servers(&conf) => Launch::Run {
            command_line,
            version,
        },
        _ => Launch::Idle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{
        FoundationDBCluster, FoundationDBClusterSpec, ProcessClass, ProcessGroupId,
        ProcessGroupStatus,
    };
    use k8s_openapi::api::core::v1::PodStatus;

    fn setup(connected: bool) -> (FoundationDBCluster, Pod) {
        let mut c = FoundationDBCluster::new(
            "c",
            FoundationDBClusterSpec {
                version: "7.1.57".into(),
                ..Default::default()
            },
        );
        if connected {
            c.status = Some(crate::crd::FoundationDBClusterStatus {
                connection_string: "c:x@127.1.0.1:4501".into(),
                ..Default::default()
            });
        }
        let g = ProcessGroupStatus::new(
            ProcessGroupId::new("storage-1"),
            ProcessClass::new("storage"),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let mut pod = resources::pod(&c, &g, "h");
        pod.status = Some(PodStatus {
            pod_ip: Some("127.1.0.9".into()),
            ..Default::default()
        });
        (c, pod)
    }

    fn annotate(pod: &mut Pod, more: BTreeMap<String, String>) {
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(more);
    }

    #[test]
    fn the_monitor_loads_at_start_and_then_only_when_poked() {
        let (c, mut pod) = setup(false);
        assert_eq!(launch(&pod), Launch::NotMonitored);
        let first = monitor_annotations(&pod, &resources::config_map(&c)).expect("loads at start");
        annotate(&mut pod, first);
        assert_eq!(
            launch(&pod),
            Launch::Idle,
            "runServers is false without a cluster file"
        );
        let (connected, _) = setup(true);
        let cm = resources::config_map(&connected);
        assert_eq!(
            monitor_annotations(&pod, &cm),
            None,
            "not resynced before a poke"
        );
        annotate(
            &mut pod,
            BTreeMap::from([(OUTDATED_CONFIG_MAP_KEY.to_owned(), "1".to_owned())]),
        );
        let second = monitor_annotations(&pod, &cm).expect("loads after the poke");
        annotate(&mut pod, second);
        let Launch::Run {
            command_line,
            version,
        } = launch(&pod)
        else {
            panic!("runs a server once connected");
        };
        assert_eq!(version, "7.1.57");
        assert!(
            command_line.contains("--public_address=[127.1.0.9]:4501"),
            "{command_line}"
        );
        assert!(
            command_line.contains("--locality_instance_id=storage-1"),
            "{command_line}"
        );
        assert_eq!(monitor_annotations(&pod, &cm), None, "nothing more to load");
    }
}
