//! Running a process inside a running container: exec probes and the tests' `exec` helper.
//!
//! Contract (`proc-node exec <spec.json>`, or `-` to read the spec from stdin): joins the container's cgroup (so freezing or
//! killing the container covers it too), then its IPC, UTS, network, PID and mount namespaces
//! (the mount namespace puts it at the container's root), and runs argv there with the given
//! credentials, working directory and environment, passing stdout and stderr through. It exits
//! with the program's status (128 + signal for a signal), 124 after the timeout (the program is
//! killed), or 126/127 when the program cannot run.

use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sched::{CloneFlags, setns};
use nix::unistd::{Gid, setgroups};

use super::spec::ExecSpec;

/// Runs the exec helper; returns the process exit code.
pub fn main(spec_path: &Path) -> i32 {
    let text = if spec_path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .ok()
            .map(|_| buf)
    } else {
        fs::read(spec_path).ok()
    };
    let spec: ExecSpec = match text.and_then(|b| serde_json::from_slice(&b).ok()) {
        Some(s) => s,
        None => {
            eprintln!("exec: cannot read {}", spec_path.display());
            return 126;
        }
    };
    match run(&spec) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("exec: {e}");
            126
        }
    }
}

fn run(spec: &ExecSpec) -> Result<i32, String> {
    let ns = |kind: &str| {
        File::open(format!("/proc/{}/ns/{kind}", spec.pid))
            .map_err(|e| format!("container process {} is gone: {e}", spec.pid))
    };
    // Open everything first: after joining the mount namespace the host's /proc is out of view.
    let files = [
        (ns("ipc")?, CloneFlags::CLONE_NEWIPC),
        (ns("uts")?, CloneFlags::CLONE_NEWUTS),
        (ns("net")?, CloneFlags::CLONE_NEWNET),
        (ns("pid")?, CloneFlags::CLONE_NEWPID),
        (ns("mnt")?, CloneFlags::CLONE_NEWNS),
    ];
    fs::write(
        spec.cgroup.join("cgroup.procs"),
        std::process::id().to_string(),
    )
    .map_err(|e| format!("joining the container's cgroup: {e}"))?;
    for (f, kind) in &files {
        setns(f.as_fd(), *kind).map_err(|e| format!("setns {kind:?}: {e}"))?;
    }
    let groups: Vec<Gid> = spec.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    setgroups(&groups).map_err(|e| format!("setgroups: {e}"))?;
    let Some(program) = spec.argv.first() else {
        return Err("no command".into());
    };
    let wd = if spec.working_dir.is_empty() {
        "/"
    } else {
        &spec.working_dir
    };
    let mut child = match Command::new(program)
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().cloned())
        .current_dir(wd)
        .uid(spec.uid)
        .gid(spec.gid)
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("exec: \"{program}\": executable file not found in $PATH");
            return Ok(127);
        }
        Err(e) => return Err(format!("starting {program}: {e}")),
    };
    let deadline = Instant::now() + Duration::from_millis(spec.timeout_ms);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("exec: timed out after {} ms", spec.timeout_ms);
            return Ok(124);
        }
        std::thread::sleep(Duration::from_millis(10)); // waiting for our child, with a deadline
    }
}
