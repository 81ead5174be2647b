//! Adding and removing one finalizer on an object the controller owns.
//!
//! Contract: both are no-ops (no request) when there is nothing to change, and otherwise one
//! JSON merge patch of `metadata.finalizers` carrying the object's `resourceVersion`, so a
//! concurrent change to the object makes the write fail with 409 and the pass retry, instead
//! of overwriting a finalizer list someone else just edited. Removing from an object that is
//! already gone (404) counts as done.

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Whether `obj` carries `finalizer`.
pub fn has<K: Resource>(obj: &K, finalizer: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer)
}

/// Adds `finalizer` to `obj` unless present; returns whether it wrote.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    add_returning(api, obj, finalizer)
        .await
        .map(|o| o.is_some())
}

/// Like [`add`], returning the object as the write left it (`None` when nothing was written).
pub async fn add_returning<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if has(obj, finalizer) {
        return Ok(None);
    }
    let mut list = obj.finalizers().to_vec();
    list.push(finalizer.to_owned());
    write(api, obj, list).await.map(Some)
}

/// Removes `finalizer` from `obj` if present; returns whether it wrote.
pub async fn remove<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if !has(obj, finalizer) {
        return Ok(false);
    }
    let list: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    match write(api, obj, list).await {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        other => other.map(|_| true),
    }
}

async fn write<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let body = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": obj.resource_version(),
    }});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&body),
    )
    .await
}
