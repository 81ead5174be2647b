//! The operator's run: both controllers in this process through a counting client, driven
//! through the four phases by the harness.

use std::time::Duration;

use clap::Parser;
use cocoon::crd::CocoonSetPhase;
use tokio_util::sync::CancellationToken;

use super::harness;
use super::{Bench, Figures, PhaseSpec};

/// The operator's flags: no leader election, ephemeral ports, quiet logs, this registry and
/// namespace only.
fn operator_flags(registry: &str, namespace: &str) -> anyhow::Result<cocoon::run::Flags> {
    Ok(cocoon::run::Flags::try_parse_from([
        "cocoon-operator",
        "--leader-elect=false",
        "--metrics-addr=127.0.0.1:0",
        "--probe-addr=127.0.0.1:0",
        "--log-level=warn",
        &format!("--oci-registry={registry}"),
        &format!("--watch-namespace={namespace}"),
    ])?)
}

/// Measures the operator in namespace `ns` (its simulator running).
pub async fn measure(bench: &Bench, ns: &str) -> anyhow::Result<Figures> {
    let (client, counts) = testenv::counting_client().await;
    let stop = CancellationToken::new();
    let flags = operator_flags(&bench.registry.url(), ns)?;
    let operator = tokio::spawn(cocoon::run::run_with_client(flags, client, stop.clone()));
    // Start-up: the first lists and watches, counted apart.
    harness::settle(&counts, &bench.registry).await;
    let startup = counts.by_resource();
    let result = drive(bench, ns, &counts).await;
    stop.cancel();
    let _ = operator.await;
    let mut figures = result?;
    figures.startup = Some(startup);
    Ok(figures)
}

async fn drive(
    bench: &Bench,
    ns: &str,
    counts: &testenv::RequestCounts,
) -> anyhow::Result<Figures> {
    let sets = super::sets(bench, ns);
    let n = bench.args.sets;
    let mut figures = Figures::default();
    for spec in PhaseSpec::ALL {
        let api = sets.clone();
        let phase = match spec {
            PhaseSpec::Create => {
                let done = harness::until_all(api.clone(), n, CocoonSetPhase::Running);
                let action = harness::create_sets(&sets, n, |_| {});
                bench.phase(spec, counts, done, action).await?
            }
            PhaseSpec::Suspend => {
                let done = harness::until_all(api.clone(), n, CocoonSetPhase::Suspended);
                let action = harness::set_suspend(&sets, n, true, |_| {});
                bench.phase(spec, counts, done, action).await?
            }
            PhaseSpec::Unsuspend => {
                let done = harness::until_all(api.clone(), n, CocoonSetPhase::Running);
                let action = harness::set_suspend(&sets, n, false, |_| {});
                let phase = bench.phase(spec, counts, done, action).await?;
                counts.reset();
                let idle = bench.args.idle_seconds;
                tokio::time::sleep(Duration::from_secs(idle)).await; // the idle measurement window
                figures.idle_per_minute = Some(counts.total() as f64 * 60.0 / idle.max(1) as f64);
                phase
            }
            PhaseSpec::Delete => {
                let done = harness::until_no_sets(api.clone());
                let action = harness::delete_sets(&sets);
                bench.phase(spec, counts, done, action).await?
            }
        };
        figures.phases.push(phase);
    }
    Ok(figures)
}
