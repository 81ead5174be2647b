//! Benchmark (not a test): N FoundationDBClusters (default 20) of 16 process groups each (the
//! sample `deploy/fdb/samples/cluster.yaml`: 3 storage, 4 log, 9 stateless) created to
//! reconciled, then each scaled to 5 storage and back to 3 (two groups excluded, then
//! removed, per cluster), on the local plane against `fdb-sim` (its processes following the
//! pods), with `fdb-operator` as its own process under `deploy/fdb/rbac` at upstream's
//! defaults (one reconcile at a time) except the recovery-age gates (5 s instead of 120 s and
//! 600 s, which would dominate every scale-down).
//!
//! ```sh
//! cargo build --release -p fdb --bin fdb-operator --bin fdb-sim --example bench
//! target/release/examples/bench               # 20 clusters
//! FDB_BENCH_CLUSTERS=5 target/release/examples/bench
//! ```
//!
//! Reports per phase: wall time until every cluster is reconciled, the operator's CPU seconds
//! and RSS, its API requests by verb (counted by a proxy in front of the API server; the
//! simulator and this harness are not counted); then the operator's requests and writes in
//! one minute once converged (goal: no write).

use std::time::{Duration, Instant};

use fdb::crd::FoundationDBCluster;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testenv::bench::{Counted, Operator, build_binary, load_average};

const SA: &str = "fdb-kubernetes-operator-controller-manager";

struct Phase {
    name: String,
    secs: f64,
    cpu: f64,
    rss_mib: f64,
    verbs: std::collections::BTreeMap<String, u64>,
    writes: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let clusters: usize = std::env::var("FDB_BENCH_CLUSTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let admin = testenv::client().await;
    for crd in fdb::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let ns = testenv::TestNamespace::new(&admin, "fdb-bench").await;
    let rbac_dir = testenv::workspace_root().join("deploy/fdb/rbac");
    let _rbac =
        testenv::rbac::install_rbac(&admin, &rbac_dir, "fdb-operator-system", &ns.name).await?;
    let token = testenv::service_account_token(&admin, &ns.name, SA).await?;
    let counted = Counted::start().await?;
    let work = std::env::temp_dir().join(format!("fdb-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let kubeconfig = work.join("operator.kubeconfig");
    counted.kubeconfig(&kubeconfig, &token, &ns.name)?;

    let operator_bin = build_binary("fdb", "fdb-operator")?;
    let sim_bin = build_binary("fdb", "fdb-sim")?;
    let binary_dir = work.join("bin");
    let status = std::process::Command::new(&sim_bin)
        .args(["install", "--dir"])
        .arg(&binary_dir)
        .args(["--version", "7.1.67"])
        .stdout(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "fdb-sim install failed");
    let socket = binary_dir.join(fdb::sim::SOCKET_FILE);
    let mut sim = Operator::spawn(
        "fdb-sim",
        &sim_bin,
        &[
            "serve".into(),
            "--socket".into(),
            socket.display().to_string(),
            format!("--follow-namespace={}", ns.name),
        ],
        &[],
        &testenv::kubeconfig_path(),
        &work.join("fdb-sim.log"),
    )?;
    let probes = format!("127.0.0.1:{}", testenv::process::free_port()?);
    let mut operator = Operator::spawn(
        "fdb-operator",
        &operator_bin,
        &[
            "--leader-elect=false".into(),
            format!("--watch-namespace={}", ns.name),
            format!(
                "--metrics-addr=127.0.0.1:{}",
                testenv::process::free_port()?
            ),
            format!("--probe-addr={probes}"),
            "--minimum-recovery-time-for-exclusion=5".into(),
            "--minimum-recovery-time-for-inclusion=5".into(),
        ],
        &[("FDB_BINARY_DIR".into(), binary_dir.display().to_string())],
        &kubeconfig,
        &work.join("fdb-operator.log"),
    )?;
    testenv::bench::wait_ready(&mut operator, &probes, Duration::from_secs(60)).await?;
    println!(
        "fdb bench: {clusters} clusters of 16 process groups, namespace {}, logs in {} (load {:?})",
        ns.name,
        work.display(),
        load_average()
    );

    let api: Api<FoundationDBCluster> = Api::namespaced(admin.clone(), &ns.name);
    let names: Vec<String> = (0..clusters).map(|i| format!("bench-{i}")).collect();
    let mut phases = Vec::new();

    let start = begin("create", &operator, &counted);
    for n in &names {
        let c: FoundationDBCluster = serde_json::from_value(json!({
            "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
            "metadata": {"name": n},
            "spec": {"version": "7.1.67", "processes": {"general": {
                "volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "16G"}}}}}}},
        }))?;
        api.create(&PostParams::default(), &c).await?;
    }
    wait(&api, &mut operator, &mut sim, 3).await?;
    phases.push(finish(start, &operator, &counted));

    for (label, storage) in [("scale 3→5", 5), ("scale 5→3", 3)] {
        let start = begin(label, &operator, &counted);
        for n in &names {
            let patch = json!({"spec": {"processCounts": {"storage": storage}}});
            api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        wait(&api, &mut operator, &mut sim, storage).await?;
        phases.push(finish(start, &operator, &counted));
    }

    let start = begin("converged minute", &operator, &counted);
    tokio::time::sleep(Duration::from_secs(60)).await; // the measurement window
    phases.push(finish(start, &operator, &counted));

    println!(
        "\n| phase | seconds | operator CPU s | RSS MiB | writes | requests by verb |\n|---|---|---|---|---|---|"
    );
    for p in &phases {
        let verbs: Vec<String> = p.verbs.iter().map(|(v, n)| format!("{v} {n}")).collect();
        println!(
            "| {} | {:.1} | {:.2} | {:.1} | {} | {} |",
            p.name,
            p.secs,
            p.cpu,
            p.rss_mib,
            p.writes,
            verbs.join(", ")
        );
    }
    println!(
        "peak RSS {:.1} MiB; load at the end {:?}",
        operator.peak_rss_kib() as f64 / 1024.0,
        load_average()
    );
    operator.stop();
    sim.stop();
    Ok(())
}

fn begin(name: &str, operator: &Operator, counted: &Counted) -> (String, Instant, f64) {
    counted.counts().reset();
    (name.to_owned(), Instant::now(), operator.cpu_seconds())
}

fn finish(start: (String, Instant, f64), operator: &Operator, counted: &Counted) -> Phase {
    let counts = counted.counts();
    let p = Phase {
        name: start.0,
        secs: start.1.elapsed().as_secs_f64(),
        cpu: operator.cpu_seconds() - start.2,
        rss_mib: operator.rss_kib() as f64 / 1024.0,
        verbs: counts.by_verb(),
        writes: counts.writes(),
    };
    println!(
        "{}: {:.1} s, {:.2} CPU s, {} writes",
        p.name, p.secs, p.cpu, p.writes
    );
    p
}

// Every cluster configured, reconciled at its generation, with `storage` storage groups and
// none marked for removal.
async fn wait(
    api: &Api<FoundationDBCluster>,
    operator: &mut Operator,
    sim: &mut Operator,
    storage: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        operator.check_alive()?;
        sim.check_alive()?;
        let list = api.list(&ListParams::default()).await?;
        let pending: Vec<String> = list
            .items
            .iter()
            .filter(|c| {
                let st = c.status.clone().unwrap_or_default();
                let groups = &st.process_groups;
                let n = groups
                    .iter()
                    .filter(|g| g.process_class.as_str() == "storage")
                    .count();
                !(st.configured
                    && st.generations.reconciled == c.metadata.generation.unwrap_or(-1)
                    && n == storage
                    && !groups.iter().any(|g| g.is_marked_for_removal()))
            })
            .map(|c| c.name_any())
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "not reconciled within an hour: {pending:?}; logs: {}, {}",
            operator.log().display(),
            sim.log().display()
        );
        tokio::time::sleep(Duration::from_secs(1)).await; // sampling the clusters' status
    }
}
