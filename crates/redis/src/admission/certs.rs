//! The webhook PKI's only writer: the CA and serving-certificate Secrets in the operator's
//! namespace (upstream's names and keys: `tls.crt`, `tls.key`, `ca.crt`), and the caBundle of
//! the webhook configurations.
//!
//! Contract: [`ensure`] leaves both Secrets valid (creating or replacing what is missing,
//! unreadable, expiring or no longer covering the wanted hosts) and returns the material every
//! replica serves. Replicas race safely: creates and replaces are optimistic, and a replica that
//! loses reads the winner's material. It then patches the CA into every webhook of the two
//! configurations (a strategic merge keyed by webhook name) where it differs; a configuration
//! that does not exist is skipped, as upstream does.

use std::collections::BTreeMap;

use base64::Engine as _;
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::pki::{self, Ca, Serving};
use crate::names;

/// Where the PKI lives and what it must cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PkiSettings {
    /// The operator's namespace (both Secrets).
    pub namespace: String,
    /// Secret of the CA.
    pub ca_secret: String,
    /// Secret of the serving certificate.
    pub cert_secret: String,
    /// DNS names and IPs the serving certificate must cover.
    pub hosts: Vec<String>,
    /// The ValidatingWebhookConfiguration to keep the caBundle of.
    pub validating: String,
    /// The MutatingWebhookConfiguration to keep the caBundle of.
    pub mutating: String,
}

/// What the webhook server serves and the API server trusts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Material {
    /// The serving certificate and key.
    pub serving: Serving,
    /// The CA certificate (the caBundle).
    pub ca_pem: String,
}

/// A PKI step that failed.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// Generating a certificate failed.
    #[error(transparent)]
    Generate(#[from] pki::PkiError),
    /// An API read or write failed.
    #[error("{what}: {source}")]
    Api {
        /// The object and action.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Other replicas kept replacing the Secret.
    #[error("{0} kept changing under us; giving up this round")]
    Contended(String),
}

fn api_err(what: String) -> impl FnOnce(kube::Error) -> CertsError {
    move |source| CertsError::Api { what, source }
}

fn data(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

fn usable_ca(secret: &Secret, now: Timestamp) -> Option<Ca> {
    let ca = Ca {
        cert_pem: data(secret, names::KEY_TLS_CRT)?,
        key_pem: data(secret, names::KEY_TLS_KEY)?,
    };
    rcgen::KeyPair::from_pem(&ca.key_pem).ok()?;
    (!pki::needs_renewal(&ca.cert_pem, &[], now, pki::CA_RENEW_BEFORE)).then_some(ca)
}

fn usable_serving(secret: &Secret, ca: &Ca, hosts: &[String], now: Timestamp) -> Option<Serving> {
    let s = Serving {
        cert_pem: data(secret, names::KEY_TLS_CRT)?,
        key_pem: data(secret, names::KEY_TLS_KEY)?,
    };
    let same_ca = data(secret, names::KEY_CA_CRT).as_deref() == Some(ca.cert_pem.as_str());
    (same_ca && !pki::needs_renewal(&s.cert_pem, hosts, now, pki::CERT_RENEW_BEFORE)).then_some(s)
}

fn tls_secret(name: &str, namespace: &str, crt: &str, key: &str, ca: &str) -> Secret {
    let data = BTreeMap::from([
        (
            names::KEY_TLS_CRT.to_owned(),
            ByteString(crt.as_bytes().to_vec()),
        ),
        (
            names::KEY_TLS_KEY.to_owned(),
            ByteString(key.as_bytes().to_vec()),
        ),
        (
            names::KEY_CA_CRT.to_owned(),
            ByteString(ca.as_bytes().to_vec()),
        ),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_owned(),
                names::OPERATOR_NAME.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    }
}

// Reads `name`; when `usable` rejects it (or it is absent), writes `make()`'s Secret
// optimistically and returns what was written, or what a racing replica wrote.
async fn converge<T: Clone>(
    api: &Api<Secret>,
    name: &str,
    usable: impl Fn(&Secret) -> Option<T>,
    make: impl Fn() -> Result<(T, Secret), CertsError>,
) -> Result<T, CertsError> {
    for _ in 0..5 {
        let current = api
            .get_opt(name)
            .await
            .map_err(api_err(format!("reading Secret {name}")))?;
        if let Some(t) = current.as_ref().and_then(&usable) {
            return Ok(t);
        }
        let (t, mut secret) = make()?;
        let written = match &current {
            None => api.create(&PostParams::default(), &secret).await,
            Some(old) => {
                secret.metadata.resource_version = old.metadata.resource_version.clone();
                api.replace(name, &PostParams::default(), &secret).await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = name, "wrote webhook certificate material");
                return Ok(t);
            }
            // Another replica wrote first: use theirs on the next read.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(api_err(format!("writing Secret {name}"))(e)),
        }
    }
    Err(CertsError::Contended(format!("Secret {name}")))
}

/// Makes both Secrets valid at `now` and patches the caBundles (see the module docs).
pub async fn ensure(
    client: &Client,
    s: &PkiSettings,
    now: Timestamp,
) -> Result<Material, CertsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &s.namespace);
    let ca = converge(
        &api,
        &s.ca_secret,
        |secret| usable_ca(secret, now),
        || {
            let ca = Ca::generate(now)?;
            let secret = tls_secret(
                &s.ca_secret,
                &s.namespace,
                &ca.cert_pem,
                &ca.key_pem,
                &ca.cert_pem,
            );
            Ok((ca, secret))
        },
    )
    .await?;
    let serving = converge(
        &api,
        &s.cert_secret,
        |secret| usable_serving(secret, &ca, &s.hosts, now),
        || {
            let serving = pki::issue(&ca, &s.hosts, now)?;
            let secret = tls_secret(
                &s.cert_secret,
                &s.namespace,
                &serving.cert_pem,
                &serving.key_pem,
                &ca.cert_pem,
            );
            Ok((serving, secret))
        },
    )
    .await?;
    patch_ca_bundles(client, s, &ca.cert_pem).await?;
    Ok(Material {
        serving,
        ca_pem: ca.cert_pem,
    })
}

async fn patch_ca_bundles(
    client: &Client,
    s: &PkiSettings,
    ca_pem: &str,
) -> Result<(), CertsError> {
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(cfg) = vapi.get_opt(&s.validating).await.map_err(api_err(format!(
        "reading ValidatingWebhookConfiguration {}",
        s.validating
    )))? {
        let stale: Vec<String> = cfg
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .filter(|w| {
                w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice())
                    != Some(ca_pem.as_bytes())
            })
            .map(|w| w.name)
            .collect();
        patch_bundle(&vapi, &s.validating, &stale, &bundle).await?;
    }
    let mapi: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(cfg) = mapi.get_opt(&s.mutating).await.map_err(api_err(format!(
        "reading MutatingWebhookConfiguration {}",
        s.mutating
    )))? {
        let stale: Vec<String> = cfg
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .filter(|w| {
                w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice())
                    != Some(ca_pem.as_bytes())
            })
            .map(|w| w.name)
            .collect();
        patch_bundle(&mapi, &s.mutating, &stale, &bundle).await?;
    }
    Ok(())
}

async fn patch_bundle<K>(
    api: &Api<K>,
    name: &str,
    webhooks: &[String],
    bundle: &str,
) -> Result<(), CertsError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if webhooks.is_empty() {
        return Ok(());
    }
    let entries: Vec<_> = webhooks
        .iter()
        .map(|w| json!({"name": w, "clientConfig": {"caBundle": bundle}}))
        .collect();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"webhooks": entries})),
    )
    .await
    .map_err(api_err(format!("patching the caBundle of {name}")))?;
    tracing::info!(configuration = name, webhooks = ?webhooks, "patched the webhook caBundle");
    Ok(())
}
