//! redis-server as the instance manager's child process.
//!
//! Contract:
//! - [`spawn`] starts `redis-server <conf>` (argv[0] `redis-server`, whatever the executable's
//!   file name) with the manager's stdout and stderr; it is killed if the manager's handle is
//!   dropped while it runs.
//! - [`Child::stop`] is the graceful stop: `SHUTDOWN` over the local socket (Redis persists
//!   and waits up to `shutdown-timeout` for lagging replicas), SIGTERM if the socket does not
//!   answer, and SIGKILL only when the whole `grace` is spent — upstream sent SIGKILL on every
//!   pod stop. It returns once the process is gone.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::local::Local;

/// A running redis-server.
#[derive(Debug)]
pub struct Child {
    inner: tokio::process::Child,
    pid: u32,
}

/// Starts `binary <conf>`.
pub fn spawn(binary: &Path, conf: &Path) -> std::io::Result<Child> {
    let inner = tokio::process::Command::new(binary)
        // Redis picks its mode from argv[0]; Debian ships the server as `redis-check-rdb`
        // (package redis-tools), so the name is set whatever the file is called.
        .arg0("redis-server")
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let pid = inner.id().unwrap_or(0);
    Ok(Child { inner, pid })
}

impl Child {
    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.inner.wait().await
    }

    /// Whether it has exited (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.inner.try_wait().ok().flatten()
    }

    fn signal(&self, s: Signal) {
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = kill(Pid::from_raw(pid), s);
        }
    }

    /// Stops redis-server gracefully within `grace` (see the module contract).
    pub async fn stop(&mut self, local: &Local, grace: Duration) -> std::io::Result<ExitStatus> {
        let start = Instant::now();
        if let Some(s) = self.exited() {
            return Ok(s);
        }
        let asked = local.shutdown(grace).await;
        if let Err(e) = &asked {
            tracing::warn!(error = %e, "SHUTDOWN over the socket failed; sending SIGTERM");
            self.signal(Signal::SIGTERM);
        }
        let left = grace.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, self.inner.wait()).await {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(
                    ?grace,
                    "redis-server still running at the end of the grace period; SIGKILL"
                );
                self.signal(Signal::SIGKILL);
                self.inner.wait().await
            }
        }
    }
}
