//! Turning a container of a pod into a run: argv from `command`/`args` and the image's
//! ENTRYPOINT/CMD, credentials from the security contexts, the base environment and the
//! pod's /etc files.
//!
//! Contract (pure, table-tested):
//! - [`argv`]: as Docker and the kubelet combine them: neither given → ENTRYPOINT + CMD;
//!   `command` only → `command` (CMD dropped); `args` only → ENTRYPOINT + `args`; both →
//!   `command` + `args`. Then `$(VAR)` expansion against the container's environment.
//! - [`credentials`]: the container's `runAsUser`/`runAsGroup` win over the pod's; unset means
//!   root (the images mapped here run as root); supplementary groups are the pod's
//!   `supplementalGroups` plus `fsGroup`. `runAsNonRoot` with uid 0 is refused with the
//!   kubelet's message.
//! - [`base_env`]: the image's ENV, `PATH` if the image sets none, `HOSTNAME` and `HOME`.
//! - [`etc_hosts`]: localhost, the pod's own name, `hostAliases`, and the `kubernetes.default…`
//!   names at the apiserver proxy.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::envvars::expand_command;
use super::images::ImageEntry;

/// The default `PATH` of container runtimes.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Program and arguments of the container, expanded.
pub fn argv(
    container: &Container,
    image: &ImageEntry,
    env: &BTreeMap<String, String>,
) -> Vec<String> {
    let command = container.command.clone().filter(|c| !c.is_empty());
    let args = container.args.clone().filter(|a| !a.is_empty());
    let words: Vec<String> = match (command, args) {
        (Some(c), Some(a)) => c.into_iter().chain(a).collect(),
        (Some(c), None) => c,
        (None, Some(a)) => image.entrypoint.iter().cloned().chain(a).collect(),
        (None, None) => image
            .entrypoint
            .iter()
            .chain(image.cmd.iter())
            .cloned()
            .collect(),
    };
    expand_command(&words, env)
}

/// uid, gid and supplementary groups of the container's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// The container's credentials, or the kubelet's refusal for `runAsNonRoot` with root.
pub fn credentials(pod: &Pod, container: &Container) -> Result<Credentials, String> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = container.security_context.as_ref();
    let uid = csc
        .and_then(|c| c.run_as_user)
        .or_else(|| psc.and_then(|p| p.run_as_user))
        .unwrap_or(0);
    let gid = csc
        .and_then(|c| c.run_as_group)
        .or_else(|| psc.and_then(|p| p.run_as_group))
        .unwrap_or(0);
    let non_root = csc
        .and_then(|c| c.run_as_non_root)
        .or_else(|| psc.and_then(|p| p.run_as_non_root))
        .unwrap_or(false);
    if non_root && uid == 0 {
        let explicit = csc
            .and_then(|c| c.run_as_user)
            .or_else(|| psc.and_then(|p| p.run_as_user));
        return Err(match explicit {
            Some(_) => "container's runAsUser breaks non-root policy".to_string(),
            None => "container has runAsNonRoot and image will run as root".to_string(),
        } + &format!(
            " (pod: \"{}_{}({})\", container: {})",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.uid.as_deref().unwrap_or_default(),
            container.name
        ));
    }
    let mut groups: Vec<u32> = psc
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|g| g as u32)
        .collect();
    if let Some(fs) = psc.and_then(|p| p.fs_group) {
        groups.push(fs as u32);
    }
    groups.sort_unstable();
    groups.dedup();
    Ok(Credentials {
        uid: uid as u32,
        gid: gid as u32,
        groups,
    })
}

/// The environment every container starts from, before its own variables.
pub fn base_env(image: &ImageEntry, hostname: &str, uid: u32) -> BTreeMap<String, String> {
    let mut env = image.env.clone();
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    env.insert("HOSTNAME".into(), hostname.into());
    env.entry("HOME".into())
        .or_insert_with(|| if uid == 0 { "/root".into() } else { "/".into() });
    env
}

/// The pod's hostname: `spec.hostname`, else its name (truncated to 63 characters).
pub fn hostname(pod: &Pod) -> String {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_string()
}

/// The pod's /etc/hosts.
pub fn etc_hosts(pod: &Pod, pod_ip: &str, apiserver: &str) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file (a Flotilla process-backed node).\n\
         127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    );
    out.push_str(&format!("{pod_ip}\t{}\n", hostname(pod)));
    out.push_str(&format!(
        "{apiserver}\tkubernetes kubernetes.default kubernetes.default.svc kubernetes.default.svc.cluster.local\n"
    ));
    for alias in pod
        .spec
        .iter()
        .flat_map(|s| s.host_aliases.iter().flatten())
    {
        let names = alias.hostnames.clone().unwrap_or_default().join("\t");
        out.push_str(&format!(
            "\n# Entries added by HostAliases.\n{}\t{names}\n",
            alias.ip
        ));
    }
    out
}

/// The pod's /etc/resolv.conf: there is no cluster DNS here, and no route out of loopback,
/// so lookups of anything but /etc/hosts fail at once.
pub const RESOLV_CONF: &str = "# No cluster DNS on Flotilla's process-backed nodes: names resolve through /etc/hosts only.\n\
     nameserver 127.0.0.1\noptions ndots:1 attempts:1 timeout:1\n";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn image() -> ImageEntry {
        ImageEntry {
            image: "x".into(),
            entrypoint: vec!["/entry".into()],
            cmd: vec!["--default".into()],
            ..ImageEntry::default()
        }
    }

    #[test]
    fn argv_combines_like_docker_and_expands() {
        let env = BTreeMap::from([("PORT".to_string(), "80".to_string())]);
        let c =
            |v: serde_json::Value| -> Container { serde_json::from_value(v).expect("container") };
        let cases = [
            (json!({"name": "a"}), vec!["/entry", "--default"]),
            (
                json!({"name": "a", "command": ["/bin/sh", "-c"]}),
                vec!["/bin/sh", "-c"],
            ),
            (
                json!({"name": "a", "args": ["--port=$(PORT)"]}),
                vec!["/entry", "--port=80"],
            ),
            (
                json!({"name": "a", "command": ["run"], "args": ["$$(PORT)"]}),
                vec!["run", "$(PORT)"],
            ),
        ];
        for (container, want) in cases {
            assert_eq!(
                argv(&c(container.clone()), &image(), &env),
                want,
                "{container}"
            );
        }
    }

    #[test]
    fn credentials_follow_the_security_contexts() {
        let pod = |psc: serde_json::Value| -> Pod {
            serde_json::from_value(
                json!({"metadata": {"name": "p", "namespace": "n", "uid": "u"},
                "spec": {"securityContext": psc, "containers": [{"name": "c"}]}}),
            )
            .expect("pod")
        };
        let c = |csc: serde_json::Value| -> Container {
            serde_json::from_value(json!({"name": "c", "securityContext": csc})).expect("container")
        };
        let ok = |uid, gid, groups: &[u32]| {
            Ok(Credentials {
                uid,
                gid,
                groups: groups.to_vec(),
            })
        };
        assert_eq!(credentials(&pod(json!({})), &c(json!({}))), ok(0, 0, &[]));
        assert_eq!(
            credentials(
                &pod(
                    json!({"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 2000, "supplementalGroups": [3000]})
                ),
                &c(json!({}))
            ),
            ok(65532, 65532, &[2000, 3000])
        );
        assert_eq!(
            credentials(
                &pod(json!({"runAsUser": 1000})),
                &c(json!({"runAsUser": 1001, "runAsGroup": 5}))
            ),
            ok(1001, 5, &[])
        );
        let refused = credentials(&pod(json!({"runAsNonRoot": true})), &c(json!({})))
            .expect_err("root refused");
        assert!(
            refused.starts_with("container has runAsNonRoot and image will run as root"),
            "{refused}"
        );
        let refused = credentials(
            &pod(json!({})),
            &c(json!({"runAsNonRoot": true, "runAsUser": 0})),
        )
        .expect_err("uid 0 refused");
        assert!(
            refused.starts_with("container's runAsUser breaks non-root policy"),
            "{refused}"
        );
    }

    #[test]
    fn hosts_name_the_pod_and_the_apiserver() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web-0"},
            "spec": {"containers": [], "hostAliases": [{"ip": "127.9.9.9", "hostnames": ["db"]}]}}))
        .expect("pod");
        let hosts = etc_hosts(&pod, "127.2.0.7", "127.2.255.254");
        assert!(hosts.contains("127.2.0.7\tweb-0\n"));
        assert!(
            hosts.contains("127.2.255.254\tkubernetes kubernetes.default kubernetes.default.svc")
        );
        assert!(hosts.contains("127.9.9.9\tdb"));
        let env = base_env(&ImageEntry::default(), "web-0", 65532);
        assert_eq!(
            (
                env["PATH"].as_str(),
                env["HOME"].as_str(),
                env["HOSTNAME"].as_str()
            ),
            (DEFAULT_PATH, "/", "web-0")
        );
    }
}
