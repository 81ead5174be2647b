//! The instance Pod (reference §3.3): redroid on the overlayfs (or baseMode) data volumes,
//! with the kernel-log redirect unless disabled.
//!
//! Contract: [`pod`] is pure; its template hash ([`template_hash`]) covers labels and spec, so
//! any change that affects the Pod (image, args, env, volumes, resources, scheduling) changes
//! the hash, and the deterministic name ([`crate::names::instance_pod_name`]) with it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, ExecAction, HostPathVolumeSource,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, Probe, SecurityContext, Volume, VolumeMount,
};
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};

use super::Model;
use crate::args::androidboot_args;
use crate::names;

const KMSG_VOLUME: &str = "kmsg-tools";
const KMSG_DIR: &str = "/kmsg-tools";
const KMSG_COPY: &str = "cp /kmsg-bin/socat /kmsg-bin/busybox /kmsg-tools/ && chmod +x /kmsg-tools/socat /kmsg-tools/busybox";
// Starts socat with a PTY whose other end is stdout, waits up to 5 s for it, binds it over
// /dev/kmsg and execs Android's init with the boot arguments ("$@").
const KMSG_WRAPPER: &str = r#"bb=/kmsg-tools/busybox
/kmsg-tools/socat pty,link=/kmsg-tools/kmsg-pty,raw,echo=0 stdout &
pid=$!
i=0
while [ ! -e /kmsg-tools/kmsg-pty ]; do
  if ! kill -0 "$pid" 2>/dev/null; then echo "kmsg redirect: socat exited" >&2; exit 1; fi
  i=$((i + 1))
  if [ "$i" -ge 50 ]; then echo "kmsg redirect: no PTY after 5s" >&2; exit 1; fi
  $bb sleep 0.1
done
$bb mount --bind "$($bb readlink -f /kmsg-tools/kmsg-pty)" /dev/kmsg
exec /init "$@""#;
const BOOT_CHECK: &str = r#"test "$(getprop sys.boot_completed)" = "1""#;

/// Labels of the instance Pod.
pub fn labels(model: &Model) -> BTreeMap<String, String> {
    BTreeMap::from([
        (names::MANAGED_BY_LABEL.into(), names::MANAGED_BY.into()),
        (
            names::INSTANCE_LABEL.into(),
            names::instance_label(&model.name),
        ),
        (
            names::INSTANCE_INDEX_LABEL.into(),
            model.spec.index.to_string(),
        ),
        (
            names::COMPONENT_LABEL.into(),
            names::COMPONENT_INSTANCE.into(),
        ),
    ])
}

/// The desired Pod, named and annotated with its template hash, owned by the instance.
pub fn pod(model: &Model) -> Pod {
    let mut pod = template(model);
    let hash = template_hash(&pod);
    pod.metadata.name = Some(names::instance_pod_name(&model.name, &model.uid, &hash));
    pod.metadata.namespace = Some(model.namespace.clone());
    pod.metadata.annotations = Some(BTreeMap::from([(
        names::POD_TEMPLATE_HASH_ANNOTATION.into(),
        hash,
    )]));
    pod.metadata.owner_references = Some(vec![model.owner.clone()]);
    pod
}

/// The template hash of a Pod built by [`template`]: 16 hex chars of SHA-256 of its JSON.
pub fn template_hash(pod: &Pod) -> String {
    let json = serde_json::to_vec(&(&pod.metadata.labels, &pod.spec)).unwrap_or_default();
    Sha256::digest(&json)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Labels and spec only (no name, annotations or owner): what the hash covers.
pub fn template(model: &Model) -> Pod {
    let spec = model.spec;
    let kmsg = !spec.disable_kmsg_redirect;
    let init = kmsg.then(|| vec![kmsg_init(model)]);
    let mut volumes = data_volumes(model);
    if kmsg {
        volumes.push(Volume {
            name: KMSG_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    let pod_spec = PodSpec {
        restart_policy: Some("Never".into()),
        init_containers: init,
        containers: vec![redroid(model)],
        volumes: Some(volumes),
        node_selector: (!spec.node_selector.is_empty()).then(|| spec.node_selector.clone()),
        tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
        affinity: spec.affinity.clone(),
        image_pull_secrets: (!spec.image_pull_secrets.is_empty())
            .then(|| spec.image_pull_secrets.clone()),
        ..PodSpec::default()
    };
    Pod {
        metadata: ObjectMeta {
            labels: Some(labels(model)),
            ..ObjectMeta::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

fn pvc(name: &str, claim: &str) -> Volume {
    let source = PersistentVolumeClaimVolumeSource {
        claim_name: claim.into(),
        read_only: None,
    };
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(source),
        ..Volume::default()
    }
}

fn data_volumes(model: &Model) -> Vec<Volume> {
    let spec = model.spec;
    let dri = HostPathVolumeSource {
        path: "/dev/dri".into(),
        type_: Some("DirectoryOrCreate".into()),
    };
    let dev_dri = Volume {
        name: "dev-dri".into(),
        host_path: Some(dri),
        ..Volume::default()
    };
    if spec.base_mode {
        vec![pvc("data-base", &spec.shared_data_pvc), dev_dri]
    } else {
        vec![
            pvc("data-base", &spec.shared_data_pvc),
            pvc("data-diff", &spec.diff_data_pvc),
            dev_dri,
        ]
    }
}

fn mount(name: &str, path: &str, sub_path: Option<String>) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        sub_path,
        ..VolumeMount::default()
    }
}

fn data_mounts(model: &Model) -> Vec<VolumeMount> {
    let spec = model.spec;
    let mut mounts = if spec.base_mode {
        vec![mount("data-base", "/data", None)]
    } else {
        let index = spec.index.to_string();
        vec![
            mount("data-base", "/data-base", None),
            mount("data-diff", &format!("/data-diff/{index}"), Some(index)),
        ]
    };
    mounts.push(mount("dev-dri", "/dev/dri", None));
    if !spec.disable_kmsg_redirect {
        mounts.push(mount(KMSG_VOLUME, KMSG_DIR, None));
    }
    mounts
}

fn redroid(model: &Model) -> Container {
    let spec = model.spec;
    let boot = androidboot_args(spec);
    let (command, args) = if spec.disable_kmsg_redirect {
        (None, boot)
    } else {
        let mut args = vec!["-c".to_string(), KMSG_WRAPPER.to_string(), "--".to_string()];
        args.extend(boot);
        (Some(vec![format!("{KMSG_DIR}/busybox"), "sh".into()]), args)
    };
    let mut env = vec![EnvVar {
        name: "INSTANCE_INDEX".into(),
        value: Some(spec.index.to_string()),
        value_from: None,
    }];
    env.extend(spec.extra_env.iter().cloned());
    Container {
        name: names::REDROID_CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(if spec.image_pull_policy.is_empty() {
            "IfNotPresent".into()
        } else {
            spec.image_pull_policy.clone()
        }),
        command,
        args: Some(args),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("adb".into()),
            container_port: spec.adb_port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        resources: spec.resources.clone(),
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
        readiness_probe: Some(boot_probe()),
        volume_mounts: Some(data_mounts(model)),
        ..Container::default()
    }
}

fn boot_probe() -> Probe {
    let exec = ExecAction {
        command: Some(vec![
            "/system/bin/sh".into(),
            "-c".into(),
            BOOT_CHECK.into(),
        ]),
    };
    Probe {
        exec: Some(exec),
        initial_delay_seconds: Some(5),
        ..Probe::default()
    }
}

/// The kmsg-tools image of an instance: its own, else the operator default.
pub fn kmsg_image(model: &Model) -> String {
    model
        .spec
        .kmsg_tools_image
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| model.default_kmsg_image.to_string())
}

/// `Always` for `:latest` or untagged references, else `IfNotPresent`.
pub fn pull_policy_for(image: &str) -> &'static str {
    let tag = image
        .rfind(':')
        .filter(|c| *c > image.rfind('/').unwrap_or(0))
        .map(|c| &image[c + 1..]);
    match tag {
        None | Some("latest") => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn kmsg_init(model: &Model) -> Container {
    let image = kmsg_image(model);
    Container {
        name: KMSG_VOLUME.into(),
        image_pull_policy: Some(pull_policy_for(&image).into()),
        image: Some(image),
        command: Some(vec!["/bin/sh".into(), "-c".into(), KMSG_COPY.into()]),
        volume_mounts: Some(vec![mount(KMSG_VOLUME, KMSG_DIR, None)]),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RedroidInstance;

    fn inst(yaml: &str) -> RedroidInstance {
        let mut i: RedroidInstance = serde_yaml::from_str(yaml).expect("instance");
        i.metadata.uid = Some("uid-1".into());
        i
    }

    const BASE: &str = "{apiVersion: redroid.isning.moe/v1alpha1, kind: RedroidInstance, metadata: {name: a, namespace: ns}, spec: {index: 3}}";

    #[test]
    fn normal_mode_mounts_overlay_layers_and_wraps_kmsg() {
        let i = inst(BASE);
        let p = pod(&Model::new(&i, "kmsg:1").expect("model"));
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let paths: Vec<&str> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(
            paths,
            ["/data-base", "/data-diff/3", "/dev/dri", "/kmsg-tools"]
        );
        assert_eq!(
            c.command.as_deref(),
            Some(&["/kmsg-tools/busybox".to_string(), "sh".into()][..])
        );
        let args = c.args.as_ref().expect("args");
        assert_eq!((args[0].as_str(), args[2].as_str()), ("-c", "--"));
        assert_eq!(args[5], "androidboot.use_redroid_overlayfs=1");
        let init = &p
            .spec
            .as_ref()
            .expect("spec")
            .init_containers
            .as_ref()
            .expect("init")[0];
        assert_eq!(
            (init.image.as_deref(), init.image_pull_policy.as_deref()),
            (Some("kmsg:1"), Some("IfNotPresent"))
        );
        assert!(
            p.metadata
                .name
                .as_deref()
                .expect("name")
                .starts_with("a-pod-")
        );
    }

    #[test]
    fn base_mode_without_kmsg_has_bare_args_and_no_diff() {
        let i = inst(&BASE.replace(
            "index: 3",
            "index: 3, baseMode: true, disableKmsgRedirect: true",
        ));
        let p = pod(&Model::new(&i, "kmsg").expect("model"));
        let spec = p.spec.as_ref().expect("spec");
        let c = &spec.containers[0];
        assert!(c.command.is_none() && spec.init_containers.is_none());
        assert_eq!(
            c.args.as_ref().expect("args")[2],
            "androidboot.use_redroid_overlayfs=0"
        );
        let vols: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(vols, ["data-base", "dev-dri"]);
    }

    #[test]
    fn hash_and_name_follow_the_spec() {
        let a = inst(BASE);
        let b = inst(&BASE.replace("index: 3", "index: 3, image: other"));
        let name = |i: &RedroidInstance| pod(&Model::new(i, "k").expect("model")).metadata.name;
        assert_eq!(name(&a), name(&a.clone()));
        assert_ne!(name(&a), name(&b));
        assert_eq!(pull_policy_for("ghcr.io/x/kmsg:latest"), "Always");
        assert_eq!(pull_policy_for("registry:5000/kmsg"), "Always");
    }
}
