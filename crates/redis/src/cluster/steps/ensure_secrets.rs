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
//!   costs no write, and material the cache does not show is created, never applied over: if
//!   it exists after all (a cache behind the API server) the live Secret is read and used. The pass's instance client is built from it.
//! - The resourceVersion of every referenced Secret is recorded for the status
//!   (`secretsResourceVersion`); a change is an Event `SecretRotated`; a missing one makes the
//!   cluster `Degraded` with its name (pods wait for it: the kubelet does not start them) —
//!   except `backupCredentialsSecret`, which only backups read (its volume is optional; a
//!   RedisBackup waits for it and says so), unless the cluster is still bootstrapping from a
//!   backup (until it is first Healthy: `status.bootstrapCompleted`).

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kit::pipeline::{Flow, Step, StepResult};
use kit::reconcile::ReconcileError;
use kube::ResourceExt;
use kube::api::Api;
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
    /// Reading a Secret the cache did not have.
    #[error("reading Secret {name}: {source}")]
    Read {
        /// The Secret.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Creating a Secret said it exists, and it is gone when read.
    #[error("Secret {0} exists and does not: it is read again next pass")]
    Vanished(String),
}

impl ReconcileError for SecretsError {
    fn category(&self) -> &'static str {
        match self {
            SecretsError::Write(e) => e.category(),
            SecretsError::Random(_) => "random_failed",
            SecretsError::Pki(_) => "pki_failed",
            SecretsError::Read { .. } => "read_failed",
            SecretsError::Vanished(_) => "secret_vanished",
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

/// Creates `s`, which the cache does not show; `Some(live)` when it exists after all (a cache
/// behind the API server: a restarted operator, a cut watch). Material the pods may already use
/// is never replaced because the cache missed it: a new CA or token would lock the operator out
/// of every instance until their mounted Secrets caught up.
async fn create_or_read(pass: &Pass, s: &Secret) -> Result<Option<Secret>, SecretsError> {
    if pass.writer().create(s).await? {
        return Ok(None);
    }
    let name = s.name_any();
    let api: Api<Secret> = Api::namespaced(pass.ctx.client.clone(), &pass.model.namespace);
    match api.get_opt(&name).await {
        Ok(Some(live)) => Ok(Some(live)),
        Ok(None) => Err(SecretsError::Vanished(name)),
        Err(source) => Err(SecretsError::Read { name, source }),
    }
}

async fn instance_ca(pass: &Pass, now: jiff::Timestamp) -> Result<Ca, SecretsError> {
    let m = &pass.model;
    let name = instance_api::ca_secret(&m.name);
    let cached = pass.seen.secrets.get(&name).map(|s| &**s);
    let mut live = None;
    if cached.is_none() {
        let ca = Ca::generate(now)?;
        match create_or_read(pass, &secret::instance_ca(m, &ca.cert_pem, &ca.key_pem)).await? {
            None => {
                issued(
                    pass,
                    "InstanceCAIssued",
                    format!("Issued the instance API CA {name}"),
                )
                .await;
                return Ok(ca);
            }
            Some(s) => live = Some(s),
        }
    }
    match ca_of(cached.or(live.as_ref())) {
        Some(ca) if !pki::needs_renewal(&ca.cert_pem, &[], now, pki::CA_RENEW_BEFORE) => Ok(ca),
        _ => {
            // Unreadable or expiring: replaced, and every serving certificate with it.
            let ca = Ca::generate(now)?;
            pass.writer()
                .apply(&secret::instance_ca(m, &ca.cert_pem, &ca.key_pem), None)
                .await?;
            issued(
                pass,
                "InstanceCAIssued",
                format!("Issued the instance API CA {name}"),
            )
            .await;
            Ok(ca)
        }
    }
}

async fn issued(pass: &Pass, reason: &str, note: String) {
    pass.writer().event(false, reason, note).await;
}

async fn instance_pki(pass: &mut Pass) -> Result<Credentials, SecretsError> {
    let now = jiff::Timestamp::now();
    let ca = instance_ca(pass, now).await?;
    let m = &pass.model;
    let tls_name = instance_api::server_secret(&m.name);
    let token_name = instance_api::token_secret(&m.name);
    let server_name = instance_api::server_name(&m.name, &m.namespace);
    let w = pass.writer();
    let hosts = [server_name.clone()];
    let fresh_tls = || -> Result<Secret, SecretsError> {
        let serving = pki::issue(&ca, &hosts, now)?;
        Ok(secret::instance_tls(
            m,
            &serving.cert_pem,
            &serving.key_pem,
            &ca.cert_pem,
        ))
    };
    let mut tls = pass.seen.secrets.get(&tls_name).map(|s| (**s).clone());
    let mut created = false;
    if tls.is_none() {
        match create_or_read(pass, &fresh_tls()?).await? {
            None => created = true,
            Some(live) => tls = Some(live),
        }
    }
    if let Some(tls) = &tls {
        let cert = value(tls, names::KEY_TLS_CRT);
        let same_ca = value(tls, names::KEY_CA_CRT).as_deref() == Some(&ca.cert_pem);
        let valid =
            cert.is_some_and(|c| !pki::needs_renewal(&c, &hosts, now, pki::CERT_RENEW_BEFORE));
        if !(valid && same_ca) {
            w.apply(&fresh_tls()?, None).await?;
            created = true;
        }
    }
    if created {
        let note =
            format!("Issued the instance API serving certificate {tls_name} for {server_name}");
        w.event(false, "InstanceCertificateIssued", note).await;
    }
    let token_of = |s: &Secret| value(s, instance_api::TOKEN_KEY).filter(|t| !t.trim().is_empty());
    let token = match pass.seen.secrets.get(&token_name).map(|s| &**s) {
        Some(s) => match token_of(s) {
            Some(t) => t,
            // Unreadable: replaced.
            None => {
                let t = random_hex(32)?;
                w.apply(&secret::instance_token(m, &t), None).await?;
                t
            }
        },
        None => {
            let t = random_hex(32)?;
            match create_or_read(pass, &secret::instance_token(m, &t)).await? {
                None => t,
                Some(live) => match token_of(&live) {
                    Some(live_t) => live_t,
                    None => {
                        w.apply(&secret::instance_token(m, &t), None).await?;
                        t
                    }
                },
            }
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
/// which only backups read, unless the first primary is still to be restored from a backup.
pub fn required(pass: &Pass) -> Vec<String> {
    let m = &pass.model;
    let s = &m.spec;
    let mut out = vec![m.auth_secret.clone()];
    let backup = s
        .backup_credentials_secret
        .as_ref()
        .filter(|_| crate::cluster::build::pod::bootstrapping(m));
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
