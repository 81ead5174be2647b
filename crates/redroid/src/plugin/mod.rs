//! `kubectl-redroid`, the kubectl plugin for redroid instances and tasks.
//!
//! Contract: [`main_with`] parses the arguments (without the program name), connects like
//! kubectl (`--kubeconfig`, `--context`, `-n`; see [`kubeconfig`]) and runs one command,
//! writing its output to `out`; a failure is a [`PluginError`] whose message is one line naming
//! the object involved. The binary prints it as `error: …` and exits with code 1. Help and
//! version requests are written to `out` and succeed.

pub mod adb;
pub mod duration;
pub mod error;
pub mod instance;
pub mod kubeconfig;
pub mod logs;
pub mod portforward;
pub mod task;

use std::io::Write;

use clap::Parser;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub use error::PluginError;

use self::instance::InstanceCommand;
use self::kubeconfig::GlobalFlags;
use self::task::TaskCommand;
use kit::plugin::table::Describe;

/// The command line of `kubectl redroid`.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl-redroid",
    bin_name = "kubectl redroid",
    version,
    about = "Manage redroid instances and tasks"
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalFlags,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// RedroidInstances: list, describe, suspend, resume, wake, port-forward, adb, logs.
    #[command(visible_aliases = ["inst", "instances"])]
    Instance {
        #[command(subcommand)]
        command: InstanceCommand,
    },
    /// RedroidTasks: list, describe, trigger, logs.
    #[command(visible_alias = "tasks")]
    Task {
        #[command(subcommand)]
        command: TaskCommand,
    },
}

/// Runs `kubectl redroid ARGS…` (`args` without the program name), writing output to `out`.
pub async fn main_with(
    args: impl IntoIterator<Item = String>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let argv = std::iter::once("kubectl-redroid".to_string()).chain(args);
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            write!(out, "{}", e.render())?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let session = cli.global.connect().await?;
    match cli.command {
        Command::Instance { command } => instance::run(command, &session, out).await?,
        Command::Task { command } => task::run(command, &session, out).await?,
    }
    Ok(())
}

/// Writes `text` to the command output.
pub(crate) fn write_out(out: &mut impl Write, text: &str) -> Result<(), PluginError> {
    out.write_all(text.as_bytes())
        .map_err(|e| PluginError::io("write output", e))
}

/// `Conditions:` with one `Type: Status (Reason) message` line per condition.
pub(crate) fn describe_conditions(d: &mut Describe, conditions: &[Condition]) {
    if conditions.is_empty() {
        d.field("Conditions", "<none>");
        return;
    }
    d.field("Conditions", "");
    for c in conditions {
        let message = if c.message.is_empty() {
            String::new()
        } else {
            format!(": {}", c.message)
        };
        d.nested(
            c.type_.clone(),
            format!("{} ({}){message}", c.status, c.reason),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(args: &[&str]) -> (anyhow::Result<()>, String) {
        let mut out = Vec::new();
        let r = main_with(args.iter().map(|s| s.to_string()), &mut out).await;
        (r, String::from_utf8(out).unwrap())
    }

    #[tokio::test]
    async fn help_lists_the_commands_and_succeeds() {
        let (r, out) = run(&["--help"]).await;
        r.unwrap();
        assert!(out.contains("instance") && out.contains("task"), "{out}");
        let (r, out) = run(&["inst", "--help"]).await;
        r.unwrap();
        for sub in [
            "list",
            "describe",
            "suspend",
            "resume",
            "wake",
            "port-forward",
            "adb",
            "logs",
        ] {
            assert!(out.contains(sub), "{sub} missing from {out}");
        }
    }

    #[tokio::test]
    async fn bad_durations_fail_before_connecting() {
        let cli = Cli::try_parse_from([
            "kubectl-redroid",
            "instance",
            "suspend",
            "x",
            "--for",
            "soon",
        ])
        .unwrap();
        let Command::Instance {
            command: InstanceCommand::Suspend { over, .. },
        } = cli.command
        else {
            panic!("parsed as {cli:?}")
        };
        let err = instance::override_patch("suspended", Some(&over), jiff::Timestamp::now())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(r#"invalid duration "soon""#), "{err}");
    }

    #[test]
    fn global_flags_parse_anywhere() {
        let cli = Cli::try_parse_from([
            "k",
            "task",
            "ls",
            "-n",
            "games",
            "--context",
            "c",
            "--kubeconfig",
            "/k",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("games"));
        assert_eq!(cli.global.context.as_deref(), Some("c"));
        let cli = Cli::try_parse_from(["k", "instance", "adb", "a", "--", "shell", "-x"]).unwrap();
        let Command::Instance {
            command: InstanceCommand::Adb { args, .. },
        } = cli.command
        else {
            panic!()
        };
        assert_eq!(args, ["shell", "-x"]);
    }
}
