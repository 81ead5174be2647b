//! Running an operator under its own hand-written RBAC in a test: the objects of a
//! `deploy/<operator>/rbac` directory are applied into the test's namespace (ServiceAccount,
//! Roles and their bindings move there; the ClusterRoleBinding gets a per-namespace name so
//! parallel tests never fight over one binding), and the operator then runs with a bound token
//! of that ServiceAccount (`crate::service_account_client`), not as admin.

use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};

/// Every object in the YAML files of `dir` (not its kustomization), with objects of
/// `deploy_namespace` moved into `namespace`.
pub fn rbac_objects(
    dir: &Path,
    deploy_namespace: &str,
    namespace: &str,
) -> anyhow::Result<Vec<DynamicObject>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| {
        p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml")
    });
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let mut obj: DynamicObject = serde::Deserialize::deserialize(doc)?;
            relocate(&mut obj, deploy_namespace, namespace);
            out.push(obj);
        }
    }
    Ok(out)
}

fn relocate(obj: &mut DynamicObject, from: &str, to: &str) {
    // Objects without a namespace in the YAML get theirs from the kustomization: ours.
    if kind(obj) != "ClusterRole" && kind(obj) != "ClusterRoleBinding" {
        obj.metadata.namespace = Some(to.to_owned());
    }
    if let Some(subjects) = obj.data.get_mut("subjects").and_then(|s| s.as_array_mut()) {
        for s in subjects.iter_mut() {
            if s["namespace"] == from || s["namespace"].is_null() {
                s["namespace"] = to.into();
            }
        }
    }
    if kind(obj) == "ClusterRoleBinding" {
        obj.metadata.name = Some(format!("{}-{to}", obj.name_any()));
    }
}

/// The kind of `obj`.
pub fn kind(obj: &DynamicObject) -> &str {
    obj.types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default()
}

/// Server-side applies `obj` as `manager`.
pub async fn apply(client: &Client, obj: &DynamicObject, manager: &str) -> anyhow::Result<()> {
    let types = obj
        .types
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("object without apiVersion/kind"))?;
    let ar = ApiResource::from_gvk(&GroupVersionKind::try_from(types)?);
    let api: Api<DynamicObject> = match &obj.metadata.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let pp = PatchParams::apply(manager).force();
    api.patch(&obj.name_any(), &pp, &Patch::Apply(obj)).await?;
    Ok(())
}

/// Applies the RBAC of `dir` into `namespace`. The returned guard deletes the run's
/// ClusterRoleBinding when dropped (the namespace takes everything else with it).
pub async fn install_rbac(
    admin: &Client,
    dir: &Path,
    deploy_namespace: &str,
    namespace: &str,
) -> anyhow::Result<ClusterCleanup> {
    let mut binding = String::new();
    for obj in rbac_objects(dir, deploy_namespace, namespace)? {
        apply(admin, &obj, "flotilla-e2e-rbac").await?;
        if kind(&obj) == "ClusterRoleBinding" {
            binding = obj.name_any();
        }
    }
    anyhow::ensure!(
        !binding.is_empty(),
        "{} has no ClusterRoleBinding",
        dir.display()
    );
    Ok(ClusterCleanup(binding))
}

/// Deletes a test run's ClusterRoleBinding when dropped. Through kubectl, like
/// `TestNamespace`, so the deletion outlives the test's runtime.
pub struct ClusterCleanup(pub String);

impl Drop for ClusterCleanup {
    fn drop(&mut self) {
        let Some(state) = crate::plane::read_state() else {
            return;
        };
        let _ = std::process::Command::new(state.bin_dir.join("kubectl"))
            .arg(format!(
                "--kubeconfig={}",
                crate::kubeconfig_path().display()
            ))
            .args([
                "delete",
                "clusterrolebinding",
                &self.0,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}
