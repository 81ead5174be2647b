//! Deploying a kustomization in a test: render it with the plane's kubectl, adjust what only
//! the test knows (its namespace, the image tag of a freshly built binary, environment
//! values), and server-side apply the result.
//!
//! Contract: [`render`] returns the objects `kubectl kustomize <dir>` prints; the setters
//! change only what they name; [`apply_all`] applies in order with one field manager.

use std::path::Path;

use kube::api::DynamicObject;

use crate::plane;
use crate::rbac;

/// The objects of kustomization `dir`.
pub fn render(dir: &Path) -> anyhow::Result<Vec<DynamicObject>> {
    let state = plane::read_state().ok_or_else(|| anyhow::anyhow!("no local plane"))?;
    let out = std::process::Command::new(state.bin_dir.join("kubectl"))
        .arg("kustomize")
        .arg(dir)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let mut objs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        objs.push(serde::Deserialize::deserialize(doc)?);
    }
    Ok(objs)
}

const CLUSTER_SCOPED: [&str; 6] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
];

/// Moves every namespaced object into `namespace`.
pub fn set_namespace(objs: &mut [DynamicObject], namespace: &str) {
    for o in objs.iter_mut() {
        if !CLUSTER_SCOPED.contains(&rbac::kind(o)) {
            o.metadata.namespace = Some(namespace.to_owned());
        }
    }
}

fn containers(o: &mut DynamicObject) -> Vec<&mut serde_json::Value> {
    let spec = match rbac::kind(o) {
        "Pod" => o.data.get_mut("spec"),
        _ => o.data.pointer_mut("/spec/template/spec"),
    };
    let Some(spec) = spec else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(obj) = spec.as_object_mut() {
        for (key, list) in obj.iter_mut() {
            if key == "containers" || key == "initContainers" {
                out.extend(list.as_array_mut().into_iter().flatten());
            }
        }
    }
    out
}

/// Replaces every container image of `repository` (any tag) with `image`.
pub fn set_image(objs: &mut [DynamicObject], repository: &str, image: &str) {
    for o in objs.iter_mut() {
        for c in containers(o) {
            let current = c["image"].as_str().unwrap_or_default();
            let repo = current
                .rsplit_once(':')
                .map_or(current, |(r, t)| if t.contains('/') { current } else { r });
            if repo == repository {
                c["image"] = image.into();
            }
        }
    }
}

/// Sets environment variable `name` of every container named `container` to `value`.
pub fn set_env(objs: &mut [DynamicObject], container: &str, name: &str, value: &str) {
    for o in objs.iter_mut() {
        for c in containers(o) {
            if c["name"] != container {
                continue;
            }
            if !c["env"].is_array() {
                c["env"] = serde_json::json!([]);
            }
            let env = c["env"].as_array_mut().expect("env array");
            env.retain(|e| e["name"] != name);
            env.push(serde_json::json!({"name": name, "value": value}));
        }
    }
}

/// Every object of the YAML files in `dir` (not a kustomization: `kubectl apply -f dir`).
pub fn files(dir: &Path) -> anyhow::Result<Vec<DynamicObject>> {
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| {
        p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml")
    });
    paths.sort();
    let mut objs = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(&p)?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            objs.push(serde::Deserialize::deserialize(doc)?);
        }
    }
    Ok(objs)
}

/// Server-side applies every object as `manager`.
pub async fn apply_all(
    client: &kube::Client,
    objs: &[DynamicObject],
    manager: &str,
) -> anyhow::Result<()> {
    for o in objs {
        rbac::apply(client, o, manager).await?;
    }
    Ok(())
}

/// Runs the plane's kubectl as admin: (success, stdout, stderr).
pub fn kubectl(args: &[&str]) -> (bool, String, String) {
    kubectl_stdin(args, "")
}

/// Runs the plane's kubectl as admin with `stdin` as its input: (success, stdout, stderr).
pub fn kubectl_stdin(args: &[&str], stdin: &str) -> (bool, String, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let state = plane::read_state().expect("plane state");
    let mut child = Command::new(state.bin_dir.join("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            crate::kubeconfig_path().display()
        ))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("kubectl output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl apply -k <dir> --dry-run=server`, as a user installs an operator, must pass with
/// every object in `expected` (kubectl's `kind.group/name`) listed and the operator's pod
/// meeting the restricted Pod Security standard. Namespaced objects are admitted only into
/// an existing namespace, even in a dry run, so the install's own Namespace (`namespace_file`)
/// is applied for real first: it is what the install creates first, and its Pod Security
/// labels then judge the Deployment.
pub async fn assert_install_dry_run(
    admin: &kube::Client,
    dir: &Path,
    namespace_file: &Path,
    expected: &[&str],
) {
    let text = std::fs::read_to_string(namespace_file).expect("read the namespace manifest");
    let namespace: DynamicObject = serde_yaml::from_str(&text).expect("namespace yaml");
    rbac::apply(admin, &namespace, "flotilla-install-dry-run")
        .await
        .expect("apply the namespace");
    let dir = dir.display().to_string();
    let (ok, stdout, stderr) = kubectl(&["apply", "-k", &dir, "--dry-run=server"]);
    assert!(ok, "kubectl apply -k failed:\n{stdout}\n{stderr}");
    assert!(
        !stderr.contains("would violate PodSecurity"),
        "the operator pod must meet the restricted standard:\n{stderr}"
    );
    for line in expected {
        assert!(
            stdout.contains(line),
            "{line} missing from the install:\n{stdout}"
        );
    }
}
