//! The command line of the one `redis-operator` binary: a subcommand per role, as upstream's
//! (`controller`, `instance`, `copy-binary <dst>`, `restore`).
//!
//! Contract: [`dispatch`] runs the chosen role to completion and returns its error, which
//! `main` prints as one line (`kit::cli::finish`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::run::ControllerFlags;

/// `redis-operator <subcommand>`.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(
    name = "redis-operator",
    version,
    about = "The Redis operator: the controller, and the tools its data pods run"
)]
pub struct Cli {
    /// What this process is.
    #[command(subcommand)]
    pub command: Command,
}

/// The roles of the binary.
#[derive(Subcommand, Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Run the operator: the admission webhook server on every replica and, while holding the
    /// leader Lease, the controllers.
    Controller(Box<ControllerFlags>),
    /// Run the instance manager of a Redis data pod (PID 1 of the `redis` container).
    Instance(Box<crate::instance::InstanceFlags>),
    /// Restore a completed RedisBackup into the data directory (the bootstrap init
    /// container).
    Restore(crate::instance::restore::RestoreFlags),
    /// Copy this executable to DESTINATION (mode 0755, atomically), as the data pods' init
    /// container does to install the instance manager into a shared volume.
    CopyBinary {
        /// Where the copy goes, for example /controller/manager.
        destination: PathBuf,
    },
}

/// Runs the subcommand.
pub async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Controller(flags) => crate::run::run(*flags).await,
        Command::Instance(flags) => crate::instance::run(*flags).await,
        Command::Restore(flags) => crate::instance::restore::run(flags).await,
        Command::CopyBinary { destination } => {
            let src = std::env::current_exe().context("resolving the running executable")?;
            crate::copy_binary::copy_binary(&src, &destination)?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_binary_takes_one_destination() {
        let cli = Cli::try_parse_from(["redis-operator", "copy-binary", "/controller/manager"])
            .expect("parse");
        assert_eq!(
            cli.command,
            Command::CopyBinary {
                destination: "/controller/manager".into()
            }
        );
        assert!(Cli::try_parse_from(["redis-operator", "copy-binary"]).is_err());
        assert!(Cli::try_parse_from(["redis-operator", "copy-binary", "a", "b"]).is_err());
    }

    #[test]
    fn a_subcommand_is_required() {
        assert!(Cli::try_parse_from(["redis-operator"]).is_err());
        assert!(Cli::try_parse_from(["redis-operator", "unknown"]).is_err());
    }
}
