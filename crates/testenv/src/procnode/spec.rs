//! What the agent hands to a container's shim and init: one JSON file per container run.
//!
//! Contract: everything a run needs is in [`RunSpec`] (paths on the host, the final argv and
//! environment, credentials, mounts), so the shim and init never talk to the API server.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One bind mount into the container's view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Host path (file or directory).
    pub source: PathBuf,
    /// Absolute path in the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// One run of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The pod's network namespace (`/run/netns/…`).
    pub netns: PathBuf,
    /// The container's cgroup (its processes live there).
    pub cgroup: PathBuf,
    /// Where the shim moves itself once the container started.
    pub shim_cgroup: PathBuf,
    /// stdout and stderr are appended here.
    pub log: PathBuf,
    /// Init writes why the container could not start here (then exits 128).
    pub start_error: PathBuf,
    /// An empty host directory: init mounts a tmpfs there for the overlay's upper layer.
    pub scratch: PathBuf,
    /// The pod's hostname.
    pub hostname: String,
    /// Mounts, in order (image files, /etc files, volumes).
    pub mounts: Vec<Mount>,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// `allowPrivilegeEscalation: false` (sets no_new_privs).
    pub no_new_privs: bool,
    /// Program and arguments, expanded.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: Vec<(String, String)>,
    /// Working directory (created when missing).
    pub working_dir: String,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// A process to run inside a running container (exec probes, test helpers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecSpec {
    /// Host pid of the container's init (its namespaces are joined).
    pub pid: i32,
    /// The container's cgroup (the process joins it, as container runtimes do).
    pub cgroup: PathBuf,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub working_dir: String,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Killed after this many milliseconds (exit status 124).
    pub timeout_ms: u64,
}

/// What a shim reports on its stdout, one JSON object per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum ShimEvent {
    /// The container's init runs as host pid `pid`.
    Started {
        /// Host pid.
        pid: i32,
    },
    /// It exited.
    Exited {
        /// Exit code, when it exited normally.
        code: Option<i32>,
        /// Signal, when a signal ended it.
        signal: Option<i32>,
    },
    /// The shim could not start it.
    Failed {
        /// Why.
        message: String,
    },
}
