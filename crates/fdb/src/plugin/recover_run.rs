//! `recover-multi-region-cluster`: upstream's steps, in its order, through `kubectl exec` into
//! the cluster's pods (never `--fdb-binary-dir`: the coordination state lives in the pods).
//!
//! 1. Two confirmations (`-w`).
//! 2. The database, read from a random running pod, must be unavailable, unhealthy and
//!    without a coordinator quorum (a status that cannot be read is retried five times, 5 s
//!    apart).
//! 3. `spec.skip: true`, so the operator stays away.
//! 4. The plan ([`recover::plan`]).
//! 5. The database configuration reduced to the cluster's own data center.
//! 6. The coordination files of the running coordinator copied into each new coordinator's
//!    data directory.
//! 7. The new connection string into `status.connectionString` and the config map's
//!    `cluster-file`.
//! 8. Upstream slept 2 minutes for the config map to reach the pods: this waits, at most that
//!    long, until every running pod mounts the new cluster file.
//! 9. Split image: each sidecar is asked to copy its files again.
//! 10. Every running pod's fdbserver processes are stopped and its local cluster file removed
//!     (retried as upstream).
//! 11. Upstream slept a minute for them to start again: this waits, at most that long, for
//!     the coordinator quorum.
//! 12. `force_recovery_with_data_loss <dataCenter>`.
//! 13. `spec.skip: false`.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::recover::{self, Plan};
use super::run_status::Fdbcli;
use super::{Io, PluginError, Run, running};
use crate::cluster::resources::SIDECAR_CONTAINER;
use crate::crd::FoundationDBCluster;

const ABORTED: &str = "aborted recover multi-region aciton";
const POLL: Duration = Duration::from_secs(2);

impl Run<'_> {
    pub(super) async fn recover(&self, name: &str, io: &mut Io<'_>) -> Result<(), PluginError> {
        let ns = self.ns().to_owned();
        if self.cli.wait {
            let first = format!(
                "WARNING:\nThe cluster: {ns}/{name} will be force recovered.\nOnly perform those steps if you are unable to recover the coordinator state.\nPerforming this action can lead to data loss."
            );
            let second = format!(
                "WARNING:\nIf this is a multi-region cluster, or is spread across different namespaces/Kubernetes clusters.\nEnsure that all Pods of this FDB cluster: {name} in the other namespaces/Kubernetes clusters are deleted and shutdown."
            );
            for question in [first, second] {
                if !io.confirm(&question)? {
                    return Err(PluginError::Refused(ABORTED.into()));
                }
            }
        }
        let c = self.cluster(name).await?;
        self.check_recoverable(&c, io).await?;
        self.patch_spec(&c, json!({"spec": {"skip": true}})).await?;
        let pods = self.running_pods(&c).await?;
        let plan = recover::plan(&c, &pods).map_err(PluginError::Refused)?;
        for line in &plan.lines {
            io.err(&format!("{line}\n"))?;
        }
        io.err("Update the database configuration to single region configuration\n")?;
        self.patch_spec(&c, recover::single_region_patch(&c))
            .await?;
        if !plan.new_coordinators.is_empty() {
            self.copy_coordination_state(&c, &plan, io).await?;
        }
        self.publish_connection_string(&c, &plan.connection_string)
            .await?;
        self.wait_for_seed_files(&c, &pods, &plan.connection_string, io)
            .await?;
        if !c.use_unified_image() {
            io.err("The cluster uses the split image, the plugin will update the copied files\n")?;
            for pod in &pods {
                let ip = pod_ip(pod);
                let argv = recover::copy_files_argv(&ns, &plan.source, &ip, sidecar_tls(pod));
                self.kubectl_ok(&argv, None)?;
            }
        }
        io.err("Killing fdbserver processes\n")?;
        self.restart_from_seed(&c).await?;
        self.wait_for_quorum(&c, &plan.source, io).await?;
        let argv = recover::force_recovery_argv(&ns, &plan.source, &c.spec.data_center);
        io.err(&format!(
            "Triggering force recovery with command: {}\n",
            argv.join(" ")
        ))?;
        let out = self.kubectl_ok(&argv, None)?;
        io.out(&String::from_utf8_lossy(&out))?;
        self.patch_spec(&c, json!({"spec": {"skip": false}})).await
    }

    async fn running_pods(&self, c: &FoundationDBCluster) -> Result<Vec<Pod>, PluginError> {
        Ok(self
            .pods(c, None)
            .await?
            .into_iter()
            .filter(running)
            .collect())
    }

    // Step 2: the status of a random running pod must allow a forced recovery.
    async fn check_recoverable(
        &self,
        c: &FoundationDBCluster,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let via = match self.fdbcli_for_pod(c).await? {
            Some(pod) => Fdbcli::Pod(pod),
            None => {
                return Err(PluginError::Refused(format!(
                    "cluster {:?} has no running pod to run fdbcli in",
                    c.name_any()
                )));
            }
        };
        if let Fdbcli::Pod(pod) = &via {
            io.err(&format!("Getting the status from: {pod}\n"))?;
        }
        let mut status = self.status_document(c, &via).await;
        for _ in 1..5 {
            if status.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            status = self.status_document(c, &via).await;
        }
        recover::check_should_recover(&status?).map_err(PluginError::Refused)
    }

    // A random running pod of the cluster (recovery never runs fdbcli locally).
    async fn fdbcli_for_pod(&self, c: &FoundationDBCluster) -> Result<Option<String>, PluginError> {
        let pods = self.running_pods(c).await?;
        Ok((!pods.is_empty()).then(|| pods[fastrand::usize(..pods.len())].name_any()))
    }

    // Merge patch of the cluster (no resourceVersion: each names only the fields it sets).
    async fn patch_spec(
        &self,
        c: &FoundationDBCluster,
        patch: serde_json::Value,
    ) -> Result<(), PluginError> {
        let name = c.name_any();
        self.clusters_api()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| PluginError::kube("foundationdbcluster", &name, self.ns(), "patch", e))?;
        Ok(())
    }

    // Step 6: the coordination files from the source into every new coordinator.
    async fn copy_coordination_state(
        &self,
        c: &FoundationDBCluster,
        plan: &Plan,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let ns = self.ns();
        let found = self.kubectl_ok(
            &recover::find_coordination_file_argv(ns, &plan.source),
            None,
        )?;
        let found = String::from_utf8_lossy(&found);
        let first = found.lines().next().map(str::trim).unwrap_or_default();
        let dir = Path::new(first)
            .parent()
            .and_then(Path::to_str)
            .filter(|d| !first.is_empty() && !d.is_empty())
            .ok_or_else(|| {
                PluginError::Refused(format!("no coordination file found in {}", plan.source))
            })?;
        io.err(&format!("dataDir: {dir}\n"))?;
        let mut files = Vec::new();
        for file in recover::COORDINATION_FILES {
            let path = format!("{dir}/{file}");
            let bytes = self.kubectl_ok(&recover::download_argv(ns, &plan.source, &path), None)?;
            if bytes.is_empty() {
                return Err(PluginError::Refused(format!("file {path} is empty")));
            }
            files.push((file, bytes));
        }
        for (pod, class) in &plan.new_coordinators {
            let target = recover::target_data_dir(dir, c, class);
            for (file, bytes) in &files {
                let path = format!("{target}/{file}");
                io.err(&format!("Upload files, target: {path} pod {pod}\n"))?;
                self.kubectl_ok(&recover::upload_argv(ns, pod, &path), Some(bytes))?;
            }
        }
        Ok(())
    }

    // Step 7: the connection string into the status and the config map's cluster file (the
    // operator, skipped, does not render it).
    async fn publish_connection_string(
        &self,
        c: &FoundationDBCluster,
        connection_string: &str,
    ) -> Result<(), PluginError> {
        let name = c.name_any();
        let status = json!({"status": {"connectionString": connection_string}});
        self.clusters_api()
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| {
                PluginError::kube("foundationdbcluster/status", &name, self.ns(), "patch", e)
            })?;
        let cm = format!("{name}-config");
        let data = json!({"data": {"cluster-file": connection_string}});
        Api::<ConfigMap>::namespaced(self.s.client.clone(), self.ns())
            .patch(&cm, &PatchParams::default(), &Patch::Merge(&data))
            .await
            .map_err(|e| PluginError::kube("configmap", &cm, self.ns(), "patch", e))?;
        Ok(())
    }

    // Step 8: until every pod mounts the new cluster file, at most upstream's two minutes.
    async fn wait_for_seed_files(
        &self,
        c: &FoundationDBCluster,
        pods: &[Pod],
        connection_string: &str,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let deadline = Instant::now() + Duration::from_secs(120);
        for pod in pods {
            let argv = seed_file_argv(self.ns(), &pod.name_any(), c.use_unified_image());
            loop {
                let seen = self.kubectl_raw(&argv, None)?;
                if String::from_utf8_lossy(&seen.stdout).trim() == connection_string {
                    break;
                }
                if Instant::now() >= deadline {
                    io.err(&format!(
                        "Pod {} does not show the new cluster file yet, going on\n",
                        pod.name_any()
                    ))?;
                    break;
                }
                tokio::time::sleep(POLL).await;
            }
        }
        Ok(())
    }

    // Step 10, as upstream: each running pod once, a failed one again at once, those still
    // failing again after 10 s unless gone; a pod that is gone needs nothing.
    async fn restart_from_seed(&self, c: &FoundationDBCluster) -> Result<(), PluginError> {
        let ns = self.ns();
        let mut retry = Vec::new();
        for pod in self.running_pods(c).await? {
            let argv = recover::restart_from_seed_argv(ns, &pod.name_any());
            if self.kubectl_ok(&argv, None).is_err() {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if self.kubectl_ok(&argv, None).is_err() {
                    retry.push(pod.name_any());
                }
            }
        }
        if retry.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let api = Api::<Pod>::namespaced(self.s.client.clone(), ns);
        for name in retry {
            let pod = api.get_opt(&name).await.map_err(|e| PluginError::Api {
                action: format!("get pod {ns}/{name}"),
                source: e,
            })?;
            if pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
                continue;
            }
            self.kubectl_ok(&recover::restart_from_seed_argv(ns, &name), None)?;
        }
        Ok(())
    }

    // Step 11: until the coordinators answer, at most upstream's minute.
    async fn wait_for_quorum(
        &self,
        c: &FoundationDBCluster,
        source: &str,
        io: &mut Io<'_>,
    ) -> Result<(), PluginError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let via = Fdbcli::Pod(source.to_owned());
        loop {
            let status = self.status_document(c, &via).await;
            if status.is_ok_and(|s| s.client.coordinators.quorum_reachable) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return io.err("The coordinators do not answer yet, going on\n");
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

// The cluster file a pod mounts from the config map: the main container's with the unified
// image, the sidecar's input with the split image.
fn seed_file_argv(namespace: &str, pod: &str, unified: bool) -> Vec<String> {
    if unified {
        return recover::seed_cluster_file_argv(namespace, pod);
    }
    [
        "exec",
        "-n",
        namespace,
        pod,
        "-c",
        SIDECAR_CONTAINER,
        "--",
        "cat",
        "/var/input-files/fdb.cluster",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

// Upstream's `PodHasSidecarTLS`: the sidecar container runs with `--tls`.
fn sidecar_tls(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .any(|c| c.name == SIDECAR_CONTAINER && c.args.iter().flatten().any(|a| a == "--tls"))
    })
}
