//! `kubectl-redis` against the local control plane: one namespace per test, the CRDs
//! installed, the RedisCluster's status written directly (no operator needed). The plugin runs
//! in-process through `main_with`, pointed at the plane with `--kubeconfig`.
//!
//! Checked: `status` shows the per-instance role, offset, lag and link; `fence on/off` edits
//! the annotation; `hibernate on/off` sets it; `restart` deletes only an instance's pod; `promote` records the switchover intent and refuses a
//! fenced instance or the current primary; `backup` creates a RedisBackup; a missing cluster
//! or pod is an error naming it.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use redis::crd::{BackupTarget, RedisBackup, RedisCluster};
use serde_json::json;
use testenv::TestNamespace;

async fn setup(prefix: &str) -> (Client, TestNamespace, Api<RedisCluster>) {
    let client = testenv::client().await;
    for crd in redis::crd::crds() {
        testenv::install_crd(&client, crd).await.expect("CRD");
    }
    let ns = TestNamespace::new(&client, prefix).await;
    let api: Api<RedisCluster> = Api::namespaced(client.clone(), &ns.name);
    let rc: RedisCluster = serde_json::from_value(json!({
        "apiVersion": "redis.io/v1", "kind": "RedisCluster", "metadata": {"name": "demo"},
        "spec": {"storage": {"size": "1Gi", "type": "emptyDir"}, "instances": 2}
    }))
    .expect("cluster");
    api.create(&PostParams::default(), &rc)
        .await
        .expect("create");
    api.patch_status(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Healthy", "currentPrimary": "demo-0", "targetPrimary": "demo-0",
            "instances": 2, "readyInstances": 2,
            "instancesStatus": {
                "demo-0": {"role": "master", "ready": true, "replicationOffset": 5000},
                "demo-1": {"role": "slave", "ready": true, "replicationOffset": 4990,
                           "replicaLagBytes": 10, "masterLinkStatus": "up"}
            }
        }})),
    )
    .await
    .expect("status");
    (client, ns, api)
}

/// Runs `kubectl redis -n <ns> ARGS…`; Ok(stdout) or Err(error message).
async fn plugin(ns: &str, args: &[&str]) -> Result<String, String> {
    let kubeconfig = testenv::kubeconfig_path().display().to_string();
    let mut argv: Vec<String> = vec!["--kubeconfig".into(), kubeconfig, "-n".into(), ns.into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let mut out = Vec::new();
    let result = redis::plugin::main_with(argv, &mut out).await;
    let text = String::from_utf8(out).expect("utf-8 output");
    result.map(|()| text).map_err(|e| e.to_string())
}

#[tokio::test]
async fn status_fence_hibernate_promote_and_backup() {
    let (client, ns, api) = setup("redis-plugin").await;
    let n = ns.name.as_str();

    let out = plugin(n, &["status", "demo"]).await.expect("status");
    assert!(out.contains("Primary:") && out.contains("demo-0"), "{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip_while(|l| !l.starts_with("INSTANCE"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[1],
        ["demo-0", "primary", "true", "5000", "-", "-", "no"]
    );
    assert_eq!(
        rows[2],
        ["demo-1", "replica", "true", "4990", "10", "up", "no"]
    );

    plugin(n, &["fence", "on", "demo", "demo-1"])
        .await
        .expect("fence");
    let rc = api.get("demo").await.expect("get");
    assert_eq!(
        rc.annotations()
            .get("redis.io/fencedInstances")
            .map(String::as_str),
        Some(r#"["demo-1"]"#)
    );
    let err = plugin(n, &["promote", "demo", "demo-1"]).await.unwrap_err();
    assert!(err.contains("fenced"), "{err}");
    plugin(n, &["fence", "off", "demo", "demo-1"])
        .await
        .expect("unfence");
    let rc = api.get("demo").await.expect("get");
    assert!(!rc.annotations().contains_key("redis.io/fencedInstances"));

    let err = plugin(n, &["promote", "demo", "demo-0"]).await.unwrap_err();
    assert!(err.contains("already the primary"), "{err}");
    plugin(n, &["promote", "demo", "demo-1"])
        .await
        .expect("promote");
    let st = api.get("demo").await.expect("get").status.expect("status");
    assert_eq!(st.target_primary, "demo-1");
    assert_eq!(st.current_primary, "demo-0");
    assert!(st.target_primary_timestamp.is_some());
    let out = plugin(n, &["status", "demo"]).await.expect("status");
    assert!(out.contains("Target primary:"), "{out}");

    plugin(n, &["hibernate", "on", "demo"])
        .await
        .expect("hibernate");
    let rc = api.get("demo").await.expect("get");
    assert_eq!(
        rc.annotations()
            .get("redis.io/hibernation")
            .map(String::as_str),
        Some("on")
    );

    plugin(
        n,
        &[
            "backup",
            "demo",
            "--name",
            "manual",
            "--target",
            "primary",
            "--s3-bucket",
            "bk",
        ],
    )
    .await
    .expect("backup");
    let b = Api::<RedisBackup>::namespaced(client.clone(), n)
        .get("manual")
        .await
        .expect("backup created");
    assert_eq!(b.spec.cluster_name, "demo");
    assert_eq!(b.spec.target, BackupTarget::Primary);
    let err = plugin(n, &["backup", "demo"]).await.unwrap_err();
    assert!(err.contains("exactly one of s3 or azure"), "{err}");

    plugin(n, &["hibernate", "off", "demo"])
        .await
        .expect("wake up");
    let rc = api.get("demo").await.expect("get");
    assert_eq!(
        rc.annotations()
            .get("redis.io/hibernation")
            .map(String::as_str),
        Some("off")
    );

    // `restart` deletes the instance's pod (the operator, not running here, recreates it),
    // and only a pod of the named cluster. The pods are never scheduled, so their deletion
    // is immediate.
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    for (name, cluster) in [("demo-1", "demo"), ("other-0", "other")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"redis.io/cluster": cluster}},
            "spec": {"schedulerName": "not-scheduled", "containers": [{"name": "redis", "image": "redis"}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    let out = plugin(n, &["restart", "demo", "demo-1"])
        .await
        .expect("restart");
    assert!(out.contains("demo-1 restarting"), "{out}");
    testenv::wait_deleted(&pods, "demo-1", std::time::Duration::from_secs(30))
        .await
        .expect("the instance's pod is deleted");
    let err = plugin(n, &["restart", "demo", "other-0"])
        .await
        .unwrap_err();
    assert!(
        err.contains("not an instance of rediscluster \"demo\""),
        "{err}"
    );
    assert!(
        pods.get_opt("other-0").await.expect("get").is_some(),
        "another cluster's pod is left alone"
    );

    let err = plugin(n, &["status", "nope"]).await.unwrap_err();
    assert!(err.contains("rediscluster \"nope\" not found"), "{err}");
    let err = plugin(n, &["restart", "demo", "demo-7"]).await.unwrap_err();
    assert!(err.contains("pod \"demo-7\" not found"), "{err}");
}
