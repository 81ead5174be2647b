//! `vksim`: plays vk-cocoon on the local plane's kwok nodes (see the `vksim` crate).
//! Claims its nodes (labels them with the pool), then runs until SIGINT or SIGTERM and
//! releases the pods it still holds on the way out.

use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

/// Flags of the simulator; the cluster comes from `KUBECONFIG`.
#[derive(Parser, Debug)]
#[command(name = "vksim", about = "A stand-in for vk-cocoon on kwok nodes")]
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
    /// The nodes this simulator is vk-cocoon on: `name,name,…` or `selector:<label selector>`.
    /// Only these are labelled with the pool, and only pods bound to them are played.
    #[arg(long, default_value = "selector:type=kwok")]
    nodes: String,
    /// Node pool its nodes are labelled with (`cocoonstack.io/pool`).
    #[arg(long, default_value = vksim::DEFAULT_POOL)]
    pool: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        // Colours only on a terminal: the tests and the demo capture this log.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let flags = Flags::parse();
    let client = kube::Client::try_default().await?;
    let cfg = vksim::SimConfig {
        registry_url: flags.registry,
        registry_prefix: flags.registry_prefix,
        namespace: flags.namespace,
        nodes: vksim::Nodes::parse(&flags.nodes),
        pool: flags.pool,
    };
    let pool = cfg.pool.clone();
    let sim = vksim::Simulator::start(client, cfg).await?;
    tracing::info!(%pool, nodes = ?sim.nodes(), "vksim running");
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    tracing::info!(stats = ?sim.stats(), "stopping");
    sim.stop().await;
    Ok(())
}
