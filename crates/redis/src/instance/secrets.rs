//! The Secrets redis-server needs, read from their projected files (never from the API, never
//! from the environment).
//!
//! Contract: [`read`] returns every secret the spec asks for, or `Err(why)` naming the first
//! file that is missing or empty — the instance manager then waits rather than start Redis
//! without its password (there is never a passwordless window). Values are trimmed of
//! surrounding whitespace, as upstream does. The auth Secret is `spec.authSecret` or, while
//! the operator has not set it yet, `<cluster>-auth`.

use std::path::{Path, PathBuf};

use crate::crd::RedisClusterSpec;
use crate::instance::config;
use crate::names;

/// The projected secrets of one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projected {
    /// The Redis password.
    pub password: String,
    /// The user's ACL rules (with `aclConfigSecret`).
    pub acl: Option<String>,
    /// The replica-mode source password (with `replicaMode.source.authSecretName`).
    pub source_password: Option<String>,
}

/// The auth Secret's name.
pub fn auth_secret(cluster: &str, spec: &RedisClusterSpec) -> String {
    spec.auth_secret
        .as_ref()
        .map(|s| s.name.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| names::auth_secret(cluster))
}

fn file(dir: &Path, secret: &str, key: &str) -> PathBuf {
    dir.join(secret).join(key)
}

fn read_key(dir: &Path, secret: &str, key: &str) -> Result<String, String> {
    let path = file(dir, secret, key);
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        Ok(_) => Err(format!(
            "waiting for Secret {secret}: {} is empty",
            path.display()
        )),
        Err(e) => Err(format!(
            "waiting for Secret {secret}: {}: {e}",
            path.display()
        )),
    }
}

/// Reads the projected secrets under `dir` that `spec` needs; the user TLS files under
/// `tls_dir` must exist too when TLS is on.
pub fn read(
    dir: &Path,
    tls_dir: &Path,
    cluster: &str,
    spec: &RedisClusterSpec,
) -> Result<Projected, String> {
    let password = read_key(dir, &auth_secret(cluster, spec), names::KEY_PASSWORD)?;
    let acl = match &spec.acl_config_secret {
        Some(s) => Some(read_key(dir, &s.name, names::KEY_ACL)?),
        None => None,
    };
    let source_password = match spec
        .replica_mode
        .as_ref()
        .filter(|r| r.enabled)
        .and_then(|r| r.source.as_ref())
        .map(|s| s.auth_secret_name.trim())
        .filter(|n| !n.is_empty())
    {
        Some(name) => Some(read_key(dir, name, names::KEY_PASSWORD)?),
        None => None,
    };
    if config::tls_enabled(spec) {
        for f in [names::KEY_TLS_CRT, names::KEY_TLS_KEY, names::KEY_CA_CRT] {
            let p = tls_dir.join(f);
            if !p.is_file() {
                return Err(format!(
                    "waiting for the TLS material: {} is missing",
                    p.display()
                ));
            }
        }
    }
    Ok(Projected {
        password,
        acl,
        source_password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> RedisClusterSpec {
        serde_json::from_value::<crate::crd::RedisCluster>(serde_json::json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster", "metadata": {"name": "demo"}, "spec": v
        }))
        .expect("cluster")
        .spec
    }

    fn put(dir: &Path, secret: &str, key: &str, value: &str) {
        std::fs::create_dir_all(dir.join(secret)).expect("mkdir");
        std::fs::write(dir.join(secret).join(key), value).expect("write");
    }

    #[test]
    fn every_needed_secret_must_be_projected() {
        let tmp = tempdir();
        let d = tmp.as_path();
        let s = spec(
            serde_json::json!({"storage": {"size": "1Gi"}, "aclConfigSecret": {"name": "acl"},
            "replicaMode": {"enabled": true, "source": {"host": "h", "authSecretName": "src"}}}),
        );
        let err = read(d, d, "demo", &s).unwrap_err();
        assert!(err.contains("demo-auth"), "{err}");
        put(d, "demo-auth", "password", "  secret\n");
        assert!(read(d, d, "demo", &s).unwrap_err().contains("Secret acl"));
        put(d, "acl", "acl", "user app on >x +@all\n");
        put(d, "src", "password", "");
        assert!(read(d, d, "demo", &s).unwrap_err().contains("is empty"));
        put(d, "src", "password", "upstream");
        let p = read(d, d, "demo", &s).expect("all there");
        assert_eq!(p.password, "secret");
        assert_eq!(p.acl.as_deref(), Some("user app on >x +@all"));
        assert_eq!(p.source_password.as_deref(), Some("upstream"));
        let tls = spec(
            serde_json::json!({"storage": {"size": "1Gi"}, "authSecret": {"name": "demo-auth"},
            "tlsSecret": {"name": "t"}, "caSecret": {"name": "c"}}),
        );
        assert!(read(d, d, "demo", &tls).unwrap_err().contains("tls.crt"));
        let _ = std::fs::remove_dir_all(d);
    }

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "redis-secrets-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("tmp");
        d
    }
}
