//! Pure: the pod template shared by one-shot Jobs and CronJobs (reference §4.4 with ADR 0001).
//!
//! Contract:
//! - `restartPolicy: Never`, the task's service account, the instance's scheduling, pull
//!   secrets instance's then task's without duplicates.
//! - One integration container per integration, in spec order: `/bin/sh -c <wait script>`
//!   that waits for ADB at `$ADB_ADDRESS` (connect retried up to 120 s, then
//!   `sys.boot_completed=1`, up to 300 s) and then `exec`s the command and args, each
//!   single-quoted so the shell expands nothing. With args but no command the args are exec'd
//!   as the command line (upstream's behaviour, kept so upstream manifests behave the same):
//!   the wrapper replaces the entrypoint, so give the full command line when the image has one.
//! - Env `ADB_ADDRESS`, `INSTANCE_INDEX`, then the integration's own.
//! - Volumes in four layers: reserved `data-base`/`data-diff`/`dev-dri` (only with the redroid
//!   sidecar, and never overridable), generated `cm-*` (never overridable), task volumes,
//!   instance-ref volumes (replacing a task volume of the same name in place).
//! - Mounts keyed by mountPath: integration, then configs, then instance-ref; last wins;
//!   sorted by mountPath.
//! - With [`Access::Sidecar`] a native sidecar (`redroid` init container, `restartPolicy:
//!   Always`) boots the instance's image and arguments on its data: `/data-base` and
//!   `/data-diff/<index>` (subPath `<index>`), or `/data` for a baseMode instance.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EnvVar, ExecAction, HostPathVolumeSource,
    LocalObjectReference, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Probe,
    SecurityContext, Volume, VolumeMount,
};
use kube::api::ObjectMeta;

use super::super::validate::{Access, Model, Target};
use crate::crd::IntegrationSpec;
use crate::{args, names};

const DATA_BASE: &str = "data-base";
const DATA_DIFF: &str = "data-diff";
const DEV_DRI: &str = "dev-dri";
const RESERVED: [&str; 3] = [DATA_BASE, DATA_DIFF, DEV_DRI];

/// The pod template of `target`'s Job. `access` decides the sidecar and `ADB_ADDRESS`.
pub fn pod_template(
    model: &Model,
    target: &Target,
    access: Access,
    labels: &BTreeMap<String, String>,
) -> PodTemplateSpec {
    let sidecar = access == Access::Sidecar;
    let adb = adb_address(model, target, sidecar);
    let containers = model
        .spec
        .integrations
        .iter()
        .map(|i| integration(i, target, &adb))
        .collect();
    let spec = PodSpec {
        restart_policy: Some("Never".into()),
        service_account_name: model.spec.service_account_name.clone(),
        node_selector: Some(target.spec.node_selector.clone()).filter(|m| !m.is_empty()),
        tolerations: Some(target.spec.tolerations.clone()).filter(|t| !t.is_empty()),
        affinity: target.spec.affinity.clone(),
        image_pull_secrets: pull_secrets(
            &target.spec.image_pull_secrets,
            &model.spec.image_pull_secrets,
        ),
        init_containers: sidecar.then(|| vec![redroid_sidecar(target)]),
        containers,
        volumes: Some(volumes(model, target, sidecar)).filter(|v| !v.is_empty()),
        ..PodSpec::default()
    };
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    }
}

fn adb_address(model: &Model, target: &Target, sidecar: bool) -> String {
    if sidecar {
        format!("127.0.0.1:{}", target.spec.adb_port)
    } else {
        names::adb_address(&target.name, &model.namespace, target.spec.adb_port)
    }
}

fn pull_secrets(
    instance: &[LocalObjectReference],
    task: &[LocalObjectReference],
) -> Option<Vec<LocalObjectReference>> {
    let mut out: Vec<LocalObjectReference> = Vec::new();
    for s in instance.iter().chain(task) {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    Some(out).filter(|o| !o.is_empty())
}

fn integration(i: &IntegrationSpec, target: &Target, adb: &str) -> Container {
    let mut env = vec![
        env("ADB_ADDRESS", adb),
        env("INSTANCE_INDEX", &target.spec.index.to_string()),
    ];
    env.extend(i.env.iter().cloned());
    Container {
        name: i.name.clone(),
        image: Some(i.image.clone()),
        image_pull_policy: Some(i.image_pull_policy.clone()),
        command: Some(vec!["/bin/sh".into(), "-c".into()]),
        args: Some(vec![wait_script(&i.command, &i.args)]),
        working_dir: i.working_dir.clone(),
        env: Some(env),
        volume_mounts: Some(mounts(i, target)).filter(|m| !m.is_empty()),
        security_context: i.security_context.clone(),
        resources: i.resources.clone(),
        ..Container::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The ADB wait wrapper, then `exec` of `command` + `args` (single-quoted).
pub fn wait_script(command: &[String], args: &[String]) -> String {
    let mut script = String::from(concat!(
        "i=0\n",
        "until adb connect \"$ADB_ADDRESS\" 2>&1 | grep -q 'connected to'; do\n",
        "  i=$((i+2)); if [ \"$i\" -ge 120 ]; then echo \"ADB at $ADB_ADDRESS not reachable after 120s\" >&2; exit 1; fi\n",
        "  sleep 2\n",
        "done\n",
        "i=0\n",
        "until [ \"$(adb -s \"$ADB_ADDRESS\" shell getprop sys.boot_completed 2>/dev/null | tr -d '\\r')\" = 1 ]; do\n",
        "  i=$((i+2)); if [ \"$i\" -ge 300 ]; then echo \"Android at $ADB_ADDRESS did not finish booting in 300s\" >&2; exit 1; fi\n",
        "  sleep 2\n",
        "done\n",
    ));
    let words: Vec<String> = command.iter().chain(args).map(|w| shell_quote(w)).collect();
    if !words.is_empty() {
        script.push_str("exec ");
        script.push_str(&words.join(" "));
        script.push('\n');
    }
    script
}

/// `s` single-quoted for `sh`: nothing inside is expanded.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn mounts(i: &IntegrationSpec, target: &Target) -> Vec<VolumeMount> {
    let mut by_path: BTreeMap<String, VolumeMount> = BTreeMap::new();
    for m in &i.volume_mounts {
        by_path.insert(m.mount_path.clone(), m.clone());
    }
    for c in &i.configs {
        let m = VolumeMount {
            name: config_map_volume_name(&c.config_map_name),
            mount_path: c.mount_path.clone(),
            sub_path: Some(c.key.clone()),
            read_only: Some(true),
            ..VolumeMount::default()
        };
        by_path.insert(c.mount_path.clone(), m);
    }
    for m in &target.volume_mounts {
        by_path.insert(m.mount_path.clone(), m.clone());
    }
    by_path.into_values().collect()
}

/// The generated volume name of a ConfigMap: `cm-<sanitised>-<sha256[:8] of the name>`.
pub fn config_map_volume_name(config_map: &str) -> String {
    kit::names::label_with_hash("cm-", config_map)
}

fn volumes(model: &Model, target: &Target, sidecar: bool) -> Vec<Volume> {
    let mut out = if sidecar {
        reserved_volumes(target)
    } else {
        Vec::new()
    };
    for name in super::super::validate::config_map_names(&model.spec) {
        out.push(Volume {
            name: config_map_volume_name(&name),
            config_map: Some(ConfigMapVolumeSource {
                name: name.clone(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    let fixed: Vec<String> = out.iter().map(|v| v.name.clone()).collect();
    let is_fixed = |n: &str| RESERVED.contains(&n) || fixed.iter().any(|f| f == n);
    let mut user: Vec<Volume> = model
        .spec
        .volumes
        .iter()
        .filter(|v| !is_fixed(&v.name))
        .cloned()
        .collect();
    for v in target.volumes.iter().filter(|v| !is_fixed(&v.name)) {
        match user.iter_mut().find(|u| u.name == v.name) {
            Some(slot) => *slot = v.clone(),
            None => user.push(v.clone()),
        }
    }
    out.extend(user);
    out
}

fn reserved_volumes(target: &Target) -> Vec<Volume> {
    let pvc = |name: &str, claim: &str| Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: None,
        }),
        ..Volume::default()
    };
    let mut v = vec![pvc(DATA_BASE, &target.spec.shared_data_pvc)];
    if !target.spec.base_mode {
        v.push(pvc(DATA_DIFF, &target.spec.diff_data_pvc));
    }
    v.push(Volume {
        name: DEV_DRI.into(),
        host_path: Some(HostPathVolumeSource {
            path: "/dev/dri".into(),
            type_: Some("DirectoryOrCreate".into()),
        }),
        ..Volume::default()
    });
    v
}

fn redroid_sidecar(target: &Target) -> Container {
    let spec = &target.spec;
    let mount = |name: &str, path: String, sub_path: Option<String>| VolumeMount {
        name: name.into(),
        mount_path: path,
        sub_path,
        ..VolumeMount::default()
    };
    let mut mounts = if spec.base_mode {
        vec![mount(DATA_BASE, "/data".into(), None)]
    } else {
        let index = spec.index.to_string();
        vec![
            mount(DATA_BASE, "/data-base".into(), None),
            mount(DATA_DIFF, format!("/data-diff/{index}"), Some(index)),
        ]
    };
    mounts.push(mount(DEV_DRI, "/dev/dri".into(), None));
    let mut env = vec![env("INSTANCE_INDEX", &spec.index.to_string())];
    env.extend(spec.extra_env.iter().cloned());
    Container {
        name: names::REDROID_CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.clone()),
        restart_policy: Some("Always".into()),
        args: Some(args::androidboot_args(spec)),
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
        ports: Some(vec![ContainerPort {
            container_port: spec.adb_port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        resources: spec.resources.clone(),
        env: Some(env),
        readiness_probe: Some(boot_probe()),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

fn boot_probe() -> Probe {
    let check = "[ \"$(getprop sys.boot_completed)\" = 1 ]";
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["/system/bin/sh".into(), "-c".into(), check.into()]),
        }),
        initial_delay_seconds: Some(5),
        ..Probe::default()
    }
}
