//! The ITS's hub duties for the local topology (what OCM's cluster manager and KubeStellar's
//! set-up do upstream): the `customization-properties` namespace, and a mailbox namespace
//! named after every ManagedCluster.
//!
//! Contract: [`run`] creates the missing namespaces (never deletes one: a mailbox outlives a
//! ManagedCluster briefly, as upstream) and retries failures with back-off.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::names;
use crate::ocm::ManagedCluster;
use crate::retry::until_ok;

/// Ensures `name` exists as a namespace of `client`.
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<(), kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.to_owned());
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {
            tracing::info!(namespace = name, "created namespace");
            Ok(())
        }
        Err(e) if kit::errors::already_exists(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs the hub duties on the ITS until dropped.
pub async fn run(its: Client) {
    until_ok("creating the customization-properties namespace", || {
        ensure_namespace(&its, names::CUSTOMIZATION_PROPERTIES_NAMESPACE)
    })
    .await;
    let api: Api<ManagedCluster> = Api::all(its.clone());
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(mc) => {
                let name = mc.name_any();
                let what = format!("creating the mailbox namespace of cluster {name}");
                until_ok(&what, || ensure_namespace(&its, &name)).await;
            }
            Err(e) => tracing::warn!(error = %e, "ManagedCluster watch failed; retrying"),
        }
    }
}
