//! Container runs of a pod: start (image, environment, credentials, mounts, the run spec,
//! the shim, the prober), exit (reason, message, restart decision with back-off) and kill
//! (SIGTERM, then SIGKILL when the grace period is over).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use nix::sys::signal::Signal;

use super::{Live, Msg, NamespaceObjects, RETRY, Worker, now_time};
use crate::procnode::envvars::{self, PodContext};
use crate::procnode::events::Kind as EventKind;
use crate::procnode::layout;
use crate::procnode::model::{self, RunState, Terminated};
use crate::procnode::probe_run::{self, Prober, Target};
use crate::procnode::runtime::{self, Exit};
use crate::procnode::spec::{Mount, RunSpec};
use crate::procnode::{cgroup, images, launch, node};

impl Worker {
    /// Starts container `i` (a first run or a restart); a container that cannot start waits
    /// with the kubelet's reason and is retried.
    pub(super) async fn start(&mut self, i: usize) {
        match self.run_spec(i) {
            Ok((run_spec, creds)) => self.launch(i, run_spec, creds).await,
            Err(n) => {
                if let Some(event) = n.event {
                    let name = self.specs[i].name.clone();
                    self.event(EventKind::Warning, "Failed", event, Some(&name));
                }
                self.not_started(i, n.reason, n.message, n.retry);
            }
        }
    }

    /// The image's mapping; a missing one is `ErrImagePull`, then `ImagePullBackOff`, retried
    /// after 5 s doubling up to 60 s.
    fn image(&mut self, i: usize) -> Result<images::Resolved, NotStarted> {
        let wanted = self.specs[i].image.clone().unwrap_or_default();
        let resolved = self.ctx.images.read().expect("images").resolve(&wanted);
        match resolved.and_then(|r| r.check().map(|()| r)) {
            Ok(r) => {
                self.ctrs[i].image_id = Some(r.image_id.clone());
                Ok(r)
            }
            Err(message) => {
                self.pull_failures[i] += 1;
                let n = self.pull_failures[i];
                Err(NotStarted {
                    reason: if n == 1 {
                        "ErrImagePull"
                    } else {
                        "ImagePullBackOff"
                    },
                    event: (n == 1)
                        .then(|| format!("Failed to pull image \"{wanted}\": {message}")),
                    message,
                    retry: Duration::from_secs((5u64 << (n - 1).min(4)).min(60)),
                })
            }
        }
    }

    /// Everything run `i` needs, written to its spec file.
    fn run_spec(&mut self, i: usize) -> Result<(RunSpec, launch::Credentials), NotStarted> {
        let image = self.image(i)?;
        let spec = self.specs[i].clone();
        let (ip, gw) = self.pod_context();
        let pctx = PodContext {
            pod: &self.pod,
            pod_ip: &ip,
            host_ip: &gw,
            node_cpu: node::ALLOCATABLE.0,
            node_memory: node::ALLOCATABLE.1,
        };
        let objects = NamespaceObjects {
            ctx: &self.ctx,
            ns: &self.ns,
        };
        let config_error = |m: String| NotStarted {
            reason: "CreateContainerConfigError",
            event: Some(format!("Error: {m}")),
            message: m,
            retry: RETRY,
        };
        let env = envvars::resolve(&spec, &pctx, &objects, &envvars::service_env(&gw))
            .map_err(config_error)?;
        let creds = launch::credentials(&self.pod, &spec).map_err(config_error)?;
        let create_error = |m: String| NotStarted {
            reason: "CreateContainerError",
            event: None,
            message: m,
            retry: RETRY,
        };
        let mounts = self
            .mounts(&spec, &image.entry, &env)
            .map_err(create_error)?;
        let hostname = launch::hostname(&self.pod);
        let mut full_env = launch::base_env(&image.entry, &hostname, creds.uid);
        full_env.extend(env.clone());
        let restart = self.ctrs[i].restart_count + i32::from(self.ctrs[i].ever_ran());
        let dir = self.ctx.layout.container_dir(&self.uid, &spec.name);
        let security = spec.security_context.as_ref();
        let run_spec = RunSpec {
            netns: PathBuf::from("/run/netns").join(layout::netns_name(self.ctx.slot, &self.uid)),
            cgroup: self.ctx.cgroups.container(&self.uid, &spec.name),
            shim_cgroup: self.ctx.cgroups.shims(),
            log: (self.ctx.layout).log_file(&self.ns, &self.name, &self.uid, &spec.name, restart),
            start_error: dir.join("start-error"),
            scratch: dir.join("scratch"),
            hostname,
            mounts,
            read_only_root: security.and_then(|s| s.read_only_root_filesystem) == Some(true),
            no_new_privs: security.and_then(|s| s.allow_privilege_escalation) == Some(false),
            argv: launch::argv(&spec, &image.entry, &env),
            env: full_env.into_iter().collect(),
            working_dir: (spec.working_dir.clone().filter(|w| !w.is_empty()))
                .or(image.entry.working_dir.clone())
                .unwrap_or_else(|| "/".into()),
            uid: creds.uid,
            gid: creds.gid,
            groups: creds.groups.clone(),
        };
        prepare_run(&run_spec, &dir).map_err(create_error)?;
        Ok((run_spec, creds))
    }

    /// Starts the shim of run `run_spec` of container `i` and records the run.
    async fn launch(&mut self, i: usize, run_spec: RunSpec, creds: launch::Credentials) {
        let name = self.specs[i].name.clone();
        let ever = self.ctrs[i].ever_ran();
        if !ever {
            let message = format!(
                "Container image \"{}\" already present on machine (mapped to host programs)",
                self.ctrs[i].image
            );
            self.event(EventKind::Normal, "Pulled", message, Some(&name));
        }
        let spec_path = self
            .ctx
            .layout
            .container_dir(&self.uid, &name)
            .join("spec.json");
        let launched = match runtime::launch(&spec_path, &run_spec.cgroup).await {
            Ok(l) => l,
            Err(message) => {
                // The shim could not even start init: reported like a start error.
                let t = Terminated {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError".into(),
                    message: Some(message),
                    started_at: None,
                    finished_at: now_time(),
                    container_id: None,
                };
                return self.finish(i, t);
            }
        };
        let (pid, run) = (launched.pid, self.next_run);
        self.next_run += 1;
        let spec = &self.specs[i];
        let c = &mut self.ctrs[i];
        if let RunState::Terminated(t) = &c.state {
            c.last_terminated = Some(t.clone());
        }
        c.restart_count += i32::from(ever);
        c.state = RunState::Running {
            started_at: now_time(),
            container_id: format!("proc://{pid}"),
        };
        c.started = spec.startup_probe.is_none();
        c.ready = c.started && spec.readiness_probe.is_none();
        c.restart_at = None;
        self.pull_failures[i] = 0;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let exit = launched.wait().await;
            let _ = tx.send(Msg::Exited {
                index: i,
                run,
                exit,
            });
        });
        let prober = self.prober(i, run, pid, &run_spec, &creds);
        self.runs[i] = Some(Live { run, pid, prober });
        let restarts = self.ctrs[i].restart_count;
        self.ctx
            .note_run(&self.ns, &self.name, &self.uid, &name, restarts, true);
        self.event(
            EventKind::Normal,
            "Created",
            format!("Created container {name}"),
            Some(&name),
        );
        self.event(
            EventKind::Normal,
            "Started",
            format!("Started container {name}"),
            Some(&name),
        );
    }

    /// The prober of a run, when the container has probes.
    fn prober(
        &self,
        i: usize,
        run: u64,
        pid: i32,
        run_spec: &RunSpec,
        creds: &launch::Credentials,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let spec = &self.specs[i];
        if !probe_run::has_probes(spec) {
            return None;
        }
        let exec = probe_run::exec_context(
            pid,
            run_spec.cgroup.clone(),
            run_spec.env.clone(),
            creds,
            run_spec.working_dir.clone(),
        );
        let ports = spec.ports.iter().flatten();
        let target = Target {
            pod_ip: self.pod_context().0,
            ports: ports
                .filter_map(|p| Some((p.name.clone()?, p.container_port)))
                .collect(),
            exec,
        };
        let prober = Prober {
            client: self.ctx.client.clone(),
            http: self.ctx.http.clone(),
            pod: self.pod.clone(),
            node: self.node.clone(),
            index: i,
            run,
            tx: self.tx.clone(),
        };
        Some(tokio::spawn(prober.run(
            spec.clone(),
            target,
            Instant::now().into(),
        )))
    }

    /// A container that could not be started waits with `reason`, retried after `retry`.
    pub(super) fn not_started(&mut self, i: usize, reason: &str, message: String, retry: Duration) {
        let c = &mut self.ctrs[i];
        c.state = RunState::Waiting {
            reason: reason.into(),
            message: Some(message),
        };
        c.restart_at = Some(Instant::now() + retry);
    }

    pub(super) fn mounts(
        &self,
        spec: &Container,
        image: &images::ImageEntry,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<Mount>, String> {
        let mut mounts: Vec<Mount> = image
            .files
            .iter()
            .map(|(target, host)| Mount {
                source: host.into(),
                target: target.clone(),
                read_only: true,
            })
            .collect();
        let etc = self.ctx.layout.etc_dir(&self.uid);
        for f in ["hosts", "hostname", "resolv.conf"] {
            mounts.push(Mount {
                source: etc.join(f),
                target: format!("/etc/{f}"),
                read_only: false,
            });
        }
        let log = self
            .ctx
            .layout
            .container_dir(&self.uid, &spec.name)
            .join("termination-log");
        mounts.push(Mount {
            source: log,
            target: spec
                .termination_message_path
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/dev/termination-log".into()),
            read_only: false,
        });
        let dirs = self.volumes.as_ref().ok_or("volumes not ready")?;
        for vm in spec.volume_mounts.iter().flatten() {
            let dir = dirs
                .get(&vm.name)
                .ok_or_else(|| format!("volume {} is not defined", vm.name))?;
            let sub = match (&vm.sub_path, &vm.sub_path_expr) {
                (Some(s), _) if !s.is_empty() => Some(s.clone()),
                (_, Some(e)) if !e.is_empty() => {
                    Some(crate::procnode::expand::expand(e, |k| env.get(k).cloned()))
                }
                _ => None,
            };
            let source = match sub {
                Some(s) if s.split('/').any(|c| c == "..") || s.starts_with('/') => {
                    return Err(format!(
                        "subPath {s:?} must be a relative path without '..'"
                    ));
                }
                Some(s) => {
                    let p = dir.join(&s);
                    if !p.exists() {
                        fs::create_dir_all(&p).map_err(|e| format!("creating subPath {s}: {e}"))?;
                        let _ = fs::set_permissions(
                            &p,
                            std::os::unix::fs::PermissionsExt::from_mode(0o777),
                        );
                    }
                    p
                }
                None => dir.clone(),
            };
            mounts.push(Mount {
                source,
                target: vm.mount_path.clone(),
                read_only: vm.read_only == Some(true),
            });
        }
        Ok(mounts)
    }

    pub(super) fn on_exit(&mut self, i: usize, exit: Exit) {
        let Some(live) = self.runs[i].take() else {
            return;
        };
        if let Some(p) = live.prober {
            p.abort();
        }
        let dir = self
            .ctx
            .layout
            .container_dir(&self.uid, &self.specs[i].name);
        let start_error = fs::read_to_string(dir.join("start-error")).unwrap_or_default();
        let code = exit.exit_code();
        let (reason, message) = if code == 128 && !start_error.is_empty() {
            ("StartError", Some(start_error))
        } else {
            let reason = if code == 0 { "Completed" } else { "Error" };
            (reason, self.termination_message(i, code))
        };
        let started_at = match &self.ctrs[i].state {
            RunState::Running { started_at, .. } => Some(started_at.clone()),
            _ => None,
        };
        let t = Terminated {
            exit_code: code,
            signal: exit.signal,
            reason: reason.into(),
            message,
            started_at,
            finished_at: now_time(),
            container_id: Some(format!("proc://{}", live.pid)),
        };
        tracing::info!(pod = %self.name, ns = %self.ns, container = %self.specs[i].name, code, signal = ?exit.signal, "container exited");
        self.finish(i, t);
    }

    /// Records an exit and decides about the restart.
    pub(super) fn finish(&mut self, i: usize, t: Terminated) {
        let terminating =
            self.shutdown || self.gone || self.pod.metadata.deletion_timestamp.is_some();
        let restart =
            !terminating && model::should_restart(self.ctrs[i].kind, self.policy(), t.exit_code);
        let name = self.specs[i].name.clone();
        let c = &mut self.ctrs[i];
        c.ready = false;
        c.started = false;
        if !restart {
            c.state = RunState::Terminated(t);
            c.restart_at = None;
        } else {
            let now = Instant::now();
            let at = self.backoffs[i].next_start(self.ctx.backoff, now);
            c.restart_at = Some(at);
            if at > now {
                let delay = at - now;
                let message = format!(
                    "back-off {}s restarting failed container={name} pod={}_{}({})",
                    delay.as_secs(),
                    self.name,
                    self.ns,
                    self.uid
                );
                c.last_terminated = Some(t);
                c.state = RunState::Waiting {
                    reason: "CrashLoopBackOff".into(),
                    message: Some(message.clone()),
                };
                self.event(
                    EventKind::Warning,
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {name} in pod {}_{}({})",
                        self.name, self.ns, self.uid
                    ),
                    Some(&name),
                );
            } else {
                c.state = RunState::Terminated(t);
            }
        }
        let restarts = self.ctrs[i].restart_count;
        self.ctx
            .note_run(&self.ns, &self.name, &self.uid, &name, restarts, false);
    }

    /// The container's termination message: its termination-log file, else (with
    /// `FallbackToLogsOnError` and a failure) the end of its log.
    pub(super) fn termination_message(&self, i: usize, code: i32) -> Option<String> {
        let spec = &self.specs[i];
        let dir = self.ctx.layout.container_dir(&self.uid, &spec.name);
        let text = fs::read(dir.join("termination-log")).unwrap_or_default();
        if !text.is_empty() {
            return Some(String::from_utf8_lossy(&text[..text.len().min(4096)]).into_owned());
        }
        if code != 0 && spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
        {
            let restart = self.ctrs[i].restart_count;
            let log = fs::read(
                self.ctx
                    .layout
                    .log_file(&self.ns, &self.name, &self.uid, &spec.name, restart),
            )
            .unwrap_or_default();
            let tail = &log[log.len().saturating_sub(2048)..];
            return Some(String::from_utf8_lossy(tail).into_owned());
        }
        None
    }

    /// SIGTERM now, SIGKILL after `grace` (at once when zero).
    pub(super) fn kill(&mut self, i: usize, grace: Duration) {
        let Some(live) = &self.runs[i] else {
            return;
        };
        if grace.is_zero() {
            let _ = cgroup::kill_now(self.ctx.cgroups.container(&self.uid, &self.specs[i].name));
            return;
        }
        runtime::signal(live.pid, Signal::SIGTERM);
        let tx = self.tx.clone();
        let (index, run) = (i, live.run);
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = tx.send(Msg::Escalate { index, run });
        });
    }
}

/// Why a container did not start.
struct NotStarted {
    /// The waiting reason (`ErrImagePull`, `CreateContainerConfigError`, …).
    reason: &'static str,
    /// Its message.
    message: String,
    /// A `Failed` Event to record, if any.
    event: Option<String>,
    /// When to try again.
    retry: Duration,
}

/// Writes `spec` into `dir` (fresh scratch, empty start-error and termination log, the
/// container's cgroup) and returns the spec file's path.
fn prepare_run(spec: &RunSpec, dir: &std::path::Path) -> Result<(), String> {
    pub(super) fn e(what: &'static str) -> impl Fn(std::io::Error) -> String {
        move |err| format!("{what}: {err}")
    }
    fs::create_dir_all(dir).map_err(e("container directory"))?;
    if spec.scratch.exists() {
        fs::remove_dir_all(&spec.scratch).map_err(e("old scratch"))?;
    }
    fs::create_dir_all(&spec.scratch).map_err(e("scratch"))?;
    let _ = fs::remove_file(&spec.start_error);
    let term = dir.join("termination-log");
    fs::write(&term, b"").map_err(e("termination log"))?;
    fs::set_permissions(&term, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .map_err(e("termination log"))?;
    if let Some(parent) = spec.log.parent() {
        fs::create_dir_all(parent).map_err(e("log directory"))?;
    }
    if spec.cgroup.exists() {
        let _ = cgroup::kill(&spec.cgroup);
    } else {
        fs::create_dir_all(&spec.cgroup).map_err(e("container cgroup"))?;
    }
    let path = dir.join("spec.json");
    fs::write(
        &path,
        serde_json::to_vec_pretty(spec).map_err(|err| err.to_string())?,
    )
    .map_err(e("spec"))?;
    Ok(())
}
