//! The operator process: flags, and both controllers run under [`kit::controller::Operator`].
//!
//! Contract:
//! - [`Flags`] are the shared operator flags plus `--watch-namespaces` and
//!   `--kmsg-tools-image` and `--max-concurrent-reconciles`, each with the upstream environment variable as fallback.
//! - [`run`] and [`run_with_client`] run until shutdown, an error of either controller, or the
//!   loss of leadership. With leader election on, controllers start only once the Lease
//!   `redroid-operator.io` (upstream's leader-election ID, unless `--lease-name` says otherwise)
//!   is held.
//! - One instance and one task controller run per watched namespace; with no namespace given
//!   (or only blanks) one pair runs cluster-wide.

use std::sync::Arc;

use clap::Parser;
use futures::future::try_join_all;
use kit::controller::{Operator, RunContext};
use kit::flags::OperatorFlags;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, DEFAULT_MAX_CONCURRENT_RECONCILES, Settings};
use crate::names;

/// Operator name: the process, its metrics and its logs.
pub const OPERATOR_NAME: &str = "redroid-operator";
/// Default leader-election Lease name, upstream's leader-election ID, so an upstream
/// deployment and this one never lead at once during a migration.
pub const LEASE_NAME: &str = "redroid-operator.io";

/// Command-line flags of `redroid-operator`.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(
    name = "redroid-operator",
    version,
    about = "The redroid operator: RedroidInstance and RedroidTask controllers"
)]
pub struct Flags {
    /// Metrics, probes, leader election and logging.
    #[command(flatten)]
    pub operator: OperatorFlags,

    /// Comma-separated namespaces to watch; empty means every namespace.
    #[arg(long, env = "WATCH_NAMESPACES", default_value = "")]
    pub watch_namespaces: String,

    /// kmsg-tools image for instances that set no `kmsgToolsImage`.
    #[arg(long, env = "RELATED_IMAGE_KMSG_TOOLS", default_value = names::DEFAULT_KMSG_TOOLS_IMAGE)]
    pub kmsg_tools_image: String,

    /// Reconciles each controller runs at once; one object is never reconciled twice at once.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = DEFAULT_MAX_CONCURRENT_RECONCILES)]
    pub max_concurrent_reconciles: usize,
}

impl Flags {
    /// The namespaces to watch, or `None` for cluster-wide (see [`parse_watch_namespaces`]).
    pub fn namespaces(&self) -> Option<Vec<String>> {
        parse_watch_namespaces(&self.watch_namespaces)
    }

    /// The settings the controllers build with.
    pub fn settings(&self) -> Settings {
        Settings {
            kmsg_tools_image: self.kmsg_tools_image.clone(),
            max_concurrent_reconciles: self.max_concurrent_reconciles,
        }
    }
}

/// Parses `--watch-namespaces`: entries are trimmed, blanks dropped and duplicates merged
/// (first occurrence keeps its place). Nothing left means cluster-wide: `None`.
pub fn parse_watch_namespaces(raw: &str) -> Option<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for ns in raw.split(',').map(str::trim).filter(|ns| !ns.is_empty()) {
        if !out.iter().any(|seen| seen == ns) {
            out.push(ns.to_owned());
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Runs the operator with the in-cluster (or `KUBECONFIG`) client until SIGTERM/SIGINT.
pub async fn run(flags: Flags) -> anyhow::Result<()> {
    let operator = Operator::new(OPERATOR_NAME, with_default_lease(flags.operator.clone()));
    start(operator, flags).await
}

/// Runs the operator with `client` until `shutdown` is cancelled (tests, embedding).
pub async fn run_with_client(
    flags: Flags,
    client: Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let operator = Operator::new(OPERATOR_NAME, with_default_lease(flags.operator.clone()))
        .with_client(client)
        .with_shutdown(shutdown);
    start(operator, flags).await
}

fn with_default_lease(mut flags: OperatorFlags) -> OperatorFlags {
    flags
        .lease_name
        .get_or_insert_with(|| LEASE_NAME.to_owned());
    flags
}

async fn start(operator: Operator, flags: Flags) -> anyhow::Result<()> {
    let namespaces = flags.namespaces();
    let settings = flags.settings();
    match &namespaces {
        Some(list) => tracing::info!(namespaces = %list.join(","), "watching namespaces"),
        None => tracing::info!("watching all namespaces"),
    }
    operator
        .run(move |rc| controllers(rc, settings, namespaces))
        .await
}

/// Both controllers for every scope; the first failure ends the operator.
async fn controllers(
    rc: RunContext,
    settings: Settings,
    namespaces: Option<Vec<String>>,
) -> anyhow::Result<()> {
    let ctx = Arc::new(Context::new(rc.client.clone(), settings));
    // A child token: a failing controller stops its siblings without cancelling the caller's.
    let rc = RunContext {
        shutdown: rc.shutdown.child_token(),
        ..rc
    };
    let scopes: Vec<Option<String>> = match namespaces {
        Some(list) => list.into_iter().map(Some).collect(),
        None => vec![None],
    };
    let mut runs = Vec::with_capacity(scopes.len() * 2);
    for ns in scopes {
        runs.push(tokio::spawn(crate::instance::run(
            ctx.clone(),
            rc.clone(),
            ns.clone(),
        )));
        runs.push(tokio::spawn(crate::task::run(ctx.clone(), rc.clone(), ns)));
    }
    let results = try_join_all(runs.into_iter().map(|h| async move { h.await? })).await;
    if results.is_err() {
        // One controller failed: stop the others before reporting it.
        rc.shutdown.cancel();
    }
    results.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn watch_namespaces_table() {
        let cases: [(&str, Option<Vec<String>>); 10] = [
            ("", None),
            ("   ", None),
            (",", None),
            (" , ,, ", None),
            ("default", ns(&["default"])),
            ("a,b", ns(&["a", "b"])),
            (" a , b ", ns(&["a", "b"])),
            ("a,a", ns(&["a"])),
            ("a,,b,", ns(&["a", "b"])),
            ("b, a ,b,a", ns(&["b", "a"])),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_watch_namespaces(raw), want, "input {raw:?}");
        }
    }

    fn parse(args: &[&str]) -> Flags {
        Flags::try_parse_from(std::iter::once("redroid-operator").chain(args.iter().copied()))
            .expect("flags parse")
    }

    #[test]
    fn flags_carry_namespaces_and_kmsg_image() {
        let f = parse(&[
            "--watch-namespaces",
            "games, tools,games",
            "--kmsg-tools-image",
            "registry.local/kmsg:1",
        ]);
        assert_eq!(f.namespaces(), ns(&["games", "tools"]));
        assert_eq!(f.settings().kmsg_tools_image, "registry.local/kmsg:1");
        assert_eq!(f.settings().max_concurrent_reconciles, 16);
        let f = parse(&["--max-concurrent-reconciles", "4"]);
        assert_eq!(f.settings().max_concurrent_reconciles, 4);
        assert_eq!(parse(&["--watch-namespaces="]).namespaces(), None);
    }

    #[test]
    fn lease_defaults_to_upstream_election_id_unless_given() {
        let f = parse(&["--lease-name=custom"]);
        assert_eq!(
            with_default_lease(f.operator).lease_name.as_deref(),
            Some("custom")
        );
        let mut f = parse(&[]);
        f.operator.lease_name = None;
        assert_eq!(
            with_default_lease(f.operator).lease_name.as_deref(),
            Some(LEASE_NAME)
        );
    }
}
