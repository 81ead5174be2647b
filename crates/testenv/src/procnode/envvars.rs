//! A container's environment, resolved as the kubelet's `makeEnvironmentVariables` does.
//!
//! Contract:
//! - `envFrom` first (ConfigMaps and Secrets, with `prefix`), then `env` in order; `env` wins.
//! - A plain `value` has `$(VAR)` references expanded against what was defined before it and
//!   the service variables; `valueFrom` resolves `fieldRef` (`metadata.name|namespace|uid`,
//!   `metadata.labels['k']`, `metadata.annotations['k']`, `spec.nodeName`,
//!   `spec.serviceAccountName`, `status.hostIP(s)`, `status.podIP(s)`), `resourceFieldRef`
//!   (limits/requests of cpu, memory, ephemeral-storage, with `divisor`), `configMapKeyRef` and
//!   `secretKeyRef`.
//! - A missing, non-optional source is an error whose text is the kubelet's (the container
//!   then waits with `CreateContainerConfigError`); an optional one is skipped.
//! - The service variables (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_PORT_443_TCP`, …) point
//!   at the agent's in-namespace apiserver address and are added unless the container set them.
//! - [`expand_command`] expands `command` and `args` against the final environment.
//! - Pure: Secrets and ConfigMaps come from [`Objects`].

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ObjectFieldSelector, Pod, ResourceFieldSelector, Secret,
};

use super::expand::expand;
use super::quantity;

/// Read access to the pod namespace's ConfigMaps and Secrets.
pub trait Objects {
    /// ConfigMap `name` in the pod's namespace.
    fn config_map(&self, name: &str) -> Option<Arc<ConfigMap>>;
    /// Secret `name` in the pod's namespace.
    fn secret(&self, name: &str) -> Option<Arc<Secret>>;
}

/// What the pod knows about itself at container start.
#[derive(Debug, Clone)]
pub struct PodContext<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its address.
    pub pod_ip: &'a str,
    /// The node's address.
    pub host_ip: &'a str,
    /// Node allocatable CPU (cores) and memory (bytes): the default of an unset limit.
    pub node_cpu: f64,
    /// See `node_cpu`.
    pub node_memory: f64,
}

/// The `KUBERNETES_*` service variables for an apiserver reachable at `host:443`.
pub fn service_env(host: &str) -> BTreeMap<String, String> {
    let tcp = format!("tcp://{host}:443");
    BTreeMap::from([
        ("KUBERNETES_SERVICE_HOST".into(), host.into()),
        ("KUBERNETES_SERVICE_PORT".into(), "443".into()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), "443".into()),
        ("KUBERNETES_PORT".into(), tcp.clone()),
        ("KUBERNETES_PORT_443_TCP".into(), tcp),
        ("KUBERNETES_PORT_443_TCP_PROTO".into(), "tcp".into()),
        ("KUBERNETES_PORT_443_TCP_PORT".into(), "443".into()),
        ("KUBERNETES_PORT_443_TCP_ADDR".into(), host.into()),
    ])
}

/// Resolves the container's environment; `Err` carries the kubelet's message.
pub fn resolve(
    container: &Container,
    ctx: &PodContext<'_>,
    objects: &dyn Objects,
    service: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    let namespace = ctx.pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut env = BTreeMap::new();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match objects.config_map(&r.name) {
                Some(cm) => {
                    for (k, v) in cm.data.iter().flatten() {
                        env.insert(format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            match objects.secret(&r.name) {
                Some(s) => {
                    for (k, v) in s.data.iter().flatten() {
                        env.insert(
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v.0).into_owned(),
                        );
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret \"{}\" not found", r.name)),
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) if !v.is_empty() => {
                let seen = env.clone();
                expand(v, |name| {
                    seen.get(name).or_else(|| service.get(name)).cloned()
                })
            }
            (_, Some(from)) => {
                let resolved = if let Some(f) = &from.field_ref {
                    Some(field_value(f, ctx)?)
                } else if let Some(r) = &from.resource_field_ref {
                    Some(resource_value(r, container, ctx)?)
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional == Some(true);
                    match objects.config_map(&r.name) {
                        None if optional => None,
                        None => return Err(format!("configmap \"{}\" not found", r.name)),
                        Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                            Some(v) => Some(v.clone()),
                            None if optional => None,
                            None => {
                                return Err(format!(
                                    "couldn't find key {} in ConfigMap {namespace}/{}",
                                    r.key, r.name
                                ));
                            }
                        },
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional == Some(true);
                    match objects.secret(&r.name) {
                        None if optional => None,
                        None => return Err(format!("secret \"{}\" not found", r.name)),
                        Some(s) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                            Some(v) => Some(String::from_utf8_lossy(&v.0).into_owned()),
                            None if optional => None,
                            None => {
                                return Err(format!(
                                    "couldn't find key {} in Secret {namespace}/{}",
                                    r.key, r.name
                                ));
                            }
                        },
                    }
                } else {
                    Some(String::new())
                };
                match resolved {
                    Some(v) => v,
                    None => continue, // optional and absent: the variable is not set
                }
            }
            _ => String::new(),
        };
        env.insert(var.name.clone(), value);
    }
    for (k, v) in service {
        env.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Ok(env)
}

/// `command` and `args` with `$(VAR)` expanded against the container's environment.
pub fn expand_command(words: &[String], env: &BTreeMap<String, String>) -> Vec<String> {
    words
        .iter()
        .map(|w| expand(w, |name| env.get(name).cloned()))
        .collect()
}

/// The value of a downward-API field path (env and downwardAPI volumes share it).
pub fn field_value(f: &ObjectFieldSelector, ctx: &PodContext<'_>) -> Result<String, String> {
    let meta = &ctx.pod.metadata;
    let spec = ctx.pod.spec.as_ref();
    let path = f.field_path.as_str();
    let subscript = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['"))
            .and_then(|rest| rest.strip_suffix("']"))
    };
    let map_lines = |m: Option<&BTreeMap<String, String>>| {
        m.into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", serde_json::Value::from(v.as_str())))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => map_lines(meta.labels.as_ref()),
        "metadata.annotations" => map_lines(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.hostIP" | "status.hostIPs" => ctx.host_ip.into(),
        "status.podIP" | "status.podIPs" => ctx.pod_ip.into(),
        _ => {
            if let Some(k) = subscript("metadata.labels") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(k))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(k) = subscript("metadata.annotations") {
                meta.annotations
                    .as_ref()
                    .and_then(|l| l.get(k))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(format!("unsupported fieldPath: {path}"));
            }
        }
    })
}

/// The value of a `resourceFieldRef` for `container` (the named one when it says so).
pub fn resource_value(
    r: &ResourceFieldSelector,
    container: &Container,
    ctx: &PodContext<'_>,
) -> Result<String, String> {
    let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => ctx
            .pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .find(|c| c.name == name)
            .ok_or_else(|| format!("container {name} not found"))?,
        None => container,
    };
    let (section, resource) = r
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", r.resource))?;
    let resources = target.resources.as_ref();
    let set = match section {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => return Err(format!("unsupported container resource : {}", r.resource)),
    };
    let given = set.and_then(|m| m.get(resource)).map(|q| q.0.as_str());
    let value = match (given.and_then(quantity::parse), resource) {
        (Some(v), _) => v,
        // Unset limits (and requests of cpu) default to the node's allocatable.
        (None, "cpu") => ctx.node_cpu,
        (None, "memory") => ctx.node_memory,
        (None, "ephemeral-storage") => 0.0,
        (None, other) => {
            return Err(format!(
                "unsupported container resource : {section}.{other}"
            ));
        }
    };
    let divisor = r
        .divisor
        .as_ref()
        .and_then(|d| quantity::parse(&d.0))
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    Ok(format!("{}", (value / divisor).ceil() as i64))
}

#[cfg(test)]
#[path = "envvars_tests.rs"]
mod tests;
