//! `cargo xtask gen [--check]`: CRD YAML generated from each operator's Rust types, committed
//! under deploy/<operator>/crds/, and a drift check that fails when the two differ.

use std::path::PathBuf;

/// Each operator's CRDs, by deploy directory name. Operators add themselves here.
fn operators() -> Vec<(&'static str, Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>)>{
    vec![
        ("redroid", redroid::crd::crds()),
        ("cocoon", cocoon::crd::crds()),
        ("redis", redis::crd::crds()),
        ("fdb", fdb::crd::crds()),
        ("stellar", stellar::crds()),
    ]
}

fn repo_root() -> PathBuf {
    testenv::workspace_root()
}

pub fn run(check: bool) -> anyhow::Result<()> {
    let ops = operators();
    if ops.is_empty() {
        println!("no operator defines CRDs yet; nothing to generate");
    }
    for (op, crds) in ops {
        let dir = repo_root().join("deploy").join(op).join("crds");
        if check {
            kit::crdgen::check(&dir, &crds)
                .map_err(|d| anyhow::anyhow!("{d}\nrun `cargo xtask gen` and commit"))?;
            println!("{op}: {} CRDs up to date", crds.len());
        } else {
            for f in kit::crdgen::write(&dir, &crds)? {
                println!("wrote {}", f.display());
            }
        }
    }
    Ok(())
}

/// `cargo xtask gen-k8s-facts`: the facts of every Kubernetes type, read from the local plane
/// (started if needed), written to crates/kit/src/k8s_schema_facts.json.
pub fn k8s_facts() -> anyhow::Result<()> {
    testenv::up()?;
    let rt = tokio::runtime::Runtime::new()?;
    let facts = rt.block_on(async {
        let client = testenv::plane::admin_client().await?;
        anyhow::Ok(kit::crdschema::live_facts(&client).await?)
    })?;
    let path = repo_root().join("crates/kit/src/k8s_schema_facts.json");
    std::fs::write(&path, facts.render())?;
    println!(
        "wrote {} ({} Kubernetes types of {}); now run `cargo xtask gen`",
        path.display(),
        facts.types.len(),
        facts.kubernetes
    );
    Ok(())
}
