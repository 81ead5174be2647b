//! A real OCI distribution registry for tests, and a minimal client to push and pull tags.
//!
//! Contract:
//! - [`RegistryServer`] runs Debian's `docker-registry` (distribution v2.8) on 127.0.0.1 (or
//!   another loopback address, [`RegistryServer::start_at`], e.g. the process-backed nodes'
//!   gateway so pods reach it) and a
//!   free port, with filesystem storage in its own temp dir and manifest deletion enabled;
//!   optionally behind htpasswd basic auth. Start returns once `GET /v2/` answers; dropping
//!   the server kills the process and removes the temp dir.
//! - [`RegistryServer::requests`] counts the registry's access-log lines (one per request it
//!   served), leaving out the readiness probes. Distribution writes the line before it flushes
//!   a response of up to a few KiB (manifests, HEADs, small blobs), so such a request is
//!   counted by the time the client has its answer; a large blob may be counted a moment later.
//! - [`push_tag`] stores `payload` as the single layer of an OCI image manifest at `repo:tag`;
//!   [`pull_tag`] returns that layer (checked against its digest), `None` when the tag is absent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use reqwest::{RequestBuilder, StatusCode};
use sha2::{Digest, Sha256};

use crate::process::free_port;

/// Where Debian's `docker-registry` package installs the registry.
pub const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

/// Makes sure [`REGISTRY_BINARY`] exists: installs Debian's `docker-registry` package with
/// apt-get when it is missing and this process may (root with apt-get), else explains what to
/// install. Its service is not started: tests run their own servers on free loopback ports.
pub fn ensure_installed() -> anyhow::Result<()> {
    crate::packages::ensure(
        REGISTRY_BINARY,
        "docker-registry",
        "a real OCI registry for the cocoon tests",
    )
}

const PROBE_AGENT: &str = "testenv-registry-ready";
const START_TIMEOUT: Duration = Duration::from_secs(30);
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A running `docker-registry` process owned by a test.
#[derive(Debug)]
pub struct RegistryServer {
    child: Child,
    dir: PathBuf,
    ip: std::net::Ipv4Addr,
    port: u16,
}

impl RegistryServer {
    /// An anonymous registry.
    pub async fn start() -> anyhow::Result<Self> {
        Self::launch(None, std::net::Ipv4Addr::LOCALHOST).await
    }

    /// An anonymous registry listening on `ip` (a loopback address of this host, such as
    /// [`crate::procnode::gateway`], where pods of the process-backed nodes reach it).
    pub async fn start_at(ip: std::net::Ipv4Addr) -> anyhow::Result<Self> {
        ensure!(
            ip.is_loopback(),
            "the registry listens on loopback addresses only, not {ip}"
        );
        Self::launch(None, ip).await
    }

    /// A registry that requires `user`/`password` (htpasswd, bcrypt) on every request.
    pub async fn start_with_basic_auth(user: &str, password: &str) -> anyhow::Result<Self> {
        Self::launch(Some((user, password)), std::net::Ipv4Addr::LOCALHOST).await
    }

    /// `http://<ip>:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.host())
    }

    /// `<ip>:<port>`.
    pub fn host(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// Requests served so far (readiness probes left out).
    pub fn requests(&self) -> u64 {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.starts_with("127.") && !l.contains(PROBE_AGENT))
            .count() as u64
    }

    /// Requests served so far (readiness probes left out), counted by [`access_key`]:
    /// `"<client> <METHOD> <kind> <status>"`, e.g. `"flotilla-cocoon HEAD manifests 404"`.
    pub fn requests_by(&self) -> std::collections::BTreeMap<String, u64> {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        let mut out = std::collections::BTreeMap::new();
        for line in log
            .lines()
            .filter(|l| l.starts_with("127.") && !l.contains(PROBE_AGENT))
        {
            *out.entry(access_key(line)).or_insert(0) += 1;
        }
        out
    }

    async fn launch(auth: Option<(&str, &str)>, ip: std::net::Ipv4Addr) -> anyhow::Result<Self> {
        ensure!(
            Path::new(REGISTRY_BINARY).exists(),
            "{REGISTRY_BINARY} is missing: install Debian's docker-registry package \
             (apt-get install docker-registry)"
        );
        let mut last = None;
        // A port taken between free_port and the registry's bind makes the process exit; a
        // fresh port is tried then.
        for _ in 0..3 {
            let mut server = Self::spawn(auth, ip)?;
            match server.wait_ready().await {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e.context(server.log_tail())),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn spawn(auth: Option<(&str, &str)>, ip: std::net::Ipv4Addr) -> anyhow::Result<Self> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("testenv-registry-{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data"))?;
        let port = free_port()?;
        let config = render_config(&dir, ip, port, auth.is_some());
        std::fs::write(dir.join("config.yml"), config)?;
        if let Some((user, password)) = auth {
            let hash = bcrypt::hash(password, 4)?;
            std::fs::write(dir.join("htpasswd"), format!("{user}:{hash}\n"))?;
        }
        let child = Command::new(REGISTRY_BINARY)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("access.log"))?)
            .stderr(std::fs::File::create(dir.join("registry.log"))?)
            .spawn()
            .with_context(|| format!("cannot start {REGISTRY_BINARY}"))?;
        Ok(Self {
            child,
            dir,
            ip,
            port,
        })
    }

    /// Waits until `GET /v2/` gets any HTTP answer (401 included) or the process exits.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = reqwest::Client::builder()
            .user_agent(PROBE_AGENT)
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()?;
        let deadline = Instant::now() + START_TIMEOUT;
        let mut delay = Duration::from_millis(20);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("docker-registry exited early ({status})");
            }
            if client
                .get(format!("{}/v2/", self.url()))
                .send()
                .await
                .is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("docker-registry did not answer GET /v2/ within {START_TIMEOUT:?}");
            }
            tokio::time::sleep(delay).await; // polling a condition with a deadline
            delay = (delay * 2).min(Duration::from_millis(250));
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        format!("docker-registry log ({}):\n{tail}", self.dir.display())
    }
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn render_config(dir: &Path, ip: std::net::Ipv4Addr, port: u16, basic_auth: bool) -> String {
    let mut config = format!(
        "version: 0.1\n\
         log:\n  level: warn\n\
         storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
         http:\n  addr: {ip}:{port}\n  secret: testenv-registry-{port}\n",
        data = dir.join("data").display(),
    );
    if basic_auth {
        config.push_str(&format!(
            "auth:\n  htpasswd:\n    realm: testenv\n    path: {}\n",
            dir.join("htpasswd").display()
        ));
    }
    config
}

/// The key of one access-log line (combined log format: `ip - - [date] "METHOD path proto"
/// status size "referer" "agent"`): the agent's product name (`-` when it sent none), the
/// method, the kind of path (`manifests`, `blobs`, `uploads`, `base` for `/v2/`, `other`) and
/// the status code.
pub fn access_key(line: &str) -> String {
    let quoted: Vec<&str> = line.split('"').collect();
    let request: Vec<&str> = quoted
        .get(1)
        .copied()
        .unwrap_or_default()
        .split(' ')
        .collect();
    let method = request.first().copied().unwrap_or("?");
    let path = request.get(1).copied().unwrap_or_default();
    let status = quoted
        .get(2)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or("?");
    let agent = quoted
        .get(5)
        .map(|a| a.split(['/', ' ']).next().unwrap_or_default())
        .filter(|a| !a.is_empty())
        .unwrap_or("-");
    let path = path.split('?').next().unwrap_or_default();
    let kind = if path.trim_end_matches('/') == "/v2" {
        "base"
    } else if path.contains("/blobs/uploads") {
        "uploads"
    } else if path.contains("/blobs/") {
        "blobs"
    } else if path.contains("/manifests/") {
        "manifests"
    } else {
        "other"
    };
    format!("{agent} {method} {kind} {status}")
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

fn with_auth(req: RequestBuilder, basic: Option<(&str, &str)>) -> RequestBuilder {
    match basic {
        Some((user, password)) => req.basic_auth(user, Some(password)),
        None => req,
    }
}

/// Uploads `bytes` as a blob of `repo` (monolithic: POST, then PUT `?digest=`).
async fn upload_blob(
    client: &reqwest::Client,
    base: &reqwest::Url,
    basic: Option<(&str, &str)>,
    repo: &str,
    bytes: &[u8],
) -> anyhow::Result<String> {
    let digest = digest_of(bytes);
    let start = base.join(&format!("/v2/{repo}/blobs/uploads/"))?;
    let resp = with_auth(client.post(start.clone()), basic).send().await?;
    ensure!(
        resp.status() == StatusCode::ACCEPTED,
        "POST {start}: {}",
        resp.status()
    );
    let location = resp
        .headers()
        .get(reqwest::header::LOCATION)
        .context("blob upload answer has no Location")?
        .to_str()?;
    let mut put = base.join(location)?;
    put.query_pairs_mut().append_pair("digest", &digest);
    let resp = with_auth(client.put(put.clone()), basic)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(bytes.to_vec())
        .send()
        .await?;
    ensure!(
        resp.status() == StatusCode::CREATED,
        "PUT {put}: {}",
        resp.status()
    );
    Ok(digest)
}

/// Stores `payload` at `repo:tag` as the single layer of an OCI image manifest.
pub async fn push_tag(
    base_url: &str,
    basic: Option<(&str, &str)>,
    repo: &str,
    tag: &str,
    payload: &[u8],
) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let base = reqwest::Url::parse(base_url)?;
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let config_digest = upload_blob(&client, &base, basic, repo, config).await?;
    let layer_digest = upload_blob(&client, &base, basic, repo, payload).await?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": payload.len()}],
    });
    let url = base.join(&format!("/v2/{repo}/manifests/{tag}"))?;
    let resp = with_auth(client.put(url.clone()), basic)
        .header(reqwest::header::CONTENT_TYPE, MANIFEST_TYPE)
        .body(serde_json::to_vec(&manifest)?)
        .send()
        .await?;
    let status = resp.status();
    ensure!(
        status == StatusCode::CREATED,
        "PUT {url}: {status} {}",
        resp.text().await.unwrap_or_default()
    );
    Ok(())
}

/// The first layer of `repo:tag`, or `None` when the tag does not exist.
pub async fn pull_tag(
    base_url: &str,
    basic: Option<(&str, &str)>,
    repo: &str,
    tag: &str,
) -> anyhow::Result<Option<Vec<u8>>> {
    let client = reqwest::Client::new();
    let base = reqwest::Url::parse(base_url)?;
    let url = base.join(&format!("/v2/{repo}/manifests/{tag}"))?;
    let resp = with_auth(client.get(url.clone()), basic)
        .header(reqwest::header::ACCEPT, MANIFEST_TYPE)
        .send()
        .await?;
    if resp.status() == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    ensure!(
        resp.status() == StatusCode::OK,
        "GET {url}: {}",
        resp.status()
    );
    let manifest: serde_json::Value = resp.json().await?;
    let digest = manifest["layers"][0]["digest"]
        .as_str()
        .with_context(|| format!("GET {url}: manifest has no layer"))?
        .to_string();
    let blob = base.join(&format!("/v2/{repo}/blobs/{digest}"))?;
    let resp = with_auth(client.get(blob.clone()), basic).send().await?;
    ensure!(
        resp.status() == StatusCode::OK,
        "GET {blob}: {}",
        resp.status()
    );
    let bytes = resp.bytes().await?.to_vec();
    ensure!(digest_of(&bytes) == digest, "GET {blob}: digest mismatch");
    Ok(Some(bytes))
}

/// Whether `repo:tag` exists (`HEAD` on the manifest: 200 → true, 404 → false).
pub async fn tag_exists(
    base_url: &str,
    basic: Option<(&str, &str)>,
    repo: &str,
    tag: &str,
) -> anyhow::Result<bool> {
    let url = reqwest::Url::parse(base_url)?.join(&format!("/v2/{repo}/manifests/{tag}"))?;
    let resp = with_auth(reqwest::Client::new().head(url.clone()), basic)
        .header(reqwest::header::ACCEPT, MANIFEST_TYPE)
        .send()
        .await?;
    match resp.status() {
        StatusCode::OK => Ok(true),
        StatusCode::NOT_FOUND => Ok(false),
        other => bail!("HEAD {url}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_lines_are_keyed_by_agent_method_kind_and_status() {
        let line = r#"127.0.0.1 - - [26/Nov/2026:22:00:00 +0000] "HEAD /v2/vk-a/manifests/hibernate HTTP/1.1" 404 96 "" "flotilla-cocoon/0.1.0""#;
        assert_eq!(access_key(line), "flotilla-cocoon HEAD manifests 404");
        let line = r#"127.0.0.1 - - [26/Nov/2026:22:00:00 +0000] "PUT /v2/vk-a/blobs/uploads/u?digest=sha256:1 HTTP/1.1" 201 0 "" """#;
        assert_eq!(access_key(line), "- PUT uploads 201");
        let line = r#"127.0.0.1 - - [26/Nov/2026:22:00:00 +0000] "GET /v2/ HTTP/1.1" 200 2 "" "x""#;
        assert_eq!(access_key(line), "x GET base 200");
    }

    #[tokio::test]
    async fn push_then_pull_round_trips_and_requests_are_counted() {
        let server = RegistryServer::start().await.unwrap();
        assert_eq!(server.requests(), 0, "readiness probes are not counted");
        let url = server.url();
        assert!(
            !tag_exists(&url, None, "cocoon/vm-a", "hibernate")
                .await
                .unwrap()
        );
        assert_eq!(
            pull_tag(&url, None, "cocoon/vm-a", "hibernate")
                .await
                .unwrap(),
            None
        );
        push_tag(&url, None, "cocoon/vm-a", "hibernate", b"snapshot-1")
            .await
            .unwrap();
        assert!(
            tag_exists(&url, None, "cocoon/vm-a", "hibernate")
                .await
                .unwrap()
        );
        let pulled = pull_tag(&url, None, "cocoon/vm-a", "hibernate")
            .await
            .unwrap();
        assert_eq!(pulled.as_deref(), Some(&b"snapshot-1"[..]));
        // 2 HEAD/GET misses, push (2 blobs × 2 + manifest), HEAD, GET manifest + blob.
        assert_eq!(server.requests(), 2 + 5 + 1 + 2);
    }

    #[tokio::test]
    async fn basic_auth_registry_needs_the_right_password() {
        let server = RegistryServer::start_with_basic_auth("robot", "s3cret")
            .await
            .unwrap();
        let url = server.url();
        assert!(push_tag(&url, None, "vm-b", "latest", b"x").await.is_err());
        let wrong = Some(("robot", "nope"));
        assert!(tag_exists(&url, wrong, "vm-b", "latest").await.is_err());
        let right = Some(("robot", "s3cret"));
        push_tag(&url, right, "vm-b", "latest", b"x").await.unwrap();
        assert!(tag_exists(&url, right, "vm-b", "latest").await.unwrap());
    }

    #[tokio::test]
    async fn drop_stops_the_process_and_removes_its_dir() {
        let server = RegistryServer::start().await.unwrap();
        let (url, dir) = (server.url(), server.dir.clone());
        drop(server);
        assert!(!dir.exists());
        assert!(reqwest::get(format!("{url}/v2/")).await.is_err());
    }
}
