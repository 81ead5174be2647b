//! The RedisBackup controller on the real control plane, with real instance managers and
//! redis-server on the process-backed nodes and a real S3 server (s3s-fs, verifying SigV4) on
//! the nodes' loopback gateway. The operator runs in the test process as its own
//! ServiceAccount under deploy/redis/rbac.
//!
//! Most tests make the data pods by hand (as the cluster controller builds them) and run only
//! the backup controllers, to put a backup in situations a cluster would not reach by itself
//! (a Sentinel pod that is an in-sync replica, a black-holed store, a fenced replica).
//! Checked there: a `prefer-replica` backup runs on the in-sync replica, never on a Sentinel
//! pod, and completes with its object in the bucket (status, cluster condition, Events,
//! metrics); `primary` and a fenced replica send it to the primary; a failing destination
//! fails it with the store's reason; the deadline fails a backup that cannot start and one
//! that never finishes; a completed backup restores into a hand-made pod of a new cluster.
//!
//! [`a_backup_restores_into_a_new_cluster_with_every_key_and_value_on_each_instance`] runs the
//! whole operator instead: a source cluster made by the cluster controller, its data
//! acknowledged by both replicas, a RedisBackup, and a new cluster bootstrapped from it by
//! `bootstrap.backupName`, compared key by key and value by value on every instance; then
//! the backup is deleted and the new cluster's pod 0 rebuilt on a new PVC without it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use redis::crd::{BackupPhase, RedisBackup, RedisCluster};
use redis::instance_api::Boot;
use serde_json::{Value, json};
use testenv::procnode;

mod operator;
mod support;

use support::operator::Operator;
use support::pods::{CLUSTER, PASSWORD, Pods, T, ip_of, obj, ready};

const BUCKET: &str = "redis-backups";

fn s3(endpoint: &str, bucket: &str) -> Value {
    json!({"s3": {"bucket": bucket, "path": "demo", "endpoint": endpoint}})
}

async fn create_backup(env: &Pods, name: &str, target: &str, destination: Value) {
    let b: RedisBackup = obj(json!({"apiVersion": "redis.io/v1", "kind": "RedisBackup",
        "metadata": {"name": name},
        "spec": {"clusterName": CLUSTER, "target": target, "destination": destination}}));
    Api::<RedisBackup>::namespaced(env.admin.clone(), env.name())
        .create(&PostParams::default(), &b)
        .await
        .expect("backup");
}

fn phase(b: &RedisBackup) -> Option<BackupPhase> {
    b.status.as_ref().and_then(|s| s.phase)
}

async fn finished(env: &Pods, name: &str) -> RedisBackup {
    let api: Api<RedisBackup> = Api::namespaced(env.admin.clone(), env.name());
    let done = testenv::wait_for(&api, name, T, |b: &RedisBackup| {
        matches!(phase(b), Some(BackupPhase::Completed | BackupPhase::Failed))
    })
    .await;
    match done {
        Ok(b) => b,
        Err(e) => {
            let status = api.get(name).await.map(|b| b.status);
            let cluster = cluster(env).await.status;
            panic!(
                "backup {name} finished: {e:#}; its status: {status:?}; the cluster's: {cluster:?}"
            )
        }
    }
}

async fn cluster(env: &Pods) -> RedisCluster {
    Api::<RedisCluster>::namespaced(env.admin.clone(), env.name())
        .get(CLUSTER)
        .await
        .expect("cluster")
}

/// The Events about backup `name` once `wanted` holds for them (an Event is published just
/// after the status write that the test saw, so it may come a moment later); on timeout, the
/// test fails showing those there are.
async fn events_until(
    env: &Pods,
    name: &str,
    wanted: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let got = testenv::eventually("the backup's Events", T, || async {
        let list = events(env, name).await;
        wanted(&list).then_some(list)
    })
    .await;
    match got {
        Ok(list) => list,
        Err(e) => panic!("{e}: {:?}", events(env, name).await),
    }
}

async fn events(env: &Pods, name: &str) -> Vec<(String, String)> {
    let list = Api::<Event>::namespaced(env.admin.clone(), env.name())
        .list(&ListParams::default())
        .await
        .expect("events");
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A primary `demo-0` with 100 keys and a replica `demo-1` in sync with it.
async fn primary_and_replica(env: &Pods) -> (String, String) {
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let ip0 = ip_of(&env.create_pod(0).await);
    let ip1 = ip_of(&env.create_pod(1).await);
    env.until_status(&ip0, "demo-0 primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    write_keys(&ip0, 100).await;
    env.until_status(&ip1, "demo-1 in sync", |r| {
        r.master_link_status == "up" && r.replication_offset > 0
    })
    .await;
    env.wait_pod("demo-0", "Ready", ready).await;
    env.wait_pod("demo-1", "Ready", ready).await;
    (ip0, ip1)
}

async fn write_keys(ip: &str, n: usize) {
    let mut c = redis::instance::resp::Conn::tcp(&format!("{ip}:6379"), Duration::from_secs(5))
        .await
        .expect("connect");
    c.command(&["AUTH", PASSWORD]).await.expect("auth");
    for i in 0..n {
        c.command(&["SET", &format!("k{i}"), "v"])
            .await
            .expect("set");
    }
}

async fn dbsize(ip: &str) -> Option<i64> {
    let mut c = redis::instance::resp::Conn::tcp(&format!("{ip}:6379"), Duration::from_secs(5))
        .await
        .ok()?;
    c.command(&["AUTH", PASSWORD]).await.ok()?;
    c.command(&["DBSIZE"]).await.ok()?.int()
}

#[tokio::test]
async fn backups_run_on_an_in_sync_replica_never_a_sentinel_and_land_in_the_bucket() {
    let env = Pods::new("redis-backup").await;
    let gateway = procnode::gateway().expect("gateway").to_string();
    let store = support::s3_server(BUCKET, &gateway).await;
    env.backup_credentials(&[
        ("AWS_ACCESS_KEY_ID", support::AK),
        ("AWS_SECRET_ACCESS_KEY", support::SK),
    ])
    .await;
    let (ip0, _) = primary_and_replica(&env).await;
    // A Sentinel pod of the cluster that is, in fact, an in-sync replica: never a target.
    let sip = ip_of(&env.create("demo-sentinel-0", "sentinel", None).await);
    env.until_status(&sip, "sentinel-named replica in sync", |r| {
        r.master_link_status == "up"
    })
    .await;
    let op = Operator::start(&env.admin, env.name(), &[]).await;
    let dest = s3(&store.endpoint, BUCKET);

    create_backup(&env, "b1", "prefer-replica", dest.clone()).await;
    let b1 = finished(&env, "b1").await;
    let s = b1.status.clone().expect("status");
    assert_eq!(phase(&b1), Some(BackupPhase::Completed), "{s:?}");
    assert_eq!(s.target_pod, "demo-1", "the in-sync replica");
    assert_eq!(s.backup_path, format!("s3://{BUCKET}/demo/b1.rdb"));
    let object = store.root.join(BUCKET).join("demo/b1.rdb");
    let size = std::fs::metadata(&object)
        .expect("object in the bucket")
        .len();
    assert_eq!(s.backup_size, size as i64);
    assert!(s.started_at.is_some() && s.completed_at.is_some());
    assert_eq!(
        serde_json::to_value(s.artifact_type).expect("json"),
        json!("rdb")
    );
    let has = |list: &[(String, String)], reason: &str| list.iter().any(|(r, _)| r == reason);
    events_until(&env, "b1", |l| {
        has(l, "BackupStarted") && has(l, "BackupCompleted")
    })
    .await;
    // The cluster records it.
    let rc = testenv::eventually("LastBackupSucceeded=True", T, || async {
        let rc = cluster(&env).await;
        let st = rc.status.clone()?;
        let c = kit::conditions::get(&st.conditions, "LastBackupSucceeded")?;
        (c.status == "True" && st.last_successful_backup.is_some()).then_some(rc)
    })
    .await;
    let rc = match rc {
        Ok(rc) => rc,
        Err(e) => panic!(
            "{e}; the cluster's status: {:?}",
            cluster(&env).await.status
        ),
    };
    let cond = kit::conditions::get(
        &rc.status.expect("status").conditions,
        "LastBackupSucceeded",
    )
    .cloned()
    .expect("condition");
    assert_eq!(cond.message, "RedisBackup b1 completed");

    create_backup(&env, "b2", "primary", dest.clone()).await;
    let b2 = finished(&env, "b2").await;
    assert_eq!(phase(&b2), Some(BackupPhase::Completed));
    assert_eq!(b2.status.expect("status").target_pod, "demo-0");

    // The only data replica fenced: the sentinel-named replica is still in sync, yet the
    // backup goes to the primary.
    env.annotate(json!({"redis.io/fencedInstances": "[\"demo-1\"]"}))
        .await;
    env.wait_pod("demo-1", "not Ready while fenced", |p| !ready(p))
        .await;
    create_backup(&env, "b3", "prefer-replica", dest).await;
    let b3 = finished(&env, "b3").await;
    assert_eq!(phase(&b3), Some(BackupPhase::Completed));
    assert_eq!(b3.status.expect("status").target_pod, "demo-0");

    let text = testenv::eventually("backup metrics", T, || async {
        let m = op.metrics().await;
        let line = format!(
            "redis_backup_phase_count{{namespace=\"{}\",cluster=\"demo\",phase=\"Completed\"}} 3",
            env.name()
        );
        m.contains(&line).then_some(m)
    })
    .await
    .expect("metrics");
    let stamp = text
        .lines()
        .find(|l| {
            l.starts_with("redis_last_successful_backup_timestamp{") && l.contains(env.name())
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<i64>().ok())
        .expect("timestamp metric");
    assert!(stamp > 1_700_000_000, "{stamp}");
    assert_eq!(dbsize(&ip0).await, Some(100));
    op.stop().await;
}

#[tokio::test]
async fn a_failing_destination_fails_the_backup_with_the_stores_reason() {
    let env = Pods::new("redis-backup-fail").await;
    let gateway = procnode::gateway().expect("gateway").to_string();
    let store = support::s3_server(BUCKET, &gateway).await;
    env.backup_credentials(&[
        ("AWS_ACCESS_KEY_ID", support::AK),
        ("AWS_SECRET_ACCESS_KEY", support::SK),
    ])
    .await;
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let ip0 = ip_of(&env.create_pod(0).await);
    env.until_status(&ip0, "primary", |r| r.boot == Boot::Running)
        .await;
    env.wait_pod("demo-0", "Ready", ready).await;
    let op = Operator::start(&env.admin, env.name(), &[]).await;
    create_backup(&env, "ok", "prefer-replica", s3(&store.endpoint, BUCKET)).await;
    assert_eq!(
        phase(&finished(&env, "ok").await),
        Some(BackupPhase::Completed)
    );
    // A bucket name the store refuses (s3s-fs creates a missing bucket on PutObject, so a
    // missing one would not fail here).
    create_backup(
        &env,
        "nobucket",
        "primary",
        s3(&store.endpoint, "Bad_Bucket"),
    )
    .await;
    let b = finished(&env, "nobucket").await;
    let s = b.status.clone().expect("status");
    assert_eq!(phase(&b), Some(BackupPhase::Failed));
    assert!(s.error.contains("InvalidBucketName"), "{}", s.error);
    assert!(s.completed_at.is_some());
    // No destination at all: failed before any instance is asked.
    create_backup(&env, "nodest", "primary", json!({})).await;
    let b = finished(&env, "nodest").await;
    assert_eq!(
        b.status.expect("status").error,
        "invalid destination: destination requires exactly one of s3 or azure"
    );
    events_until(&env, "nobucket", |l| {
        l.iter()
            .any(|(r, n)| r == "BackupFailed" && n.contains("InvalidBucketName"))
    })
    .await;
    // The newest finished backup failed: the cluster says so, and keeps the last success.
    let settled = testenv::eventually("LastBackupSucceeded=False", T, || async {
        let st = cluster(&env).await.status?;
        let c = kit::conditions::get(&st.conditions, "LastBackupSucceeded")?;
        (c.status == "False"
            && c.reason == "BackupFailed"
            && c.message.starts_with("RedisBackup nodest failed")
            && st.last_successful_backup.is_some()
            && st.last_failed_backup.is_some())
        .then_some(())
    })
    .await;
    if let Err(e) = settled {
        let api: Api<RedisBackup> = Api::namespaced(env.admin.clone(), env.name());
        let backups: Vec<_> = api
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|b| (b.metadata.name, b.status))
                    .collect()
            })
            .unwrap_or_default();
        panic!(
            "cluster condition: {e}; the cluster's status: {:?}; the backups: {backups:?}",
            cluster(&env).await.status
        );
    }
    op.stop().await;
}

/// Accepts connections and never answers: an upload to it hangs.
async fn black_hole(ip: &str) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (endpoint, task)
}

#[tokio::test]
async fn the_deadline_fails_a_backup_that_cannot_start_and_one_that_never_finishes() {
    let env = Pods::new("redis-backup-deadline").await;
    let gateway = procnode::gateway().expect("gateway").to_string();
    env.backup_credentials(&[
        ("AWS_ACCESS_KEY_ID", support::AK),
        ("AWS_SECRET_ACCESS_KEY", support::SK),
    ])
    .await;
    let op = Operator::start(&env.admin, env.name(), &["--backup-timeout=4s"]).await;
    let (hole, _task) = black_hole(&gateway).await;
    // The primary's pod does not exist yet: pending, then failed at the deadline.
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    create_backup(&env, "early", "primary", s3(&hole, BUCKET)).await;
    let b = finished(&env, "early").await;
    let s = b.status.expect("status");
    assert_eq!(
        s.error,
        "no instance could take the backup within 4s: the primary demo-0 has no pod"
    );
    assert_eq!(s.target_pod, "", "it never started");
    events_until(&env, "early", |l| {
        l.iter()
            .any(|(r, n)| r == "BackupPending" && n.contains("demo-0 has no pod"))
    })
    .await;
    // Started, but the upload hangs: failed at the deadline of its start.
    let ip0 = ip_of(&env.create_pod(0).await);
    env.until_status(&ip0, "primary", |r| r.boot == Boot::Running)
        .await;
    env.wait_pod("demo-0", "Ready", ready).await;
    create_backup(&env, "stuck", "primary", s3(&hole, BUCKET)).await;
    let b = finished(&env, "stuck").await;
    let s = b.status.expect("status");
    assert_eq!(s.target_pod, "demo-0");
    assert_eq!(s.error, "the backup did not finish within 4s of its start");
    let took = s
        .completed_at
        .expect("completed")
        .0
        .duration_since(s.started_at.expect("started").0);
    assert!(took.as_secs_f64() >= 4.0, "{took:?}");
    op.stop().await;
}

#[tokio::test]
async fn a_completed_backup_restores_into_the_first_pod_of_a_new_cluster() {
    let env = Pods::new("redis-backup-restore").await;
    let gateway = procnode::gateway().expect("gateway").to_string();
    let store = support::s3_server(BUCKET, &gateway).await;
    env.backup_credentials(&[
        ("AWS_ACCESS_KEY_ID", support::AK),
        ("AWS_SECRET_ACCESS_KEY", support::SK),
    ])
    .await;
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let ip0 = ip_of(&env.create_pod(0).await);
    env.until_status(&ip0, "primary", |r| r.boot == Boot::Running)
        .await;
    env.wait_pod("demo-0", "Ready", ready).await;
    write_keys(&ip0, 250).await;
    let op = Operator::start(&env.admin, env.name(), &[]).await;
    create_backup(&env, "snap", "prefer-replica", s3(&store.endpoint, BUCKET)).await;
    assert_eq!(
        phase(&finished(&env, "snap").await),
        Some(BackupPhase::Completed)
    );
    // A new cluster bootstrapped from it; its first pod carries the restore init container
    // (as the cluster controller builds it).
    env.add_cluster(
        "copy",
        json!({"instances": 1, "storage": {"type": "pvc", "size": "1Gi"},
            "bootstrap": {"backupName": "snap"}}),
    )
    .await;
    env.set_status_of(
        "copy",
        json!({"currentPrimary": "copy-0", "targetPrimary": "copy-0"}),
    )
    .await;
    let p = env.create_of("copy", "copy-0", "data", Some("snap")).await;
    let ip = ip_of(&p);
    let n = testenv::eventually("the restored data", T, || async {
        dbsize(&ip).await.filter(|n| *n == 250)
    })
    .await;
    assert_eq!(n.ok(), Some(250), "every key restored");
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), env.name());
    let restored = pods.get("copy-0").await.expect("pod");
    let init = restored
        .status
        .and_then(|s| s.init_container_statuses)
        .unwrap_or_default();
    assert!(
        init.iter().any(|c| c.name == "restore-data"
            && c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code)
                == Some(0)),
        "{init:?}"
    );
    op.stop().await;
}

/// Every key of the instance at `ip` with its value in a canonical form: its type and
/// contents, members of sets and fields of hashes sorted (the order `DUMP` serialises an
/// unordered set in differs between a primary and its replica).
async fn dataset(ip: &str, password: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
    use redis::instance::resp::Value;
    let mut c = operator::data::connect(ip, password)
        .await
        .unwrap_or_else(|e| panic!("connect to {ip}: {e}"));
    let items = |v: Value| -> Vec<Vec<u8>> {
        match v {
            Value::Array(Some(items)) => items
                .into_iter()
                .map(|i| match i {
                    Value::Bulk(Some(b)) => b,
                    other => other.text().unwrap_or_default().into_bytes(),
                })
                .collect(),
            other => panic!("an array, not {other:?}"),
        }
    };
    let keys = c.command(&["KEYS", "*"]).await.expect("KEYS");
    let mut out = std::collections::BTreeMap::new();
    for k in items(keys) {
        let key = String::from_utf8_lossy(&k).into_owned();
        let kind = c.command(&["TYPE", &key]).await.expect("TYPE").text();
        let kind = kind.unwrap_or_default();
        let mut parts: Vec<Vec<u8>> = match kind.as_str() {
            "string" => match c.command(&["GET", &key]).await.expect("GET") {
                Value::Bulk(Some(b)) => vec![b],
                other => panic!("GET {key} answered {other:?}"),
            },
            "list" => items(
                c.command(&["LRANGE", &key, "0", "-1"])
                    .await
                    .expect("LRANGE"),
            ),
            "set" => {
                let mut m = items(c.command(&["SMEMBERS", &key]).await.expect("SMEMBERS"));
                m.sort();
                m
            }
            "hash" => {
                let flat = items(c.command(&["HGETALL", &key]).await.expect("HGETALL"));
                let mut pairs: Vec<Vec<u8>> = flat
                    .chunks(2)
                    .map(|p| [p[0].as_slice(), b"=", p[1].as_slice()].concat())
                    .collect();
                pairs.sort();
                pairs
            }
            "zset" => items(
                c.command(&["ZRANGE", &key, "0", "-1", "WITHSCORES"])
                    .await
                    .expect("ZRANGE"),
            ),
            other => panic!("{key} has type {other:?}"),
        };
        parts.insert(0, kind.into_bytes());
        out.insert(key, parts.join(&b"\n"[..]));
    }
    out
}

/// The first keys whose values differ between `want` and `got` (or that only one has), with
/// both values.
fn differences(
    want: &std::collections::BTreeMap<String, Vec<u8>>,
    got: &std::collections::BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    keys.into_iter()
        .filter(|k| want.get(*k) != got.get(*k))
        .take(5)
        .map(|k| {
            let show = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(v).into_owned());
            format!("{k}: {:?} vs {:?}", show(want.get(k)), show(got.get(k)))
        })
        .collect()
}

/// The whole operator on the process-backed nodes (cluster, backup and scheduled-backup
/// controllers): a 3-instance source cluster holds strings, a hash, a list, a set and a sorted
/// set, written to its primary and acknowledged by both replicas with `WAIT 2`; a RedisBackup
/// of it completes in the S3 server; a new 3-instance cluster with `bootstrap.backupName`
/// reaches Healthy with `bootstrapCompleted`, and every key and value (type and contents) is
/// on each of its instances, as on each instance of the source. Then the
/// RedisBackup is deleted and the new cluster's pod 0 deleted with its PVC: it comes back
/// without the restore init container (the bootstrap is over), resynchronised from the new
/// primary with every key (before, pod 0 would have waited in Init for the deleted backup).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_restores_into_a_new_cluster_with_every_key_and_value_on_each_instance() {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
    use kube::ResourceExt;
    let started = std::time::Instant::now();
    let env = operator::Env::on_process_nodes("rb-restore", &[]).await;
    let gateway = procnode::gateway().expect("gateway").to_string();
    let store = support::s3_server(BUCKET, &gateway).await;
    let creds = support::pods::secret(
        "s3-creds",
        &[
            ("AWS_ACCESS_KEY_ID", support::AK),
            ("AWS_SECRET_ACCESS_KEY", support::SK),
        ],
    );
    env.api::<Secret>()
        .create(&PostParams::default(), &creds)
        .await
        .expect("credentials");
    let spec = |extra: Value| {
        let mut s = json!({"instances": 3, "storage": {"size": "1Gi"},
            "backupCredentialsSecret": {"name": "s3-creds"}});
        s.as_object_mut()
            .expect("spec")
            .extend(extra.as_object().expect("extra").clone());
        s
    };
    env.create("src", spec(json!({}))).await;
    env.healthy("src", 3).await;
    let pw = env.password("src").await;
    let ip = env.pod_ip("src-0").await.expect("src-0 ip");
    let mut c = operator::data::connect(&ip, &pw).await.expect("primary");
    let stamp = jiff::Timestamp::now().as_millisecond();
    for i in 0..300 {
        let v = format!("value-{i}-{stamp}");
        c.command(&["SET", &format!("s{i}"), &v])
            .await
            .expect("SET");
    }
    for i in 0..50 {
        let (f, v) = (format!("f{i}"), format!("{}", i * 7));
        c.command(&["HSET", "hash", &f, &v]).await.expect("HSET");
        c.command(&["RPUSH", "list", &v]).await.expect("RPUSH");
        c.command(&["SADD", "set", &f]).await.expect("SADD");
        c.command(&["ZADD", "zset", &v, &f]).await.expect("ZADD");
    }
    let acked = c.command(&["WAIT", "2", "5000"]).await.expect("WAIT");
    assert_eq!(acked.int(), Some(2), "both replicas acknowledged");
    drop(c);
    let want = dataset(&ip, &pw).await;
    assert_eq!(want.len(), 304, "300 strings and four collections");
    for r in ["src-1", "src-2"] {
        let ip = env.pod_ip(r).await.expect("ip");
        let got = dataset(&ip, &pw).await;
        let differ = differences(&want, &got);
        assert!(
            differ.is_empty(),
            "{r} holds what was acknowledged: {differ:?}"
        );
    }

    let b: RedisBackup = obj(json!({"apiVersion": "redis.io/v1", "kind": "RedisBackup",
        "metadata": {"name": "snap"},
        "spec": {"clusterName": "src",
                 "destination": {"s3": {"bucket": BUCKET, "path": "src", "endpoint": store.endpoint}}}}));
    let backups: Api<RedisBackup> = env.api();
    backups
        .create(&PostParams::default(), &b)
        .await
        .expect("backup");
    let snap = testenv::wait_for(&backups, "snap", T, |b: &RedisBackup| {
        matches!(phase(b), Some(BackupPhase::Completed | BackupPhase::Failed))
    })
    .await
    .expect("the backup finished");
    let st = snap.status.clone().expect("status");
    assert_eq!(phase(&snap), Some(BackupPhase::Completed), "{st:?}");
    assert!(store.root.join(BUCKET).join("src/snap.rdb").exists());
    let backed_up = started.elapsed();

    env.create("copy", spec(json!({"bootstrap": {"backupName": "snap"}})))
        .await;
    let rc = env.healthy("copy", 3).await;
    let restored = started.elapsed();
    assert!(
        rc.status.as_ref().is_some_and(|s| s.bootstrap_completed),
        "bootstrapCompleted once Healthy"
    );
    let pods = env.api::<Pod>();
    let p0 = pods.get("copy-0").await.expect("copy-0");
    let init = p0
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.clone())
        .unwrap_or_default();
    assert!(
        init.iter().any(|c| c.name == "restore-data"
            && c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code)
                == Some(0)),
        "copy-0 was restored by its init container: {init:?}"
    );
    let pwc = env.password("copy").await;
    for r in ["copy-0", "copy-1", "copy-2"] {
        let ip = env.pod_ip(r).await.expect("ip");
        let got = dataset(&ip, &pwc).await;
        let differ: Vec<&String> = want
            .keys()
            .chain(got.keys())
            .filter(|k| want.get(*k) != got.get(*k))
            .take(5)
            .collect();
        assert!(
            differ.is_empty(),
            "{r}: {} keys, first differences {differ:?}",
            got.len()
        );
    }

    // The bootstrap is over: the backup may go, and a pod 0 rebuilt on a new PVC no longer
    // needs it.
    backups
        .delete("snap", &Default::default())
        .await
        .expect("delete the backup");
    testenv::eventually("snap deleted", T, || async {
        backups.get_opt("snap").await.ok()?.is_none().then_some(())
    })
    .await
    .expect("gone");
    let pvcs = env.api::<PersistentVolumeClaim>();
    let old_pvc = pvcs.get("copy-data-0").await.expect("pvc").uid();
    pvcs.delete("copy-data-0", &Default::default())
        .await
        .expect("delete the PVC");
    pods.delete("copy-0", &Default::default())
        .await
        .expect("delete copy-0");
    let old_pod = p0.uid();
    let found = testenv::eventually("copy-0 rebuilt on a new PVC", 2 * T, || async {
        let p = pods.get_opt("copy-0").await.ok()??;
        let pvc = pvcs.get_opt("copy-data-0").await.ok()??;
        (p.uid() != old_pod && pvc.uid() != old_pvc).then_some(())
    })
    .await;
    if let Err(e) = found {
        panic!("{e}: {}", env.summary("copy").await);
    }
    let rc = env
        .wait("copy", 2 * T, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(redis::crd::ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.instances_status
                        .get("copy-0")
                        .is_some_and(|i| i.role == "slave")
            })
        })
        .await;
    let rebuilt = pods.get("copy-0").await.expect("copy-0");
    let names: Vec<String> = rebuilt
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(
        names,
        ["copy-manager"],
        "no restore once the bootstrap is over"
    );
    let ip = env.pod_ip("copy-0").await.expect("ip");
    let got = dataset(&ip, &pwc).await;
    let differ = differences(&want, &got);
    assert!(
        differ.is_empty(),
        "copy-0 resynchronised: {} keys, {differ:?}",
        got.len()
    );
    let primary = rc.status.expect("status").current_primary;
    assert_ne!(
        primary, "copy-0",
        "a replica took over while pod 0 was rebuilt"
    );
    eprintln!(
        "restore: backup Completed {backed_up:?}, copy Healthy {restored:?}, pod 0 rebuilt and in sync {:?} after the start",
        started.elapsed()
    );
}
