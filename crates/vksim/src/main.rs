//! `vk-cocoon-sim`: plays vk-cocoon on the local plane's kwok nodes (see the `vksim` crate).
//! Labels the kwok nodes with the pool, then runs until SIGINT or SIGTERM.

use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

/// Flags of the simulator; the cluster comes from `KUBECONFIG`.
#[derive(Parser, Debug)]
#[command(
    name = "vk-cocoon-sim",
    about = "A stand-in for vk-cocoon on kwok nodes"
)]
struct Flags {
    /// OCI registry URL (`http://127.0.0.1:5000`; `http://user:pass@…` for basic auth).
    #[arg(long, env = "OCI_REGISTRY_URL")]
    registry: String,
    /// Repository path prefix (`cocoon` → `cocoon/<vm>`).
    #[arg(long)]
    registry_prefix: Option<String>,
    /// Only act on pods of this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// Node pool the kwok nodes are labelled with (`cocoonstack.io/pool`).
    #[arg(long, default_value = "default")]
    pool: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let flags = Flags::parse();
    let client = kube::Client::try_default().await?;
    vksim::label_nodes(&client, &flags.pool).await?;
    let cfg = vksim::SimConfig {
        registry_url: flags.registry,
        registry_prefix: flags.registry_prefix,
        namespace: flags.namespace,
    };
    let sim = vksim::Simulator::start(client, cfg).await?;
    tracing::info!(pool = %flags.pool, "vk-cocoon-sim running");
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    tracing::info!(stats = ?sim.stats(), "stopping");
    sim.stop().await;
    Ok(())
}
