//! `kubectl-fdb`, the kubectl plugin for FoundationDBClusters, with upstream's command names,
//! flags and output.
//!
//! Contract: [`main_with`] parses the arguments (without the program name), connects like
//! kubectl (`--kubeconfig`, `--context`, `-n`; [`kit::plugin::kubeconfig`]) and runs one
//! command; `✔` lines and command output go to `out`, `⚠`/`✖` lines and notes to `err`
//! (as upstream), a confirmation (`-w/--wait`, default on) is read from `input`. A failure is
//! a [`PluginError`] whose message names the object involved (the binary prints `error: …`
//! and exits 1). Every mutating command only edits the cluster's spec or deletes pods; the
//! operator does the work. Commands:
//! - `analyze CLUSTER… | --all-clusters`: [`decide::analyze`]; with `--auto-fix`, the groups
//!   it names are added to `processGroupsToRemove` and long-failed pods deleted; with
//!   `--analyze-status`, the processes' messages in `status json`
//!   ([`analyze_status::analyze_status`]), restarted one by one with `--auto-fix`.
//! - `deprecation [CLUSTER…]`: each spec against its normalised form ([`deprecation`]).
//! - `recover-multi-region-cluster CLUSTER`: upstream's forced recovery after the loss of a
//!   coordinator majority ([`recover`], steps in `recover_run`).
//! - `get configuration CLUSTER…`: the `configure` arguments ([`decide::configuration`]);
//!   with `--update`, the spec's database configuration (failed over with `--fail-over`)
//!   written back into each cluster's spec after a confirmed diff
//!   ([`decide::updated_configuration`]).
//! - `get exclusion-status CLUSTER`: the ongoing exclusions every `--interval` until none is
//!   left ([`decide::exclusions`]), from `status json`.
//! - `remove process-groups -c CLUSTER [IDS…]`: adds the selected groups
//!   ([`decide::select`]) to the removal list ([`decide::removal_list`]), guarded by the
//!   cluster's `resourceVersion`. Without `-c`, here and in `restart`, `buggify` and `cordon`,
//!   the named pods (the pods on the nodes) are grouped by their `-l/--cluster-label`
//!   ([`decide::group_by_cluster`]) and each cluster is changed in turn.
//! - `cordon -c CLUSTER NODE… | --node-selector`: the same for every group with a pod on
//!   those nodes.
//! - `restart -c CLUSTER [PODS…]`: restarts the selected groups' fdbserver processes.
//! - `buggify crash-loop|no-schedule -c CLUSTER [PODS…] [--clear|--clean]`: edits
//!   `spec.buggify.crashLoopContainers` (of `--container-name`) or `noSchedule`
//!   ([`decide::edit_crash_loop`], [`decide::edit_list`]); `buggify empty-monitor-conf -c
//!   CLUSTER [--set-value=false]` sets `emptyMonitorConf`. Each guarded by the cluster's
//!   `resourceVersion`.
//! - `update connection-string -c CLUSTER CS`: sets `status.connectionString` (parsed first).
//! - `fix-coordinator-ips -c CLUSTER [--dry-run]`: [`decide::fix_coordinator_ips`], then the
//!   new connection string written into every running pod's cluster file (`kubectl exec`,
//!   failures reported, as upstream) and into `status.connectionString`.
//! - `exec -c CLUSTER [-- CMD…]`: `kubectl exec` (stdin, and a TTY when stdin is one) into the
//!   main container of a random running pod of the cluster; `bash` without a command.
//! - `version [--client-only]`: the plugin's and the operator Deployment's versions.
//!
//! `status json` and restarts go through `kubectl exec` into one of the cluster's running
//! pods, as upstream does, unless `--fdb-binary-dir` (or `$FDB_BINARY_DIR`) names local
//! FoundationDB binaries: then the plugin runs them itself against the cluster's connection
//! string through the operator's own admin client (restarts are then `fdbcli kill`).

pub mod analyze_status;
pub mod decide;
pub mod deprecation;
pub mod recover;
mod recover_run;
mod run_status;

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kit::plugin::kubeconfig::{GlobalFlags, Session};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::admin::FdbStatus;
use crate::admin::cli::BinaryConfig;
use crate::cluster::{CliClients, DatabaseClients};
use crate::crd::{FoundationDBCluster, ProcessAddress, ProcessGroupId};
use decide::{AnalyzeOptions, Mark, Selection};

pub use kit::plugin::PluginError;

/// The command line of `kubectl fdb`.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl-fdb",
    bin_name = "kubectl fdb",
    version,
    about = "kubectl plugin for the FoundationDB operator"
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalFlags,
    /// Name of the Deployment for the operator.
    #[arg(
        short = 'o',
        long,
        global = true,
        default_value = "fdb-kubernetes-operator-controller-manager"
    )]
    operator_name: String,
    /// Accepted for compatibility; this plugin never asks the network for a newer release.
    #[arg(long, global = true, default_value_t = true, action = clap::ArgAction::Set)]
    version_check: bool,
    /// Ask for confirmation before any change.
    #[arg(short = 'w', long, global = true, default_value_t = true, action = clap::ArgAction::Set)]
    wait: bool,
    /// Seconds to sleep between sequential operations.
    #[arg(short = 'z', long, global = true, default_value_t = 0)]
    sleep: u16,
    /// Run FoundationDB's binaries from this directory (`<dir>/<major.minor>/fdbcli`) against
    /// the cluster's connection string instead of `kubectl exec` into one of its pods.
    #[arg(long, global = true, env = "FDB_BINARY_DIR", value_name = "DIR")]
    fdb_binary_dir: Option<PathBuf>,
    /// The kubectl that `exec`, `restart`, `fix-coordinator-ips` and `status json` run (a
    /// Flotilla addition).
    #[arg(
        long,
        global = true,
        env = "KUBECTL",
        default_value = "kubectl",
        value_name = "PATH"
    )]
    kubectl: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Analyze if the given clusters have any issues.
    Analyze(AnalyzeArgs),
    /// Checks the given cluster(s) for deprecated settings.
    Deprecation(DeprecationArgs),
    /// Recover a multi-region cluster if a majority of coordinators is lost permanently.
    RecoverMultiRegionCluster {
        /// The cluster.
        cluster: String,
    },
    /// Get information about a cluster.
    Get {
        #[command(subcommand)]
        what: GetCommand,
    },
    /// Remove process groups from a cluster.
    Remove {
        #[command(subcommand)]
        what: RemoveCommand,
    },
    /// Adds all process groups that run on the given nodes to the remove list of the cluster.
    Cordon(CordonArgs),
    /// Restarts process(es) in a given FDB cluster.
    Restart(RestartArgs),
    /// Update the resource of a cluster.
    Update {
        #[command(subcommand)]
        what: UpdateCommand,
    },
    /// Runs a command on a container in an FDB cluster.
    Exec {
        /// The cluster.
        #[arg(short = 'c', long = "fdb-cluster")]
        cluster: String,
        /// The command (after `--`); `bash` when none.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Update the coordinator IPs in the cluster file.
    FixCoordinatorIps {
        /// The cluster.
        #[arg(short = 'c', long = "fdb-cluster")]
        cluster: String,
        /// Print the new connection string without updating it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Subcommand to add process groups to buggify list for a given cluster.
    Buggify {
        #[command(subcommand)]
        what: BuggifyCommand,
    },
    /// The version of kubectl-fdb and of the running operator.
    Version {
        /// Print the plugin's version only.
        #[arg(long)]
        client_only: bool,
        /// The container name in the operator's Deployment.
        #[arg(long, default_value = "manager")]
        container_name: String,
    },
}

#[derive(Args, Debug)]
struct AnalyzeArgs {
    /// The clusters.
    clusters: Vec<String>,
    /// Try to fix the issues found (replace process groups, delete pods).
    #[arg(long)]
    auto_fix: bool,
    /// Analyze every cluster in the namespace.
    #[arg(long)]
    all_clusters: bool,
    /// Accepted for compatibility; colours are never used.
    #[arg(long)]
    no_color: bool,
    /// A process-group condition not to report (repeatable).
    #[arg(long = "ignore-condition")]
    ignore_condition: Vec<String>,
    /// Count the process groups marked for removal instead of listing them.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    ignore_removals: bool,
    /// Also analyze the machine-readable status of the clusters.
    #[arg(long)]
    analyze_status: bool,
}

#[derive(Args, Debug)]
struct DeprecationArgs {
    /// The clusters (every cluster in the namespace when none).
    clusters: Vec<String>,
    /// Apply the defaults of the next major version rather than those of this one.
    #[arg(long)]
    use_future_defaults: bool,
    /// Only carry deprecated fields over; `=false` also writes out unchanged defaults.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    only_show_changes: bool,
    /// Print the normalised cluster spec instead of a diff.
    #[arg(long)]
    show_cluster_spec: bool,
}

#[derive(Subcommand, Debug)]
enum GetCommand {
    /// The configuration string based on the database configuration of the cluster spec.
    Configuration {
        /// The clusters.
        clusters: Vec<String>,
        /// Swap the priorities of the two main data centers (an HA fail-over).
        #[arg(long)]
        fail_over: bool,
        /// Write the configuration into the cluster spec instead of printing it.
        #[arg(long)]
        update: bool,
    },
    /// The exclusion status of every excluded process.
    ExclusionStatus {
        /// The cluster.
        cluster: String,
        /// Also print processes that are fully excluded.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        ignore_fully_excluded: bool,
        /// How often to read the status again (`30s`, `1m`).
        #[arg(long, default_value = "1m", value_parser = parse_duration)]
        interval: Duration,
    },
}

#[derive(Subcommand, Debug)]
enum RemoveCommand {
    /// Adds process groups to the remove list of the given cluster.
    #[command(alias = "process-group")]
    ProcessGroups(RemoveArgs),
}

#[derive(Args, Debug)]
struct SelectionArgs {
    /// The cluster; without it, each named pod's cluster is read from its `--cluster-label`.
    #[arg(short = 'c', long = "fdb-cluster")]
    cluster: Option<String>,
    /// The pod label naming a pod's cluster, for pods of several clusters named without `-c`.
    #[arg(short = 'l', long, default_value = crate::crd::CLUSTER_LABEL)]
    cluster_label: String,
    /// Every process group of this class (the IDs are ignored).
    #[arg(long)]
    process_class: Option<String>,
    /// Process groups are given by ID instead of pod name.
    #[arg(long)]
    use_process_group_id: bool,
    /// Every process group with this condition (repeatable).
    #[arg(long = "process-condition")]
    process_condition: Vec<String>,
    /// Every process group whose pod has these labels (`k=v,k2=v2`; the IDs are ignored).
    #[arg(long, value_parser = parse_labels, default_value = "")]
    match_labels: BTreeMap<String, String>,
}

impl SelectionArgs {
    fn selection(&self, ids: Vec<String>) -> Result<Selection, PluginError> {
        decide::check_conditions(&self.process_condition).map_err(PluginError::Refused)?;
        Ok(Selection {
            ids,
            use_process_group_id: self.use_process_group_id,
            process_class: self.process_class.clone(),
            conditions: self.process_condition.clone(),
            match_labels: self.match_labels.clone(),
        })
    }
}

#[derive(Args, Debug)]
struct RemoveArgs {
    #[command(flatten)]
    select: SelectionArgs,
    /// Pod names (process-group IDs with --use-process-group-id).
    ids: Vec<String>,
    /// Exclude the processes before removing them.
    #[arg(short = 'e', long, default_value_t = true, action = clap::ArgAction::Set)]
    exclusion: bool,
    /// Also remove every process group that needs a replacement.
    #[arg(long)]
    remove_all_failed: bool,
}

#[derive(Subcommand, Debug)]
enum UpdateCommand {
    /// Updates the connection string in the FoundationDBCluster resource status with the
    /// provided connection string.
    ConnectionString {
        /// The cluster.
        #[arg(short = 'c', long = "fdb-cluster")]
        cluster: String,
        /// The connection string (`description:generationID@ip:port,…`).
        connection_string: String,
    },
}

#[derive(Subcommand, Debug)]
enum BuggifyCommand {
    /// Updates the crash-loop list of the given cluster.
    CrashLoop(CrashLoopArgs),
    /// Updates the no-schedule list of the given cluster.
    NoSchedule(BuggifyListArgs),
    /// Instructs the operator to update all of the fdbmonitor.conf files to have zero
    /// fdbserver processes configured.
    EmptyMonitorConf {
        /// The cluster.
        #[arg(short = 'c', long = "fdb-cluster")]
        cluster: String,
        /// The value to set.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        set_value: bool,
    },
}

#[derive(Args, Debug)]
struct BuggifyListArgs {
    #[command(flatten)]
    select: SelectionArgs,
    /// Pod names (process-group IDs with --use-process-group-id).
    ids: Vec<String>,
    /// Removes the process groups from the list.
    #[arg(long)]
    clear: bool,
    /// Removes all process groups from the list.
    #[arg(long, conflicts_with = "clear")]
    clean: bool,
}

#[derive(Args, Debug)]
struct CrashLoopArgs {
    #[command(flatten)]
    list: BuggifyListArgs,
    /// The container to crash-loop.
    #[arg(long, default_value = "foundationdb")]
    container_name: String,
}

#[derive(Args, Debug)]
struct CordonArgs {
    /// The cluster; without it, every pod on the nodes with a `--cluster-label`, each in its
    /// own cluster.
    #[arg(short = 'c', long = "fdb-cluster")]
    cluster: Option<String>,
    /// The pod label naming a pod's cluster (without `-c`).
    #[arg(short = 'l', long, default_value = crate::crd::CLUSTER_LABEL)]
    cluster_label: String,
    /// The nodes.
    nodes: Vec<String>,
    /// Select the nodes by labels (`k=v,k2=v2`) instead of naming them.
    #[arg(long, value_parser = parse_labels, default_value = "")]
    node_selector: BTreeMap<String, String>,
    /// Exclude the processes before removing them.
    #[arg(short = 'e', long, default_value_t = true, action = clap::ArgAction::Set)]
    exclusion: bool,
}

#[derive(Args, Debug)]
struct RestartArgs {
    #[command(flatten)]
    select: SelectionArgs,
    /// Pod names (process-group IDs with --use-process-group-id).
    ids: Vec<String>,
    /// Restart every process of the cluster.
    #[arg(long)]
    all_processes: bool,
}

/// A pod in phase Running and not being deleted.
fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && p.metadata.deletion_timestamp.is_none()
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: use a number with s, m or h"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s:?}: use a number with s, m or h")),
    };
    Ok(Duration::from_secs(secs.max(1)))
}

fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| format!("{kv:?}: use key=value"))
        })
        .collect()
}

/// Where the plugin writes and reads.
pub struct Io<'a> {
    /// Command output and `✔` lines.
    pub out: &'a mut dyn Write,
    /// `⚠`/`✖` lines and notes.
    pub err: &'a mut dyn Write,
    /// Answers to confirmations.
    pub input: &'a mut dyn BufRead,
}

impl Io<'_> {
    fn out(&mut self, text: &str) -> Result<(), PluginError> {
        self.out
            .write_all(text.as_bytes())
            .map_err(|e| PluginError::io("write output", e))
    }

    fn err(&mut self, text: &str) -> Result<(), PluginError> {
        self.err
            .write_all(text.as_bytes())
            .map_err(|e| PluginError::io("write output", e))
    }

    fn mark(&mut self, mark: Mark, text: &str) -> Result<(), PluginError> {
        let line = mark.render(text);
        match mark {
            Mark::Good | Mark::Plain => self.out(&line),
            Mark::Warn | Mark::Error => self.err(&line),
        }
    }

    // Asks `question [y/n]: ` until the answer is yes or no; end of input is no.
    fn confirm(&mut self, question: &str) -> Result<bool, PluginError> {
        loop {
            self.out(&format!("{question} [y/n]: "))?;
            self.out
                .flush()
                .map_err(|e| PluginError::io("write output", e))?;
            let mut answer = String::new();
            let n = self
                .input
                .read_line(&mut answer)
                .map_err(|e| PluginError::io("read the answer", e))?;
            match answer.trim().to_lowercase().as_str() {
                "y" | "yes" => return Ok(true),
                "n" | "no" => return Ok(false),
                _ if n == 0 => return Ok(false),
                _ => {}
            }
        }
    }
}

/// Runs `kubectl fdb ARGS…` (`args` without the program name).
pub async fn main_with(
    args: impl IntoIterator<Item = String>,
    io: &mut Io<'_>,
) -> anyhow::Result<()> {
    let argv = std::iter::once("kubectl-fdb".to_string()).chain(args);
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            io.out(&e.render().to_string())?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    if let Command::Version {
        client_only: true, ..
    } = &cli.command
    {
        io.out(&format!("kubectl-fdb: {}\n", env!("CARGO_PKG_VERSION")))?;
        return Ok(());
    }
    let s = cli.global.connect().await.map_err(PluginError::from)?;
    run(&cli, &s, io).await?;
    Ok(())
}

struct Run<'a> {
    cli: &'a Cli,
    s: &'a Session,
}

async fn run(cli: &Cli, s: &Session, io: &mut Io<'_>) -> Result<(), PluginError> {
    let r = Run { cli, s };
    match &cli.command {
        Command::Analyze(a) => r.analyze(a, io).await,
        Command::Deprecation(a) => r.deprecation(a, io).await,
        Command::RecoverMultiRegionCluster { cluster } => r.recover(cluster, io).await,
        Command::Get {
            what:
                GetCommand::Configuration {
                    clusters,
                    fail_over,
                    update: true,
                },
        } => {
            for name in clusters {
                r.update_configuration(name, *fail_over, io).await?;
            }
            Ok(())
        }
        Command::Get {
            what:
                GetCommand::Configuration {
                    clusters,
                    fail_over,
                    update: false,
                },
        } => {
            for name in clusters {
                let c = r.cluster(name).await?;
                let line = decide::configuration(&c, *fail_over).map_err(PluginError::Refused)?;
                io.out(&format!("{line}\n"))?;
            }
            Ok(())
        }
        Command::Get {
            what:
                GetCommand::ExclusionStatus {
                    cluster,
                    ignore_fully_excluded,
                    interval,
                },
        } => {
            r.exclusion_status(cluster, *ignore_fully_excluded, *interval, io)
                .await
        }
        Command::Remove {
            what: RemoveCommand::ProcessGroups(a),
        } => r.remove(a, io).await,
        Command::Cordon(a) => r.cordon(a, io).await,
        Command::Restart(a) => r.restart(a, io).await,
        Command::Update {
            what:
                UpdateCommand::ConnectionString {
                    cluster,
                    connection_string,
                },
        } => {
            let c = r.cluster(cluster).await?;
            let current = c.status.as_ref().map(|s| s.connection_string.as_str());
            if current == Some(connection_string.as_str()) {
                return io.out(&format!(
                    "cluster {}/{cluster} already has connections string \"{connection_string}\" set\n",
                    r.ns()
                ));
            }
            crate::crd::ConnectionString::parse(connection_string)
                .map_err(|e| PluginError::Refused(e.to_string()))?;
            r.set_connection_string(&c, connection_string).await?;
            io.out(&format!(
                "foundationdbcluster/{cluster}: connection string set to \"{connection_string}\"\n"
            ))
        }
        Command::Exec { cluster, command } => r.exec(cluster, command).await,
        Command::FixCoordinatorIps { cluster, dry_run } => {
            r.fix_coordinator_ips(cluster, *dry_run, io).await
        }
        Command::Buggify {
            what: BuggifyCommand::CrashLoop(a),
        } => r.buggify_list(&a.list, Some(&a.container_name), io).await,
        Command::Buggify {
            what: BuggifyCommand::NoSchedule(a),
        } => r.buggify_list(a, None, io).await,
        Command::Buggify {
            what: BuggifyCommand::EmptyMonitorConf { cluster, set_value },
        } => r.empty_monitor_conf(cluster, *set_value, io).await,
        Command::Version { container_name, .. } => {
            let api = Api::<Deployment>::namespaced(s.client.clone(), &s.namespace);
            let name = &cli.operator_name;
            let d = api
                .get(name)
                .await
                .map_err(|e| PluginError::kube("deployment", name, &s.namespace, "get", e))?;
            let v = decide::operator_version(&d, container_name).map_err(PluginError::Refused)?;
            io.out(&format!("foundationdb-operator: {v}\n"))?;
            io.out(&format!("kubectl-fdb: {}\n", env!("CARGO_PKG_VERSION")))
        }
    }
}

impl Run<'_> {
    fn ns(&self) -> &str {
        &self.s.namespace
    }

    fn clusters_api(&self) -> Api<FoundationDBCluster> {
        Api::namespaced(self.s.client.clone(), self.ns())
    }

    async fn cluster(&self, name: &str) -> Result<FoundationDBCluster, PluginError> {
        self.clusters_api()
            .get(name)
            .await
            .map_err(|e| PluginError::kube("foundationdbcluster", name, self.ns(), "get", e))
    }

    // The cluster's pods (by its match labels), optionally on one node.
    async fn pods(
        &self,
        c: &FoundationDBCluster,
        node: Option<&str>,
    ) -> Result<Vec<Pod>, PluginError> {
        let selector = c
            .match_labels()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        self.pods_by_selector(&selector, node).await
    }

    // The namespace's pods matching the label `selector`, optionally on one node.
    async fn pods_by_selector(
        &self,
        selector: &str,
        node: Option<&str>,
    ) -> Result<Vec<Pod>, PluginError> {
        let mut lp = ListParams::default().labels(selector);
        if let Some(n) = node {
            lp = lp.fields(&format!("spec.nodeName={n}"));
        }
        Ok(Api::<Pod>::namespaced(self.s.client.clone(), self.ns())
            .list(&lp)
            .await
            .map_err(|e| PluginError::Api {
                action: format!("list the pods matching {selector:?}"),
                source: e,
            })?
            .items)
    }

    async fn analyze(&self, a: &AnalyzeArgs, io: &mut Io<'_>) -> Result<(), PluginError> {
        decide::check_conditions(&a.ignore_condition).map_err(PluginError::Refused)?;
        let names = if a.all_clusters {
            self.clusters_api()
                .list(&ListParams::default())
                .await
                .map_err(|e| PluginError::Api {
                    action: format!("list foundationdbclusters in namespace {:?}", self.ns()),
                    source: e,
                })?
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect()
        } else if a.clusters.is_empty() {
            return Err(PluginError::Refused(
                "name the clusters to analyze, or pass --all-clusters".into(),
            ));
        } else {
            a.clusters.clone()
        };
        let opts = AnalyzeOptions {
            auto_fix: a.auto_fix,
            ignore_conditions: a.ignore_condition.clone(),
            ignore_removals: a.ignore_removals,
        };
        let mut errors = Vec::new();
        for name in &names {
            let c = match self.cluster(name).await {
                Ok(c) => c,
                Err(e) => {
                    errors.push(format!(
                        "could not fetch cluster information for: {}/{name}, error: {e}",
                        self.ns()
                    ));
                    continue;
                }
            };
            io.out(&format!("Checking cluster: {}/{name}\n", self.ns()))?;
            let pods = self.pods(&c, None).await?;
            let found = decide::analyze(&c, &pods, &opts, jiff::Timestamp::now());
            for (mark, line) in &found.lines {
                io.mark(*mark, line)?;
            }
            if a.auto_fix {
                if !found.replace.is_empty() {
                    self.add_to_removals(&c, &found.replace, true, io).await?;
                }
                self.delete_pods(&c, &found.delete_pods, io).await?;
            } else if found.found_issues {
                errors.push(format!(
                    "found issues for cluster {name}. Please check them"
                ));
            }
            if a.analyze_status
                && let Err(e) = self.analyze_cluster_status(&c, a.auto_fix, io).await
            {
                errors.push(e.to_string());
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(PluginError::Refused(errors.join("\n")))
        }
    }

    async fn delete_pods(
        &self,
        c: &FoundationDBCluster,
        pods: &[String],
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        if pods.is_empty() {
            return Ok(());
        }
        let question = format!(
            "Delete Pods {} in cluster {}/{}",
            pods.join(","),
            self.ns(),
            c.name_any()
        );
        if self.cli.wait && !io.confirm(&question)? {
            return Ok(());
        }
        let api = Api::<Pod>::namespaced(self.s.client.clone(), self.ns());
        for pod in pods {
            io.out(&format!("Delete Pod: {}/{pod}\n", self.ns()))?;
            api.delete(pod, &DeleteParams::default())
                .await
                .map_err(|e| PluginError::kube("pod", pod, self.ns(), "delete", e))?;
        }
        Ok(())
    }

    // Adds `ids` to the cluster's removal list (after confirmation), guarded by the
    // resourceVersion it was read at; returns how many were new.
    async fn add_to_removals(
        &self,
        c: &FoundationDBCluster,
        ids: &[ProcessGroupId],
        exclusion: bool,
        io: &mut Io<'_>,
    ) -> Result<usize, PluginError> {
        let name = c.name_any();
        let shown: Vec<&str> = ids.iter().map(|i| i.0.as_str()).collect();
        let question = format!(
            "Remove [{}] from cluster {}/{name} with exclude: {exclusion}",
            shown.join(" "),
            self.ns()
        );
        if self.cli.wait && !io.confirm(&question)? {
            return Err(PluginError::Refused("user aborted the removal".into()));
        }
        let Some(list) = decide::removal_list(c, ids, exclusion) else {
            io.err(&format!(
                "every process group is already on the removal list of cluster {name}\n"
            ))?;
            return Ok(0);
        };
        let field = if exclusion {
            "processGroupsToRemove"
        } else {
            "processGroupsToRemoveWithoutExclusion"
        };
        let before = if exclusion {
            c.spec.process_groups_to_remove.len()
        } else {
            c.spec.process_groups_to_remove_without_exclusion.len()
        };
        let added = list.len() - before;
        let patch = json!({
            "metadata": {"resourceVersion": c.resource_version()},
            "spec": {field: list},
        });
        self.clusters_api()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| PluginError::kube("foundationdbcluster", &name, self.ns(), "patch", e))?;
        Ok(added)
    }

    // `get configuration --update`: the spec's database configuration (failed over with
    // `fail_over`) written back after the diff is confirmed (`-w`), guarded by the
    // resourceVersion it was read at. Nothing to change: said, nothing written.
    async fn update_configuration(
        &self,
        name: &str,
        fail_over: bool,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let c = self.cluster(name).await?;
        let Some(updated) = decide::updated_configuration(&c, fail_over) else {
            io.err(&format!(
                "the database configuration of cluster {name} is already as asked\n"
            ))?;
            return Ok(());
        };
        if self.cli.wait {
            let yaml = |v: &crate::crd::DatabaseConfiguration| {
                serde_yaml::to_string(v).unwrap_or_default()
            };
            let diff =
                deprecation::line_diff(&yaml(&c.spec.database_configuration), &yaml(&updated));
            let question = format!("The following changes will be made:\n{}", diff.trim_end());
            if !io.confirm(&question)? {
                return Err(PluginError::Refused("user aborted the change".into()));
            }
        }
        let patch = json!({
            "metadata": {"resourceVersion": c.resource_version()},
            "spec": {"databaseConfiguration": updated},
        });
        self.clusters_api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| PluginError::kube("foundationdbcluster", name, self.ns(), "patch", e))?;
        Ok(())
    }

    // Writes `status.connectionString`, guarded by the resourceVersion `c` was read at.
    async fn set_connection_string(
        &self,
        c: &FoundationDBCluster,
        connection_string: &str,
    ) -> Result<(), PluginError> {
        let name = c.name_any();
        let patch = json!({
            "metadata": {"resourceVersion": c.resource_version()},
            "status": {"connectionString": connection_string},
        });
        self.clusters_api()
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                PluginError::kube("foundationdbcluster/status", &name, self.ns(), "patch", e)
            })?;
        Ok(())
    }

    async fn fix_coordinator_ips(
        &self,
        name: &str,
        dry_run: bool,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let c = self.cluster(name).await?;
        let current = c
            .status
            .as_ref()
            .map(|s| s.connection_string.clone())
            .unwrap_or_default();
        io.out(&format!("Current connection string: {current}\n"))?;
        let pods = self.pods(&c, None).await?;
        let fix = decide::fix_coordinator_ips(&c, &pods).map_err(PluginError::Refused)?;
        for line in &fix.lines {
            io.out(&format!("{line}\n"))?;
        }
        let new = &fix.connection_string;
        io.out(&format!("New connection string: {new}\n"))?;
        let running = pods.iter().filter(|p| running(p));
        for pod in running {
            let argv = decide::fix_cluster_file_argv(self.ns(), &pod.name_any(), new);
            if dry_run {
                io.err(&format!(
                    "update command: {} on Pod: {}\n",
                    argv[argv.len() - 1],
                    pod.name_any()
                ))?;
                continue;
            }
            // As upstream: a pod that cannot be updated is reported and the others go on.
            if let Err(e) = self.kubectl(&argv) {
                io.err(&format!("{e}\n"))?;
            }
        }
        if dry_run || *new == current {
            return Ok(());
        }
        self.set_connection_string(&c, new).await
    }

    // Patches `spec.buggify` with `value`, guarded by the resourceVersion `c` was read at.
    async fn patch_buggify(
        &self,
        c: &FoundationDBCluster,
        value: serde_json::Value,
    ) -> Result<(), PluginError> {
        let name = c.name_any();
        let patch = json!({
            "metadata": {"resourceVersion": c.resource_version()},
            "spec": {"buggify": value},
        });
        self.clusters_api()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| PluginError::kube("foundationdbcluster", &name, self.ns(), "patch", e))?;
        Ok(())
    }

    // `buggify crash-loop` (`container` set) and `buggify no-schedule`.
    async fn buggify_list(
        &self,
        a: &BuggifyListArgs,
        container: Option<&str>,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        if a.clean {
            let Some(cluster) = &a.select.cluster else {
                return Err(PluginError::Refused(
                    "clean option requires cluster-name argument".into(),
                ));
            };
            let c = self.cluster(cluster).await?;
            return self
                .buggify_edit(&c, container, decide::ListEdit::Clean, Vec::new(), io)
                .await;
        }
        let sel = a.select.selection(a.ids.clone())?;
        if sel.is_empty() {
            return Err(PluginError::Refused(
                "please provide at least one Pod".into(),
            ));
        }
        let edit = if a.clear {
            decide::ListEdit::Clear
        } else {
            decide::ListEdit::Add
        };
        for (cluster, sel) in self.targets(&a.select, sel).await? {
            let c = self.cluster(&cluster).await?;
            let pods = self.pods(&c, None).await?;
            let ids = decide::select(&c, &pods, &sel).map_err(PluginError::Refused)?;
            if ids.is_empty() {
                return Err(PluginError::Refused(
                    "please provide at least one Pod".into(),
                ));
            }
            self.buggify_edit(&c, container, edit, ids, io).await?;
        }
        Ok(())
    }

    // One `buggify` list edit of cluster `c`, after confirmation.
    async fn buggify_edit(
        &self,
        c: &FoundationDBCluster,
        container: Option<&str>,
        edit: decide::ListEdit,
        ids: Vec<ProcessGroupId>,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let (name, ns) = (c.name_any(), self.ns().to_owned());
        let shown = format!(
            "[{}]",
            ids.iter()
                .map(|i| i.0.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let question = match (container, edit) {
            (Some(ct), decide::ListEdit::Add) => format!(
                "Adding {shown} to container: {ct} in crash-loop container list of the cluster {ns}/{name}"
            ),
            (Some(ct), decide::ListEdit::Clear) => format!(
                "Removing {shown} from container: {ct} in crash-loop container list of the cluster {ns}/{name}"
            ),
            (Some(ct), decide::ListEdit::Clean) => {
                format!("Clearing crash-loop list for {ct} from cluster {ns}/{name}")
            }
            (None, decide::ListEdit::Add) => {
                format!("Adding {shown} from no-schedule from cluster {ns}/{name}")
            }
            (None, decide::ListEdit::Clear) => {
                format!("Removing {shown} from no-schedule from cluster {ns}/{name}")
            }
            (None, decide::ListEdit::Clean) => {
                format!("Clearing no-schedule list from cluster {ns}/{name}")
            }
        };
        if self.cli.wait && !io.confirm(&question)? {
            return Err(PluginError::Refused("user aborted the removal".into()));
        }
        let buggify = &c.spec.buggify;
        let (value, now) = match container {
            Some(ct) => {
                let list = decide::edit_crash_loop(&buggify.crash_loop_containers, ct, &ids, edit);
                let now = list
                    .iter()
                    .find(|e| e.container_name == ct)
                    .map(|e| e.targets.clone())
                    .unwrap_or_default();
                (json!({"crashLoopContainers": list}), now)
            }
            None => {
                let list = decide::edit_list(&buggify.no_schedule, &ids, edit);
                let value = if list.is_empty() {
                    json!({"noSchedule": null})
                } else {
                    json!({"noSchedule": list})
                };
                (value, list)
            }
        };
        self.patch_buggify(c, value).await?;
        let what = container.map_or_else(
            || "no-schedule list".to_owned(),
            |ct| format!("crash-loop list of container {ct}"),
        );
        let now: Vec<&str> = now.iter().map(|i| i.0.as_str()).collect();
        io.out(&format!(
            "foundationdbcluster/{name}: {what}: [{}]\n",
            now.join(" ")
        ))
    }

    async fn empty_monitor_conf(
        &self,
        cluster: &str,
        set: bool,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let c = self.cluster(cluster).await?;
        if c.spec.buggify.empty_monitor_conf == set {
            return Err(PluginError::Refused(format!(
                "empty-monitor-conf is already set to {set}"
            )));
        }
        let question = format!(
            "Setting empty-monitor-conf to {set} for cluster {}/{cluster}",
            self.ns()
        );
        if self.cli.wait && !io.confirm(&question)? {
            return Err(PluginError::Refused("user aborted the removal".into()));
        }
        self.patch_buggify(&c, json!({"emptyMonitorConf": set}))
            .await?;
        io.out(&format!(
            "foundationdbcluster/{cluster}: empty-monitor-conf set to {set}\n"
        ))
    }

    async fn remove(&self, a: &RemoveArgs, io: &mut Io<'_>) -> Result<(), PluginError> {
        let sel = a.select.selection(a.ids.clone())?;
        if sel.is_empty() && !a.remove_all_failed {
            return Err(PluginError::Refused(
                "name the process groups to remove, or pass a selection flag".into(),
            ));
        }
        for (cluster, sel) in self.targets(&a.select, sel).await? {
            self.remove_from(&cluster, &sel, a, io).await?;
        }
        Ok(())
    }

    // `remove process-groups` in one cluster.
    async fn remove_from(
        &self,
        cluster: &str,
        sel: &Selection,
        a: &RemoveArgs,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let c = self.cluster(cluster).await?;
        let pods = self.pods(&c, None).await?;
        let mut ids = decide::select(&c, &pods, sel).map_err(PluginError::Refused)?;
        if a.remove_all_failed {
            for id in decide::failed(&c, jiff::Timestamp::now()) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        if ids.is_empty() {
            io.err("no process group matches the selection\n")?;
            return Ok(());
        }
        let n = self.add_to_removals(&c, &ids, a.exclusion, io).await?;
        io.out(&format!(
            "foundationdbcluster/{}: {n} process groups added to the removal list\n",
            c.name_any()
        ))
    }

    async fn cordon(&self, a: &CordonArgs, io: &mut Io<'_>) -> Result<(), PluginError> {
        if !a.node_selector.is_empty() && !a.nodes.is_empty() {
            return Err(PluginError::Refused(
                "it's not allowed to use the node-selector and pass nodes".into(),
            ));
        }
        let nodes = if a.node_selector.is_empty() {
            a.nodes.clone()
        } else {
            let selector = a
                .node_selector
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            Api::<Node>::all(self.s.client.clone())
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| PluginError::Api {
                    action: format!("list the nodes matching {selector}"),
                    source: e,
                })?
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect()
        };
        io.out(&format!("Starting to cordon {} nodes\n", nodes.len()))?;
        if nodes.is_empty() {
            return Err(PluginError::Refused(
                "no nodes were provided for cordoning".into(),
            ));
        }
        let mut total = 0;
        let mut summary = Vec::new();
        let mut errors = Vec::new();
        for node in &nodes {
            match self.cordon_node(a, node, io).await {
                Ok(n) => {
                    total += n;
                    summary.push((node, n));
                }
                Err(e) => {
                    errors.push(format!("unable to cordon all Pods on node {node}: {e}"));
                    summary.push((node, 0));
                }
            }
        }
        io.out("Completed removal cordoning, printing summary:\n")?;
        for (node, n) in &summary {
            io.out(&format!("Removed: {n} pods from node: {node}\n"))?;
        }
        io.out(&format!(
            "Removed: {total} pods from {} nodes\n",
            nodes.len()
        ))?;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(PluginError::Refused(errors.join("\n")))
        }
    }

    // Adds the groups with a pod on `node` to their clusters' removal lists: `-c`'s pods, or
    // every pod with the cluster label, each to its own cluster. How many were new.
    async fn cordon_node(
        &self,
        a: &CordonArgs,
        node: &str,
        io: &mut Io<'_>,
    ) -> Result<usize, PluginError> {
        let by_cluster: Vec<(String, Vec<Pod>)> = match &a.cluster {
            Some(cluster) => {
                let c = self.cluster(cluster).await?;
                vec![(cluster.clone(), self.pods(&c, Some(node)).await?)]
            }
            None => {
                let pods = self.pods_by_selector(&a.cluster_label, Some(node)).await?;
                let groups = decide::group_by_cluster(&pods, &a.cluster_label)
                    .map_err(PluginError::Refused)?;
                groups
                    .into_iter()
                    .map(|(cluster, names)| {
                        let mine = pods
                            .iter()
                            .filter(|p| names.contains(&p.name_any()))
                            .cloned()
                            .collect();
                        (cluster, mine)
                    })
                    .collect()
            }
        };
        if by_cluster.iter().all(|(_, pods)| pods.is_empty()) {
            io.err(&format!("Cordoning node: {node} has no running pods\n"))?;
            return Ok(0);
        }
        io.out(&format!("Cordoning node: {node}\n"))?;
        let mut added = 0;
        for (cluster, pods) in by_cluster {
            // Read per node: the previous node's patch changed the resourceVersion.
            let c = self.cluster(&cluster).await?;
            let sel = Selection {
                ids: pods.iter().map(ResourceExt::name_any).collect(),
                ..Selection::default()
            };
            let ids = decide::select(&c, &pods, &sel).map_err(PluginError::Refused)?;
            added += self.add_to_removals(&c, &ids, a.exclusion, io).await?;
        }
        Ok(added)
    }

    async fn restart(&self, a: &RestartArgs, io: &mut Io<'_>) -> Result<(), PluginError> {
        let sel = a.select.selection(a.ids.clone())?;
        if sel.is_empty() && !a.all_processes {
            return Err(PluginError::Refused(
                "name the pods to restart, pass a selection flag or --all-processes".into(),
            ));
        }
        if a.all_processes {
            let Some(cluster) = &a.select.cluster else {
                return Err(PluginError::Refused(
                    "--all-processes needs the cluster (-c)".into(),
                ));
            };
            return self.restart_in(cluster, None, io).await;
        }
        for (cluster, sel) in self.targets(&a.select, sel).await? {
            self.restart_in(&cluster, Some(&sel), io).await?;
        }
        Ok(())
    }

    // `restart` in one cluster: the groups `sel` chooses, or (`None`) all of them.
    async fn restart_in(
        &self,
        cluster: &str,
        sel: Option<&Selection>,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let c = self.cluster(cluster).await?;
        let pods = self.pods(&c, None).await?;
        let ids = match sel {
            None => {
                let label = c.process_group_id_label();
                pods.iter()
                    .filter_map(|p| p.labels().get(&label).cloned().map(ProcessGroupId))
                    .collect()
            }
            Some(sel) => decide::select(&c, &pods, sel).map_err(PluginError::Refused)?,
        };
        let label = c.process_group_id_label();
        let chosen: Vec<String> = pods
            .iter()
            .filter(|p| {
                p.labels()
                    .get(&label)
                    .is_some_and(|id| ids.iter().any(|i| &i.0 == id))
            })
            .map(ResourceExt::name_any)
            .collect();
        if chosen.is_empty() {
            io.err("no pod matches the selection\n")?;
            return Ok(());
        }
        let question = format!(
            "Restart [{}] in cluster {}/{}",
            chosen.join(" "),
            self.ns(),
            c.name_any()
        );
        if self.cli.wait && !io.confirm(&question)? {
            return Err(PluginError::Refused("user aborted the restart".into()));
        }
        match &self.cli.fdb_binary_dir {
            Some(dir) => {
                let status = self.status_local(&c, dir).await?;
                let addresses = decide::addresses_of(&status, &ids);
                let parsed: Vec<ProcessAddress> = addresses
                    .iter()
                    .filter_map(|a| ProcessAddress::parse(a).ok())
                    .collect();
                if parsed.is_empty() {
                    return Err(PluginError::Refused(format!(
                        "the database reports no process of {}",
                        chosen.join(", ")
                    )));
                }
                io.out(&format!("Restart processes: {}\n", addresses.join(" ")))?;
                self.admin(&c, dir)
                    .kill(&parsed)
                    .await
                    .map_err(|e| PluginError::Refused(format!("fdbcli kill: {e}")))
            }
            None => {
                for pod in &chosen {
                    io.out(&format!("Restart process: {pod}\n"))?;
                    self.kubectl(&decide::restart_argv(self.ns(), pod))?;
                    tokio::time::sleep(Duration::from_secs(u64::from(self.cli.sleep))).await;
                }
                Ok(())
            }
        }
    }

    // The clusters a selection names, each with its own selection: `-c`, or without it the
    // named pods grouped by their `--cluster-label` (upstream's cross-cluster selection).
    async fn targets(
        &self,
        select: &SelectionArgs,
        sel: Selection,
    ) -> Result<Vec<(String, Selection)>, PluginError> {
        if let Some(cluster) = &select.cluster {
            return Ok(vec![(cluster.clone(), sel)]);
        }
        decide::check_cross_cluster(&sel).map_err(PluginError::Refused)?;
        let api = Api::<Pod>::namespaced(self.s.client.clone(), self.ns());
        let mut pods = Vec::new();
        for name in &sel.ids {
            let pod = api.get_opt(name).await.map_err(|e| PluginError::Api {
                action: format!("get pod {}/{name}", self.ns()),
                source: e,
            })?;
            pods.push(pod.ok_or_else(|| {
                PluginError::Refused(format!("could not get pod: {}/{name}", self.ns()))
            })?);
        }
        let by_cluster =
            decide::group_by_cluster(&pods, &select.cluster_label).map_err(PluginError::Refused)?;
        Ok(by_cluster
            .into_iter()
            .map(|(cluster, ids)| (cluster, Selection { ids, ..sel.clone() }))
            .collect())
    }

    fn admin(
        &self,
        c: &FoundationDBCluster,
        dir: &std::path::Path,
    ) -> std::sync::Arc<dyn crate::admin::AdminClient> {
        let mut config = BinaryConfig::from_env();
        config.binary_dir = dir.to_path_buf();
        CliClients::new(config).admin(c)
    }

    async fn status_local(
        &self,
        c: &FoundationDBCluster,
        dir: &std::path::Path,
    ) -> Result<FdbStatus, PluginError> {
        self.admin(c, dir)
            .get_status()
            .await
            .map_err(|e| PluginError::Refused(format!("status json of {:?}: {e}", c.name_any())))
    }

    // `status json`, locally or from inside a running pod of the cluster.
    async fn status(&self, c: &FoundationDBCluster) -> Result<FdbStatus, PluginError> {
        if let Some(dir) = &self.cli.fdb_binary_dir {
            return self.status_local(c, dir).await;
        }
        let pods = self.pods(c, None).await?;
        let pod = pods.iter().find(|p| running(p)).ok_or_else(|| {
            PluginError::Refused(format!(
                "cluster {:?} has no running pod to run fdbcli in",
                c.name_any()
            ))
        })?;
        let text = self.kubectl(&decide::status_argv(self.ns(), &pod.name_any()))?;
        crate::admin::status::parse(&text, true)
            .map_err(|e| PluginError::Refused(format!("status json of {:?}: {e}", c.name_any())))
    }

    async fn exclusion_status(
        &self,
        name: &str,
        ignore_fully_excluded: bool,
        interval: Duration,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let c = self.cluster(name).await?;
        let mut previous: BTreeMap<String, decide::Exclusion> = BTreeMap::new();
        loop {
            let status = match self.status(&c).await {
                Ok(s) => s,
                Err(e) => {
                    // As upstream: report and read again.
                    io.err(&format!("{e}\n"))?;
                    tokio::time::sleep(interval).await;
                    continue;
                }
            };
            let now = jiff::Timestamp::now().as_second();
            let (ongoing, done) = decide::exclusions(&status, now, ignore_fully_excluded);
            for line in &done {
                io.out(&format!("{line}\n"))?;
            }
            if ongoing.is_empty() {
                return Ok(());
            }
            for e in &ongoing {
                io.out(&decide::exclusion_line(e, previous.get(&e.id)))?;
            }
            io.out(&format!(
                "There are {} processes that are not fully excluded.\n{}\n",
                ongoing.len(),
                "=".repeat(102)
            ))?;
            previous = ongoing.into_iter().map(|e| (e.id.clone(), e)).collect();
            tokio::time::sleep(interval).await;
        }
    }

    async fn exec(&self, name: &str, command: &[String]) -> Result<(), PluginError> {
        use std::io::IsTerminal;
        let c = self.cluster(name).await?;
        let pod = &self.random_running_pod(&c, "exec into").await?;
        let tty = std::io::stdin().is_terminal();
        let argv = decide::exec_argv(self.ns(), pod, command, tty);
        let status = self
            .kubectl_command()
            .args(&argv)
            .status()
            .map_err(|e| PluginError::io("run kubectl", e))?;
        if status.success() {
            Ok(())
        } else {
            Err(PluginError::Refused(format!(
                "kubectl {} ended with {status}",
                argv.join(" ")
            )))
        }
    }

    // `kubectl` with the session's kubeconfig and context.
    fn kubectl_command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.cli.kubectl);
        if let Some(k) = &self.cli.global.kubeconfig {
            cmd.arg("--kubeconfig").arg(k);
        }
        if let Some(ctx) = &self.cli.global.context {
            cmd.args(["--context", ctx]);
        }
        cmd
    }

    // Runs `kubectl ARGS…` with the session's kubeconfig and context; its stdout.
    fn kubectl(&self, args: &[String]) -> Result<String, PluginError> {
        let out = self
            .kubectl_command()
            .args(args)
            .output()
            .map_err(|e| PluginError::io("run kubectl", e))?;
        if !out.status.success() {
            return Err(PluginError::Refused(format!(
                "kubectl {} ended with {}: {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
