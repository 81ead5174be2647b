//! A pod's volumes as host directories, which init binds at each `mountPath`.
//!
//! Contract:
//! - emptyDir: `<pod dir>/volumes/empty-dir/<name>`, mode 0777, removed with the pod (any
//!   `medium` is a directory on disk here).
//! - persistentVolumeClaim and generic ephemeral volumes: the claim must be Bound; the data
//!   lives in `<procnode>/pv/<PersistentVolume name>` (mode 0777), so it survives the pod and
//!   its successors, and is removed when the PersistentVolume is deleted (the agent watches).
//! - hostPath: the host path itself (`DirectoryOrCreate`/`FileOrCreate` create it).
//! - secret, configMap, downwardAPI, projected: written by the atomic writer, rewritten in
//!   place when their sources change ([`refresh`]). With `fsGroup`, files belong to that group
//!   and are group-readable; without it, a ServiceAccount token is owned by the containers'
//!   common non-root `runAsUser` with mode 0600, as the kubelet does.
//! - Any other volume kind fails the pod's start with a clear message.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Volume};
use kube::api::Api;

use super::atomic::{self, Owner};
use super::envvars::{Objects, PodContext};
use super::layout::Layout;
use super::projection::{self, Tokens};

/// The PersistentVolume behind each claim-backed volume of the pod.
pub async fn claims(client: &kube::Client, pod: &Pod) -> Result<BTreeMap<String, String>, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let mut out = BTreeMap::new();
    for v in volumes(pod) {
        let claim = match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => c.claim_name.clone(),
            (None, Some(_)) => format!("{pod_name}-{}", v.name),
            _ => continue,
        };
        let pvc = api
            .get_opt(&claim)
            .await
            .map_err(|e| format!("getting persistentvolumeclaim \"{claim}\": {e}"))?
            .ok_or_else(|| format!("persistentvolumeclaim \"{claim}\" not found"))?;
        let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let pv = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|_| bound);
        let pv = pv.ok_or_else(|| format!("persistentvolumeclaim \"{claim}\" is not bound"))?;
        out.insert(v.name.clone(), pv);
    }
    Ok(out)
}

fn volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// Everything the volumes are made from.
pub struct Sources<'a> {
    /// The agent's directories.
    pub layout: &'a Layout,
    /// Secrets and ConfigMaps of the pod's namespace.
    pub objects: &'a dyn Objects,
    /// The pod's ServiceAccount tokens.
    pub tokens: &'a dyn Tokens,
    /// The pod, its address and node.
    pub pod: &'a PodContext<'a>,
}

/// Creates every volume's directory and contents; returns volume name → host path, or the
/// failing volume's name and why.
pub fn materialize(
    src: &Sources<'_>,
    claims: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, PathBuf>, (String, String)> {
    let pod = src.pod.pod;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut dirs = BTreeMap::new();
    for v in volumes(pod) {
        let fail = |m: String| (v.name.clone(), m);
        let dir = if v.empty_dir.is_some() {
            let d = src.layout.volume_dir(&uid, "empty-dir", &v.name);
            open_dir(&d).map_err(fail)?;
            d
        } else if let Some(pv) = claims.get(&v.name) {
            let d = src.layout.pv_dir(pv);
            open_dir(&d).map_err(fail)?;
            d
        } else if let Some(h) = &v.host_path {
            host_path(&h.path, h.type_.as_deref()).map_err(fail)?
        } else {
            let d = src.layout.volume_dir(&uid, kind(v), &v.name);
            write_projected(src, v, &d).map_err(fail)?;
            d
        };
        dirs.insert(v.name.clone(), dir);
    }
    Ok(dirs)
}

/// Rewrites the atomically written volumes whose sources changed; returns the failures (the
/// previous contents stay, as with the kubelet).
pub fn refresh(src: &Sources<'_>) -> Vec<(String, String)> {
    let uid = src.pod.pod.metadata.uid.clone().unwrap_or_default();
    volumes(src.pod.pod)
        .iter()
        .filter(|v| {
            v.secret.is_some()
                || v.config_map.is_some()
                || v.downward_api.is_some()
                || v.projected.is_some()
        })
        .filter_map(|v| {
            let d = src.layout.volume_dir(&uid, kind(v), &v.name);
            write_projected(src, v, &d)
                .err()
                .map(|e| (v.name.clone(), e))
        })
        .collect()
}

fn kind(v: &Volume) -> &'static str {
    if v.secret.is_some() {
        "secret"
    } else if v.config_map.is_some() {
        "configmap"
    } else if v.downward_api.is_some() {
        "downward-api"
    } else if v.projected.is_some() {
        "projected"
    } else {
        "other"
    }
}

fn open_dir(d: &Path) -> Result<(), String> {
    fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    fs::set_permissions(d, fs::Permissions::from_mode(0o777))
        .map_err(|e| format!("chmod {}: {e}", d.display()))
}

fn host_path(path: &str, type_: Option<&str>) -> Result<PathBuf, String> {
    let p = PathBuf::from(path);
    match type_.unwrap_or_default() {
        "DirectoryOrCreate" => {
            fs::create_dir_all(&p).map_err(|e| format!("creating {path}: {e}"))?
        }
        "FileOrCreate" if !p.exists() => {
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            fs::write(&p, b"").map_err(|e| format!("creating {path}: {e}"))?;
        }
        "" => {}
        _ if !p.exists() => {
            return Err(format!("hostPath type check failed: {path} does not exist"));
        }
        _ => {}
    }
    if !p.exists() {
        return Err(format!("hostPath {path} does not exist"));
    }
    Ok(p)
}

fn write_projected(src: &Sources<'_>, v: &Volume, dir: &Path) -> Result<(), String> {
    let mut files = projection::render(v, src.pod, src.objects, src.tokens)?.ok_or_else(|| {
        format!(
            "volume {} has a kind process-backed nodes do not support",
            v.name
        )
    })?;
    let (owner, token_owner) = owners(src.pod.pod);
    if owner.gid.is_some() {
        for f in files.values_mut() {
            f.mode |= 0o440;
        }
    }
    // The token file of a projected volume, for a common non-root user without fsGroup.
    if let (Some(token_uid), Some(p)) = (token_owner, &v.projected) {
        let token_paths: Vec<String> = p
            .sources
            .iter()
            .flatten()
            .filter_map(|s| s.service_account_token.as_ref().map(|t| t.path.clone()))
            .collect();
        for path in &token_paths {
            if let Some(f) = files.get_mut(path) {
                f.mode = 0o600;
            }
        }
        atomic::write(dir, &files, owner).map_err(|e| e.to_string())?;
        for path in &token_paths {
            let real = dir.join("..data").join(path);
            std::os::unix::fs::chown(&real, Some(token_uid), None).map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    atomic::write(dir, &files, owner)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// (owner of all files, owner of token files): the fsGroup for everything when set;
/// otherwise the containers' common non-root runAsUser for tokens.
fn owners(pod: &Pod) -> (Owner, Option<u32>) {
    let spec = pod.spec.as_ref();
    let psc = spec.and_then(|s| s.security_context.as_ref());
    if let Some(fs_group) = psc.and_then(|p| p.fs_group) {
        return (
            Owner {
                uid: None,
                gid: Some(fs_group as u32),
            },
            None,
        );
    }
    let users: Vec<Option<i64>> = spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| {
            c.security_context
                .as_ref()
                .and_then(|c| c.run_as_user)
                .or_else(|| psc.and_then(|p| p.run_as_user))
        })
        .collect();
    let common = users
        .first()
        .copied()
        .flatten()
        .filter(|u| *u != 0 && users.iter().all(|x| *x == Some(*u)));
    (Owner::default(), common.map(|u| u as u32))
}
