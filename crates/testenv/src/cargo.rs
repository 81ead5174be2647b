//! Running cargo from a program cargo started (a test, `cargo xtask`, a benchmark).
//!
//! Cargo gives the programs it runs `CARGO_MANIFEST_DIR`, `CARGO_PKG_*` and friends. A nested
//! cargo inherits them, and build scripts that rerun when one of them changes (ring's watches
//! `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`) see a different value than in a shell's build:
//! their crate and everything above it are rebuilt in the shared target dir, under the feet of
//! the programs running beside it, and rebuilt once more by the next plain build.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Whether `name` is one of the variables cargo sets for a program it runs.
pub fn set_by_cargo(name: &str) -> bool {
    const NAMES: [&str; 9] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    NAMES.contains(&name) || name.starts_with("CARGO_PKG_") || name.starts_with("CARGO_BIN_EXE_")
}

/// `cargo` (as `$CARGO` names it) with those variables removed: it builds as a shell would.
pub fn command() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo) {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// `cargo build <args>` (as [`command`] runs it; its diagnostics go to stderr) and the path of
/// the executable it built for target `name`.
pub fn build_executable(args: &[&str], name: &str) -> anyhow::Result<PathBuf> {
    let out = command()
        .arg("build")
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run cargo to build {name}: {e}"))?;
    anyhow::ensure!(out.status.success(), "cargo build of {name} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| anyhow::anyhow!("cargo reported no {name} executable"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_variables_cargo_sets_for_a_program_are_dropped() {
        for n in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_PRE",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo(n), "{n}");
        }
        for n in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_TERM_COLOR",
            "PATH",
        ] {
            assert!(!set_by_cargo(n), "{n}");
        }
    }
}
