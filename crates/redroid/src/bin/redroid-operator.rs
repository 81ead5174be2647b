//! `redroid-operator`: parse the flags and run the operator library until SIGTERM/SIGINT.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    redroid::run(redroid::Flags::parse()).await
}
