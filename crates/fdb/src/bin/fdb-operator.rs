//! `fdb-operator`: parse upstream's manager flags, run the library. A start-up error is
//! printed as one line (see `kit::cli`).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    kit::cli::finish(fdb::run::run(fdb::run::Flags::parse()).await)
}
