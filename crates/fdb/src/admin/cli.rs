//! The real admin and lock clients: `fdbcli`, `fdbbackup` and `fdbrestore` from
//! `$FDB_BINARY_DIR/<major.minor>/` (the full version for release candidates), run exactly as
//! upstream's CLI client runs them.
//!
//! Contract of one call ([`CliAdminClient::run`]):
//! - a temporary cluster file with the cluster's connection string under
//!   `<tmp>/<uid>-cli/`, removed afterwards;
//! - arguments `--exec "<command>"` (or the given arguments), `-C <file>`
//!   (`--dest_cluster_file` for fdbrestore) unless the call needs none, the knobs for
//!   fdbbackup/fdbrestore, `--log [--trace_format <f>] --log-dir|--logdir <dir>` when
//!   `FDB_NETWORK_OPTION_TRACE_ENABLE` is set, and for fdbcli `--timeout <s>` (10 s, or
//!   40 s for slow calls; the operator's `--cli-timeout` and `--max-cli-timeout`) with a
//!   hard kill at twice the timeout (other binaries: at the timeout);
//! - the environment without the network options that would load external clients;
//! - a failed run's output classified by substrings: `Specified timeout reached` is a
//!   timeout, `Backup does not exist` and `A backup was not running on tag` their own errors.
//!
//! Upstream reads status and the lock keys through the client library; without libfdb_c
//! this client does everything with fdbcli: `status json`, `get`/`getrange`/`set`/`clear`
//! with `option on ACCESS_SYSTEM_KEYS`, and the lock's read-modify-write as a transaction
//! (`begin; get; set; commit`) whose own read proves (or disproves) the decision (see
//! [`CliLockClient`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::keys::{self, escape, key_bytes, pack_lock, parse_get, parse_getrange, unpack_lock};
use super::lock::{self, LockRecord, TakeDecision};
use super::status::{self, FdbStatus, StatusError};
use super::{
    AdminClient, AdminError, ClusterTarget, DEFAULT_TIMEOUT, LiveBackupStatus, LockClient,
    MAX_TIMEOUT,
};
use crate::crd::{
    DatabaseConfiguration, FdbVersion, FoundationDBBackup, FoundationDBRestore, LockDenyListEntry,
    ProcessAddress,
};

/// `fdbcli`.
pub const FDBCLI: &str = "fdbcli";
/// `fdbbackup`.
pub const FDBBACKUP: &str = "fdbbackup";
/// `fdbrestore`.
pub const FDBRESTORE: &str = "fdbrestore";

/// Where the binaries are and how they trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryConfig {
    /// `$FDB_BINARY_DIR`: one directory per version (`7.1/fdbcli`).
    pub binary_dir: PathBuf,
    /// `$FDB_NETWORK_OPTION_TRACE_ENABLE`: trace into this directory.
    pub trace_dir: Option<String>,
    /// `$FDB_NETWORK_OPTION_TRACE_FORMAT` (default `xml`).
    pub trace_format: Option<String>,
    /// Where temporary cluster files go.
    pub tmp_dir: PathBuf,
    /// fdbcli's `--timeout` for ordinary calls (upstream's `--cli-timeout`, 10 s).
    pub cli_timeout: Duration,
    /// fdbcli's `--timeout` for slow calls such as `status json` and a blocking `exclude`
    /// (upstream's `--max-cli-timeout`, 40 s).
    pub max_cli_timeout: Duration,
}

/// Network options removed from the binaries' environment (as upstream does).
pub const EXCLUDED_ENV: [&str; 4] = [
    "FDB_NETWORK_OPTION_EXTERNAL_CLIENT_DIRECTORY",
    "FDB_NETWORK_OPTION_IGNORE_EXTERNAL_CLIENT_FAILURES",
    "FDB_NETWORK_OPTION_CLIENT_THREADS_PER_VERSION",
    "FDB_NETWORK_OPTION_DISABLE_LOCAL_CLIENT",
];

impl BinaryConfig {
    /// From the environment, as upstream reads it.
    pub fn from_env() -> Self {
        BinaryConfig {
            binary_dir: std::env::var_os("FDB_BINARY_DIR")
                .map(PathBuf::from)
                .unwrap_or_default(),
            trace_dir: std::env::var("FDB_NETWORK_OPTION_TRACE_ENABLE")
                .ok()
                .filter(|s| !s.is_empty()),
            trace_format: std::env::var("FDB_NETWORK_OPTION_TRACE_FORMAT")
                .ok()
                .filter(|s| !s.is_empty()),
            tmp_dir: std::env::temp_dir(),
            cli_timeout: DEFAULT_TIMEOUT,
            max_cli_timeout: MAX_TIMEOUT,
        }
    }

    /// The same configuration with fdbcli timeouts `cli` (ordinary calls) and `max` (slow
    /// calls).
    #[must_use]
    pub fn with_timeouts(mut self, cli: Duration, max: Duration) -> Self {
        self.cli_timeout = cli;
        self.max_cli_timeout = max;
        self
    }

    /// `<dir>/<major.minor>/<binary>` (full version for a release candidate).
    pub fn binary_path(&self, binary: &str, version: &str) -> PathBuf {
        let v = FdbVersion::parse(version).unwrap_or_default();
        let dir = if v.release_candidate > 0 {
            v.to_string()
        } else {
            v.compact()
        };
        self.binary_dir.join(dir).join(binary)
    }
}

/// One invocation of a binary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Invocation {
    /// `fdbcli` (default), `fdbbackup` or `fdbrestore`.
    pub binary: &'static str,
    /// The fdbcli command for `--exec` (when `args` is empty).
    pub command: String,
    /// Explicit arguments instead of `--exec`.
    pub args: Vec<String>,
    /// The version whose binary to use (default: the running version).
    pub version: Option<String>,
    /// The timeout (default 10 s).
    pub timeout: Option<Duration>,
    /// Pass no cluster file.
    pub ignore_cluster_file: bool,
}

impl Invocation {
    /// An fdbcli `--exec` of `command`.
    pub fn exec(command: impl Into<String>) -> Self {
        Invocation {
            binary: FDBCLI,
            command: command.into(),
            ..Default::default()
        }
    }

    /// `binary` with explicit arguments.
    pub fn with_args(binary: &'static str, args: Vec<String>) -> Self {
        Invocation {
            binary,
            args,
            ..Default::default()
        }
    }

    fn is_fdbcli(&self) -> bool {
        self.binary == FDBCLI
    }

    fn timeout(&self, config: &BinaryConfig) -> Duration {
        self.timeout.unwrap_or(config.cli_timeout)
    }

    /// The arguments and the hard timeout, exactly as upstream builds them.
    pub fn arguments(
        &self,
        cluster_file: &Path,
        knobs: &[String],
        config: &BinaryConfig,
    ) -> (Vec<String>, Duration) {
        let mut args = self.args.clone();
        if args.is_empty() {
            args = vec!["--exec".into(), self.command.clone()];
        }
        if !self.ignore_cluster_file {
            let flag = if self.binary == FDBRESTORE {
                "--dest_cluster_file"
            } else {
                "-C"
            };
            args.push(flag.into());
            args.push(cluster_file.display().to_string());
        }
        if !self.is_fdbcli() {
            args.extend(knobs.iter().cloned());
        }
        if let Some(dir) = &config.trace_dir {
            args.push("--log".into());
            if self.is_fdbcli() {
                args.push("--trace_format".into());
                args.push(config.trace_format.clone().unwrap_or_else(|| "xml".into()));
            }
            args.push(
                if self.is_fdbcli() {
                    "--log-dir"
                } else {
                    "--logdir"
                }
                .into(),
            );
            args.push(dir.clone());
        }
        let timeout = self.timeout(config);
        let mut hard = timeout;
        if self.is_fdbcli() {
            args.push("--timeout".into());
            args.push(timeout.as_secs().to_string());
            hard += timeout;
        }
        (args, hard)
    }
}

/// A finished command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutput {
    /// Exit status 0.
    pub success: bool,
    /// The exit code, if it exited.
    pub code: Option<i32>,
    /// stdout followed by stderr.
    pub output: String,
}

/// Runs binaries (the real one spawns processes; tests record argv).
#[async_trait]
pub trait CommandRunner: Send + Sync {
    /// Runs `program` with `args`, killing it after `hard_timeout`.
    async fn run(
        &self,
        program: &Path,
        args: &[String],
        hard_timeout: Duration,
    ) -> Result<CommandOutput, AdminError>;
}

/// Spawns the binary as a child process.
#[derive(Clone, Debug, Default)]
pub struct ProcessRunner;

#[async_trait]
impl CommandRunner for ProcessRunner {
    async fn run(
        &self,
        program: &Path,
        args: &[String],
        hard_timeout: Duration,
    ) -> Result<CommandOutput, AdminError> {
        let name = program.display().to_string();
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for key in EXCLUDED_ENV {
            cmd.env_remove(key);
        }
        tracing::debug!(program = %name, ?args, "running command");
        let child = cmd.spawn().map_err(|e| AdminError::Spawn {
            binary: name.clone(),
            error: e.to_string(),
        })?;
        let out = match tokio::time::timeout(hard_timeout, child.wait_with_output()).await {
            Ok(out) => out.map_err(|e| AdminError::Spawn {
                binary: name.clone(),
                error: e.to_string(),
            })?,
            Err(_) => {
                return Err(AdminError::HardTimeout {
                    binary: name,
                    after: hard_timeout,
                });
            }
        };
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(CommandOutput {
            success: out.status.success(),
            code: out.status.code(),
            output,
        })
    }
}

/// The admin client over the binaries.
#[derive(Clone)]
pub struct CliAdminClient {
    config: Arc<BinaryConfig>,
    runner: Arc<dyn CommandRunner>,
    target: ClusterTarget,
    knobs: Vec<String>,
    timeout: Option<Duration>,
}

impl CliAdminClient {
    /// A client for `target`.
    pub fn new(
        config: Arc<BinaryConfig>,
        runner: Arc<dyn CommandRunner>,
        target: ClusterTarget,
    ) -> Self {
        CliAdminClient {
            config,
            runner,
            target,
            knobs: Vec::new(),
            timeout: None,
        }
    }

    /// Knobs (`--knob_…=…`) passed to fdbbackup and fdbrestore.
    #[must_use]
    pub fn with_knobs(mut self, knobs: Vec<String>) -> Self {
        self.knobs = knobs;
        self
    }

    /// A timeout for slow calls below the `--max-cli-timeout` maximum.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The target.
    pub fn target(&self) -> &ClusterTarget {
        &self.target
    }

    fn max_timeout(&self) -> Duration {
        let max = self.config.max_cli_timeout;
        self.timeout.map_or(max, |t| t.min(max))
    }

    /// Runs one invocation (see the module docs).
    pub async fn run(&self, inv: Invocation) -> Result<String, AdminError> {
        let version = inv
            .version
            .clone()
            .unwrap_or_else(|| self.target.running_version.clone());
        let program = self.config.binary_path(inv.binary, &version);
        let cluster_file = ClusterFile::create(&self.config.tmp_dir, &self.target)?;
        let (args, hard) = inv.arguments(cluster_file.path(), &self.knobs, &self.config);
        let out = self.runner.run(&program, &args, hard).await?;
        drop(cluster_file);
        if out.success {
            tracing::debug!(binary = inv.binary, output = %truncate(&out.output, 120), "command completed");
            return Ok(out.output);
        }
        Err(classify(inv.binary, out))
    }

    async fn status_with(
        &self,
        version: Option<String>,
        require_processes: bool,
    ) -> Result<FdbStatus, AdminError> {
        let mut inv = Invocation::exec("status json");
        inv.timeout = Some(self.max_timeout());
        inv.version = version;
        let out = self.run(inv).await?;
        status::parse(&out, require_processes).map_err(status_error)
    }

    async fn exec_lines(&self, commands: &[String], slow: bool) -> Result<String, AdminError> {
        let mut inv = Invocation::exec(commands.join("; "));
        if slow {
            inv.timeout = Some(self.max_timeout());
        }
        self.run(inv).await
    }

    fn maintenance_prefix(&self) -> Vec<u8> {
        key_bytes(&format!("{}/maintenance", self.target.lock_prefix))
    }
}

fn status_error(e: StatusError) -> AdminError {
    match e {
        StatusError::Timeout(m) => AdminError::Timeout(m),
        StatusError::Malformed(m) => AdminError::Parse(m),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_owned()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

/// Classifies a failed run's output as upstream does.
pub fn classify(binary: &str, out: CommandOutput) -> AdminError {
    if out.output.contains("Specified timeout reached") {
        return AdminError::Timeout(truncate(out.output.trim(), 200));
    }
    if out.output.contains("Backup does not exist") {
        return AdminError::BackupDoesNotExist(truncate(out.output.trim(), 200));
    }
    if out.output.contains("A backup was not running on tag") {
        return AdminError::BackupNotRunning(truncate(out.output.trim(), 200));
    }
    AdminError::Command {
        binary: binary.to_owned(),
        code: out.code,
        output: truncate(out.output.trim(), 500),
    }
}

/// A temporary cluster file, removed on drop.
struct ClusterFile(PathBuf);

impl ClusterFile {
    fn create(tmp: &Path, target: &ClusterTarget) -> Result<Self, AdminError> {
        let dir = tmp.join(format!("{}-cli", target.uid));
        let err = |e: std::io::Error| AdminError::Spawn {
            binary: "cluster file".into(),
            error: e.to_string(),
        };
        std::fs::create_dir_all(&dir).map_err(err)?;
        let path = dir.join(format!("{:016x}", fastrand::u64(..)));
        std::fs::write(&path, &target.connection_string).map_err(err)?;
        Ok(ClusterFile(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ClusterFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The addresses without ports and flags, space-separated (`exclude`/`include` arguments).
pub fn addresses_without_ports(addresses: &[ProcessAddress]) -> String {
    addresses
        .iter()
        .map(|a| a.host.clone())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `kill; kill <a b>[; sleep 1; kill <a b>]; sleep 5`.
pub fn kill_command(addresses: &[ProcessAddress], upgrade: bool) -> String {
    let list = addresses
        .iter()
        .map(ProcessAddress::without_flags)
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = format!("kill; kill {list}");
    if upgrade {
        cmd.push_str(&format!("; sleep 1; kill {list}"));
    }
    cmd.push_str("; sleep 5");
    cmd
}

/// The connection string out of `get \xff/coordinators` output (between the last backtick and
/// the last quote, as upstream cleans it).
pub fn connection_string_from_get(output: &str) -> String {
    match (output.rfind('`'), output.rfind('\'')) {
        (Some(s), Some(e)) if e > s => output[s + 1..e].to_owned(),
        _ => output.trim().to_owned(),
    }
}

/// The key range of every key starting with `prefix` (prefix .. strinc(prefix)).
pub fn prefix_range(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xff {
            end.push(last + 1);
            break;
        }
    }
    (prefix.to_vec(), end)
}

fn getrange_command(prefix: &[u8]) -> String {
    let (b, e) = prefix_range(prefix);
    format!("getrange {} {} 10000", escape(&b), escape(&e))
}

#[async_trait]
impl AdminClient for CliAdminClient {
    async fn get_status(&self) -> Result<FdbStatus, AdminError> {
        match self.status_with(None, true).await {
            Err(e) if e.is_timeout() && self.target.incompatible_upgrade => {
                tracing::debug!(error = %e, "retrying status with the spec version");
                self.status_with(Some(self.target.spec_version.clone()), true)
                    .await
            }
            other => other,
        }
    }

    async fn configure_database(
        &self,
        configuration: &DatabaseConfiguration,
        new: bool,
    ) -> Result<(), AdminError> {
        let mut text = configuration
            .configuration_string()
            .map_err(|e| AdminError::InvalidInput(e.to_string()))?;
        if new {
            text = format!("new {text}");
        }
        if text.contains([';', '\n', '\r']) {
            return Err(AdminError::InvalidInput(
                "configuration string contains invalid characters".into(),
            ));
        }
        self.run(Invocation::exec(format!("configure {text}")))
            .await
            .map(drop)
    }

    async fn exclude(&self, addresses: &[ProcessAddress], no_wait: bool) -> Result<(), AdminError> {
        if addresses.is_empty() {
            return Ok(());
        }
        let mut cmd = "exclude ".to_owned();
        if no_wait {
            cmd.push_str("no_wait ");
        }
        cmd.push_str(&addresses_without_ports(addresses));
        let mut inv = Invocation::exec(cmd);
        inv.timeout = Some(self.max_timeout());
        self.run(inv).await.map(drop)
    }

    async fn include(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError> {
        if addresses.is_empty() {
            return Ok(());
        }
        let cmd = format!("include {}", addresses_without_ports(addresses));
        self.run(Invocation::exec(cmd)).await.map(drop)
    }

    async fn get_exclusions(&self) -> Result<Vec<String>, AdminError> {
        Ok(self.get_status().await?.exclusions())
    }

    async fn kill(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError> {
        if addresses.is_empty() {
            return Ok(());
        }
        let mut inv = Invocation::exec(kill_command(addresses, false));
        inv.timeout = Some(self.max_timeout());
        self.run(inv).await.map(drop)
    }

    async fn kill_for_upgrade(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError> {
        if addresses.is_empty() {
            return Ok(());
        }
        let mut inv = Invocation::exec(kill_command(addresses, true));
        inv.timeout = Some(self.max_timeout());
        self.run(inv).await.map(drop)
    }

    async fn change_coordinators(
        &self,
        addresses: &[ProcessAddress],
    ) -> Result<String, AdminError> {
        let list = addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        self.run(Invocation::exec(format!("coordinators {list}")))
            .await?;
        let out = self
            .exec_lines(
                &[
                    "option on READ_SYSTEM_KEYS".into(),
                    "get \\xff/coordinators".into(),
                ],
                false,
            )
            .await?;
        let text = connection_string_from_get(&out);
        crate::crd::ConnectionString::parse(&text)
            .map(|c| c.to_string())
            .map_err(|e| AdminError::Parse(e.to_string()))
    }

    async fn version_supported(&self, version: &str) -> Result<bool, AdminError> {
        let path = self.config.binary_path(FDBCLI, version);
        std::fs::metadata(&path)
            .map(|_| true)
            .map_err(|e| AdminError::Spawn {
                binary: path.display().to_string(),
                error: e.to_string(),
            })
    }

    async fn protocol_version(&self, version: &str) -> Result<String, AdminError> {
        let mut inv = Invocation::with_args(FDBCLI, vec!["--version".into()]);
        inv.version = Some(version.to_owned());
        inv.ignore_cluster_file = true;
        let out = self.run(inv).await?;
        out.lines()
            .find_map(|l| l.trim_end().strip_prefix("protocol "))
            .filter(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
            .map(str::to_owned)
            .ok_or_else(|| {
                AdminError::Parse(format!(
                    "failed to parse protocol version for {version}. Version output:\n{out}"
                ))
            })
    }

    async fn version_from_reachable_coordinators(&self) -> Option<String> {
        let quorum = |v: Option<String>| {
            let this = self.clone();
            async move {
                let mut inv = Invocation::exec("status json");
                inv.timeout = Some(this.max_timeout());
                inv.version = v;
                // A failed run still prints the document when fdbcli gets that far.
                let out = match this.run(inv).await {
                    Ok(out) => out,
                    Err(AdminError::Command { output, .. }) | Err(AdminError::Timeout(output)) => {
                        output
                    }
                    Err(_) => return false,
                };
                status::parse_document(&out).is_ok_and(|s| s.client.coordinators.quorum_reachable)
            }
        };
        if quorum(None).await {
            return Some(self.target.running_version.clone());
        }
        if self.target.incompatible_upgrade && quorum(Some(self.target.spec_version.clone())).await
        {
            return Some(self.target.spec_version.clone());
        }
        None
    }

    async fn set_maintenance_zone(&self, zone: &str, seconds: i64) -> Result<(), AdminError> {
        self.run(Invocation::exec(format!("maintenance on {zone} {seconds}")))
            .await
            .map(drop)
    }

    async fn reset_maintenance_mode(&self) -> Result<(), AdminError> {
        self.run(Invocation::exec("maintenance off"))
            .await
            .map(drop)
    }

    async fn get_processes_under_maintenance(&self) -> Result<BTreeMap<String, i64>, AdminError> {
        let prefix = self.maintenance_prefix();
        let out = self
            .exec_lines(
                &[
                    "option on READ_SYSTEM_KEYS".into(),
                    getrange_command(&prefix),
                ],
                false,
            )
            .await?;
        let pairs = parse_getrange(&out).map_err(AdminError::Parse)?;
        Ok(pairs
            .into_iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(k, v)| {
                let key = String::from_utf8_lossy(&k).into_owned();
                let id = key.rsplit('/').next().unwrap_or_default().to_owned();
                let ts = <[u8; 8]>::try_from(v.as_slice()).map_or(0, i64::from_le_bytes);
                (id, ts)
            })
            .collect())
    }

    async fn set_processes_under_maintenance(
        &self,
        ids: &[String],
        timestamp: i64,
    ) -> Result<(), AdminError> {
        if ids.is_empty() {
            return Ok(());
        }
        let prefix = self.maintenance_prefix();
        let mut cmds = vec![
            "writemode on".to_owned(),
            "option on ACCESS_SYSTEM_KEYS".to_owned(),
            "begin".to_owned(),
        ];
        for id in ids {
            let mut k = prefix.clone();
            k.push(b'/');
            k.extend_from_slice(id.as_bytes());
            cmds.push(format!(
                "set {} {}",
                escape(&k),
                escape(&timestamp.to_le_bytes())
            ));
        }
        cmds.push("commit".into());
        self.exec_lines(&cmds, false).await.map(drop)
    }

    async fn remove_processes_under_maintenance(&self, ids: &[String]) -> Result<(), AdminError> {
        if ids.is_empty() {
            return Ok(());
        }
        let prefix = self.maintenance_prefix();
        let mut cmds = vec![
            "writemode on".to_owned(),
            "option on ACCESS_SYSTEM_KEYS".to_owned(),
            "begin".to_owned(),
        ];
        for id in ids {
            let mut k = prefix.clone();
            k.push(b'/');
            k.extend_from_slice(id.as_bytes());
            cmds.push(format!("clear {}", escape(&k)));
        }
        cmds.push("commit".into());
        self.exec_lines(&cmds, false).await.map(drop)
    }

    async fn start_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        let url = backup
            .backup_url()
            .map_err(|e| AdminError::InvalidInput(e.to_string()))?;
        let mut args = vec![
            "start".into(),
            "-d".into(),
            url,
            "-t".into(),
            backup.tag().to_owned(),
        ];
        if backup.backup_mode() == "continuous" {
            args.extend([
                "-s".into(),
                backup.snapshot_period_seconds().to_string(),
                "-z".into(),
            ]);
        }
        let key = backup.encryption_key();
        if !key.is_empty() {
            args.extend(["--encryption-key-file".into(), key]);
        }
        if backup.backup_type() == crate::crd::BACKUP_TYPE_PARTITIONED_LOG {
            let v = FdbVersion::parse(&backup.spec.version)
                .map_err(|e| AdminError::InvalidInput(e.to_string()))?;
            if v.uses_mutation_log_type() {
                args.extend([
                    "--mutation-log-type".into(),
                    "partitioned-log-experimental".into(),
                ]);
            } else {
                args.push("--partitioned-log-experimental".into());
            }
        }
        self.run(Invocation::with_args(FDBBACKUP, args))
            .await
            .map(drop)
    }

    async fn stop_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        let args = vec!["discontinue".into(), "-t".into(), backup.tag().to_owned()];
        self.run(Invocation::with_args(FDBBACKUP, args))
            .await
            .map(drop)
    }

    async fn abort_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        let args = vec!["abort".into(), "-t".into(), backup.tag().to_owned()];
        self.run(Invocation::with_args(FDBBACKUP, args))
            .await
            .map(drop)
    }

    async fn delete_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        let url = backup
            .backup_url()
            .map_err(|e| AdminError::InvalidInput(e.to_string()))?;
        let mut inv = Invocation::with_args(FDBBACKUP, vec!["delete".into(), "-d".into(), url]);
        inv.timeout = Some(Duration::from_secs(600));
        inv.ignore_cluster_file = true;
        self.run(inv).await.map(drop)
    }

    async fn pause_backups(&self) -> Result<(), AdminError> {
        self.run(Invocation::with_args(FDBBACKUP, vec!["pause".into()]))
            .await
            .map(drop)
    }

    async fn resume_backups(&self) -> Result<(), AdminError> {
        self.run(Invocation::with_args(FDBBACKUP, vec!["resume".into()]))
            .await
            .map(drop)
    }

    async fn modify_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        let url = backup
            .backup_url()
            .map_err(|e| AdminError::InvalidInput(e.to_string()))?;
        let mut args = vec![
            "modify".into(),
            "-s".into(),
            backup.snapshot_period_seconds().to_string(),
            "-d".into(),
            url,
            "-t".into(),
            backup.tag().to_owned(),
        ];
        let key = backup.encryption_key();
        if !key.is_empty() {
            args.extend(["--encryption-key-file".into(), key]);
        }
        self.run(Invocation::with_args(FDBBACKUP, args))
            .await
            .map(drop)
    }

    async fn get_backup_status(
        &self,
        backup: &FoundationDBBackup,
    ) -> Result<LiveBackupStatus, AdminError> {
        let args = vec![
            "status".into(),
            "--json".into(),
            "-t".into(),
            backup.tag().to_owned(),
        ];
        let out = self.run(Invocation::with_args(FDBBACKUP, args)).await?;
        let json = status::strip_warnings(&out).map_err(status_error)?;
        serde_json::from_str(json).map_err(|e| AdminError::Parse(e.to_string()))
    }

    async fn start_restore(
        &self,
        url: &str,
        restore: &FoundationDBRestore,
    ) -> Result<(), AdminError> {
        let mut args = vec!["start".into(), "-r".into(), url.to_owned()];
        let v = FdbVersion::parse(&self.target.running_version)
            .map_err(|e| AdminError::InvalidInput(e.to_string()))?;
        if !restore.spec.encryption_key_path.is_empty() && v.supports_backup_encryption() {
            args.extend([
                "--encryption-key-file".into(),
                restore.spec.encryption_key_path.clone(),
            ]);
        }
        if let Some(version) = restore.spec.backup_version {
            args.extend(["-v".into(), version.to_string()]);
        }
        if !restore.spec.key_ranges.is_empty() {
            let ranges = restore
                .spec
                .key_ranges
                .iter()
                .map(|r| format!("{} {}", r.start, r.end))
                .collect::<Vec<_>>()
                .join(";");
            args.extend(["-k".into(), ranges]);
        }
        self.run(Invocation::with_args(FDBRESTORE, args))
            .await
            .map(drop)
    }

    async fn get_restore_status(&self) -> Result<String, AdminError> {
        let result = self
            .run(Invocation::with_args(FDBRESTORE, vec!["status".into()]))
            .await;
        let text = match &result {
            Ok(out) => out.as_str(),
            Err(AdminError::Command { output, .. }) => output.as_str(),
            Err(_) => "",
        };
        if text.contains("No restores found") {
            return Err(AdminError::RestoreDoesNotExist);
        }
        result
    }
}

/// The lock client over fdbcli. Every call is one or two `--exec` runs:
/// - reads (`get`, `getrange`) with `option on READ_SYSTEM_KEYS`;
/// - writes with `writemode on; option on ACCESS_SYSTEM_KEYS` inside `begin … commit`;
/// - taking and releasing the lock: a read run decides ([`lock::take`], [`lock::release`]);
///   then one transaction re-reads the record and writes the decision. FoundationDB commits it
///   only if nothing wrote the record between that re-read and the commit, so the re-read is
///   exactly the value replaced. If it differs from the value the decision was made on and
///   the decision does not hold for it, the transaction is undone by a second one (which again
///   checks it replaces our own value) and the call fails as contended. Another instance's
///   lock can so be overwritten only between two of our own transactions, and is restored
///   before this instance acts on it.
pub struct CliLockClient {
    admin: CliAdminClient,
    now: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl CliLockClient {
    /// A lock client for the admin client's target.
    pub fn new(admin: CliAdminClient) -> Self {
        CliLockClient {
            admin,
            now: Arc::new(|| jiff::Timestamp::now().as_second()),
        }
    }

    /// With an injected clock (Unix seconds), for tests.
    #[must_use]
    pub fn with_clock(mut self, now: Arc<dyn Fn() -> i64 + Send + Sync>) -> Self {
        self.now = now;
        self
    }

    fn target(&self) -> &ClusterTarget {
        &self.admin.target
    }

    fn lock_key(&self) -> Vec<u8> {
        key_bytes(&format!("{}/global", self.target().lock_prefix))
    }

    fn deny_prefix(&self) -> Vec<u8> {
        key_bytes(&format!("{}/denyList/", self.target().lock_prefix))
    }

    fn upgrades_prefix(&self, version: Option<&str>) -> Vec<u8> {
        match version {
            Some(v) => key_bytes(&format!("{}/upgrades/{v}/", self.target().lock_prefix)),
            None => key_bytes(&format!("{}/upgrades/", self.target().lock_prefix)),
        }
    }

    async fn read_state(&self) -> Result<(Option<LockRecord>, BTreeSet<String>), AdminError> {
        let out = self
            .admin
            .exec_lines(
                &[
                    "option on READ_SYSTEM_KEYS".into(),
                    format!("get {}", escape(&self.lock_key())),
                    getrange_command(&self.deny_prefix()),
                ],
                false,
            )
            .await?;
        self.parse_state(&out)
    }

    fn parse_state(&self, out: &str) -> Result<(Option<LockRecord>, BTreeSet<String>), AdminError> {
        let key = keys::printable(&self.lock_key());
        let lock_line = out
            .lines()
            .find(|l| l.starts_with(&format!("`{key}'")))
            .ok_or_else(|| AdminError::Parse(format!("no lock record in {out:?}")))?;
        let record = match parse_get(lock_line).map_err(AdminError::Parse)? {
            None => None,
            Some(bytes) => {
                let (owner, start, end) = unpack_lock(&bytes).ok_or_else(|| {
                    AdminError::Parse(format!(
                        "could not decode value {} for the lock key",
                        keys::printable(&bytes)
                    ))
                })?;
                Some(LockRecord { owner, start, end })
            }
        };
        let prefix = self.deny_prefix();
        let denied = parse_getrange(out)
            .map_err(AdminError::Parse)?
            .into_iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
            .collect();
        Ok((record, denied))
    }

    // One transaction: re-read the record and the deny list, write `value` (or clear), commit.
    // Returns what the transaction read.
    async fn swap(
        &self,
        value: Option<&LockRecord>,
    ) -> Result<(Option<LockRecord>, BTreeSet<String>), AdminError> {
        let key = escape(&self.lock_key());
        let write = match value {
            Some(r) => format!("set {key} {}", escape(&pack_lock(&r.owner, r.start, r.end))),
            None => format!("clear {key}"),
        };
        let out = self
            .admin
            .exec_lines(
                &[
                    "writemode on".into(),
                    "option on ACCESS_SYSTEM_KEYS".into(),
                    "begin".into(),
                    format!("get {key}"),
                    getrange_command(&self.deny_prefix()),
                    write,
                    "commit".into(),
                ],
                false,
            )
            .await
            .map_err(|e| match e {
                AdminError::Command { output, .. }
                    if output.contains("not_committed") || output.contains("conflict") =>
                {
                    AdminError::Conflict
                }
                other => other,
            })?;
        if !out.contains("Committed") {
            return Err(AdminError::Parse(format!(
                "transaction not committed: {out:?}"
            )));
        }
        self.parse_state(&out)
    }

    // Puts `previous` back if the record still holds `ours`.
    async fn undo(&self, ours: Option<&LockRecord>, previous: Option<&LockRecord>) {
        match self.swap(previous).await {
            Ok((seen, _)) if seen.as_ref() == ours => {}
            Ok((seen, _)) => tracing::warn!(
                ?seen,
                "lock record changed again while undoing a contended write"
            ),
            Err(e) => tracing::warn!(error = %e, "could not undo a contended lock write"),
        }
    }

    async fn exec_writes(&self, writes: Vec<String>) -> Result<(), AdminError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut cmds = vec![
            "writemode on".to_owned(),
            "option on ACCESS_SYSTEM_KEYS".to_owned(),
            "begin".to_owned(),
        ];
        cmds.extend(writes);
        cmds.push("commit".into());
        self.admin.exec_lines(&cmds, false).await.map(drop)
    }

    async fn get_range(&self, prefix: &[u8]) -> Result<Vec<keys::KeyValue>, AdminError> {
        let out = self
            .admin
            .exec_lines(
                &[
                    "option on READ_SYSTEM_KEYS".into(),
                    getrange_command(prefix),
                ],
                false,
            )
            .await?;
        Ok(parse_getrange(&out)
            .map_err(AdminError::Parse)?
            .into_iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .collect())
    }
}

#[async_trait]
impl LockClient for CliLockClient {
    fn disabled(&self) -> bool {
        !self.target().use_locks
    }

    async fn take_lock(&self) -> Result<(), AdminError> {
        if self.disabled() {
            return Ok(());
        }
        let me = self.target().lock_id.clone();
        let duration = self.target().lock_duration.as_secs() as i64;
        let decide = |record: Option<&LockRecord>, denied: &BTreeSet<String>, now: i64| {
            let owner_denied = record.is_some_and(|r| denied.contains(&r.owner));
            lock::take(
                record,
                &me,
                denied.contains(&me),
                owner_denied,
                now,
                duration,
            )
        };
        let (record, denied) = self.read_state().await?;
        let want = match decide(record.as_ref(), &denied, (self.now)()) {
            TakeDecision::Write(r) => r,
            TakeDecision::Denied => return Err(AdminError::LockDenied(me)),
            TakeDecision::Held(r) => {
                return Err(AdminError::LockHeld {
                    owner: r.owner,
                    expires: r.end,
                });
            }
        };
        let (replaced, denied_now) = self.swap(Some(&want)).await?;
        if replaced == record {
            return Ok(());
        }
        // Someone wrote the record between our read and our transaction: the write stands only
        // if the decision holds for what it replaced.
        match decide(replaced.as_ref(), &denied_now, (self.now)()) {
            TakeDecision::Write(_) => Ok(()),
            TakeDecision::Denied => {
                self.undo(Some(&want), replaced.as_ref()).await;
                Err(AdminError::LockDenied(me))
            }
            TakeDecision::Held(r) => {
                self.undo(Some(&want), replaced.as_ref()).await;
                Err(AdminError::LockHeld {
                    owner: r.owner,
                    expires: r.end,
                })
            }
        }
    }

    async fn release_lock(&self) -> Result<(), AdminError> {
        if self.disabled() {
            return Ok(());
        }
        let me = self.target().lock_id.clone();
        let (record, _) = self.read_state().await?;
        if !lock::release(record.as_ref(), &me, (self.now)()) {
            return Ok(());
        }
        let (replaced, _) = self.swap(None).await?;
        if replaced != record {
            self.undo(None, replaced.as_ref()).await;
        }
        Ok(())
    }

    async fn add_pending_upgrades(&self, version: &str, ids: &[String]) -> Result<(), AdminError> {
        let prefix = self.upgrades_prefix(Some(version));
        let writes = ids
            .iter()
            .map(|id| {
                let mut k = prefix.clone();
                k.extend_from_slice(id.as_bytes());
                format!("set {} {}", escape(&k), escape(id.as_bytes()))
            })
            .collect();
        self.exec_writes(writes).await
    }

    async fn get_pending_upgrades(&self, version: &str) -> Result<BTreeSet<String>, AdminError> {
        Ok(self
            .get_range(&self.upgrades_prefix(Some(version)))
            .await?
            .into_iter()
            .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
            .collect())
    }

    async fn clear_pending_upgrades(&self) -> Result<(), AdminError> {
        let (b, e) = prefix_range(&self.upgrades_prefix(None));
        self.exec_writes(vec![format!("clearrange {} {}", escape(&b), escape(&e))])
            .await
    }

    async fn get_deny_list(&self) -> Result<Vec<String>, AdminError> {
        Ok(self
            .get_range(&self.deny_prefix())
            .await?
            .into_iter()
            .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
            .collect())
    }

    async fn update_deny_list(&self, entries: &[LockDenyListEntry]) -> Result<(), AdminError> {
        let current: BTreeSet<String> = self.get_deny_list().await?.into_iter().collect();
        let prefix = self.deny_prefix();
        let mut writes = Vec::new();
        for entry in entries {
            let mut k = prefix.clone();
            k.extend_from_slice(entry.id.as_bytes());
            if entry.allow && current.contains(&entry.id) {
                writes.push(format!("clear {}", escape(&k)));
            } else if !entry.allow && !current.contains(&entry.id) {
                writes.push(format!(
                    "set {} {}",
                    escape(&k),
                    escape(entry.id.as_bytes())
                ));
            }
        }
        self.exec_writes(writes).await
    }
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
