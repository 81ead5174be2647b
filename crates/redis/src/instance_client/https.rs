//! The real instance client: HTTPS to `https://<pod IP>:8080`, verifying the instance's
//! certificate against the cluster's own CA **for the cluster's server name** whatever IP is
//! dialled (pod IPs change; the name does not), with the bearer token and the API version
//! header on every request.
//!
//! Contract: [`HttpsConnector`] keeps one connection pool per (CA, server name), so a poll
//! every few seconds reuses its TLS connections; a rotated CA gets a new pool. Calls time out
//! after [`STATUS_TIMEOUT`] (status), [`BACKUP_TIMEOUT`] (starting or following a backup,
//! which runs in the background) or [`COMMAND_TIMEOUT`] plus the switchover's own pause.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{self, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::{Answer, CallError, Connector, Credentials, Instances, Started};
use crate::instance_api::{
    API_VERSION, BackupRequest, BackupResult, CommandResult, DemoteRequest, InstanceReport,
    PromoteRequest, SwitchoverRequest, VERSION_HEADER,
};
use crate::names;

/// Timeout of a status poll.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(3);
/// Timeout of a command (a switchover adds its own pause to it).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);
/// Timeout of starting or following a backup (it runs in the background: no call waits for
/// it).
pub const BACKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Verifies the peer against the cluster CA for a fixed name.
#[derive(Debug)]
struct FixedName {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for FixedName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _dialled: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

fn tls_config(ca_pem: &str, server_name: &str) -> Result<rustls::ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("reading the instance CA: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("adding the instance CA: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("building the certificate verifier: {e}"))?;
    let name = ServerName::try_from(server_name.to_owned())
        .map_err(|e| format!("server name {server_name:?}: {e}"))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(FixedName { inner, name }))
        .with_no_client_auth();
    Ok(config)
}

/// One cluster's HTTPS client.
pub struct HttpsInstances {
    http: reqwest::Client,
    token: String,
}

impl HttpsInstances {
    /// A client trusting `creds.ca_pem` for `creds.server_name`.
    pub fn new(creds: &Credentials) -> Result<Self, String> {
        Ok(Self {
            http: pool(creds)?,
            token: creds.token.clone(),
        })
    }

    fn url(ip: &str, path: &str) -> String {
        let host = match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
            _ => ip.to_owned(),
        };
        format!("https://{host}:{}{path}", names::INSTANCE_HTTP_PORT)
    }

    /// Sends `req` with the token and the version header; the status code and the body.
    async fn send(
        &self,
        ip: &str,
        req: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<(u16, String), CallError> {
        let resp = req
            .bearer_auth(&self.token)
            .header(VERSION_HEADER, API_VERSION)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| transport(ip, &e))?;
        let code = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| transport(ip, &e))?;
        Ok((code, text))
    }

    async fn command<B: serde::Serialize + Sync>(
        &self,
        ip: &str,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        let req = self.http.post(Self::url(ip, path)).json(body);
        let (code, text) = self.send(ip, req, timeout).await?;
        serde_json::from_str::<CommandResult>(&text)
            .ok()
            .and_then(|r| Answer::of(code, r))
            .ok_or_else(|| CallError::status(ip, code, &text))
    }
}

fn parse<T: serde::de::DeserializeOwned>(ip: &str, code: u16, body: &str) -> Result<T, CallError> {
    serde_json::from_str(body).map_err(|e| CallError::status(ip, code, &format!("{e}: {body}")))
}

fn transport(ip: &str, e: &reqwest::Error) -> CallError {
    // The source chain carries the useful part (refused, TLS, timeout).
    let mut message = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        message = format!("{message}: {s}");
        src = s.source();
    }
    CallError::Transport {
        ip: ip.to_owned(),
        message,
    }
}

fn pool(creds: &Credentials) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .use_preconfigured_tls(tls_config(&creds.ca_pem, &creds.server_name)?)
        .connect_timeout(Duration::from_secs(2))
        .pool_idle_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| format!("building the instance client: {e}"))
}

impl Instances for HttpsInstances {
    fn status<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<InstanceReport, CallError>> {
        Box::pin(async move {
            let req = self.http.get(Self::url(ip, names::PATH_STATUS));
            let (code, text) = self.send(ip, req, STATUS_TIMEOUT).await?;
            match code {
                200 => parse(ip, code, &text),
                _ => Err(CallError::status(ip, code, &text)),
            }
        })
    }

    fn promote<'a>(
        &'a self,
        ip: &'a str,
        req: &'a PromoteRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        Box::pin(self.command(ip, names::PATH_PROMOTE, req, COMMAND_TIMEOUT))
    }

    fn demote<'a>(
        &'a self,
        ip: &'a str,
        req: &'a DemoteRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        Box::pin(self.command(ip, names::PATH_DEMOTE, req, COMMAND_TIMEOUT))
    }

    fn switchover<'a>(
        &'a self,
        ip: &'a str,
        req: &'a SwitchoverRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        let timeout = COMMAND_TIMEOUT + Duration::from_millis(req.timeout_ms);
        Box::pin(self.command(ip, names::PATH_SWITCHOVER, req, timeout))
    }

    fn start_backup<'a>(
        &'a self,
        ip: &'a str,
        req: &'a BackupRequest,
    ) -> BoxFuture<'a, Result<Started, CallError>> {
        Box::pin(async move {
            let post = self.http.post(Self::url(ip, names::PATH_BACKUP)).json(req);
            let (code, text) = self.send(ip, post, BACKUP_TIMEOUT).await?;
            match code {
                200 | 202 => parse(ip, code, &text).map(Started::Accepted),
                400 => Ok(Started::Refused(text)),
                409 => {
                    let reason = serde_json::from_str::<BackupResult>(&text)
                        .map(|r| r.error)
                        .unwrap_or(text);
                    Ok(Started::Refused(reason))
                }
                _ => Err(CallError::status(ip, code, &text)),
            }
        })
    }

    fn backup<'a>(
        &'a self,
        ip: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<BackupResult>, CallError>> {
        Box::pin(async move {
            let path = format!("{}/{id}", names::PATH_BACKUP);
            let req = self.http.get(Self::url(ip, &path));
            let (code, text) = self.send(ip, req, BACKUP_TIMEOUT).await?;
            match code {
                200 => parse(ip, code, &text).map(Some),
                404 => Ok(None),
                _ => Err(CallError::status(ip, code, &text)),
            }
        })
    }

    fn delete_backup<'a>(
        &'a self,
        ip: &'a str,
        req: &'a BackupRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        Box::pin(self.delete(ip, req))
    }
}

impl HttpsInstances {
    async fn delete(&self, ip: &str, req: &BackupRequest) -> Result<Answer, CallError> {
        let path = format!("{}/{}", names::PATH_BACKUP, req.backup_name);
        let del = self.http.delete(Self::url(ip, &path)).json(req);
        let (code, text) = self.send(ip, del, COMMAND_TIMEOUT).await?;
        serde_json::from_str::<CommandResult>(&text)
            .ok()
            .and_then(|r| Answer::of(code, r))
            .ok_or_else(|| CallError::status(ip, code, &text))
    }
}

/// Keeps one pool per (CA, server name).
#[derive(Default)]
pub struct HttpsConnector {
    pools: Mutex<HashMap<(String, String), reqwest::Client>>,
}

impl Connector for HttpsConnector {
    fn connect(&self, creds: &Credentials) -> Result<Arc<dyn Instances>, String> {
        let key = (creds.ca_pem.clone(), creds.server_name.clone());
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        // Bounded by the clusters the operator serves (one entry per cluster CA).
        if pools.len() > 4096 {
            pools.clear();
        }
        let http = match pools.get(&key) {
            Some(c) => c.clone(),
            None => {
                let c = pool(creds)?;
                pools.insert(key, c.clone());
                c
            }
        };
        Ok(Arc::new(HttpsInstances {
            http,
            token: creds.token.clone(),
        }))
    }
}
