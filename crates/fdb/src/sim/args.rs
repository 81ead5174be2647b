//! The front end's command line: exactly what the admin client passes
//! ([`crate::admin::cli::Invocation::arguments`]), no more.
//!
//! - `fdbcli`: `--exec <commands>` or `--version`; `-C <file>`, `--timeout <s>`, and the
//!   trace flags `--log`, `--trace_format <f>`, `--log-dir <d>` (accepted, no trace is written).
//! - `fdbbackup`: `start|discontinue|abort|delete|pause|resume|modify|status` with `-d <url>`,
//!   `-t <tag>`, `-s <seconds>`, `-z`, `--json`, `--encryption-key-file <f>`,
//!   `--mutation-log-type <t>`, `--partitioned-log-experimental`, `-C <file>`.
//! - `fdbrestore`: `start|status` with `-r <url>`, `-v <version>`, `-k <ranges>`,
//!   `--encryption-key-file <f>`, `--dest_cluster_file <file>`.
//! - both: knobs `--knob_<name>=<value>` and `--log --logdir <d>` (accepted, not applied).
//!
//! Anything else is refused with a message naming it: a front end that silently accepted an
//! argument the real tool does not know would hide a client bug.
//!
//! [`split_commands`] splits an `--exec` string as fdbcli does: `;` ends a command,
//! whitespace separates tokens, double quotes group (a `;` inside quotes is text).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Call;

/// A parsed command line.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    /// `fdbcli --version`.
    Version,
    /// A call to forward to the server.
    Run {
        /// The cluster file (`-C` / `--dest_cluster_file`), if any.
        cluster_file: Option<PathBuf>,
        /// fdbcli's `--timeout`.
        timeout: Option<Duration>,
        /// The call.
        call: Call,
    },
}

/// An `fdbbackup` subcommand and its options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct BackupArgs {
    /// `start`, `discontinue`, `abort`, `delete`, `pause`, `resume`, `modify` or `status`.
    pub command: String,
    /// `-d`.
    pub url: Option<String>,
    /// `-t`.
    pub tag: Option<String>,
    /// `-s`.
    pub snapshot_seconds: Option<i64>,
    /// `-z` (continuous).
    pub continuous: bool,
    /// `--json`.
    pub json: bool,
    /// `--encryption-key-file`.
    pub encryption_key_file: Option<String>,
    /// `--mutation-log-type` or `--partitioned-log-experimental`.
    pub partitioned_log: bool,
}

/// An `fdbrestore` subcommand and its options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RestoreArgs {
    /// `start` or `status`.
    pub command: String,
    /// `-r`.
    pub url: Option<String>,
    /// `-v`.
    pub version: Option<i64>,
    /// `-k`: `begin end` pairs separated by `;`.
    pub key_ranges: Option<String>,
    /// `--encryption-key-file`.
    pub encryption_key_file: Option<String>,
}

/// Parses the arguments (after argv\[0\]) of `tool`.
pub fn parse(tool: &str, args: &[String]) -> Result<Parsed, String> {
    let mut it = Cursor { args, pos: 0 };
    let mut cluster_file = None;
    let mut timeout = None;
    let mut exec = None;
    let mut version = false;
    let mut backup = BackupArgs::default();
    let mut restore = RestoreArgs::default();
    let mut command: Option<String> = None;
    while let Some(arg) = it.next() {
        match (tool, arg) {
            ("fdbcli", "--version" | "-v") => version = true,
            ("fdbcli", "--exec") => exec = Some(it.value(arg)?),
            ("fdbcli", "--timeout") => {
                let s = it.value(arg)?;
                let secs: u64 = s.parse().map_err(|_| format!("bad --timeout {s:?}"))?;
                timeout = Some(Duration::from_secs(secs));
            }
            ("fdbcli", "--trace_format" | "--log-dir") => drop(it.value(arg)?),
            ("fdbcli" | "fdbbackup", "-C" | "--cluster-file" | "--cluster_file") => {
                cluster_file = Some(PathBuf::from(it.value(arg)?));
            }
            ("fdbrestore", "--dest_cluster_file") => {
                cluster_file = Some(PathBuf::from(it.value(arg)?));
            }
            (_, "--log") => {}
            ("fdbbackup" | "fdbrestore", "--logdir") => drop(it.value(arg)?),
            ("fdbbackup" | "fdbrestore", k) if k.starts_with("--knob_") && k.contains('=') => {}
            ("fdbbackup", "-d") => backup.url = Some(it.value(arg)?),
            ("fdbbackup", "-t") => backup.tag = Some(it.value(arg)?),
            ("fdbbackup", "-s") => backup.snapshot_seconds = Some(it.number(arg)?),
            ("fdbbackup", "-z") => backup.continuous = true,
            ("fdbbackup", "--json") => backup.json = true,
            ("fdbbackup", "--partitioned-log-experimental") => backup.partitioned_log = true,
            ("fdbbackup", "--mutation-log-type") => {
                backup.partitioned_log = it.value(arg)? == "partitioned-log-experimental";
            }
            ("fdbbackup", "--encryption-key-file") => {
                backup.encryption_key_file = Some(it.value(arg)?);
            }
            ("fdbrestore", "--encryption-key-file") => {
                restore.encryption_key_file = Some(it.value(arg)?);
            }
            ("fdbrestore", "-r") => restore.url = Some(it.value(arg)?),
            ("fdbrestore", "-v") => restore.version = Some(it.number(arg)?),
            ("fdbrestore", "-k") => restore.key_ranges = Some(it.value(arg)?),
            ("fdbbackup", c) if command.is_none() && BACKUP_COMMANDS.contains(&c) => {
                command = Some(c.to_owned());
            }
            ("fdbrestore", c) if command.is_none() && ["start", "status"].contains(&c) => {
                command = Some(c.to_owned());
            }
            (tool, other) => return Err(format!("{tool}: unknown argument {other:?}")),
        }
    }
    let call = match tool {
        "fdbcli" if version => return Ok(Parsed::Version),
        "fdbcli" => Call::Exec(split_commands(
            &exec.ok_or("fdbcli: the simulator runs --exec only")?,
        )?),
        "fdbbackup" => Call::Backup(BackupArgs {
            command: command.ok_or("fdbbackup: no subcommand")?,
            ..backup
        }),
        "fdbrestore" => Call::Restore(RestoreArgs {
            command: command.ok_or("fdbrestore: no subcommand")?,
            ..restore
        }),
        other => return Err(format!("{other}: not a FoundationDB tool")),
    };
    Ok(Parsed::Run {
        cluster_file,
        timeout,
        call,
    })
}

const BACKUP_COMMANDS: [&str; 8] = [
    "start",
    "discontinue",
    "abort",
    "delete",
    "pause",
    "resume",
    "modify",
    "status",
];

struct Cursor<'a> {
    args: &'a [String],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let a = self.args.get(self.pos)?;
        self.pos += 1;
        Some(a)
    }

    fn value(&mut self, flag: &str) -> Result<String, String> {
        self.next()
            .map(str::to_owned)
            .ok_or_else(|| format!("{flag} needs a value"))
    }

    fn number(&mut self, flag: &str) -> Result<i64, String> {
        let v = self.value(flag)?;
        v.parse()
            .map_err(|_| format!("{flag}: not a number: {v:?}"))
    }
}

/// Splits an `--exec` string into commands of tokens (see the module docs).
pub fn split_commands(line: &str) -> Result<Vec<Vec<String>>, String> {
    let mut commands = Vec::new();
    let mut tokens: Vec<String> = Vec::new();
    let mut token = String::new();
    let mut in_token = false;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_token = true;
            }
            ';' if !quoted => {
                if in_token {
                    tokens.push(std::mem::take(&mut token));
                    in_token = false;
                }
                if !tokens.is_empty() {
                    commands.push(std::mem::take(&mut tokens));
                }
            }
            c if c.is_whitespace() && !quoted => {
                if in_token {
                    tokens.push(std::mem::take(&mut token));
                    in_token = false;
                }
            }
            c => {
                token.push(c);
                in_token = true;
            }
        }
    }
    if quoted {
        return Err("unterminated quote in --exec".into());
    }
    if in_token {
        tokens.push(token);
    }
    if !tokens.is_empty() {
        commands.push(tokens);
    }
    Ok(commands)
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
