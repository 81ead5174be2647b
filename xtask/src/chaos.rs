//! `cargo xtask chaos`: the chaos soak. For each operator it runs that operator's chaos test
//! binary (`cargo test -p <operator> --test chaos`) with the seeds to run, how many at once and
//! a report file in the environment (`testenv::chaos::scenario`: `FLOTILLA_CHAOS_SEEDS`,
//! `FLOTILLA_CHAOS_PARALLEL`, `FLOTILLA_CHAOS_REPORT`), then prints the soak table of every
//! run's report (`testenv::chaos::report::table`). Every run starts with the fault-free
//! baseline its seeded runs are compared with.
//!
//! - `--runs N`: seeds `first..first+N` (`--runs 0`: the baseline only);
//! - `--seed S`: that one seed (replaying a failure: the run's log and proxy journal are named
//!   in its summary line);
//! - `--scenario NAME`: only the test whose name contains `NAME`;
//! - `--table FILE`: run nothing, print the table of the reports in `FILE` (a soak's JSON
//!   lines, also while it is still running).
//!
//! The command fails when a run violated an invariant (the table names the seeds).

use std::path::PathBuf;

use testenv::chaos::scenario::{ENV_PARALLEL, ENV_REPORT, ENV_SEEDS, RunReport};

/// The operators that have chaos scenarios.
pub const OPERATORS: &[&str] = &["redroid", "cocoon", "redis", "fdb", "stellar"];
/// The operators whose scenarios run on the spaces (`testenv::spaces`, which their test
/// brings up), not on the single plane.
const ON_SPACES: &[&str] = &["stellar"];

/// `cargo xtask chaos` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// One operator (default: every operator with scenarios).
    #[arg(long)]
    operator: Option<String>,
    /// Only the scenario whose test name contains this.
    #[arg(long)]
    scenario: Option<String>,
    /// How many seeded runs per scenario.
    #[arg(long, default_value_t = 10)]
    runs: u64,
    /// The first seed of `--runs`.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Run this one seed (overrides `--runs`).
    #[arg(long)]
    seed: Option<u64>,
    /// How many runs go at once.
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Print the table of the run reports in this JSON-lines file and run nothing.
    #[arg(long)]
    table: Option<PathBuf>,
}

/// The `FLOTILLA_CHAOS_SEEDS` value of `args`.
fn seeds(args: &Args) -> String {
    match (args.seed, args.runs) {
        (Some(s), _) => s.to_string(),
        (None, 0) => "none".to_owned(),
        (None, n) => format!("{}-{}", args.first, args.first + n - 1),
    }
}

/// The reports of a JSON-lines file (lines that do not parse are skipped).
fn reports(path: &std::path::Path) -> Vec<RunReport> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Runs the soak; prints the table.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.table {
        println!("{}", testenv::chaos::report::table(&reports(path)));
        return Ok(());
    }
    let operators: Vec<&str> = match &args.operator {
        Some(op) => {
            anyhow::ensure!(
                OPERATORS.contains(&op.as_str()),
                "no chaos scenarios for operator {op:?} (there are: {})",
                OPERATORS.join(", ")
            );
            vec![op.as_str()]
        }
        None => OPERATORS.to_vec(),
    };
    if operators.iter().any(|op| !ON_SPACES.contains(op)) {
        testenv::up()?;
    }
    let report: PathBuf = std::env::temp_dir().join(format!(
        "flotilla-chaos-{}-{}.jsonl",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
    ));
    let seeds = seeds(&args);
    eprintln!(
        "run reports go to {} (cargo xtask chaos --table <file> prints the table so far)",
        report.display()
    );
    let mut failed = Vec::new();
    for op in operators {
        eprintln!("==> chaos {op}: seeds {seeds}, {} at once", args.parallel);
        let mut cmd = testenv::cargo::command();
        cmd.args(["test", "-p", op, "--test", "chaos", "--"])
            .args(args.scenario.as_deref())
            .args(["--nocapture", "--test-threads=1"])
            .env(ENV_SEEDS, &seeds)
            .env(ENV_PARALLEL, args.parallel.to_string())
            .env(ENV_REPORT, &report);
        if !cmd.status()?.success() {
            failed.push(op);
        }
    }
    println!("\n{}", testenv::chaos::report::table(&reports(&report)));
    println!("run reports (JSON lines): {}", report.display());
    anyhow::ensure!(
        failed.is_empty(),
        "chaos runs of {} failed (their replay commands are above)",
        failed.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(runs: u64, first: u64, seed: Option<u64>) -> Args {
        Args {
            operator: None,
            scenario: None,
            runs,
            first,
            seed,
            parallel: 1,
            table: None,
        }
    }

    #[test]
    fn seeds_of_the_arguments() {
        assert_eq!(seeds(&args(10, 1, None)), "1-10");
        assert_eq!(seeds(&args(3, 100, None)), "100-102");
        assert_eq!(seeds(&args(0, 1, None)), "none");
        assert_eq!(seeds(&args(10, 1, Some(42))), "42");
    }
}
