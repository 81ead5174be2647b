//! The `stellar` binary's subcommands (like upstream's controller-manager, transport
//! controller, klusterlet work agent, status add-on and `clusteradm`, in one binary):
//!
//! - `controller-manager`: against a WDS and its ITS, installs the CRDs each needs (as
//!   upstream's controller-manager does in the WDS) and runs the chosen controllers
//!   (`binding`, `transport`, `status`, `hub`; all by default).
//! - `agent`: the work agent and status add-on of one WEC.
//! - `register`: registers (or relabels) a WEC in the ITS inventory.
//! - `where`: where each WDS object landed (per Binding and WEC: its ManifestWork, `Applied`,
//!   `Available`; `Pending` before delivery).
//!
//! Start-up errors print one line (`kit::cli`); the controllers run until SIGINT/SIGTERM,
//! with `--leader-elect` only while holding their Lease ([`crate::elect`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use serde_json::json;

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
        /// Most workload objects per ManifestWork (upstream's transport flag; its chart's
        /// default 1 names each ManifestWork after the object).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        max_num_wrapped: u32,
        /// Most bytes of object JSON per ManifestWork (upstream's transport flag; OCM's hub
        /// rejects ManifestWorks over 500 KiB).
        #[arg(long, default_value_t = 512_000, value_parser = clap::value_parser!(u32).range(1..))]
        max_size_wrapped: u32,
        #[command(flatten)]
        election: ElectionFlags,
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
        #[command(flatten)]
        election: ElectionFlags,
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
    /// Where each WDS object landed: per Binding and WEC, its ManifestWork and whether the
    /// agent applied it and it is available.
    Where {
        /// Kubeconfig of the ITS.
        #[arg(long)]
        its_kubeconfig: PathBuf,
        /// Kubeconfig of the WDS: also lists objects not delivered yet (`Pending`).
        #[arg(long)]
        wds_kubeconfig: Option<PathBuf>,
        /// The WDS's name (which ManifestWorks are its).
        #[arg(long, default_value = "wds1")]
        wds_name: String,
    },
}

/// Leader election flags (controller-manager: Lease in the WDS; agent: in the WEC).
#[derive(clap::Args, Debug, Clone)]
pub struct ElectionFlags {
    /// Contend for a Lease and act only while holding it, so several replicas can run.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_namespace: String,
    /// Name of the Lease (default `stellar-controller-manager-<WDS name>` or
    /// `stellar-agent-<cluster name>`).
    #[arg(long)]
    pub leader_elect_lease: Option<String>,
    /// Lease duration in seconds: how long a standby waits for a leader that vanished without
    /// releasing (renewal deadline 2/3 of it, retries every 1/7).
    #[arg(long, default_value_t = 15)]
    pub leader_elect_lease_duration: u64,
}

impl ElectionFlags {
    fn election(&self, default_lease: String) -> Option<crate::elect::Election> {
        self.leader_elect.then(|| crate::elect::Election {
            lease: self.leader_elect_lease.clone().unwrap_or(default_lease),
            namespace: self.leader_elect_namespace.clone(),
            lease_duration: Duration::from_secs(self.leader_elect_lease_duration),
        })
    }
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

/// How long [`install_crds`] keeps retrying an API server that answers with errors.
const INSTALL_DEADLINE: Duration = Duration::from_secs(120);

/// Creates or updates `crds` and waits until each is Established. An error from the API server
/// (a conflict, a 5xx, a reset connection) is retried with back-off for up to two minutes: a
/// process that stopped on the first one would restart into the same flaky server.
pub async fn install_crds(
    client: &Client,
    crds: Vec<CustomResourceDefinition>,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + INSTALL_DEADLINE;
    for crd in crds {
        let name = crd.name_any();
        let mut retry = Duration::from_millis(200);
        loop {
            match install_one(&api, &crd).await {
                Ok(()) => break,
                Err(e) if tokio::time::Instant::now() + retry < deadline => {
                    tracing::warn!(crd = %name, error = %format!("{e:#}"), "installing a CRD failed; retrying");
                    tokio::time::sleep(retry).await; // back-off before the next attempt
                    retry = (retry * 2).min(Duration::from_secs(10));
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

async fn install_one(
    api: &Api<CustomResourceDefinition>,
    crd: &CustomResourceDefinition,
) -> anyhow::Result<()> {
    let name = crd.name_any();
    api.patch(
        &name,
        &PatchParams::apply("stellar").force(),
        &Patch::Apply(crd),
    )
    .await
    .with_context(|| format!("installing CRD {name}"))?;
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api.clone(), &name, conditions::is_crd_established()),
    )
    .await
    .map_err(|_| anyhow::anyhow!("CRD {name} not Established within 60s"))?
    .with_context(|| format!("waiting for CRD {name} to be Established"))?;
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
            max_num_wrapped,
            max_size_wrapped,
            election,
        } => {
            let wds = client(&wds_kubeconfig).await?;
            let its = client(&its_kubeconfig).await?;
            let limits = stellar_core::wrap::Limits {
                max_num: max_num_wrapped as usize,
                max_size: max_size_wrapped as usize,
            };
            let election = election.election(format!("stellar-controller-manager-{wds_name}"));
            crate::elect::run(wds.clone(), election, |stop| {
                controller_manager(wds, its, wds_name, api_groups, controllers, limits, stop)
            })
            .await
        }
        Cmd::Agent {
            its_kubeconfig,
            wec_kubeconfig,
            cluster_name,
            election,
        } => {
            let its = client(&its_kubeconfig).await?;
            let wec = client(&wec_kubeconfig).await?;
            let opts = crate::agent::Options {
                hub_hash: crate::agent::hub_hash(&server(&its_kubeconfig)?),
                agent_id: format!("{cluster_name}-stellar-agent"),
                cluster_name: cluster_name.clone(),
            };
            let election = election.election(format!("stellar-agent-{cluster_name}"));
            crate::elect::run(wec.clone(), election, |stop| async move {
                install_crds(&wec, crate::ocm::agent_crds()).await?;
                tracing::info!(cluster = %cluster_name, "agent running");
                tokio::select! {
                    () = stop.cancelled() => Ok(()),
                    r = crate::agent::run(its, wec, opts) => r.context("the agent stopped"),
                }
            })
            .await
        }
        Cmd::Register {
            its_kubeconfig,
            cluster_name,
            labels,
        } => register(&its_kubeconfig, &cluster_name, &labels).await,
        Cmd::Where {
            its_kubeconfig,
            wds_kubeconfig,
            wds_name,
        } => {
            let its = client(&its_kubeconfig).await?;
            let wds = match &wds_kubeconfig {
                Some(p) => Some(client(p).await?),
                None => None,
            };
            let rows = crate::whereis::fetch(wds.as_ref(), &its, &wds_name)
                .await
                .context("reading Bindings and ManifestWorks")?;
            print!("{}", crate::whereis::table(&rows));
            Ok(())
        }
    }
}

async fn controller_manager(
    wds: Client,
    its: Client,
    wds_name: String,
    api_groups: Vec<String>,
    controllers: Vec<String>,
    limits: stellar_core::wrap::Limits,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
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
            limits,
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
    tracing::info!(wds = %wds_name, ?controllers, ?limits, "controller-manager running");
    tokio::select! {
        () = stop.cancelled() => Ok(()),
        Some(r) = tasks.join_next() => r?.context("a controller stopped"),
    }
}

async fn register(
    its_kubeconfig: &Path,
    cluster_name: &str,
    labels: &[String],
) -> anyhow::Result<()> {
    let its = client(its_kubeconfig).await?;
    // Registration may come before the controller-manager ever ran against this ITS (a fresh
    // one): the ManagedCluster kind must be served first.
    install_crds(&its, crate::ocm::hub_crds()).await?;
    let mut l = serde_json::Map::new();
    for kv in labels {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("label {kv:?} is not key=value"))?;
        l.insert(k.into(), json!(v));
    }
    let api: Api<crate::ocm::ManagedCluster> = Api::all(its);
    api.patch(
        cluster_name,
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
