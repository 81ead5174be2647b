//! The admission webhooks, served by every operator replica over HTTPS with a self-managed PKI.
//!
//! - `/mutate-redis-io-v1-rediscluster` ([`defaults`]): upstream's defaults the schema cannot
//!   express.
//! - `/validate-redis-io-v1-rediscluster` ([`cluster`]): the rules that need other objects,
//!   annotation values, memory arithmetic, and warnings.
//! - `/validate-redis-io-v1-redisscheduledbackup` ([`scheduled`]): schedule and time zone.
//!
//! Contract of [`Webhook::run`]: make the CA and serving certificate valid and patch the
//! caBundle of the configured webhook configurations ([`certs`]), serve on the bind address
//! ([`crate::https`]), and mark `/readyz` ready once serving; then every `--webhook-pki-interval`
//! (upstream's hourly) repeat the PKI step and swap in a renewed certificate without a restart.
//! A request the webhook cannot read is denied with 400; an API read that fails denies the
//! request with an internal error (failurePolicy Fail semantics: never admit unchecked).

pub mod certs;
pub mod cluster;
pub mod defaults;
pub mod pki;
pub mod review;
pub mod scheduled;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use clap::{ArgAction, Args};
use kit::health::Readiness;
use kube::Client;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use self::certs::PkiSettings;
use self::review::{FieldError, Request, Response};
use crate::crd::{RedisCluster, RedisScheduledBackup};
use crate::{https, names};

/// Flags of the webhook server (upstream's environment variables where it has them).
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct WebhookFlags {
    /// Serve the admission webhooks (`--webhook-enabled=false` to turn them off).
    #[arg(
        long,
        env = "WEBHOOK_ENABLED",
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub webhook_enabled: bool,

    /// Address the HTTPS webhook server binds to (`HOST:PORT` or `:PORT`).
    #[arg(long, env = "WEBHOOK_BIND_ADDRESS", default_value = ":9443", value_parser = kit::flags::parse_addr)]
    pub webhook_bind_address: SocketAddr,

    /// The Service in front of the webhook server: the serving certificate covers its DNS
    /// names, and the configuration names default to `<prefix>-validating-webhook` and
    /// `<prefix>-mutating-webhook` with the `-webhook-service` suffix removed.
    #[arg(long, env = "WEBHOOK_SERVICE_NAME", default_value = names::WEBHOOK_SERVICE)]
    pub webhook_service_name: String,

    /// Extra DNS names or IP addresses for the serving certificate, comma-separated (for a
    /// configuration that calls the webhook by URL, such as `https://127.0.0.1:9443/...`).
    #[arg(long, env = "WEBHOOK_HOSTS", value_delimiter = ',')]
    pub webhook_hosts: Vec<String>,

    /// ValidatingWebhookConfiguration whose caBundle the operator keeps current.
    #[arg(long, env = "VALIDATING_WEBHOOK_CONFIGURATION_NAME")]
    pub validating_webhook_configuration: Option<String>,

    /// MutatingWebhookConfiguration whose caBundle the operator keeps current.
    #[arg(long, env = "MUTATING_WEBHOOK_CONFIGURATION_NAME")]
    pub mutating_webhook_configuration: Option<String>,

    /// Secret holding the webhook CA, in the operator's namespace.
    #[arg(long, env = "WEBHOOK_CA_SECRET", default_value = names::WEBHOOK_CA_SECRET)]
    pub webhook_ca_secret: String,

    /// Secret holding the serving certificate, in the operator's namespace.
    #[arg(long, env = "WEBHOOK_CERT_SECRET", default_value = names::WEBHOOK_CERT_SECRET)]
    pub webhook_cert_secret: String,

    /// How often the PKI is checked and renewed, a Go duration (upstream's variable).
    #[arg(long, env = "WEBHOOK_PKI_RECONCILE_INTERVAL", default_value = "1h", value_parser = parse_interval)]
    pub webhook_pki_interval: Duration,

    /// The operator's namespace (the PKI Secrets); else the ServiceAccount's namespace file,
    /// else `redis-operator-system`.
    #[arg(long, env = "POD_NAMESPACE")]
    pub operator_namespace: Option<String>,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = crate::schedule::parse_go_duration(s)?;
    Duration::try_from(d)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("the interval must be positive, got {s:?}"))
}

const SA_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

impl WebhookFlags {
    /// Where the PKI lives and what it covers.
    pub fn pki_settings(&self) -> PkiSettings {
        let namespace = self
            .operator_namespace
            .clone()
            .filter(|n| !n.trim().is_empty())
            .or_else(|| {
                std::fs::read_to_string(SA_NAMESPACE_FILE)
                    .ok()
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| names::DEFAULT_OPERATOR_NAMESPACE.to_owned());
        let service = self.webhook_service_name.trim();
        let prefix = service
            .strip_suffix("-webhook-service")
            .filter(|p| !p.is_empty())
            .unwrap_or(service);
        PkiSettings {
            hosts: pki::hosts(service, &namespace, &self.webhook_hosts),
            namespace,
            ca_secret: self.webhook_ca_secret.clone(),
            cert_secret: self.webhook_cert_secret.clone(),
            validating: self
                .validating_webhook_configuration
                .clone()
                .unwrap_or_else(|| format!("{prefix}-validating-webhook")),
            mutating: self
                .mutating_webhook_configuration
                .clone()
                .unwrap_or_else(|| format!("{prefix}-mutating-webhook")),
        }
    }
}

/// The webhook server of one operator replica.
pub struct Webhook {
    client: Client,
    flags: WebhookFlags,
}

impl Webhook {
    /// A server reading and writing through `client`.
    pub fn new(client: Client, flags: WebhookFlags) -> Self {
        Self { client, flags }
    }

    /// Runs until `shutdown` (see the module docs). `on_serving` is called with the bound
    /// address once the server accepts connections.
    pub async fn run(
        self,
        readiness: Readiness,
        shutdown: CancellationToken,
        on_serving: impl FnOnce(SocketAddr),
    ) -> anyhow::Result<()> {
        let settings = self.flags.pki_settings();
        let material = certs::ensure(&self.client, &settings, jiff::Timestamp::now())
            .await
            .context("setting up the webhook certificates")?;
        let store = Arc::new(https::CertStore::new(
            &material.serving.cert_pem,
            &material.serving.key_pem,
        )?);
        let listener = tokio::net::TcpListener::bind(self.flags.webhook_bind_address)
            .await
            .with_context(|| {
                format!(
                    "binding the webhook address {}",
                    self.flags.webhook_bind_address
                )
            })?;
        let addr = listener.local_addr()?;
        let config = https::tls_config(store.clone())?;
        let serving = tokio::spawn(https::serve(
            listener,
            router(self.client.clone()),
            config,
            shutdown.clone(),
        ));
        tracing::info!(%addr, namespace = %settings.namespace, "serving admission webhooks");
        readiness.set_ready(true);
        on_serving(addr);
        let mut current = material;
        let mut tick = tokio::time::interval(self.flags.webhook_pki_interval);
        tick.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            match certs::ensure(&self.client, &settings, jiff::Timestamp::now()).await {
                Ok(m) if m != current => match store.set(&m.serving.cert_pem, &m.serving.key_pem) {
                    Ok(()) => {
                        tracing::info!("serving a renewed webhook certificate");
                        current = m;
                    }
                    Err(e) => tracing::warn!(error = %e, "renewed webhook certificate unusable"),
                },
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "webhook PKI check failed; retrying next interval")
                }
            }
        }
        let _ = serving.await;
        Ok(())
    }
}

/// The webhook routes, reading other objects through `client`.
pub fn router(client: Client) -> Router {
    Router::new()
        .route(names::PATH_MUTATE_CLUSTER, post(mutate_cluster))
        .route(names::PATH_VALIDATE_CLUSTER, post(validate_cluster))
        .route(
            names::PATH_VALIDATE_SCHEDULED_BACKUP,
            post(validate_scheduled_backup),
        )
        .with_state(client)
}

fn reply(r: Response) -> axum::Json<Value> {
    axum::Json(r.into_review())
}

fn typed<T: serde::de::DeserializeOwned>(v: &Option<Value>) -> Result<Option<T>, String> {
    v.as_ref()
        .map(|v| serde_json::from_value(v.clone()))
        .transpose()
        .map_err(|e| format!("cannot read the object: {e}"))
}

async fn mutate_cluster(body: Bytes) -> axum::Json<Value> {
    let req = match review::parse(&body) {
        Ok(r) => r,
        Err(e) => return reply(Response::bad_request("", &e)),
    };
    let ops = req
        .object
        .as_ref()
        .map(defaults::defaults)
        .unwrap_or_default();
    reply(Response::patched(&req.uid, &ops))
}

async fn validate_cluster(State(client): State<Client>, body: Bytes) -> axum::Json<Value> {
    let req: Request = match review::parse(&body) {
        Ok(r) => r,
        Err(e) => return reply(Response::bad_request("", &e)),
    };
    let (new, old) = match (
        typed::<RedisCluster>(&req.object),
        typed::<RedisCluster>(&req.old_object),
    ) {
        (Ok(Some(new)), Ok(old)) => (new, old),
        (Ok(None), _) => return reply(Response::allow(&req.uid)),
        (Err(e), _) | (_, Err(e)) => return reply(Response::bad_request(&req.uid, &e)),
    };
    let namespace = req.namespace.clone().unwrap_or_default();
    let observed = match cluster::observe(&client, &namespace, &new, old.as_ref()).await {
        Ok(o) => o,
        Err(e) => {
            return reply(Response::deny(
                &req.uid,
                &[FieldError::internal("spec", e.to_string())],
            ));
        }
    };
    let (errors, warnings) = cluster::validate(&new, old.as_ref(), &observed);
    reply(Response::verdict(&req.uid, &errors, warnings))
}

async fn validate_scheduled_backup(body: Bytes) -> axum::Json<Value> {
    let req: Request = match review::parse(&body) {
        Ok(r) => r,
        Err(e) => return reply(Response::bad_request("", &e)),
    };
    match typed::<RedisScheduledBackup>(&req.object) {
        Ok(Some(sb)) => {
            let errors = scheduled::validate(&sb, jiff::Timestamp::now());
            reply(Response::verdict(&req.uid, &errors, Vec::new()))
        }
        Ok(None) => reply(Response::allow(&req.uid)),
        Err(e) => reply(Response::bad_request(&req.uid, &e)),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: WebhookFlags,
    }

    #[test]
    fn configuration_names_derive_from_the_service_name() {
        let cli = Cli::try_parse_from([
            "x",
            "--webhook-service-name=acme-webhook-service",
            "--operator-namespace=ops",
            "--webhook-hosts=127.0.0.1,localhost",
        ])
        .expect("parse");
        let s = cli.flags.pki_settings();
        assert_eq!(s.validating, "acme-validating-webhook");
        assert_eq!(s.mutating, "acme-mutating-webhook");
        assert_eq!(s.namespace, "ops");
        assert!(s.hosts.contains(&"acme-webhook-service.ops.svc".to_owned()));
        assert!(s.hosts.contains(&"127.0.0.1".to_owned()));
        assert!(s.hosts.contains(&"localhost".to_owned()));
    }

    #[test]
    fn intervals_are_go_durations() {
        assert_eq!(parse_interval("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_interval("90s"), Ok(Duration::from_secs(90)));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
