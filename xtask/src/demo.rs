//! `cargo xtask demo`: start the local plane, install the redroid operator with
//! `kubectl apply -k deploy/redroid`, run the real operator binary as its own ServiceAccount
//! (so the demo runs under the hand-written RBAC, not as admin), apply the samples and show
//! them converge.
//!
//! The Deployment's pods are faked by kwok (they cannot run our binary); the operator runs
//! here as a child process instead, holding the leader Lease and watching only the demo
//! namespace (tests share the plane and run their own operators), and is stopped at the end.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::serde_json;
use kube::Api;
use redroid::crd::{InstancePhase, RedroidInstance, RedroidTask};
use testenv::process::free_port;

use crate::kubectl;

const OPERATOR_NAMESPACE: &str = "redroid-system";
const OPERATOR_SA: &str = "redroid-operator";
const DEMO_NAMESPACE: &str = "redroid-demo";
const INSTANCES: [&str; 2] = ["android-0", "android-1"];
const ONE_SHOT_TASK: &str = "install-apps";
const DEADLINE: Duration = Duration::from_secs(180);

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/redroid")
}

pub fn run() -> anyhow::Result<()> {
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

    println!("\n==> installing the operator: kubectl apply -k deploy/redroid");
    kubectl(&["apply", "-k", &deploy_dir().display().to_string()])?;
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/redroidinstances.redroid.isning.moe",
        "crd/redroidtasks.redroid.isning.moe",
    ])?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let admin = rt.block_on(testenv::plane::admin_client())?;
    let kubeconfig = testenv::plane::plane_dir().join("redroid-operator.kubeconfig");
    let token = rt.block_on(testenv::service_account_token(
        &admin,
        OPERATOR_NAMESPACE,
        OPERATOR_SA,
    ))?;
    testenv::write_kubeconfig_for_token(&kubeconfig, &token, OPERATOR_NAMESPACE)?;

    println!("\n==> building the operator: cargo build -p redroid --bin redroid-operator");
    let binary = build_operator()?;
    let mut operator = Operator::start(&binary, &kubeconfig)?;
    println!(
        "operator running as serviceaccount {OPERATOR_NAMESPACE}/{OPERATOR_SA} (pid {}), logs: {}",
        operator.child.id(),
        operator.log.display()
    );
    println!(
        "  metrics http://{}/metrics, probes http://{}/readyz",
        operator.metrics, operator.probes
    );
    rt.block_on(wait_for_leader(&admin, &mut operator))?;

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
        &deploy_dir().join("samples").display().to_string(),
    ])?;
    let converged = rt.block_on(wait_converged(&admin, &mut operator));
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
    println!("or simply: cargo xtask demo   (stop the plane with: cargo xtask down)");
    Ok(())
}

/// Builds the operator binary and returns its path (from cargo's artifact messages, so any
/// target directory works).
fn build_operator() -> anyhow::Result<PathBuf> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "-p",
            "redroid",
            "--bin",
            "redroid-operator",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "cargo build -p redroid --bin redroid-operator failed"
    );
    let stdout = String::from_utf8(out.stdout)?;
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "redroid-operator")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| anyhow::anyhow!("cargo reported no redroid-operator executable"))
}

/// The operator child process; stopped (SIGTERM, then SIGKILL) when dropped. It stays in our
/// process group, so Ctrl-C on the demo stops it too.
struct Operator {
    child: Child,
    log: PathBuf,
    metrics: String,
    probes: String,
}

impl Operator {
    fn start(binary: &Path, kubeconfig: &Path) -> anyhow::Result<Self> {
        let (metrics, probes) = (
            format!("127.0.0.1:{}", free_port()?),
            format!("127.0.0.1:{}", free_port()?),
        );
        let logs = testenv::plane::plane_dir().join("logs");
        std::fs::create_dir_all(&logs)?;
        let log = logs.join("redroid-operator.log");
        let file = File::options().create(true).append(true).open(&log)?;
        let child = Command::new(binary)
            .args([
                "--leader-elect=true",
                &format!("--lease-namespace={OPERATOR_NAMESPACE}"),
            ])
            // Only the demo's namespace: tests share this plane and run their own operators.
            .arg(format!("--watch-namespaces={DEMO_NAMESPACE}"))
            .args([
                format!("--metrics-addr={metrics}"),
                format!("--probe-addr={probes}"),
            ])
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", binary.display()))?;
        Ok(Self {
            child,
            log,
            metrics,
            probes,
        })
    }

    fn ensure_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!("the operator exited ({status}); see {}", self.log.display());
        }
        Ok(())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100)); // waiting for our child to exit, with a deadline
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn ensure_namespace(name: &str) -> anyhow::Result<()> {
    let file = std::env::temp_dir().join(format!("{name}-namespace.yaml"));
    std::fs::write(
        &file,
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"),
    )?;
    kubectl(&["apply", "-f", &file.display().to_string()])
}

/// Polls `probe` every half second until it yields true, the operator dies, or the deadline.
async fn poll<F, Fut>(what: &str, operator: &mut Operator, mut probe: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        operator.ensure_alive()?;
        if probe().await? {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what} did not happen within {DEADLINE:?}; operator logs: {}",
            operator.log.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await; // polling a condition with a deadline
    }
}

async fn wait_for_leader(admin: &kube::Client, operator: &mut Operator) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    poll("the operator taking the leader lease", operator, || async {
        let lease = leases.get_opt(redroid::run::LEASE_NAME).await?;
        let holder = lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        Ok(!holder.is_empty())
    })
    .await?;
    println!(
        "the operator holds lease {OPERATOR_NAMESPACE}/{}",
        redroid::run::LEASE_NAME
    );
    Ok(())
}

async fn wait_converged(admin: &kube::Client, operator: &mut Operator) -> anyhow::Result<()> {
    let instances: Api<RedroidInstance> = Api::namespaced(admin.clone(), DEMO_NAMESPACE);
    let tasks: Api<RedroidTask> = Api::namespaced(admin.clone(), DEMO_NAMESPACE);
    let started = Instant::now();
    poll("the samples converging", operator, || async {
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
