//! The pod's sandbox and volumes, and its end: the network namespace and address, the /etc
//! files, the volume directories (retried while a source is missing, refreshed in place when
//! sources change), and termination (SIGTERM, SIGKILL after the grace period, clean-up, the
//! final deletion of the pod object).

use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};

use super::{Msg, NamespaceObjects, RETRY, Sandbox, Worker};
use crate::procnode::envvars::PodContext;
use crate::procnode::events::Kind as EventKind;
use crate::procnode::model::RunState;
use crate::procnode::{cgroup, launch, network, node, projection, volumes};

impl Worker {
    pub(super) async fn ensure_sandbox(&mut self) -> bool {
        if self.sandbox.as_ref().is_some_and(|s| s.ready) {
            return true;
        }
        let slot = self.ctx.slot;
        let ip = match &self.sandbox {
            Some(s) => Some(s.ip),
            None => self
                .ctx
                .ipam
                .lock()
                .expect("ipam")
                .allocate(slot, self.node_index),
        };
        let Some(ip) = ip else {
            let message = format!("no free pod address left on {}", self.node);
            return self.waiting_all("ContainerCreating", message);
        };
        self.sandbox = Some(Sandbox { ip, ready: false });
        let uid = self.uid.clone();
        let etc = self.ctx.layout.etc_dir(&self.uid);
        let hosts = launch::etc_hosts(
            &self.pod,
            &ip.to_string(),
            &network::gateway(slot).to_string(),
        );
        let hostname = launch::hostname(&self.pod);
        let made = tokio::task::spawn_blocking(move || -> Result<(), String> {
            network::create_pod(slot, &uid, ip).map_err(|e| e.to_string())?;
            fs::create_dir_all(&etc).map_err(|e| e.to_string())?;
            fs::write(etc.join("hosts"), hosts).map_err(|e| e.to_string())?;
            fs::write(etc.join("hostname"), format!("{hostname}\n")).map_err(|e| e.to_string())?;
            fs::write(etc.join("resolv.conf"), launch::RESOLV_CONF).map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        match made {
            Ok(()) => {
                if let Some(s) = self.sandbox.as_mut() {
                    s.ready = true;
                }
                true
            }
            Err(e) => {
                tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "creating the pod sandbox");
                self.event(
                    EventKind::Warning,
                    "FailedCreatePodSandBox",
                    format!("Failed to create pod sandbox: {e}"),
                    None,
                );
                self.waiting_all(
                    "ContainerCreating",
                    format!("creating the pod sandbox: {e}"),
                )
            }
        }
    }

    /// Marks every container that never ran as waiting; schedules a retry; returns false.
    pub(super) fn waiting_all(&mut self, reason: &str, message: String) -> bool {
        for c in self.ctrs.iter_mut().filter(|c| !c.ever_ran()) {
            c.state = RunState::Waiting {
                reason: reason.into(),
                message: Some(message.clone()),
            };
        }
        self.retry_at = Some(Instant::now() + RETRY);
        false
    }

    pub(super) fn pod_context(&self) -> (String, String) {
        let ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip.to_string())
            .unwrap_or_default();
        (ip, network::gateway(self.ctx.slot).to_string())
    }

    pub(super) async fn ensure_volumes(&mut self) -> bool {
        if self.volumes.is_some() {
            return true;
        }
        let pod_spec_volumes = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let projections = projection::token_projections(&pod_spec_volumes);
        let result = async {
            self.tokens
                .refresh(&self.ctx.client, &self.pod, &projections)
                .await
                .map_err(|e| ("token".to_string(), e))?;
            let claims = volumes::claims(&self.ctx.client, &self.pod)
                .await
                .map_err(|e| ("claim".to_string(), e))?;
            let (ip, gw) = self.pod_context();
            let pctx = PodContext {
                pod: &self.pod,
                pod_ip: &ip,
                host_ip: &gw,
                node_cpu: node::ALLOCATABLE.0,
                node_memory: node::ALLOCATABLE.1,
            };
            let objects = NamespaceObjects {
                ctx: &self.ctx,
                ns: &self.ns,
            };
            let src = volumes::Sources {
                layout: &self.ctx.layout,
                objects: &objects,
                tokens: &self.tokens,
                pod: &pctx,
            };
            volumes::materialize(&src, &claims)
        }
        .await;
        match result {
            Ok(dirs) => {
                self.volumes = Some(dirs);
                self.sources_dirty = false;
                true
            }
            Err((volume, message)) => {
                let text = format!("MountVolume.SetUp failed for volume \"{volume}\" : {message}");
                self.event(EventKind::Warning, "FailedMount", text.clone(), None);
                self.waiting_all("ContainerCreating", text)
            }
        }
    }

    pub(super) async fn refresh_volumes(&mut self) {
        let pod_spec_volumes = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let projections = projection::token_projections(&pod_spec_volumes);
        if let Err(e) = self
            .tokens
            .refresh(&self.ctx.client, &self.pod, &projections)
            .await
        {
            tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "refreshing tokens");
        }
        let (ip, gw) = self.pod_context();
        let pctx = PodContext {
            pod: &self.pod,
            pod_ip: &ip,
            host_ip: &gw,
            node_cpu: node::ALLOCATABLE.0,
            node_memory: node::ALLOCATABLE.1,
        };
        let objects = NamespaceObjects {
            ctx: &self.ctx,
            ns: &self.ns,
        };
        let src = volumes::Sources {
            layout: &self.ctx.layout,
            objects: &objects,
            tokens: &self.tokens,
            pod: &pctx,
        };
        for (volume, e) in volumes::refresh(&src) {
            tracing::warn!(pod = %self.name, ns = %self.ns, volume, error = %e, "refreshing a volume");
        }
        self.sources_dirty = false;
    }

    /// Removes the network namespace and returns the address (the status keeps showing it).
    pub(super) fn release_sandbox(&mut self) {
        let Some(s) = self.sandbox.as_mut() else {
            return;
        };
        if !s.ready {
            return;
        }
        s.ready = false;
        let ip = s.ip;
        if let Err(e) = network::delete_pod(self.ctx.slot, &self.uid) {
            tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "removing the network namespace");
        }
        self.ctx.ipam.lock().expect("ipam").release(ip);
    }

    /// Stops every container (SIGTERM, SIGKILL after `grace`), removes the pod's sandbox,
    /// cgroups and files, and deletes the pod object unless the agent is shutting down.
    pub(super) async fn terminate(&mut self, grace: Duration) {
        for i in 0..self.runs.len() {
            if self.runs[i].is_some() {
                if !grace.is_zero() {
                    let name = self.specs[i].name.clone();
                    self.event(
                        EventKind::Normal,
                        "Killing",
                        format!("Stopping container {name}"),
                        Some(&name),
                    );
                }
                self.kill(i, grace);
            }
        }
        // Every run reports its exit; the escalation timers guarantee it.
        let deadline = Instant::now() + grace + Duration::from_secs(30);
        while self.runs.iter().any(Option::is_some) {
            let msg = tokio::select! {
                m = self.rx.recv() => m,
                _ = tokio::time::sleep_until(deadline.into()) => None,
            };
            match msg {
                Some(Msg::Pod(p)) => self.pod = Arc::new(*p),
                Some(m @ (Msg::Exited { .. } | Msg::Escalate { .. })) => self.handle(m),
                Some(Msg::Shutdown) => {
                    for i in 0..self.runs.len() {
                        self.kill(i, Duration::ZERO);
                    }
                }
                Some(_) => {}
                None => {
                    tracing::error!(pod = %self.name, ns = %self.ns, "containers did not report their exit; killing the pod's cgroup");
                    let cg = self.ctx.cgroups.pod(&self.uid);
                    let _ = tokio::task::spawn_blocking(move || cgroup::kill(&cg)).await;
                    break;
                }
            }
        }
        self.release_sandbox();
        let cg = self.ctx.cgroups.pod(&self.uid);
        let dir = self.ctx.layout.pod_dir(&self.uid);
        let _ = tokio::task::spawn_blocking(move || {
            let _ = cgroup::kill(&cg);
            let _ = cgroup::remove_tree(&cg);
            let _ = fs::remove_dir_all(dir);
        })
        .await;
        if self.shutdown || self.gone {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&self.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %self.name, ns = %self.ns, error = %e, "deleting the pod")
            }
        }
    }
}
