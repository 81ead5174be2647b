//! Pure: a RedroidTask plus what was observed → the typed [`Model`] the builders use, or an
//! [`Invalid`] reference (a missing instance or ConfigMap) to report on the task, or a spec
//! without instances or integrations (an object stored without spec).
//!
//! Contract: no client, no clock. Instances resolve in spec order; the first missing instance
//! wins over missing ConfigMaps, and every missing name of that kind is listed.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Volume, VolumeMount};
use kube::ResourceExt;

use crate::crd::{
    InstancePhase, RedroidInstance, RedroidInstanceSpec, RedroidTask, RedroidTaskSpec,
    TemporaryOverride,
};

/// How a one-shot task's integration containers reach Android (ADR 0001).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `suspendInstance`: the instance is held Stopped; the Job runs its own redroid sidecar.
    Sidecar,
    /// `wakeInstance`: the instance is held Running; the Job talks to its Service.
    Wake,
    /// Neither flag, or a scheduled task: the instance's Service, the instance left alone.
    Service,
}

/// One referenced instance, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// The RedroidInstance's name.
    pub name: String,
    /// Its spec.
    pub spec: RedroidInstanceSpec,
    /// Its reported phase.
    pub phase: Option<InstancePhase>,
    /// Its `status.suspended`.
    pub suspended: Option<TemporaryOverride>,
    /// Its `status.woken`.
    pub woken: Option<TemporaryOverride>,
    /// `spec.instances[].volumes` of the task.
    pub volumes: Vec<Volume>,
    /// `spec.instances[].volumeMounts` of the task.
    pub volume_mounts: Vec<VolumeMount>,
}

/// A task whose references all resolve.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// The task's name.
    pub name: String,
    /// The task's namespace.
    pub namespace: String,
    /// The task's spec.
    pub spec: RedroidTaskSpec,
    /// True when `schedule` is set (CronJobs), false for one-shot Jobs.
    pub scheduled: bool,
    /// How integrations reach Android.
    pub access: Access,
    /// The referenced instances, in spec order.
    pub targets: Vec<Target>,
}

/// A reference that does not resolve: the task waits (watching) until it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// These RedroidInstances do not exist.
    InstanceNotFound(Vec<String>),
    /// These ConfigMaps do not exist.
    ConfigMapNotFound(Vec<String>),
    /// No instance or no integration: only an object stored without spec (which the schema
    /// allows, as upstream's does) gets here.
    Incomplete,
}

impl Invalid {
    /// The condition reason (and Event reason).
    pub fn reason(&self) -> &'static str {
        match self {
            Invalid::InstanceNotFound(_) => "InstanceNotFound",
            Invalid::ConfigMapNotFound(_) => "ConfigMapNotFound",
            Invalid::Incomplete => "InvalidSpec",
        }
    }

    /// A message naming what is missing.
    pub fn message(&self, namespace: &str) -> String {
        let (kind, names) = match self {
            Invalid::InstanceNotFound(n) => ("RedroidInstance", n),
            Invalid::ConfigMapNotFound(n) => ("ConfigMap", n),
            Invalid::Incomplete => {
                return "The spec is missing or incomplete (spec.instances and spec.integrations must each name at least one); the task runs nothing until it has them.".into();
            }
        };
        let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
        format!(
            "{kind} {} not found in namespace {namespace:?}; the task waits until it exists.",
            quoted.join(", ")
        )
    }
}

/// Every distinct ConfigMap the task's integrations mount, sorted.
pub fn config_map_names(spec: &RedroidTaskSpec) -> BTreeSet<String> {
    let configs = spec.integrations.iter().flat_map(|i| &i.configs);
    configs.map(|c| c.config_map_name.clone()).collect()
}

/// Resolves `task` against the instances and ConfigMaps that exist.
pub fn validate(
    task: &RedroidTask,
    instances: &[RedroidInstance],
    config_maps: &BTreeSet<String>,
) -> Result<Model, Invalid> {
    if task.spec.instances.is_empty() || task.spec.integrations.is_empty() {
        return Err(Invalid::Incomplete);
    }
    let mut targets = Vec::new();
    let mut missing = Vec::new();
    for r in &task.spec.instances {
        match instances.iter().find(|i| i.name_any() == r.name) {
            Some(inst) => targets.push(target(inst, r.volumes.clone(), r.volume_mounts.clone())),
            None => missing.push(r.name.clone()),
        }
    }
    if !missing.is_empty() {
        return Err(Invalid::InstanceNotFound(missing));
    }
    let absent: Vec<String> = config_map_names(&task.spec)
        .into_iter()
        .filter(|n| !config_maps.contains(n))
        .collect();
    if !absent.is_empty() {
        return Err(Invalid::ConfigMapNotFound(absent));
    }
    Ok(Model {
        name: task.name_any(),
        namespace: task.namespace().unwrap_or_default(),
        scheduled: !task.spec.schedule.is_empty(),
        access: access(&task.spec),
        spec: task.spec.clone(),
        targets,
    })
}

fn access(spec: &RedroidTaskSpec) -> Access {
    if !spec.schedule.is_empty() {
        Access::Service
    } else if spec.suspend_instance {
        Access::Sidecar
    } else if spec.wake_instance {
        Access::Wake
    } else {
        Access::Service
    }
}

fn target(inst: &RedroidInstance, volumes: Vec<Volume>, volume_mounts: Vec<VolumeMount>) -> Target {
    let status = inst.status.clone().unwrap_or_default();
    Target {
        name: inst.name_any(),
        spec: inst.spec.clone(),
        phase: status.phase,
        suspended: status.suspended,
        woken: status.woken,
        volumes,
        volume_mounts,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn task(yaml: &str) -> RedroidTask {
        serde_yaml::from_str(yaml).expect("task yaml")
    }

    pub(crate) fn instance(name: &str, index: i32) -> RedroidInstance {
        let mut i = RedroidInstance::new(
            name,
            serde_yaml::from_str(&format!("index: {index}")).expect("spec"),
        );
        i.metadata.namespace = Some("ns".into());
        i
    }

    const TASK: &str = r#"
apiVersion: redroid.isning.moe/v1alpha1
kind: RedroidTask
metadata: {name: t, namespace: ns}
spec:
  instances: [{name: a}, {name: b}]
  suspendInstance: true
  integrations:
  - name: maa
    image: maa
    configs: [{configMapName: cfg.one, key: k, mountPath: /cfg}]
"#;

    #[test]
    fn resolves_in_spec_order_with_access_mode() {
        let cms = BTreeSet::from(["cfg.one".to_string()]);
        let m = validate(&task(TASK), &[instance("b", 1), instance("a", 0)], &cms).expect("valid");
        let names: Vec<&str> = m.targets.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(m.access, Access::Sidecar);
        assert!(!m.scheduled);
    }

    #[test]
    fn missing_instance_is_named() {
        let err =
            validate(&task(TASK), &[instance("a", 0)], &BTreeSet::new()).expect_err("invalid");
        assert_eq!(err, Invalid::InstanceNotFound(vec!["b".into()]));
        assert_eq!(err.reason(), "InstanceNotFound");
        assert!(
            err.message("ns")
                .contains("RedroidInstance \"b\" not found")
        );
    }

    #[test]
    fn missing_config_map_is_named() {
        let err = validate(
            &task(TASK),
            &[instance("a", 0), instance("b", 1)],
            &BTreeSet::new(),
        )
        .expect_err("invalid");
        assert_eq!(err.reason(), "ConfigMapNotFound");
        assert!(err.message("ns").contains("ConfigMap \"cfg.one\""));
    }

    #[test]
    fn scheduled_tasks_always_use_the_service() {
        let mut t = task(TASK);
        t.spec.schedule = "0 4 * * *".into();
        let cms = BTreeSet::from(["cfg.one".to_string()]);
        let m = validate(&t, &[instance("a", 0), instance("b", 1)], &cms).expect("valid");
        assert_eq!((m.scheduled, m.access), (true, Access::Service));
    }
}
