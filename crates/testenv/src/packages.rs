//! Debian packages the plane and its tests need on the host, installed when missing.
//!
//! Contract: [`ensure`] returns at once when the package's program exists; otherwise, as root
//! with apt-get, it installs the package (`apt-get update` only when the first attempt fails)
//! and checks again; without root or apt-get it fails saying what to install. Packages whose
//! install would start a service are avoided (e.g. `redis-tools` holds the redis-server
//! executable without the `redis-server` package's service).

use std::path::Path;
use std::process::Command;

/// Makes sure `program` (an absolute path) exists, installing Debian package `package`.
pub fn ensure(program: &str, package: &str, why: &str) -> anyhow::Result<()> {
    if Path::new(program).exists() {
        return Ok(());
    }
    // Effective uid, the second field of /proc/self/status's "Uid:" line.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1));
    anyhow::ensure!(
        euid == Some("0") && Path::new("/usr/bin/apt-get").exists(),
        "{program} is missing: install Debian's {package} package (apt-get install {package}); {why}"
    );
    eprintln!("installing Debian's {package} package ({why})");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
    };
    if !apt(&["install", "-y", "-qq", package])? {
        anyhow::ensure!(apt(&["update", "-qq"])?, "apt-get update failed");
        anyhow::ensure!(
            apt(&["install", "-y", "-qq", package])?,
            "apt-get install {package} failed"
        );
    }
    anyhow::ensure!(
        Path::new(program).exists(),
        "{package} installed but {program} is still missing"
    );
    Ok(())
}
