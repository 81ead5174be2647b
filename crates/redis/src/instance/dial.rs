//! How a RESP connection over the network is made: plain TCP, or TLS trusting the cluster's
//! CA (`caSecret`'s `ca.crt`), for the connections to the Sentinels of a cluster with TLS.
//!
//! Contract:
//! - [`Dial::Tcp`] is [`Conn::tcp`]. [`Dial::Tls`] connects over TCP, then TLS (rustls, ring):
//!   the server's chain must lead to the CA, and its validity dates must hold; the name in
//!   the certificate is **not** checked against the dialled IP, as Redis itself does for its
//!   replication and Sentinel links (a user certificate names Services or pods, never every
//!   pod IP). No client certificate is sent (the servers run `tls-auth-clients optional`).
//! - [`Ca::File`] is read at every handshake, so a rotated CA projected into the pod is used by
//!   the next connection; [`Ca::Pem`] is the operator's copy read from the Secret.
//! - The TLS choice is a value passed by the caller, never global state.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    self, CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::resp::{Conn, RespError};

/// Where the CA of a TLS connection comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ca {
    /// PEM in memory (the operator, read from `caSecret`).
    Pem(String),
    /// A PEM file read at every handshake (a pod's projected `/tls/ca.crt`).
    File(PathBuf),
}

/// How to connect (see the module contract).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Dial {
    /// Plain TCP.
    #[default]
    Tcp,
    /// TLS trusting this CA.
    Tls(Ca),
}

impl Dial {
    /// A connection to `ip:port` within `timeout` (connecting and the handshake together).
    pub async fn conn(&self, ip: &str, port: u16, timeout: Duration) -> Result<Conn, RespError> {
        let ca = match self {
            Dial::Tcp => return Conn::tcp(&addr(ip, port), timeout).await,
            Dial::Tls(ca) => ca,
        };
        let ip: IpAddr = ip
            .parse()
            .map_err(|e| RespError::Protocol(format!("address {ip:?}: {e}")))?;
        let config = Arc::new(client_config(&ca_pem(ca)?)?);
        let handshake = async {
            let tcp = tokio::net::TcpStream::connect((ip, port)).await?;
            tcp.set_nodelay(true)?;
            tokio_rustls::TlsConnector::from(config)
                .connect(ServerName::IpAddress(ip.into()), tcp)
                .await
        };
        let tls = tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| RespError::Timeout(timeout))??;
        Ok(Conn::over(tls, timeout))
    }

    /// Whether this is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Dial::Tls(_))
    }
}

fn addr(ip: &str, port: u16) -> String {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
        _ => format!("{ip}:{port}"),
    }
}

fn ca_pem(ca: &Ca) -> Result<String, RespError> {
    match ca {
        Ca::Pem(p) => Ok(p.clone()),
        Ca::File(path) => std::fs::read_to_string(path).map_err(|e| {
            RespError::Io(std::io::Error::new(
                e.kind(),
                format!("reading the CA {}: {e}", path.display()),
            ))
        }),
    }
}

/// Verifies the chain against the CA; any name (see the module contract).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        dialled: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain (and dates) first, the name last: a name mismatch means
        // the chain is good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, dialled, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn client_config(ca_pem: &str) -> Result<rustls::ClientConfig, RespError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| RespError::Protocol(format!("{what}: {e}"));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| bad("reading the CA", &e))?;
        roots.add(cert).map_err(|e| bad("adding the CA", &e))?;
    }
    if roots.is_empty() {
        return Err(RespError::Protocol("the CA holds no certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad("building the certificate verifier", &e))?;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("TLS versions", &e))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyName(inner)))
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_without_a_certificate_is_refused() {
        let e = client_config("not a pem").expect_err("no roots");
        assert!(e.to_string().contains("no certificate"), "{e}");
    }

    #[tokio::test]
    async fn a_missing_ca_file_is_said() {
        let d = Dial::Tls(Ca::File("/nonexistent/ca.crt".into()));
        let e = d
            .conn("127.0.0.1", 1, Duration::from_secs(1))
            .await
            .expect_err("no CA");
        assert!(e.to_string().contains("/nonexistent/ca.crt"), "{e}");
    }

    #[test]
    fn ipv6_addresses_are_bracketed() {
        assert_eq!(addr("::1", 26379), "[::1]:26379");
        assert_eq!(addr("127.0.0.1", 26379), "127.0.0.1:26379");
    }
}
