//! The Pod as the instance controller caches it: only the fields it reads, decoded straight
//! from the API's JSON (the rest is skipped by the decoder, never built).
//!
//! Why: k8s-openapi's `Pod` is a struct of every field Kubernetes knows, present or not. An
//! empty `Container` takes 2.3 KiB and an empty `Volume` 3.2 KiB, so even a Pod stripped to
//! its data mounts cost about 17 KiB in the cache, which made most of the operator's heap at
//! 1000 instances. A [`CachedPod`] of the same Pod is the strings it holds.
//!
//! Contract:
//! - The field names and their `Option`s are `Pod`'s, so the code reading a cached Pod reads
//!   it as it would read a `Pod`: `spec.volumes`, `spec.containers[].volumeMounts`,
//!   `status.phase`, `status.podIP`, `status.message`, `status.conditions` and the
//!   containers' terminated states.
//! - It is the Pod kind to the API ([`kube::Resource`]: `v1` `pods`), so watches and lists
//!   decode into it directly. It is read-only: the controller never writes one back.
//! - [`CachedPod::from`] a `Pod` keeps the same fields, for Pods that come from elsewhere
//!   (a live list, a test).

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// A Pod, as far as the instance controller reads it (see the module docs).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPod {
    /// The Pod's metadata (managedFields dropped by the cache).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its volumes and mounts.
    #[serde(default)]
    pub spec: Option<CachedPodSpec>,
    /// Its phase, address, message, conditions and exit states.
    #[serde(default)]
    pub status: Option<CachedPodStatus>,
}

/// `spec` of a [`CachedPod`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    /// `spec.volumes`: names and claims.
    #[serde(default)]
    pub volumes: Option<Vec<CachedVolume>>,
    /// `spec.initContainers`: names and mounts.
    #[serde(default)]
    pub init_containers: Option<Vec<CachedContainer>>,
    /// `spec.containers`: names and mounts.
    #[serde(default)]
    pub containers: Vec<CachedContainer>,
}

/// A volume: its name and the claim it mounts, if it is a PVC.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedVolume {
    /// `name`.
    pub name: String,
    /// `persistentVolumeClaim`.
    #[serde(default)]
    pub persistent_volume_claim: Option<CachedClaim>,
}

/// `persistentVolumeClaim` of a volume.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedClaim {
    /// `claimName`.
    pub claim_name: String,
}

/// A container: its name and mounts.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainer {
    /// `name`.
    pub name: String,
    /// `volumeMounts`.
    #[serde(default)]
    pub volume_mounts: Option<Vec<CachedMount>>,
}

/// A volume mount: the volume and the sub-path.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedMount {
    /// `name` of the volume.
    pub name: String,
    /// `subPath`.
    #[serde(default)]
    pub sub_path: Option<String>,
}

/// `status` of a [`CachedPod`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    /// `phase`.
    #[serde(default)]
    pub phase: Option<String>,
    /// `podIP`.
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<String>,
    /// `message`.
    #[serde(default)]
    pub message: Option<String>,
    /// `conditions`.
    #[serde(default)]
    pub conditions: Option<Vec<PodCondition>>,
    /// `containerStatuses`: names and terminated states.
    #[serde(default)]
    pub container_statuses: Option<Vec<CachedContainerStatus>>,
    /// `initContainerStatuses`: names and terminated states.
    #[serde(default)]
    pub init_container_statuses: Option<Vec<CachedContainerStatus>>,
}

/// A container's status: its name and, once it exited, how.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedContainerStatus {
    /// `name`.
    pub name: String,
    /// `state`, of which only `terminated` is kept.
    #[serde(default)]
    pub state: Option<CachedContainerState>,
}

/// `state` of a container status.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedContainerState {
    /// `terminated`.
    #[serde(default)]
    pub terminated: Option<ContainerStateTerminated>,
}

impl kube::Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        let container = |c: k8s_openapi::api::core::v1::Container| CachedContainer {
            name: c.name,
            volume_mounts: c.volume_mounts.map(|ms| {
                ms.into_iter()
                    .map(|m| CachedMount {
                        name: m.name,
                        sub_path: m.sub_path,
                    })
                    .collect()
            }),
        };
        let statuses = |cs: Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>| {
            cs.map(|cs| {
                cs.into_iter()
                    .map(|c| CachedContainerStatus {
                        name: c.name,
                        state: c.state.map(|s| CachedContainerState {
                            terminated: s.terminated,
                        }),
                    })
                    .collect()
            })
        };
        Self {
            metadata: pod.metadata,
            spec: pod.spec.map(|s| CachedPodSpec {
                volumes: s.volumes.map(|vs| {
                    vs.into_iter()
                        .map(|v| CachedVolume {
                            name: v.name,
                            persistent_volume_claim: v.persistent_volume_claim.map(|c| {
                                CachedClaim {
                                    claim_name: c.claim_name,
                                }
                            }),
                        })
                        .collect()
                }),
                init_containers: s
                    .init_containers
                    .map(|cs| cs.into_iter().map(container).collect()),
                containers: s.containers.into_iter().map(container).collect(),
            }),
            status: pod.status.map(|s| CachedPodStatus {
                phase: s.phase,
                pod_ip: s.pod_ip,
                message: s.message,
                conditions: s.conditions,
                container_statuses: statuses(s.container_statuses),
                init_container_statuses: statuses(s.init_container_statuses),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What the API sends decodes to the fields the controller reads, the same as through a
    // full `Pod`; everything else is skipped.
    #[test]
    fn a_pod_from_the_api_decodes_to_what_the_controller_reads() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": {"a": "b"}},
            "spec": {
                "volumes": [
                    {"name": "data-base", "persistentVolumeClaim": {"claimName": "base", "readOnly": true}},
                    {"name": "dev", "hostPath": {"path": "/dev/binder"}}
                ],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [{"name": "redroid", "image": "redroid/redroid", "securityContext": {"privileged": true},
                    "volumeMounts": [{"name": "data-diff", "mountPath": "/data", "subPath": "3"}]}]
            },
            "status": {
                "phase": "Failed", "podIP": "127.0.0.9", "message": "m", "qosClass": "BestEffort",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{"name": "redroid", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]
            }
        });
        let cached: CachedPod = serde_json::from_value(json.clone()).expect("cached");
        let full: Pod = serde_json::from_value(json).expect("pod");
        assert_eq!(cached, CachedPod::from(full));
        let spec = cached.spec.as_ref().expect("spec");
        assert_eq!(
            spec.volumes.as_ref().expect("volumes")[0]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("base")
        );
        assert_eq!(
            spec.containers[0].volume_mounts.as_ref().expect("mounts")[0]
                .sub_path
                .as_deref(),
            Some("3")
        );
        let status = cached.status.as_ref().expect("status");
        assert_eq!(status.pod_ip.as_deref(), Some("127.0.0.9"));
        let exit = status.container_statuses.as_ref().expect("statuses")[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        assert_eq!(exit, Some(2));
    }
}
