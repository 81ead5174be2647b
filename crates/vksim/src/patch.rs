//! The only writer: JSON merge patches of a pod's `metadata.annotations` (a `null` value
//! removes the key) and of its finalizers (adding and removing [`HOLD_FINALIZER`], carrying
//! the pod's resourceVersion so no one else's finalizer edit is overwritten). A pod that is
//! gone (404) or conflicting (409) ends the transition quietly; the watch brings whatever
//! comes next. Releasing a pod re-reads it on a conflict: a deleted pod must not stay held.

use std::sync::Arc;

use cocoon::names;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};

use crate::error::SimError;
use crate::stats::{Counter, Counters};

/// Field manager of the simulator's patches.
pub const FIELD_MANAGER: &str = "vksim";

/// The finalizer a simulator holds its pods with until it has torn their VM down.
pub const HOLD_FINALIZER: &str = "vksim.flotilla.dev/vm-teardown";

/// Attempts at releasing a pod whose finalizers keep changing under us.
const RELEASE_ATTEMPTS: usize = 5;

/// Annotation changes, built up before one patch.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Annotations(Map<String, Value>);

impl Annotations {
    /// The lifecycle `state` stamped with `generation`; the message is set or removed.
    pub(crate) fn lifecycle(state: &str, generation: i64, message: Option<&str>) -> Self {
        let mut m = Map::new();
        m.insert(names::ANN_LIFECYCLE_STATE.into(), json!(state));
        m.insert(
            names::ANN_LIFECYCLE_GENERATION.into(),
            json!(generation.to_string()),
        );
        m.insert(names::ANN_LIFECYCLE_MESSAGE.into(), json!(message));
        Annotations(m)
    }

    /// Also writes (`Some`) or removes (`None`) the VM id and IP.
    pub(crate) fn vm(mut self, id_ip: Option<(&str, &str)>) -> Self {
        let (id, ip) = match id_ip {
            Some((id, ip)) => (json!(id), json!(ip)),
            None => (Value::Null, Value::Null),
        };
        self.0.insert(names::ANN_VM_ID.into(), id);
        self.0.insert(names::ANN_VM_IP.into(), ip);
        self
    }
}

/// Patches pod annotations.
#[derive(Clone)]
pub(crate) struct Writer {
    client: kube::Client,
    counters: Arc<Counters>,
}

impl Writer {
    pub(crate) fn new(client: kube::Client, counters: Arc<Counters>) -> Self {
        Writer { client, counters }
    }

    fn api(&self, pod: &Pod) -> (Api<Pod>, String, String) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api = Api::namespaced(self.client.clone(), &namespace);
        (api, namespace, name)
    }

    /// Adds [`HOLD_FINALIZER`] to `pod` (as it was seen: a newer pod is a conflict); the
    /// patched pod, or `None` when it is gone or changed meanwhile (404/409).
    pub(crate) async fn hold(&self, pod: &Pod) -> Result<Option<Pod>, SimError> {
        let mut finalizers = pod.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(HOLD_FINALIZER.to_owned());
        let (api, namespace, name) = self.api(pod);
        let body = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": pod.metadata.resource_version,
        }});
        self.counters.bump(Counter::Patched);
        match api.patch(&name, &params(), &Patch::Merge(&body)).await {
            Ok(p) => Ok(Some(p)),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(None),
            Err(source) => Err(SimError::Patch {
                namespace,
                name,
                source,
            }),
        }
    }

    /// Removes [`HOLD_FINALIZER`] from the pod `pod` names (the same uid), reading it afresh
    /// after a conflict; done when the pod is gone or no longer held.
    pub(crate) async fn release(&self, pod: &Pod) -> Result<(), SimError> {
        let (api, namespace, name) = self.api(pod);
        let error = |source| SimError::Patch {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        };
        let mut current = pod.clone();
        for attempt in 1..=RELEASE_ATTEMPTS {
            if !held(&current) {
                return Ok(());
            }
            let finalizers: Vec<&String> = (current.metadata.finalizers.iter().flatten())
                .filter(|f| *f != HOLD_FINALIZER)
                .collect();
            let body = json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": current.metadata.resource_version,
            }});
            self.counters.bump(Counter::Patched);
            match api.patch(&name, &params(), &Patch::Merge(&body)).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < RELEASE_ATTEMPTS => {}
                Err(source) => return Err(error(source)),
            }
            match api.get_opt(&name).await.map_err(error)? {
                Some(fresh) if fresh.metadata.uid == pod.metadata.uid => current = fresh,
                _ => return Ok(()),
            }
        }
        Ok(())
    }

    /// Applies `changes` to `pod`; the patched pod, or `None` when it is gone (404/409).
    pub(crate) async fn annotate(
        &self,
        pod: &Pod,
        changes: Annotations,
    ) -> Result<Option<Pod>, SimError> {
        let (api, namespace, name) = self.api(pod);
        let body = json!({"metadata": {"annotations": changes.0}});
        self.counters.bump(Counter::Patched);
        match api.patch(&name, &params(), &Patch::Merge(&body)).await {
            Ok(p) => Ok(Some(p)),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(None),
            Err(source) => Err(SimError::Patch {
                namespace,
                name,
                source,
            }),
        }
    }
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// Whether `pod` carries [`HOLD_FINALIZER`].
pub(crate) fn held(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == HOLD_FINALIZER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_patches_carry_the_generation_and_null_removals() {
        let a = Annotations::lifecycle("hibernated", 4, None).vm(None);
        let v = Value::Object(a.0);
        assert_eq!(v[names::ANN_LIFECYCLE_STATE], "hibernated");
        assert_eq!(v[names::ANN_LIFECYCLE_GENERATION], "4");
        assert!(v[names::ANN_LIFECYCLE_MESSAGE].is_null());
        assert!(v[names::ANN_VM_ID].is_null());
        let b = Annotations::lifecycle("failed", 1, Some("boom")).vm(Some(("vm-1", "127.1.0.2")));
        let v = Value::Object(b.0);
        assert_eq!(v[names::ANN_LIFECYCLE_MESSAGE], "boom");
        assert_eq!(v[names::ANN_VM_IP], "127.1.0.2");
    }
}
