//! What a Sentinel pod's instance manager reads before it starts its Sentinel: the
//! RedisCluster, the projected password, how to reach Sentinels (plain or TLS) and the master
//! to seed `sentinel.conf` with.
//!
//! Contract of [`seed`]: what the other Sentinels already name (one of them naming a data pod
//! of this cluster is enough: the new Sentinel learns the rest from their hello messages),
//! else `status.currentPrimary`'s pod IP; neither known is an error in words (the manager
//! waits and says it on `/readyz`).
//!
//! Contract of [`accepted_by_every_instance`]: a rotated password reaches Sentinel
//! (`auth-pass`) only once every data pod accepts it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use super::Settings;
use super::dial::{Ca, Dial};
use super::sentinel::{ASK_TIMEOUT, port};
use crate::crd::RedisCluster;
use crate::names;
use crate::sentinel::client;
use crate::sentinel::quorum::{self, Answer, Reading};

const API_TIMEOUT: Duration = Duration::from_secs(10);

/// How this pod reaches Sentinels for `cluster`: TLS trusting the projected CA (read at
/// every handshake) when the cluster has TLS.
pub fn dial_for(s: &Settings, cluster: &RedisCluster) -> Dial {
    if super::config::tls_enabled(&cluster.spec) {
        Dial::Tls(Ca::File(s.paths.tls_dir.join(names::KEY_CA_CRT)))
    } else {
        Dial::Tcp
    }
}

/// The RedisCluster this pod belongs to, or why it cannot be read.
pub async fn read_cluster(client: &kube::Client, s: &Settings) -> Result<RedisCluster, String> {
    let api: Api<RedisCluster> = Api::namespaced(client.clone(), &s.namespace);
    match tokio::time::timeout(API_TIMEOUT, api.get(&s.cluster)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("reading RedisCluster {}: {e}", s.cluster)),
        Err(_) => Err(format!("reading RedisCluster {}: no answer", s.cluster)),
    }
}

/// The cluster's password as projected, or why it is not there yet.
pub fn read_password(s: &Settings, cluster: &RedisCluster) -> Result<String, String> {
    let secret = super::secrets::auth_secret(&s.cluster, &cluster.spec);
    let path = s.projected_dir.join(&secret).join(names::KEY_PASSWORD);
    match std::fs::read_to_string(&path) {
        Ok(p) if !p.trim().is_empty() => Ok(p.trim_end_matches(['\n', '\r']).to_owned()),
        _ => Err(format!(
            "the password ({}) is not projected yet",
            path.display()
        )),
    }
}

/// The master to seed a new Sentinel with: what the other Sentinels say, else
/// `currentPrimary`'s pod IP.
pub async fn seed(
    client: &kube::Client,
    s: &Settings,
    dial: &Dial,
    cluster: &RedisCluster,
) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &s.namespace);
    let lp = ListParams::default().labels(&format!("{}={}", names::LABEL_CLUSTER, s.cluster));
    let list = tokio::time::timeout(API_TIMEOUT, pods.list(&lp))
        .await
        .map_err(|_| "listing the cluster's pods: no answer".to_owned())?
        .map_err(|e| format!("listing the cluster's pods: {e}"))?;
    let mut data = std::collections::BTreeMap::new();
    let mut others = Vec::new();
    for p in list.items {
        let sentinel = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_WORKLOAD))
            .is_some_and(|w| w == names::workload::SENTINEL);
        let (Some(name), Some(ip)) = (
            p.metadata.name.clone(),
            p.status
                .and_then(|st| st.pod_ip)
                .filter(|ip| !ip.is_empty()),
        ) else {
            continue;
        };
        if sentinel && name != s.pod {
            others.push(ip);
        } else if !sentinel && names::ordinal_of(&s.cluster, &name).is_some() {
            data.insert(name, ip);
        }
    }
    let answers: Vec<Answer> =
        client::ask_all(dial, &others, port(), &s.cluster, ASK_TIMEOUT).await;
    // The other Sentinels hold the current truth; one of them naming a data pod is enough
    // to seed (this Sentinel learns the rest from their hello messages).
    if let Reading::Agreed { ip, .. } =
        quorum::read(&answers, |ip| data.values().any(|d| d == ip), 1)
    {
        return Ok(ip);
    }
    let current = cluster
        .status
        .as_ref()
        .map(|st| st.current_primary.clone())
        .unwrap_or_default();
    if current.is_empty() {
        return Err("status.currentPrimary is empty and no other Sentinel names a master".into());
    }
    data.get(&current).cloned().ok_or_else(|| {
        format!("the primary's pod {current} has no IP yet and no other Sentinel names a master")
    })
}

/// Whether every data pod of the cluster accepts `password` (`AUTH` on a fresh connection),
/// or which one does not. A rotated password is given to Sentinel only then, so Sentinel's
/// next connection to an instance is never refused.
pub async fn accepted_by_every_instance(
    client: &kube::Client,
    s: &Settings,
    dial: &Dial,
    password: &str,
) -> Result<(), String> {
    let ips = tokio::time::timeout(
        API_TIMEOUT,
        super::peers::list(client, &s.namespace, &s.cluster, &s.pod),
    )
    .await
    .map_err(|_| "listing the data pods: no answer".to_owned())?
    .map_err(|e| format!("listing the data pods: {e}"))?;
    if ips.is_empty() {
        return Err("no data pod has an IP".into());
    }
    for ip in ips {
        let mut c = dial
            .conn(&ip, names::REDIS_PORT as u16, ASK_TIMEOUT)
            .await
            .map_err(|e| format!("{ip}: {e}"))?;
        c.command(&["AUTH", password])
            .await
            .map_err(|e| format!("{ip} does not accept it yet: {e}"))?;
    }
    Ok(())
}
