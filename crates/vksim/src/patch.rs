//! The only writer: JSON merge patches of a pod's `metadata.annotations` (a `null` value
//! removes the key). A pod that is gone (404) or conflicting (409) ends the transition
//! quietly; the watch brings whatever comes next.

use std::sync::Arc;

use cocoon::names;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};

use crate::error::SimError;
use crate::stats::{Counter, Counters};

/// Field manager of the simulator's patches.
pub const FIELD_MANAGER: &str = "vk-cocoon-sim";

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

    /// Applies `changes` to `pod`; the patched pod, or `None` when it is gone (404/409).
    pub(crate) async fn annotate(
        &self,
        pod: &Pod,
        changes: Annotations,
    ) -> Result<Option<Pod>, SimError> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let body = json!({"metadata": {"annotations": changes.0}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.counters.bump(Counter::Patched);
        match api.patch(&name, &params, &Patch::Merge(&body)).await {
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
