//! Flotilla's one entry point: `cargo xtask <command>`.
//!
//! - `up` / `down` / `status`: the local control plane (upstream binaries + kwok, loopback only)
//! - `demo`: start the plane and show Flotilla's main job converging on it
//! - `gen [--check]`: write the CRD YAML generated from the Rust types and the operators'
//!   Containerfiles (or fail on drift)
//! - `image [OPERATOR…] [--push REGISTRY]`: the operators' container images as OCI archives,
//!   built without a container engine, optionally pushed
//! - `test`: everything CI checks: format, lints, generated-file drift, every test
//! - `chaos [--operator NAME] [--runs N] [--seed S]`: the chaos soak (docs/testing.md) and its
//!   table
//! - `kubectl ARGS…`: the pinned kubectl against the local plane
//! - `spaces up|down|status|kubectl`: a set of separate control planes (WDS, ITS, WECs)

use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::{Parser, Subcommand};

mod chaos;
mod demo;
mod demo_cocoon;
mod demo_fdb;
mod demo_redis;
mod demo_stellar;
mod demo_support;
mod gen_crds;
mod image;
mod spaces;
mod testrun;

#[derive(Parser)]
#[command(about = "Flotilla developer tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build (or reuse) the upstream binaries and start (or reuse) the local control plane.
    Up,
    /// Stop the local control plane and remove its state.
    Down,
    /// Show which control-plane components run.
    Status,
    /// Start the plane and run Flotilla's main job on it, showing it converge.
    Demo {
        /// Only this system's part (`stellar`, `redis` or `fdb`).
        #[arg(long)]
        only: Option<String>,
    },
    /// Write generated CRD YAML into deploy/<operator>/crds/ and the Containerfiles into
    /// deploy/<operator>/ (with --check: fail on drift).
    Gen {
        /// Compare instead of writing; exit non-zero when the committed YAML differs.
        #[arg(long)]
        check: bool,
    },
    /// Rewrite crates/kit/src/k8s_schema_facts.json from the local plane's OpenAPI (what
    /// Kubernetes says about the types CRDs embed); run after changing the Kubernetes version.
    GenK8sFacts,
    /// Build operator images (OCI archives, no container engine needed); optionally push them.
    Image(image::Args),
    /// Run every check and test (what CI runs).
    Test {
        /// Stop the control plane afterwards (CI does; developers keep it warm).
        #[arg(long)]
        down: bool,
    },
    /// Separate control planes for multi-cluster systems: a WDS, an ITS and WECs.
    Spaces {
        #[command(subcommand)]
        cmd: spaces::Cmd,
    },
    /// Run the chaos scenarios (faults, kills, invariants) over many seeds and print the soak
    /// table (docs/testing.md).
    Chaos(chaos::Args),
    /// Run the pinned kubectl against the local plane.
    Kubectl {
        /// Arguments passed to kubectl.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse().cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Up => {
            let up = testenv::up()?;
            let verb = if up.reused {
                "reused the running"
            } else {
                "started the"
            };
            println!("{verb} local control plane in {:.1?}", up.took);
            println!("export KUBECONFIG={}", testenv::kubeconfig_path().display());
            kubectl(&["get", "nodes", "-L", "topology.kubernetes.io/zone"])
        }
        Cmd::Down => {
            let was = testenv::down()?;
            println!(
                "{}",
                if was {
                    "local control plane stopped"
                } else {
                    "no local control plane was running"
                }
            );
            Ok(())
        }
        Cmd::Status => {
            let s = testenv::status();
            match &s.state {
                None => println!("no local control plane recorded"),
                Some(state) => {
                    println!(
                        "kubernetes {} on https://127.0.0.1:{}",
                        state.kubernetes, state.api_port
                    );
                    for (name, pid, alive) in &s.components {
                        println!(
                            "  {name:<24} pid {pid:<8} {}",
                            if *alive { "running" } else { "NOT RUNNING" }
                        );
                    }
                    println!(
                        "  apiserver /readyz: {}",
                        if s.api_ready { "ok" } else { "not ready" }
                    );
                    if let Some(slot) = state.pod_network_slot {
                        println!(
                            "  process-backed nodes {}: pod network slot {slot}, gateway {}",
                            testenv::procnode::NODES.join(", "),
                            testenv::procnode::network::gateway(slot)
                        );
                    }
                    println!("export KUBECONFIG={}", testenv::kubeconfig_path().display());
                }
            }
            Ok(())
        }
        Cmd::Demo { only } => match only.as_deref() {
            None => demo::run(),
            Some("stellar") => demo_stellar::run(),
            Some("redis") => demo::redis_only(),
            Some("fdb") => demo::fdb_only(),
            Some(other) => anyhow::bail!("no demo part {other:?} (known: stellar, redis, fdb)"),
        },
        Cmd::Gen { check } => {
            gen_crds::run(check)?;
            image::containerfile::run(check)
        }
        Cmd::GenK8sFacts => gen_crds::k8s_facts(),
        Cmd::Image(args) => image::run(args),
        Cmd::Test { down } => test(down),
        Cmd::Chaos(args) => chaos::run(args),
        Cmd::Kubectl { args } => kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>()),
        Cmd::Spaces { cmd } => spaces::run(cmd),
    }
}

/// Runs the pinned kubectl against the local plane.
pub fn kubectl(args: &[&str]) -> anyhow::Result<()> {
    let state = testenv::plane::read_state()
        .ok_or_else(|| anyhow::anyhow!("no local plane: run cargo xtask up"))?;
    let status = Command::new(state.bin_dir.join("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            testenv::kubeconfig_path().display()
        ))
        .args(args)
        .status()?;
    anyhow::ensure!(status.success(), "kubectl {} failed", args.join(" "));
    Ok(())
}

struct Phases(Vec<(String, f64)>);

impl Phases {
    fn run(&mut self, name: &str, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
        eprintln!("==> {name}");
        let start = Instant::now();
        let r = f();
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "<== {name}: {secs:.1}s{}",
            if r.is_err() { " (FAILED)" } else { "" }
        );
        self.0.push((name.to_string(), secs));
        r
    }
    fn report(&self) {
        eprintln!("phase timings:");
        for (n, s) in &self.0 {
            eprintln!("  {n:<28} {s:>8.1}s");
        }
    }
}

fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let status = testenv::cargo::command().args(args).status()?;
    anyhow::ensure!(status.success(), "cargo {} failed", args.join(" "));
    Ok(())
}

static TOTALS: std::sync::OnceLock<testrun::Totals> = std::sync::OnceLock::new();

/// Every test binary of the workspace (several at a time, see `testrun`), closing with the
/// totals on one line (`tests: N passed, N failed`), so the last line a reader (or CI) sees is
/// the whole result. Every binary runs even after one fails, so the totals count every test.
fn cargo_test() -> anyhow::Result<()> {
    let totals = testrun::run()?;
    let (passed, failed) = (totals.passed, totals.failed);
    println!("tests: {passed} passed, {failed} failed");
    TOTALS.set(totals).ok();
    anyhow::ensure!(failed == 0, "{failed} tests failed");
    anyhow::ensure!(passed > 0, "cargo test ran no test");
    Ok(())
}

/// Passed and failed counts of a libtest summary line (`test result: ok. 3 passed; 0 failed; …`).
fn parse_test_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("test result: ")?;
    let count = |word: &str| {
        rest.split(';')
            .find_map(|part| {
                part.trim()
                    .trim_start_matches("ok. ")
                    .trim_start_matches("FAILED. ")
                    .strip_suffix(word)
            })
            .and_then(|n| n.trim().parse().ok())
    };
    Some((count(" passed")?, count(" failed")?))
}

fn test(down: bool) -> anyhow::Result<()> {
    let mut p = Phases(Vec::new());
    let r = (|| {
        p.run("format check", || cargo(&["fmt", "--all", "--", "--check"]))?;
        p.run("build upstream binaries", || {
            testenv::plane::ensure_binaries().map(|_| ())
        })?;
        p.run(
            "install docker-registry",
            testenv::registry::ensure_installed,
        )?;
        p.run(
            "install iproute2, redis-tools",
            testenv::procnode::ensure_host_packages,
        )?;
        p.run(
            "install azurite (Azure Storage emulator)",
            testenv::azurite::ensure_installed,
        )?;
        p.run("build workspace + tests", || {
            cargo(&["test", "--workspace", "--no-run", "--quiet"])
        })?;
        p.run("clippy -D warnings", || {
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--quiet",
                "--",
                "-D",
                "warnings",
            ])
        })?;
        p.run("generated files up to date", || {
            gen_crds::run(true)?;
            image::containerfile::run(true)
        })?;
        p.run("start local control plane", || testenv::up().map(|_| ()))?;
        p.run("every test binary", cargo_test)
    })();
    if down {
        let _ = p.run("stop local control plane", || testenv::down().map(|_| ()));
        let _ = p.run("stop spaces", || testenv::spaces::down().map(|_| ()));
    }
    p.report();
    if let Some(t) = TOTALS.get() {
        // The end of the log is what a CI summary keeps: every failing test, then the totals.
        if !t.failing.is_empty() {
            println!("failing tests:");
            for f in &t.failing {
                println!("  {f}");
            }
        }
        println!("tests: {} passed, {} failed", t.passed, t.failed);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::parse_test_result;

    #[test]
    fn libtest_summaries_are_parsed() {
        let ok = "test result: ok. 12 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 13.84s";
        assert_eq!(parse_test_result(ok), Some((12, 0)));
        let bad = "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out";
        assert_eq!(parse_test_result(bad), Some((3, 2)));
        assert_eq!(parse_test_result("running 3 tests"), None);
    }
}
