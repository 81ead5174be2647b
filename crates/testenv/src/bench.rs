//! Benchmark support (for examples, never for tests): an operator binary run as its own
//! process under a ServiceAccount, with its API requests counted on the way and its CPU time
//! and peak memory read from `/proc`, so operators written in any language are measured the
//! same way; the RBAC rules of an upstream manifest; medians and ratios for the report.
//!
//! Contract:
//! - [`Counted`] is a proxy in front of the plane's API server that only forwards and counts
//!   ([`crate::chaos::FaultProxy`] with no faults): every client that should be counted gets
//!   a kubeconfig pointing at it ([`Counted::kubeconfig`]).
//! - [`Operator::spawn`] starts a binary with `KUBECONFIG` set, its output in a log file;
//!   [`Operator::cpu_seconds`] and [`Operator::peak_rss_kib`] read `/proc/<pid>` (all threads,
//!   user + system time; `VmHWM`). [`Operator::stop`] sends SIGTERM, then SIGKILL.
//! - [`grant_rules`] gives a ServiceAccount the rules of a ClusterRole manifest (a Helm
//!   template is fine: lines with `{{` are dropped before parsing), bound cluster-wide.
//! - [`median`] and [`ratio`] are pure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::chaos::{FaultProxy, Plan, Rates};
use crate::rbac::ClusterCleanup;

/// A counting proxy in front of the API server (see the module docs).
pub struct Counted {
    proxy: FaultProxy,
}

impl Counted {
    /// Starts the proxy.
    pub async fn start() -> anyhow::Result<Self> {
        let proxy = FaultProxy::start(Plan {
            seed: 0,
            rates: Rates::none(),
        })
        .await?;
        Ok(Self { proxy })
    }

    /// Writes a kubeconfig for `token` through the proxy to `path`.
    pub fn kubeconfig(&self, path: &Path, token: &str, namespace: &str) -> anyhow::Result<()> {
        self.proxy.kubeconfig(path, token, namespace)
    }

    /// A client for `token` through the proxy (default namespace `namespace`).
    pub async fn client(&self, token: &str, namespace: &str) -> anyhow::Result<Client> {
        let dir = std::env::temp_dir().join(format!("flotilla-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("client-{namespace}.kubeconfig"));
        self.kubeconfig(&path, token, namespace)?;
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// The requests counted so far (reset it to start a new count).
    pub fn counts(&self) -> crate::RequestCounts {
        self.proxy.request_counts()
    }
}

/// An operator binary running as a child process (see the module docs).
pub struct Operator {
    /// A short name for reports.
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Operator {
    /// Starts `binary args…` with `KUBECONFIG=kubeconfig` and `env`, output to `log`.
    pub fn spawn(
        name: &str,
        binary: &Path,
        args: &[String],
        env: &[(String, String)],
        kubeconfig: &Path,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let file = std::fs::File::create(log)?;
        let child = Command::new(binary)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {name} ({}): {e}", binary.display()))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where its output goes.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Fails when the process has exited (with the end of its log).
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            anyhow::bail!("{} exited ({status}):\n{}", self.name, tail.join("\n"));
        }
        Ok(())
    }

    /// CPU seconds (user + system, every thread) it has used so far.
    pub fn cpu_seconds(&self) -> f64 {
        proc_cpu_seconds(&format!("/proc/{}/stat", self.pid()))
    }

    /// Its peak resident set size (VmHWM) in KiB so far.
    pub fn peak_rss_kib(&self) -> u64 {
        proc_status_kib(&format!("/proc/{}/status", self.pid()), "VmHWM:")
    }

    /// Its resident set size now (VmRSS) in KiB.
    pub fn rss_kib(&self) -> u64 {
        proc_status_kib(&format!("/proc/{}/status", self.pid()), "VmRSS:")
    }

    /// SIGTERM, then SIGKILL after 15 s.
    pub fn stop(&mut self) {
        crate::process::stop_child(&mut self.child, Duration::from_secs(15));
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU seconds (utime + stime) from a `/proc/<pid>/stat` file; 0 when unreadable.
pub fn proc_cpu_seconds(stat_path: &str) -> f64 {
    let stat = std::fs::read_to_string(stat_path).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state(0) … utime(11) stime(12), in clock ticks (100 Hz on Linux).
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn proc_status_kib(path: &str, key: &str) -> u64 {
    let status = std::fs::read_to_string(path).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The `rules` of the ClusterRole in `manifest` (YAML; lines holding a Helm `{{ }}` action are
/// dropped first, so a chart's template works as shipped).
pub fn rules_of(manifest: &str) -> anyhow::Result<Vec<PolicyRule>> {
    let plain: String = manifest
        .lines()
        .filter(|l| !l.contains("{{"))
        .map(|l| format!("{l}\n"))
        .collect();
    for doc in serde_yaml::Deserializer::from_str(&plain) {
        let value: serde_yaml::Value = serde::Deserialize::deserialize(doc)?;
        if value.get("kind").and_then(|k| k.as_str()) == Some("ClusterRole") {
            let rules = value.get("rules").cloned().unwrap_or_default();
            return Ok(serde_yaml::from_value(rules)?);
        }
    }
    anyhow::bail!("no ClusterRole in the manifest")
}

/// Creates ServiceAccount `namespace/sa` (if missing), ClusterRole `role` with `rules`, and a
/// ClusterRoleBinding `<role>-<namespace>` between them; the guard deletes the binding.
pub async fn grant_rules(
    admin: &Client,
    namespace: &str,
    sa: &str,
    role: &str,
    rules: Vec<PolicyRule>,
) -> anyhow::Result<ClusterCleanup> {
    let pp = PatchParams::apply("flotilla-bench").force();
    let account: ServiceAccount = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": sa, "namespace": namespace},
    }))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .patch(sa, &pp, &Patch::Apply(&account))
        .await?;
    let cluster_role = ClusterRole {
        metadata: kube::api::ObjectMeta {
            name: Some(role.to_owned()),
            ..Default::default()
        },
        rules: Some(rules),
        ..Default::default()
    };
    let mut body = serde_json::to_value(&cluster_role)?;
    body["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
    body["kind"] = "ClusterRole".into();
    Api::<ClusterRole>::all(admin.clone())
        .patch(role, &pp, &Patch::Apply(&body))
        .await?;
    let binding_name = format!("{role}-{namespace}");
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
    });
    Api::<ClusterRoleBinding>::all(admin.clone())
        .patch(&binding_name, &pp, &Patch::Apply(&binding))
        .await?;
    Ok(ClusterCleanup(binding_name))
}

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// `value / reference`, NaN when the reference is zero.
pub fn ratio(value: f64, reference: f64) -> f64 {
    if reference == 0.0 {
        f64::NAN
    } else {
        value / reference
    }
}

/// The 1-, 5- and 15-minute load averages of the machine.
pub fn load_average() -> (f64, f64, f64) {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = text
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    match v.as_slice() {
        [a, b, c] => (*a, *b, *c),
        _ => (f64::NAN, f64::NAN, f64::NAN),
    }
}

/// Polls `done` every `every` until it is true or `timeout` passed (then an error naming
/// `what`); returns how long it took. For benchmark harnesses that sample a figure.
pub async fn poll_until<F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut done: F,
) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    loop {
        if done().await? {
            return Ok(start.elapsed());
        }
        anyhow::ensure!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        tokio::time::sleep(every).await; // benchmark sampling interval
    }
}

/// Builds `--bin bin` of `package` with the caller's profile (release unless built with
/// debug assertions) and returns the executable's path.
pub fn build_binary(package: &str, bin: &str) -> anyhow::Result<PathBuf> {
    let mut args = vec!["-p", package, "--bin", bin];
    if !cfg!(debug_assertions) {
        args.push("--release");
    }
    crate::cargo::build_executable(&args, bin)
}

/// Waits until `GET http://<addr>/readyz` answers 200 (an operator's probe endpoint), while
/// `operator` runs.
pub async fn wait_ready(
    operator: &mut Operator,
    addr: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()?;
    let start = Instant::now();
    loop {
        operator.check_alive()?;
        let answer = http.get(format!("http://{addr}/readyz")).send().await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < timeout,
            "{} not ready within {timeout:?}; log: {}",
            operator.name,
            operator.log().display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await; // polling a condition with a deadline
    }
}

/// How a figure is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Seconds, `12.3s`.
    Seconds,
    /// KiB, printed as `12.3 MiB`.
    Kib,
    /// A count, `123` (or `1.5` when not whole).
    Count,
}

impl Unit {
    fn show(self, v: f64) -> String {
        match self {
            Unit::Seconds => format!("{v:.1}s"),
            Unit::Kib => format!("{:.1} MiB", v / 1024.0),
            Unit::Count if v.fract() == 0.0 => format!("{v:.0}"),
            Unit::Count => format!("{v:.2}"),
        }
    }
}

/// One cell: a value, and its ratio to the row's reference column (if it has one).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cell {
    /// The measured value.
    pub value: Option<f64>,
    /// `value / reference` measured in the same run (or the median of such ratios).
    pub ratio: Option<f64>,
}

/// One figure across the systems measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What is measured.
    pub name: String,
    /// How it prints.
    pub unit: Unit,
    /// One per column.
    pub cells: Vec<Cell>,
}

/// Figures of one run (or medians of several) for several systems, with ratios to a
/// reference column per row: printed as a fixed-width table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Column headings (the systems).
    pub columns: Vec<String>,
    /// The figures.
    pub rows: Vec<Row>,
}

impl Table {
    /// A table over `columns`.
    pub fn new(columns: &[&str]) -> Self {
        Self {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; `reference` is the column the others are divided by (measured in this
    /// same run), if any.
    pub fn row(
        &mut self,
        name: &str,
        unit: Unit,
        values: &[Option<f64>],
        reference: Option<usize>,
    ) {
        let base = reference.and_then(|r| values.get(r).copied().flatten());
        let cells = values
            .iter()
            .enumerate()
            .map(|(i, v)| Cell {
                value: *v,
                ratio: match (v, base) {
                    (Some(v), Some(b)) if Some(i) != reference => Some(ratio(*v, b)),
                    _ => None,
                },
            })
            .collect();
        self.rows.push(Row {
            name: name.to_owned(),
            unit,
            cells,
        });
    }

    /// The cell-wise medians of `tables` (same shape): values and ratios each the median of
    /// the runs' own.
    pub fn median(tables: &[Table]) -> Table {
        let Some(first) = tables.first() else {
            return Table::default();
        };
        let mut out = Table {
            columns: first.columns.clone(),
            rows: Vec::new(),
        };
        for (r, row) in first.rows.iter().enumerate() {
            let cells = (0..row.cells.len())
                .map(|c| {
                    let pick = |f: fn(&Cell) -> Option<f64>| {
                        let v: Vec<f64> = tables
                            .iter()
                            .filter_map(|t| t.rows.get(r)?.cells.get(c).and_then(f))
                            .collect();
                        (!v.is_empty()).then(|| median(&v))
                    };
                    Cell {
                        value: pick(|c| c.value),
                        ratio: pick(|c| c.ratio),
                    }
                })
                .collect();
            out.rows.push(Row {
                name: row.name.clone(),
                unit: row.unit,
                cells,
            });
        }
        out
    }

    /// The table as text, one line per row, `value (ratio x)` per cell.
    pub fn render(&self) -> String {
        let width = 22;
        let name_width = self
            .rows
            .iter()
            .map(|r| r.name.len())
            .max()
            .unwrap_or(0)
            .max(8);
        let mut out = format!("  {:<name_width$}", "");
        for c in &self.columns {
            out.push_str(&format!(" {c:>width$}"));
        }
        out.push('\n');
        for row in &self.rows {
            out.push_str(&format!("  {:<name_width$}", row.name));
            for cell in &row.cells {
                let text = match (cell.value, cell.ratio) {
                    (None, _) => "-".to_owned(),
                    (Some(v), None) => row.unit.show(v),
                    (Some(v), Some(r)) => format!("{} ({r:.2}x)", row.unit.show(v)),
                };
                out.push_str(&format!(" {text:>width$}"));
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(ratio(3.0, 2.0), 1.5);
        assert!(ratio(1.0, 0.0).is_nan());
    }

    #[test]
    fn tables_carry_same_run_ratios_and_their_medians() {
        let run = |floor: f64, op: f64| {
            let mut t = Table::new(&["floor", "op"]);
            t.row("time", Unit::Seconds, &[Some(floor), Some(op)], Some(0));
            t
        };
        let t = run(10.0, 15.0);
        assert_eq!(t.rows[0].cells[1].ratio, Some(1.5));
        assert_eq!(t.rows[0].cells[0].ratio, None);
        let m = Table::median(&[run(10.0, 15.0), run(20.0, 20.0), run(30.0, 60.0)]);
        assert_eq!(m.rows[0].cells[0].value, Some(20.0));
        assert_eq!(m.rows[0].cells[1].value, Some(20.0));
        assert_eq!(
            m.rows[0].cells[1].ratio,
            Some(1.5),
            "the median of 1.5, 1.0, 2.0"
        );
        assert!(m.render().contains("20.0s (1.50x)"), "{}", m.render());
    }

    #[test]
    fn rules_come_from_a_helm_template_too() {
        let chart = r#"{{- if .Values.rbac.create -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "x.fullname" . }}-manager
  labels:
    {{- include "x.labels" . | nindent 4 }}
rules:
  # pods
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list]
{{- end }}
"#;
        let rules = rules_of(chart).expect("rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["pods".to_owned()][..])
        );
    }
}
