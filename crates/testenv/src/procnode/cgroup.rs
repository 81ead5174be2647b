//! The agent's cgroup v2 subtree: one cgroup per container, so a container's every process
//! (children and grandchildren included) can be frozen, thawed, counted and killed at once,
//! and `down` can kill everything the agent ever started with one write.
//!
//! Contract:
//! - The subtree is `<cgroup2 mount>/flotilla-<slot>`; no controllers are enabled, only the
//!   core files (`cgroup.procs`, `cgroup.kill`, `cgroup.freeze`, `cpu.stat`) are used.
//! - Containers live in `<subtree>/<pod uid>/<container>`, shims in `<subtree>/shims`.
//! - [`Subtree::reset`] kills and removes whatever an earlier agent of the same slot left.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where cgroup v2 is mounted (`/sys/fs/cgroup` on unified hosts, `/sys/fs/cgroup/unified`
/// on hybrid ones).
pub fn mount_point() -> io::Result<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo")?;
    info.lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            if right.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            left.split_whitespace().nth(4).map(PathBuf::from)
        })
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no cgroup2 file system is mounted"))
}

/// The agent's subtree.
#[derive(Debug, Clone)]
pub struct Subtree {
    /// `<mount>/flotilla-<slot>`.
    pub root: PathBuf,
}

impl Subtree {
    /// The subtree of `slot` (not created).
    pub fn of(slot: u8) -> io::Result<Self> {
        Ok(Self {
            root: mount_point()?.join(format!("flotilla-{slot}")),
        })
    }

    /// Kills everything in the subtree and removes it, then creates it afresh with `shims`.
    pub fn reset(&self) -> io::Result<()> {
        self.remove()?;
        fs::create_dir_all(self.shims())?;
        Ok(())
    }

    /// Kills every process in the subtree and removes its cgroups (for `down` and start-up).
    pub fn remove(&self) -> io::Result<()> {
        if self.root.exists() {
            kill(&self.root)?;
            remove_tree(&self.root)?;
        }
        Ok(())
    }

    /// Where shims wait on their containers.
    pub fn shims(&self) -> PathBuf {
        self.root.join("shims")
    }

    /// A pod's cgroup.
    pub fn pod(&self, uid: &str) -> PathBuf {
        self.root.join(uid)
    }

    /// A container's cgroup.
    pub fn container(&self, uid: &str, name: &str) -> PathBuf {
        self.pod(uid).join(name)
    }
}

/// SIGKILLs every process in `cg` and below, and waits (up to 10 s) until they are gone.
pub fn kill(cg: &Path) -> io::Result<()> {
    if !cg.exists() {
        return Ok(());
    }
    fs::write(cg.join("cgroup.kill"), "1")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while populated(cg) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10)); // the kernel reaps asynchronously; poll with a deadline
    }
    Ok(())
}

/// True while any process lives in `cg` or below.
pub fn populated(cg: &Path) -> bool {
    fs::read_to_string(cg.join("cgroup.events"))
        .map(|e| e.lines().any(|l| l == "populated 1"))
        .unwrap_or(false)
}

/// Freezes (true) or thaws (false) every process in `cg`.
pub fn freeze(cg: &Path, frozen: bool) -> io::Result<()> {
    fs::write(cg.join("cgroup.freeze"), if frozen { "1" } else { "0" })
}

/// True when `cg` is frozen.
pub fn frozen(cg: &Path) -> bool {
    fs::read_to_string(cg.join("cgroup.events"))
        .map(|e| e.lines().any(|l| l == "frozen 1"))
        .unwrap_or(false)
}

/// The processes in `cg` (not below).
pub fn procs(cg: &Path) -> Vec<i32> {
    fs::read_to_string(cg.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Removes `cg` and its children (bottom-up); they must be empty of processes.
pub fn remove_tree(cg: &Path) -> io::Result<()> {
    if !cg.exists() {
        return Ok(());
    }
    for entry in fs::read_dir(cg)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    match fs::remove_dir(cg) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// SIGKILLs every process in `cg` and below without waiting (they report through their shims).
pub fn kill_now(cg: PathBuf) -> io::Result<()> {
    if cg.exists() {
        fs::write(cg.join("cgroup.kill"), "1")?;
    }
    Ok(())
}
