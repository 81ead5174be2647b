//! The agent's side of a container run: start its shim, learn the container's host pid, and
//! wait for its exit.
//!
//! Contract:
//! - [`launch`] spawns `proc-node shim <spec>` from this very executable (`/proc/self/exe`, so
//!   a rebuilt binary on disk never mixes versions) and returns once the shim reports the
//!   container started, or the reason it could not.
//! - [`Launched::wait`] returns the exit (code or signal). The shim's stdin, the lifeline, is
//!   held until then: if the agent dies, every shim sees it close and kills its container.
//! - Signals go to the container's init (its PID 1) with [`signal`]; killing PID 1 kills its
//!   whole PID namespace, and `cgroup.kill` ([`super::cgroup::kill`]) reaches every process.

use std::path::Path;
use std::process::Stdio;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::spec::ShimEvent;

/// A started container run.
#[derive(Debug)]
pub struct Launched {
    /// Host pid of the container's init (its PID 1).
    pub pid: i32,
    cgroup: std::path::PathBuf,
    shim: Child,
    events: Lines<BufReader<ChildStdout>>,
    _lifeline: Option<ChildStdin>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Exit code of a normal exit.
    pub code: Option<i32>,
    /// Signal that ended it.
    pub signal: Option<i32>,
}

impl Exit {
    /// The exit code as runtimes report it: 128 + signal for a signalled process.
    pub fn exit_code(&self) -> i32 {
        self.code.unwrap_or_else(|| 128 + self.signal.unwrap_or(0))
    }
}

/// Starts the run described by `spec_path`.
pub async fn launch(spec_path: &Path, cgroup: &Path) -> Result<Launched, String> {
    let mut shim = tokio::process::Command::new("/proc/self/exe")
        .arg("shim")
        .arg(spec_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting the shim: {e}"))?;
    let stdout = shim.stdout.take().ok_or("shim without stdout")?;
    let lifeline = shim.stdin.take();
    let mut events = BufReader::new(stdout).lines();
    match next_event(&mut events).await {
        Some(ShimEvent::Started { pid }) => Ok(Launched {
            pid,
            cgroup: cgroup.to_path_buf(),
            shim,
            events,
            _lifeline: lifeline,
        }),
        Some(ShimEvent::Failed { message }) => {
            let _ = shim.wait().await;
            Err(message)
        }
        other => {
            let _ = shim.kill().await;
            let _ = super::cgroup::kill_now(cgroup.to_path_buf());
            Err(format!("the shim reported {other:?} instead of a start"))
        }
    }
}

async fn next_event(lines: &mut Lines<BufReader<ChildStdout>>) -> Option<ShimEvent> {
    loop {
        let line = lines.next_line().await.ok()??;
        if let Ok(e) = serde_json::from_str(&line) {
            return Some(e);
        }
    }
}

impl Launched {
    /// Waits until the container exits.
    pub async fn wait(mut self) -> Exit {
        let exit = loop {
            match next_event(&mut self.events).await {
                Some(ShimEvent::Exited { code, signal }) => break Exit { code, signal },
                Some(_) => continue,
                // The shim died without reporting: make sure the container goes with it.
                None => {
                    let _ = super::cgroup::kill_now(self.cgroup.clone());
                    break Exit {
                        code: None,
                        signal: Some(9),
                    };
                }
            }
        };
        let _ = self.shim.wait().await;
        exit
    }
}

/// Sends `sig` to host pid `pid` (a container's init).
pub fn signal(pid: i32, sig: Signal) {
    let _ = kill(Pid::from_raw(pid), sig);
}
