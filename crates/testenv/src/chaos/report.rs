//! The soak table: many [`RunReport`]s summed up per scenario (pure).
//!
//! Contract: [`table`] groups runs by operator and scenario (baseline runs are counted apart
//! and contribute no faults) and prints, as Markdown, one row per scenario with the runs,
//! the faults injected, kills and self-exits, invariant violations, the time to converge after
//! the last fault (p50/p95 over the runs), and the highest request rates seen; then the
//! faults by kind. [`percentile`] is nearest-rank.

use std::collections::BTreeMap;

use super::scenario::RunReport;

/// Nearest-rank percentile `p` (0–100) of `values`; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

#[derive(Default)]
struct Row {
    runs: usize,
    baselines: usize,
    faults: BTreeMap<String, u64>,
    kills: u64,
    exits: u64,
    violations: u64,
    failed_runs: Vec<u64>,
    converge: Vec<f64>,
    never: usize,
    peak: f64,
    quiet: f64,
    requests: u64,
}

/// The soak table of `runs` (Markdown).
pub fn table(runs: &[RunReport]) -> String {
    let mut rows: BTreeMap<(String, String), Row> = BTreeMap::new();
    for r in runs {
        let row = rows
            .entry((r.operator.clone(), r.scenario.clone()))
            .or_default();
        row.peak = row.peak.max(r.peak_rate);
        row.quiet = row.quiet.max(r.quiet_rate);
        if !r.violations.is_empty() {
            row.violations += r.violations.len() as u64;
            row.failed_runs.push(r.seed.unwrap_or(0));
        }
        let Some(_) = r.seed else {
            row.baselines += 1;
            continue;
        };
        row.runs += 1;
        row.kills += u64::from(r.kills);
        row.exits += u64::from(r.exits);
        row.requests += r.requests;
        for (k, n) in &r.faults {
            *row.faults.entry(k.clone()).or_default() += n;
        }
        match r.converge_secs {
            Some(s) => row.converge.push(s),
            None => row.never += 1,
        }
    }
    let mut out = String::new();
    out.push_str("| operator | scenario | runs (+baseline) | requests | faults | kills | self-exits | violations | converge p50 | converge p95 | peak req/s (5 s) | quiet req/s |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let secs = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s"));
    for ((op, sc), r) in &rows {
        let faults: u64 = r.faults.values().sum();
        let never = if r.never > 0 {
            format!(" ({} never)", r.never)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "| {op} | {sc} | {} (+{}) | {} | {faults} | {} | {} | {}{} | {} | {}{never} | {:.1} | {:.2} |\n",
            r.runs,
            r.baselines,
            r.requests,
            r.kills,
            r.exits,
            r.violations,
            if r.failed_runs.is_empty() {
                String::new()
            } else {
                format!(" (seeds {:?})", r.failed_runs)
            },
            secs(percentile(&r.converge, 50.0)),
            secs(percentile(&r.converge, 95.0)),
            r.peak,
            r.quiet,
        ));
    }
    let kinds: std::collections::BTreeSet<&String> =
        rows.values().flat_map(|r| r.faults.keys()).collect();
    if !kinds.is_empty() {
        out.push_str("\nfaults by kind:\n\n| operator | scenario |");
        for k in &kinds {
            out.push_str(&format!(" {k} |"));
        }
        out.push_str("\n|---|---|");
        out.push_str(&"---|".repeat(kinds.len()));
        out.push('\n');
        for ((op, sc), r) in &rows {
            out.push_str(&format!("| {op} | {sc} |"));
            for k in &kinds {
                out.push_str(&format!(" {} |", r.faults.get(*k).copied().unwrap_or(0)));
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(10.0));
        assert_eq!(percentile(&v, 95.0), Some(19.0));
        assert_eq!(percentile(&v, 100.0), Some(20.0));
        assert_eq!(percentile(&[3.0], 95.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    fn run(seed: Option<u64>, converge: Option<f64>, violations: usize) -> RunReport {
        RunReport {
            operator: "redroid".into(),
            scenario: "lifecycle".into(),
            seed,
            faults: BTreeMap::from([("conflict_409".into(), 3), ("watch_cut".into(), 2)]),
            kills: 4,
            converge_secs: converge,
            violations: (0..violations)
                .map(|i| super::super::scenario::Violation {
                    at: 1.0,
                    invariant: format!("v{i}"),
                    detail: String::new(),
                    count: 1,
                })
                .collect(),
            ..RunReport::default()
        }
    }

    #[test]
    fn rows_sum_runs_and_count_baselines_apart() {
        let t = table(&[
            run(None, Some(0.5), 0),
            run(Some(1), Some(2.0), 0),
            run(Some(2), Some(4.0), 1),
            run(Some(3), None, 0),
        ]);
        let row = t
            .lines()
            .find(|l| l.starts_with("| redroid | lifecycle"))
            .expect("row");
        assert!(row.contains("| 3 (+1) |"), "{row}");
        assert!(
            row.contains("| 15 | 12 |"),
            "faults and kills of seeded runs only: {row}"
        );
        assert!(row.contains("1 (seeds [2])"), "{row}");
        assert!(row.contains("| 2.0 s | 4.0 s (1 never) |"), "{row}");
        assert!(t.contains("| conflict_409 | watch_cut |"), "{t}");
        assert!(t.contains("| redroid | lifecycle | 9 | 6 |"), "{t}");
    }
}
