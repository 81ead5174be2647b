//! A cluster's instance API credentials, from the Secrets the cluster controller creates: the
//! CA that signed the instances' certificate, the name that certificate carries, the token.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::instance_api;
use crate::names;

/// What a cluster's client needs: from the Secrets the operator created.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// The per-cluster CA certificate (PEM).
    pub ca_pem: String,
    /// The DNS name the instances' certificate carries ([`crate::instance_api::server_name`]).
    pub server_name: String,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for Credentials {
    // Never the token in a log line.
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
    /// ([`instance_api::TOKEN_KEY`] of [`instance_api::token_secret`]) from the API (the
    /// backup controllers; the cluster controller has them from its own step).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token_or_the_ca() {
        let c = Credentials {
            ca_pem: "-----BEGIN CERTIFICATE-----".into(),
            server_name: "demo.ns.instance".into(),
            token: "s3cr3t".into(),
        };
        let shown = format!("{c:?}");
        assert!(shown.contains("demo.ns.instance"), "{shown}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("BEGIN"),
            "{shown}"
        );
    }
}
