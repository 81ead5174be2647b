//! Reads of one backup pass (no writes): the cluster, its data pods, the instance API client
//! built from the cluster's Secrets, and — while a target is to be chosen — every data pod's
//! `/v1/status`, asked at once.
//!
//! Contract: only pods labelled `redis.io/cluster=<cluster>` and
//! `redis.io/workload=data` **and** named `<cluster>-<ordinal>` are data pods; Sentinel pods
//! are never listed. A pod that does not answer is a candidate without a report (it cannot be
//! chosen), never an error of the pass.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::Ctx;
use super::target::{Candidate, Primary};
use crate::crd::{ClusterMode, RedisBackup, RedisCluster};
use crate::instance_client::{Credentials, Instances};
use crate::names;

/// A failed read.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Reading the RedisCluster failed.
    #[error("reading RedisCluster {name}: {source}")]
    Cluster {
        /// The cluster.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading the backup credentials Secret failed.
    #[error("reading Secret {name}: {source}")]
    Secret {
        /// The Secret.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Listing the data pods failed.
    #[error("listing the pods of RedisCluster {name}: {source}")]
    Pods {
        /// The cluster.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ObserveError {
    /// The metric and Event category.
    pub fn category(&self) -> &'static str {
        match self {
            ObserveError::Cluster { .. } => "read_cluster",
            ObserveError::Pods { .. } => "list_pods",
            ObserveError::Secret { .. } => "read_secret",
        }
    }
}

/// What a pass sees.
pub struct Observed {
    /// The cluster, when it exists.
    pub cluster: Option<RedisCluster>,
    /// Its data pods (empty when the backup is over or the cluster is missing).
    pub pods: Vec<Pod>,
    /// The cluster's instance API client, or why there is none (its Secrets are missing).
    pub instances: Result<Arc<dyn Instances>, String>,
    /// Whether the cluster's `backupCredentialsSecret` exists (`Err`: why not).
    pub credentials: Result<(), String>,
}

impl Observed {
    /// The cluster's primary as its status names it.
    pub fn primary(&self) -> Primary {
        let s = self.cluster.as_ref().and_then(|c| c.status.clone());
        Primary {
            current: s
                .as_ref()
                .map(|s| s.current_primary.clone())
                .unwrap_or_default(),
            target: s.map(|s| s.target_primary).unwrap_or_default(),
        }
    }

    /// The data pod `name`.
    pub fn pod(&self, name: &str) -> Option<&Pod> {
        self.pods.iter().find(|p| p.name_any() == name)
    }
}

/// Whether the cluster can be backed up at all (pure): `Err` says why not.
pub fn check_cluster(c: &RedisCluster) -> Result<(), String> {
    if c.spec.mode == ClusterMode::Cluster {
        return Err("cluster mode is reserved: its backups are not supported".into());
    }
    if c.spec
        .backup_credentials_secret
        .as_ref()
        .is_none_or(|s| s.name.trim().is_empty())
    {
        return Err(format!(
            "RedisCluster {} has no backupCredentialsSecret: its instances have no credentials \
             to upload with",
            c.name_any()
        ));
    }
    Ok(())
}

/// Reads the cluster; with `active` (the backup is pending or running) also its data pods
/// and the client.
pub async fn observe(ctx: &Ctx, b: &RedisBackup, active: bool) -> Result<Observed, ObserveError> {
    let ns = b.namespace().unwrap_or_default();
    let name = b.spec.cluster_name.clone();
    let client = ctx.shared.client.clone();
    let cluster = Api::<RedisCluster>::namespaced(client.clone(), &ns)
        .get_opt(&name)
        .await
        .map_err(|source| ObserveError::Cluster {
            name: name.clone(),
            source,
        })?;
    let mut obs = Observed {
        cluster,
        pods: Vec::new(),
        instances: Err("not needed".into()),
        credentials: Ok(()),
    };
    let Some(c) = obs.cluster.as_ref().filter(|_| active) else {
        return Ok(obs);
    };
    obs.credentials = credentials(&client, &ns, c).await?;
    let selector = format!(
        "{}={name},{}={}",
        names::LABEL_CLUSTER,
        names::LABEL_WORKLOAD,
        names::workload::DATA
    );
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| ObserveError::Pods {
            name: name.clone(),
            source,
        })?;
    obs.pods = pods
        .items
        .into_iter()
        .filter(|p| names::ordinal_of(&name, &p.name_any()).is_some())
        .collect();
    obs.instances = match Credentials::read(&client, &ns, &name).await {
        Ok(creds) => ctx.shared.connector.connect(&creds),
        Err(e) => Err(e.to_string()),
    };
    Ok(obs)
}

/// Whether the Secret `c.spec.backupCredentialsSecret` names exists (`Err` says it does not,
/// and what to do); `Ok` too when the spec names none ([`check_cluster`] fails that).
async fn credentials(
    client: &kube::Client,
    ns: &str,
    c: &RedisCluster,
) -> Result<Result<(), String>, ObserveError> {
    let Some(name) = c
        .spec
        .backup_credentials_secret
        .as_ref()
        .map(|s| s.name.trim())
        .filter(|n| !n.is_empty())
    else {
        return Ok(Ok(()));
    };
    let found = Api::<Secret>::namespaced(client.clone(), ns)
        .get_metadata_opt(name)
        .await
        .map_err(|source| ObserveError::Secret {
            name: name.to_owned(),
            source,
        })?;
    Ok(match found {
        Some(_) => Ok(()),
        None => Err(format!(
            "Secret {name} (spec.backupCredentialsSecret of RedisCluster {}) does not exist; \
             create it with the object store's credentials",
            c.name_any()
        )),
    })
}

/// The pod's IP, if it has one.
pub fn ip_of(p: &Pod) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Every data pod with its instance's report (asked at once; no answer is `None`).
pub async fn candidates(obs: &Observed) -> Vec<Candidate> {
    let instances = obs.instances.as_ref().ok();
    let asks = obs.pods.iter().map(|p| async move {
        let ip = ip_of(p);
        let report = match (instances, &ip) {
            (Some(i), Some(ip)) => i.status(ip).await.ok(),
            _ => None,
        };
        Candidate {
            pod: p.name_any(),
            ip,
            ready: ready(p),
            terminating: p.metadata.deletion_timestamp.is_some(),
            report,
        }
    });
    futures::future::join_all(asks).await
}
