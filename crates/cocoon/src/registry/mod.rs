//! The snapshot registry port: where vk-cocoon pushes `<vmName>:hibernate` and
//! `<vmName>:latest`. The operator only ever probes and deletes manifests.
//!
//! Contract of every [`Registry`]:
//! - [`Registry::has_manifest`]: `Ok(true)` on 200, `Ok(false)` on 404 only; any other status,
//!   a transport error or an auth failure is an `Err` (callers fail closed or retry).
//! - [`Registry::delete_manifest`]: `Ok(())` on 2xx **and** on 404 (ensure-absent); anything
//!   else is an `Err`.

pub mod config;
pub mod epoch;
pub mod oci;

pub use config::{Credentials, RegistrySettings};

use std::sync::Arc;

/// A failed registry call.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The request did not complete (connect, TLS, timeout).
    #[error("{op} {url}: {source}")]
    Transport {
        /// `HEAD`, `GET` or `DELETE`.
        op: &'static str,
        /// The URL.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The registry answered with an unexpected status.
    #[error("{op} {url}: {status} {body}")]
    Status {
        /// `HEAD`, `GET` or `DELETE`.
        op: &'static str,
        /// The URL.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The first 512 bytes of the body.
        body: String,
    },
    /// Credentials could not be obtained or were refused.
    #[error("registry auth: {0}")]
    Auth(String),
    /// The registry settings are unusable.
    #[error("registry config: {0}")]
    Config(String),
}

impl RegistryError {
    /// A short category for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            RegistryError::Transport { .. } => "RegistryUnreachable",
            RegistryError::Status { .. } => "RegistryError",
            RegistryError::Auth(_) => "RegistryAuth",
            RegistryError::Config(_) => "RegistryConfig",
        }
    }
}

/// The two operations the operator needs from a snapshot registry.
#[async_trait::async_trait]
pub trait Registry: Send + Sync {
    /// Whether `repo:reference` exists (see the module contract).
    async fn has_manifest(&self, repo: &str, reference: &str) -> Result<bool, RegistryError>;
    /// Makes `repo:reference` absent (see the module contract).
    async fn delete_manifest(&self, repo: &str, reference: &str) -> Result<(), RegistryError>;
}

/// A shared registry handle.
pub type SharedRegistry = Arc<dyn Registry>;
