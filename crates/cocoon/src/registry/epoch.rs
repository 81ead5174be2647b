//! The epoch registry client (`EPOCH_URL`, reference §6.2), used before 2026-07-01.
//!
//! Contract (on top of the [`Registry`] contract):
//! - The repository of a VM is `{EPOCH_URL}/v2/{vmName}`; no path prefix.
//! - Probe: `GET …/manifests/{ref}` (not HEAD) with the four manifest media types accepted;
//!   200 → true (the body is read), 404 → false, anything else is
//!   `GET <url>: <code> <first 512 bytes of body>`.
//! - Delete: `DELETE …/manifests/{ref}` by tag (epoch answers 202); 2xx and 404 are ok.
//! - A non-empty `EPOCH_TOKEN` is sent as `Authorization: Bearer` on both; epoch requires it
//!   on writes, so a missing or wrong token makes every delete a 401 error.

use std::path::Path;

use reqwest::header::{ACCEPT, AUTHORIZATION};
use reqwest::{Method, RequestBuilder, StatusCode};

use super::config::{http_client, status_error};
use super::oci::MANIFEST_ACCEPT;
use super::{Registry, RegistryError};

/// The epoch snapshot registry.
#[derive(Debug)]
pub struct EpochRegistry {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl EpochRegistry {
    /// A client for the epoch at `url`, sending `token` as a bearer when non-empty and
    /// trusting the PEM bundle at `ca_cert` in addition to the built-in roots.
    pub fn new(
        url: &str,
        token: Option<String>,
        ca_cert: Option<&Path>,
    ) -> Result<Self, RegistryError> {
        let base = url.trim().trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            let msg = format!("EPOCH_URL {url:?}: expected http:// or https://");
            return Err(RegistryError::Config(msg));
        }
        Ok(Self {
            client: http_client(ca_cert)?,
            base,
            token: token.filter(|t| !t.is_empty()),
        })
    }

    /// `{EPOCH_URL}/v2/{repo}/manifests/{reference}`.
    pub fn manifest_url(&self, repo: &str, reference: &str) -> String {
        format!("{}/v2/{repo}/manifests/{reference}", self.base)
    }

    fn request(&self, method: Method, url: &str) -> RequestBuilder {
        let req = self
            .client
            .request(method, url)
            .header(ACCEPT, MANIFEST_ACCEPT);
        match &self.token {
            Some(token) => req.header(AUTHORIZATION, format!("Bearer {token}")),
            None => req,
        }
    }

    async fn send(
        &self,
        op: &'static str,
        method: Method,
        url: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        self.request(method, url)
            .send()
            .await
            .map_err(|source| RegistryError::Transport {
                op,
                url: url.to_string(),
                source,
            })
    }
}

#[async_trait::async_trait]
impl Registry for EpochRegistry {
    async fn has_manifest(&self, repo: &str, reference: &str) -> Result<bool, RegistryError> {
        let url = self.manifest_url(repo, reference);
        let resp = self.send("GET", Method::GET, &url).await?;
        match resp.status() {
            StatusCode::OK => {
                resp.bytes()
                    .await
                    .map_err(|source| RegistryError::Transport {
                        op: "GET",
                        url: url.clone(),
                        source,
                    })?;
                Ok(true)
            }
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(status_error("GET", url, resp).await),
        }
    }

    async fn delete_manifest(&self, repo: &str, reference: &str) -> Result<(), RegistryError> {
        let url = self.manifest_url(repo, reference);
        let resp = self.send("DELETE", Method::DELETE, &url).await?;
        if resp.status().is_success() || resp.status() == StatusCode::NOT_FOUND {
            return Ok(());
        }
        Err(status_error("DELETE", url, resp).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_url_has_no_prefix_and_ignores_a_trailing_slash() {
        let e = EpochRegistry::new("http://epoch.cocoon-system.svc:8080/", None, None).unwrap();
        assert_eq!(
            e.manifest_url("vk-ns-demo-0", "hibernate"),
            "http://epoch.cocoon-system.svc:8080/v2/vk-ns-demo-0/manifests/hibernate"
        );
    }

    #[test]
    fn an_empty_token_is_not_sent_and_a_url_needs_a_scheme() {
        let e = EpochRegistry::new("http://e:1", Some(String::new()), None).unwrap();
        assert_eq!(e.token, None);
        let err = EpochRegistry::new("epoch:8080", None, None).unwrap_err();
        assert_eq!(err.category(), "RegistryConfig");
    }
}
