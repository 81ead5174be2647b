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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
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
