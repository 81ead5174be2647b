//! The data plane as a client sees it: a writer that counts acknowledged writes (`SET` then
//! `WAIT`), following `status.currentPrimary` as a client follows the `-leader` Service, and a
//! sampler that asks every instance, round after round, whether it accepts a write.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use redis::crd::RedisCluster;
use redis::instance::resp::{Conn, RespError, Value};

/// Connects to `ip:6379` and authenticates with `password`.
pub async fn connect(ip: &str, password: &str) -> Result<Conn, RespError> {
    let mut c = Conn::tcp(&format!("{ip}:6379"), Duration::from_secs(2)).await?;
    c.command(&["AUTH", password]).await?;
    Ok(c)
}

/// The IPs of the cluster's data pods, by pod name.
pub async fn pod_ips(pods: &Api<Pod>, cluster: &str) -> BTreeMap<String, String> {
    let lp = ListParams::default().labels(&format!(
        "redis.io/cluster={cluster},redis.io/workload=data"
    ));
    let Ok(list) = pods.list(&lp).await else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            let ip = p.status?.pod_ip.filter(|ip| !ip.is_empty())?;
            Some((name, ip))
        })
        .collect()
}

/// Where the writer sends its writes: the current primary's IP.
async fn primary_ip(
    clusters: &Api<RedisCluster>,
    pods: &Api<Pod>,
    cluster: &str,
) -> Option<String> {
    let rc = clusters.get(cluster).await.ok()?;
    let primary = rc.status?.current_primary;
    pods.get(&primary).await.ok()?.status?.pod_ip
}

/// What a writer saw.
#[derive(Clone, Debug, Default)]
pub struct Writes {
    /// Keys whose write was acknowledged (by `WAIT` when replicas are required).
    pub acked: BTreeSet<String>,
    /// Writes that failed or were not acknowledged.
    pub errors: u64,
    /// The errors' texts, by kind (for the test's message).
    pub kinds: BTreeMap<String, u64>,
    /// When the last write was acknowledged.
    pub last_ack: Option<Instant>,
    /// The longest time between two acknowledged writes (the unavailability a client saw).
    pub longest_gap: Duration,
}

/// A writer running until stopped.
pub struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    /// What it saw so far.
    pub writes: Arc<Mutex<Writes>>,
}

impl Writer {
    /// Writes `k<n>` keys to the current primary of `cluster`; a write counts as acknowledged
    /// when `WAIT replicas 1000` confirms it (`replicas` 0: when `SET` answers OK).
    pub fn start(
        clusters: Api<RedisCluster>,
        pods: Api<Pod>,
        cluster: &str,
        password: String,
        replicas: i64,
    ) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let writes: Arc<Mutex<Writes>> = Arc::default();
        let cluster = cluster.to_owned();
        let task = {
            let (stop, writes) = (stop.clone(), writes.clone());
            tokio::spawn(async move {
                let mut conn: Option<Conn> = None;
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    if conn.is_none() {
                        let Some(ip) = primary_ip(&clusters, &pods, &cluster).await else {
                            tokio::time::sleep(Duration::from_millis(100)).await; // retry pacing
                            continue;
                        };
                        match connect(&ip, &password).await {
                            Ok(c) => conn = Some(c),
                            Err(e) => {
                                note(&writes, &e.to_string());
                                tokio::time::sleep(Duration::from_millis(100)).await; // retry pacing
                                continue;
                            }
                        }
                    }
                    let Some(c) = conn.as_mut() else { continue };
                    let key = format!("k{n}");
                    n += 1;
                    let result = async {
                        c.command(&["SET", &key, "v"]).await?;
                        if replicas == 0 {
                            return Ok(true);
                        }
                        let r = c.command(&["WAIT", &replicas.to_string(), "1000"]).await?;
                        Ok::<bool, RespError>(matches!(r, Value::Int(k) if k >= replicas))
                    }
                    .await;
                    match result {
                        Ok(true) => {
                            let mut w = writes.lock().expect("writes");
                            let now = Instant::now();
                            if let Some(last) = w.last_ack {
                                w.longest_gap = w.longest_gap.max(now - last);
                            }
                            w.last_ack = Some(now);
                            w.acked.insert(key);
                        }
                        Ok(false) => note(&writes, "not acknowledged by WAIT"),
                        Err(e) => {
                            note(&writes, &e.to_string());
                            conn = None;
                        }
                    }
                }
            })
        };
        Writer { stop, task, writes }
    }

    /// Acknowledged writes so far.
    pub fn acked(&self) -> usize {
        self.writes.lock().expect("writes").acked.len()
    }

    /// Waits until `more` further writes are acknowledged.
    pub async fn progress(&self, more: usize, timeout: Duration) {
        let target = self.acked() + more;
        testenv::eventually(
            &format!("{more} more acknowledged writes"),
            timeout,
            || async { (self.acked() >= target).then_some(()) },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}; writer: {:?}", self.writes.lock().expect("w").kinds));
    }

    /// Stops and returns what it saw.
    pub async fn finish(self) -> Writes {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.writes.lock().expect("writes").clone()
    }
}

fn note(w: &Mutex<Writes>, e: &str) {
    let mut w = w.lock().expect("writes");
    w.errors += 1;
    let kind: String = e.chars().take(60).collect();
    *w.kinds.entry(kind).or_default() += 1;
}

/// The acknowledged keys missing from the instance at `ip`.
pub async fn missing(ip: &str, password: &str, keys: &BTreeSet<String>) -> Vec<String> {
    let mut c = connect(ip, password).await.expect("connect to the primary");
    let mut out = Vec::new();
    for k in keys {
        if c.command(&["EXISTS", k]).await.expect("EXISTS").int() != Some(1) {
            out.push(k.clone());
        }
    }
    out
}

/// The two properties every failover test ends on: no write acknowledged with `WAIT` is
/// `missing` from the new primary (see [`missing`]), and no sampled round saw two instances
/// accept a write.
pub fn assert_nothing_lost_never_split(missing: &[String], writes: &Writes, samples: &Samples) {
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes lost: {:?}",
        missing.len(),
        writes.acked.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(samples.rounds > 10, "the sampler ran: {samples:?}");
    assert!(
        samples.split.is_empty(),
        "two instances took writes: {:?}",
        samples.split
    );
}

/// Rounds in which more than one instance accepted a write.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// Rounds taken.
    pub rounds: u64,
    /// Rounds in which two or more instances accepted a write, with their names.
    pub split: Vec<Vec<String>>,
}

/// A sampler running until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    samples: Arc<Mutex<Samples>>,
}

impl Sampler {
    /// Every round, asks each data pod of `cluster` to write `probe` (a `SET` with a short
    /// timeout); an instance accepts when the `SET` answers OK.
    pub fn start(pods: Api<Pod>, cluster: &str, password: String) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples: Arc<Mutex<Samples>> = Arc::default();
        let cluster = cluster.to_owned();
        let task = {
            let (stop, samples) = (stop.clone(), samples.clone());
            tokio::spawn(async move {
                let mut conns: BTreeMap<String, (String, Conn)> = BTreeMap::new();
                while !stop.load(Ordering::SeqCst) {
                    let ips = pod_ips(&pods, &cluster).await;
                    let mut accepted = Vec::new();
                    for (name, ip) in &ips {
                        if conns.get(name).is_none_or(|(i, _)| i != ip) {
                            conns.remove(name);
                            let Ok(mut c) = connect(ip, &password).await else {
                                continue;
                            };
                            c.set_timeout(Duration::from_millis(500));
                            conns.insert(name.clone(), (ip.clone(), c));
                        }
                        let Some((_, c)) = conns.get_mut(name) else {
                            continue;
                        };
                        match c.command(&["SET", "probe", name]).await {
                            Ok(Value::Simple(s)) if s == "OK" => accepted.push(name.clone()),
                            Ok(_) | Err(RespError::Server(_)) => {}
                            Err(_) => {
                                conns.remove(name);
                            }
                        }
                    }
                    let mut s = samples.lock().expect("samples");
                    s.rounds += 1;
                    if accepted.len() > 1 {
                        s.split.push(accepted);
                    }
                }
            })
        };
        Sampler {
            stop,
            task,
            samples,
        }
    }

    /// Stops and returns what it saw.
    pub async fn finish(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.samples.lock().expect("samples").clone()
    }
}
