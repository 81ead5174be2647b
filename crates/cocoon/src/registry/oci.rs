//! The OCI distribution registry client (`OCI_REGISTRY`, reference §6.1).
//!
//! Contract (on top of the [`Registry`] contract):
//! - `OCI_REGISTRY` is `[https://|http://]host[:port][/path...]`; no scheme means https, and
//!   plain http must be asked for explicitly. The repository of a VM is `<path>/<vmName>`.
//! - Probe: `HEAD /v2/<repo>/manifests/<ref>` with the four manifest media types accepted.
//! - Delete: a `HEAD` resolves the tag to its `Docker-Content-Digest` (404 there: already
//!   absent), then `DELETE /v2/<repo>/manifests/<digest>`, because distribution refuses
//!   delete-by-tag. A reference containing ':' is a digest and is deleted directly.
//! - Auth: a 401 with a `Bearer` challenge exchanges the credentials (or nothing, anonymously)
//!   at the realm for a token with scope `repository:<repo>:pull,delete`, cached per scope;
//!   a 401 with a `Basic` challenge switches this client to basic credentials. The request
//!   is retried once; a second 401/403 is a [`RegistryError::Auth`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode};
use serde::Deserialize;

use super::config::{Credentials, body_prefix, http_client, status_error};
use super::{Registry, RegistryError};

/// The manifest media types a probe accepts (OCI manifest and index, docker v2 and list).
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.v2+json, \
application/vnd.docker.distribution.manifest.list.v2+json";

/// A parsed `OCI_REGISTRY` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciTarget {
    /// `scheme://host[:port]`.
    pub base: String,
    /// `host[:port]` (the docker config key).
    pub host: String,
    /// The repository path prefix without slashes at either end (may be empty).
    pub prefix: String,
}

/// A `WWW-Authenticate` challenge this client can answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// Token auth: get a token from `realm`.
    Bearer {
        /// The token endpoint.
        realm: String,
        /// The `service` parameter to pass on.
        service: Option<String>,
        /// The scope the registry asked for.
        scope: Option<String>,
    },
    /// Basic auth.
    Basic,
}

/// An OCI distribution registry holding one repository per VM.
#[derive(Debug)]
pub struct OciRegistry {
    client: reqwest::Client,
    target: OciTarget,
    credentials: Option<Credentials>,
    tokens: Mutex<HashMap<String, String>>,
    basic: AtomicBool,
}

#[derive(Deserialize)]
struct TokenResponse {
    token: Option<String>,
    access_token: Option<String>,
}

impl OciRegistry {
    /// A client for `target` (see [`OciRegistry::parse_target`]), trusting `ca_cert` too.
    pub fn new(
        target: &str,
        credentials: Option<Credentials>,
        ca_cert: Option<&Path>,
    ) -> Result<Self, RegistryError> {
        Ok(Self {
            client: http_client(ca_cert)?,
            target: Self::parse_target(target)?,
            credentials,
            tokens: Mutex::new(HashMap::new()),
            basic: AtomicBool::new(false),
        })
    }

    /// Parses `[https://|http://]host[:port][/path...]`.
    pub fn parse_target(value: &str) -> Result<OciTarget, RegistryError> {
        let value = value.trim();
        let (scheme, rest) = match value.split_once("://") {
            Some(("https", rest)) => ("https", rest),
            Some(("http", rest)) => ("http", rest),
            Some((other, _)) => {
                let msg = format!("OCI_REGISTRY {value:?}: unsupported scheme {other:?}");
                return Err(RegistryError::Config(msg));
            }
            None => ("https", value),
        };
        let (host, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() || host.contains(['@', '?', '#', ' ']) {
            let msg = format!("OCI_REGISTRY {value:?}: expected host[:port][/path]");
            return Err(RegistryError::Config(msg));
        }
        Ok(OciTarget {
            base: format!("{scheme}://{host}"),
            host: host.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
        })
    }

    /// The parsed target.
    pub fn target(&self) -> &OciTarget {
        &self.target
    }

    /// The repository of `vm_name`: `<prefix>/<vm_name>`.
    pub fn repository(&self, vm_name: &str) -> String {
        match self.target.prefix.as_str() {
            "" => vm_name.to_string(),
            prefix => format!("{prefix}/{vm_name}"),
        }
    }

    fn manifest_url(&self, repo: &str, reference: &str) -> String {
        format!("{}/v2/{repo}/manifests/{reference}", self.target.base)
    }

    /// Sends `method url`, answering one auth challenge; never returns a 401.
    async fn send(
        &self,
        op: &'static str,
        method: Method,
        repo: &str,
        url: &str,
    ) -> Result<Response, RegistryError> {
        let scope = format!("repository:{repo}:pull,delete");
        let resp = self.attempt(op, method.clone(), url, &scope).await?;
        if resp.status() != StatusCode::UNAUTHORIZED {
            return Ok(resp);
        }
        match challenge_of(resp.headers()) {
            Some(Challenge::Bearer { realm, service, .. }) => {
                let token = self.fetch_token(&realm, service.as_deref(), &scope).await?;
                self.tokens
                    .lock()
                    .expect("token cache")
                    .insert(scope.clone(), token);
            }
            Some(Challenge::Basic) if self.credentials.is_some() => {
                self.basic.store(true, Ordering::Relaxed);
            }
            Some(Challenge::Basic) => {
                let msg = format!("{op} {url}: basic auth required and no credentials");
                return Err(RegistryError::Auth(msg));
            }
            None => {
                let msg = format!("{op} {url}: 401 without a Bearer or Basic challenge");
                return Err(RegistryError::Auth(msg));
            }
        }
        let resp = self.attempt(op, method, url, &scope).await?;
        if matches!(
            resp.status(),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) {
            let (status, body) = (resp.status().as_u16(), body_prefix(resp).await);
            let msg = format!("{op} {url}: credentials refused: {status} {body}");
            return Err(RegistryError::Auth(msg));
        }
        Ok(resp)
    }

    /// One request with whatever authorization is known for `scope`.
    async fn attempt(
        &self,
        op: &'static str,
        method: Method,
        url: &str,
        scope: &str,
    ) -> Result<Response, RegistryError> {
        let mut req = self
            .client
            .request(method, url)
            .header(ACCEPT, MANIFEST_ACCEPT);
        let token = self.tokens.lock().expect("token cache").get(scope).cloned();
        if let Some(token) = token {
            req = req.header(AUTHORIZATION, format!("Bearer {token}"));
        } else if let Some(c) = self.basic_credentials() {
            req = req.basic_auth(&c.username, Some(&c.password));
        }
        req.send().await.map_err(|source| RegistryError::Transport {
            op,
            url: url.to_string(),
            source,
        })
    }

    fn basic_credentials(&self) -> Option<&Credentials> {
        self.credentials
            .as_ref()
            .filter(|_| self.basic.load(Ordering::Relaxed))
    }

    /// Exchanges the credentials (or nothing) at `realm` for a bearer token.
    async fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<String, RegistryError> {
        let mut query = vec![("scope", scope)];
        query.extend(service.map(|s| ("service", s)));
        let mut req = self.client.get(realm).query(&query);
        if let Some(c) = &self.credentials {
            req = req.basic_auth(&c.username, Some(&c.password));
        }
        let resp = req
            .send()
            .await
            .map_err(|source| RegistryError::Transport {
                op: "GET",
                url: realm.to_string(),
                source,
            })?;
        if !resp.status().is_success() {
            let (status, body) = (resp.status().as_u16(), body_prefix(resp).await);
            let msg = format!("token GET {realm}: {status} {body}");
            return Err(RegistryError::Auth(msg));
        }
        let parsed: TokenResponse = resp
            .json()
            .await
            .map_err(|e| RegistryError::Auth(format!("token GET {realm}: {e}")))?;
        parsed
            .token
            .or(parsed.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| RegistryError::Auth(format!("token GET {realm}: no token in answer")))
    }

    /// The digest `reference` names: itself when it is one, else the `HEAD` answer's
    /// `Docker-Content-Digest` (the tag itself when the registry sends none); `None` on 404.
    async fn resolve_digest(
        &self,
        repo: &str,
        reference: &str,
    ) -> Result<Option<String>, RegistryError> {
        if reference.contains(':') {
            return Ok(Some(reference.to_string()));
        }
        let url = self.manifest_url(repo, reference);
        let resp = self.send("HEAD", Method::HEAD, repo, &url).await?;
        match resp.status() {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => Ok(Some(
                resp.headers()
                    .get("Docker-Content-Digest")
                    .and_then(|v| v.to_str().ok())
                    .map_or_else(|| reference.to_string(), str::to_string),
            )),
            _ => Err(status_error("HEAD", url, resp).await),
        }
    }
}

#[async_trait::async_trait]
impl Registry for OciRegistry {
    async fn has_manifest(&self, repo: &str, reference: &str) -> Result<bool, RegistryError> {
        let repo = self.repository(repo);
        let url = self.manifest_url(&repo, reference);
        let resp = self.send("HEAD", Method::HEAD, &repo, &url).await?;
        match resp.status() {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(status_error("HEAD", url, resp).await),
        }
    }

    async fn delete_manifest(&self, repo: &str, reference: &str) -> Result<(), RegistryError> {
        let repo = self.repository(repo);
        let Some(digest) = self.resolve_digest(&repo, reference).await? else {
            return Ok(());
        };
        let url = self.manifest_url(&repo, &digest);
        let resp = self.send("DELETE", Method::DELETE, &repo, &url).await?;
        if resp.status().is_success() || resp.status() == StatusCode::NOT_FOUND {
            return Ok(());
        }
        Err(status_error("DELETE", url, resp).await)
    }
}

/// The first challenge among the `WWW-Authenticate` headers this client can answer.
fn challenge_of(headers: &HeaderMap) -> Option<Challenge> {
    headers
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(parse_challenge)
}

/// Parses one `WWW-Authenticate` value: `Bearer realm="…",service="…",scope="…"` or `Basic …`.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, params) = header.split_once(' ').unwrap_or((header, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let params = parse_params(params);
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    Some(Challenge::Bearer {
        realm: get("realm").filter(|r| !r.is_empty())?,
        service: get("service"),
        scope: get("scope"),
    })
}

/// `a="x,y", b=z` → `[(a, "x,y"), (b, "z")]` (keys lower-cased, quotes and escapes removed).
fn parse_params(mut rest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    loop {
        rest = rest.trim_start_matches([' ', ',', '\t']);
        let Some((key, after)) = rest.split_once('=') else {
            return out;
        };
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => take_quoted(quoted),
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_string(), &after[end..])
            }
        };
        out.push((key.trim().to_ascii_lowercase(), value));
        rest = tail;
    }
}

/// Reads a quoted string up to its closing quote; returns it and what follows.
fn take_quoted(s: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => value.extend(chars.next().map(|(_, c)| c)),
            '"' => return (value, &s[i + 1..]),
            c => value.push(c),
        }
    }
    (value, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenge_with_commas_inside_quotes() {
        let h = r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#;
        assert_eq!(
            parse_challenge(h),
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:a/b:pull,push".into()),
            })
        );
    }

    #[test]
    fn bearer_challenge_tolerates_spaces_case_and_unquoted_values() {
        let h = r#"bearer Realm=http://127.0.0.1:1/v2/token, service="ep\"och""#;
        let Some(Challenge::Bearer {
            realm,
            service,
            scope,
        }) = parse_challenge(h)
        else {
            panic!("not a bearer challenge");
        };
        assert_eq!(realm, "http://127.0.0.1:1/v2/token");
        assert_eq!(service.as_deref(), Some("ep\"och"));
        assert_eq!(scope, None);
    }

    #[test]
    fn basic_and_unknown_challenges() {
        assert_eq!(
            parse_challenge(r#"Basic realm="r""#),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge("Basic"), Some(Challenge::Basic));
        assert_eq!(parse_challenge(r#"Negotiate abc"#), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None, "no realm");
    }

    #[test]
    fn targets_default_to_https_and_keep_the_path_prefix() {
        let t = OciRegistry::parse_target("reg.example:5000/a/b/").unwrap();
        assert_eq!(t.base, "https://reg.example:5000");
        assert_eq!(t.host, "reg.example:5000");
        assert_eq!(t.prefix, "a/b");
        let t = OciRegistry::parse_target("http://127.0.0.1:5000").unwrap();
        assert_eq!(
            (t.base.as_str(), t.prefix.as_str()),
            ("http://127.0.0.1:5000", "")
        );
        assert!(OciRegistry::parse_target("ftp://x").is_err());
        assert!(OciRegistry::parse_target("/cocoon").is_err());
        assert!(OciRegistry::parse_target("user@host/x").is_err());
    }

    #[test]
    fn repository_is_prefix_slash_vm_name() {
        let with = OciRegistry::new("r.example/cocoon", None, None).unwrap();
        assert_eq!(with.repository("vk-ns-demo-0"), "cocoon/vk-ns-demo-0");
        let without = OciRegistry::new("r.example", None, None).unwrap();
        assert_eq!(without.repository("vk-ns-demo-0"), "vk-ns-demo-0");
    }
}
