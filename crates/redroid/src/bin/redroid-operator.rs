//! `redroid-operator`: parse the flags and run the operator library until SIGTERM/SIGINT.
//! A start-up error is printed as one line (see `kit::cli`).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    kit::cli::finish(redroid::run(redroid::Flags::parse()).await)
}
