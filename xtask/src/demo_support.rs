//! What the operator demos share: building a binary of the workspace, running it as a child
//! process that stops with the demo, a kubeconfig for a ServiceAccount, namespaces, and
//! polling a condition with a deadline while watching those children.
//!
//! Children stay in our process group, so Ctrl-C on the demo stops them too; dropping a
//! [`Process`] stops it (SIGTERM, then SIGKILL after 15 s).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::serde_json;
use kube::Api;
use testenv::process::free_port;

use crate::kubectl;

/// How long a demo waits for anything to converge.
pub const DEADLINE: Duration = Duration::from_secs(180);

/// `deploy/<operator>` in the repository.
pub fn deploy_dir(operator: &str) -> PathBuf {
    let dir = testenv::workspace_root().join("deploy").join(operator);
    std::fs::canonicalize(&dir).unwrap_or(dir)
}

/// Builds binary `bin` of `package` and returns its path.
pub fn build_binary(package: &str, bin: &str) -> anyhow::Result<PathBuf> {
    let mut paths = build_binaries(&[(package, bin)])?;
    Ok(paths.remove(0))
}

/// Builds every `(package, bin)` in one cargo run (one feature resolution, so they share their
/// dependencies' builds) and returns their paths in order, from cargo's artifact messages (so
/// any target directory works).
pub fn build_binaries(targets: &[(&str, &str)]) -> anyhow::Result<Vec<PathBuf>> {
    let mut cmd = testenv::cargo::command();
    cmd.arg("build");
    for (package, bin) in targets {
        cmd.args(["-p", package, "--bin", bin]);
    }
    let out = cmd
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()?;
    let names: Vec<&str> = targets.iter().map(|(_, bin)| *bin).collect();
    anyhow::ensure!(
        out.status.success(),
        "cargo build of {} failed",
        names.join(", ")
    );
    let stdout = String::from_utf8(out.stdout)?;
    let artifacts: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .collect();
    names
        .iter()
        .map(|bin| {
            artifacts
                .iter()
                .filter(|m| m["target"]["name"] == *bin)
                .find_map(|m| m["executable"].as_str().map(PathBuf::from))
                .ok_or_else(|| anyhow::anyhow!("cargo reported no {bin} executable"))
        })
        .collect()
}

/// Writes a kubeconfig holding a fresh token of ServiceAccount `namespace/name` into the
/// plane's directory and returns its path.
pub fn service_account_kubeconfig(
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<PathBuf> {
    let kubeconfig = testenv::plane::plane_dir().join(format!("{name}.kubeconfig"));
    let token = rt.block_on(testenv::service_account_token(admin, namespace, name))?;
    testenv::write_kubeconfig_for_token(&kubeconfig, &token, namespace)?;
    Ok(kubeconfig)
}

/// A child process logging to `<plane>/logs/<name>.log`; stopped when dropped.
pub struct Process {
    child: Child,
    name: String,
    /// The log file (stdout and stderr, appended).
    pub log: PathBuf,
}

impl Process {
    /// Starts `cmd` (stdin closed, output to the log file).
    pub fn spawn(name: &str, mut cmd: Command) -> anyhow::Result<Self> {
        let logs = testenv::plane::plane_dir().join("logs");
        std::fs::create_dir_all(&logs)?;
        let log = logs.join(format!("{name}.log"));
        let file = File::options().create(true).append(true).open(&log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {name}: {e}"))?;
        Ok(Self {
            child,
            name: name.to_owned(),
            log,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the process has exited.
    pub fn ensure_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!(
                "{} exited ({status}); see {}",
                self.name,
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        testenv::process::stop_child(&mut self.child, Duration::from_secs(15));
    }
}

/// An operator binary run as a child process with leader election on and its metrics and
/// probe endpoints on free loopback ports.
pub struct Operator {
    /// The process.
    pub process: Process,
    /// `127.0.0.1:<port>` of `/metrics`.
    pub metrics: String,
    /// `127.0.0.1:<port>` of `/readyz` and `/healthz`.
    pub probes: String,
}

impl Operator {
    /// Starts `binary` with `KUBECONFIG=kubeconfig`, the shared operator flags and `extra`.
    pub fn start(
        binary: &Path,
        kubeconfig: &Path,
        lease_namespace: &str,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let name = binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "operator".into());
        let metrics = format!("127.0.0.1:{}", free_port()?);
        let probes = format!("127.0.0.1:{}", free_port()?);
        let mut cmd = Command::new(binary);
        cmd.arg("--leader-elect=true")
            .arg(format!("--lease-namespace={lease_namespace}"))
            .args(extra)
            .arg(format!("--metrics-addr={metrics}"))
            .arg(format!("--probe-addr={probes}"))
            .env("KUBECONFIG", kubeconfig);
        Ok(Self {
            process: Process::spawn(&name, cmd)?,
            metrics,
            probes,
        })
    }

    /// Prints who the operator runs as, its pid, logs and endpoints.
    pub fn describe(&self, namespace: &str, service_account: &str) {
        println!(
            "operator running as serviceaccount {namespace}/{service_account} (pid {}), logs: {}",
            self.process.pid(),
            self.process.log.display()
        );
        println!(
            "  metrics http://{}/metrics, probes http://{}/readyz",
            self.metrics, self.probes
        );
    }
}

/// `kubectl apply`s namespace `name`.
pub fn ensure_namespace(name: &str) -> anyhow::Result<()> {
    let file = std::env::temp_dir().join(format!("{name}-namespace.yaml"));
    std::fs::write(
        &file,
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"),
    )?;
    kubectl(&["apply", "-f", &file.display().to_string()])
}

/// Polls `probe` every half second until it yields true, one of `watched` dies, or
/// [`DEADLINE`] passes.
pub async fn poll<F, Fut>(what: &str, watched: &mut [&mut Process], probe: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    poll_within(what, DEADLINE, watched, probe).await
}

/// [`poll`] with its own deadline `within`, for a step known to take longer.
pub async fn poll_within<F, Fut>(
    what: &str,
    within: Duration,
    watched: &mut [&mut Process],
    mut probe: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + within;
    loop {
        for p in watched.iter_mut() {
            p.ensure_alive()?;
        }
        if probe().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = watched
                .iter()
                .map(|p| p.log.display().to_string())
                .collect();
            anyhow::bail!(
                "{what} did not happen within {within:?}; logs: {}",
                logs.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // polling a condition with a deadline
    }
}

/// Waits until Lease `namespace/name` has a holder.
pub async fn wait_for_leader(
    admin: &kube::Client,
    watched: &mut [&mut Process],
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), namespace);
    poll("the operator taking the leader lease", watched, || async {
        let lease = leases.get_opt(name).await?;
        let holder = lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        Ok(!holder.is_empty())
    })
    .await?;
    println!("the operator holds lease {namespace}/{name}");
    Ok(())
}
