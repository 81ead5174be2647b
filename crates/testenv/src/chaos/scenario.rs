//! What a chaos scenario is made of, apart from its steps and invariants: which seeds to run,
//! the operator process behind the fault proxy, the record of invariant violations, the
//! request-rate meter, and the report of one run.
//!
//! Contract:
//! - [`seeds`] reads the seeds to run from `FLOTILLA_CHAOS_SEEDS` (`7`, `1,5,9`, `100-199`;
//!   `none`: the baseline only), else the scenario's fixed in-suite set; [`parallel`] how many runs go at once
//!   (`FLOTILLA_CHAOS_PARALLEL`, default 1). `cargo xtask chaos` sets both.
//! - [`OperatorUnderTest::start`] runs the real operator binary as its own process with a
//!   kubeconfig pointing at a [`FaultProxy`] and a bound token of the operator's ServiceAccount
//!   (so it acts under the shipped RBAC), leader election on with a fixed identity (a killed
//!   and restarted process is the same pod's container restarting: it renews its own Lease at
//!   once), its log in the run's directory, supervised: SIGKILLed on the seeded schedule and
//!   restarted whenever it exits.
//! - [`OperatorUnderTest::start_processes`] does the same for an operator made of several
//!   processes talking to several API servers (KubeStellar's controller-manager: a WDS and an
//!   ITS; each WEC's agent: the ITS and the WEC): every process talks to each of its API
//!   servers through a proxy of its own ([`Endpoint`], [`Upstream`]) as the ServiceAccount
//!   named there; the `k`-th proxy gets the run's plan [`Plan::derived`]`(k)` and the `i`-th
//!   process the kill schedule [`KillSchedule::derived`]`(i)`, so one seed replays every
//!   proxy's faults and every process's kills; fault counts and traffic are summed, rates
//!   measured per process.
//! - [`Violations`] collects what invariant checkers find, stamped with the time since the
//!   run started; a violation repeated with the same text is kept once, with a count.
//! - [`RateMeter`] samples the proxy's request counters (per process) every second;
//!   [`RateMeter::peak`] is the highest rate of reads and writes (watches excluded) of any one
//!   process over any [`RATE_WINDOW`].
//! - [`RunReport`] is one run's figures; [`RunReport::emit`] prints its summary (with the
//!   command that replays it) and appends it as one JSON line to `FLOTILLA_CHAOS_REPORT` when
//!   that is set, which `cargo xtask chaos` turns into the soak table ([`super::report`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::harness::{KillSchedule, Operator, Supervised};
use super::plan::{Plan, Rates};
use super::proxy::{FaultProxy, Traffic, Upstream};

/// Environment variable naming the seeds to run.
pub const ENV_SEEDS: &str = "FLOTILLA_CHAOS_SEEDS";
/// Environment variable: how many runs at once.
pub const ENV_PARALLEL: &str = "FLOTILLA_CHAOS_PARALLEL";
/// Environment variable: a file to append each run's JSON report to.
pub const ENV_REPORT: &str = "FLOTILLA_CHAOS_REPORT";
/// The window over which the peak request rate is measured.
pub const RATE_WINDOW: Duration = Duration::from_secs(5);

/// The seeds to run: `FLOTILLA_CHAOS_SEEDS` when set, else `default`.
pub fn seeds(default: &[u64]) -> Vec<u64> {
    match std::env::var(ENV_SEEDS) {
        Ok(v) if v.trim() == "none" => Vec::new(),
        Ok(v) if !v.trim().is_empty() => parse_seeds(&v).unwrap_or_else(|e| panic!("{e}")),
        _ => default.to_vec(),
    }
}

/// How many runs go at once (`FLOTILLA_CHAOS_PARALLEL`, at least 1).
pub fn parallel() -> usize {
    std::env::var(ENV_PARALLEL)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1usize)
        .max(1)
}

/// Parses `7`, `1,5,9`, `100-199` and mixtures (`1,10-12`).
pub fn parse_seeds(spec: &str) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = |e: std::num::ParseIntError| format!("{ENV_SEEDS}: bad seed {part:?}: {e}");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (
                    a.trim().parse().map_err(bad)?,
                    b.trim().parse().map_err(bad)?,
                );
                if a > b {
                    return Err(format!("{ENV_SEEDS}: empty range {part:?}"));
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(bad)?),
        }
    }
    Ok(out)
}

/// One invariant violation.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Violation {
    /// Seconds since the run started, at the first occurrence.
    pub at: f64,
    /// The invariant's short name.
    pub invariant: String,
    /// What was seen.
    pub detail: String,
    /// How many times it was seen.
    pub count: u64,
}

/// The violations of one run, shared by its checkers.
#[derive(Clone)]
pub struct Violations {
    started: Instant,
    found: Arc<Mutex<Vec<Violation>>>,
}

impl Violations {
    /// An empty record; times count from now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            found: Arc::default(),
        }
    }

    /// Records that `invariant` is violated, as `detail` says.
    pub fn record(&self, invariant: &str, detail: impl Into<String>) {
        let detail = detail.into();
        let mut found = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = found
            .iter_mut()
            .find(|v| v.invariant == invariant && v.detail == detail)
        {
            v.count += 1;
            return;
        }
        tracing::error!(target: "testenv::chaos", invariant, %detail, "invariant violated");
        found.push(Violation {
            at: self.started.elapsed().as_secs_f64(),
            invariant: invariant.to_owned(),
            detail,
            count: 1,
        });
    }

    /// Everything recorded so far.
    pub fn all(&self) -> Vec<Violation> {
        self.found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Default for Violations {
    fn default() -> Self {
        Self::new()
    }
}

// When, and each counter then.
type Sample = (Instant, Vec<u64>);

/// Samples request counters every second: one proxy's reads and writes, or each process's
/// of an operator made of several.
pub struct RateMeter {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl RateMeter {
    /// Starts sampling `proxy`.
    pub fn start(proxy: Arc<FaultProxy>) -> Self {
        Self::per_process(vec![vec![proxy]])
    }

    /// Starts sampling each group of proxies (a process's) as one counter.
    pub fn per_process(proxies: Vec<Vec<Arc<FaultProxy>>>) -> Self {
        let samples = Arc::new(Mutex::new(vec![(Instant::now(), process_calls(&proxies))]));
        let stop = CancellationToken::new();
        let (out, token) = (samples.clone(), stop.clone());
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {} // the sampling period
                }
                let now = (Instant::now(), process_calls(&proxies));
                out.lock().unwrap_or_else(PoisonError::into_inner).push(now);
            }
        });
        Self {
            samples,
            stop,
            task,
        }
    }

    /// The highest rate (requests per second) of any one counter over any [`RATE_WINDOW`] so
    /// far.
    pub fn peak(&self) -> f64 {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let counters = samples.first().map_or(0, |(_, c)| c.len());
        (0..counters)
            .map(|i| {
                let one: Vec<(Instant, u64)> = samples.iter().map(|(t, c)| (*t, c[i])).collect();
                peak_rate(&one, RATE_WINDOW)
            })
            .fold(0.0, f64::max)
    }

    /// Stops sampling.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// The highest rate over any window of at least `window` between two samples of a counter
/// (`(when, count)`, in time order): for each sample, the rate since the latest sample at
/// least `window` before it.
pub fn peak_rate(samples: &[(Instant, u64)], window: Duration) -> f64 {
    let mut peak = 0.0f64;
    let mut i = 0;
    for j in 0..samples.len() {
        while i + 1 < j && samples[j].0 - samples[i + 1].0 >= window {
            i += 1;
        }
        let span = samples[j].0.saturating_duration_since(samples[i].0);
        if j > i && span >= window {
            let n = samples[j].1.saturating_sub(samples[i].1);
            peak = peak.max(n as f64 / span.as_secs_f64());
        }
    }
    peak
}

/// The operator under test: one process (or several: a controller-manager and its agents),
/// each behind fault proxies of its own, supervised by the kill harness.
pub struct OperatorUnderTest {
    /// The proxy the (first) process talks to (its first API server).
    pub proxy: Arc<FaultProxy>,
    // Per process, its proxies.
    proxies: Vec<Vec<Arc<FaultProxy>>>,
    members: Vec<Member>,
    done: Supervised,
    log: PathBuf,
}

// One supervised process.
struct Member {
    operator: Option<Operator>,
    supervisor: Option<(
        CancellationToken,
        tokio::task::JoinHandle<(Operator, Supervised)>,
    )>,
    /// See [`Process::working`].
    working: Option<String>,
}

/// How to start one.
pub struct Launch<'a> {
    /// The binary (`env!("CARGO_BIN_EXE_<name>")`).
    pub binary: &'a Path,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment added to the test's (`KUBECONFIG`, `POD_NAME`, `POD_NAMESPACE` are set here).
    pub env: Vec<(String, String)>,
    /// The namespace: the Lease and the ServiceAccount live there.
    pub namespace: &'a str,
    /// The operator's ServiceAccount in `namespace` (its RBAC installed by the caller).
    pub service_account: &'a str,
    /// Where the kubeconfig and the log go.
    pub dir: &'a Path,
    /// The fault plan.
    pub plan: Plan,
}

/// An API server a [`Process`] talks to, through a fault proxy of its own.
pub struct Endpoint {
    /// Its short name (`wds`, `its`, …): the proxy's journal is `proxy-<process>-<name>.log`.
    pub name: String,
    /// The API server.
    pub upstream: Upstream,
    /// An admin client of it (not behind the proxy): asks for the token.
    pub admin: kube::Client,
    /// The ServiceAccount the process acts as there, `(namespace, name)` (its RBAC installed
    /// by the caller).
    pub service_account: (String, String),
    /// Where the process's kubeconfig for it is written (its arguments name this path).
    pub kubeconfig: PathBuf,
}

/// One process of an operator made of several ([`OperatorUnderTest::start_processes`]).
pub struct Process {
    /// Its name: its log is `<name>.log`; `POD_NAME` is `<name>-0` (a fixed identity, as a
    /// restarted container's).
    pub name: String,
    /// The binary.
    pub binary: PathBuf,
    /// Its arguments (naming its endpoints' kubeconfigs).
    pub args: Vec<String>,
    /// Environment added to the test's (`POD_NAME` and `POD_NAMESPACE`, the first endpoint's
    /// ServiceAccount namespace, are set here).
    pub env: Vec<(String, String)>,
    /// The API servers it talks to, each through its own proxy.
    pub endpoints: Vec<Endpoint>,
    /// The log line after which the process does its work (`controller-manager running`),
    /// when that comes well after it leads (it installs its CRDs first): the gap before each
    /// kill counts from it instead of from leadership, so start-ups slowed by the faults do not
    /// eat the time it gets to work. None: from leadership, as [`kills`].
    pub working: Option<String>,
}

async fn token_for(admin: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<String> {
    crate::eventually(
        &format!("a token of ServiceAccount {namespace}/{name}"),
        Duration::from_secs(30),
        || async {
            crate::service_account_token(admin, namespace, name)
                .await
                .ok()
        },
    )
    .await
}

impl OperatorUnderTest {
    /// Starts the proxy and the operator process (not yet supervised: see [`Self::supervise`]).
    pub async fn start(admin: &kube::Client, launch: Launch<'_>) -> anyhow::Result<Self> {
        std::fs::create_dir_all(launch.dir)?;
        let proxy = Arc::new(FaultProxy::start(launch.plan).await?);
        proxy.journal_to(&launch.dir.join("proxy.log"))?;
        let token = token_for(admin, launch.namespace, launch.service_account).await?;
        let kubeconfig = launch.dir.join("kubeconfig");
        proxy.kubeconfig(&kubeconfig, &token, launch.namespace)?;
        let mut env = launch.env;
        env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
        env.push(("POD_NAME".into(), format!("{}-0", launch.service_account)));
        env.push(("POD_NAMESPACE".into(), launch.namespace.to_owned()));
        let args: Vec<&str> = launch.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let log = launch.dir.join("operator.log");
        let operator = Operator::start(launch.binary, &args, &env, &log)?;
        Ok(Self {
            proxy: proxy.clone(),
            proxies: vec![vec![proxy]],
            members: vec![Member {
                operator: Some(operator),
                supervisor: None,
                working: None,
            }],
            done: Supervised::default(),
            log,
        })
    }

    /// Starts an operator made of several processes (a controller-manager and its agents),
    /// each talking to each of its API servers through a proxy of its own, as the
    /// ServiceAccount its [`Endpoint`] names there (not yet supervised: see
    /// [`Self::supervise`]). The `k`-th proxy, counted over the processes in order, gets
    /// `plan.derived(k)`: one seed, independent faults. Logs and journals go to `dir`; the
    /// report's log is the first process's.
    pub async fn start_processes(
        dir: &Path,
        plan: Plan,
        processes: Vec<Process>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(!processes.is_empty(), "no process to start");
        std::fs::create_dir_all(dir)?;
        let (mut proxies, mut members) = (Vec::new(), Vec::new());
        for p in processes {
            let mut mine = Vec::new();
            for e in &p.endpoints {
                let k = proxies.iter().map(Vec::len).sum::<usize>() + mine.len();
                let proxy = FaultProxy::start_in_front_of(plan.derived(k), &e.upstream).await?;
                proxy.journal_to(&dir.join(format!("proxy-{}-{}.log", p.name, e.name)))?;
                let (ns, sa) = &e.service_account;
                let token = token_for(&e.admin, ns, sa).await?;
                proxy.kubeconfig(&e.kubeconfig, &token, ns)?;
                mine.push(Arc::new(proxy));
            }
            let mut env = p.env;
            env.push(("POD_NAME".into(), format!("{}-0", p.name)));
            if let Some(e) = p.endpoints.first() {
                env.push(("POD_NAMESPACE".into(), e.service_account.0.clone()));
            }
            let args: Vec<&str> = p.args.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let log = dir.join(format!("{}.log", p.name));
            members.push(Member {
                operator: Some(Operator::start(&p.binary, &args, &env, &log)?),
                supervisor: None,
                working: p.working,
            });
            proxies.push(mine);
        }
        let proxy = proxies
            .iter()
            .flatten()
            .next()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no process talks to an API server"))?;
        let log = members[0]
            .operator
            .as_ref()
            .map(|o| o.log().to_path_buf())
            .unwrap_or_default();
        Ok(Self {
            proxy,
            proxies,
            members,
            done: Supervised::default(),
            log,
        })
    }

    /// From now on: kill on `schedule` (none: only restart on exits) until [`Self::calm`]; the
    /// `i`-th process on `schedule.derived(i)` (the first on `schedule` itself).
    pub fn supervise(&mut self, schedule: Option<KillSchedule>) {
        for (i, m) in self.members.iter_mut().enumerate() {
            let Some(mut op) = m.operator.take() else {
                continue;
            };
            let schedule = match (i, &schedule) {
                (0, s) => s.clone(),
                (i, s) => s.as_ref().map(|s| s.derived(i)),
            };
            let schedule = match &m.working {
                Some(marker) => schedule.map(|s| s.counted_from(marker, Duration::from_secs(20))),
                None => schedule,
            };
            let stop = CancellationToken::new();
            let token = stop.clone();
            let task = tokio::spawn(async move {
                let done = op.supervise(schedule, token).await.unwrap_or_default();
                (op, done)
            });
            m.supervisor = Some((stop, task));
        }
    }

    /// Ends every supervision period: the processes are left running (or, with `kill`, are
    /// killed); their kills and exits are added up.
    async fn end_supervision(&mut self, kill: bool) {
        for m in &mut self.members {
            if let Some((stop, task)) = m.supervisor.take() {
                stop.cancel();
                if let Ok((op, done)) = task.await {
                    self.done.kills += done.kills;
                    self.done.exits += done.exits;
                    m.operator = Some(op);
                }
            }
            if kill && let Some(op) = m.operator.as_mut() {
                op.kill();
            }
        }
    }

    /// Stops killing (the operator is left running, still restarted if it exits) and stops
    /// injecting faults. Returns when the last kill was made.
    pub async fn calm(&mut self) {
        self.set_rates(Rates::none());
        self.end_supervision(false).await;
        // Exits after the chaos (there should be none) are still restarted.
        self.supervise(None);
    }

    /// Sets the fault rates of every proxy.
    pub fn set_rates(&self, rates: Rates) {
        for p in self.proxies.iter().flatten() {
            p.set_rates(rates.clone());
        }
    }

    /// Every proxy, per process.
    pub fn proxies(&self) -> &[Vec<Arc<FaultProxy>>] {
        &self.proxies
    }

    /// Requests through every proxy so far, by class.
    pub fn traffic(&self) -> Traffic {
        let mut t = Traffic::default();
        for p in self.proxies.iter().flatten() {
            let q = p.traffic();
            t.reads += q.reads;
            t.writes += q.writes;
            t.watches += q.watches;
        }
        t
    }

    /// Faults injected by every proxy so far, by kind.
    pub fn fault_counts(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for p in self.proxies.iter().flatten() {
            for (k, n) in p.counts() {
                *m.entry(k).or_default() += n;
            }
        }
        m
    }

    /// A meter of each process's reads and writes (over all its proxies).
    pub fn meter(&self) -> RateMeter {
        RateMeter::per_process(self.proxies.clone())
    }

    /// The highest rate of any one process's reads and writes over the next `window`.
    pub async fn quiet_rate(&self, window: Duration) -> f64 {
        let before = process_calls(&self.proxies);
        tokio::time::sleep(window).await; // the measurement window itself
        let after = process_calls(&self.proxies);
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| (a - b) as f64 / window.as_secs_f64())
            .fold(0.0, f64::max)
    }

    /// Kills and exits so far (of finished supervision periods).
    pub fn supervised(&self) -> Supervised {
        self.done
    }

    /// The later of now (the last kill was before) and the proxies' last fault, which may be
    /// a watch cut scheduled to happen after the faults stopped: when the chaos really ended.
    pub fn last_disturbance(&self) -> Instant {
        let pending = self
            .proxies
            .iter()
            .flatten()
            .filter_map(|p| p.last_fault().map(|at| at.saturating_sub(p.elapsed())))
            .max()
            .unwrap_or(Duration::ZERO);
        Instant::now() + pending
    }

    /// The (first) process's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Stops supervising and kills the processes; returns the totals.
    pub async fn stop(mut self) -> Supervised {
        self.end_supervision(true).await;
        self.done
    }
}

// Each process's reads and writes so far.
fn process_calls(proxies: &[Vec<Arc<FaultProxy>>]) -> Vec<u64> {
    proxies
        .iter()
        .map(|ps| ps.iter().map(|p| p.traffic().calls()).sum())
        .collect()
}

/// One run's figures.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RunReport {
    /// The operator (`redroid`, `cocoon`, …).
    pub operator: String,
    /// The scenario.
    pub scenario: String,
    /// The seed; `None` for the fault-free baseline run.
    pub seed: Option<u64>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// SIGKILLs of the operator.
    pub kills: u32,
    /// Exits of the operator by itself (restarted).
    pub exits: u32,
    /// Reads and writes the operator sent.
    pub requests: u64,
    /// The highest request rate over any 5 s window of the run (requests per second).
    pub peak_rate: f64,
    /// The request rate once converged (requests per second, over the quiet window).
    pub quiet_rate: f64,
    /// Seconds from the last fault (or kill) to the converged state.
    pub converge_secs: Option<f64>,
    /// The whole run, in seconds.
    pub duration_secs: f64,
    /// Invariant violations (must be none).
    pub violations: Vec<Violation>,
    /// The operator's log.
    pub log: String,
}

impl RunReport {
    /// The command that replays this run.
    pub fn replay(&self) -> String {
        match self.seed {
            Some(seed) => format!(
                "cargo xtask chaos --operator {} --scenario {} --seed {seed}",
                self.operator, self.scenario
            ),
            None => format!(
                "cargo xtask chaos --operator {} --scenario {} --runs 0",
                self.operator, self.scenario
            ),
        }
    }

    /// Prints the summary; appends the JSON line to `FLOTILLA_CHAOS_REPORT` if set.
    pub fn emit(&self) {
        let seed = self
            .seed
            .map_or_else(|| "baseline".to_owned(), |s| s.to_string());
        let faults: u64 = self.faults.values().sum();
        eprintln!(
            "chaos {}/{} seed {seed}: {faults} faults, {} kills, {} exits, {} requests, peak {:.1}/s, quiet {:.2}/s, converged {}, {} violations; log {}; replay: {}",
            self.operator,
            self.scenario,
            self.kills,
            self.exits,
            self.requests,
            self.peak_rate,
            self.quiet_rate,
            self.converge_secs
                .map_or_else(|| "never".to_owned(), |s| format!("in {s:.1}s")),
            self.violations.len(),
            self.log,
            self.replay(),
        );
        for v in &self.violations {
            eprintln!(
                "  VIOLATION {} at {:.1}s (x{}): {}",
                v.invariant, v.at, v.count, v.detail
            );
        }
        if let Ok(path) = std::env::var(ENV_REPORT) {
            use std::io::Write as _;
            let line = serde_json::to_string(self).expect("a report serializes");
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| writeln!(f, "{line}"));
            if let Err(e) = written {
                eprintln!("cannot append the chaos report to {path}: {e}");
            }
        }
    }
}

/// The fault plan of a run: the soak rates from `seed`, or none for the baseline.
pub fn plan(seed: Option<u64>) -> Plan {
    match seed {
        Some(seed) => Plan {
            seed,
            rates: Rates::soak(),
        },
        None => Plan {
            seed: 0,
            rates: Rates::none(),
        },
    }
}

/// The kill schedule of a run's chaos phase `phase` (0, 1, …): a SIGKILL 2–8 s after each (re)start leads, from
/// `seed`; none for the baseline.
pub fn kills(seed: Option<u64>, phase: u64) -> Option<KillSchedule> {
    seed.map(|s| {
        KillSchedule::new(
            s ^ phase.wrapping_mul(0x9E37_79B9),
            Duration::from_secs(2),
            Duration::from_secs(8),
        )
        // Each gap from the restarted operator's leadership (kit::leader's log line), so a
        // loaded machine's slow start-ups do not eat the time it gets to work.
        .counted_from("acquired leadership", Duration::from_secs(20))
    })
}

/// How a run reached its converged state.
pub struct Converged {
    /// The state.
    pub state: serde_json::Value,
    /// When it was first seen.
    pub at: Instant,
}

/// Polls `capture` every 500 ms until the state equals `baseline` (a seeded run), or, for the
/// baseline run (`None`), until it satisfies `settled` and is unchanged one poll later.
/// On timeout returns the last state seen (if any), for the violation's detail.
pub async fn converge<F, Fut>(
    mut capture: F,
    baseline: Option<&serde_json::Value>,
    settled: impl Fn(&serde_json::Value) -> bool,
    deadline: Duration,
) -> Result<Converged, Option<serde_json::Value>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<serde_json::Value>>,
{
    let until = Instant::now() + deadline;
    let mut last: Option<(serde_json::Value, Instant)> = None;
    while Instant::now() < until {
        if let Ok(state) = capture().await {
            let now = Instant::now();
            match baseline {
                Some(b) if *b == state => return Ok(Converged { state, at: now }),
                Some(_) => last = Some((state, now)),
                None if settled(&state) => match last.take() {
                    Some((prev, at)) if prev == state => return Ok(Converged { state, at }),
                    _ => last = Some((state, now)),
                },
                None => last = Some((state, now)),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // polling a condition with a deadline
    }
    Err(last.map(|(s, _)| s))
}

/// Where `got` differs from `baseline`, one line per JSON path.
pub fn diff(baseline: &serde_json::Value, got: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    walk("", baseline, got, &mut out);
    out
}

fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                let (xa, yb) = (x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null));
                walk(&format!("{path}/{k}"), xa, yb, out);
            }
        }
        _ if a != b => out.push(format!("{path}: baseline {a}, got {b}")),
        _ => {}
    }
}

/// The rate of reads and writes through `proxy` over the next `window` (requests per second).
pub async fn quiet_rate(proxy: &FaultProxy, window: Duration) -> f64 {
    let before = proxy.traffic().calls();
    tokio::time::sleep(window).await; // the measurement window itself
    (proxy.traffic().calls() - before) as f64 / window.as_secs_f64()
}

/// Runs a scenario's baseline, then every seed ([`seeds`], [`parallel`] at a time), emitting
/// each run's report; `run(seed, baseline_state)` does one run and returns its report and
/// its converged state. Returns every report.
pub async fn soak<F, Fut>(default_seeds: &[u64], run: F) -> Vec<RunReport>
where
    F: Fn(Option<u64>, Option<Arc<serde_json::Value>>) -> Fut,
    Fut: Future<Output = (RunReport, Option<serde_json::Value>)>,
{
    let (report, state) = run(None, None).await;
    report.emit();
    let mut reports = vec![report];
    let Some(baseline) = state.map(Arc::new) else {
        return reports;
    };
    let seeds = seeds(default_seeds);
    for chunk in seeds.chunks(parallel()) {
        let runs = chunk.iter().map(|s| run(Some(*s), Some(baseline.clone())));
        for (report, _) in futures::future::join_all(runs).await {
            report.emit();
            reports.push(report);
        }
    }
    reports
}

/// Panics naming every run with a violation (and how to replay it).
pub fn assert_clean(reports: &[RunReport]) {
    let bad: Vec<String> = reports
        .iter()
        .filter(|r| !r.violations.is_empty())
        .map(|r| {
            let first = &r.violations[0];
            format!(
                "{} violation(s), first {}: {} — replay: {}",
                r.violations.len(),
                first.invariant,
                first.detail,
                r.replay()
            )
        })
        .collect();
    // The first bad run on the panic's first line: CI's summary shows one line per failure.
    assert!(bad.is_empty(), "invariants violated: {}", bad.join("\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_lists_and_ranges() {
        assert_eq!(parse_seeds("7"), Ok(vec![7]));
        assert_eq!(parse_seeds("1, 5,9"), Ok(vec![1, 5, 9]));
        assert_eq!(parse_seeds("3-5,10"), Ok(vec![3, 4, 5, 10]));
        assert!(parse_seeds("5-3").is_err());
        assert!(parse_seeds("x").is_err());
        assert_eq!(parse_seeds(""), Ok(vec![]));
    }

    #[test]
    fn peak_rate_is_the_busiest_window() {
        let t0 = Instant::now();
        let s = |secs: u64, n: u64| (t0 + Duration::from_secs(secs), n);
        // 10 requests per second for 5 s, then idle.
        let samples: Vec<_> = (0..=10)
            .map(|i| s(i, if i <= 5 { i * 10 } else { 50 }))
            .collect();
        assert!((peak_rate(&samples, Duration::from_secs(5)) - 10.0).abs() < 1e-9);
        // Shorter than a window: no rate yet.
        assert_eq!(peak_rate(&samples[..3], Duration::from_secs(5)), 0.0);
        // A burst of 100 in one second shows as 20/s over the 5 s window.
        let burst = [
            s(0, 0),
            s(1, 0),
            s(2, 100),
            s(3, 100),
            s(4, 100),
            s(5, 100),
            s(6, 100),
        ];
        assert!((peak_rate(&burst, Duration::from_secs(5)) - 20.0).abs() < 1e-9);
    }

    #[test]
    fn violations_are_kept_once_with_a_count() {
        let v = Violations::new();
        v.record("two_pods", "instance a: p1, p2");
        v.record("two_pods", "instance a: p1, p2");
        v.record("two_pods", "instance b: p3, p4");
        let all = v.all();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].count, 2);
    }
}
