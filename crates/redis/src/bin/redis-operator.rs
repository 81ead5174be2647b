//! `redis-operator`: parse the command line, run the library. A start-up error is printed as
//! one line (see `kit::cli`).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    kit::cli::finish(redis::cli::dispatch(redis::cli::Cli::parse()).await)
}
