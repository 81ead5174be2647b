//! The operator process's library entry (`fdb::run::run_with`, what the `fdb-operator` binary
//! runs) on the local control plane: upstream's flag names parse, leader election takes the
//! Lease named by `--leader-election-id` under the leader-election Role of `deploy/fdb/rbac`,
//! `/metrics` and `/readyz` serve, and the FoundationDBCluster controller reconciles a
//! cluster in the watched namespace, the FoundationDBBackup controller backs it up and the
//! FoundationDBRestore controller restores that backup. The database is the fake (FoundationDB cannot run here);
//! the binary itself needs fdbcli in `$FDB_BINARY_DIR` and is not started.

mod support;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use fdb::crd::{FoundationDBBackup, FoundationDBRestore};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{Harness, create};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn http_ok(url: &str) -> Option<String> {
    let resp = reqwest::get(url).await.ok()?;
    resp.status().is_success().then_some(())?;
    resp.text().await.ok()
}

#[tokio::test]
async fn the_operator_process_leads_serves_metrics_and_reconciles() {
    let h = Harness::prepare("fdb-operator").await;
    let (metrics, probe) = (free_port(), free_port());
    let flags = fdb::run::Flags::try_parse_from([
        "fdb-operator".to_owned(),
        "--enable-leader-election".into(),
        "--leader-election-id=fdb-test-leader".into(),
        format!("--lease-namespace={}", h.ns.name),
        format!("--watch-namespace={}", h.ns.name),
        "--max-concurrent-reconciles=2".into(),
        format!("--metrics-addr=127.0.0.1:{metrics}"),
        format!("--probe-addr=127.0.0.1:{probe}"),
    ])
    .expect("upstream's flags parse");
    let run = tokio::spawn(fdb::run::run_with(
        flags,
        h.operator.clone(),
        Arc::new(h.clients.clone()),
        h.token.clone(),
    ));
    let name = "entry";
    h.simulate(name);
    let c = create(&h, name, json!({})).await;
    assert!(c.status.unwrap().health.available);

    let leases: Api<Lease> = Api::namespaced(h.client.clone(), &h.ns.name);
    let lease = leases.get("fdb-test-leader").await.expect("the Lease");
    assert!(
        lease
            .spec
            .and_then(|s| s.holder_identity)
            .is_some_and(|i| !i.is_empty()),
        "someone holds the Lease"
    );
    // The same process runs the backup and restore controllers.
    let backups: Api<FoundationDBBackup> = Api::namespaced(h.client.clone(), &h.ns.name);
    let store = json!({"accountName": "minio@127.0.0.1:9000", "backupName": "nightly"});
    let backup: FoundationDBBackup = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
        "metadata": {"name": "nightly"},
        "spec": {"version": "7.1.57", "clusterName": name, "agentCount": 1,
                 "blobStoreConfiguration": store},
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    testenv::wait_for(
        &backups,
        "nightly",
        Duration::from_secs(120),
        |b: &FoundationDBBackup| {
            b.status
                .as_ref()
                .and_then(|s| s.backup_details.as_ref())
                .is_some_and(|d| d.running && d.restorable)
        },
    )
    .await
    .expect("the backup runs and is restorable");
    let restores: Api<FoundationDBRestore> = Api::namespaced(h.client.clone(), &h.ns.name);
    let restore: FoundationDBRestore = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBRestore",
        "metadata": {"name": "recover"},
        "spec": {"destinationClusterName": name, "blobStoreConfiguration": store},
    }))
    .unwrap();
    restores
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    testenv::wait_for(
        &restores,
        "recover",
        Duration::from_secs(60),
        |r: &FoundationDBRestore| r.status.as_ref().is_some_and(|s| s.running),
    )
    .await
    .expect("the restore was started");

    let ready = http_ok(&format!("http://127.0.0.1:{probe}/readyz")).await;
    assert!(ready.is_some(), "/readyz answers 200");
    let text = testenv::eventually("reconcile metrics", Duration::from_secs(30), || async {
        let text = http_ok(&format!("http://127.0.0.1:{metrics}/metrics")).await?;
        [
            "foundationdbcluster",
            "foundationdbbackup",
            "foundationdbrestore",
        ]
        .iter()
        .all(|c| {
            text.contains(&format!(
                "controller_runtime_reconcile_total{{controller=\"{c}\""
            ))
        })
        .then_some(text)
    })
    .await
    .unwrap();
    assert!(text.contains("leader_election_master_status"), "{text}");

    h.token.cancel();
    let result = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the operator stops on shutdown")
        .expect("no panic");
    assert!(result.is_ok(), "{result:?}");
}
