//! Pushing an [`Image`] to a registry with the OCI distribution API.
//!
//! Contract:
//! - The target is `[https://|http://]host[:port][/prefix]`; no scheme means https, plain http
//!   must be asked for (loopback registries). An image named `<binary>` goes to the repository
//!   `<prefix>/<binary>`.
//! - Each blob (layer, then config) is skipped when `HEAD /v2/<repo>/blobs/<digest>` answers
//!   200, else uploaded in one piece: `POST /v2/<repo>/blobs/uploads/` (202 + `Location`),
//!   then `PUT <Location>?digest=<digest>` with the bytes (201). The manifest follows with
//!   `PUT /v2/<repo>/manifests/<tag>` (201); its digest is the one returned.
//! - Auth is deliberately minimal: anonymous, or basic credentials on every request. A 401
//!   stops the push with the registry's challenge and a hint: registries with token auth
//!   (ghcr.io, Docker Hub, most clouds) take the OCI archive through skopeo or podman instead.
//! - https trusts the Mozilla roots built in, plus the PEM bundle given with `--ca-cert`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use reqwest::header::{CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use reqwest::{Client, RequestBuilder, Response, StatusCode, Url};

use super::oci::{Blob, Image, MANIFEST_TYPE};

/// A parsed `--push` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `scheme://host[:port]/`.
    pub base: Url,
    /// `host[:port]`, the start of the image names pushed there.
    pub host: String,
    /// The repository prefix without slashes at either end (may be empty).
    pub prefix: String,
}

impl Target {
    /// Parses `[https://|http://]host[:port][/prefix]`.
    pub fn parse(value: &str) -> anyhow::Result<Self> {
        let value = value.trim();
        let (scheme, rest) = match value.split_once("://") {
            Some((scheme @ ("http" | "https"), rest)) => (scheme, rest),
            Some((other, _)) => {
                bail!("--push {value:?}: scheme {other:?} is neither http nor https")
            }
            None => ("https", value),
        };
        let (host, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let base = Url::parse(&format!("{scheme}://{host}/"))
            .ok()
            .filter(|u| u.path() == "/" && u.username().is_empty() && !host.is_empty());
        let base =
            base.with_context(|| format!("--push {value:?}: expected host[:port][/prefix]"))?;
        Ok(Self {
            base,
            host: host.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
        })
    }

    /// The repository of the image `name`: `<prefix>/<name>`.
    pub fn repository(&self, name: &str) -> String {
        match self.prefix.as_str() {
            "" => name.to_string(),
            prefix => format!("{prefix}/{name}"),
        }
    }

    /// `host[:port]/<prefix>/<name>:<tag>`, the reference `docker pull` and pods use.
    pub fn reference(&self, name: &str, tag: &str) -> String {
        format!("{}/{}:{tag}", self.host, self.repository(name))
    }
}

/// A registry user and password.
#[derive(Clone)]
pub struct BasicAuth {
    /// The user name.
    pub username: String,
    /// The password (or token).
    pub password: String,
}

/// A client for one registry.
pub struct Pusher {
    client: Client,
    target: Target,
    auth: Option<BasicAuth>,
}

impl Pusher {
    /// A client for `target`, trusting the PEM bundle `ca_cert` besides the built-in roots.
    pub fn new(
        target: Target,
        auth: Option<BasicAuth>,
        ca_cert: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let mut builder = Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .user_agent(concat!("flotilla-xtask/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = ca_cert {
            let pem =
                std::fs::read(path).with_context(|| format!("--ca-cert {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--ca-cert {}", path.display()))?;
            ensure!(
                !certs.is_empty(),
                "--ca-cert {}: no PEM certificate",
                path.display()
            );
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Self {
            client: builder.build()?,
            target,
            auth,
        })
    }

    /// Pushes `image` as `<prefix>/<name>:<tag>`; returns the manifest digest.
    pub async fn push(&self, image: &Image, name: &str, tag: &str) -> anyhow::Result<String> {
        let repo = self.target.repository(name);
        for blob in [&image.layer, &image.config] {
            if !self.blob_exists(&repo, blob).await? {
                self.upload(&repo, blob).await?;
            }
        }
        let url = self.url(&format!("v2/{repo}/manifests/{tag}"))?;
        let resp = self
            .send(self.client.put(url.clone()))
            .header(CONTENT_TYPE, MANIFEST_TYPE)
            .body(image.manifest.bytes.clone())
            .send()
            .await
            .with_context(|| format!("PUT {url}"))?;
        expect(resp, StatusCode::CREATED, "PUT", &url).await?;
        Ok(image.manifest.digest.clone())
    }

    async fn blob_exists(&self, repo: &str, blob: &Blob) -> anyhow::Result<bool> {
        let url = self.url(&format!("v2/{repo}/blobs/{}", blob.digest))?;
        let resp = self.send(self.client.head(url.clone())).send().await;
        let resp = resp.with_context(|| format!("HEAD {url}"))?;
        match resp.status() {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(failure(resp, "HEAD", &url).await),
        }
    }

    async fn upload(&self, repo: &str, blob: &Blob) -> anyhow::Result<()> {
        let start = self.url(&format!("v2/{repo}/blobs/uploads/"))?;
        let resp = self.send(self.client.post(start.clone())).send().await;
        let resp = expect(
            resp.with_context(|| format!("POST {start}"))?,
            StatusCode::ACCEPTED,
            "POST",
            &start,
        )
        .await?;
        let location = resp
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .with_context(|| format!("POST {start}: 202 without a Location"))?;
        let mut put = start.join(location)?;
        put.query_pairs_mut().append_pair("digest", &blob.digest);
        let resp = self
            .send(self.client.put(put.clone()))
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(blob.bytes.clone())
            .send()
            .await
            .with_context(|| format!("PUT {put}"))?;
        expect(resp, StatusCode::CREATED, "PUT", &put).await?;
        Ok(())
    }

    fn url(&self, path: &str) -> anyhow::Result<Url> {
        Ok(self.target.base.join(path)?)
    }

    fn send(&self, req: RequestBuilder) -> RequestBuilder {
        match &self.auth {
            Some(a) => req.basic_auth(&a.username, Some(&a.password)),
            None => req,
        }
    }
}

/// `resp` when its status is `want`, else an error saying what the registry answered.
async fn expect(resp: Response, want: StatusCode, op: &str, url: &Url) -> anyhow::Result<Response> {
    if resp.status() == want {
        return Ok(resp);
    }
    Err(failure(resp, op, url).await)
}

async fn failure(resp: Response, op: &str, url: &Url) -> anyhow::Error {
    let status = resp.status();
    if status == StatusCode::UNAUTHORIZED {
        let challenge = resp
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|c| c.to_str().ok())
            .unwrap_or("none")
            .to_string();
        return anyhow::anyhow!(
            "{op} {url}: 401 (challenge: {challenge}). This push sends no credentials or basic \
             ones (--username, REGISTRY_PASSWORD); for a registry with token auth push the OCI \
             archive with `skopeo copy oci-archive:<file> docker://<reference>` or \
             `podman load -i <file>` and `podman push`"
        );
    }
    let body = resp.text().await.unwrap_or_default();
    let body: String = body.chars().take(512).collect();
    anyhow::anyhow!("{op} {url}: {status} {body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_like_oci_registry_settings() {
        /// `--push` value → (base URL, host, prefix), `None` when refused.
        type Case = (
            &'static str,
            Option<(&'static str, &'static str, &'static str)>,
        );
        let cases: &[Case] = &[
            (
                "http://127.0.0.1:5000/flotilla",
                Some(("http://127.0.0.1:5000/", "127.0.0.1:5000", "flotilla")),
            ),
            (
                "registry.example.com",
                Some(("https://registry.example.com/", "registry.example.com", "")),
            ),
            (
                "https://r.example.com/a/b/",
                Some(("https://r.example.com/", "r.example.com", "a/b")),
            ),
            (
                " localhost:5000/x ",
                Some(("https://localhost:5000/", "localhost:5000", "x")),
            ),
            ("ftp://r.example.com/x", None),
            ("", None),
            ("http:///x", None),
            ("user@r.example.com/x", None),
        ];
        for (value, expected) in cases {
            let got = Target::parse(value).ok();
            let got = got
                .as_ref()
                .map(|t| (t.base.as_str(), t.host.as_str(), t.prefix.as_str()));
            assert_eq!(got, *expected, "{value:?}");
        }
    }

    #[test]
    fn references_join_host_prefix_name_and_tag() {
        let t = Target::parse("http://127.0.0.1:5000/flotilla").unwrap();
        assert_eq!(t.repository("cocoon-operator"), "flotilla/cocoon-operator");
        assert_eq!(
            t.reference("cocoon-operator", "0.1.0"),
            "127.0.0.1:5000/flotilla/cocoon-operator:0.1.0"
        );
        let bare = Target::parse("localhost:5000").unwrap();
        assert_eq!(bare.reference("x", "1"), "localhost:5000/x:1");
    }
}
