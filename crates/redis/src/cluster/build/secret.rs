//! The Secrets the operator writes, pure (random material and certificates are arguments):
//!
//! - `<cluster>-auth` (only when `spec.authSecret` is not set): key `password`, 32 hex
//!   characters, labelled and owned by the cluster;
//! - the instance API's material ([`crate::instance_api`]): the per-cluster CA
//!   `<cluster>-instance-ca` (`ca.crt`, `ca.key`; only the operator mounts nothing of it), the
//!   instances' serving pair `<cluster>-instance-tls` (`tls.crt`, `tls.key`, `ca.crt`) for the
//!   name [`instance_api::server_name`], and the bearer token `<cluster>-instance-token`;
//! - the connection Secret `spec.connectionSecret.name` (upstream's keys: `cluster_name`,
//!   `namespace`, `mode`, `port`, `username`, `password`, `host`, `url`, `leader_host`,
//!   `leader_url`, `replica_host`, `replica_url`, and in sentinel mode `sentinel_host`,
//!   `sentinel_port`, `master_name`), labelled `redis.io/connection-secret: "true"`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::owned_meta;
use crate::cluster::model::Model;
use crate::instance_api;
use crate::names;

fn secret(
    m: &Model,
    name: &str,
    labels: BTreeMap<String, String>,
    data: &[(&str, &str)],
) -> Secret {
    Secret {
        metadata: owned_meta(m, name, labels),
        type_: Some("Opaque".into()),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// The generated `<cluster>-auth` with `password`.
pub fn auth(m: &Model, password: &str) -> Secret {
    secret(
        m,
        &names::auth_secret(&m.name),
        BTreeMap::new(),
        &[(names::KEY_PASSWORD, password)],
    )
}

/// `<cluster>-instance-ca`.
pub fn instance_ca(m: &Model, cert_pem: &str, key_pem: &str) -> Secret {
    secret(
        m,
        &instance_api::ca_secret(&m.name),
        BTreeMap::new(),
        &[(names::KEY_CA_CRT, cert_pem), ("ca.key", key_pem)],
    )
}

/// `<cluster>-instance-tls`.
pub fn instance_tls(m: &Model, cert_pem: &str, key_pem: &str, ca_pem: &str) -> Secret {
    secret(
        m,
        &instance_api::server_secret(&m.name),
        BTreeMap::new(),
        &[
            (names::KEY_TLS_CRT, cert_pem),
            (names::KEY_TLS_KEY, key_pem),
            (names::KEY_CA_CRT, ca_pem),
        ],
    )
}

/// `<cluster>-instance-token`.
pub fn instance_token(m: &Model, token: &str) -> Secret {
    secret(
        m,
        &instance_api::token_secret(&m.name),
        BTreeMap::new(),
        &[(instance_api::TOKEN_KEY, token)],
    )
}

/// Escapes a URL userinfo password as Go's `url.UserPassword` does.
fn escape_password(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        let keep = b.is_ascii_alphanumeric() || b"-_.~$&+,;=".contains(&b);
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn url(scheme: &str, password: &str, host: &str) -> String {
    let auth = if password.is_empty() {
        String::new()
    } else {
        format!("default:{}@", escape_password(password))
    };
    format!("{scheme}://{auth}{host}:{}", names::REDIS_PORT)
}

/// The connection Secret named `name` for `password`.
pub fn connection(m: &Model, name: &str, password: &str) -> Secret {
    let ns = &m.namespace;
    let fqdn = |svc: String| format!("{svc}.{ns}.svc");
    let scheme = if m.spec.tls_secret.is_some() {
        "rediss"
    } else {
        "redis"
    };
    let leader = fqdn(names::leader_service(&m.name));
    let replica = fqdn(names::replica_service(&m.name));
    let mut data: BTreeMap<&str, String> = BTreeMap::from([
        ("cluster_name", m.name.clone()),
        ("namespace", ns.clone()),
        ("mode", m.spec.mode.as_str().to_owned()),
        ("port", names::REDIS_PORT.to_string()),
        ("username", "default".to_owned()),
        ("host", leader.clone()),
        ("url", url(scheme, password, &leader)),
        ("leader_host", leader.clone()),
        ("leader_url", url(scheme, password, &leader)),
        ("replica_host", replica.clone()),
        ("replica_url", url(scheme, password, &replica)),
    ]);
    if !password.is_empty() {
        data.insert("password", password.to_owned());
    }
    if m.sentinel() {
        data.insert("sentinel_host", fqdn(names::sentinel_service(&m.name)));
        data.insert("sentinel_port", names::SENTINEL_PORT.to_string());
        data.insert("master_name", m.name.clone());
    }
    let pairs: Vec<(&str, &str)> = data.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let labels = BTreeMap::from([(names::LABEL_CONNECTION_SECRET.to_owned(), "true".to_owned())]);
    secret(m, name, labels, &pairs)
}

/// The value of `key` in `s`, as text.
pub fn value(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::build::fixtures::model;
    use serde_json::json;

    #[test]
    fn the_connection_secret_has_upstreams_keys() {
        let m = model(json!({"storage": {"size": "1Gi"}}));
        let s = connection(&m, "demo-conn", "p@ss/w:rd");
        assert_eq!(
            s.metadata.labels.clone().expect("labels")["redis.io/connection-secret"],
            "true"
        );
        assert_eq!(value(&s, "host").as_deref(), Some("demo-leader.ns.svc"));
        assert_eq!(
            value(&s, "url").as_deref(),
            Some("redis://default:p%40ss%2Fw%3Ard@demo-leader.ns.svc:6379")
        );
        assert_eq!(
            value(&s, "replica_url").as_deref(),
            Some("redis://default:p%40ss%2Fw%3Ard@demo-replica.ns.svc:6379")
        );
        assert_eq!(value(&s, "password").as_deref(), Some("p@ss/w:rd"));
        assert_eq!(value(&s, "mode").as_deref(), Some("standalone"));
        assert!(value(&s, "sentinel_host").is_none());
    }

    #[test]
    fn tls_and_sentinel_change_the_scheme_and_add_keys() {
        // (Sentinel mode with TLS is not supported yet: the two are checked apart.)
        let m = model(json!({"storage": {"size": "1Gi"}, "instances": 3,
            "tlsSecret": {"name": "t"}, "caSecret": {"name": "c"}}));
        let s = connection(&m, "c", "pw");
        assert!(
            value(&s, "url")
                .expect("url")
                .starts_with("rediss://default:pw@")
        );
        let m = model(json!({"storage": {"size": "1Gi"}, "mode": "sentinel", "instances": 3}));
        let s = connection(&m, "c", "pw");
        assert_eq!(value(&s, "sentinel_port").as_deref(), Some("26379"));
        assert_eq!(
            value(&s, "sentinel_host").as_deref(),
            Some("demo-sentinel.ns.svc")
        );
        assert_eq!(value(&s, "master_name").as_deref(), Some("demo"));
    }

    #[test]
    fn generated_secrets_are_owned_and_named_by_the_contract() {
        let m = model(json!({"storage": {"size": "1Gi"}}));
        assert_eq!(auth(&m, "x").metadata.name.as_deref(), Some("demo-auth"));
        assert_eq!(
            instance_token(&m, "t").metadata.name.as_deref(),
            Some("demo-instance-token")
        );
        let tls = instance_tls(&m, "c", "k", "ca");
        assert_eq!(tls.metadata.name.as_deref(), Some("demo-instance-tls"));
        assert_eq!(value(&tls, "ca.crt").as_deref(), Some("ca"));
        assert!(
            instance_ca(&m, "c", "k")
                .metadata
                .owner_references
                .is_some()
        );
    }
}
