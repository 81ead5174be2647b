//! The stellar part of `cargo xtask demo` (also `cargo xtask demo --only stellar`): start (or
//! reuse) the spaces (a WDS, an ITS and two WECs, each its own kube-apiserver), run the real
//! `stellar` binary as the controller-manager and as one agent per WEC (child processes,
//! stopped at the end), register the WECs, apply a Deployment and a BindingPolicy to the WDS,
//! and show the Deployment running on both WECs with its status back in the WDS.

use std::process::Command;
use std::time::{Duration, Instant};

use testenv::spaces::{self, Topology};

use crate::demo_support::{Process, build_binary};

const WECS: [&str; 2] = ["wec1", "wec2"];
const NAMESPACE: &str = "stellar-demo";

const MANIFESTS: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: stellar-demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: nginx, namespace: stellar-demo, labels: {app.kubernetes.io/name: nginx}}
spec:
  replicas: 2
  selector: {matchLabels: {app: nginx}}
  template:
    metadata: {labels: {app: nginx}}
    spec: {containers: [{name: nginx, image: nginx}]}
---
apiVersion: control.kubestellar.io/v1alpha1
kind: BindingPolicy
metadata: {name: nginx-demo}
spec:
  clusterSelectors:
  - matchLabels: {location-group: edge}
    matchExpressions: [{key: name, operator: In, values: [wec1, wec2]}]
  downsync:
  - {apiGroup: "", resources: [namespaces], objectNames: [stellar-demo]}
  - objectSelectors: [{matchLabels: {app.kubernetes.io/name: nginx}}]
    wantMultiWECReportedState: true
"#;

fn kubectl(space: &str, args: &[&str]) -> anyhow::Result<String> {
    let state = spaces::read_state().ok_or_else(|| anyhow::anyhow!("no spaces"))?;
    let out = Command::new(state.bin_dir.join("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            spaces::kubeconfig(space).display()
        ))
        .args(args)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl {} on {space} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn available(space: &str) -> Option<String> {
    kubectl(
        space,
        &[
            "-n",
            NAMESPACE,
            "get",
            "deploy",
            "nginx",
            "-o",
            "jsonpath={.status.availableReplicas}",
        ],
    )
    .ok()
}

pub fn run() -> anyhow::Result<()> {
    println!("\n==> stellar: KubeStellar across separate control planes");
    let up = spaces::up(&Topology::standard(WECS.len()))?;
    println!(
        "spaces {} in {:.1?} (cargo xtask spaces status shows them)",
        if up.reused { "reused" } else { "started" },
        up.took
    );
    let bin = build_binary("stellar", "stellar")?;
    let kc = |s: &str| spaces::kubeconfig(s).display().to_string();
    for wec in WECS {
        let status = Command::new(&bin)
            .args([
                "register",
                "--its-kubeconfig",
                &kc("its1"),
                "--cluster-name",
                wec,
            ])
            .args([
                "--label",
                "location-group=edge",
                "--label",
                &format!("name={wec}"),
            ])
            .status()?;
        anyhow::ensure!(status.success(), "stellar register {wec} failed");
    }
    let mut procs = Vec::new();
    let mut cm = Command::new(&bin);
    cm.args(["controller-manager", "--wds-kubeconfig", &kc("wds1")])
        .args(["--its-kubeconfig", &kc("its1")]);
    procs.push(Process::spawn("stellar-controller-manager", cm)?);
    for wec in WECS {
        let mut agent = Command::new(&bin);
        agent
            .args([
                "agent",
                "--its-kubeconfig",
                &kc("its1"),
                "--wec-kubeconfig",
                &kc(wec),
            ])
            .args(["--cluster-name", wec]);
        procs.push(Process::spawn(&format!("stellar-agent-{wec}"), agent)?);
    }
    // The controller-manager installs the CRDs; wait for the BindingPolicy kind.
    let deadline = Instant::now() + Duration::from_secs(120);
    while kubectl(
        "wds1",
        &["get", "crd", "bindingpolicies.control.kubestellar.io"],
    )
    .is_err()
    {
        for p in &mut procs {
            p.ensure_alive()?;
        }
        anyhow::ensure!(Instant::now() < deadline, "the stellar CRDs did not appear");
        std::thread::sleep(Duration::from_millis(200)); // polling a condition with a deadline
    }
    kubectl(
        "wds1",
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/bindingpolicies.control.kubestellar.io",
        ],
    )?;
    let manifest = std::env::temp_dir().join("stellar-demo.yaml");
    std::fs::write(&manifest, MANIFESTS)?;
    let started = Instant::now();
    print!(
        "{}",
        kubectl("wds1", &["apply", "-f", &manifest.display().to_string()])?
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        for p in &mut procs {
            p.ensure_alive()?;
        }
        let on_wecs = WECS.iter().all(|w| available(w).as_deref() == Some("2"));
        if on_wecs && available("wds1").as_deref() == Some("2") {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Deployment did not converge; see the logs in {}",
            procs[0]
                .log
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200)); // polling a condition with a deadline
    }
    println!(
        "\nthe Deployment runs on {} and its status is back in the WDS after {:.1?}:",
        WECS.join(" and "),
        started.elapsed()
    );
    for space in ["wds1", WECS[0], WECS[1]] {
        println!("--- {space}");
        print!(
            "{}",
            kubectl(
                space,
                &["-n", NAMESPACE, "get", "deploy", "nginx", "--show-labels"]
            )?
        );
    }
    println!("--- where it landed (stellar where)");
    let out = Command::new(&bin)
        .args(["where", "--its-kubeconfig", &kc("its1")])
        .args(["--wds-kubeconfig", &kc("wds1")])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text
        .lines()
        .filter(|l| l.starts_with("NAMESPACE") || l.split_whitespace().nth(2) == Some("nginx-demo"))
    {
        println!("{line}");
    }
    println!("(stellar stops now; the spaces keep running: cargo xtask spaces down stops them)");
    drop(procs);
    Ok(())
}
