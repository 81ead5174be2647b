//! `cargo xtask demo`: start the local plane and show Flotilla's main job on it. Until an
//! operator lands, that is the plane itself: three zoned nodes and a workload running on them.

use crate::kubectl;

const WORKLOAD: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: hello, namespace: flotilla-demo}
spec:
  replicas: 3
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: hello}}}
      containers: [{name: hello, image: registry.invalid/hello:1}]
"#;

pub fn run() -> anyhow::Result<()> {
    let up = testenv::up()?;
    println!("local control plane {} in {:.1?}", if up.reused { "reused" } else { "started" }, up.took);
    println!("export KUBECONFIG={}\n", testenv::kubeconfig_path().display());
    kubectl(&["get", "nodes", "-L", "topology.kubernetes.io/zone"])?;
    let manifest = std::env::temp_dir().join("flotilla-demo.yaml");
    std::fs::write(&manifest, format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: flotilla-demo}}\n---{WORKLOAD}"))?;
    kubectl(&["apply", "-f", &manifest.display().to_string()])?;
    kubectl(&["-n", "flotilla-demo", "rollout", "status", "deployment/hello", "--timeout=120s"])?;
    kubectl(&["-n", "flotilla-demo", "get", "pods", "-o", "wide"])?;
    println!("\nthe plane keeps running; stop it with: cargo xtask down");
    Ok(())
}
