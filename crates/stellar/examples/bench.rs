//! stellar benchmark (not a test): N ConfigMaps (default 1000) delivered by one BindingPolicy
//! to 3 WECs over real separate spaces, with the `stellar` controller-manager and one agent per
//! WEC as processes of their own (release build).
//!
//! ```sh
//! cargo build --release -p stellar --bin stellar --example bench
//! target/release/examples/bench                  # 1000 objects, 100 changes, one per ManifestWork
//! STELLAR_BENCH_OBJECTS=300 STELLAR_BENCH_CHANGES=50 STELLAR_BENCH_WRAP=50 target/release/examples/bench
//! ```
//!
//! The `stellar` binary next to the example's directory is used (built by the same command,
//! so with the same dependency features); without it, it is built.
//!
//! Reports: time from policy creation until every object is on every WEC; per change (one
//! ConfigMap's data edited in the WDS) the time until the new data is on every WEC, p50/p99;
//! RSS and CPU seconds of each stellar process per phase; API requests per space (the
//! apiservers' `apiserver_request_total`, so every client of a space counts, the benchmark's
//! own requests and each WEC's kube-controller-manager included); and the writes per minute
//! once converged (POST/PUT/PATCH/DELETE, leases and events excluded). Needs the spaces
//! `wds1`, `its1`, `wec1..3` (started here when absent; `cargo xtask spaces down` stops them).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use testenv::bench::{Operator, build_binary, load_average};
use testenv::spaces::{self, Topology};
use tokio::sync::Notify;

const WECS: [&str; 3] = ["wec1", "wec2", "wec3"];
const NS: &str = "stellar-bench";

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

// name → data["v"] of the benchmark's ConfigMaps on one WEC, kept by a watch.
type Seen = Arc<Mutex<HashMap<String, String>>>;

fn watch_wec(client: Client, seen: Seen, changed: Arc<Notify>) {
    tokio::spawn(async move {
        let api: Api<ConfigMap> = Api::namespaced(client, NS);
        let stream = watcher(api, watcher::Config::default().labels("stellar-bench=1"))
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(cm) = ev {
                let v = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("v").cloned())
                    .unwrap_or_default();
                seen.lock().expect("seen").insert(cm.name_any(), v);
                changed.notify_waiters();
            }
        }
    });
}

// Sum of apiserver_request_total by verb class.
#[derive(Default, Clone, Copy)]
struct Requests {
    all: f64,
    writes: f64, // POST/PUT/PATCH/DELETE, leases and events excluded
}

async fn requests(client: &Client) -> anyhow::Result<Requests> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let mut r = Requests::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let v: f64 = value.trim().parse().unwrap_or(0.0);
        r.all += v;
        let write = ["POST", "PUT", "PATCH", "DELETE", "APPLY"]
            .iter()
            .any(|w| labels.contains(&format!("verb=\"{w}\"")));
        let noise =
            labels.contains("resource=\"leases\"") || labels.contains("resource=\"events\"");
        if write && !noise {
            r.writes += v;
        }
    }
    Ok(r)
}

async fn all_requests(
    clients: &BTreeMap<String, Client>,
) -> anyhow::Result<BTreeMap<String, Requests>> {
    let mut out = BTreeMap::new();
    for (name, c) in clients {
        out.insert(name.clone(), requests(c).await?);
    }
    Ok(out)
}

fn delta(
    a: &BTreeMap<String, Requests>,
    b: &BTreeMap<String, Requests>,
) -> BTreeMap<String, Requests> {
    b.iter()
        .map(|(k, v)| {
            let p = a.get(k).copied().unwrap_or_default();
            (
                k.clone(),
                Requests {
                    all: v.all - p.all,
                    writes: v.writes - p.writes,
                },
            )
        })
        .collect()
}

fn print_requests(phase: &str, d: &BTreeMap<String, Requests>) {
    let cells: Vec<String> = d
        .iter()
        .map(|(k, r)| format!("{k} {:.0} ({:.0} writes)", r.all, r.writes))
        .collect();
    println!("  API requests, {phase}: {}", cells.join(", "));
}

fn usage(procs: &[Operator], phase: &str, cpu_before: &[f64]) -> Vec<f64> {
    let now: Vec<f64> = procs.iter().map(Operator::cpu_seconds).collect();
    let cells: Vec<String> = procs
        .iter()
        .zip(&now)
        .zip(cpu_before)
        .map(|((p, c), b)| {
            format!(
                "{} {} MiB RSS (peak {}), {:.1} s CPU",
                p.name,
                p.rss_kib() / 1024,
                p.peak_rss_kib() / 1024,
                c - b
            )
        })
        .collect();
    println!("  {phase}: {}", cells.join("; "));
    now
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn wait_all(
    what: &str,
    seens: &[Seen],
    changed: &Notify,
    timeout: Duration,
    done: impl Fn(&HashMap<String, String>) -> bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        let notified = changed.notified();
        if seens.iter().all(|s| done(&s.lock().expect("seen"))) {
            return Ok(start.elapsed());
        }
        anyhow::ensure!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        // Wake on the next WEC event, or re-check after 1 s.
        let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n = env_usize("STELLAR_BENCH_OBJECTS", 1000);
    let changes = env_usize("STELLAR_BENCH_CHANGES", 100);
    let wrap = env_usize("STELLAR_BENCH_WRAP", 1);
    let l0 = load_average();
    println!(
        "stellar bench: {n} ConfigMaps x {} WECs, {changes} changes, --max-num-wrapped {wrap}; load average {:.1} {:.1} {:.1}, {} CPUs",
        WECS.len(),
        l0.0,
        l0.1,
        l0.2,
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    let up = spaces::up(&Topology::standard(WECS.len()))?;
    println!(
        "  spaces: {} in {:.1?}",
        if up.reused { "reused" } else { "started" },
        up.took
    );
    let sibling = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("stellar"));
    let bin: PathBuf = match sibling {
        Some(b) if b.exists() => b,
        _ => build_binary("stellar", "stellar")?,
    };
    println!("  stellar binary: {}", bin.display());
    let dir = std::env::temp_dir().join(format!("stellar-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kc = |s: &str| spaces::kubeconfig(s).display().to_string();

    let mut clients = BTreeMap::new();
    for s in ["wds1", "its1"].into_iter().chain(WECS) {
        clients.insert(s.to_owned(), spaces::client(s).await?);
    }
    let wds = clients["wds1"].clone();

    // The components, each its own process.
    let mut procs = vec![Operator::spawn(
        "controller-manager",
        &bin,
        &[
            "controller-manager".into(),
            "--wds-kubeconfig".into(),
            kc("wds1"),
            "--its-kubeconfig".into(),
            kc("its1"),
            "--max-num-wrapped".into(),
            wrap.to_string(),
        ],
        &[("RUST_LOG".into(), "stellar=warn".into())],
        &spaces::kubeconfig("wds1"),
        &dir.join("controller-manager.log"),
    )?];
    // Wait for the CRDs the controller-manager installs.
    let policies = kube::api::Api::<kube::api::DynamicObject>::all_with(
        wds.clone(),
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "control.kubestellar.io",
            "v1alpha1",
            "BindingPolicy",
        )),
    );
    testenv::bench::poll_until(
        "the control CRDs",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || {
            let p = policies.clone();
            async move { Ok(p.list(&ListParams::default().limit(1)).await.is_ok()) }
        },
    )
    .await?;

    for w in WECS {
        // Retried until the controller-manager has installed the ITS's CRDs.
        testenv::bench::poll_until(
            &format!("registering {w}"),
            Duration::from_secs(120),
            Duration::from_millis(500),
            || {
                let bin = bin.clone();
                let its = kc("its1");
                async move {
                    let out = std::process::Command::new(&bin)
                        .args(["register", "--its-kubeconfig", &its, "--cluster-name", w])
                        .args([
                            "--label",
                            "location-group=edge",
                            "--label",
                            &format!("name={w}"),
                        ])
                        .output()?;
                    Ok(out.status.success())
                }
            },
        )
        .await?;
        procs.push(Operator::spawn(
            &format!("agent-{w}"),
            &bin,
            &[
                "agent".into(),
                "--its-kubeconfig".into(),
                kc("its1"),
                "--wec-kubeconfig".into(),
                kc(w),
                "--cluster-name".into(),
                w.into(),
            ],
            &[("RUST_LOG".into(), "stellar=warn".into())],
            &spaces::kubeconfig(w),
            &dir.join(format!("agent-{w}.log")),
        )?);
    }
    // Watches on every WEC.
    let changed = Arc::new(Notify::new());
    let mut seens = Vec::new();
    for w in WECS {
        let s: Seen = Arc::default();
        watch_wec(clients[w].clone(), s.clone(), changed.clone());
        seens.push(s);
    }

    // The objects, then the policy.
    let nsapi: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(wds.clone());
    let _ = nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}}))?,
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), NS);
    let t = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let cms = cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i:04}"), "labels": {"stellar-bench": "1"}},
                    "data": {"v": "0"}}))?;
                match cms.create(&PostParams::default(), &cm).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    println!("  created {n} ConfigMaps in the WDS in {:.1?}", t.elapsed());

    let cpu0 = vec![0.0; procs.len()];
    let cpu = usage(&procs, "idle before the policy", &cpu0);
    let r0 = all_requests(&clients).await?;
    let t = Instant::now();
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
                "metadata": {"name": "stellar-bench"},
                "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                         "downsync": [{"resources": ["namespaces"], "objectNames": [NS]},
                                      {"resources": ["configmaps"], "namespaces": [NS],
                                       "objectSelectors": [{"matchLabels": {"stellar-bench": "1"}}]}]}}))?,
        )
        .await?;
    wait_all(
        "full delivery",
        &seens,
        &changed,
        Duration::from_secs(1800),
        |s| s.len() >= n,
    )
    .await?;
    let full = t.elapsed();
    println!(
        "  full delivery of {n} objects to {} WECs: {:.1} s",
        WECS.len(),
        full.as_secs_f64()
    );
    let r1 = all_requests(&clients).await?;
    print_requests("full delivery", &delta(&r0, &r1));
    let cpu = usage(&procs, "full delivery", &cpu);

    // Changes, one at a time.
    let mut lat = Vec::new();
    for k in 0..changes {
        let name = format!("cm-{:04}", (k * 7) % n);
        let value = format!("change-{k}");
        let t = Instant::now();
        cms.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": value}})),
        )
        .await?;
        wait_all(
            "a change",
            &seens,
            &changed,
            Duration::from_secs(300),
            |s| s.get(&name) == Some(&value),
        )
        .await?;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let r2 = all_requests(&clients).await?;
    let mut sorted = lat.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "  change to applied on every WEC ({} changes): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        lat.len(),
        percentile(&sorted, 50.0),
        percentile(&sorted, 99.0),
        sorted.last().copied().unwrap_or(f64::NAN)
    );
    print_requests("changes", &delta(&r1, &r2));
    let cpu = usage(&procs, "changes", &cpu);

    // Converged: one quiet minute (the agents' 60 s resync falls inside it).
    let settle = Duration::from_secs(10);
    tokio::time::sleep(settle).await; // let the last change's status reports land
    let r3 = all_requests(&clients).await?;
    let cpu = usage(&procs, "settling", &cpu);
    tokio::time::sleep(Duration::from_secs(60)).await; // the measurement window
    let r4 = all_requests(&clients).await?;
    let idle = delta(&r3, &r4);
    print_requests("one converged minute", &idle);
    println!(
        "  writes per minute once converged (all spaces, leases and events excluded): {:.0}",
        idle.values().map(|r| r.writes).sum::<f64>()
    );
    let cpu = usage(&procs, "one converged minute", &cpu);

    // Cleanup.
    let t = Instant::now();
    policies
        .delete("stellar-bench", &DeleteParams::default())
        .await?;
    testenv::bench::poll_until(
        "every WEC cleaned",
        Duration::from_secs(1800),
        Duration::from_secs(1),
        || {
            let clients = clients.clone();
            async move {
                for w in WECS {
                    let l = Api::<ConfigMap>::namespaced(clients[w].clone(), NS)
                        .list_metadata(&ListParams::default().labels("stellar-bench=1").limit(1))
                        .await;
                    if l.map(|l| !l.items.is_empty()).unwrap_or(false) {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        },
    )
    .await?;
    println!(
        "  policy deleted → every WEC cleaned: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    usage(&procs, "cleanup", &cpu);
    let _ = nsapi.delete(NS, &DeleteParams::default()).await;
    let l1 = load_average();
    println!(
        "  load average at the end {:.1} {:.1} {:.1}; logs in {}",
        l1.0,
        l1.1,
        l1.2,
        dir.display()
    );
    for p in &mut procs {
        p.check_alive()?;
        p.stop();
    }
    Ok(())
}
