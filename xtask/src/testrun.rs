//! `cargo xtask test`'s test phase: every test binary of the workspace, several at a time.
//!
//! `cargo test --workspace` runs its test binaries one after another, and most of ours spend
//! their time waiting on the control plane (pods starting, failovers, watches), not on the CPU.
//! So the binaries are built once (`cargo test --no-run`, whose JSON names every executable), then
//! run `FLOTILLA_TEST_JOBS` at a time (3 by default), longest first by the previous run's times
//! (kept in the target dir), each as cargo would run it: working directory and
//! `CARGO_MANIFEST_DIR` of its package, `CARGO` set. Doctests run as one more job. A binary's
//! output is printed whole when it ends, under a header naming it, so outputs never interleave;
//! the totals (`tests: N passed, N failed`) and a table of the slowest binaries close the run.
//! Every binary runs even after one fails.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One job: a test executable of a package, or the workspace's doctests.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// `<package dir>::<target>` (`redis::cluster_lifecycle`, `kit::lib`), or `doctests`.
    pub label: String,
    program: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
}

/// What one job did.
#[derive(Debug)]
struct Outcome {
    label: String,
    secs: f64,
    passed: u64,
    failed: u64,
    ok: bool,
    /// For a failed job: the lines that say why, and the machine's state when it ended.
    digest: Vec<String>,
    /// For a failed job: its failing tests, a line each ([`failed_tests`]).
    failing: Vec<String>,
}

fn cargo_bin() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// The test executables named by `cargo test --no-run --message-format=json` output.
pub fn jobs_from_json(json: &str) -> anyhow::Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for line in json.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line)?;
        if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = v["executable"].as_str() else {
            continue;
        };
        let manifest = PathBuf::from(v["manifest_path"].as_str().unwrap_or_default());
        let dir = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
        let pkg = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = v["target"]["kind"][0].as_str().unwrap_or("test");
        let target = v["target"]["name"]
            .as_str()
            .unwrap_or("?")
            .replace('-', "_");
        let label = match kind {
            "lib" => format!("{pkg}::lib"),
            "bin" => format!("{pkg}::bin {target}"),
            _ => format!("{pkg}::{target}"),
        };
        jobs.push(Job {
            label,
            program: PathBuf::from(exe),
            args: Vec::new(),
            dir,
        });
    }
    jobs.dedup();
    Ok(jobs)
}

/// Longest first by the previous run's seconds; binaries never timed go first (they may be long).
pub fn order(jobs: &mut [Job], previous: &HashMap<String, f64>) {
    jobs.sort_by(|a, b| {
        let t = |j: &Job| previous.get(&j.label).copied().unwrap_or(f64::INFINITY);
        t(b).total_cmp(&t(a)).then_with(|| a.label.cmp(&b.label))
    });
}

fn times_file() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("flotilla-test-times.tsv")
}

fn read_times(path: &Path) -> HashMap<String, f64> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (label, secs) = l.rsplit_once('\t')?;
            Some((label.to_string(), secs.parse().ok()?))
        })
        .collect()
}

/// How many binaries run at once: `FLOTILLA_TEST_JOBS`, else 3.
fn parallelism() -> usize {
    std::env::var("FLOTILLA_TEST_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(3)
}

/// What a run of every test binary came to.
pub struct Totals {
    /// Tests passed.
    pub passed: u64,
    /// Tests failed (a binary that failed without a failing test counts as one).
    pub failed: u64,
    /// The failing tests, a line each: where and why they panicked.
    pub failing: Vec<String>,
}

/// Builds every test binary, runs them all, prints the totals.
pub fn run() -> anyhow::Result<Totals> {
    let out = testenv::cargo::command()
        .args([
            "test",
            "--workspace",
            "--no-run",
            "--quiet",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(out.status.success(), "cargo test --no-run failed");
    let mut jobs = jobs_from_json(&String::from_utf8_lossy(&out.stdout))?;
    anyhow::ensure!(!jobs.is_empty(), "cargo test --no-run named no test binary");
    let workspace = std::env::current_dir()?;
    jobs.push(Job {
        label: "doctests".into(),
        program: PathBuf::from(cargo_bin()),
        args: ["test", "--workspace", "--doc", "--quiet"]
            .map(String::from)
            .to_vec(),
        dir: workspace,
    });
    let times = times_file();
    order(&mut jobs, &read_times(&times));
    let n = parallelism();
    println!("running {} test binaries, {n} at a time", jobs.len());

    let cpu_before = cpu_ticks();
    let queue = Arc::new(Mutex::new(jobs.into_iter()));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..n)
        .map(|_| {
            let (queue, outcomes) = (queue.clone(), outcomes.clone());
            std::thread::spawn(move || {
                loop {
                    let next = queue.lock().expect("queue").next();
                    let Some(job) = next else { break };
                    let outcome = run_one(&job);
                    outcomes.lock().expect("outcomes").push(outcome);
                }
            })
        })
        .collect();
    for w in workers {
        w.join()
            .map_err(|_| anyhow::anyhow!("a test worker panicked"))?;
    }
    let mut outcomes = std::mem::take(&mut *outcomes.lock().expect("outcomes"));
    outcomes.sort_by(|a, b| b.secs.total_cmp(&a.secs));

    let mut record = String::new();
    for o in &outcomes {
        record.push_str(&format!("{}\t{:.1}\n", o.label, o.secs));
    }
    let _ = fs::write(&times, record);

    if let (Some(a), Some(b)) = (cpu_before, cpu_ticks()) {
        println!("{}", cpu_line(a, b));
    }
    println!("slowest test binaries:");
    for o in outcomes.iter().take(15) {
        println!(
            "  {:<48} {:>7.1}s  {} passed, {} failed",
            o.label, o.secs, o.passed, o.failed
        );
    }
    let broken: Vec<_> = outcomes
        .iter()
        .filter(|o| !o.ok && o.failed == 0)
        .map(|o| o.label.as_str())
        .collect();
    if !broken.is_empty() {
        println!("binaries that failed without a failing test: {broken:?}");
    }
    let failures: Vec<_> = outcomes.iter().filter(|o| !o.ok).collect();
    if !failures.is_empty() {
        // Last, so the end of the log (all CI keeps) says which tests failed and why.
        println!("why they failed:");
        for o in failures {
            println!("  {}:", o.label);
            for l in &o.digest {
                println!("    {l}");
            }
        }
    }
    let passed = outcomes.iter().map(|o| o.passed).sum();
    // A binary that crashed or exited non-zero without reporting a failed test counts as one.
    let failed = outcomes
        .iter()
        .map(|o| if o.ok { o.failed } else { o.failed.max(1) })
        .sum();
    let failing = outcomes
        .iter()
        .flat_map(|o| o.failing.iter().cloned())
        .collect();
    Ok(Totals {
        passed,
        failed,
        failing,
    })
}

/// Runs one job with its output in a temporary file, then prints that output under a header.
fn run_one(job: &Job) -> Outcome {
    let started = Instant::now();
    let log = std::env::temp_dir().join(format!(
        "flotilla-test-{}-{}.log",
        std::process::id(),
        job.label.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ));
    let status = fs::File::create(&log).and_then(|f| {
        let err = f.try_clone()?;
        let mut cmd = if job.args.is_empty() {
            // A test executable, run as cargo runs it.
            let mut cmd = Command::new(&job.program);
            cmd.env("CARGO", cargo_bin())
                .env("CARGO_MANIFEST_DIR", &job.dir);
            cmd
        } else {
            // The doctests' cargo, without the variables cargo set for xtask (see
            // `testenv::cargo`): a build script watching them would rebuild its crate under the
            // feet of the test binaries running beside it ("crate `ring` required to be
            // available in rlib format").
            testenv::cargo::command()
        };
        cmd.args(&job.args).current_dir(&job.dir);
        cmd.stdin(Stdio::null()).stdout(f).stderr(err).status()
    });
    let secs = started.elapsed().as_secs_f64();
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(&log) {
        let _ = f.read_to_string(&mut text);
    }
    let _ = fs::remove_file(&log);
    let (mut passed, mut failed) = (0, 0);
    for line in text.lines() {
        if let Some((p, f)) = super::parse_test_result(line) {
            passed += p;
            failed += f;
        }
    }
    let ok = matches!(&status, Ok(s) if s.success());
    let (digest, failing) = if ok {
        (Vec::new(), Vec::new())
    } else {
        let mut d = failure_lines(&text, 40);
        d.push(format!("machine when it ended: {}", machine_state()));
        (d, failed_tests(&job.label, &text))
    };
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let verdict = match &status {
        Ok(s) if s.success() => "ok".to_string(),
        Ok(s) => format!("FAILED ({s})"),
        Err(e) => format!("FAILED to start: {e}"),
    };
    let _ = writeln!(w, "──── {} ({secs:.1}s, {verdict}) ────", job.label);
    let _ = w.write_all(text.as_bytes());
    if !text.ends_with('\n') && !text.is_empty() {
        let _ = writeln!(w);
    }
    let _ = w.flush();
    Outcome {
        label: job.label.clone(),
        secs,
        passed,
        failed,
        ok,
        digest,
        failing,
    }
}

/// The lines of a test binary's output that say why it failed, at most `cap`: the failing
/// tests' headers, panic messages (with the two lines after them), compiler errors and
/// signals. The log CI keeps is the end of the run, so these are repeated there.
fn failure_lines(text: &str, cap: usize) -> Vec<String> {
    const KEYS: [&str; 9] = [
        "---- ",
        "panicked at",
        "error:",
        "error[",
        "Couldn't compile",
        "signal:",
        "No space left",
        "Cannot allocate memory",
        "test result: FAILED",
    ];
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() && out.len() < cap {
        let line = lines[i];
        // A captured log line (an operator's tracing output printed by a failing test) can
        // carry any of the keys; the cap is kept for the test harness's own lines.
        // A compiler's `error:` starts its line; inside a line it is a server's log text
        // (redis-server's `... # Error accepting a client connection: error:0A...`).
        let key = |k: &&str| {
            if k.starts_with("error") {
                line.trim_start().starts_with(k)
            } else {
                line.contains(k)
            }
        };
        if KEYS.iter().any(key) && !is_log_line(line) {
            let after = if line.contains("panicked at") { 2 } else { 0 };
            for l in &lines[i..(i + 1 + after).min(lines.len())] {
                out.push(cut(l.trim_end(), 300));
            }
            i += 1 + after;
        } else {
            i += 1;
        }
    }
    out.truncate(cap);
    out
}

/// The machine's CPU time so far, `(busy, total)` in ticks, from the first line of
/// `/proc/stat` (idle and iowait are not busy).
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(stat.lines().next()?)
}

fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    (fields.next()? == "cpu").then_some(())?;
    let ticks: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

/// How busy the CPUs were between two [`cpu_ticks`] readings: whether the test phase was
/// bound by CPU (more binaries at once would not help) or by waiting (they would).
fn cpu_line(before: (u64, u64), after: (u64, u64)) -> String {
    let busy = after.0.saturating_sub(before.0) as f64;
    let total = after.1.saturating_sub(before.1).max(1) as f64;
    format!(
        "CPU busy during the test binaries: {:.0} %",
        100.0 * busy / total
    )
}

/// Whether `line` starts with an RFC 3339 timestamp, as tracing's and Kubernetes' log lines
/// do (`2026-11-27T11:08:40.885182Z DEBUG …`).
fn is_log_line(line: &str) -> bool {
    let b = line.trim_start().as_bytes();
    b.len() > 19
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
}

/// `text` cut at `max` bytes (on a character boundary), marked with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// One line per failing test of a binary's output: `label::test at file:line: message`
/// (the panic's first message line, cut at 240 characters); a binary that failed without a
/// failing test gets one line saying so.
fn failed_tests(label: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(test) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" stdout ----"))
        else {
            continue;
        };
        // The panic of this test: the first `panicked at` before the next header.
        let panic = lines[i + 1..]
            .iter()
            .take_while(|l| !l.starts_with("---- "))
            .position(|l| l.starts_with("thread '") && l.contains(" panicked at "));
        let why = panic.map_or_else(String::new, |p| {
            let at = lines[i + 1 + p]
                .split("panicked at ")
                .nth(1)
                .unwrap_or_default()
                .trim_end_matches(':');
            let message = cut(
                lines.get(i + 2 + p).copied().unwrap_or_default().trim(),
                240,
            );
            format!(" at {at}: {message}")
        });
        out.push(format!("{label}::{test}{why}"));
    }
    if out.is_empty() {
        out.push(format!(
            "{label}: failed without a failing test (crashed, or did not build)"
        ));
    }
    out
}

/// Free disk under the target dir and the temp dir, available memory and load: what a
/// failure nobody can reproduce is most often about.
fn machine_state() -> String {
    let free = |dir: &Path| -> String {
        Command::new("df")
            .args(["-Pk", &dir.to_string_lossy()])
            .output()
            .ok()
            .and_then(|o| {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                let kib: u64 = text
                    .lines()
                    .nth(1)?
                    .split_whitespace()
                    .nth(3)?
                    .parse()
                    .ok()?;
                Some(format!("{:.1} GiB", kib as f64 / 1048576.0))
            })
            .unwrap_or_else(|| "?".into())
    };
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let mem = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(format!("{:.1} GiB", kib as f64 / 1048576.0))
        })
        .unwrap_or_else(|| "?".into());
    let load = fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    format!(
        "disk free {} (target dir), {} (temp dir); memory available {mem}; load {load}",
        free(&target),
        free(&std::env::temp_dir())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/kit#0.1.0","manifest_path":"/w/crates/kit/Cargo.toml","target":{"kind":["lib"],"name":"kit"},"profile":{"test":true},"executable":"/t/debug/deps/kit-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/crates/kit#0.1.0","manifest_path":"/w/crates/kit/Cargo.toml","target":{"kind":["lib"],"name":"kit"},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","manifest_path":"/w/crates/redis/Cargo.toml","target":{"kind":["test"],"name":"cluster_lifecycle"},"profile":{"test":true},"executable":"/t/debug/deps/cluster_lifecycle-2"}
{"reason":"compiler-artifact","manifest_path":"/w/crates/redis/Cargo.toml","target":{"kind":["bin"],"name":"kubectl-redis"},"profile":{"test":true},"executable":"/t/debug/deps/kubectl_redis-3"}
{"reason":"build-finished","success":true}"#;

    #[test]
    fn a_failure_digest_keeps_the_headers_panics_and_errors_and_drops_the_logs() {
        let out = "running 2 tests\n2026-01-01T00:00:00Z INFO a log line\n\
                   2026-01-01T00:00:01.5Z DEBUG op: retry error: connection refused\n\
                   failures:\n\n---- a::b stdout ----\nINFO noise\n\
                   thread 'a::b' panicked at src/a.rs:3:5:\nassertion failed: x\nleft: 1\n\
                   right: 2\n\nerror: linking with `cc` failed: signal: 9 (SIGKILL)\n\
                   test result: FAILED. 1 passed; 1 failed; 0 ignored\n";
        assert_eq!(
            failure_lines(out, 40),
            [
                "---- a::b stdout ----",
                "thread 'a::b' panicked at src/a.rs:3:5:",
                "assertion failed: x",
                "left: 1",
                "error: linking with `cc` failed: signal: 9 (SIGKILL)",
                "test result: FAILED. 1 passed; 1 failed; 0 ignored",
            ]
        );
        assert_eq!(failure_lines(out, 2).len(), 2);
    }

    #[test]
    fn failing_tests_are_named_with_where_and_why_they_panicked() {
        let out = "failures:\n\n---- a_b stdout ----\nINFO noise\n\
                   thread 'a_b' (12) panicked at tests/a.rs:3:5:\nassertion failed: x\n\
                   stack backtrace:\n---- c_d stdout ----\nno panic line here\n\
                   ---- e stdout ----\n\
                   2026-01-01T00:00:00Z WARN thread 'x' panicked at nothing:\n\
                   thread 'e' panicked at src/e.rs:9:1:\nboom\n";
        assert_eq!(
            failed_tests("redis::backup", out),
            [
                "redis::backup::a_b at tests/a.rs:3:5: assertion failed: x",
                "redis::backup::c_d",
                "redis::backup::e at src/e.rs:9:1: boom",
            ]
        );
        assert_eq!(
            failed_tests("kit", "error: could not compile"),
            ["kit: failed without a failing test (crashed, or did not build)"]
        );
    }

    #[test]
    fn a_server_log_line_with_error_in_it_is_not_a_failure_line() {
        let out = "1:M 27 Nov 2026 17:09:53.637 # Error accepting a client connection: error:0A00041B\n\
                   error: linking failed\n";
        assert_eq!(failure_lines(out, 40), ["error: linking failed"]);
    }

    #[test]
    fn cpu_busy_is_read_from_proc_stat() {
        let a = parse_cpu_line("cpu  100 0 100 700 100 0 0 0 0 0").unwrap();
        assert_eq!(a, (200, 1000));
        let b = parse_cpu_line("cpu  300 0 200 700 200 0 0 0 0 0").unwrap();
        assert_eq!(cpu_line(a, b), "CPU busy during the test binaries: 75 %");
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4"), None);
    }

    #[test]
    fn test_executables_are_read_from_cargos_json() {
        let jobs = jobs_from_json(JSON).unwrap();
        let labels: Vec<_> = jobs.iter().map(|j| j.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "kit::lib",
                "redis::cluster_lifecycle",
                "redis::bin kubectl_redis"
            ]
        );
        assert_eq!(jobs[1].dir, PathBuf::from("/w/crates/redis"));
        assert_eq!(
            jobs[1].program,
            PathBuf::from("/t/debug/deps/cluster_lifecycle-2")
        );
    }

    #[test]
    fn the_longest_binaries_of_the_last_run_go_first_and_new_ones_before_them() {
        let mut jobs = jobs_from_json(JSON).unwrap();
        let previous = HashMap::from([
            ("kit::lib".to_string(), 2.0),
            ("redis::cluster_lifecycle".to_string(), 300.0),
        ]);
        order(&mut jobs, &previous);
        let labels: Vec<_> = jobs.iter().map(|j| j.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "redis::bin kubectl_redis",
                "redis::cluster_lifecycle",
                "kit::lib"
            ]
        );
    }

    #[test]
    fn recorded_times_round_trip() {
        let dir = std::env::temp_dir().join(format!("testrun-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("times.tsv");
        fs::write(
            &f,
            "redis::bin kubectl_redis\t1.5\nkit::lib\t20.0\nbroken line\n",
        )
        .unwrap();
        let t = read_times(&f);
        assert_eq!(t.get("redis::bin kubectl_redis"), Some(&1.5));
        assert_eq!(t.get("kit::lib"), Some(&20.0));
        assert_eq!(t.len(), 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}
