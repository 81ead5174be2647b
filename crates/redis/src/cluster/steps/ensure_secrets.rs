//! Step 2, `ensure_secrets`: the Secrets the cluster needs before anything else.
//!
//! Contract:
//! - Without `spec.authSecret`, `<cluster>-auth` is created with a random password (32 hex
//!   characters) and the spec is pointed at it (upstream's behaviour; it bumps the generation).
//! - The instance API's material exists and is valid: the CA `<cluster>-instance-ca` (replaced
//!   when unreadable or within a year of expiry), the serving certificate
//!   `<cluster>-instance-tls` for [`instance_api::server_name`] (replaced when unreadable,
//!   signed by another CA, missing the name, or within 30 days of expiry) and the token
//!   `<cluster>-instance-token`. Material is generated only when needed, so a valid cluster
//!   costs no write. The pass's instance client is built from it.
//! - The resourceVersion of every referenced Secret is recorded for the status
//!   (`secretsResourceVersion`); a change is an Event `SecretRotated`; a missing one makes the
//!   cluster `Degraded` with its name (pods wait for it: the kubelet does not start them) —
//!   except `backupCredentialsSecret`, which only backups read (its volume is optional; a
//!   RedisBackup waits for it and says so), unless the cluster bootstraps from a backup.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;
use tokio_rustls::rustls::crypto::ring::default_provider;

use crate::admission::pki::{self, Ca};
use crate::cluster::Pass;
use crate::cluster::apply::WriteError;
use crate::cluster::build::secret::{self, value};
use crate::instance_api;
use crate::instance_client::Credentials;
use crate::names;

/// The step.
pub struct EnsureSecrets;

/// Why it failed.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// Writing a Secret or the spec.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// No random bytes.
    #[error("generating random material: {0}")]
    Random(String),
    /// Making a certificate.
    #[error("generating the instance API certificates: {0}")]
    Pki(#[from] pki::PkiError),
}

impl ReconcileError for SecretsError {
    fn category(&self) -> &'static str {
        match self {
            SecretsError::Write(e) => e.category(),
            SecretsError::Random(_) => "random_failed",
            SecretsError::Pki(_) => "pki_failed",
        }
    }
}

/// `n` random bytes as hex.
pub fn random_hex(n: usize) -> Result<String, SecretsError> {
    let mut buf = vec![0u8; n];
    default_provider()
        .secure_random
        .fill(&mut buf)
        .map_err(|e| SecretsError::Random(format!("{e:?}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

async fn auth(pass: &mut Pass) -> Result<(), SecretsError> {
    if pass.model.spec.auth_secret.is_some() {
        return Ok(());
    }
    let name = names::auth_secret(&pass.model.name);
    if !pass.seen.secret_versions.contains_key(&name) {
        let s = secret::auth(&pass.model, &random_hex(16)?);
        if pass.writer().create(&s).await? {
            pass.writer()
                .event(
                    false,
                    "AuthSecretCreated",
                    format!("Created Secret {name} with a random password"),
                )
                .await;
        }
    }
    let rc = pass
        .writer()
        .patch_spec(serde_json::json!({"authSecret": {"name": name}}))
        .await?;
    pass.refresh(rc);
    Ok(())
}

fn ca_of(s: Option<&Secret>) -> Option<Ca> {
    let s = s?;
    Some(Ca {
        cert_pem: value(s, names::KEY_CA_CRT)?,
        key_pem: value(s, "ca.key")?,
    })
}

async fn instance_pki(pass: &mut Pass) -> Result<Credentials, SecretsError> {
    let m = &pass.model;
    let now = jiff::Timestamp::now();
    let ca_name = instance_api::ca_secret(&m.name);
    let tls_name = instance_api::server_secret(&m.name);
    let token_name = instance_api::token_secret(&m.name);
    let server_name = instance_api::server_name(&m.name, &m.namespace);
    let w = pass.writer();
    let ca = match ca_of(pass.seen.secrets.get(&ca_name).map(|s| &**s)) {
        Some(ca) if !pki::needs_renewal(&ca.cert_pem, &[], now, pki::CA_RENEW_BEFORE) => ca,
        _ => {
            let ca = Ca::generate(now)?;
            w.apply(&secret::instance_ca(m, &ca.cert_pem, &ca.key_pem), None)
                .await?;
            w.event(
                false,
                "InstanceCAIssued",
                format!("Issued the instance API CA {ca_name}"),
            )
            .await;
            ca
        }
    };
    let tls = pass.seen.secrets.get(&tls_name);
    let cert = tls.and_then(|s| value(s, names::KEY_TLS_CRT));
    let same_ca = tls.and_then(|s| value(s, names::KEY_CA_CRT)).as_deref() == Some(&ca.cert_pem);
    let hosts = [server_name.clone()];
    let valid = cert.is_some_and(|c| !pki::needs_renewal(&c, &hosts, now, pki::CERT_RENEW_BEFORE));
    if !(valid && same_ca) {
        let serving = pki::issue(&ca, &hosts, now)?;
        let s = secret::instance_tls(m, &serving.cert_pem, &serving.key_pem, &ca.cert_pem);
        w.apply(&s, None).await?;
        w.event(
            false,
            "InstanceCertificateIssued",
            format!("Issued the instance API serving certificate {tls_name} for {server_name}"),
        )
        .await;
    }
    let token = match pass
        .seen
        .secrets
        .get(&token_name)
        .and_then(|s| value(s, instance_api::TOKEN_KEY))
        .filter(|t| !t.trim().is_empty())
    {
        Some(t) => t,
        None => {
            let t = random_hex(32)?;
            w.apply(&secret::instance_token(m, &t), None).await?;
            t
        }
    };
    Ok(Credentials {
        ca_pem: ca.cert_pem,
        server_name,
        token: token.trim().to_owned(),
    })
}

/// The Secrets the spec references, by name.
pub fn referenced(pass: &Pass) -> Vec<String> {
    let mut out = required(pass);
    if let Some(b) = &pass.model.spec.backup_credentials_secret {
        out.push(b.name.clone());
    }
    out.sort();
    out.dedup();
    out
}

/// The referenced Secrets the cluster cannot run without: all but the backup credentials,
/// which only backups read, unless the first primary is restored from a backup.
pub fn required(pass: &Pass) -> Vec<String> {
    let m = &pass.model;
    let s = &m.spec;
    let mut out = vec![m.auth_secret.clone()];
    let backup = s
        .backup_credentials_secret
        .as_ref()
        .filter(|_| crate::cluster::build::pod::bootstraps(m));
    for r in [&s.acl_config_secret, &s.tls_secret, &s.ca_secret]
        .into_iter()
        .flatten()
        .chain(backup)
    {
        out.push(r.name.clone());
    }
    if let Some(src) = s
        .replica_mode
        .as_ref()
        .and_then(|r| r.source.as_ref())
        .filter(|s| !s.auth_secret_name.is_empty())
    {
        out.push(src.auth_secret_name.clone());
    }
    out.sort();
    out.dedup();
    out
}

async fn versions(pass: &mut Pass) {
    let mut missing = Vec::new();
    let required = required(pass);
    for name in referenced(pass) {
        match pass.seen.secret_versions.get(&name) {
            Some(rv) => {
                let before = pass.model.status.secrets_resource_version.get(&name);
                if before.is_some_and(|b| b != rv) {
                    pass.writer()
                        .event(
                            false,
                            "SecretRotated",
                            format!("Secret {name} changed; the instances apply it live"),
                        )
                        .await;
                }
                pass.secrets.insert(name, rv.clone());
            }
            None if required.contains(&name) => missing.push(name),
            None => {}
        }
    }
    if !missing.is_empty() {
        pass.blocked = Some(format!("waiting for Secret {}", missing.join(", ")));
    }
}

impl Step<Pass> for EnsureSecrets {
    fn name(&self) -> &'static str {
        "ensure_secrets"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move {
            auth(pass).await?;
            let creds = instance_pki(pass).await?;
            match pass.ctx.connector.connect(&creds) {
                Ok(c) => pass.instances = Some(c),
                Err(e) => tracing::warn!(error = %e, "cannot build the instance API client"),
            }
            versions(pass).await;
            Ok(Flow::Continue)
        })
    }
}
