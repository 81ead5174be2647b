//! The pod worker's view of its containers, and the pure decisions taken from it: whether an
//! exited container is restarted, and which containers to start now.
//!
//! Contract:
//! - [`should_restart`]: `Always` restarts every exit, `OnFailure` only non-zero exits, `Never`
//!   none; restartable init containers (native sidecars, `restartPolicy: Always` on the init
//!   container) always restart; regular init containers restart on failure unless the pod's
//!   policy is `Never`.
//! - [`plan`] follows the kubelet's order: init containers one at a time in spec order (a
//!   sidecar must be running and started before the next one starts), app containers all at
//!   once after every init container has succeeded; exited containers come back when their
//!   back-off has elapsed; sidecars are stopped once every app container has finished for good.
//! - Pure: the worker owns processes and clocks and carries the plan out.

use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Which list a container is in and how it behaves there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrKind {
    /// A regular init container: runs to completion, in order.
    Init,
    /// An init container with `restartPolicy: Always` (a native sidecar).
    Sidecar,
    /// An app container.
    App,
}

/// The pod's `spec.restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart every exit (the default).
    Always,
    /// Restart non-zero exits.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// Parses the spec value; anything unknown is `Always`, the API default.
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("OnFailure") => Self::OnFailure,
            Some("Never") => Self::Never,
            _ => Self::Always,
        }
    }
}

/// A finished run of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    /// Exit code (128 + signal for a signalled process, as container runtimes report it).
    pub exit_code: i32,
    /// The signal that ended the process, if any.
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `StartError`, …
    pub reason: String,
    /// Details (a start error's text).
    pub message: Option<String>,
    /// When it started, if it ever ran.
    pub started_at: Option<Time>,
    /// When it ended.
    pub finished_at: Time,
    /// The runtime id of that run.
    pub container_id: Option<String>,
}

/// Where a container is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Not running: never started, or waiting to start (again). `reason` is the kubelet's
    /// (`ContainerCreating`, `PodInitializing`, `CrashLoopBackOff`, `ErrImagePull`,
    /// `CreateContainerConfigError`, …).
    Waiting {
        /// Machine-readable reason.
        reason: String,
        /// Human-readable details.
        message: Option<String>,
    },
    /// Its process runs.
    Running {
        /// When it started.
        started_at: Time,
        /// The runtime id (`proc://<host pid>`).
        container_id: String,
    },
    /// It exited and is not running now.
    Terminated(Terminated),
}

/// One container as the worker tracks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ctr {
    /// Container name.
    pub name: String,
    /// Init, sidecar or app.
    pub kind: CtrKind,
    /// The image as written in the spec.
    pub image: String,
    /// What the image resolved to (`proc://…`), once resolved.
    pub image_id: Option<String>,
    /// Current state.
    pub state: RunState,
    /// The previous run, when the current state is a later one.
    pub last_terminated: Option<Terminated>,
    /// Restarts so far.
    pub restart_count: i32,
    /// Readiness verdict (true when running, started and passing readiness or without one).
    pub ready: bool,
    /// Startup verdict (true when running and the startup probe passed or there is none).
    pub started: bool,
    /// When it may start (again): after an exit, the back-off; after a failed start (an
    /// image without a mapping, a missing Secret), the retry. `None` after an exit means it is
    /// not to be restarted.
    pub restart_at: Option<Instant>,
}

impl Ctr {
    /// A container that has not run yet.
    pub fn new(name: &str, kind: CtrKind, image: &str, reason: &str) -> Self {
        Self {
            name: name.into(),
            kind,
            image: image.into(),
            image_id: None,
            state: RunState::Waiting {
                reason: reason.into(),
                message: None,
            },
            last_terminated: None,
            restart_count: 0,
            ready: false,
            started: false,
            restart_at: None,
        }
    }

    /// True while its process runs.
    pub fn running(&self) -> bool {
        matches!(self.state, RunState::Running { .. })
    }

    /// Has it ever run (or tried to)?
    pub fn ever_ran(&self) -> bool {
        !matches!(self.state, RunState::Waiting { .. }) || self.last_terminated.is_some()
    }

    /// The most recent exit, current or previous.
    pub fn last_exit(&self) -> Option<&Terminated> {
        match &self.state {
            RunState::Terminated(t) => Some(t),
            _ => self.last_terminated.as_ref(),
        }
    }

    /// Exited and will not run again.
    pub fn finished_for_good(&self) -> bool {
        !self.running() && self.ever_ran() && self.restart_at.is_none()
    }

    /// Exited with 0 and will not run again (a completed init container).
    pub fn succeeded(&self) -> bool {
        self.finished_for_good() && self.last_exit().is_some_and(|t| t.exit_code == 0)
    }
}

/// Whether a container that exited with `exit_code` runs again.
pub fn should_restart(kind: CtrKind, policy: RestartPolicy, exit_code: i32) -> bool {
    match (kind, policy) {
        (CtrKind::Sidecar, _) => true,
        (CtrKind::Init, RestartPolicy::Never) => false,
        (CtrKind::Init, _) => exit_code != 0,
        (CtrKind::App, RestartPolicy::Always) => true,
        (CtrKind::App, RestartPolicy::OnFailure) => exit_code != 0,
        (CtrKind::App, RestartPolicy::Never) => false,
    }
}

/// What to do now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Indices of containers to start.
    pub start: Vec<usize>,
    /// Indices of running containers to stop (sidecars of a finished pod).
    pub stop: Vec<usize>,
    /// When to plan again (the earliest pending restart).
    pub wake_at: Option<Instant>,
    /// True when every regular init container succeeded and every sidecar has started.
    pub initialized: bool,
}

/// Decides which containers start now. `ctrs` holds init containers (and sidecars) first, in
/// spec order, then app containers. A pod that failed its initialisation for good starts nothing.
pub fn plan(ctrs: &[Ctr], now: Instant) -> Plan {
    // A pending restart (or a retry after a failed start) governs; otherwise only a container
    // that never ran starts.
    let due = |c: &Ctr| !c.running() && c.restart_at.map_or(!c.ever_ran(), |t| t <= now);
    let mut p = Plan {
        wake_at: ctrs
            .iter()
            .filter(|c| !c.running())
            .filter_map(|c| c.restart_at)
            .filter(|t| *t > now)
            .min(),
        ..Plan::default()
    };
    let mut initialized = true;
    for (i, c) in ctrs.iter().enumerate() {
        match c.kind {
            CtrKind::App => continue,
            CtrKind::Sidecar if c.running() && c.started => continue,
            CtrKind::Init if c.succeeded() => continue,
            CtrKind::Init if c.finished_for_good() => return p, // failed initialisation
            _ => {}
        }
        if due(c) {
            p.start.push(i);
        }
        initialized = false;
        break;
    }
    p.initialized = initialized;
    if initialized {
        p.start
            .extend((0..ctrs.len()).filter(|&i| ctrs[i].kind == CtrKind::App && due(&ctrs[i])));
    }
    // Sidecars restart while the pod runs; once every app container is done for good they stop.
    let apps_done = ctrs
        .iter()
        .filter(|c| c.kind == CtrKind::App)
        .all(Ctr::finished_for_good);
    if initialized && apps_done {
        p.stop = (0..ctrs.len())
            .filter(|&i| ctrs[i].kind == CtrKind::Sidecar && ctrs[i].running())
            .collect();
        p.start.retain(|&i| ctrs[i].kind != CtrKind::Sidecar);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn time() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn ctr(kind: CtrKind, state: &str) -> Ctr {
        let mut c = Ctr::new("c", kind, "img", "ContainerCreating");
        let exited = |code| {
            RunState::Terminated(Terminated {
                exit_code: code,
                signal: None,
                reason: "x".into(),
                message: None,
                started_at: None,
                finished_at: time(),
                container_id: None,
            })
        };
        match state {
            "new" => {}
            "running" => {
                c.state = RunState::Running {
                    started_at: time(),
                    container_id: "proc://1".into(),
                }
            }
            "running-started" => {
                c.state = RunState::Running {
                    started_at: time(),
                    container_id: "proc://1".into(),
                };
                c.started = true;
            }
            "ok" => c.state = exited(0),
            "failed" => c.state = exited(1),
            "failed-due" => {
                c.state = exited(1);
                c.restart_at = Some(Instant::now() - Duration::from_secs(1));
            }
            "failed-later" => {
                c.state = exited(1);
                c.restart_at = Some(Instant::now() + Duration::from_secs(60));
            }
            other => panic!("unknown state {other}"),
        }
        c
    }

    #[test]
    fn restart_rules_follow_the_policy_and_the_kind() {
        use CtrKind::*;
        use RestartPolicy::*;
        let cases = [
            (App, Always, 0, true),
            (App, Always, 1, true),
            (App, OnFailure, 0, false),
            (App, OnFailure, 137, true),
            (App, Never, 1, false),
            (Init, Always, 0, false),
            (Init, Always, 1, true),
            (Init, OnFailure, 2, true),
            (Init, Never, 1, false),
            (Sidecar, Never, 0, true),
        ];
        for (kind, policy, code, want) in cases {
            assert_eq!(
                should_restart(kind, policy, code),
                want,
                "{kind:?} {policy:?} exit {code}"
            );
        }
    }

    #[test]
    fn plans_follow_the_kubelets_order() {
        use CtrKind::*;
        let now = Instant::now();
        // (containers as (kind, state), containers to start, to stop, initialized)
        type Case<'a> = (&'a [(CtrKind, &'a str)], &'a [usize], &'a [usize], bool);
        let cases: &[Case] = &[
            // No init containers: every app container starts at once.
            (&[(App, "new"), (App, "new")], &[0, 1], &[], true),
            // Init containers run one at a time, in order.
            (
                &[(Init, "new"), (Init, "new"), (App, "new")],
                &[0],
                &[],
                false,
            ),
            (
                &[(Init, "ok"), (Init, "new"), (App, "new")],
                &[1],
                &[],
                false,
            ),
            (
                &[(Init, "ok"), (Init, "running"), (App, "new")],
                &[],
                &[],
                false,
            ),
            (&[(Init, "ok"), (Init, "ok"), (App, "new")], &[2], &[], true),
            // A failed init container with no restart fails the pod: nothing starts.
            (&[(Init, "failed"), (App, "new")], &[], &[], false),
            // A failed init container in back-off waits; once due it runs again.
            (&[(Init, "failed-later"), (App, "new")], &[], &[], false),
            (&[(Init, "failed-due"), (App, "new")], &[0], &[], false),
            // A sidecar must be started before the next init container.
            (
                &[(Sidecar, "new"), (Init, "new"), (App, "new")],
                &[0],
                &[],
                false,
            ),
            (
                &[(Sidecar, "running"), (Init, "new"), (App, "new")],
                &[],
                &[],
                false,
            ),
            (
                &[(Sidecar, "running-started"), (Init, "new"), (App, "new")],
                &[1],
                &[],
                false,
            ),
            (
                &[(Sidecar, "running-started"), (App, "new")],
                &[1],
                &[],
                true,
            ),
            // Exited app containers come back when due, not before.
            (
                &[(App, "failed-due"), (App, "failed-later")],
                &[0],
                &[],
                true,
            ),
            // Every app container finished for good: sidecars stop.
            (
                &[(Sidecar, "running-started"), (App, "ok")],
                &[],
                &[0],
                true,
            ),
        ];
        for (i, (spec, start, stop, initialized)) in cases.iter().enumerate() {
            let ctrs: Vec<Ctr> = spec.iter().map(|(k, s)| ctr(*k, s)).collect();
            let p = plan(&ctrs, now);
            assert_eq!(&p.start, start, "case {i}: start");
            assert_eq!(&p.stop, stop, "case {i}: stop");
            assert_eq!(p.initialized, *initialized, "case {i}: initialized");
        }
    }

    #[test]
    fn the_earliest_pending_restart_is_the_next_wake_up() {
        let now = Instant::now();
        let mut a = ctr(CtrKind::App, "failed");
        let mut b = ctr(CtrKind::App, "failed");
        a.restart_at = Some(now + Duration::from_secs(30));
        b.restart_at = Some(now + Duration::from_secs(10));
        assert_eq!(
            plan(&[a, b], now).wake_at,
            Some(now + Duration::from_secs(10))
        );
    }
}
