//! Registry settings and what both clients share: choosing the client, credentials from a
//! docker config, CA bundles and the HTTP transport.
//!
//! Contract:
//! - [`RegistrySettings::build`] returns the OCI client when `oci_registry` is set (non-empty),
//!   else the epoch client. Nothing is contacted while building.
//! - Explicit OCI username/password win over the docker config; a missing docker config file
//!   means "no credentials", an unreadable or malformed one is a [`RegistryError::Config`].
//! - The transport is HTTP/1.1 only, TLS ≥ 1.2, 32 idle connections per host, 10 s connect and
//!   request timeouts; a CA bundle file is added to the built-in roots.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

use super::epoch::EpochRegistry;
use super::oci::OciRegistry;
use super::{RegistryError, SharedRegistry};

/// The epoch URL used when `EPOCH_URL` is not set.
pub const DEFAULT_EPOCH_URL: &str = "http://epoch.cocoon-system.svc:8080";

/// Per-request timeout of both clients (connect has the same bound).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the snapshot registry is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySettings {
    /// `OCI_REGISTRY`: `[https://|http://]host[:port][/path...]`; selects the OCI client.
    pub oci_registry: Option<String>,
    /// `EPOCH_URL`: the epoch base URL (used when `oci_registry` is unset).
    pub epoch_url: String,
    /// `EPOCH_TOKEN`: a static bearer token, sent when non-empty.
    pub epoch_token: Option<String>,
    /// `EPOCH_CA_CERT`: a PEM bundle added to the trusted roots of the epoch client.
    pub epoch_ca_cert: Option<PathBuf>,
    /// `OCI_CA_CERT`: a PEM bundle added to the trusted roots of the OCI client.
    pub oci_ca_cert: Option<PathBuf>,
    /// `OCI_USERNAME`: explicit registry user (wins over the docker config).
    pub oci_username: Option<String>,
    /// `OCI_PASSWORD`: explicit registry password.
    pub oci_password: Option<String>,
    /// `DOCKER_CONFIG`: the directory holding `config.json` (or the file itself); when unset,
    /// `$HOME/.docker/config.json`.
    pub docker_config: Option<PathBuf>,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        Self {
            oci_registry: None,
            epoch_url: DEFAULT_EPOCH_URL.to_string(),
            epoch_token: None,
            epoch_ca_cert: None,
            oci_ca_cert: None,
            oci_username: None,
            oci_password: None,
            docker_config: None,
        }
    }
}

impl RegistrySettings {
    /// Reads `OCI_REGISTRY`, `EPOCH_URL`, `EPOCH_TOKEN`, `EPOCH_CA_CERT`, `OCI_USERNAME`,
    /// `OCI_PASSWORD`, `OCI_CA_CERT` and `DOCKER_CONFIG`; empty values count as unset.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Self {
            oci_registry: var("OCI_REGISTRY"),
            epoch_url: var("EPOCH_URL").unwrap_or_else(|| DEFAULT_EPOCH_URL.to_string()),
            epoch_token: var("EPOCH_TOKEN"),
            epoch_ca_cert: var("EPOCH_CA_CERT").map(PathBuf::from),
            oci_ca_cert: var("OCI_CA_CERT").map(PathBuf::from),
            oci_username: var("OCI_USERNAME"),
            oci_password: var("OCI_PASSWORD"),
            docker_config: var("DOCKER_CONFIG").map(PathBuf::from),
        }
    }

    /// The registry these settings select (OCI when `oci_registry` is set, else epoch).
    pub fn build(&self) -> Result<SharedRegistry, RegistryError> {
        match self.oci_registry.as_deref().map(str::trim) {
            Some(target) if !target.is_empty() => {
                let host = OciRegistry::parse_target(target)?.host;
                let credentials = self.oci_credentials(&host)?;
                let oci = OciRegistry::new(target, credentials, self.oci_ca_cert.as_deref())?;
                Ok(Arc::new(oci))
            }
            _ => {
                let epoch = EpochRegistry::new(
                    &self.epoch_url,
                    self.epoch_token.clone(),
                    self.epoch_ca_cert.as_deref(),
                )?;
                Ok(Arc::new(epoch))
            }
        }
    }

    /// Credentials for `host`: the explicit username/password, else the docker config's.
    pub fn oci_credentials(&self, host: &str) -> Result<Option<Credentials>, RegistryError> {
        if let Some(username) = self.oci_username.clone().filter(|u| !u.is_empty()) {
            let password = self.oci_password.clone().unwrap_or_default();
            return Ok(Some(Credentials { username, password }));
        }
        match self.docker_config_file() {
            Some(file) => docker_config_credentials(&file, host),
            None => Ok(None),
        }
    }

    fn docker_config_file(&self) -> Option<PathBuf> {
        match &self.docker_config {
            Some(p) if p.is_dir() => Some(p.join("config.json")),
            Some(p) => Some(p.clone()),
            None => std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker/config.json")),
        }
    }
}

/// A registry user and password (or token used as a password).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// Credentials for `host` from the docker config file at `file`; `Ok(None)` when the file
/// does not exist or has no entry for the host.
pub fn docker_config_credentials(
    file: &Path,
    host: &str,
) -> Result<Option<Credentials>, RegistryError> {
    match std::fs::read_to_string(file) {
        Ok(text) => parse_docker_config(&text, host)
            .map_err(|e| RegistryError::Config(format!("{}: {e}", file.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RegistryError::Config(format!("{}: {e}", file.display()))),
    }
}

/// Credentials for `host` (`host[:port]`) from docker config JSON: the `auths` entry whose
/// key, without scheme and path, equals the host; `auth` (base64 `user:pass`) or
/// `username`/`password`.
pub fn parse_docker_config(json: &str, host: &str) -> Result<Option<Credentials>, String> {
    let config: DockerConfig = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let entry = config
        .auths
        .iter()
        .find(|(key, _)| auth_key_host(key).eq_ignore_ascii_case(host))
        .map(|(_, entry)| entry);
    let Some(entry) = entry else {
        return Ok(None);
    };
    if let Some(encoded) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| format!("auths.{host}.auth: {e}"))?;
        let text = String::from_utf8(raw).map_err(|e| format!("auths.{host}.auth: {e}"))?;
        let (username, password) = text
            .split_once(':')
            .ok_or_else(|| format!("auths.{host}.auth is not user:password"))?;
        return Ok(Some(Credentials {
            username: username.to_string(),
            password: password.to_string(),
        }));
    }
    Ok(entry.username.clone().map(|username| Credentials {
        username,
        password: entry.password.clone().unwrap_or_default(),
    }))
}

/// `https://host:port/v1/` → `host:port`.
fn auth_key_host(key: &str) -> &str {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    rest.split('/').next().unwrap_or(rest)
}

/// The shared HTTP transport, trusting the PEM bundle at `ca_cert` in addition to the roots.
pub fn http_client(ca_cert: Option<&Path>) -> Result<reqwest::Client, RegistryError> {
    let mut builder = reqwest::Client::builder()
        .http1_only()
        .min_tls_version(reqwest::tls::Version::TLS_1_2)
        .pool_max_idle_per_host(32)
        .connect_timeout(REQUEST_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("flotilla-cocoon/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = ca_cert {
        let pem = std::fs::read(path)
            .map_err(|e| RegistryError::Config(format!("CA bundle {}: {e}", path.display())))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| RegistryError::Config(format!("CA bundle {}: {e}", path.display())))?;
        if certs.is_empty() {
            let msg = format!("CA bundle {}: no PEM certificate", path.display());
            return Err(RegistryError::Config(msg));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| RegistryError::Config(format!("HTTP client: {e}")))
}

/// The first 512 bytes of a response body, lossily decoded (for error messages).
pub(crate) async fn body_prefix(resp: reqwest::Response) -> String {
    let bytes = resp.bytes().await.unwrap_or_default();
    let end = bytes.len().min(512);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A [`RegistryError::Status`] for `resp`, with the first 512 bytes of its body.
pub(crate) async fn status_error(
    op: &'static str,
    url: String,
    resp: reqwest::Response,
) -> RegistryError {
    let status = resp.status().as_u16();
    RegistryError::Status {
        op,
        url,
        status,
        body: body_prefix(resp).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn auth_field_is_base64_user_colon_password() {
        let json = format!(
            r#"{{"auths":{{"reg.example:5000":{{"auth":"{}"}}}}}}"#,
            b64("robot:pa:ss")
        );
        let c = parse_docker_config(&json, "reg.example:5000")
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("robot", "pa:ss")
        );
    }

    #[test]
    fn keys_with_scheme_and_path_match_the_host() {
        let json = r#"{"auths":{"https://reg.example/v1/":{"username":"u","password":"p"}}}"#;
        let c = parse_docker_config(json, "reg.example").unwrap().unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p"));
    }

    #[test]
    fn another_host_or_port_has_no_credentials() {
        let json = format!(
            r#"{{"auths":{{"reg.example":{{"auth":"{}"}}}}}}"#,
            b64("a:b")
        );
        assert_eq!(parse_docker_config(&json, "reg.example:5000"), Ok(None));
        assert_eq!(parse_docker_config(&json, "other.example"), Ok(None));
        assert_eq!(
            parse_docker_config(r#"{"credsStore":"x"}"#, "reg.example"),
            Ok(None)
        );
    }

    #[test]
    fn malformed_auth_is_an_error() {
        let bad_b64 = r#"{"auths":{"r":{"auth":"!!!"}}}"#;
        assert!(parse_docker_config(bad_b64, "r").is_err());
        let no_colon = format!(r#"{{"auths":{{"r":{{"auth":"{}"}}}}}}"#, b64("nocolon"));
        assert!(parse_docker_config(&no_colon, "r").is_err());
        assert!(parse_docker_config("not json", "r").is_err());
    }

    #[test]
    fn explicit_username_wins_and_a_missing_file_means_none() {
        let mut s = RegistrySettings {
            docker_config: Some(PathBuf::from("/nonexistent/flotilla/docker")),
            ..RegistrySettings::default()
        };
        assert_eq!(s.oci_credentials("r").unwrap(), None);
        s.oci_username = Some("u".into());
        s.oci_password = Some("p".into());
        let c = s.oci_credentials("r").unwrap().unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p"));
    }

    #[test]
    fn build_picks_oci_when_set_and_rejects_a_bad_ca_bundle() {
        assert!(RegistrySettings::default().build().is_ok());
        let oci = RegistrySettings {
            oci_registry: Some("127.0.0.1:5000/cocoon".into()),
            docker_config: Some(PathBuf::from("/nonexistent/flotilla/docker")),
            ..RegistrySettings::default()
        };
        assert!(oci.build().is_ok());
        let bad_ca = RegistrySettings {
            epoch_ca_cert: Some(PathBuf::from("/nonexistent/ca.pem")),
            ..RegistrySettings::default()
        };
        let err = bad_ca.build().err().expect("missing CA bundle is an error");
        assert_eq!(err.category(), "RegistryConfig");
    }

    #[test]
    fn credentials_debug_hides_the_password() {
        let c = Credentials {
            username: "u".into(),
            password: "secret".into(),
        };
        assert!(!format!("{c:?}").contains("secret"));
    }
}
