//! Where the agent keeps things: one directory per pod (volumes, /etc files, container specs),
//! container logs, PersistentVolume data, and the names of its network namespaces and cgroups.
//!
//! Contract: every path derives from the plane directory and the pod network slot, so the
//! agent, `down` and the test helpers in other processes agree on them without talking.
//!
//! ```text
//! <plane>/procnode/ready.json                       written once the agent serves its nodes
//! <plane>/procnode/pods/<uid>/volumes/<kind>/<name> volume directories
//! <plane>/procnode/pods/<uid>/etc/{hosts,hostname,resolv.conf}
//! <plane>/procnode/pods/<uid>/containers/<name>/    spec.json, start-error, scratch/
//! <plane>/procnode/logs/<ns>_<pod>_<uid>/<container>/<restart>.log
//! <plane>/procnode/pv/<persistent volume>/          PVC data, removed with the PV
//! /run/netns/flotilla<slot>-<uid>                   the pod's network namespace
//! <cgroup2>/flotilla-<slot>/<uid>/<container>/      the container's processes
//! ```

use std::path::{Path, PathBuf};

/// The agent's directories under the plane directory.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<plane>/procnode`.
    pub root: PathBuf,
}

impl Layout {
    /// The layout of the plane in `plane_dir`.
    pub fn new(plane_dir: &Path) -> Self {
        Self {
            root: plane_dir.join("procnode"),
        }
    }

    /// Written by the agent once its nodes are registered ([`super::Ready`]).
    pub fn ready_file(&self) -> PathBuf {
        self.root.join("ready.json")
    }

    /// Everything of one pod but its logs and PVC data.
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root.join("pods").join(uid)
    }

    /// A volume's host directory.
    pub fn volume_dir(&self, uid: &str, kind: &str, name: &str) -> PathBuf {
        self.pod_dir(uid).join("volumes").join(kind).join(name)
    }

    /// The pod's /etc/hosts, /etc/hostname and /etc/resolv.conf.
    pub fn etc_dir(&self, uid: &str) -> PathBuf {
        self.pod_dir(uid).join("etc")
    }

    /// A container's runtime files.
    pub fn container_dir(&self, uid: &str, container: &str) -> PathBuf {
        self.pod_dir(uid).join("containers").join(container)
    }

    /// A container's logs, one file per run.
    pub fn log_dir(&self, namespace: &str, pod: &str, uid: &str, container: &str) -> PathBuf {
        self.root
            .join("logs")
            .join(format!("{namespace}_{pod}_{uid}"))
            .join(container)
    }

    /// The log of run `restart` (0 for the first run).
    pub fn log_file(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
        restart: i32,
    ) -> PathBuf {
        self.log_dir(namespace, pod, uid, container)
            .join(format!("{restart}.log"))
    }

    /// All PVC data.
    pub fn pv_root(&self) -> PathBuf {
        self.root.join("pv")
    }

    /// The data of PersistentVolume `name`.
    pub fn pv_dir(&self, name: &str) -> PathBuf {
        self.pv_root().join(name)
    }
}

/// Name of a pod's network namespace (in /run/netns).
pub fn netns_name(slot: u8, uid: &str) -> String {
    format!("flotilla{slot}-{uid}")
}

/// Prefix of every network namespace of a slot.
pub fn netns_prefix(slot: u8) -> String {
    format!("flotilla{slot}-")
}
