//! `fdb-sim`: the FoundationDB simulator (test support; see `fdb::sim` and docs/fdb.md).
//! Started as `fdbcli`, `fdbbackup` or `fdbrestore` (a symlink) it is the front end;
//! otherwise `fdb-sim serve --socket <path>` runs the server and
//! `fdb-sim install --dir <dir> --version <x.y.z>…` lays out a `$FDB_BINARY_DIR`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// The FoundationDB simulator's server and installer.
#[derive(Parser)]
#[command(name = "fdb-sim", version)]
enum Command {
    /// Serve the simulated databases on a unix socket.
    Serve {
        /// The socket to listen on (`<FDB_BINARY_DIR>/fdb-sim.sock` for the front ends).
        #[arg(long)]
        socket: PathBuf,
        /// Make the processes follow this namespace's FoundationDB pods (with the
        /// kubeconfig of `$KUBECONFIG`, as their monitors would).
        #[arg(long, value_name = "NAMESPACE")]
        follow_namespace: Option<String>,
        /// How many `status json` reads an excluded storage or log process keeps its data
        /// (0: the exclusion completes at once).
        #[arg(long, default_value_t = 0)]
        drain_reads: u32,
    },
    /// Link fdbcli, fdbbackup and fdbrestore to this binary under `<dir>/<major.minor>/`.
    Install {
        /// The directory to use as `$FDB_BINARY_DIR`.
        #[arg(long)]
        dir: PathBuf,
        /// A FoundationDB version to provide tools for (repeatable).
        #[arg(long = "version", required = true)]
        versions: Vec<String>,
    },
}

fn main() -> ExitCode {
    let mut args = std::env::args();
    let argv0 = PathBuf::from(args.next().unwrap_or_default());
    let tool = argv0.file_name().map(|n| n.to_string_lossy().into_owned());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if tool
        .as_deref()
        .is_some_and(|t| fdb::sim::TOOLS.contains(&t))
    {
        let rest: Vec<String> = args.collect();
        let r = runtime.block_on(fdb::sim::front_end(&argv0, &rest));
        let _ = std::io::stdout().write_all(r.stdout.as_bytes());
        let _ = std::io::stderr().write_all(r.stderr.as_bytes());
        return ExitCode::from(u8::try_from(r.code).unwrap_or(1));
    }
    let result = match Command::parse() {
        Command::Serve {
            socket,
            follow_namespace,
            drain_reads,
        } => {
            let _ = kit::telemetry::init(kit::telemetry::LogFormat::Text, Some("info"));
            runtime.block_on(async {
                let follow = match follow_namespace {
                    Some(ns) => Some((kube::Client::try_default().await?, ns)),
                    None => None,
                };
                fdb::sim::server::run(&socket, follow, drain_reads).await
            })
        }
        Command::Install { dir, versions } => install(&dir, &versions),
    };
    kit::cli::finish(result)
}

fn install(dir: &std::path::Path, versions: &[String]) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
    let socket = fdb::sim::install(dir, &exe, &versions)?;
    println!(
        "FDB_BINARY_DIR={} (start the server with: fdb-sim serve --socket {})",
        dir.display(),
        socket.display()
    );
    Ok(())
}
