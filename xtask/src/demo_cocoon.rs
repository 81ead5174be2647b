//! The cocoon part of `cargo xtask demo`: install the operator with `kubectl apply -k
//! deploy/cocoon`, start a real OCI registry on loopback for the VM snapshots, play vk-cocoon
//! with the simulator, run the real `cocoon-operator` as its own ServiceAccount, then take the
//! sample CocoonSet `demo` through Running → Suspended (every VM hibernated into the registry)
//! → Running again.
//!
//! - vk-cocoon needs hypervisors, so the `vksim` binary (crate `vksim`) plays its side of the
//!   pod annotation contract on the kwok nodes, for the demo namespace only, as a child process
//!   with the admin kubeconfig (it stands in for a kubelet).
//! - The operator runs as a child process under the `cocoon-system/cocoon-operator` token, with
//!   leader election on and only the demo namespace watched (tests share the plane).
//! - A previous run's CocoonSet is deleted first (its snapshots lived in that run's registry),
//!   so every run starts from nothing. At the end the operator and the simulator are stopped
//!   and the registry goes away with the demo; the CocoonSet and its pods stay.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use cocoon::crd::{CocoonSet, CocoonSetPhase};
use cocoon::names;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use testenv::registry::RegistryServer;

use crate::demo_support::{
    Operator, Process, build_binaries, deploy_dir, ensure_namespace, poll,
    service_account_kubeconfig, wait_for_leader,
};
use crate::kubectl;

const OPERATOR_NAMESPACE: &str = "cocoon-system";
const OPERATOR_SA: &str = "cocoon-operator";
const DEMO_NAMESPACE: &str = "cocoon-demo";
const SET: &str = "demo";
const POOL: &str = "default";
/// The nodes the simulator is vk-cocoon on: the plane's kwok nodes.
const KWOK_NODES: &str = "type=kwok";
/// What the simulator logs once its pod watch has listed every pod.
const SIM_READY: &str = "vksim running";
/// Used when `deploy/cocoon/samples/cocoonset-demo.yaml` is missing: 2 sub-agents and `db`.
const FALLBACK_SET: &str = "apiVersion: cocoonset.cocoonstack.io/v1
kind: CocoonSet
metadata:
  name: demo
spec:
  agent:
    replicas: 2
    image: ubuntu-dev-base
  toolboxes:
  - name: db
    image: postgres-16
";

/// Runs the cocoon demo on the (running) plane.
pub fn run(rt: &tokio::runtime::Runtime, admin: &kube::Client) -> anyhow::Result<()> {
    install()?;
    println!("\n==> cocoon: starting a real OCI registry on loopback for the VM snapshots");
    testenv::registry::ensure_installed()?;
    let registry = rt.block_on(RegistryServer::start())?;
    let url = registry.url();
    println!("docker-registry serving {url} (it lives as long as this demo)");

    println!("\n==> cocoon: building cocoon-operator and vksim: cargo build -p cocoon -p vksim");
    let built = build_binaries(&[("cocoon", "cocoon-operator"), ("vksim", "vksim")])?;
    let (operator_bin, sim_bin) = (&built[0], &built[1]);

    ensure_namespace(DEMO_NAMESPACE)?;
    let mut sim = start_simulator(rt, sim_bin, &url)?;
    let mut operator = start_operator(rt, admin, operator_bin, &url)?;
    let mut watched = [&mut operator.process, &mut sim];
    rt.block_on(wait_for_leader(
        admin,
        &mut watched,
        OPERATOR_NAMESPACE,
        cocoon::run::LEASE_NAME,
    ))?;

    let demo = Demo {
        sets: Api::namespaced(admin.clone(), DEMO_NAMESPACE),
        pods: Api::namespaced(admin.clone(), DEMO_NAMESPACE),
        registry: url,
    };
    rt.block_on(demo.lifecycle(&mut watched))?;

    drop(operator);
    drop(sim);
    drop(registry);
    println!(
        "\nthe cocoon operator and the vk-cocoon simulator were stopped, and the registry (with \
         the snapshots) is gone with the demo. CocoonSet {DEMO_NAMESPACE}/{SET} and its pods \
         stay, but nothing plays their VMs any more; the next demo deletes them and starts over."
    );
    Ok(())
}

/// `kubectl apply -k deploy/cocoon` and waits for the CRDs.
fn install() -> anyhow::Result<()> {
    println!("\n==> cocoon: installing the operator: kubectl apply -k deploy/cocoon");
    kubectl(&["apply", "-k", &deploy_dir("cocoon").display().to_string()])?;
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/cocoonsets.cocoonset.cocoonstack.io",
        "crd/cocoonhibernations.cocoonset.cocoonstack.io",
    ])
}

/// Starts `cocoon-operator` as its ServiceAccount, on `registry`, watching the demo namespace.
fn start_operator(
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    binary: &Path,
    registry: &str,
) -> anyhow::Result<Operator> {
    let kubeconfig = service_account_kubeconfig(rt, admin, OPERATOR_NAMESPACE, OPERATOR_SA)?;
    let flags = [
        format!("--oci-registry={registry}"),
        // Only the demo's namespace: tests share this plane and run their own operators.
        format!("--watch-namespace={DEMO_NAMESPACE}"),
    ];
    let operator = Operator::start(binary, &kubeconfig, OPERATOR_NAMESPACE, &flags)?;
    operator.describe(OPERATOR_NAMESPACE, OPERATOR_SA);
    Ok(operator)
}

/// Starts `vksim` for the demo namespace and waits until its pod watch has listed.
fn start_simulator(
    rt: &tokio::runtime::Runtime,
    binary: &Path,
    registry: &str,
) -> anyhow::Result<Process> {
    println!(
        "\n==> cocoon: starting the vk-cocoon simulator: vksim --registry {registry} \
         --namespace {DEMO_NAMESPACE} --nodes selector:{KWOK_NODES} --pool {POOL}"
    );
    let mut cmd = Command::new(binary);
    cmd.args(["--registry", registry, "--namespace", DEMO_NAMESPACE])
        .args(["--nodes", &format!("selector:{KWOK_NODES}"), "--pool", POOL])
        .env("KUBECONFIG", testenv::kubeconfig_path())
        .env("RUST_LOG", "info,kube=warn");
    let mut sim = Process::spawn("vksim", cmd)?;
    // The log is appended to across runs: only what this run wrote counts.
    let log = sim.log.clone();
    let offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let ready = || async {
        let text = std::fs::read(&log).unwrap_or_default();
        let new = text.get(offset as usize..).unwrap_or_default();
        Ok(String::from_utf8_lossy(new).contains(SIM_READY))
    };
    rt.block_on(poll("the simulator starting", &mut [&mut sim], ready))?;
    println!(
        "simulator running (pid {}) on the kwok nodes labelled {}={POOL}, logs: {}",
        sim.pid(),
        names::NODE_POOL,
        sim.log.display()
    );
    Ok(sim)
}

/// The demo's objects and registry.
struct Demo {
    sets: Api<CocoonSet>,
    pods: Api<Pod>,
    registry: String,
}

impl Demo {
    /// Create → Running → suspend → Suspended → unsuspend → Running, showing each state.
    async fn lifecycle(&self, watched: &mut [&mut Process]) -> anyhow::Result<()> {
        self.remove_previous(watched).await?;
        println!("\n==> cocoon: applying the sample CocoonSet {SET} in namespace {DEMO_NAMESPACE}");
        apply_sample()?;
        self.wait_phase(CocoonSetPhase::Running, watched).await?;
        show_set()?;

        println!(
            "\n==> cocoon: suspending: kubectl -n {DEMO_NAMESPACE} patch cset {SET} --type=merge -p '{{\"spec\":{{\"suspend\":true}}}}'"
        );
        set_suspend(true)?;
        self.wait_phase(CocoonSetPhase::Suspended, watched).await?;
        kubectl(&["-n", DEMO_NAMESPACE, "get", "cset", SET])?;
        show_lifecycle()?;
        self.show_snapshots().await?;

        println!(
            "\n==> cocoon: waking: kubectl -n {DEMO_NAMESPACE} patch cset {SET} --type=merge -p '{{\"spec\":{{\"suspend\":false}}}}'"
        );
        set_suspend(false)?;
        self.wait_phase(CocoonSetPhase::Running, watched).await?;
        show_set()?;
        show_lifecycle()
    }

    /// Deletes the CocoonSet a previous demo left (the operator drains it) and waits until it
    /// and its pods are gone.
    async fn remove_previous(&self, watched: &mut [&mut Process]) -> anyhow::Result<()> {
        if self.sets.get_opt(SET).await?.is_none() {
            return Ok(());
        }
        println!(
            "\n==> cocoon: deleting the previous demo's CocoonSet {SET} (its registry is gone)"
        );
        self.sets.delete(SET, &DeleteParams::default()).await?;
        let selector = ListParams::default().labels(&format!("{}={SET}", names::LABEL_SET));
        poll("the previous CocoonSet going away", watched, || async {
            let set_gone = self.sets.get_opt(SET).await?.is_none();
            Ok(set_gone && self.pods.list(&selector).await?.items.is_empty())
        })
        .await?;
        println!("CocoonSet {SET} and its pods deleted");
        Ok(())
    }

    /// Waits until the set reports `phase` for its current generation.
    async fn wait_phase(
        &self,
        phase: CocoonSetPhase,
        watched: &mut [&mut Process],
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let what = format!("CocoonSet {SET} reaching {}", phase.as_str());
        poll(&what, watched, || async {
            let Some(set) = self.sets.get_opt(SET).await? else {
                return Ok(false);
            };
            let generation = set.metadata.generation;
            Ok(set.status.is_some_and(|s| {
                s.phase == Some(phase)
                    && s.observed_generation.is_none_or(|g| Some(g) >= generation)
            }))
        })
        .await?;
        println!(
            "CocoonSet {SET} {} after {:.1?}\n",
            phase.as_str(),
            started.elapsed()
        );
        Ok(())
    }

    /// Prints, and requires, the `<vm>:hibernate` tag of every VM of the set.
    async fn show_snapshots(&self) -> anyhow::Result<()> {
        let selector = ListParams::default().labels(&format!("{}={SET}", names::LABEL_SET));
        let mut vms: Vec<String> = self
            .pods
            .list(&selector)
            .await?
            .items
            .iter()
            .filter_map(|p| cocoon::pods::state::vm_name(p).map(str::to_owned))
            .collect();
        vms.sort();
        anyhow::ensure!(!vms.is_empty(), "the suspended set has no pods naming a VM");
        println!("\nsnapshots in the registry {}:", self.registry);
        let mut missing = Vec::new();
        for vm in &vms {
            let tag = names::TAG_HIBERNATE;
            let present = testenv::registry::tag_exists(&self.registry, None, vm, tag).await?;
            println!(
                "  {vm}:{tag}  {}",
                if present { "present" } else { "MISSING" }
            );
            if !present {
                missing.push(vm.as_str());
            }
        }
        anyhow::ensure!(
            missing.is_empty(),
            "no :hibernate tag for {}",
            missing.join(", ")
        );
        Ok(())
    }
}

fn apply_sample() -> anyhow::Result<()> {
    let sample = deploy_dir("cocoon").join("samples/cocoonset-demo.yaml");
    let file = if sample.exists() {
        sample
    } else {
        let own = std::env::temp_dir().join("cocoon-demo-cocoonset.yaml");
        std::fs::write(&own, FALLBACK_SET)?;
        own
    };
    println!("kubectl -n {DEMO_NAMESPACE} apply -f {}", file.display());
    kubectl(&[
        "-n",
        DEMO_NAMESPACE,
        "apply",
        "-f",
        &file.display().to_string(),
    ])
}

fn set_suspend(suspend: bool) -> anyhow::Result<()> {
    let patch = format!("{{\"spec\":{{\"suspend\":{suspend}}}}}");
    kubectl(&[
        "-n",
        DEMO_NAMESPACE,
        "patch",
        "cset",
        SET,
        "--type=merge",
        "-p",
        &patch,
    ])
}

fn show_set() -> anyhow::Result<()> {
    kubectl(&["-n", DEMO_NAMESPACE, "get", "cocoonsets,pods", "-o", "wide"])
}

/// The pods' VM names and the lifecycle state vk-cocoon (the simulator) reports.
fn show_lifecycle() -> anyhow::Result<()> {
    let column = |title: &str, key: &str| {
        format!("{title}:.metadata.annotations.{}", key.replace('.', "\\."))
    };
    let columns = [
        "POD:.metadata.name".to_owned(),
        column("VM", names::ANN_VM_NAME),
        column("HIBERNATE", names::ANN_HIBERNATE),
        column("LIFECYCLE-STATE", names::ANN_LIFECYCLE_STATE),
    ];
    println!(
        "\nkubectl -n {DEMO_NAMESPACE} get pods -o custom-columns=… (annotations {})",
        names::ANN_LIFECYCLE_STATE
    );
    kubectl(&[
        "-n",
        DEMO_NAMESPACE,
        "get",
        "pods",
        "-l",
        &format!("{}={SET}", names::LABEL_SET),
        "-o",
        &format!("custom-columns={}", columns.join(",")),
    ])
}
