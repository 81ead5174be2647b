//! Password rotation under write load with real Redis, in standalone and in sentinel mode:
//! the user replaces `password` in the cluster's auth Secret; the data pods (and the
//! Sentinels) take it live. Checked from the clients' side: a client that switches to the new
//! password once the primary accepts it never sees an error, an instance that accepted it
//! never refuses it again, replication never stops, and the operator keeps seeing every
//! instance (it is never locked out).

mod operator;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use operator::data::{self, Writer};
use operator::sentinel::{healthy_with_sentinels, sentinels, sentinels_agree};
use operator::{Env, T, masters};
use redis::crd::{ClusterPhase, RedisCluster};
use serde_json::json;

const NEW: &str = "rotated-password-2";

/// What fresh connections with one password saw, per pod.
#[derive(Clone, Debug, Default)]
struct Probes {
    /// Pods that accepted the password at least once.
    accepted: BTreeMap<String, u64>,
    /// Refusals after the pod had accepted it (what must never happen), with the error.
    regressions: Vec<(String, String)>,
}

/// Opens a fresh connection to every data pod of `demo` with `password`, round after round,
/// until stopped.
struct Prober {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    probes: Arc<Mutex<Probes>>,
}

impl Prober {
    fn start(pods: Api<Pod>, password: &str) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let probes: Arc<Mutex<Probes>> = Arc::default();
        let (s, p, pw) = (stop.clone(), probes.clone(), password.to_owned());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::SeqCst) {
                for (name, ip) in data::pod_ips(&pods, "demo").await {
                    let r = data::connect(&ip, &pw).await;
                    let mut p = p.lock().expect("probes");
                    match r {
                        Ok(_) => *p.accepted.entry(name).or_default() += 1,
                        Err(e) if p.accepted.contains_key(&name) => {
                            p.regressions.push((name, e.to_string()))
                        }
                        Err(_) => {}
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await; // round pacing
            }
        });
        Prober { stop, task, probes }
    }

    fn seen(&self) -> Probes {
        self.probes.lock().expect("probes").clone()
    }

    async fn finish(self) -> Probes {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.probes.lock().expect("probes").clone()
    }
}

/// What one version of the RedisCluster said.
#[derive(Clone, Debug)]
struct Seen {
    phase: Option<ClusterPhase>,
    primary: String,
    disconnected: Vec<String>,
    sentinels: i32,
}

/// Records every version of `demo` until the task is aborted.
fn record(env: &Env) -> (Arc<Mutex<Vec<Seen>>>, tokio::task::JoinHandle<()>) {
    operator::record_versions(env, "demo", |rc| {
        let st = rc.status.unwrap_or_default();
        Seen {
            phase: st.phase,
            primary: st.current_primary,
            disconnected: st
                .instances_status
                .iter()
                .filter(|(_, i)| !i.connected)
                .map(|(n, _)| n.clone())
                .collect(),
            sentinels: st.sentinel_ready_instances,
        }
    })
}

/// Rotates the password of the Healthy 3-instance cluster `demo` under a writer (see the
/// module); returns the primary and the cluster once the rotation is over.
async fn rotate_under_load(env: &Env, sentinel: bool) -> (String, RedisCluster) {
    let old = env.password("demo").await;
    let pods = env.api::<Pod>();
    let secrets = env.api::<Secret>();
    let auth = redis::names::auth_secret("demo");
    // A client on the old password, connected before the rotation.
    let before = Writer::start(env.clusters(), pods.clone(), "demo", old.clone(), 1);
    before.progress(200, T).await;
    let (seen, recorder) = record(env);
    let prober = Prober::start(pods.clone(), NEW);

    let started = Instant::now();
    let data = BTreeMap::from([("password".to_owned(), ByteString(NEW.as_bytes().to_vec()))]);
    let rotated = secrets
        .patch(
            &auth,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": data})),
        )
        .await
        .expect("rotate the password");
    // A client switching to the new password once the primary takes it.
    let rc = env.clusters().get("demo").await.expect("cluster");
    let primary = rc.status.expect("status").current_primary;
    let primary_ip = env.pod_ip(&primary).await.expect("ip");
    testenv::eventually("the primary accepts the new password", T, || async {
        data::connect(&primary_ip, NEW).await.ok()
    })
    .await
    .expect("new password accepted");
    let accepted_after = started.elapsed();
    let after = Writer::start(env.clusters(), pods.clone(), "demo", NEW.to_owned(), 1);
    after.progress(100, T).await;
    // Every instance takes it; then the old one is refused everywhere (retired).
    testenv::eventually("the old password retired on every instance", T, || async {
        let p = prober.seen();
        let ips = data::pod_ips(&pods, "demo").await;
        if ips.len() != 3 || ips.keys().any(|n| !p.accepted.contains_key(n)) {
            return None;
        }
        for ip in ips.values() {
            match data::connect(ip, &old).await {
                Err(e) if e.is_auth() => {}
                _ => return None,
            }
        }
        Some(())
    })
    .await
    .expect("rotation finished");
    let retired_after = started.elapsed();
    // The operator saw the new Secret and still reaches every instance.
    let rv = rotated.metadata.resource_version.expect("rv");
    let rc = env
        .wait("demo", T, move |c| {
            c.status.as_ref().is_some_and(|s| {
                s.secrets_resource_version.get("demo-auth") == Some(&rv)
                    && s.phase == Some(ClusterPhase::Healthy)
            })
        })
        .await;
    env.wait_event("demo", "SecretRotated").await;
    after.progress(100, T).await;
    let writes_new = after.finish().await;
    let writes_old = before.finish().await;
    let probes = prober.finish().await;
    recorder.abort();
    let seen = seen.lock().expect("seen").clone();
    eprintln!(
        "rotation (sentinel: {sentinel}): primary on the new password after {accepted_after:?}, old password retired after {retired_after:?}; new-password writer {} acknowledged, {} errors, longest gap {:?}; old-password writer {} acknowledged, {} errors {:?}, longest gap {:?}",
        writes_new.acked.len(),
        writes_new.errors,
        writes_new.longest_gap,
        writes_old.acked.len(),
        writes_old.errors,
        writes_old.kinds,
        writes_old.longest_gap
    );
    if writes_new.errors != 0 || !probes.regressions.is_empty() {
        let now = env.summary("demo").await;
        env.print_pod_logs().await;
        panic!(
            "the client on the new password saw {} errors, the new password was refused {} times after it was accepted (first: {:?}); now: {now}\nerrors {:?}\nrefusals {:?}",
            writes_new.errors,
            probes.regressions.len(),
            probes.regressions.first(),
            writes_new.kinds,
            probes.regressions
        );
    }
    let stable = seen.iter().all(|s| {
        s.phase == Some(ClusterPhase::Healthy)
            && s.primary == primary
            && s.disconnected.is_empty()
            && (!sentinel || s.sentinels == 3)
    });
    assert!(stable, "the cluster as the operator saw it: {seen:#?}");
    // Nothing acknowledged by either client is lost, replication is up.
    let ip = env.pod_ip(&primary).await.expect("ip");
    for w in [&writes_old, &writes_new] {
        let missing = data::missing(&ip, NEW, &w.acked).await;
        assert!(
            missing.is_empty(),
            "{} acknowledged writes lost",
            missing.len()
        );
    }
    let st = rc.status.as_ref().expect("status");
    for (n, i) in &st.instances_status {
        if *n != primary {
            assert_eq!(
                (i.role.as_str(), i.master_link_status.as_str()),
                ("slave", "up"),
                "{n}"
            );
        }
    }
    // The connection Secret carries the new password.
    testenv::eventually("the connection Secret on the new password", T, || async {
        let s = env.api::<Secret>().get("demo-conn").await.ok()?;
        let pw = s.data?.get("password")?.0.clone();
        (pw == NEW.as_bytes()).then_some(())
    })
    .await
    .expect("connection secret");
    (primary, rc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_password_rotation_under_load_locks_nobody_out_and_loses_no_write() {
    let env = Env::on_process_nodes("rc-rotate", &[]).await;
    env.create(
        "demo",
        json!({"instances": 3, "storage": {"size": "1Gi"}, "connectionSecret": {"name": "demo-conn"}}),
    )
    .await;
    env.healthy("demo", 3).await;
    let (primary, rc) = rotate_under_load(&env, false).await;
    assert_eq!(masters(&rc), [primary]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_password_rotation_in_sentinel_mode_reaches_the_sentinels_without_a_failover() {
    let env = Env::on_process_nodes("rc-rotate-sentinel", &[]).await;
    env.create("demo", operator::sentinel::spec()).await;
    healthy_with_sentinels(&env).await;
    sentinels_agree(&env, "demo-0").await;
    let (primary, rc) = rotate_under_load(&env, true).await;
    assert_eq!(masters(&rc), std::slice::from_ref(&primary));
    // Each Sentinel holds the new password as auth-pass (Sentinel rewrites its file on
    // SENTINEL SET)...
    for name in sentinels(&env).await.keys() {
        let (code, conf) = testenv::procnode::exec(
            &env.admin,
            &env.ns.name,
            name,
            "sentinel",
            &["cat", "/data/sentinel.conf"],
        )
        .await
        .expect("read sentinel.conf");
        assert_eq!(code, 0, "{conf}");
        let auth: Vec<&str> = conf.lines().filter(|l| l.contains("auth-pass")).collect();
        assert!(auth.len() == 1 && auth[0].contains(NEW), "{name}: {auth:?}");
    }
    // ... and authenticates with it: reset, each rediscovers the replicas through the
    // primary's INFO, which needs the password.
    for ip in sentinels(&env).await.values() {
        let mut c = redis::instance::dial::Dial::Tcp
            .conn(ip, 26379, Duration::from_secs(2))
            .await
            .expect("sentinel");
        c.command(&["SENTINEL", "RESET", "demo"])
            .await
            .expect("RESET");
    }
    sentinels_agree(&env, &primary).await;
    let rc = healthy_with_sentinels(&env).await;
    assert_eq!(rc.status.expect("status").current_primary, primary);
}
