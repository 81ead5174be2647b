//! The operator's side of the instance API ([`crate::instance_api`]) as the backup
//! controller needs it: a port ([`BackupInstances`]), the real HTTPS client
//! ([`HttpsInstances`]) and the per-cluster credentials read from the Secrets the cluster
//! controller creates ([`Credentials::read`]).
//!
//! Contract:
//! - Every call goes to one pod IP on [`names::INSTANCE_HTTP_PORT`], never a Service, over
//!   HTTPS verified against the cluster's own CA **for the cluster's server name**
//!   ([`crate::instance_api::server_name`]) whatever IP is dialled, with the bearer token and
//!   the API version header.
//! - A call either gets the instance's answer or fails with a [`CallError`]: `Transport` when
//!   no answer came (the request may or may not have been acted on: callers re-observe),
//!   `Status` for an HTTP status the contract does not define for that call.
//! - `GET /v1/backup/<id>` answering 404 is `Ok(None)`: the instance does not know the
//!   backup (never started there, or the instance restarted and forgot it).
//!
//! This is the small client the backup controller needed before the cluster controller's
//! client ([`crate::instance_client`]) landed; both speak the same contract and are meant to
//! become one.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::instance_api::{
    self, API_VERSION, BackupRequest, BackupResult, InstanceReport, VERSION_HEADER,
};
use crate::names;

/// Timeout of one call (the backup runs in the background: no call waits for it).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A call that did not get a usable answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No connection, TLS failure, timeout: the request may or may not have been acted on.
    #[error("calling {ip}: {message}")]
    Transport {
        /// The pod IP.
        ip: String,
        /// What failed.
        message: String,
    },
    /// An HTTP status other than the contract's answers for this call.
    #[error("{ip} answered HTTP {code}: {body}")]
    Status {
        /// The pod IP.
        ip: String,
        /// The status code.
        code: u16,
        /// The body (at most 500 characters).
        body: String,
    },
}

/// The answer to `POST /v1/backup`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Started {
    /// Accepted (202), or the same backup answered again (200 once it ended).
    Accepted(BackupResult),
    /// Refused: 400 (a bad request: the destination or name) or 409 (the instance is not
    /// running redis-server), with the instance's reason.
    Refused(String),
}

/// One cluster's instances, as the backup controller uses them.
pub trait BackupInstances: Send + Sync {
    /// `GET /v1/status`.
    fn status<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<InstanceReport, CallError>>;
    /// `POST /v1/backup`.
    fn start_backup<'a>(
        &'a self,
        ip: &'a str,
        req: &'a BackupRequest,
    ) -> BoxFuture<'a, Result<Started, CallError>>;
    /// `GET /v1/backup/<id>`; `None` when the instance does not know it (404).
    fn backup<'a>(
        &'a self,
        ip: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<BackupResult>, CallError>>;
}

/// What a cluster's client needs, from the Secrets the operator created.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// The per-cluster CA certificate (PEM).
    pub ca_pem: String,
    /// The DNS name the instances' certificate carries.
    pub server_name: String,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// Why a cluster's credentials could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A Secret is missing (the cluster controller has not created it yet).
    #[error("Secret {0} does not exist yet")]
    Missing(String),
    /// A Secret lacks its key.
    #[error("Secret {secret} has no {key}")]
    NoKey {
        /// The Secret.
        secret: String,
        /// The key.
        key: String,
    },
    /// Reading failed.
    #[error("reading Secret {secret}: {source}")]
    Read {
        /// The Secret.
        secret: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl Credentials {
    /// Reads cluster `cluster`'s CA (`ca.crt` of [`instance_api::ca_secret`]) and token
    /// ([`instance_api::TOKEN_KEY`] of [`instance_api::token_secret`]).
    pub async fn read(
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
    ) -> Result<Self, CredentialsError> {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let ca_pem = key(&api, &instance_api::ca_secret(cluster), names::KEY_CA_CRT).await?;
        let token = key(
            &api,
            &instance_api::token_secret(cluster),
            instance_api::TOKEN_KEY,
        )
        .await?;
        Ok(Self {
            ca_pem,
            server_name: instance_api::server_name(cluster, namespace),
            token: token.trim().to_owned(),
        })
    }
}

async fn key(api: &Api<Secret>, secret: &str, key: &str) -> Result<String, CredentialsError> {
    let s = api
        .get_opt(secret)
        .await
        .map_err(|source| CredentialsError::Read {
            secret: secret.to_owned(),
            source,
        })?
        .ok_or_else(|| CredentialsError::Missing(secret.to_owned()))?;
    s.data
        .and_then(|d| d.get(key).cloned())
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| CredentialsError::NoKey {
            secret: secret.to_owned(),
            key: key.to_owned(),
        })
}

/// One cluster's HTTPS client.
pub struct HttpsInstances {
    creds: Credentials,
    ca: reqwest::Certificate,
    port: u16,
}

impl HttpsInstances {
    /// A client trusting `creds.ca_pem` for `creds.server_name` on the instances' API port.
    pub fn new(creds: Credentials) -> Result<Arc<Self>, String> {
        Self::with_port(creds, names::INSTANCE_HTTP_PORT as u16)
    }

    /// The same on another port (tests).
    pub fn with_port(creds: Credentials, port: u16) -> Result<Arc<Self>, String> {
        let ca = reqwest::Certificate::from_pem(creds.ca_pem.as_bytes())
            .map_err(|e| format!("the instance CA is not a PEM certificate: {e}"))?;
        Ok(Arc::new(Self { creds, ca, port }))
    }

    // A client that sends the server name and reaches `ip` (pod IPs change; the name in the
    // certificate does not). Built per call: backups make a few calls a minute.
    fn http(&self, ip: &str) -> Result<(reqwest::Client, String), CallError> {
        let transport = |message: String| CallError::Transport {
            ip: ip.to_owned(),
            message,
        };
        let addr: IpAddr = ip
            .parse()
            .map_err(|e| transport(format!("not an IP: {e}")))?;
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(self.ca.clone())
            .resolve(&self.creds.server_name, SocketAddr::new(addr, self.port))
            .timeout(CALL_TIMEOUT)
            .connect_timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| transport(e.to_string()))?;
        let base = format!("https://{}:{}", self.creds.server_name, self.port);
        Ok((client, base))
    }

    async fn send(
        &self,
        ip: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<(u16, String), CallError> {
        let resp = req
            .bearer_auth(&self.creds.token)
            .header(VERSION_HEADER, API_VERSION)
            .send()
            .await
            .map_err(|e| CallError::Transport {
                ip: ip.to_owned(),
                message: error_chain(&e),
            })?;
        let code = resp.status().as_u16();
        let body = resp.text().await.map_err(|e| CallError::Transport {
            ip: ip.to_owned(),
            message: error_chain(&e),
        })?;
        Ok((code, body))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn unexpected(ip: &str, code: u16, body: &str) -> CallError {
    CallError::Status {
        ip: ip.to_owned(),
        code,
        body: body.chars().take(500).collect(),
    }
}

fn parse<T: serde::de::DeserializeOwned>(ip: &str, code: u16, body: &str) -> Result<T, CallError> {
    serde_json::from_str(body).map_err(|e| unexpected(ip, code, &format!("{e}: {body}")))
}

impl BackupInstances for HttpsInstances {
    fn status<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<InstanceReport, CallError>> {
        Box::pin(async move {
            let (http, base) = self.http(ip)?;
            let (code, body) = self
                .send(ip, http.get(format!("{base}{}", names::PATH_STATUS)))
                .await?;
            match code {
                200 => parse(ip, code, &body),
                _ => Err(unexpected(ip, code, &body)),
            }
        })
    }

    fn start_backup<'a>(
        &'a self,
        ip: &'a str,
        req: &'a BackupRequest,
    ) -> BoxFuture<'a, Result<Started, CallError>> {
        Box::pin(async move {
            let (http, base) = self.http(ip)?;
            let (code, body) = self
                .send(
                    ip,
                    http.post(format!("{base}{}", names::PATH_BACKUP)).json(req),
                )
                .await?;
            match code {
                200 | 202 => parse(ip, code, &body).map(Started::Accepted),
                400 => Ok(Started::Refused(body)),
                409 => {
                    let reason = serde_json::from_str::<BackupResult>(&body)
                        .map(|r| r.error)
                        .unwrap_or(body);
                    Ok(Started::Refused(reason))
                }
                _ => Err(unexpected(ip, code, &body)),
            }
        })
    }

    fn backup<'a>(
        &'a self,
        ip: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<BackupResult>, CallError>> {
        Box::pin(async move {
            let (http, base) = self.http(ip)?;
            let (code, body) = self
                .send(ip, http.get(format!("{base}{}/{id}", names::PATH_BACKUP)))
                .await?;
            match code {
                200 => parse(ip, code, &body).map(Some),
                404 => Ok(None),
                _ => Err(unexpected(ip, code, &body)),
            }
        })
    }
}

/// Makes a cluster's client from its credentials (a port, so step tests can hand out
/// fakes).
pub trait Connector: Send + Sync {
    /// The client for `creds`.
    fn connect(&self, creds: Credentials) -> Result<Arc<dyn BackupInstances>, String>;
}

/// The real connector: [`HttpsInstances`] on the API port.
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpsConnector;

impl Connector for HttpsConnector {
    fn connect(&self, creds: Credentials) -> Result<Arc<dyn BackupInstances>, String> {
        Ok(HttpsInstances::new(creds)?)
    }
}
