//! The kill harness: the operator under test runs as its own process (the real binary) and is
//! SIGKILLed at seeded random moments, then restarted.
//!
//! Contract:
//! - [`Operator::start`] spawns the binary with the given arguments and environment, its
//!   stdout and stderr appended to one log file across restarts (each start is marked), in
//!   its own process group, killed (SIGKILL) when dropped.
//! - [`Operator::kill`] SIGKILLs it and waits until it is reaped; [`Operator::restart`] starts
//!   it again with the same command.
//! - [`KillSchedule`] gives the seeded gaps between kills: the same seed, the same gaps. A gap
//!   counts from the restart, or, with [`KillSchedule::counted_from`], from the first log line
//!   of the new process that carries a marker (the operator leading: before that it writes
//!   nothing, and on a loaded machine its start-up could take most of a gap, so kills would
//!   land before it did any work), or a grace after the restart if the marker never comes.
//! - [`Operator::kill_repeatedly`] kills and restarts on the schedule until the token is
//!   cancelled, and returns how many kills it made; the operator is left running.
//!   [`Operator::supervise`] does the same with an optional schedule and also restarts the
//!   process when it exits by itself (as a kubelet restarts a container: an operator that
//!   loses its Lease exits non-zero), counting those exits apart from the kills.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use std::os::unix::process::CommandExt as _;
use tokio_util::sync::CancellationToken;

/// One operator process under test.
pub struct Operator {
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
    /// Where the current process's output starts in the log.
    start_offset: u64,
}

impl Operator {
    /// Starts `binary args…` with `env` added, logging to `log`.
    pub fn start(
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let mut op = Self {
            binary: binary.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log: log.to_path_buf(),
            child: None,
            starts: 0,
            start_offset: 0,
        };
        op.restart()?;
        Ok(op)
    }

    /// Starts the process again (after a kill, or if it exited).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        let mut log = File::options().create(true).append(true).open(&self.log)?;
        writeln!(
            log,
            "---- start {} of {} ----",
            self.starts,
            self.binary.display()
        )?;
        self.start_offset = log.metadata()?.len();
        let child = Command::new(&self.binary)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Whether the current process has logged a line containing `marker`.
    pub fn logged_since_start(&self, marker: &str) -> bool {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let Ok(mut f) = File::open(&self.log) else {
            return false;
        };
        let mut text = String::new();
        f.seek(SeekFrom::Start(self.start_offset))
            .and_then(|_| f.read_to_string(&mut text))
            .is_ok_and(|_| text.contains(marker))
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Kills and restarts on `schedule` until `stop` is cancelled; returns the number of kills.
    /// The operator is running when this returns.
    pub async fn kill_repeatedly(
        &mut self,
        schedule: KillSchedule,
        stop: CancellationToken,
    ) -> anyhow::Result<u32> {
        Ok(self.supervise(Some(schedule), stop).await?.kills)
    }

    /// Until `stop` is cancelled: kills and restarts on `schedule` (if any), and restarts the
    /// process whenever it exited by itself. The operator is running when this returns.
    pub async fn supervise(
        &mut self,
        mut schedule: Option<KillSchedule>,
        stop: CancellationToken,
    ) -> anyhow::Result<Supervised> {
        let mut done = Supervised::default();
        // The next kill, once armed; a schedule counted from a marker arms it when the marker
        // (or the grace) comes.
        let mut next_kill: Option<tokio::time::Instant> = None;
        let mut started = tokio::time::Instant::now();
        loop {
            if let (None, Some(s)) = (next_kill, schedule.as_mut()) {
                let ready = match &s.from {
                    None => true,
                    Some((marker, grace)) => {
                        started.elapsed() >= *grace || self.logged_since_start(marker)
                    }
                };
                if ready {
                    next_kill = Some(tokio::time::Instant::now() + s.next_gap());
                }
            }
            // Looks for an exit every 100 ms; the next kill comes at its seeded moment.
            let tick = tokio::time::Instant::now() + Duration::from_millis(100);
            let wake = next_kill.map_or(tick, |k| k.min(tick));
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(wake) => {}
            }
            if !self.running() {
                done.exits += 1;
                tracing::info!(target: "testenv::chaos", exits = done.exits, "operator exited by itself; restarting");
                self.restart()?;
                started = tokio::time::Instant::now();
                if schedule.as_ref().is_some_and(|s| s.from.is_some()) {
                    next_kill = None;
                }
            }
            if let (Some(at), Some(s)) = (next_kill, schedule.as_mut())
                && tokio::time::Instant::now() >= at
            {
                self.kill();
                done.kills += 1;
                tracing::info!(target: "testenv::chaos", seed = s.seed, kills = done.kills, "operator SIGKILLed; restarting");
                self.restart()?;
                started = tokio::time::Instant::now();
                next_kill = None;
            }
        }
        if !self.running() {
            self.restart()?;
        }
        Ok(done)
    }
}

/// What [`Operator::supervise`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Supervised {
    /// SIGKILLs on the schedule.
    pub kills: u32,
    /// Exits the process made by itself (each followed by a restart).
    pub exits: u32,
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Seeded gaps between kills, uniform in `[min, max]`.
#[derive(Clone, Debug)]
pub struct KillSchedule {
    /// The seed.
    pub seed: u64,
    min: Duration,
    max: Duration,
    state: u64,
    /// Count each gap from a log marker of the new process (or this grace after its start).
    from: Option<(String, Duration)>,
}

impl KillSchedule {
    /// Gaps between `min` and `max` from `seed`, each counted from the restart.
    pub fn new(seed: u64, min: Duration, max: Duration) -> Self {
        Self {
            seed,
            min,
            max: max.max(min),
            state: seed ^ 0xA5A5_5A5A_DEAD_BEEF,
            from: None,
        }
    }

    /// The same gaps, each counted from the first log line of the restarted process that
    /// contains `marker`, or from `grace` after its start when no such line comes.
    #[must_use]
    pub fn counted_from(mut self, marker: &str, grace: Duration) -> Self {
        self.from = Some((marker.to_owned(), grace));
        self
    }

    /// The schedule of the `k`-th process of a run: the same gaps' bounds and marker, seed
    /// [`super::plan::derive_seed`]`(seed, k)` (the 0th is this schedule itself).
    #[must_use]
    pub fn derived(&self, k: usize) -> Self {
        let mut s = Self::new(super::plan::derive_seed(self.seed, k), self.min, self.max);
        s.from = self.from.clone();
        s
    }

    /// The next gap.
    pub fn next_gap(&mut self) -> Duration {
        // xorshift64*: small and ours.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let r = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let unit = (r >> 11) as f64 / (1u64 << 53) as f64;
        self.min + (self.max - self.min).mul_f64(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_replay_from_the_seed_and_stay_in_bounds() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(2));
        let a: Vec<_> = {
            let mut s = KillSchedule::new(9, min, max);
            (0..100).map(|_| s.next_gap()).collect()
        };
        let b: Vec<_> = {
            let mut s = KillSchedule::new(9, min, max);
            (0..100).map(|_| s.next_gap()).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|g| *g >= min && *g <= max));
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert!(distinct.len() > 90, "gaps vary");
    }

    #[tokio::test]
    async fn gaps_counted_from_a_marker_start_when_the_new_process_logs_it() {
        let dir = std::env::temp_dir().join(format!("chaos-marker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Leads 150 ms after its start, then runs until killed.
        let script = "sleep 0.15; echo 'acquired leadership'; exec sleep 300";
        let mut op = Operator::start(Path::new("/bin/sh"), &["-c", script], &[], &dir.join("log"))
            .expect("start");
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        let schedule = KillSchedule::new(2, Duration::from_millis(20), Duration::from_millis(40))
            .counted_from("acquired leadership", Duration::from_secs(30));
        let kill = tokio::spawn(async move {
            let kills = op.kill_repeatedly(schedule, stop).await.expect("kills");
            (kills, op)
        });
        tokio::time::sleep(Duration::from_millis(1500)).await; // the window in which kills are made
        stopper.cancel();
        let (kills, op) = kill.await.expect("join");
        assert!(kills >= 2, "{kills} kills");
        // Every process that was killed had logged the marker first.
        let log = std::fs::read_to_string(op.log()).unwrap();
        let runs: Vec<&str> = log.split("---- start").skip(1).collect();
        assert_eq!(runs.len() as u32, kills + 1);
        for run in &runs[..runs.len() - 1] {
            assert!(
                run.contains("acquired leadership"),
                "killed before leading: {run:?}"
            );
        }
        drop(op);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_killed_process_is_restarted_and_left_running() {
        let dir = std::env::temp_dir().join(format!("chaos-harness-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut op = Operator::start(Path::new("/bin/sleep"), &["300"], &[], &dir.join("log"))
            .expect("start");
        assert!(op.running());
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        let schedule = KillSchedule::new(1, Duration::from_millis(20), Duration::from_millis(40));
        let kill = tokio::spawn(async move {
            let kills = op.kill_repeatedly(schedule, stop).await.expect("kills");
            (kills, op)
        });
        // Let a few kills happen; the harness counts them, so the test asserts on the count.
        tokio::time::sleep(Duration::from_millis(300)).await; // the window in which kills are made
        stopper.cancel();
        let (kills, mut op) = kill.await.expect("join");
        assert!(kills >= 3, "{kills} kills");
        assert_eq!(op.starts(), kills + 1);
        assert!(op.running(), "left running");
        let log = std::fs::read_to_string(op.log()).unwrap();
        assert_eq!(log.matches("---- start").count() as u32, kills + 1);
        drop(op);
        let _ = std::fs::remove_dir_all(dir);
    }
}
