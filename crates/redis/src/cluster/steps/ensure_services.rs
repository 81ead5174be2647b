//! Step 3, `ensure_services`: the client Services and the connection Secret.
//!
//! Contract:
//! - `-leader` selects the current primary by its instance label. During a handoff this step
//!   leaves the live selector as it is: the handoff moves it (after the promotion, before
//!   `currentPrimary` is published), and nothing else may move it back. `-replica` and `-any`
//!   select by role and workload labels.
//! - With `spec.connectionSecret`, the Secret is applied with the current password (read from
//!   the auth Secret); an existing Secret of that name the cluster does not own is never
//!   overwritten (Event `ConnectionSecretConflict`). The cluster's own connection Secrets of
//!   other names (a rename, or the feature turned off) are deleted.
//! - Never stops the pass.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;
use kube::ResourceExt;

use crate::cluster::apply::WriteError;
use crate::cluster::build::{secret, service};
use crate::cluster::handoff::PENDING;
use crate::cluster::{Pass, observe};
use crate::names;

/// The step.
pub struct EnsureServices;

/// Why it failed.
#[derive(Debug, thiserror::Error)]
pub enum ServicesError {
    /// Writing a Service or the connection Secret.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Reading the auth password.
    #[error("reading Secret {name}: {source}")]
    ReadPassword {
        /// The auth Secret.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError for ServicesError {
    fn category(&self) -> &'static str {
        match self {
            ServicesError::Write(e) => e.category(),
            ServicesError::ReadPassword { .. } => "read_failed",
        }
    }
}

/// The pod `-leader` should select.
pub fn leader(pass: &Pass) -> String {
    let st = &pass.model.status;
    let live = pass
        .seen
        .services
        .get(&names::leader_service(&pass.model.name))
        .and_then(|s| service::leader_of(s));
    let handoff = !st.target_primary.is_empty()
        && (st.target_primary == PENDING || st.target_primary != st.current_primary);
    match (handoff, live) {
        (true, Some(live)) => live,
        _ if !st.current_primary.is_empty() => st.current_primary.clone(),
        _ => pass.model.pod_name(0),
    }
}

async fn connection(pass: &Pass) -> Result<(), ServicesError> {
    let m = &pass.model;
    let w = pass.writer();
    let wanted = m
        .spec
        .connection_secret
        .as_ref()
        .map(|c| c.name.trim().to_owned())
        .filter(|n| !n.is_empty());
    for (name, s) in &pass.seen.secrets {
        let published = s
            .labels()
            .get(names::LABEL_CONNECTION_SECRET)
            .map(String::as_str)
            == Some("true");
        let ours = s.owner_references().iter().any(|o| o.uid == m.uid);
        if published && ours && Some(name) != wanted.as_ref() {
            w.delete::<Secret>(name, None).await?;
            w.event(
                false,
                "ConnectionSecretRemoved",
                format!("Removed connection secret {name}"),
            )
            .await;
        }
    }
    let Some(name) = wanted else {
        return Ok(());
    };
    let live = pass
        .seen
        .secrets
        .get(&name)
        .filter(|s| s.owner_references().iter().any(|o| o.uid == m.uid));
    if live.is_none() && pass.seen.secret_versions.contains_key(&name) {
        w.event(true, "ConnectionSecretConflict", format!("Secret {name} already exists and is not owned by this RedisCluster; refusing to overwrite"))
            .await;
        return Ok(());
    }
    let password = match pass.seen.secrets.get(&m.auth_secret) {
        Some(s) => secret::value(s, names::KEY_PASSWORD),
        None => observe::password(&pass.ctx.client, &m.namespace, &m.auth_secret)
            .await
            .map_err(|source| ServicesError::ReadPassword {
                name: m.auth_secret.clone(),
                source,
            })?,
    };
    // A passwordless URL is never published: wait for the auth Secret.
    let Some(password) = password else {
        return Ok(());
    };
    let desired = secret::connection(m, &name, &password);
    if w.apply(&desired, live.map(|s| &**s)).await? && live.is_none() {
        w.event(
            false,
            "ConnectionSecretPublished",
            format!("Published connection secret {name}"),
        )
        .await;
    }
    Ok(())
}

impl Step<Pass> for EnsureServices {
    fn name(&self) -> &'static str {
        "ensure_services"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            let m = &pass.model;
            let w = pass.writer();
            let live = |n: String| pass.seen.services.get(&n).map(|s| &**s);
            let leader = service::leader(m, &leader(pass));
            w.apply(&leader, live(names::leader_service(&m.name)))
                .await
                .map_err(ServicesError::from)?;
            w.apply(&service::replica(m), live(names::replica_service(&m.name)))
                .await
                .map_err(ServicesError::from)?;
            w.apply(&service::any(m), live(names::any_service(&m.name)))
                .await
                .map_err(ServicesError::from)?;
            connection(pass).await?;
            Ok(Flow::Continue)
        })
    }
}
