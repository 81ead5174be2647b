//! The instance manager in real pods on the process-backed nodes: the pod built as the
//! operator builds it (init container `copy-manager` from the operator image, container
//! `redis` from `redis:7.2` running `/controller/manager instance`, projected Secrets, the
//! per-cluster ServiceAccount and Role, HTTPS probes). The test plays the operator: it creates
//! the Secrets, the RedisCluster and the pods, and sets the status and annotations.
//!
//! Checked: a replica pod starts as a replica of the primary pod's IP (reading the cluster
//! and the primary's pod in-cluster, as its ServiceAccount); with no primary named a pod waits,
//! Running and not Ready, and says why; a fenced pod keeps redis-server down without
//! restarting; the API refuses unauthenticated requests.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use redis::instance_api::{self, Boot};
use serde_json::json;
use testenv::procnode;

mod support;

use support::pods::{
    BACKUP_CREDENTIALS, CLUSTER, Pods as Env, T, ip_of, obj, ready, restarts, secret,
};

#[tokio::test]
async fn pods_boot_as_primary_and_replica_of_the_primary_pod_ip() {
    let env = Env::new("redis-pods").await;
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let p0 = env.create_pod(0).await;
    let p1 = env.create_pod(1).await;
    let (ip0, ip1) = (ip_of(&p0), ip_of(&p1));
    env.until_status(&ip0, "demo-0 primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    let r1 = env
        .until_status(&ip1, "demo-1 replica", |r| {
            r.boot == Boot::Running && r.master_link_status == "up"
        })
        .await;
    assert_eq!(
        (r1.role.as_str(), r1.master_host.as_str(), r1.master_port),
        ("slave", ip0.as_str(), 6379)
    );
    // The primary starts a new replication ID when its first replica arrives: compare now.
    let r0 = env.status(&ip0).await.expect("status");
    assert_eq!(r1.replication_id, r0.replication_id);
    env.wait_pod("demo-0", "Ready", ready).await;
    env.wait_pod("demo-1", "Ready", ready).await;
    // The API refuses whoever has no token, and answers the operator.
    let http = env.http(&ip0);
    let url = format!(
        "https://{}:8080{}",
        env.server_name(),
        redis::names::PATH_STATUS
    );
    let resp = http
        .get(&url)
        .header(instance_api::VERSION_HEADER, instance_api::API_VERSION)
        .send()
        .await
        .expect("call");
    assert_eq!(resp.status().as_u16(), 401);
    let resp = http
        .post(format!(
            "https://{}:8080{}",
            env.server_name(),
            redis::names::PATH_DEMOTE
        ))
        .bearer_auth("guess")
        .header(instance_api::VERSION_HEADER, instance_api::API_VERSION)
        .json(&json!({"primaryIp": ip1, "primaryPort": 6379}))
        .send()
        .await
        .expect("call");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        env.status(&ip0).await.expect("status").role,
        "master",
        "nothing happened"
    );
}

#[tokio::test]
async fn a_pod_waits_for_its_primary_and_a_fenced_pod_stays_running_with_redis_down() {
    let env = Env::new("redis-pods").await;
    let p0 = env.create_pod(0).await;
    let ip0 = ip_of(&p0);
    // No primary named: Running, not Ready, waiting and saying why.
    let r = env
        .until_status(&ip0, "waiting", |r| matches!(&r.boot, Boot::Waiting { reason } if reason.contains("currentPrimary is empty")))
        .await;
    assert_eq!(r.role, "");
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), &env.ns.name);
    let p = pods.get("demo-0").await.expect("pod");
    assert!(!ready(&p));
    // Named: it starts and becomes Ready.
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    env.until_status(&ip0, "primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    env.wait_pod("demo-0", "Ready", ready).await;
    let ping = [
        "redis-cli",
        "-h",
        ip0.as_str(),
        "-a",
        "pw",
        "--no-auth-warning",
        "ping",
    ];
    let (_, out) = procnode::exec(&env.admin, &env.ns.name, "demo-0", "redis", &ping)
        .await
        .expect("exec");
    assert!(
        out.contains("PONG"),
        "redis-server answers in the pod: {out}"
    );
    // Fenced: redis-server goes down, the pod stays Running and turns not Ready, no restart.
    env.annotate(json!({"redis.io/fencedInstances": "[\"demo-0\"]"}))
        .await;
    env.until_status(&ip0, "fenced", |r| {
        r.fenced && matches!(&r.boot, Boot::Waiting { reason } if reason.contains("fenced"))
    })
    .await;
    let p = env
        .wait_pod("demo-0", "not Ready while fenced", |p| !ready(p))
        .await;
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    let (code, out) = procnode::exec(&env.admin, &env.ns.name, "demo-0", "redis", &ping)
        .await
        .expect("exec");
    assert!(
        code != 0 || !out.contains("PONG"),
        "redis-server is down while fenced: {out}"
    );
    assert_eq!(
        restarts(&pods.get("demo-0").await.expect("pod")),
        0,
        "no crash loop"
    );
    // Unfenced: back, Ready, still the same container.
    env.annotate(json!({"redis.io/fencedInstances": null}))
        .await;
    env.until_status(&ip0, "running again", |r| {
        r.boot == Boot::Running && !r.fenced
    })
    .await;
    let p = env.wait_pod("demo-0", "Ready again", ready).await;
    assert_eq!(restarts(&p), 0);
}

#[tokio::test]
async fn a_backup_through_the_api_restores_into_a_new_primary_pod() {
    let env = Env::new("redis-pods").await;
    let gateway = procnode::gateway().expect("gateway").to_string();
    let s3 = support::s3_server("redis-backups", &gateway).await;
    Api::<Secret>::namespaced(env.admin.clone(), &env.ns.name)
        .create(
            &PostParams::default(),
            &secret(
                BACKUP_CREDENTIALS,
                &[
                    ("AWS_ACCESS_KEY_ID", support::AK),
                    ("AWS_SECRET_ACCESS_KEY", support::SK),
                ],
            ),
        )
        .await
        .expect("credentials");
    env.set_status(json!({"currentPrimary": "demo-0", "targetPrimary": "demo-0"}))
        .await;
    let ip0 = ip_of(&env.create_pod(0).await);
    env.until_status(&ip0, "primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    let mut c = redis::instance::resp::Conn::tcp(&format!("{ip0}:6379"), Duration::from_secs(5))
        .await
        .expect("connect");
    c.command(&["AUTH", "pw"]).await.expect("auth");
    for i in 0..100 {
        c.command(&["SET", &format!("k{i}"), "v"])
            .await
            .expect("set");
    }
    // The operator's call: asynchronous, then polled.
    let destination = redis::crd::BackupDestination {
        s3: Some(redis::crd::S3Destination {
            bucket: "redis-backups".into(),
            path: "demo".into(),
            endpoint: s3.endpoint.clone(),
            region: String::new(),
        }),
        azure: None,
    };
    let req = instance_api::BackupRequest {
        backup_name: "b1".into(),
        method: "rdb".into(),
        destination: destination.clone(),
    };
    let base = format!("https://{}:8080", env.server_name());
    let call = |r: reqwest::RequestBuilder| {
        r.bearer_auth(&env.token)
            .header(instance_api::VERSION_HEADER, instance_api::API_VERSION)
    };
    let resp = call(
        env.http(&ip0)
            .post(format!("{base}{}", redis::names::PATH_BACKUP))
            .json(&req),
    )
    .send()
    .await
    .expect("backup");
    assert_eq!(resp.status().as_u16(), 202);
    let done: instance_api::BackupResult =
        testenv::eventually("the backup completed", T, || async {
            let r = call(
                env.http(&ip0)
                    .get(format!("{base}{}/b1", redis::names::PATH_BACKUP)),
            )
            .send()
            .await
            .ok()?;
            let r: instance_api::BackupResult = r.json().await.ok()?;
            assert_ne!(r.phase, "Failed", "{r:?}");
            (r.phase == "Completed").then_some(r)
        })
        .await
        .expect("completed");
    assert_eq!(done.backup_path, "s3://redis-backups/demo/b1.rdb");
    assert!(s3.root.join("redis-backups/demo/b1.rdb").is_file());
    // The backup controller's record of it.
    let backups: Api<redis::crd::RedisBackup> = Api::namespaced(env.admin.clone(), &env.ns.name);
    let b: redis::crd::RedisBackup = obj(
        json!({"apiVersion": "redis.io/v1", "kind": "RedisBackup", "metadata": {"name": "b1"},
        "spec": {"clusterName": CLUSTER, "destination": destination}}),
    );
    backups
        .create(&PostParams::default(), &b)
        .await
        .expect("backup object");
    backups
        .patch_status("b1", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Completed", "backupPath": done.backup_path, "artifactType": "rdb"}})))
        .await
        .expect("backup status");
    // A new primary bootstraps from it: the restore init container, then the instance.
    env.set_status(json!({"currentPrimary": "demo-1", "targetPrimary": "demo-1"}))
        .await;
    let ip1 = ip_of(&env.create("demo-1", "data", Some("b1")).await);
    env.until_status(&ip1, "restored primary", |r| {
        r.boot == Boot::Running && r.role == "master"
    })
    .await;
    let mut c = redis::instance::resp::Conn::tcp(&format!("{ip1}:6379"), Duration::from_secs(5))
        .await
        .expect("connect");
    c.command(&["AUTH", "pw"]).await.expect("auth");
    assert_eq!(
        c.command(&["DBSIZE"]).await.expect("dbsize").int(),
        Some(100),
        "every key restored"
    );
}
