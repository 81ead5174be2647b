//! `stellar`: parse flags, run the library (see `stellar::run`). A start-up error is printed
//! as one line (see `kit::cli`).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    kit::cli::finish(stellar::run::run(stellar::run::Flags::parse()).await)
}
