//! The shim: one small process per container run, between the agent and the container.
//!
//! Contract (`proc-node shim <spec.json>`):
//! - It joins the container's cgroup, enters the pod's network namespace and a new PID
//!   namespace, and starts `proc-node init` there (PID 1 of that namespace; init then execs the
//!   container's program, which stays PID 1). Then it moves itself to the shims' cgroup, so
//!   freezing the container never freezes its shim.
//! - It reports on stdout, one JSON line each: `started` with the container's host pid, then
//!   `exited` with the exit code or signal. The agent reads these.
//! - Its stdin is the agent's lifeline: when it closes (the agent died), the shim kills every
//!   process in the container's cgroup, reaps init and exits. No container outlives its agent.
//! - When init (PID 1) dies, the kernel kills everything else in its PID namespace.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sched::{CloneFlags, setns, unshare};

use super::spec::{RunSpec, ShimEvent};

/// Runs the shim; returns the process exit code.
pub fn main(spec_path: &Path) -> i32 {
    let spec: RunSpec = match fs::read(spec_path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => return fail(&format!("reading {}: {e}", spec_path.display())),
    };
    match run(&spec, spec_path) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

fn report(event: &ShimEvent) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, event);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn fail(message: &str) -> i32 {
    report(&ShimEvent::Failed {
        message: message.to_string(),
    });
    1
}

fn run(spec: &RunSpec, spec_path: &Path) -> Result<(), String> {
    let me = std::process::id().to_string();
    fs::write(spec.cgroup.join("cgroup.procs"), &me)
        .map_err(|e| format!("joining cgroup {}: {e}", spec.cgroup.display()))?;
    // The lifeline, started first: a process that unshared its PID namespace cannot start
    // threads any more.
    let cgroup = spec.cgroup.clone();
    std::thread::Builder::new()
        .name("lifeline".into())
        .spawn(move || {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin().lock();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            // The agent is gone: take the container with us.
            let _ = fs::write(cgroup.join("cgroup.kill"), "1");
        })
        .map_err(|e| format!("starting the lifeline thread: {e}"))?;
    let netns =
        File::open(&spec.netns).map_err(|e| format!("opening {}: {e}", spec.netns.display()))?;
    setns(netns.as_fd(), CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("entering the pod network: {e}"))?;
    unshare(CloneFlags::CLONE_NEWPID).map_err(|e| format!("new PID namespace: {e}"))?;
    let log = File::options()
        .create(true)
        .append(true)
        .open(&spec.log)
        .map_err(|e| format!("opening log {}: {e}", spec.log.display()))?;
    let stderr = log.try_clone().map_err(|e| e.to_string())?;
    let mut child = Command::new("/proc/self/exe")
        .arg("init")
        .arg(spec_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting init: {e}"))?;
    // Out of the container's cgroup, so freezing or killing the container spares the shim.
    let _ = fs::write(spec.shim_cgroup.join("cgroup.procs"), &me);
    report(&ShimEvent::Started {
        pid: child.id() as i32,
    });
    let status = child.wait().map_err(|e| format!("waiting for init: {e}"))?;
    report(&ShimEvent::Exited {
        code: status.code(),
        signal: status.signal(),
    });
    Ok(())
}
