//! Azurite, Microsoft's Azure Storage emulator (a real implementation of the Blob service that
//! verifies Shared Key and SAS signatures), for the Redis backup tests.
//!
//! Contract:
//! - [`ensure_installed`] makes sure the pinned [`VERSION`] is installed under
//!   `<cache>/azurite` (outside the repository): it returns at once when it is, else runs
//!   `npm install --prefix <cache>/azurite azurite@<VERSION>` (Node.js and npm must be on
//!   `PATH`; the npm registry must be reachable) and checks the result.
//! - [`AzuriteServer::start_at`] runs its Blob service alone on a loopback address and a free
//!   port, with its storage in its own temp dir, and returns once the service answers; dropping
//!   the server kills it and removes the dir. [`AzuriteServer::endpoint`] is the path-style
//!   service URL of the development account, [`ACCOUNT`] with key [`KEY`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::process::free_port;

/// The Azurite release the tests run.
pub const VERSION: &str = "3.37.0";
/// The development account every Azurite has.
pub const ACCOUNT: &str = "devstoreaccount1";
/// Its well-known key.
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Node starts Azurite in about a second on an idle machine; at a load average above 40 one start
/// took over a minute (a cold CI run beside four builds), so the bound is generous: it only
/// decides when a start that will never answer is reported.
const START_TIMEOUT: Duration = Duration::from_secs(180);
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Where Azurite is installed: `<cache>/azurite`.
pub fn install_dir() -> PathBuf {
    crate::plane::cache_dir().join("azurite")
}

fn main_js(dir: &Path) -> PathBuf {
    dir.join("node_modules/azurite/dist/src/blob/main.js")
}

fn installed_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("node_modules/azurite/package.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["version"].as_str().map(str::to_owned)
}

/// Installs Azurite [`VERSION`] when it is missing (see the module contract).
pub fn ensure_installed() -> anyhow::Result<()> {
    let dir = install_dir();
    if installed_version(&dir).as_deref() == Some(VERSION) && main_js(&dir).exists() {
        return Ok(());
    }
    for tool in ["node", "npm"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ensure!(
            found,
            "{tool} is missing: Node.js and npm are needed to install Azurite (the Azure \
             Storage emulator of the Redis backup tests)"
        );
    }
    std::fs::create_dir_all(&dir)?;
    eprintln!("installing azurite@{VERSION} into {}", dir.display());
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&dir)
        .arg(format!("azurite@{VERSION}"))
        .status()
        .context("running npm install")?;
    ensure!(status.success(), "npm install azurite@{VERSION} failed");
    ensure!(
        installed_version(&dir).as_deref() == Some(VERSION) && main_js(&dir).exists(),
        "npm installed azurite but {} is missing",
        main_js(&dir).display()
    );
    Ok(())
}

/// A running Azurite Blob service owned by a test.
#[derive(Debug)]
pub struct AzuriteServer {
    child: Child,
    dir: PathBuf,
    ip: std::net::Ipv4Addr,
    port: u16,
}

impl AzuriteServer {
    /// Starts the Blob service on loopback address `ip` (for example the process-backed nodes'
    /// gateway, where pods reach it).
    pub async fn start_at(ip: std::net::Ipv4Addr) -> anyhow::Result<Self> {
        ensure!(
            ip.is_loopback(),
            "Azurite listens on loopback addresses only, not {ip}"
        );
        ensure_installed()?;
        let mut last = None;
        // A port taken between free_port and Azurite's bind: try a fresh one.
        for _ in 0..3 {
            let mut server = Self::spawn(ip)?;
            match server.wait_ready().await {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e.context(server.log_tail())),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn spawn(ip: std::net::Ipv4Addr) -> anyhow::Result<Self> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("testenv-azurite-{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data"))?;
        let port = free_port()?;
        let child = Command::new("node")
            .arg(main_js(&install_dir()))
            .args([
                "--blobHost",
                &ip.to_string(),
                "--blobPort",
                &port.to_string(),
            ])
            .arg("--location")
            .arg(dir.join("data"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("azurite.log"))?)
            .stderr(std::fs::File::create(dir.join("azurite.err"))?)
            .spawn()
            .context("cannot start azurite (node)")?;
        Ok(Self {
            child,
            dir,
            ip,
            port,
        })
    }

    /// `http://<ip>:<port>/devstoreaccount1`.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}/{ACCOUNT}", self.ip, self.port)
    }

    /// Waits until the service gives any HTTP answer or the process exits.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()?;
        let deadline = Instant::now() + START_TIMEOUT;
        let mut delay = Duration::from_millis(50);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("azurite exited early ({status})");
            }
            // Any HTTP answer (an unauthenticated request gets 403) means it serves.
            if client.get(self.endpoint()).send().await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("azurite did not answer within {START_TIMEOUT:?}");
            }
            tokio::time::sleep(delay).await; // polling a condition with a deadline
            delay = (delay * 2).min(Duration::from_millis(250));
        }
    }

    fn log_tail(&self) -> String {
        let mut out = String::new();
        for f in ["azurite.log", "azurite.err"] {
            let log = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            out.push_str(&lines[lines.len().saturating_sub(10)..].join("\n"));
            out.push('\n');
        }
        format!("azurite log ({}):\n{out}", self.dir.display())
    }
}

impl Drop for AzuriteServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
