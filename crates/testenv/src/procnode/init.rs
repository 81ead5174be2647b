//! Init: the first process of a container, which builds the container's view of the
//! filesystem and then becomes the container's program.
//!
//! Contract (`proc-node init <spec.json>`, started by the shim as PID 1 of a new PID
//! namespace, inside the pod's network namespace):
//! - New mount, UTS and IPC namespaces. The root is an overlay whose lower layer is the host's
//!   root filesystem (read-only through the overlay) and whose upper layer is a private tmpfs,
//!   so the container may write anywhere (unless `readOnlyRootFilesystem`) and its writes
//!   vanish with it, and mount points can be created at any path, as in an image.
//! - On top: a fresh `/proc` (this PID namespace), `/sys` (read-only, this network namespace),
//!   a minimal `/dev` (null, zero, full, random, urandom, tty, pts, shm), private tmpfs `/tmp`
//!   and `/run`, then the spec's bind mounts in order (image files, the pod's /etc files, the
//!   termination log, volumes), each read-only when asked.
//! - Then pivot_root, hostname, working directory (created if missing), no_new_privs if asked,
//!   supplementary groups, gid, uid, and exec of argv with exactly the spec's environment.
//! - Any failure is written to `start_error` and init exits with 128, which the agent reports
//!   as `StartError` (as containerd does).

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::symlink;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Uid, chdir, pivot_root, setgid, setgroups, sethostname, setuid};

use super::spec::RunSpec;

const OLD_ROOT: &str = "/.flotilla-host";

/// Runs init; returns only on failure (the process exit code).
pub fn main(spec_path: &Path) -> i32 {
    let spec: RunSpec = match fs::read(spec_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        Some(s) => s,
        None => {
            eprintln!("init: cannot read {}", spec_path.display());
            return 128;
        }
    };
    let mut errors = File::create(&spec.start_error).ok();
    let e = match setup(&spec) {
        Ok(()) => exec(&spec),
        Err(e) => e,
    };
    if let Some(f) = errors.as_mut() {
        let _ = f.write_all(e.as_bytes());
    }
    128
}

fn err(what: &str) -> impl Fn(nix::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn setup(spec: &RunSpec) -> Result<(), String> {
    let none: Option<&str> = None;
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS | CloneFlags::CLONE_NEWIPC)
        .map_err(err("unshare"))?;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(err("making / private"))?;
    let scratch = &spec.scratch;
    fs::create_dir_all(scratch).map_err(io_err("scratch"))?;
    mount(
        Some("tmpfs"),
        scratch,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=755"),
    )
    .map_err(err("scratch tmpfs"))?;
    let root = scratch.join("root");
    for d in ["upper", "work", "root"] {
        fs::create_dir(scratch.join(d)).map_err(io_err("scratch dirs"))?;
    }
    let options = format!(
        "lowerdir=/,upperdir={},workdir={}",
        scratch.join("upper").display(),
        scratch.join("work").display()
    );
    mount(
        Some("overlay"),
        &root,
        Some("overlay"),
        MsFlags::empty(),
        Some(options.as_str()),
    )
    .map_err(err("overlay root"))?;
    let old = root.join(OLD_ROOT.trim_start_matches('/'));
    fs::create_dir_all(&old).map_err(io_err("old root dir"))?;
    pivot_root(&root, &old).map_err(err("pivot_root"))?;
    chdir("/").map_err(err("chdir /"))?;
    basics()?;
    for m in &spec.mounts {
        bind(
            &Path::new(OLD_ROOT).join(m.source.strip_prefix("/").unwrap_or(&m.source)),
            &m.target,
            m.read_only,
        )?;
    }
    let wd = if spec.working_dir.is_empty() {
        "/"
    } else {
        &spec.working_dir
    };
    fs::create_dir_all(wd).map_err(io_err("working directory"))?;
    umount2(OLD_ROOT, MntFlags::MNT_DETACH).map_err(err("detaching the host root"))?;
    fs::remove_dir(OLD_ROOT).map_err(io_err("removing the host root mount point"))?;
    if spec.read_only_root {
        mount(
            none,
            "/",
            none,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            none,
        )
        .map_err(err("read-only root"))?;
    }
    sethostname(&spec.hostname).map_err(err("hostname"))?;
    chdir(wd).map_err(err("working directory"))?;
    if spec.no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(err("no_new_privs"))?;
    }
    let groups: Vec<Gid> = spec.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    setgroups(&groups).map_err(err("setgroups"))?;
    setgid(Gid::from_raw(spec.gid)).map_err(err("setgid"))?;
    setuid(Uid::from_raw(spec.uid)).map_err(err("setuid"))?;
    Ok(())
}

/// /proc, /sys, /dev, /tmp, /run of the new view.
fn basics() -> Result<(), String> {
    let none: Option<&str> = None;
    let quiet = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    fs::create_dir_all("/proc").map_err(io_err("/proc"))?;
    mount(Some("proc"), "/proc", Some("proc"), quiet, none).map_err(err("mounting /proc"))?;
    fs::create_dir_all("/sys").map_err(io_err("/sys"))?;
    mount(
        Some("sysfs"),
        "/sys",
        Some("sysfs"),
        quiet | MsFlags::MS_RDONLY,
        none,
    )
    .map_err(err("mounting /sys"))?;
    fs::create_dir_all("/dev").map_err(io_err("/dev"))?;
    mount(
        Some("tmpfs"),
        "/dev",
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=755"),
    )
    .map_err(err("mounting /dev"))?;
    for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
        bind(
            &Path::new(OLD_ROOT).join("dev").join(dev),
            &format!("/dev/{dev}"),
            false,
        )?;
    }
    fs::create_dir_all("/dev/pts").map_err(io_err("/dev/pts"))?;
    mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(err("mounting /dev/pts"))?;
    fs::create_dir_all("/dev/shm").map_err(io_err("/dev/shm"))?;
    mount(
        Some("shm"),
        "/dev/shm",
        Some("tmpfs"),
        quiet,
        Some("mode=1777"),
    )
    .map_err(err("mounting /dev/shm"))?;
    for (link, target) in [
        ("/dev/ptmx", "pts/ptmx"),
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        symlink(target, link).map_err(io_err(link))?;
    }
    for (dir, mode) in [("/tmp", "mode=1777"), ("/run", "mode=755")] {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(mode),
        )
        .map_err(err(dir))?;
    }
    Ok(())
}

/// Binds `source` (a path in this view) at `target`, creating the mount point (a file for a
/// file source, a directory otherwise) and remounting read-only when asked.
fn bind(source: &Path, target: &str, read_only: bool) -> Result<(), String> {
    let none: Option<&str> = None;
    let meta =
        fs::metadata(source).map_err(|e| format!("mount source {}: {e}", source.display()))?;
    let target = Path::new(target);
    if meta.is_dir() {
        fs::create_dir_all(target).map_err(|e| format!("mount point {}: {e}", target.display()))?;
    } else {
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("mount point {}: {e}", parent.display()))?;
        }
        if fs::symlink_metadata(target).is_err() {
            File::create(target).map_err(|e| format!("mount point {}: {e}", target.display()))?;
        }
    }
    mount(
        Some(source),
        target,
        none,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        none,
    )
    .map_err(|e| format!("binding {} at {}: {e}", source.display(), target.display()))?;
    if read_only {
        mount(
            none,
            target,
            none,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            none,
        )
        .map_err(|e| format!("read-only {}: {e}", target.display()))?;
    }
    Ok(())
}

/// Replaces this process with the container's program; returns the error text on failure.
fn exec(spec: &RunSpec) -> String {
    let Some(program) = spec.argv.first() else {
        return "no command: the container names no command and its image no entrypoint".into();
    };
    let e = Command::new(program)
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().cloned())
        .exec();
    if e.kind() == std::io::ErrorKind::NotFound && !program.contains('/') {
        format!("exec: \"{program}\": executable file not found in $PATH")
    } else {
        format!("exec: \"{program}\": {e}")
    }
}
