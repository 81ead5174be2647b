//! Benchmark (not a test): N RedroidInstances to Running on the local control plane.
//!
//! ```bash
//! cargo run --release -p redroid --example redroid-bench -- --instances 1000 --idle-seconds 60
//! ```
//!
//! The operator runs in this process (both controllers, leader election off) through a client
//! that counts its API requests by verb. The instances are created by a separate `kubectl`
//! process, so the process figures (peak RSS, CPU seconds) are the operator's plus this
//! harness's polling (one list every 2 s). Reported: time until all instances are Running,
//! peak RSS, CPU seconds, the operator's API requests by verb until its queue has drained (no
//! request for 10 s), and its write requests per minute after that (the goal is zero).

use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use redroid::crd::{InstancePhase, RedroidInstance};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    /// Number of RedroidInstances.
    #[arg(long, default_value_t = 1000)]
    instances: usize,
    /// Seconds to watch for writes after convergence.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_seconds: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let admin = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let ns = format!("bench-{}", std::process::id());
    let nsobj: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &nsobj)
        .await?;

    for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
        testenv::bound_claim(&admin, &ns, claim).await?;
    }
    let (client, counts) = testenv::counting_client().await;
    let flags = redroid::Flags::try_parse_from([
        "redroid-operator",
        "--leader-elect=false",
        "--metrics-addr=127.0.0.1:0",
        "--probe-addr=127.0.0.1:0",
        &format!("--watch-namespaces={ns}"),
    ])?;
    let stop = CancellationToken::new();
    let operator = tokio::spawn(redroid::run_with_client(flags, client, stop.clone()));

    let cpu0 = testenv::process::cpu_seconds();
    let start = Instant::now();
    create_instances(&ns, args.instances)?;
    let created = start.elapsed();
    let api: Api<RedroidInstance> = Api::namespaced(admin.clone(), &ns);
    let deadline = start + Duration::from_secs(args.timeout_seconds);
    let mut running = 0;
    while running < args.instances {
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {running}/{} Running before the timeout",
            args.instances
        );
        tokio::time::sleep(Duration::from_secs(2)).await; // benchmark sampling interval
        let list = api.list(&ListParams::default()).await?;
        running = list
            .items
            .iter()
            .filter(|i| i.status.as_ref().and_then(|s| s.phase) == Some(InstancePhase::Running))
            .count();
    }
    let converged = start.elapsed();
    let cpu_converge = testenv::process::cpu_seconds() - cpu0;

    // Let the work queue drain: the last instances' confirming passes are still running when
    // the last one reports Running. Settled = no request for 10 s (bounded by the timeout).
    let settle_start = Instant::now();
    let mut last = (counts.total(), Instant::now());
    while last.1.elapsed() < Duration::from_secs(10) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await; // benchmark sampling interval
        if counts.total() != last.0 {
            last = (counts.total(), Instant::now());
        }
    }
    let settled = settle_start.elapsed();
    let requests = counts.by_verb();
    counts.reset();
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await; // the idle measurement window
    let idle_writes = counts.writes();
    let idle_total = counts.total();

    println!(
        "redroid benchmark: {} instances on the local control plane",
        args.instances
    );
    println!(
        "  kubectl create of all instances:     {:.1}s",
        created.as_secs_f64()
    );
    println!(
        "  time until all Running:              {:.1}s",
        converged.as_secs_f64()
    );
    println!(
        "  peak RSS (operator + harness):       {:.1} MiB",
        testenv::process::peak_rss_kib() as f64 / 1024.0
    );
    println!("  CPU seconds until all Running:       {cpu_converge:.2}s");
    println!(
        "  queue drained (no request for 10 s): {:.1}s after all Running",
        settled.as_secs_f64()
    );
    println!("  operator API requests until drained, by verb:");
    for (verb, n) in &requests {
        println!("    {verb:<18} {n}");
    }
    println!(
        "  operator requests during {}s idle:     {idle_total} (writes: {idle_writes})",
        args.idle_seconds
    );
    println!(
        "  write requests per minute converged: {:.1}",
        idle_writes as f64 * 60.0 / args.idle_seconds as f64
    );

    stop.cancel();
    let _ = operator.await;
    Api::<Namespace>::all(admin)
        .delete(&ns, &DeleteParams::default())
        .await?;
    Ok(())
}

fn create_instances(ns: &str, n: usize) -> anyhow::Result<()> {
    let mut yaml = String::new();
    for i in 0..n {
        yaml.push_str(&format!(
            "---\napiVersion: redroid.isning.moe/v1alpha1\nkind: RedroidInstance\nmetadata: {{name: android-{i}, namespace: {ns}}}\nspec: {{index: {i}}}\n"
        ));
    }
    let file = std::env::temp_dir().join(format!("{ns}.yaml"));
    std::fs::write(&file, yaml)?;
    let state = testenv::plane::read_state().ok_or_else(|| anyhow::anyhow!("no plane"))?;
    let status = std::process::Command::new(state.bin_dir.join("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            testenv::kubeconfig_path().display()
        ))
        .args(["create", "-f", &file.display().to_string(), "-o", "name"])
        .stdout(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "kubectl create failed");
    Ok(())
}
