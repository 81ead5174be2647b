//! The command line of the one `redis-operator` binary: a subcommand per role, as upstream's
//! (`controller`, `copy-binary <dst>`).
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
        assert!(Cli::try_parse_from(["redis-operator", "instance"]).is_err());
    }
}
