//! The operator's HTTPS servers (the admission webhook, the instance manager's API): rustls
//! (ring, like kube's client) in front of an axum router, HTTP/1.1, with a certificate that
//! can be swapped while serving.
//!
//! Contract: [`CertStore`] hands every new TLS handshake the certificate set last; [`serve`]
//! accepts connections until `shutdown`, serving each on its own task; a failed handshake or
//! connection is logged at debug level and never stops the server.

use std::sync::{Arc, RwLock};

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_util::sync::CancellationToken;

/// The current serving certificate.
#[derive(Debug)]
pub struct CertStore(RwLock<Arc<CertifiedKey>>);

/// A serving certificate rustls cannot use.
#[derive(Debug, thiserror::Error)]
#[error("unusable serving certificate: {0}")]
pub struct BadCertificate(String);

fn certified(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, BadCertificate> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| BadCertificate(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| BadCertificate(e.to_string()))?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| BadCertificate(e.to_string()))?;
    Ok(Arc::new(CertifiedKey::new(certs, key)))
}

impl CertStore {
    /// A store serving the PEM certificate chain and key.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Self, BadCertificate> {
        Ok(Self(RwLock::new(certified(cert_pem, key_pem)?)))
    }

    /// Serves the PEM certificate chain and key from the next handshake on.
    pub fn set(&self, cert_pem: &str, key_pem: &str) -> Result<(), BadCertificate> {
        let key = certified(cert_pem, key_pem)?;
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = key;
        Ok(())
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// The TLS configuration serving from `store`.
pub fn tls_config(store: Arc<CertStore>) -> Result<ServerConfig, rustls::Error> {
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(store);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves `router` over TLS on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: ServerConfig,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(Arc::new(config));
    loop {
        let (tcp, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let (acceptor, router, shutdown) = (acceptor.clone(), router.clone(), shutdown.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let service = TowerToHyperService::new(router);
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service);
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                },
                () = shutdown.cancelled() => {}
            }
        });
    }
}
