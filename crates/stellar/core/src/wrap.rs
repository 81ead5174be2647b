//! How the transport packs the objects of one Binding for one destination into ManifestWorks
//! (upstream's `--max-num-wrapped` / `--max-size-wrapped`, `generic_transport_controller.go`
//! `wrap`).
//!
//! Contract:
//! - Objects go in Binding order (cluster-scoped, then namespaced) into consecutive
//!   ManifestWorks ("shards"). The size of an object is the length of its JSON (after every
//!   transform and template expansion). A shard is closed before adding an object when the
//!   shard is not empty and either `size + shard size >= max_size` or the shard already holds
//!   `max_num` objects (upstream's rule; upstream could also emit an empty shard when one
//!   object alone reached `max_size`, which OCM rejects; here a shard is never empty).
//! - An object larger than `max_size` is not wrapped: it is returned as [`Wrapped::too_big`]
//!   (upstream failed the whole Binding and retried forever without telling anyone; the
//!   transport reports it in the Binding's `status.errors` and delivers the rest).
//! - Names: with `max_num == 1` (upstream's chart default) `<Binding UID>-<WDS>-<object UID>`,
//!   stable while the object lives; otherwise `<Binding name>-<WDS>-<shard index>` from 0.
//! - Each shard's spec lists its manifests in order, and a `CreateOnly` manifest config for
//!   each createOnly object, in the same order.

use serde_json::{Value, json};

/// One object ready to travel to one destination.
#[derive(Clone, Debug, PartialEq)]
pub struct Wrapee {
    /// The object (transformed, expanded for the destination).
    pub obj: Value,
    /// Its API group (`""` = core).
    pub group: String,
    /// Its resource (lowercase plural).
    pub resource: String,
    /// Its UID in the WDS.
    pub uid: String,
    /// createOnly modulation.
    pub create_only: bool,
}

/// The transport's wrapping limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most objects per ManifestWork (`--max-num-wrapped`; at least 1).
    pub max_num: usize,
    /// Most bytes of object JSON per ManifestWork (`--max-size-wrapped`).
    pub max_size: usize,
}

impl Default for Limits {
    /// Upstream's Helm chart: one object per ManifestWork, 512000 bytes.
    fn default() -> Self {
        Self {
            max_num: 1,
            max_size: 512_000,
        }
    }
}

/// One ManifestWork to be.
#[derive(Clone, Debug, PartialEq)]
pub struct Shard {
    /// Its name.
    pub name: String,
    /// Its spec.
    pub spec: Value,
    /// UIDs of the objects it carries, in order.
    pub uids: Vec<String>,
}

/// The result of [`wrap`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Wrapped {
    /// The ManifestWorks, in order.
    pub shards: Vec<Shard>,
    /// Objects not wrapped because they alone exceed `max_size`: (index in the input, size).
    pub too_big: Vec<(usize, usize)>,
}

/// Packs `objects` (in Binding order) into shards; see the module contract.
pub fn wrap(
    objects: &[Wrapee],
    binding_name: &str,
    binding_uid: &str,
    wds: &str,
    limits: Limits,
) -> Wrapped {
    let max_num = limits.max_num.max(1);
    let mut out = Wrapped::default();
    let mut batch: Vec<&Wrapee> = Vec::new();
    let mut batch_size = 0usize;
    for (i, w) in objects.iter().enumerate() {
        let size = serde_json::to_vec(&w.obj).map_or(0, |b| b.len());
        if size > limits.max_size {
            out.too_big.push((i, size));
            continue;
        }
        if !batch.is_empty() && (size + batch_size >= limits.max_size || batch.len() + 1 > max_num)
        {
            let n = out.shards.len();
            out.shards
                .push(shard(&batch, binding_name, binding_uid, wds, max_num, n));
            batch.clear();
            batch_size = 0;
        }
        batch.push(w);
        batch_size += size;
    }
    if !batch.is_empty() {
        let n = out.shards.len();
        out.shards
            .push(shard(&batch, binding_name, binding_uid, wds, max_num, n));
    }
    out
}

fn shard(
    batch: &[&Wrapee],
    binding_name: &str,
    binding_uid: &str,
    wds: &str,
    max_num: usize,
    index: usize,
) -> Shard {
    let name = if max_num == 1 {
        crate::transport::manifest_work_name(binding_uid, wds, &batch[0].uid)
    } else {
        format!("{binding_name}-{wds}-{index}")
    };
    let manifests: Vec<&Value> = batch.iter().map(|w| &w.obj).collect();
    let configs: Vec<Value> = batch
        .iter()
        .filter(|w| w.create_only)
        .map(|w| {
            json!({
                "resourceIdentifier": {
                    "group": w.group,
                    "resource": w.resource,
                    "namespace": w.obj["metadata"]["namespace"].as_str().unwrap_or_default(),
                    "name": w.obj["metadata"]["name"].as_str().unwrap_or_default(),
                },
                "updateStrategy": {"type": "CreateOnly"},
            })
        })
        .collect();
    let mut spec = json!({"workload": {"manifests": manifests}});
    if !configs.is_empty() {
        spec["manifestConfigs"] = Value::Array(configs);
    }
    Shard {
        name,
        spec,
        uids: batch.iter().map(|w| w.uid.clone()).collect(),
    }
}

#[cfg(test)]
#[path = "wrap_tests.rs"]
mod tests;
