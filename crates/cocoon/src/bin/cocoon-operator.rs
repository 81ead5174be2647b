//! `cocoon-operator`: parse flags, run the library.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    cocoon::run::run(cocoon::run::Flags::parse()).await
}
