//! Watching an operator that runs as a Deployment on the process-backed nodes: replicas
//! available, who holds the leader Lease, who says it leads (its
//! `leader_election_master_status` metric), and the leadership intervals its logs record.
//!
//! Contract:
//! - [`LeaderWatch`] samples every 100 ms, until stopped: the Lease holder and, fetched
//!   concurrently, each operator pod's metric. A sample in which two pods report leading is a
//!   violation ([`LeaderWatch::stop`] returns every sample; [`two_leaders`] picks them).
//! - [`leadership`] reads a kit operator's JSON log: the intervals between "acquired
//!   leadership" and "released leadership" (or the end of the log), so a test can check that
//!   no two replicas' intervals overlap at any moment, not just at sampled ones.
//! - [`OperatorDeployment::apply`] runs this build's operator binary as the image of a crate's
//!   test kustomization (`tests/deploy`) in one namespace; [`replicas_and_leader`],
//!   [`delete_leader`] and [`assert_clean_handover`] are the steps every operator's
//!   leader-election test takes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams};
use tokio_util::sync::CancellationToken;

/// Waits until Deployment `name` has `replicas` ready, updated replicas; returns its pods.
pub async fn wait_available(
    client: &kube::Client,
    ns: &str,
    name: &str,
    replicas: i32,
    timeout: Duration,
) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = crate::wait_for(&api, name, timeout, move |d: &Deployment| {
        d.status.as_ref().is_some_and(|s| {
            s.ready_replicas == Some(replicas) && s.updated_replicas == Some(replicas)
        })
    })
    .await?;
    let selector = d
        .spec
        .and_then(|s| s.selector.match_labels)
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// The Lease's holder, if any.
pub async fn holder(client: &kube::Client, ns: &str, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Whether the operator at `ip:port` reports leading Lease `lease` (None: no answer).
pub async fn reports_leading(
    http: &reqwest::Client,
    ip: &str,
    port: u16,
    lease: &str,
) -> Option<bool> {
    let body = http
        .get(format!("http://{ip}:{port}/metrics"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let prefix = format!("leader_election_master_status{{name=\"{lease}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim() == "1")
}

/// One observation.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When it was taken.
    pub at: Instant,
    /// The Lease holder.
    pub holder: Option<String>,
    /// The pods whose metric said they lead.
    pub leading: Vec<String>,
}

/// The samples in which more than one pod reported leading.
pub fn two_leaders(samples: &[Sample]) -> Vec<&Sample> {
    samples.iter().filter(|s| s.leading.len() > 1).collect()
}

/// A background sampler of leadership.
pub struct LeaderWatch {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl LeaderWatch {
    /// Samples Lease `ns/lease` and the metrics (on `port`) of pods matching `selector`.
    pub fn start(client: kube::Client, ns: &str, lease: &str, selector: &str, port: u16) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (ns, lease, selector) = (ns.to_owned(), lease.to_owned(), selector.to_owned());
        let (out, token) = (samples.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("http client");
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            while !token.is_cancelled() {
                let at = Instant::now();
                let list = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default();
                let checks = list.iter().filter_map(|p| {
                    let ip = p.status.as_ref()?.pod_ip.clone()?;
                    let name = p.metadata.name.clone()?;
                    let (http, lease) = (http.clone(), lease.clone());
                    Some(async move { (name, reports_leading(&http, &ip, port, &lease).await) })
                });
                let (holder, results) = tokio::join!(
                    holder(&client, &ns, &lease),
                    futures::future::join_all(checks)
                );
                let leading = results
                    .into_iter()
                    .filter(|(_, l)| *l == Some(true))
                    .map(|(n, _)| n)
                    .collect();
                out.lock().expect("samples").push(Sample {
                    at,
                    holder,
                    leading,
                });
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {} // the sampling interval
                }
            }
        });
        Self {
            samples,
            stop,
            task,
        }
    }

    /// Has a sample shown `pod`, and only `pod`, reporting leading?
    pub fn saw_sole_leader(&self, pod: &str) -> bool {
        self.samples
            .lock()
            .expect("samples")
            .iter()
            .any(|s| s.leading.len() == 1 && s.leading[0] == pod)
    }

    /// Stops sampling; returns every sample.
    pub async fn stop(self) -> Vec<Sample> {
        self.stop.cancel();
        let _ = self.task.await;
        self.samples.lock().expect("samples").clone()
    }
}

/// Leadership intervals in a kit operator's JSON log: (acquired, released or None if still
/// leading when the log ends).
pub fn leadership(log: &str) -> Vec<(Timestamp, Option<Timestamp>)> {
    let mut out: Vec<(Timestamp, Option<Timestamp>)> = Vec::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(at) = v["timestamp"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
        else {
            continue;
        };
        match v["message"].as_str() {
            Some("acquired leadership") => out.push((at, None)),
            Some("released leadership" | "lost leadership") => {
                if let Some(last) = out.last_mut().filter(|l| l.1.is_none()) {
                    last.1 = Some(at);
                }
            }
            _ => {}
        }
    }
    out
}

/// An operator's test Deployment: the crate's kustomization `tests/deploy` (the shipped
/// manager and RBAC, as the user would apply them) with this build's binary as its image.
pub struct OperatorDeployment<'a> {
    /// The operator crate's directory relative to the workspace root (`crates/<name>`).
    pub crate_dir: &'a str,
    /// The image repository the kustomization names (replaced by a per-namespace tag).
    pub repository: &'a str,
    /// The binary's name, which is also its path in the image (`/<name>`).
    pub binary: &'a str,
    /// The built binary (`env!("CARGO_BIN_EXE_<name>")`).
    pub binary_path: &'a str,
    /// Environment of the `manager` container, set after rendering (the watched namespace,
    /// log format, endpoints of test servers).
    pub env: &'a [(&'a str, &'a str)],
}

impl OperatorDeployment<'_> {
    /// Registers the image on the process-backed nodes and applies the kustomization in `ns`;
    /// the registration lasts as long as the returned value.
    pub async fn apply(
        &self,
        admin: &kube::Client,
        ns: &str,
    ) -> anyhow::Result<crate::procnode::ImageRegistration> {
        let image = format!("{}:{ns}", self.repository);
        let path = format!("/{}", self.binary);
        let entry = crate::procnode::ImageEntry {
            image: image.clone(),
            files: [(path.clone(), self.binary_path.to_string())].into(),
            entrypoint: vec![path],
            ..crate::procnode::ImageEntry::default()
        };
        let key = format!("{}.{ns}", self.binary);
        let mapping = crate::procnode::register_image(admin, &key, &entry).await?;
        let mut objs = crate::kustomize::render(
            &crate::workspace_root()
                .join(self.crate_dir)
                .join("tests/deploy"),
        )?;
        crate::kustomize::set_namespace(&mut objs, ns);
        crate::kustomize::set_image(&mut objs, self.repository, &image);
        for (key, value) in self.env {
            crate::kustomize::set_env(&mut objs, "manager", key, value);
        }
        crate::kustomize::apply_all(admin, &objs, "flotilla-e2e").await?;
        Ok(mapping)
    }
}

/// Waits until Deployment `deployment` has `replicas` available pods, every one on a
/// process-backed node, and one of them holds Lease `lease`: (the pods' names, the leader).
pub async fn replicas_and_leader(
    admin: &kube::Client,
    ns: &str,
    deployment: &str,
    replicas: i32,
    lease: &str,
    timeout: Duration,
) -> anyhow::Result<(Vec<String>, String)> {
    let pods = wait_available(admin, ns, deployment, replicas, timeout).await?;
    let mut names = Vec::new();
    for p in &pods {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let node = node.unwrap_or_default();
        anyhow::ensure!(
            crate::procnode::NODES.contains(&node.as_str()),
            "pod {:?} runs on {node:?}, not a process-backed node",
            p.metadata.name
        );
        names.extend(p.metadata.name.clone());
    }
    let leader = crate::eventually("a leader", timeout, || async {
        holder(admin, ns, lease).await.filter(|h| names.contains(h))
    })
    .await?;
    Ok((names, leader))
}

/// Deletes the leader's pod; waits for another holder of `lease` and for the pod to be gone:
/// (the old leader's pod as it was before the delete, the new leader).
pub async fn delete_leader(
    admin: &kube::Client,
    ns: &str,
    lease: &str,
    leader: &str,
    timeout: Duration,
) -> anyhow::Result<(Pod, String)> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let old = pods.get(leader).await?;
    pods.delete(leader, &DeleteParams::default()).await?;
    let other = crate::eventually("another replica to take over", timeout, || async {
        holder(admin, ns, lease).await.filter(|h| h != leader)
    })
    .await?;
    crate::wait_deleted(&pods, leader, timeout).await?;
    Ok((old, other))
}

/// Never two leaders: in no sample of the pods' own metrics, and not in the leadership
/// intervals their logs (container `container`) record; both `old` and `new` were seen
/// leading, and `old` released the Lease before `new` acquired it.
pub fn assert_clean_handover(samples: &[Sample], old: &Pod, new: &Pod, container: &str) {
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    let both = two_leaders(samples);
    assert!(
        both.is_empty(),
        "two pods reported leading at once: {both:?}"
    );
    for p in [old, new] {
        assert!(
            samples.iter().any(|s| s.leading == [name(p)]),
            "{} was seen leading",
            name(p)
        );
    }
    let log = |p: &Pod| crate::procnode::logs(p, container, false).unwrap_or_default();
    let released = leadership(&log(old))
        .last()
        .and_then(|(_, end)| *end)
        .expect("the old leader released the Lease");
    let acquired = leadership(&log(new))
        .last()
        .map(|(start, _)| *start)
        .expect("the new leader acquired it");
    assert!(
        released < acquired,
        "released at {released}, acquired at {acquired}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_come_from_acquire_and_release_lines() {
        let log = r#"{"timestamp":"2026-11-22T10:00:00.000001Z","level":"INFO","message":"acquired leadership"}
not json
{"timestamp":"2026-11-22T10:00:05Z","level":"INFO","message":"released leadership"}
{"timestamp":"2026-11-22T10:01:00Z","level":"INFO","message":"acquired leadership"}"#;
        let got = leadership(log);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1, Some("2026-11-22T10:00:05Z".parse().expect("ts")));
        assert_eq!(got[1].1, None);
    }
}
