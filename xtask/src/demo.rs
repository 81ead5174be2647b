//! `cargo xtask demo`: start the local plane, install the redroid operator with
//! `kubectl apply -k deploy/redroid`, run the real operator binary as its own ServiceAccount
//! (so the demo runs under the hand-written RBAC, not as admin), apply the samples and show
//! them converge; then the same for the cocoon operator ([`crate::demo_cocoon`]), then a
//! Redis cluster and a failover ([`crate::demo_redis`]), then a FoundationDB cluster on the
//! simulator created, scaled and upgraded ([`crate::demo_fdb`]), then stellar across separate
//! spaces ([`crate::demo_stellar`]). `--only redis`, `--only fdb` and `--only stellar` run one
//! part.
//!
//! The Deployment's pods are faked by kwok (they cannot run our binary); the operator runs
//! here as a child process instead, holding the leader Lease and watching only the demo
//! namespace (tests share the plane and run their own operators), and is stopped at the end.

use std::time::Instant;

use kube::Api;
use redroid::crd::{InstancePhase, RedroidInstance, RedroidTask};

use crate::demo_support::{
    Operator, Process, build_binary, deploy_dir, ensure_namespace, poll,
    service_account_kubeconfig, wait_for_leader,
};
use crate::kubectl;

const OPERATOR_NAMESPACE: &str = "redroid-system";
const OPERATOR_SA: &str = "redroid-operator";
const DEMO_NAMESPACE: &str = "redroid-demo";
const INSTANCES: [&str; 2] = ["android-0", "android-1"];
const ONE_SHOT_TASK: &str = "install-apps";

pub fn run() -> anyhow::Result<()> {
    let (rt, admin) = plane()?;
    redroid_demo(&rt, &admin)?;
    crate::demo_cocoon::run(&rt, &admin)?;
    crate::demo_redis::run(&rt, &admin)?;
    crate::demo_fdb::run(&rt, &admin)?;
    crate::demo_stellar::run()?;
    println!("\nrun it all again with: cargo xtask demo   (stop the plane with: cargo xtask down)");
    Ok(())
}

/// `cargo xtask demo --only redis`.
pub fn redis_only() -> anyhow::Result<()> {
    let (rt, admin) = plane()?;
    crate::demo_redis::run(&rt, &admin)
}

/// `cargo xtask demo --only fdb`.
pub fn fdb_only() -> anyhow::Result<()> {
    let (rt, admin) = plane()?;
    crate::demo_fdb::run(&rt, &admin)
}

/// Starts (or reuses) the plane: a runtime and an admin client for it.
fn plane() -> anyhow::Result<(tokio::runtime::Runtime, kube::Client)> {
    let up = testenv::up()?;
    println!(
        "local control plane {} in {:.1?}",
        if up.reused { "reused" } else { "started" },
        up.took
    );
    println!(
        "export KUBECONFIG={}\n",
        testenv::kubeconfig_path().display()
    );
    kubectl(&["get", "nodes", "-L", "topology.kubernetes.io/zone"])?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let admin = rt.block_on(testenv::plane::admin_client())?;
    Ok((rt, admin))
}

fn redroid_demo(rt: &tokio::runtime::Runtime, admin: &kube::Client) -> anyhow::Result<()> {
    let deploy = deploy_dir("redroid");
    println!("\n==> installing the operator: kubectl apply -k deploy/redroid");
    kubectl(&["apply", "-k", &deploy.display().to_string()])?;
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/redroidinstances.redroid.isning.moe",
        "crd/redroidtasks.redroid.isning.moe",
    ])?;

    let kubeconfig = service_account_kubeconfig(rt, admin, OPERATOR_NAMESPACE, OPERATOR_SA)?;

    println!("\n==> building the operator: cargo build -p redroid --bin redroid-operator");
    let binary = build_binary("redroid", "redroid-operator")?;
    // Only the demo's namespace: tests share this plane and run their own operators.
    let watch = [format!("--watch-namespaces={DEMO_NAMESPACE}")];
    let mut operator = Operator::start(&binary, &kubeconfig, OPERATOR_NAMESPACE, &watch)?;
    operator.describe(OPERATOR_NAMESPACE, OPERATOR_SA);
    rt.block_on(wait_for_leader(
        admin,
        &mut [&mut operator.process],
        OPERATOR_NAMESPACE,
        redroid::run::LEASE_NAME,
    ))?;

    println!(
        "\n==> applying the samples: kubectl -n {DEMO_NAMESPACE} apply -f deploy/redroid/samples"
    );
    ensure_namespace(DEMO_NAMESPACE)?;
    // The samples' PVCs name no StorageClass: the plane's default one provisions and binds them.
    kubectl(&[
        "-n",
        DEMO_NAMESPACE,
        "apply",
        "-f",
        &deploy.join("samples").display().to_string(),
    ])?;
    let converged = rt.block_on(wait_converged(admin, &mut operator.process));
    println!();
    kubectl(&[
        "-n",
        DEMO_NAMESPACE,
        "get",
        "redroidinstances,redroidtasks,pods,jobs,cronjobs",
        "-o",
        "wide",
    ])?;
    converged?;

    drop(operator);
    println!(
        "\nthe operator was stopped; the plane and the demo objects keep running. Run it again with:"
    );
    println!(
        "  KUBECONFIG={} {} --lease-namespace={OPERATOR_NAMESPACE} --watch-namespaces={DEMO_NAMESPACE}",
        kubeconfig.display(),
        binary.display()
    );
    Ok(())
}

async fn wait_converged(admin: &kube::Client, operator: &mut Process) -> anyhow::Result<()> {
    let instances: Api<RedroidInstance> = Api::namespaced(admin.clone(), DEMO_NAMESPACE);
    let tasks: Api<RedroidTask> = Api::namespaced(admin.clone(), DEMO_NAMESPACE);
    let started = Instant::now();
    poll("the samples converging", &mut [operator], || async {
        let task = tasks.get_opt(ONE_SHOT_TASK).await?;
        let complete = task.and_then(|t| t.status).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        });
        let mut running = 0;
        for name in INSTANCES {
            let phase = instances
                .get_opt(name)
                .await?
                .and_then(|i| i.status)
                .and_then(|s| s.phase);
            running += usize::from(phase == Some(InstancePhase::Running));
        }
        Ok(complete && running == INSTANCES.len())
    })
    .await?;
    println!(
        "converged in {:.1?}: {} instances Running, task {ONE_SHOT_TASK} Complete",
        started.elapsed(),
        INSTANCES.len()
    );
    Ok(())
}
