//! Starting, probing and stopping the control-plane processes.
//!
//! Each component runs in its own process group, detached from the test process, so the plane
//! outlives the test binary that started it and is shared by the next one. Only processes whose
//! PID we recorded (and whose command line still names our binary) are ever signalled.

use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::os::unix::process::CommandExt;

/// A started component: its name, PID and the binary it runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Proc {
    /// Component name, e.g. `kube-apiserver`.
    pub name: String,
    /// Process id.
    pub pid: i32,
    /// Absolute path of the binary (used to guard against PID reuse).
    pub binary: String,
}

/// Spawns `binary args…` detached, with stdout and stderr appended to `<logs>/<name>.log`.
pub fn spawn(name: &str, binary: &Path, args: &[String], logs: &Path) -> anyhow::Result<Proc> {
    fs::create_dir_all(logs)?;
    let log = File::options()
        .create(true)
        .append(true)
        .open(logs.join(format!("{name}.log")))?;
    let child = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {name} ({}): {e}", binary.display()))?;
    Ok(Proc {
        name: name.into(),
        pid: child.id() as i32,
        binary: binary.display().to_string(),
    })
}

impl Proc {
    /// True when the process exists, is not a zombie, and still runs our binary.
    pub fn alive(&self) -> bool {
        let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return false;
        };
        // Field 3 (after the parenthesised command) is the state; Z = zombie, X = dead.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if matches!(state, Some("Z") | Some("X") | None) {
            return false;
        }
        let exe = fs::read_link(format!("/proc/{}/exe", self.pid)).ok();
        exe.is_some_and(|p| p.display().to_string().starts_with(&self.binary))
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub fn stop(&self, grace: Duration) {
        if !self.alive() {
            return;
        }
        let pid = Pid::from_raw(self.pid);
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50)); // polling a condition with a deadline
        }
        if self.alive() {
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}

/// Stops a child of this process: SIGTERM, then SIGKILL if it has not exited within `grace`;
/// always reaps it.
pub fn stop_child(child: &mut std::process::Child, grace: Duration) {
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100)); // waiting for our child to exit, with a deadline
    }
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; the window for a clash is tiny).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits until `probe` returns true or the deadline passes.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(20);
    loop {
        if probe() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

/// CPU seconds (user + system) this process has used so far (benchmarks).
pub fn cpu_seconds() -> f64 {
    cpu_seconds_in(&fs::read_to_string("/proc/self/stat").unwrap_or_default())
}

/// CPU seconds (user + system) process `pid` has used so far, 0 when unreadable (benchmarks).
pub fn cpu_seconds_of(pid: i32) -> f64 {
    cpu_seconds_in(&fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

fn cpu_seconds_in(stat: &str) -> f64 {
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state(0) … utime(11) stime(12), in clock ticks (100 Hz on Linux).
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set size (VmHWM) of this process in KiB, 0 when unreadable (benchmarks).
pub fn peak_rss_kib() -> u64 {
    status_kib("/proc/self/status", "VmHWM:")
}

/// Resident set size (VmRSS) of process `pid` in KiB, 0 when unreadable (benchmarks).
pub fn rss_kib(pid: i32) -> u64 {
    status_kib(&format!("/proc/{pid}/status"), "VmRSS:")
}

fn status_kib(path: &str, key: &str) -> u64 {
    let status = fs::read_to_string(path).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_process_is_alive_until_stopped() {
        let dir = std::env::temp_dir().join(format!("testenv-proc-{}", std::process::id()));
        let sleep = which("sleep");
        let p = spawn("sleeper", &sleep, &["30".into()], &dir).unwrap();
        assert!(p.alive());
        p.stop(Duration::from_secs(5));
        wait_until("sleeper to exit", Duration::from_secs(5), || !p.alive()).unwrap();
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_recorded_pid_running_another_binary_is_not_ours() {
        let me = Proc {
            name: "x".into(),
            pid: std::process::id() as i32,
            binary: "/nonexistent/bin".into(),
        };
        assert!(
            !me.alive(),
            "PID reuse guard: another binary must not count as our component"
        );
    }

    fn which(name: &str) -> std::path::PathBuf {
        let p = Path::new("/usr/bin").join(name);
        if p.exists() {
            p
        } else {
            Path::new("/bin").join(name)
        }
    }
}
