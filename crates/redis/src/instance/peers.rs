//! The other instances of the cluster, as this instance manager sees them: their pod IPs
//! (from the API) and their status (from their instance managers, over the same
//! authenticated HTTPS API the operator uses).
//!
//! Contract:
//! - [`list`] returns the IPs of the cluster's other data pods (labels `redis.io/cluster`,
//!   `redis.io/workload=data`) that have one, sorted; [`sentinels`] those of its Sentinel
//!   pods (`redis.io/workload=sentinel`), which answer `/v1/status` with the generation of
//!   the password their Sentinel uses.
//! - [`status`] asks one peer for its [`InstanceReport`] within `timeout`, verifying its
//!   certificate against the cluster CA under [`instance_api::server_name`] whatever IP it
//!   dials, and sending the token and API version. Used by the primary isolation check and by
//!   password rotation; never to change a peer.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::instance_api::{self, InstanceReport};
use crate::names;

/// IPs of the other data pods of `cluster`.
pub async fn list(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    me: &str,
) -> Result<Vec<String>, kube::Error> {
    ips(client, namespace, cluster, names::workload::DATA, me).await
}

/// IPs of the Sentinel pods of `cluster` (sentinel mode).
pub async fn sentinels(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<String>, kube::Error> {
    ips(client, namespace, cluster, names::workload::SENTINEL, "").await
}

async fn ips(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    workload: &str,
    me: &str,
) -> Result<Vec<String>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = format!(
        "{}={cluster},{}={workload}",
        names::LABEL_CLUSTER,
        names::LABEL_WORKLOAD,
    );
    let list = pods.list(&ListParams::default().labels(&selector)).await?;
    let mut ips: Vec<String> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.name.as_deref() != Some(me))
        .filter_map(|p| p.status?.pod_ip)
        .filter(|ip| !ip.is_empty())
        .collect();
    ips.sort();
    ips.dedup();
    Ok(ips)
}

/// How to reach peers' APIs.
#[derive(Clone, Debug)]
pub struct Dialer {
    /// The name in the instances' certificate.
    pub server_name: String,
    /// The API port.
    pub port: u16,
    /// The API TLS directory (`ca.crt`).
    pub tls_dir: std::path::PathBuf,
    /// The token directory.
    pub token_dir: std::path::PathBuf,
}

fn read(dir: &Path, key: &str) -> Result<Vec<u8>, String> {
    std::fs::read(dir.join(key)).map_err(|e| format!("{}: {e}", dir.join(key).display()))
}

impl Dialer {
    /// `GET /v1/status` of the peer at `ip`.
    pub async fn status(&self, ip: &str, timeout: Duration) -> Result<InstanceReport, String> {
        let ip: std::net::IpAddr = ip.parse().map_err(|e| format!("peer IP {ip:?}: {e}"))?;
        let ca = reqwest::Certificate::from_pem(&read(&self.tls_dir, names::KEY_CA_CRT)?)
            .map_err(|e| e.to_string())?;
        let token = String::from_utf8_lossy(&read(&self.token_dir, instance_api::TOKEN_KEY)?)
            .trim()
            .to_owned();
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .resolve(&self.server_name, SocketAddr::new(ip, self.port))
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| e.to_string())?;
        let url = format!(
            "https://{}:{}{}",
            self.server_name,
            self.port,
            names::PATH_STATUS
        );
        let resp = client
            .get(url)
            .bearer_auth(token)
            .header(instance_api::VERSION_HEADER, instance_api::API_VERSION)
            .send()
            .await
            .map_err(|e| format!("{ip}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("{ip}: HTTP {}", resp.status()));
        }
        resp.json().await.map_err(|e| format!("{ip}: {e}"))
    }
}
