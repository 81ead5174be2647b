//! `kubectl-redis`, the kubectl plugin for RedisClusters.
//!
//! Contract: [`main_with`] parses the arguments (without the program name), connects like
//! kubectl (`--kubeconfig`, `--context`, `-n`; [`kit::plugin::kubeconfig`]) and runs one
//! command, writing its output to `out`; a failure is a [`PluginError`] whose message is one
//! line naming the object involved (the binary prints `error: …` and exits 1). Commands:
//! - `status CLUSTER`: [`decide::status_report`] from the cluster and its RedisBackups.
//! - `promote CLUSTER INSTANCE`: after [`decide::promotable`], sets the cluster's
//!   `status.targetPrimary` (and `targetPrimaryTimestamp`), the durable intent the cluster
//!   controller carries out as a switchover; guarded by the cluster's `resourceVersion`.
//! - `fence on|off CLUSTER INSTANCE`: edits `redis.io/fencedInstances` ([`decide::fenced`]),
//!   guarded by `resourceVersion` so a concurrent edit is never lost.
//! - `hibernate on|off CLUSTER`: sets `redis.io/hibernation` to `on`/`off`.
//! - `restart CLUSTER INSTANCE`: deletes the instance's pod (gracefully); the operator
//!   recreates it with the same name and data.
//! - `backup CLUSTER`: creates a RedisBackup ([`decide::backup`]) named `--name` or
//!   `<cluster>-<UTC yyyymmddhhmmss>`.
//! - `cli CLUSTER [--instance I] [ARGS…]`: runs `redis-cli` in the instance's pod (default:
//!   the current primary) through `kubectl exec` ([`decide::cli_argv`]).

pub mod decide;

use std::io::Write;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Pod;
use kit::plugin::kubeconfig::{GlobalFlags, Session};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::crd::{
    AzureBlobDestination, BackupDestination, BackupMethod, BackupTarget, RedisBackup, RedisCluster,
    S3Destination,
};
use crate::names;

pub use kit::plugin::PluginError;

/// The command line of `kubectl redis`.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl-redis",
    bin_name = "kubectl redis",
    version,
    about = "Operate RedisClusters"
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalFlags,
    #[command(subcommand)]
    command: Command,
}

/// `on` or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// Turn it on.
    On,
    /// Turn it off.
    Off,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The cluster's phase, primary, backups and conditions, and each instance's role,
    /// readiness, replication offset, lag and link.
    Status {
        /// The RedisCluster.
        cluster: String,
    },
    /// Switches the primary over to INSTANCE (sets status.targetPrimary).
    Promote {
        /// The RedisCluster.
        cluster: String,
        /// The instance (pod name) to promote.
        instance: String,
    },
    /// Fences (stops redis-server in) or unfences an instance.
    Fence {
        /// on or off.
        switch: Switch,
        /// The RedisCluster.
        cluster: String,
        /// The instance (pod name).
        instance: String,
    },
    /// Hibernates the cluster (deletes its pods, keeps its data) or wakes it.
    Hibernate {
        /// on or off.
        switch: Switch,
        /// The RedisCluster.
        cluster: String,
    },
    /// Restarts an instance by deleting its pod; the operator recreates it.
    Restart {
        /// The RedisCluster.
        cluster: String,
        /// The instance (pod name).
        instance: String,
    },
    /// Creates a RedisBackup of the cluster.
    Backup(BackupArgs),
    /// Runs redis-cli in an instance's pod (default: the primary), authenticated.
    Cli {
        /// The RedisCluster.
        cluster: String,
        /// The instance (pod name); default the current primary.
        #[arg(long)]
        instance: Option<String>,
        /// Arguments passed to redis-cli.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(clap::Args, Debug)]
struct BackupArgs {
    /// The RedisCluster.
    cluster: String,
    /// The RedisBackup's name (default `<cluster>-<UTC yyyymmddhhmmss>`).
    #[arg(long)]
    name: Option<String>,
    /// `primary` or `prefer-replica`.
    #[arg(long, default_value = "prefer-replica", value_parser = parse_target)]
    target: BackupTarget,
    /// `rdb` or `aof`.
    #[arg(long, default_value = "rdb", value_parser = parse_method)]
    method: BackupMethod,
    /// S3 bucket.
    #[arg(long, conflicts_with = "azure_container")]
    s3_bucket: Option<String>,
    /// S3 key prefix.
    #[arg(long, default_value = "")]
    s3_path: String,
    /// S3 endpoint (path-style), for S3-compatible stores.
    #[arg(long, default_value = "")]
    s3_endpoint: String,
    /// S3 region.
    #[arg(long, default_value = "")]
    s3_region: String,
    /// Azure Blob container.
    #[arg(long)]
    azure_container: Option<String>,
    /// Azure blob name prefix.
    #[arg(long, default_value = "")]
    azure_path: String,
    /// Azure storage account.
    #[arg(long, default_value = "")]
    azure_account: String,
    /// Azure Blob endpoint.
    #[arg(long, default_value = "")]
    azure_endpoint: String,
}

fn parse_target(s: &str) -> Result<BackupTarget, String> {
    serde_json::from_value(json!(s)).map_err(|_| format!("{s:?}: use primary or prefer-replica"))
}

fn parse_method(s: &str) -> Result<BackupMethod, String> {
    serde_json::from_value(json!(s)).map_err(|_| format!("{s:?}: use rdb or aof"))
}

impl BackupArgs {
    fn destination(&self) -> BackupDestination {
        BackupDestination {
            s3: self.s3_bucket.as_ref().map(|b| S3Destination {
                bucket: b.clone(),
                path: self.s3_path.clone(),
                endpoint: self.s3_endpoint.clone(),
                region: self.s3_region.clone(),
            }),
            azure: self.azure_container.as_ref().map(|c| AzureBlobDestination {
                container: c.clone(),
                path: self.azure_path.clone(),
                account_name: self.azure_account.clone(),
                endpoint: self.azure_endpoint.clone(),
            }),
        }
    }
}

/// Runs `kubectl redis ARGS…` (`args` without the program name), writing output to `out`.
pub async fn main_with(
    args: impl IntoIterator<Item = String>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let argv = std::iter::once("kubectl-redis".to_string()).chain(args);
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            write!(out, "{}", e.render())?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let s = cli.global.connect().await.map_err(PluginError::from)?;
    run(cli.command, &cli.global, &s, out).await?;
    Ok(())
}

fn write_out(out: &mut impl Write, text: &str) -> Result<(), PluginError> {
    out.write_all(text.as_bytes()).map_err(|e| PluginError::Io {
        action: "write output".into(),
        source: e,
    })
}

async fn cluster(s: &Session, name: &str) -> Result<RedisCluster, PluginError> {
    Api::<RedisCluster>::namespaced(s.client.clone(), &s.namespace)
        .get(name)
        .await
        .map_err(|e| PluginError::kube("rediscluster", name, &s.namespace, "get", e))
}

// A merge patch of the cluster guarded by the resourceVersion it was read at.
async fn patch_cluster(
    s: &Session,
    rc: &RedisCluster,
    status: bool,
    mut patch: serde_json::Value,
) -> Result<(), PluginError> {
    let name = rc.name_any();
    patch["metadata"]["resourceVersion"] = json!(rc.resource_version());
    let api = Api::<RedisCluster>::namespaced(s.client.clone(), &s.namespace);
    let pp = PatchParams::default();
    let r = if status {
        api.patch_status(&name, &pp, &Patch::Merge(&patch)).await
    } else {
        api.patch(&name, &pp, &Patch::Merge(&patch)).await
    };
    r.map(|_| ())
        .map_err(|e| PluginError::kube("rediscluster", &name, &s.namespace, "patch", e))
}

async fn run(
    cmd: Command,
    global: &GlobalFlags,
    s: &Session,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    match cmd {
        Command::Status { cluster: name } => {
            let rc = cluster(s, &name).await?;
            let backups = Api::<RedisBackup>::namespaced(s.client.clone(), &s.namespace)
                .list(&ListParams::default())
                .await
                .map_err(|e| PluginError::Api {
                    action: format!("list redisbackups in namespace {:?}", s.namespace),
                    source: e,
                })?
                .items
                .into_iter()
                .filter(|b| b.spec.cluster_name == name)
                .collect::<Vec<_>>();
            write_out(out, &decide::status_report(&rc, &backups))
        }
        Command::Promote {
            cluster: name,
            instance,
        } => {
            let rc = cluster(s, &name).await?;
            decide::promotable(&rc, &instance).map_err(PluginError::Refused)?;
            let now = jiff::Timestamp::now().to_string();
            patch_cluster(
                s,
                &rc,
                true,
                json!({"status": {"targetPrimary": instance, "targetPrimaryTimestamp": now}}),
            )
            .await?;
            write_out(
                out,
                &format!("rediscluster/{name}: switchover to {instance} requested\n"),
            )
        }
        Command::Fence {
            switch,
            cluster: name,
            instance,
        } => {
            let rc = cluster(s, &name).await?;
            let current = rc.annotations().get(names::ANN_FENCED_INSTANCES).cloned();
            let next = decide::fenced(current.as_deref(), &instance, switch == Switch::On)
                .map_err(PluginError::Refused)?;
            patch_cluster(
                s,
                &rc,
                false,
                json!({"metadata": {"annotations": {names::ANN_FENCED_INSTANCES: next}}}),
            )
            .await?;
            let done = if switch == Switch::On {
                "fenced"
            } else {
                "unfenced"
            };
            write_out(out, &format!("rediscluster/{name}: {instance} {done}\n"))
        }
        Command::Hibernate {
            switch,
            cluster: name,
        } => {
            let rc = cluster(s, &name).await?;
            let value = if switch == Switch::On { "on" } else { "off" };
            patch_cluster(
                s,
                &rc,
                false,
                json!({"metadata": {"annotations": {names::ANN_HIBERNATION: value}}}),
            )
            .await?;
            write_out(out, &format!("rediscluster/{name}: hibernation {value}\n"))
        }
        Command::Restart {
            cluster: name,
            instance,
        } => {
            let pods = Api::<Pod>::namespaced(s.client.clone(), &s.namespace);
            let pod = pods
                .get(&instance)
                .await
                .map_err(|e| PluginError::kube("pod", &instance, &s.namespace, "get", e))?;
            if pod.labels().get(names::LABEL_CLUSTER) != Some(&name) {
                return Err(PluginError::Refused(format!(
                    "pod {instance:?} is not an instance of rediscluster {name:?}"
                )));
            }
            let dp = DeleteParams {
                preconditions: pod.uid().map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            pods.delete(&instance, &dp)
                .await
                .map_err(|e| PluginError::kube("pod", &instance, &s.namespace, "delete", e))?;
            write_out(
                out,
                &format!("rediscluster/{name}: {instance} restarting (pod deleted)\n"),
            )
        }
        Command::Backup(a) => {
            cluster(s, &a.cluster).await?;
            let name = a.name.clone().unwrap_or_else(|| {
                format!(
                    "{}-{}",
                    a.cluster,
                    jiff::Timestamp::now().strftime("%Y%m%d%H%M%S")
                )
            });
            let b = decide::backup(&a.cluster, &name, a.target, a.method, a.destination())
                .map_err(PluginError::Refused)?;
            Api::<RedisBackup>::namespaced(s.client.clone(), &s.namespace)
                .create(&PostParams::default(), &b)
                .await
                .map_err(|e| PluginError::kube("redisbackup", &name, &s.namespace, "create", e))?;
            write_out(out, &format!("redisbackup/{name} created\n"))
        }
        Command::Cli {
            cluster: name,
            instance,
            args,
        } => {
            let rc = cluster(s, &name).await?;
            let pod = match instance {
                Some(i) => i,
                None => rc
                    .status
                    .as_ref()
                    .map(|st| st.current_primary.clone())
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| {
                        PluginError::Refused(format!(
                            "rediscluster {name:?} has no current primary; pass --instance"
                        ))
                    })?,
            };
            let auth = rc
                .spec
                .auth_secret
                .as_ref()
                .map_or_else(|| format!("{name}-auth"), |r| r.name.clone());
            let mut kubectl = std::process::Command::new("kubectl");
            if let Some(k) = &global.kubeconfig {
                kubectl.arg("--kubeconfig").arg(k);
            }
            if let Some(c) = &global.context {
                kubectl.args(["--context", c]);
            }
            let status = kubectl
                .args(decide::cli_argv(&s.namespace, &pod, &auth, &args))
                .status()
                .map_err(|e| PluginError::Io {
                    action: "run kubectl exec".into(),
                    source: e,
                })?;
            if status.success() {
                Ok(())
            } else {
                Err(PluginError::Refused(format!(
                    "redis-cli in pod {pod:?} ended with {status}"
                )))
            }
        }
    }
}
