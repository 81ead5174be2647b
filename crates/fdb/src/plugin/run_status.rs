//! The commands of `kubectl-fdb` that read a cluster's `status json` without judging it:
//! `analyze --analyze-status` and `deprecation` (which reads only specs), and the `kubectl`
//! runner with standard input and raw output that `recover-multi-region-cluster` needs.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::ListParams;

use super::analyze_status::{analyze_status, kill_command};
use super::decide::{self, Mark};
use super::deprecation;
use super::{DeprecationArgs, Io, PluginError, Run, running};
use crate::admin::FdbStatus;
use crate::crd::{FoundationDBCluster, ProcessAddress};

/// Where fdbcli runs: with the local binaries (`--fdb-binary-dir`) or inside a pod.
pub(super) enum Fdbcli {
    /// `<dir>/<major.minor>/fdbcli` on this machine.
    Local(PathBuf),
    /// `kubectl exec` into this running pod of the cluster.
    Pod(String),
}

impl Run<'_> {
    // Where fdbcli runs for cluster `c`: locally, or in a random running pod.
    pub(super) async fn fdbcli_for(&self, c: &FoundationDBCluster) -> Result<Fdbcli, PluginError> {
        if let Some(dir) = &self.cli.fdb_binary_dir {
            return Ok(Fdbcli::Local(dir.clone()));
        }
        Ok(Fdbcli::Pod(
            self.random_running_pod(c, "run fdbcli in").await?,
        ))
    }

    /// A random running pod of cluster `c`, or a refusal naming what it was wanted `for`.
    pub(super) async fn random_running_pod(
        &self,
        c: &FoundationDBCluster,
        purpose: &str,
    ) -> Result<String, PluginError> {
        let mut running: Vec<String> = self
            .pods(c, None)
            .await?
            .iter()
            .filter(|p| running(p))
            .map(ResourceExt::name_any)
            .collect();
        if running.is_empty() {
            return Err(PluginError::Refused(format!(
                "cluster {:?} has no running pod to {purpose}",
                c.name_any()
            )));
        }
        Ok(running.swap_remove(fastrand::usize(..running.len())))
    }

    // `status json` through `via`. From a pod, the document as printed, whatever it says (and
    // whatever fdbcli's exit code); locally, through the admin client (which requires an
    // available database).
    pub(super) async fn status_document(
        &self,
        c: &FoundationDBCluster,
        via: &Fdbcli,
    ) -> Result<FdbStatus, PluginError> {
        let pod = match via {
            Fdbcli::Local(dir) => return self.status_local(c, dir).await,
            Fdbcli::Pod(pod) => pod,
        };
        let out = self.kubectl_raw(&decide::status_argv(self.ns(), pod), None)?;
        let text = String::from_utf8_lossy(&out.stdout);
        crate::admin::status::parse_document(&text).map_err(|e| {
            PluginError::Refused(format!(
                "error getting status: {}, {e}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })
    }

    // `analyze --analyze-status` of one cluster: upstream's findings, the restarts of auto-fix,
    // an error when anything was found.
    pub(super) async fn analyze_cluster_status(
        &self,
        c: &FoundationDBCluster,
        auto_fix: bool,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let name = c.name_any();
        io.out(&format!(
            "Checking cluster: {}/{name} with auto-fix: {auto_fix}\n",
            self.ns()
        ))?;
        let via = self.fdbcli_for(c).await?;
        // As upstream: up to five reads, each failure reported.
        let mut status = Err(PluginError::Refused("no status read".into()));
        for _ in 0..5 {
            status = self.status_document(c, &via).await;
            match &status {
                Ok(_) => break,
                Err(e) => io.mark(Mark::Error, &e.to_string())?,
            }
        }
        let found = analyze_status(&status?, auto_fix);
        for line in &found.lines {
            io.mark(Mark::Error, line)?;
        }
        for note in &found.notes {
            io.out(&format!("{note}\n"))?;
        }
        for (i, address) in found.restart.iter().enumerate() {
            if i > 0 {
                // Upstream's pause between two restarts.
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            io.out(&format!("Start killing {address}\n"))?;
            self.kill_one(c, &via, address).await?;
        }
        if found.found_issues() {
            return Err(PluginError::Refused(format!(
                "found issues in status json for cluster {name}. Please check them"
            )));
        }
        Ok(())
    }

    // Restarts the process at `address` through `via`.
    async fn kill_one(
        &self,
        c: &FoundationDBCluster,
        via: &Fdbcli,
        address: &str,
    ) -> Result<(), PluginError> {
        let failed = |e: String| {
            PluginError::Refused(format!("error killing process {address} status: {e}"))
        };
        match via {
            Fdbcli::Local(dir) => {
                let parsed = ProcessAddress::parse(address).map_err(|e| failed(e.to_string()))?;
                self.admin(c, dir)
                    .kill(&[parsed])
                    .await
                    .map_err(|e| failed(e.to_string()))
            }
            Fdbcli::Pod(pod) => {
                let argv = decide::fdbcli_argv(self.ns(), pod, &kill_command(address));
                self.kubectl(&argv)
                    .map(drop)
                    .map_err(|e| failed(e.to_string()))
            }
        }
    }

    // `deprecation`: each chosen cluster's report, an error counting those with deprecations.
    pub(super) async fn deprecation(
        &self,
        a: &DeprecationArgs,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let all = self
            .clusters_api()
            .list(&ListParams::default())
            .await
            .map_err(|e| PluginError::Api {
                action: format!("list foundationdbclusters in namespace {:?}", self.ns()),
                source: e,
            })?;
        let opts = deprecation::Options {
            use_future_defaults: a.use_future_defaults,
            only_show_changes: a.only_show_changes,
        };
        let (mut clusters, mut deprecated) = (0, 0);
        for c in &all.items {
            if !a.clusters.is_empty() && !a.clusters.contains(&c.name_any()) {
                continue;
            }
            clusters += 1;
            let found = deprecation::report(c, opts, a.show_cluster_spec);
            io.out(&found.text)?;
            deprecated += usize::from(found.deprecated);
        }
        if deprecated > 0 {
            return Err(PluginError::Refused(format!(
                "{deprecated}/{clusters} cluster(s) with deprecations"
            )));
        }
        io.out(&format!("{clusters} cluster(s) without deprecations\n"))
    }

    // Runs `kubectl ARGS…` with the session's kubeconfig and context, `stdin` written to it
    // (from another thread, as kubectl may answer while reading); its output, whatever its
    // exit status.
    pub(super) fn kubectl_raw(
        &self,
        args: &[String],
        stdin: Option<&[u8]>,
    ) -> Result<std::process::Output, PluginError> {
        let mut child = self
            .kubectl_command()
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| PluginError::io("run kubectl", e))?;
        let input = child.stdin.take();
        std::thread::scope(|s| {
            if let (Some(mut pipe), Some(bytes)) = (input, stdin) {
                // A write error shows as kubectl's own failure.
                s.spawn(move || pipe.write_all(bytes));
            }
            child
                .wait_with_output()
                .map_err(|e| PluginError::io("run kubectl", e))
        })
    }

    // `kubectl ARGS…` that must succeed: its raw standard output.
    pub(super) fn kubectl_ok(
        &self,
        args: &[String],
        stdin: Option<&[u8]>,
    ) -> Result<Vec<u8>, PluginError> {
        let out = self.kubectl_raw(args, stdin)?;
        if !out.status.success() {
            return Err(PluginError::Refused(format!(
                "kubectl {} ended with {}: {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(out.stdout)
    }
}
