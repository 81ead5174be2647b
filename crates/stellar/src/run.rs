//! The `stellar` binary's subcommands (like upstream's controller-manager, transport
//! controller, klusterlet work agent, status add-on and `clusteradm`, in one binary):
//!
//! - `controller-manager`: against a WDS and its ITS, installs the CRDs each needs (as
//!   upstream's controller-manager does in the WDS) and runs the chosen controllers
//!   (`binding`, `transport`, `status`, `hub`; all by default).
//! - `agent`: the work agent and status add-on of one WEC.
//! - `register`: registers (or relabels) a WEC in the ITS inventory.
//! - `where`: where each object of each Binding landed (ManifestWorks and their `Applied`).
//!
//! Start-up errors print one line (`kit::cli`); the controllers run until SIGINT/SIGTERM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

use crate::names;
use crate::ocm::ManifestWork;

/// Flags of `stellar`.
#[derive(Parser, Debug)]
#[command(
    name = "stellar",
    about = "KubeStellar-compatible multi-cluster delivery"
)]
pub struct Flags {
    /// Log filter (`info`, `stellar=debug`, …); `RUST_LOG` when absent.
    #[arg(long, global = true)]
    pub log: Option<String>,
    /// What to run.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Binding, transport and status controllers and the ITS hub duties for one WDS.
    ControllerManager {
        /// Kubeconfig of the WDS.
        #[arg(long)]
        wds_kubeconfig: PathBuf,
        /// Kubeconfig of the ITS.
        #[arg(long)]
        its_kubeconfig: PathBuf,
        /// The WDS's name (ManifestWork names and labels).
        #[arg(long, default_value = "wds1")]
        wds_name: String,
        /// Only downsync these API groups (comma-separated; empty: all).
        #[arg(long, value_delimiter = ',')]
        api_groups: Vec<String>,
        /// Controllers to run (comma-separated): binding, transport, status, hub.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "binding,transport,status,hub"
        )]
        controllers: Vec<String>,
    },
    /// The work agent and status add-on of one WEC.
    Agent {
        /// Kubeconfig of the ITS (the hub).
        #[arg(long)]
        its_kubeconfig: PathBuf,
        /// Kubeconfig of the WEC.
        #[arg(long)]
        wec_kubeconfig: PathBuf,
        /// The WEC's name (its ManagedCluster and mailbox namespace).
        #[arg(long)]
        cluster_name: String,
    },
    /// Registers a WEC in the ITS inventory (creates or relabels its ManagedCluster).
    Register {
        /// Kubeconfig of the ITS.
        #[arg(long)]
        its_kubeconfig: PathBuf,
        /// The WEC's name.
        #[arg(long)]
        cluster_name: String,
        /// Labels, `key=value` (repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
    },
    /// Where each object of each Binding landed.
    Where {
        /// Kubeconfig of the ITS.
        #[arg(long)]
        its_kubeconfig: PathBuf,
    },
}

async fn client(path: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading {}", path.display()))?;
    Client::try_from(cfg).context("building the Kubernetes client")
}

fn server(path: &Path) -> anyhow::Result<String> {
    let kc = Kubeconfig::read_from(path)?;
    kc.clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .ok_or_else(|| anyhow::anyhow!("{} names no server", path.display()))
}

/// Creates or updates `crds` and waits until each is Established.
pub async fn install_crds(
    client: &Client,
    crds: Vec<CustomResourceDefinition>,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.name_any();
        api.patch(
            &name,
            &PatchParams::apply("stellar").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("installing CRD {name}"))?;
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .map_err(|_| anyhow::anyhow!("CRD {name} not Established within 60s"))??;
    }
    Ok(())
}

async fn until_signal() -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    Ok(())
}

/// Runs `flags`.
pub async fn run(flags: Flags) -> anyhow::Result<()> {
    let filter = kit::telemetry::filter(
        flags.log.as_deref(),
        std::env::var("RUST_LOG").ok().as_deref(),
    )?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match flags.cmd {
        Cmd::ControllerManager {
            wds_kubeconfig,
            its_kubeconfig,
            wds_name,
            api_groups,
            controllers,
        } => {
            let wds = client(&wds_kubeconfig).await?;
            let its = client(&its_kubeconfig).await?;
            install_crds(&wds, crate::api::control_crds()).await?;
            let mut hub = crate::ocm::hub_crds();
            hub.push(crate::api::work_status_crd());
            install_crds(&its, hub).await?;
            let on = |c: &str| controllers.iter().any(|x| x == c);
            let mut tasks = tokio::task::JoinSet::new();
            if on("hub") {
                let its = its.clone();
                tasks.spawn(async move {
                    crate::hub::run(its).await;
                    Ok(())
                });
            }
            if on("transport") {
                let opts = crate::transport::Options {
                    wds_name: wds_name.clone(),
                };
                tasks.spawn(crate::transport::run(wds.clone(), its.clone(), opts));
            }
            if on("status") {
                let opts = crate::status::Options {
                    wds_name: wds_name.clone(),
                };
                tasks.spawn(crate::status::run(wds.clone(), its.clone(), opts));
            }
            if on("binding") {
                let opts = crate::binding::Options { api_groups };
                tasks.spawn(crate::binding::run(wds, its, opts));
            }
            tracing::info!(wds = %wds_name, ?controllers, "controller-manager running");
            tokio::select! {
                r = until_signal() => r,
                Some(r) = tasks.join_next() => r?.context("a controller stopped"),
            }
        }
        Cmd::Agent {
            its_kubeconfig,
            wec_kubeconfig,
            cluster_name,
        } => {
            let its = client(&its_kubeconfig).await?;
            let wec = client(&wec_kubeconfig).await?;
            install_crds(&wec, crate::ocm::agent_crds()).await?;
            let opts = crate::agent::Options {
                hub_hash: crate::agent::hub_hash(&server(&its_kubeconfig)?),
                agent_id: format!("{cluster_name}-stellar-agent"),
                cluster_name: cluster_name.clone(),
            };
            tracing::info!(cluster = %cluster_name, "agent running");
            tokio::select! {
                r = until_signal() => r,
                r = crate::agent::run(its, wec, opts) => r.context("the agent stopped"),
            }
        }
        Cmd::Register {
            its_kubeconfig,
            cluster_name,
            labels,
        } => {
            let its = client(&its_kubeconfig).await?;
            let mut l = serde_json::Map::new();
            for kv in &labels {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("label {kv:?} is not key=value"))?;
                l.insert(k.into(), json!(v));
            }
            let api: Api<crate::ocm::ManagedCluster> = Api::all(its);
            api.patch(
                &cluster_name,
                &PatchParams::apply("stellar-register"),
                &Patch::Apply(json!({
                    "apiVersion": "cluster.open-cluster-management.io/v1",
                    "kind": "ManagedCluster",
                    "metadata": {"name": cluster_name, "labels": l},
                    "spec": {"hubAcceptsClient": true},
                })),
            )
            .await
            .with_context(|| format!("registering {cluster_name}"))?;
            println!("managedcluster/{cluster_name} registered");
            Ok(())
        }
        Cmd::Where { its_kubeconfig } => {
            let its = client(&its_kubeconfig).await?;
            let api: Api<ManifestWork> = Api::all(its);
            let mws = api
                .list(&ListParams::default().labels(names::BINDING_LABEL))
                .await
                .context("listing ManifestWorks")?;
            println!("{:<24} {:<12} {:<40} APPLIED", "BINDING", "WEC", "OBJECT");
            for mw in mws.items {
                let binding = mw
                    .labels()
                    .get(names::BINDING_LABEL)
                    .cloned()
                    .unwrap_or_default();
                let applied = mw
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Applied"))
                    .map(|c| c.status.clone())
                    .unwrap_or_else(|| "Unknown".into());
                for m in &mw.spec.workload.manifests {
                    let ns = m["metadata"]["namespace"].as_str().unwrap_or_default();
                    let obj = format!(
                        "{}/{}{}",
                        m["kind"].as_str().unwrap_or_default(),
                        if ns.is_empty() {
                            String::new()
                        } else {
                            format!("{ns}/")
                        },
                        m["metadata"]["name"].as_str().unwrap_or_default()
                    );
                    println!(
                        "{:<24} {:<12} {:<40} {applied}",
                        binding,
                        mw.namespace().unwrap_or_default(),
                        obj
                    );
                }
            }
            Ok(())
        }
    }
}
