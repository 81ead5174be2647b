//! The ITS's hub duties for the local topology (what OCM's cluster manager and KubeStellar's
//! set-up do upstream): the `customization-properties` namespace, and a mailbox namespace
//! named after every ManagedCluster.
//!
//! Contract: [`run`] creates the missing namespaces (never deletes one: a mailbox outlives a
//! ManagedCluster briefly, as upstream) and retries failures with back-off.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::names;
use crate::ocm::ManagedCluster;

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
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs the hub duties on the ITS until dropped.
pub async fn run(its: Client) {
    let mut delay = Duration::from_millis(200);
    while let Err(e) = ensure_namespace(&its, names::CUSTOMIZATION_PROPERTIES_NAMESPACE).await {
        tracing::warn!(error = %e, "creating the customization-properties namespace; retrying");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(10));
    }
    let api: Api<ManagedCluster> = Api::all(its.clone());
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(mc) => {
                let mut delay = Duration::from_millis(200);
                while let Err(e) = ensure_namespace(&its, &mc.name_any()).await {
                    tracing::warn!(cluster = %mc.name_any(), error = %e, "creating a mailbox namespace; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
            Err(e) => tracing::warn!(error = %e, "ManagedCluster watch failed; retrying"),
        }
    }
}
