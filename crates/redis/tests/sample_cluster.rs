//! The sample cluster (deploy/redis/samples/rediscluster-cache.yaml) in its first minutes, as
//! `cargo xtask demo --only redis` runs it: real Redis on the process-backed nodes, the operator
//! at its default poll interval, and no `backup-credentials` Secret (a new user has not made
//! one). Failures kill only redis-server (the instance manager sees it exit, its container
//! restarts and the primary comes back with a new replication ID), as a crashing Redis would.

mod operator;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use nix::sys::signal::Signal;
use operator::data::{self, Sampler, Writer};
use operator::{Env, T};
use redis::crd::{ClusterPhase, RedisCluster};
use serde_json::json;
use testenv::procnode;

/// The sample's spec.
fn sample() -> serde_json::Value {
    json!({
        "instances": 3,
        "mode": "standalone",
        "storage": {"size": "1Gi"},
        "resources": {"requests": {"memory": "256Mi", "cpu": "100m"}, "limits": {"memory": "512Mi"}},
        "memory": {"maxMemoryPercent": 75},
        "backupCredentialsSecret": {"name": "backup-credentials"},
    })
}

/// The replication ID the status records for `pod`, with its role.
fn recorded(rc: &RedisCluster, pod: &str) -> Option<(String, String)> {
    let i = rc.status.as_ref()?.instances_status.get(pod)?;
    Some((i.role.clone(), i.replication_id.clone()))
}

/// SIGKILLs the redis-server of `pod` if it runs; whether one was killed.
async fn kill_redis(env: &Env, pod: &str) -> bool {
    procnode::signal_command(
        &env.admin,
        &env.ns.name,
        pod,
        "redis",
        "redis-server",
        Signal::SIGKILL,
    )
    .await
    .is_ok_and(|pids| !pids.is_empty())
}

/// The primary of a fresh cluster crashes; Redis restarts in place with a new replication ID
/// (its data loaded from its append-only file), the operator records it, and it crashes again
/// before the replicas finished synchronising from it (Redis waits 5 s before a diskless full
/// sync). The replicas were in sync with its previous incarnation, so one of them is promoted,
/// and no write a replica acknowledged (`WAIT`) is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_cluster_whose_restarted_primary_crashes_again_fails_over_to_an_in_sync_replica() {
    let env = Env::on_process_nodes("rc-fresh-failover", &["--status-poll-seconds=5"]).await;
    env.create("cache", sample()).await;
    let rc = env.healthy("cache", 3).await;
    let (_, first) = recorded(&rc, "cache-0").expect("cache-0 recorded");
    let pw = env.password("cache").await;
    let pods = env.api::<Pod>();
    let writer = Writer::start(env.clusters(), pods.clone(), "cache", pw.clone(), 1);
    writer.progress(100, T).await;
    let sampler = Sampler::start(pods.clone(), "cache", pw.clone());

    let started = Instant::now();
    testenv::eventually("a first kill of cache-0's redis-server", T, || async {
        kill_redis(&env, "cache-0").await.then_some(())
    })
    .await
    .expect("first kill");
    // Restarted in place, under a new replication ID the operator records.
    env.wait("cache", T, move |c| {
        recorded(c, "cache-0").is_some_and(|(role, id)| role == "master" && id != first)
    })
    .await;
    let kills = AtomicU32::new(1);
    let rc = testenv::eventually("a failover away from cache-0", T, || async {
        let rc = env.clusters().get("cache").await.ok()?;
        let current = rc.status.as_ref().map(|s| s.current_primary.clone());
        if current.is_some_and(|c| !c.is_empty() && c != "cache-0") {
            return Some(rc);
        }
        if kill_redis(&env, "cache-0").await {
            kills.fetch_add(1, Ordering::SeqCst);
        }
        None
    })
    .await
    .unwrap_or_else(|e| {
        panic!("{e}; kills: {}", kills.load(Ordering::SeqCst));
    });
    let failover = started.elapsed();
    let st = rc.status.clone().expect("status");
    let promoted = st.current_primary.clone();
    assert!(
        ["cache-1", "cache-2"].contains(&promoted.as_str()),
        "{promoted}"
    );

    writer.progress(100, T).await;
    let rc = env
        .wait("cache", T, move |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.instances_status
                        .get("cache-0")
                        .is_some_and(|i| i.role == "slave" && i.master_link_status == "up")
            })
        })
        .await;
    let masters: Vec<_> = rc
        .status
        .iter()
        .flat_map(|s| s.instances_status.iter())
        .filter(|(_, i)| i.role == "master")
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(masters, std::slice::from_ref(&promoted));
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    let ip = env.pod_ip(&promoted).await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    tracing::info!(
        ?failover,
        kills = kills.load(Ordering::SeqCst),
        acked = writes.acked.len(),
        errors = writes.errors,
        longest_gap = ?writes.longest_gap,
        "failover of a fresh cluster measured"
    );
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
    assert!(failover < Duration::from_secs(120), "{failover:?}");
}

/// Killed right after the cluster is first Healthy, before anything was written: the replicas
/// synchronised at offset 0 and hold everything there is, so one is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_cluster_fails_over_before_its_first_write() {
    let env = Env::on_process_nodes("rc-fresh-empty", &["--status-poll-seconds=5"]).await;
    env.create("cache", sample()).await;
    env.healthy("cache", 3).await;
    let moved = testenv::eventually("a failover away from cache-0", T, || async {
        let rc = env.clusters().get("cache").await.ok()?;
        let current = rc.status.as_ref().map(|s| s.current_primary.clone());
        if current.is_some_and(|c| !c.is_empty() && c != "cache-0") {
            return Some(rc);
        }
        kill_redis(&env, "cache-0").await;
        None
    })
    .await;
    let rc = match moved {
        Ok(rc) => rc,
        Err(e) => {
            let st = env
                .clusters()
                .get("cache")
                .await
                .ok()
                .and_then(|c| c.status);
            panic!("{e}; {:?}", st.map(|s| s.phase_reason))
        }
    };
    let promoted = rc.status.expect("status").current_primary;
    assert!(
        ["cache-1", "cache-2"].contains(&promoted.as_str()),
        "{promoted}"
    );
    env.wait("cache", T, |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(ClusterPhase::Healthy) && s.ready_instances == 3)
    })
    .await;
}

/// The sample names `backup-credentials`, which a new user has not created yet: the database
/// runs without it (only backups read it), and a RedisBackup waits for it, saying so, until it
/// exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sample_runs_without_its_backup_credentials_and_a_backup_waits_for_them() {
    use redis::crd::{BackupPhase, RedisBackup};
    let env = Env::on_process_nodes("rc-no-backup-creds", &["--status-poll-seconds=5"]).await;
    let mut spec = sample();
    spec["instances"] = 1.into();
    env.create("cache", spec).await;
    env.healthy("cache", 1).await;

    let backups: Api<RedisBackup> = env.api();
    let b: RedisBackup = serde_json::from_value(json!({
        "apiVersion": "redis.io/v1", "kind": "RedisBackup",
        "metadata": {"name": "now"},
        "spec": {"clusterName": "cache", "target": "primary",
                 "destination": {"s3": {"bucket": "b", "endpoint": "http://127.0.0.1:9"}}},
    }))
    .expect("backup");
    backups
        .create(&PostParams::default(), &b)
        .await
        .expect("create backup");
    let why = "Secret backup-credentials (spec.backupCredentialsSecret of RedisCluster cache) does not exist";
    let events = env.api::<Event>();
    let note = testenv::eventually("a BackupPending Event naming the Secret", T, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            let about = e.regarding.as_ref()?.name.as_deref() == Some("now");
            let note = e.note.unwrap_or_default();
            (about && e.reason.as_deref() == Some("BackupPending") && note.contains(why))
                .then_some(note)
        })
    })
    .await
    .expect("event");
    assert!(note.contains("create it"), "{note}");
    let b = backups.get("now").await.expect("backup");
    let st = b.status.expect("status");
    assert_eq!(st.phase, Some(BackupPhase::Pending));
    assert_eq!(st.target_pod, "", "nothing was started");

    // Created: the backup stops waiting for it (and goes on to the unreachable store).
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "backup-credentials"},
        "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
    }))
    .expect("secret");
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("backup-credentials");
    testenv::wait_for(&backups, "now", T, |b: &RedisBackup| {
        b.status
            .as_ref()
            .is_some_and(|s| s.phase != Some(BackupPhase::Pending) && !s.target_pod.is_empty())
    })
    .await
    .expect("the backup started once the Secret exists");
    // The cluster never waited for it.
    let rc = env.clusters().get("cache").await.expect("cluster");
    let st = rc.status.expect("status");
    assert!(
        !st.phase_reason.contains("backup-credentials"),
        "{}",
        st.phase_reason
    );
}
