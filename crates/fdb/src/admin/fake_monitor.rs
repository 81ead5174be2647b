//! A stand-in for `fdb-kubernetes-monitor`, the unified image's launcher, for tests: pods on
//! the test plane run nothing, so a test loop plays the monitor of each pod with these pure
//! functions, and [`super::fake::FakeDatabase::sync_pods`] starts processes as it would.
//!
//! Contract (the parts of the real monitor the operator relies on, reference §9, checked
//! against apple/foundationdb `fdbkubernetesmonitor/{monitor.go,kubernetes.go,api/config.go}`):
//! - [`monitor_annotations`]: at start-up (no configuration loaded yet) the monitor loads its
//!   configuration file, the config-map entry its pod mounts as `config.json`, and publishes
//!   it with its substitutions: the variables the configuration's arguments read, resolved
//!   from the main container's environment (literal values, `status.podIP`, `metadata.name`,
//!   `metadata.namespace`, `spec.nodeName`), plus `BINARY_DIR`, the directory of the
//!   fdbserver it chose ([`binary`]). A configuration whose binary is not there, or whose
//!   arguments read a variable the pod does not define, is refused (nothing published, as the
//!   real monitor's `readConfiguration` refuses it). Later the mounted file only changes when
//!   the kubelet resyncs the volume, which the stand-in models as "when the operator has
//!   poked the pod" (`foundationdb.org/outdated-config-map-seen` is set): stricter than a real
//!   kubelet, which also resyncs on its own after a minute or so.
//! - [`binary`]: the monitor ignores any binary path in the configuration; it runs its
//!   image's `/usr/bin/fdbserver` when the image's version (the main container's tag) is
//!   protocol compatible with the configuration's `version`, else
//!   `/var/fdb/shared-binaries/bin/<version>/fdbserver`, which exists once the sidecar runs
//!   that version's image (the sidecar copies its binaries to `bin/<its version>/`).
//! - [`launch`]: what each of the pod's [`process_count`] fdbserver processes (the main
//!   container's `--process-count`, 1 without) runs: nothing until the loaded configuration
//!   says `runServers` (unset counts as true), then `<BINARY_DIR>/fdbserver` and the rendered
//!   arguments, at the version of that binary.
//!   Loading a configuration does not restart fdbserver; the fake's `kill` does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};

use serde_json::Value;

use crate::cluster::monitor::{
    self, BINARY_DIR_KEY, IMAGE_FDBSERVER, LAUNCHER_CONFIGURATION_KEY, LAUNCHER_ENVIRONMENT_KEY,
    OUTDATED_CONFIG_MAP_KEY,
};
use crate::cluster::resources::{self, MAIN_CONTAINER};
use crate::crd::FdbVersion;

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

/// The main container's environment as the kubelet resolves it for `pod`.
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
            (None, Some("metadata.namespace")) => {
                pod.metadata.namespace.clone().unwrap_or_default()
            }
            (None, Some("spec.nodeName")) => spec.node_name.clone().unwrap_or_default(),
            _ => continue,
        };
        env.insert(e.name.clone(), value);
    }
    env
}

/// What the monitor of `pod` publishes as its substitutions for `conf`: the variables the
/// arguments read and `BINARY_DIR`; `None` when it would refuse the configuration (a
/// variable missing, or no binary for its version).
pub fn published_environment(pod: &Pod, conf: &Value) -> Option<BTreeMap<String, String>> {
    let all = environment(pod);
    let mut env = BTreeMap::new();
    for name in monitor::referenced_variables(conf) {
        env.insert(name.clone(), all.get(&name)?.clone());
    }
    let (path, _) = binary(pod, conf)?;
    let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
    env.insert(BINARY_DIR_KEY.to_owned(), dir.to_owned());
    Some(env)
}

/// The fdbserver the monitor of `pod` runs for `conf`, and its version: the image's own when
/// protocol compatible with the configured version, else the one the sidecar staged (`None`
/// while it is not there).
pub fn binary(pod: &Pod, conf: &Value) -> Option<(String, String)> {
    let wanted = conf.get("version")?.as_str()?.to_owned();
    let own = image_tag(pod, MAIN_CONTAINER).unwrap_or_else(|| wanted.clone());
    let compatible = match (FdbVersion::parse(&own), FdbVersion::parse(&wanted)) {
        (Ok(a), Ok(b)) => a.is_protocol_compatible(&b),
        _ => own == wanted,
    };
    if compatible {
        return Some((IMAGE_FDBSERVER.to_owned(), own));
    }
    let staged = image_tag(pod, resources::SIDECAR_CONTAINER).as_deref() == Some(wanted.as_str());
    staged.then(|| {
        let path = format!("{}/bin/{wanted}/fdbserver", resources::SHARED_BINARIES_DIR);
        (path, wanted)
    })
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
    let conf: Value = serde_json::from_str(&file).ok()?;
    let env = serde_json::to_string(&published_environment(pod, &conf)?).ok()?;
    Some(BTreeMap::from([
        (LAUNCHER_CONFIGURATION_KEY.to_owned(), file),
        (LAUNCHER_ENVIRONMENT_KEY.to_owned(), env),
    ]))
}

fn image_tag(pod: &Pod, container: &str) -> Option<String> {
    let image = resources::container_image(pod, container)?;
    image.rsplit_once(':').map(|(_, tag)| tag.to_owned())
}

/// How many fdbserver processes the monitor of `pod` starts: its main container's
/// `--process-count` argument, 1 without.
pub fn process_count(pod: &Pod) -> u32 {
    let args = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .find(|c| c.name == MAIN_CONTAINER)
        .and_then(|c| c.args.clone())
        .unwrap_or_default();
    args.iter()
        .position(|a| a == "--process-count")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .map_or(1, |n: u32| n.max(1))
}

/// What `pod`'s fdbserver process `process` (1-based) would be started with now: the
/// loaded configuration rendered with the published substitutions, at the version of the
/// binary `BINARY_DIR` names (the staged version's directory, else the image's).
pub fn launch(pod: &Pod, process: u32) -> Launch {
    let Some(conf) = monitor::loaded_configuration(pod) else {
        return Launch::NotMonitored;
    };
    let env = monitor::substitutions(pod).unwrap_or_default();
    let staged = env
        .get(BINARY_DIR_KEY)
        .and_then(|d| d.strip_prefix(&format!("{}/bin/", resources::SHARED_BINARIES_DIR)))
        .map(str::to_owned);
    let version = staged
        .or_else(|| image_tag(pod, MAIN_CONTAINER))
        .or_else(|| conf.get("version")?.as_str().map(str::to_owned))
        .unwrap_or_default();
    match monitor::command_line(&conf, &env, process) {
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
        assert_eq!(launch(&pod, 1), Launch::NotMonitored);
        let first = monitor_annotations(&pod, &resources::config_map(&c)).expect("loads at start");
        annotate(&mut pod, first);
        assert_eq!(
            launch(&pod, 1),
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
        } = launch(&pod, 1)
        else {
            panic!("runs a server once connected");
        };
        assert_eq!(version, "7.1.57");
        assert!(
            command_line.starts_with("/usr/bin/fdbserver --cluster_file="),
            "the image's own fdbserver: {command_line}"
        );
        assert!(
            command_line.contains("--public_address=[127.1.0.9]:4501"),
            "{command_line}"
        );
        let env = monitor::substitutions(&pod).expect("published");
        assert_eq!(env.get("BINARY_DIR").map(String::as_str), Some("/usr/bin"));
        assert_eq!(
            env.keys().cloned().collect::<Vec<_>>(),
            [
                "BINARY_DIR",
                "FDB_INSTANCE_ID",
                "FDB_MACHINE_ID",
                "FDB_PUBLIC_IP",
                "FDB_ZONE_ID"
            ],
            "only what the arguments read, and BINARY_DIR"
        );
        assert!(
            command_line.contains("--locality_instance_id=storage-1"),
            "{command_line}"
        );
        assert_eq!(monitor_annotations(&pod, &cm), None, "nothing more to load");
    }

    fn set_image(pod: &mut Pod, container: &str, image: &str) {
        let spec = pod.spec.as_mut().unwrap();
        let c = spec
            .containers
            .iter_mut()
            .find(|c| c.name == container)
            .unwrap();
        c.image = Some(image.to_owned());
    }

    #[test]
    fn an_incompatible_version_runs_the_staged_binary_once_the_sidecar_has_it() {
        let (mut c, mut pod) = setup(true);
        let first = monitor_annotations(&pod, &resources::config_map(&c)).expect("loads");
        annotate(&mut pod, first);
        // 7.1 → 7.3: the configuration asks for 7.3.63, the image's fdbserver is 7.1.57.
        c.status.as_mut().unwrap().running_version = "7.1.57".into();
        c.spec.version = "7.3.63".into();
        let cm = resources::config_map(&c);
        annotate(
            &mut pod,
            BTreeMap::from([(OUTDATED_CONFIG_MAP_KEY.to_owned(), "1".to_owned())]),
        );
        assert_eq!(
            monitor_annotations(&pod, &cm),
            None,
            "refused while bin/7.3.63/fdbserver is not staged"
        );
        assert!(
            matches!(launch(&pod, 1), Launch::Run { version, .. } if version == "7.1.57"),
            "the old configuration keeps running"
        );
        set_image(
            &mut pod,
            resources::SIDECAR_CONTAINER,
            "foundationdb/fdb-kubernetes-monitor:7.3.63",
        );
        let loaded = monitor_annotations(&pod, &cm).expect("loads once staged");
        annotate(&mut pod, loaded);
        let env = monitor::substitutions(&pod).unwrap();
        assert_eq!(
            env["BINARY_DIR"], "/var/fdb/shared-binaries/bin/7.3.63",
            "{env:?}"
        );
        let Launch::Run {
            command_line,
            version,
        } = launch(&pod, 1)
        else {
            panic!("runs");
        };
        assert_eq!(version, "7.3.63");
        assert!(
            command_line.starts_with("/var/fdb/shared-binaries/bin/7.3.63/fdbserver "),
            "{command_line}"
        );
        // A patch version is protocol compatible: the image's own binary.
        c.status.as_mut().unwrap().running_version = "7.1.57".into();
        c.spec.version = "7.1.59".into();
        let conf: Value = serde_json::json!({"version": "7.1.59"});
        let (_, pod) = setup(true);
        assert_eq!(
            binary(&pod, &conf),
            Some(("/usr/bin/fdbserver".to_owned(), "7.1.57".to_owned()))
        );
    }
}
