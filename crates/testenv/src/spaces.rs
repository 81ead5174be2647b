//! A named set of separate Kubernetes control planes ("spaces") on one machine: for
//! multi-cluster systems such as KubeStellar, whose workload description space (WDS),
//! inventory and transport space (ITS) and workload execution clusters (WECs) are distinct
//! kube-apiservers.
//!
//! Contract:
//! - [`up`] starts the requested topology, or reuses a healthy running one that already has
//!   every requested space with the same role (a superset is fine), under an exclusive file
//!   lock, so test binaries share one topology as they share the single plane.
//! - Every space is its own kube-apiserver on a free port of 127.0.0.1 with its own admin
//!   kubeconfig ([`kubeconfig`]); they share one etcd, each under its own `--etcd-prefix`
//!   (`/spaces/<name>`), and one throw-away PKI.
//! - What runs beside each apiserver depends on the role:
//!   - WDS and ITS: kube-controller-manager with the API-machinery controllers only
//!     ([`CONTROL_CONTROLLERS`]: garbage collector, namespace, service accounts, root CA),
//!     like KubeFlex's `k8s` control planes; nothing runs workloads there.
//!   - WEC: kube-controller-manager with the workload controllers too ([`WEC_CONTROLLERS`]),
//!     kube-scheduler, and kwok with one node, so a Deployment gets ReplicaSets and Ready
//!     pods and its `.status` is real.
//! - The topology lives in [`spaces_dir`] (`$FLOTILLA_SPACES_DIR`, else a sibling of the plane
//!   directory named `<plane dir>-spaces`): a different directory, lock, etcd and ports from
//!   the single plane's, so starting or stopping spaces never touches the plane tests use.
//! - [`down`] stops only the processes it recorded and removes the directory's contents.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::pki::Pki;
use crate::plane::{self, PLANE_REVISION};
use crate::process::{Proc, free_port, spawn};
use crate::versions::Versions;

/// Bumped whenever the way spaces are started changes, so `up` replaces an older topology.
pub const SPACES_REVISION: u32 = 2;

/// kube-controller-manager controllers of a WDS or ITS: API machinery only.
pub const CONTROL_CONTROLLERS: &str =
    "garbagecollector,namespace,serviceaccount,serviceaccount-token,root-ca-cert-publisher";

/// kube-controller-manager controllers of a WEC: API machinery plus the workload controllers
/// and node lifecycle (which lifts the `not-ready` taint a new node is created with).
pub const WEC_CONTROLLERS: &str = "garbagecollector,namespace,serviceaccount,\
serviceaccount-token,root-ca-cert-publisher,deployment,replicaset,statefulset,daemonset,job,\
cronjob,ttl-after-finished,disruption,nodelifecycle";

/// What a space is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Workload description space: user objects and the control objects.
    Wds,
    /// Inventory and transport space: the hub (inventory, mailboxes).
    Its,
    /// Workload execution cluster: runs workloads (kwok pods).
    Wec,
}

impl Role {
    /// `wds`, `its` or `wec`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Wds => "wds",
            Role::Its => "its",
            Role::Wec => "wec",
        }
    }
}

/// One requested space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceSpec {
    /// Its name: a DNS label (it names directories, logs and etcd prefixes).
    pub name: String,
    /// Its role.
    pub role: Role,
}

/// A requested set of spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The spaces, in start order.
    pub spaces: Vec<SpaceSpec>,
}

impl Topology {
    /// `wds1`, `its1` and `wec1..=wec<wecs>`.
    pub fn standard(wecs: usize) -> Self {
        let mut spaces = vec![
            SpaceSpec {
                name: "wds1".into(),
                role: Role::Wds,
            },
            SpaceSpec {
                name: "its1".into(),
                role: Role::Its,
            },
        ];
        spaces.extend((1..=wecs).map(|i| SpaceSpec {
            name: format!("wec{i}"),
            role: Role::Wec,
        }));
        Self { spaces }
    }

    fn validate(&self) -> anyhow::Result<()> {
        for (i, s) in self.spaces.iter().enumerate() {
            anyhow::ensure!(
                is_dns_label(&s.name),
                "space name {:?} is not a DNS label",
                s.name
            );
            anyhow::ensure!(
                !self.spaces[..i].iter().any(|o| o.name == s.name),
                "space {:?} is named twice",
                s.name
            );
        }
        Ok(())
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// What is recorded about one running space.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpaceState {
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// https://127.0.0.1:<port>
    pub api_port: u16,
    /// Its components, in start order.
    pub procs: Vec<Proc>,
}

/// What is recorded about a running topology.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// [`SPACES_REVISION`] of the code that started it.
    pub revision: u32,
    /// [`PLANE_REVISION`] of the code that started it (the shared argument builders).
    pub plane_revision: u32,
    /// Kubernetes version.
    pub kubernetes: String,
    /// Directory holding the upstream binaries.
    pub bin_dir: PathBuf,
    /// The shared etcd's client port.
    pub etcd_port: u16,
    /// The shared etcd.
    pub etcd: Proc,
    /// The spaces.
    pub spaces: Vec<SpaceState>,
}

impl State {
    /// The recorded space named `name`.
    pub fn space(&self, name: &str) -> Option<&SpaceState> {
        self.spaces.iter().find(|s| s.name == name)
    }

    /// Every recorded process (etcd first).
    pub fn procs(&self) -> impl Iterator<Item = &Proc> {
        std::iter::once(&self.etcd).chain(self.spaces.iter().flat_map(|s| s.procs.iter()))
    }

    fn covers(&self, topology: &Topology) -> bool {
        topology
            .spaces
            .iter()
            .all(|want| self.space(&want.name).is_some_and(|s| s.role == want.role))
    }
}

/// Result of [`up`].
#[derive(Debug, Clone)]
pub struct Up {
    /// The running topology.
    pub state: State,
    /// True when an already running topology was reused.
    pub reused: bool,
    /// Wall time spent in `up`.
    pub took: Duration,
}

/// The topology's directory: `$FLOTILLA_SPACES_DIR`, else `<plane dir>-spaces` beside the plane
/// directory (never inside it: the plane's `down` empties its directory).
pub fn spaces_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FLOTILLA_SPACES_DIR") {
        return PathBuf::from(d);
    }
    let plane = plane::plane_dir();
    let name = plane
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plane".into());
    plane.with_file_name(format!("{name}-spaces"))
}

/// The admin kubeconfig of space `name`.
pub fn kubeconfig(name: &str) -> PathBuf {
    spaces_dir().join(name).join("kubeconfig")
}

/// An admin client for space `name`.
pub async fn client(name: &str) -> anyhow::Result<kube::Client> {
    plane::client_for(&kubeconfig(name)).await
}

fn state_path() -> PathBuf {
    spaces_dir().join("state.json")
}

/// Reads the recorded state, if any.
pub fn read_state() -> Option<State> {
    serde_json::from_slice(&fs::read(state_path()).ok()?).ok()
}

/// A hold on serving `space` with controllers of one's own (a stellar controller-manager for
/// a WDS): exclusive across processes and within one (a file lock on
/// `<spaces dir>/<space>.serve.lock`, one open file per hold), so two test binaries never run
/// two controller-managers for one WDS at once (each would act on the other's Bindings).
/// Waits for the current holder; released when the returned file is dropped.
pub async fn hold(space: &str) -> anyhow::Result<fs::File> {
    hold_in(spaces_dir(), space).await
}

async fn hold_in(dir: PathBuf, space: &str) -> anyhow::Result<fs::File> {
    let path = dir.join(format!("{space}.serve.lock"));
    tokio::task::spawn_blocking(move || {
        fs::create_dir_all(&dir)?;
        let f = fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        f.lock()?;
        Ok(f)
    })
    .await?
}

/// Starts `topology`, or reuses a healthy running topology that covers it. Safe to call from
/// several processes and from inside or outside a tokio runtime.
pub fn up(topology: &Topology) -> anyhow::Result<Up> {
    topology.validate()?;
    let topology = topology.clone();
    std::thread::spawn(move || up_blocking(&topology))
        .join()
        .map_err(|_| anyhow::anyhow!("spaces up panicked"))?
}

fn up_blocking(topology: &Topology) -> anyhow::Result<Up> {
    let start = Instant::now();
    let dir = spaces_dir();
    let _lock = plane::lock_dir(&dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Some(state) = read_state() {
        if state.covers(topology) && healthy(&state, &rt) {
            return Ok(Up {
                state,
                reused: true,
                took: start.elapsed(),
            });
        }
        tracing::info!("stopping the remains of an unhealthy, outdated or smaller topology");
        stop(&state);
    }
    let bin = plane::ensure_binaries()?;
    plane::clean_dir_at(&dir)?;
    let state = start_all(&dir, &bin, topology, &rt)?;
    fs::write(state_path(), serde_json::to_vec_pretty(&state)?)?;
    Ok(Up {
        state,
        reused: false,
        took: start.elapsed(),
    })
}

fn healthy(state: &State, rt: &tokio::runtime::Runtime) -> bool {
    state.revision == SPACES_REVISION
        && state.plane_revision == PLANE_REVISION
        && state.kubernetes == Versions::pinned().kubernetes
        && state.procs().all(Proc::alive)
        && state
            .spaces
            .iter()
            .all(|s| rt.block_on(plane::readyz(&kubeconfig(&s.name))).is_ok())
}

/// Stops a running topology and removes its state. Returns false when nothing was running.
pub fn down() -> anyhow::Result<bool> {
    let dir = spaces_dir();
    let _lock = plane::lock_dir(&dir)?;
    let state = read_state();
    if let Some(s) = &state {
        stop(s);
    }
    plane::clean_dir_at(&dir)?;
    Ok(state.is_some())
}

fn stop(state: &State) {
    // Each space's components in reverse start order, then the shared etcd.
    for space in state.spaces.iter().rev() {
        for p in space.procs.iter().rev() {
            p.stop(Duration::from_secs(15));
        }
    }
    state.etcd.stop(Duration::from_secs(15));
}

fn start_all(
    dir: &Path,
    bin: &Path,
    topology: &Topology,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<State> {
    let logs = dir.join("logs");
    let pki = Pki::generate(&dir.join("pki"))?;
    let (etcd_port, peer_port) = (free_port()?, free_port()?);
    let etcd = spawn(
        "etcd",
        &bin.join("etcd"),
        &plane::etcd_args(&dir.join("etcd"), etcd_port, peer_port),
        &logs,
    )?;
    let mut state = State {
        revision: SPACES_REVISION,
        plane_revision: PLANE_REVISION,
        kubernetes: Versions::pinned().kubernetes,
        bin_dir: bin.to_path_buf(),
        etcd_port,
        etcd,
        spaces: Vec::new(),
    };
    let result = start_spaces(dir, bin, &pki, topology, rt, &mut state);
    if let Err(e) = result {
        let tail = plane::log_tails(&logs);
        stop(&state);
        anyhow::bail!("the spaces did not start: {e:#}\n{tail}");
    }
    Ok(state)
}

// Starts every apiserver at once (their start-up dominates), then the components beside them,
// then waits for each space to be usable.
fn start_spaces(
    dir: &Path,
    bin: &Path,
    pki: &Pki,
    topology: &Topology,
    rt: &tokio::runtime::Runtime,
    state: &mut State,
) -> anyhow::Result<()> {
    let logs = dir.join("logs");
    plane::wait_etcd(state.etcd_port)?;
    for spec in &topology.spaces {
        fs::create_dir_all(dir.join(&spec.name))?;
        let api_port = free_port()?;
        plane::write_kubeconfig(&kubeconfig(&spec.name), pki, api_port)?;
        let mut args = plane::apiserver_args(pki, state.etcd_port, api_port);
        args.push(format!("--etcd-prefix=/spaces/{}", spec.name));
        let api = spawn(
            &format!("{}-kube-apiserver", spec.name),
            &bin.join("kube-apiserver"),
            &args,
            &logs,
        )?;
        state.spaces.push(SpaceState {
            name: spec.name.clone(),
            role: spec.role,
            api_port,
            procs: vec![api],
        });
    }
    for space in &mut state.spaces {
        let kc = kubeconfig(&space.name);
        rt.block_on(plane::wait_readyz(&kc, Duration::from_secs(180)))
            .map_err(|e| anyhow::anyhow!("{}: {e}", space.name))?;
        let name = |c: &str| format!("{}-{c}", space.name);
        let controllers = match space.role {
            Role::Wec => WEC_CONTROLLERS,
            Role::Wds | Role::Its => CONTROL_CONTROLLERS,
        };
        space.procs.push(spawn(
            &name("kube-controller-manager"),
            &bin.join("kube-controller-manager"),
            &plane::kcm_args(pki, &kc, Some(controllers)),
            &logs,
        )?);
        if space.role == Role::Wec {
            space.procs.push(spawn(
                &name("kube-scheduler"),
                &bin.join("kube-scheduler"),
                &plane::scheduler_args(&kc),
                &logs,
            )?);
            space.procs.push(spawn(
                &name("kwok"),
                &bin.join("kwok"),
                &plane::kwok_args(bin, &kc, "127.1.0.0/16"),
                &logs,
            )?);
        }
    }
    for space in &state.spaces {
        let nodes = usize::from(space.role == Role::Wec);
        rt.block_on(plane::create_nodes_and_wait(
            &kubeconfig(&space.name),
            nodes,
            0,
            Duration::from_secs(120),
        ))
        .map_err(|e| anyhow::anyhow!("{}: {e}", space.name))?;
    }
    Ok(())
}

/// One component's resource use, for `status` and benchmarks.
#[derive(Debug, Clone)]
pub struct Usage {
    /// Component name (`<space>-<binary>`, or `etcd`).
    pub name: String,
    /// Process id.
    pub pid: i32,
    /// Alive and still running our binary.
    pub alive: bool,
    /// Resident set size in KiB (0 when not alive).
    pub rss_kib: u64,
    /// CPU seconds used so far (user + system).
    pub cpu_seconds: f64,
}

/// Resource use of every recorded component.
pub fn usage(state: &State) -> Vec<Usage> {
    state
        .procs()
        .map(|p| Usage {
            name: p.name.clone(),
            pid: p.pid,
            alive: p.alive(),
            rss_kib: crate::process::rss_kib(p.pid),
            cpu_seconds: crate::process::cpu_seconds_of(p.pid),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_hold_waits_until_the_first_is_released() {
        let dir = std::env::temp_dir().join(format!("spaces-hold-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("dir");
        let first = hold_in(dir.clone(), "wds9").await.expect("first hold");
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn({
            let dir = dir.clone();
            async move {
                let second = hold_in(dir, "wds9").await.expect("second hold");
                let _ = tx.send(());
                second
            }
        });
        // Another space is not held.
        let other = hold_in(dir.clone(), "wds8").await.expect("another space");
        drop(other);
        let early = tokio::time::timeout(Duration::from_millis(300), &mut rx).await;
        assert!(early.is_err(), "the second hold did not wait for the first");
        drop(first);
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the second hold once the first is released")
            .expect("waiter");
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_standard_topology_names_its_spaces() {
        let t = Topology::standard(3);
        let names: Vec<_> = t.spaces.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["wds1", "its1", "wec1", "wec2", "wec3"]);
        assert_eq!(t.spaces[0].role, Role::Wds);
        assert_eq!(t.spaces[1].role, Role::Its);
        assert!(t.spaces[2..].iter().all(|s| s.role == Role::Wec));
        t.validate().expect("valid");
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "Wec1", "wec_1", "-x", "x-"] {
            let t = Topology {
                spaces: vec![SpaceSpec {
                    name: bad.into(),
                    role: Role::Wec,
                }],
            };
            assert!(t.validate().is_err(), "{bad:?}");
        }
        let mut twice = Topology::standard(1);
        twice.spaces.push(twice.spaces[2].clone());
        assert!(twice.validate().is_err());
    }

    #[test]
    fn a_running_topology_covers_a_subset_with_the_same_roles() {
        let proc = |n: &str| Proc {
            name: n.into(),
            pid: 1,
            binary: "/x".into(),
        };
        let state = State {
            revision: SPACES_REVISION,
            plane_revision: PLANE_REVISION,
            kubernetes: "v".into(),
            bin_dir: "/".into(),
            etcd_port: 1,
            etcd: proc("etcd"),
            spaces: Topology::standard(3)
                .spaces
                .into_iter()
                .map(|s| SpaceState {
                    name: s.name,
                    role: s.role,
                    api_port: 1,
                    procs: vec![],
                })
                .collect(),
        };
        assert!(state.covers(&Topology::standard(2)));
        assert!(state.covers(&Topology::standard(3)));
        assert!(!state.covers(&Topology::standard(4)));
        let wrong_role = Topology {
            spaces: vec![SpaceSpec {
                name: "wec1".into(),
                role: Role::Its,
            }],
        };
        assert!(!state.covers(&wrong_role));
    }

    #[test]
    fn the_spaces_directory_is_beside_the_plane_directory() {
        // Only the derivation: the environment is read, never changed, in tests.
        if std::env::var_os("FLOTILLA_SPACES_DIR").is_none() {
            let plane = plane::plane_dir();
            let spaces = spaces_dir();
            assert_eq!(spaces.parent(), plane.parent());
            assert_ne!(spaces, plane);
            assert!(!spaces.starts_with(&plane));
        }
    }
}
