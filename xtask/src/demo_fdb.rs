//! The FoundationDB part of `cargo xtask demo`: install the operator with `deploy/fdb`, run the
//! real `fdb-operator` as its own ServiceAccount against the FoundationDB simulator, apply
//! the sample `sample-cluster` and show it reconciled, then scaled (storage 3 → 5 → 3, each
//! removed process group excluded before its pod goes) and upgraded (7.1.67 → 7.1.68, pods
//! recreated zone by zone). Every wait is on a condition with a deadline.
//!
//! - FoundationDB cannot run here, so `fdb-sim` stands in (docs/fdb.md, "What the fake
//!   database proves"): `fdb-sim install` lays out `$FDB_BINARY_DIR` with `fdbcli`,
//!   `fdbbackup` and `fdbrestore` for 7.1, and `fdb-sim serve --follow-namespace` holds the
//!   database, whose processes follow the cluster's pods as their monitors would start them.
//!   The operator runs those tools exactly as it would run FoundationDB's.
//! - The operator runs here as a child process (the kwok-faked Deployment gets 0 replicas),
//!   watching only the demo namespace, with the recovery-age gates lowered to 5 s (upstream's
//!   defaults, 120 s before an exclusion and 600 s before an inclusion, would make the
//!   scale-down wait ten minutes). Removals keep upstream's pace: one fault domain at a time,
//!   60 s apart (`waitBetweenRemovalsSeconds`), which the per-group times of the scale-down
//!   show.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fdb::crd::FoundationDBCluster;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::demo_support::{
    DEADLINE, Process, build_binaries, deploy_dir, ensure_namespace, poll, poll_within,
    service_account_kubeconfig, wait_for_leader,
};
use crate::kubectl;

const OPERATOR_NAMESPACE: &str = "fdb-operator-system";
const OPERATOR_SA: &str = "fdb-kubernetes-operator-controller-manager";
const LEASE: &str = "fdb-kubernetes-operator";
const DEMO_NAMESPACE: &str = "fdb-demo";
const CLUSTER: &str = "sample-cluster";
const UPGRADE_TO: &str = "7.1.68";
/// How long the upgrade may take to reconcile (see where it is waited for).
const UPGRADE_DEADLINE: Duration = Duration::from_secs(420);

/// Runs the FoundationDB demo on the (running) plane.
pub fn run(rt: &tokio::runtime::Runtime, admin: &kube::Client) -> anyhow::Result<()> {
    let deploy = deploy_dir("fdb");
    println!(
        "\n==> fdb: installing the operator: kubectl apply --server-side -k deploy/fdb (its Deployment scaled to 0: the operator runs here)"
    );
    let mut objs = testenv::kustomize::render(&deploy)?;
    for o in &mut objs {
        if o.types.as_ref().is_some_and(|t| t.kind == "Deployment") {
            o.data["spec"]["replicas"] = 0.into();
        }
    }
    rt.block_on(testenv::kustomize::apply_all(admin, &objs, "flotilla-demo"))?;
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/foundationdbclusters.apps.foundationdb.org",
        "crd/foundationdbbackups.apps.foundationdb.org",
        "crd/foundationdbrestores.apps.foundationdb.org",
    ])?;
    ensure_namespace(DEMO_NAMESPACE)?;
    let kubeconfig = service_account_kubeconfig(rt, admin, OPERATOR_NAMESPACE, OPERATOR_SA)?;

    println!(
        "\n==> fdb: building: cargo build -p fdb --bin fdb-operator --bin fdb-sim --bin kubectl-fdb"
    );
    let bins = build_binaries(&[
        ("fdb", "fdb-operator"),
        ("fdb", "fdb-sim"),
        ("fdb", "kubectl-fdb"),
    ])?;
    let (operator_bin, sim_bin, plugin_bin) = (&bins[0], &bins[1], &bins[2]);

    let binary_dir = testenv::plane::plane_dir().join("fdb-sim");
    let socket = binary_dir.join(fdb::sim::SOCKET_FILE);
    println!(
        "\n==> fdb: the FoundationDB simulator: fdb-sim install --dir {0} --version 7.1.67; fdb-sim serve --socket {1} --follow-namespace {DEMO_NAMESPACE} --drain-reads 3 (an excluded process keeps its data for 3 status reads)",
        binary_dir.display(),
        socket.display()
    );
    let _ = std::fs::remove_dir_all(&binary_dir);
    let status = Command::new(sim_bin)
        .args(["install", "--dir"])
        .arg(&binary_dir)
        .args(["--version", "7.1.67"])
        .status()?;
    anyhow::ensure!(status.success(), "fdb-sim install failed");
    let mut serve = Command::new(sim_bin);
    serve
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .arg(format!("--follow-namespace={DEMO_NAMESPACE}"))
        .arg("--drain-reads=3")
        .env("KUBECONFIG", testenv::kubeconfig_path());
    let mut sim = Process::spawn("fdb-sim", serve)?;
    rt.block_on(poll("fdb-sim listening", &mut [&mut sim], || async {
        Ok(socket.exists())
    }))?;

    let mut operator = start_operator(operator_bin, &kubeconfig, &binary_dir)?;
    rt.block_on(wait_for_leader(
        admin,
        &mut [&mut operator, &mut sim],
        OPERATOR_NAMESPACE,
        LEASE,
    ))?;

    let clusters: Api<FoundationDBCluster> = Api::namespaced(admin.clone(), DEMO_NAMESPACE);
    if rt.block_on(clusters.get_opt(CLUSTER))?.is_some() {
        println!("deleting the previous run's FoundationDBCluster {CLUSTER}");
        rt.block_on(clusters.delete(CLUSTER, &DeleteParams::default()))?;
        rt.block_on(poll(
            "the previous run's cluster to be gone",
            &mut [&mut operator, &mut sim],
            || async { Ok(clusters.get_opt(CLUSTER).await?.is_none()) },
        ))?;
    }

    println!(
        "\n==> fdb: applying the sample: kubectl -n {DEMO_NAMESPACE} apply -f deploy/fdb/samples/cluster.yaml"
    );
    kubectl(&[
        "-n",
        DEMO_NAMESPACE,
        "apply",
        "-f",
        &deploy.join("samples/cluster.yaml").display().to_string(),
    ])?;
    let started = Instant::now();
    let c = rt.block_on(reconciled(&clusters, &mut [&mut operator, &mut sim]))?;
    let st = c.status.clone().unwrap_or_default();
    println!(
        "reconciled in {:.1?}: {} process groups, version {}, connection string {}",
        started.elapsed(),
        st.process_groups.len(),
        st.running_version,
        st.connection_string
    );
    show()?;
    plugin(plugin_bin, &["get", "configuration", CLUSTER])?;
    plugin(plugin_bin, &["analyze", CLUSTER])?;

    for storage in [5, 3] {
        println!(
            "\n==> fdb: scaling storage to {storage}: kubectl -n {DEMO_NAMESPACE} patch fdb {CLUSTER} --type=merge -p '{{\"spec\":{{\"processCounts\":{{\"storage\":{storage}}}}}}}'"
        );
        let started = Instant::now();
        rt.block_on(clusters.patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"processCounts": {"storage": storage}}})),
        ))?;
        let removals = rt.block_on(follow_removals(
            admin,
            &clusters,
            &mut [&mut operator, &mut sim],
        ))?;
        let c = rt.block_on(reconciled(&clusters, &mut [&mut operator, &mut sim]))?;
        let groups = c.status.unwrap_or_default().process_groups;
        let n = groups
            .iter()
            .filter(|g| g.process_class.as_str() == "storage")
            .count();
        println!(
            "reconciled in {:.1?} with {n} storage process groups",
            started.elapsed()
        );
        for (id, line) in removals {
            println!("  {id}: {line}");
        }
    }

    println!(
        "\n==> fdb: upgrading to {UPGRADE_TO}: kubectl -n {DEMO_NAMESPACE} patch fdb {CLUSTER} --type=merge -p '{{\"spec\":{{\"version\":\"{UPGRADE_TO}\"}}}}'"
    );
    let started = Instant::now();
    rt.block_on(clusters.patch(
        CLUSTER,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"version": UPGRADE_TO}})),
    ))?;
    // The replaced log and stateless groups go one fault domain at a time, 60 s apart
    // (upstream's pace), and the pods of a class are spread over the three nodes: at least
    // three minutes of removals alone.
    let c = rt.block_on(reconciled_within(
        &clusters,
        &mut [&mut operator, &mut sim],
        UPGRADE_DEADLINE,
    ))?;
    let st = c.status.unwrap_or_default();
    println!(
        "upgraded in {:.1?}: running version {}, {} process groups",
        started.elapsed(),
        st.running_version,
        st.process_groups.len()
    );
    show()?;
    plugin(plugin_bin, &["analyze", CLUSTER])?;

    drop(operator);
    drop(sim);
    println!(
        "\nthe operator and the simulator were stopped; the cluster's objects stay. Run them again with:\n  KUBECONFIG={} {} serve --socket {} --follow-namespace={DEMO_NAMESPACE} --drain-reads=3\n  KUBECONFIG={} FDB_BINARY_DIR={} {} --watch-namespace={DEMO_NAMESPACE} --lease-namespace={OPERATOR_NAMESPACE}",
        testenv::kubeconfig_path().display(),
        sim_bin.display(),
        socket.display(),
        kubeconfig.display(),
        binary_dir.display(),
        operator_bin.display()
    );
    Ok(())
}

fn start_operator(binary: &Path, kubeconfig: &Path, binary_dir: &Path) -> anyhow::Result<Process> {
    let metrics = format!("127.0.0.1:{}", testenv::process::free_port()?);
    let probes = format!("127.0.0.1:{}", testenv::process::free_port()?);
    let mut cmd = Command::new(binary);
    cmd.args([
        "--leader-elect=true",
        &format!("--lease-namespace={OPERATOR_NAMESPACE}"),
        &format!("--watch-namespace={DEMO_NAMESPACE}"),
        "--minimum-recovery-time-for-exclusion=5",
        "--minimum-recovery-time-for-inclusion=5",
        &format!("--metrics-addr={metrics}"),
        &format!("--probe-addr={probes}"),
    ])
    .env("KUBECONFIG", kubeconfig)
    .env("FDB_BINARY_DIR", binary_dir);
    let process = Process::spawn("fdb-operator", cmd)?;
    println!(
        "operator running as serviceaccount {OPERATOR_NAMESPACE}/{OPERATOR_SA} (pid {}), FDB_BINARY_DIR={}, logs: {}\n  metrics http://{metrics}/metrics, probes http://{probes}/readyz",
        process.pid(),
        binary_dir.display(),
        process.log.display()
    );
    Ok(process)
}

// Waits until the cluster is configured and reconciled at its generation.
async fn reconciled(
    clusters: &Api<FoundationDBCluster>,
    watched: &mut [&mut Process],
) -> anyhow::Result<FoundationDBCluster> {
    reconciled_within(clusters, watched, DEADLINE).await
}

// `reconciled` with its own deadline.
async fn reconciled_within(
    clusters: &Api<FoundationDBCluster>,
    watched: &mut [&mut Process],
    within: Duration,
) -> anyhow::Result<FoundationDBCluster> {
    let last = RefCell::new(None);
    poll_within("the cluster reconciled", within, watched, || async {
        let c = clusters.get(CLUSTER).await?;
        let st = c.status.clone().unwrap_or_default();
        let done =
            st.configured && st.generations.reconciled == c.metadata.generation.unwrap_or(-1);
        *last.borrow_mut() = Some(c);
        Ok(done)
    })
    .await?;
    last.into_inner()
        .ok_or_else(|| anyhow::anyhow!("no cluster read"))
}

struct Seen {
    marked: f64,
    excluded: Option<f64>,
    gone: Option<f64>,
    pod: String,
}

// Follows the process groups marked for removal until none is left: when each was excluded
// and when its pod went, by the cluster's status and the pods (the order the operator keeps:
// the exclusion first).
async fn follow_removals(
    admin: &kube::Client,
    clusters: &Api<FoundationDBCluster>,
    watched: &mut [&mut Process],
) -> anyhow::Result<BTreeMap<String, String>> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), DEMO_NAMESPACE);
    let started = Instant::now();
    // Per group: when it was seen marked for removal, excluded (its data moved off) and
    // without its pod, in seconds since the patch.
    let seen: RefCell<BTreeMap<String, Seen>> = RefCell::new(BTreeMap::new());
    let started_removing = Cell::new(false);
    poll("the removals done", watched, || async {
        let c = clusters.get(CLUSTER).await?;
        let st = c.status.clone().unwrap_or_default();
        // The scale is under way once the status has moved on from the patch's generation.
        if st.generations.reconciled == c.metadata.generation.unwrap_or(-1)
            || st
                .process_groups
                .iter()
                .any(|g| g.removal_timestamp.is_some())
        {
            started_removing.set(true);
        }
        let live: Vec<String> = pods
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect();
        let mut seen = seen.borrow_mut();
        let t = started.elapsed().as_secs_f64();
        for g in st
            .process_groups
            .iter()
            .filter(|g| g.is_marked_for_removal())
        {
            let id = g.process_group_id.to_string();
            let pod = g.pod_name(CLUSTER);
            let entry = seen.entry(id).or_insert_with(|| Seen {
                marked: t,
                excluded: None,
                gone: None,
                pod: pod.clone(),
            });
            if g.is_excluded() && entry.excluded.is_none() {
                entry.excluded = Some(t);
            }
            if !live.contains(&pod) && entry.gone.is_none() {
                entry.gone = Some(t);
            }
        }
        for (id, entry) in seen.iter_mut() {
            let still = st
                .process_groups
                .iter()
                .any(|g| g.process_group_id.to_string() == *id);
            if !still && entry.gone.is_none() {
                entry.gone = Some(t);
            }
        }
        let pending = st.process_groups.iter().any(|g| g.is_marked_for_removal());
        Ok(started_removing.get() && !pending)
    })
    .await?;
    Ok(seen
        .into_inner()
        .into_iter()
        .map(|(id, s)| {
            let at = |t: Option<f64>| t.map_or("-".to_owned(), |t| format!("{t:.1}s"));
            (
                id,
                format!(
                    "marked for removal at {:.1}s, excluded (its data moved off) at {}, pod {} gone at {}",
                    s.marked,
                    at(s.excluded),
                    s.pod,
                    at(s.gone)
                ),
            )
        })
        .collect())
}

fn show() -> anyhow::Result<()> {
    println!();
    kubectl(&["-n", DEMO_NAMESPACE, "get", "fdb,pods,pvc", "-o", "wide"])
}

fn plugin(binary: &Path, args: &[&str]) -> anyhow::Result<()> {
    println!("\n$ kubectl fdb -n {DEMO_NAMESPACE} {}", args.join(" "));
    let status = Command::new(binary)
        .arg(format!(
            "--kubeconfig={}",
            testenv::kubeconfig_path().display()
        ))
        .args(["-n", DEMO_NAMESPACE])
        .args(args)
        .status()?;
    anyhow::ensure!(status.success(), "kubectl fdb {} failed", args.join(" "));
    Ok(())
}
