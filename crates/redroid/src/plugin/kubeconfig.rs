//! Where the plugin connects ([`kit::plugin::kubeconfig`], resolved like kubectl) and the
//! lookups its commands share, with errors naming the object.

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt as _};
use serde::de::DeserializeOwned;

pub use kit::plugin::kubeconfig::{GlobalFlags, Session};

use super::error::PluginError;

/// Fetches a namespaced object, with a not-found error naming it (`kind` as users type it).
pub async fn get<K>(s: &Session, kind: &'static str, name: &str) -> Result<K, PluginError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(s.client.clone(), &s.namespace);
    api.get(name)
        .await
        .map_err(|e| PluginError::from_kube(kind, name, &s.namespace, "get", e))
}

/// Lists objects in the session's namespace (or all namespaces), sorted by namespace and
/// name; `plural` names them in errors.
pub async fn list_sorted<K>(s: &Session, plural: &str, all: bool) -> Result<Vec<K>, PluginError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = if all {
        Api::all(s.client.clone())
    } else {
        Api::namespaced(s.client.clone(), &s.namespace)
    };
    let mut items = api
        .list(&ListParams::default())
        .await
        .map_err(|e| PluginError::Api {
            action: format!("list {plural}"),
            source: e,
        })?
        .items;
    items.sort_by_key(|a| (a.namespace(), a.name_any()));
    Ok(items)
}
