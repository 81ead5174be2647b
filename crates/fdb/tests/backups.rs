//! The FoundationDBBackup and FoundationDBRestore controllers on the local control plane,
//! as the operator's ServiceAccount under `deploy/fdb/rbac`, against the fake database (its
//! backups by tag, blob-store URLs and restore state machine; FoundationDB cannot run here).
//! The agents' Deployment is real: kube-controller-manager creates its pods and kwok makes
//! them ready.
//!
//! - A backup gets an agent Deployment with `agentCount` replicas, is started exactly once
//!   with its URL and tag, reports running and restorable, and a pass over it then writes
//!   nothing; pause and resume, a new snapshot period (modify), `Stopped` (discontinue) and
//!   `agentCount: 0` (Deployment deleted) follow the spec.
//! - An agent pod stuck in phase Failed (kwok's chaos stage) is deleted by the operator and
//!   the Deployment runs a new one.
//! - Deleting backups: `noop` leaves the backup running, `stop` aborts it and keeps its data,
//!   `cleanup` aborts it and deletes its data; each resource goes away (finalizer released).
//! - A restore is started once from the backup's URL and followed to `completed`; a pass
//!   over the completed restore calls nothing and writes nothing.
//! - A backup naming no cluster, one whose account cannot form a URL and a restore naming no
//!   cluster get Warning Events saying so.

mod support;

use std::sync::Arc;
use std::time::Duration;

use fdb::crd::{FoundationDBBackup, FoundationDBRestore};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Harness, create};

const TIMEOUT: Duration = Duration::from_secs(120);

fn options() -> fdb::backup::Options {
    fdb::backup::Options {
        backup_requeue: Duration::from_secs(1),
        missing_cluster_requeue: Duration::from_secs(2),
        restore_running_requeue: Duration::from_secs(1),
        restore_waiting_requeue: Duration::from_secs(2),
        minimum_age_for_terminal_pod_deletion: Duration::from_secs(5),
    }
}

/// A cluster `name`, reconciled, with the backup and restore controllers running.
async fn setup(prefix: &str, name: &str) -> Harness {
    let h = Harness::start(prefix).await;
    h.spawn_backup_controllers(options());
    h.simulate(name);
    create(&h, name, json!({})).await;
    h
}

fn backups(h: &Harness) -> Api<FoundationDBBackup> {
    Api::namespaced(h.client.clone(), &h.ns.name)
}

fn blob_store(backup_name: Option<&str>) -> serde_json::Value {
    let mut conf = json!({
        "accountName": "minio@127.0.0.1:9000",
        "urlParameters": ["secure_connection=0"],
    });
    if let Some(b) = backup_name {
        conf["backupName"] = json!(b);
    }
    conf
}

fn url(backup: &str) -> String {
    format!("blobstore://minio@127.0.0.1:9000/{backup}?bucket=fdb-backups&secure_connection=0")
}

async fn create_backup(h: &Harness, name: &str, cluster: &str, spec: serde_json::Value) {
    let mut full = json!({
        "version": "7.1.57",
        "clusterName": cluster,
        "blobStoreConfiguration": blob_store(None),
        "podTemplateSpec": {"spec": {
            "containers": [{"name": "foundationdb",
                "env": [{"name": "FDB_BLOB_CREDENTIALS", "value": "/var/backup-credentials/credentials"}],
                "volumeMounts": [{"name": "backup-credentials", "mountPath": "/var/backup-credentials"}]}],
            "volumes": [{"name": "backup-credentials", "secret": {"secretName": "backup-credentials"}}],
        }},
    });
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    let b: FoundationDBBackup = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBBackup",
        "metadata": {"name": name},
        "spec": full,
    }))
    .unwrap();
    backups(h)
        .create(&PostParams::default(), &b)
        .await
        .expect("create the backup");
}

async fn patch_backup(h: &Harness, name: &str, spec: serde_json::Value) {
    backups(h)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .expect("patch the backup");
}

/// Waits until the backup is reconciled at its generation and `cond` holds.
async fn settled(
    h: &Harness,
    name: &str,
    cond: impl Fn(&FoundationDBBackup) -> bool + Clone + Send + 'static,
) -> FoundationDBBackup {
    testenv::wait_for(&backups(h), name, TIMEOUT, move |b: &FoundationDBBackup| {
        let s = b.status.clone().unwrap_or_default();
        s.generations.reconciled == b.metadata.generation.unwrap_or(-1) && cond(b)
    })
    .await
    .expect("backup reconciled")
}

fn details(b: &FoundationDBBackup) -> fdb::crd::FoundationDBBackupStatusBackupDetails {
    b.status
        .clone()
        .unwrap_or_default()
        .backup_details
        .unwrap_or_default()
}

fn calls(h: &Harness, db: &str, prefix: &str) -> Vec<String> {
    h.db(db)
        .calls()
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .collect()
}

/// A pass over the object makes no Kubernetes write and no mutating database call.
async fn quiet_backup_pass(h: &Harness, db: &str, name: &str) {
    let (counting, counts) = testenv::counting_client().await;
    let ctx = Arc::new(fdb::backup::Context::new(
        counting,
        Arc::new(h.clients.clone()),
    ));
    let before = h.db(db).calls().len();
    let live = backups(h).get(name).await.unwrap();
    fdb::backup::reconcile(Arc::new(live), ctx)
        .await
        .expect("pass");
    assert_eq!(
        counts.writes(),
        0,
        "requests by verb: {:?}",
        counts.by_verb()
    );
    let new: Vec<String> = h.db(db).calls().into_iter().skip(before).collect();
    assert!(
        new.iter().all(|c| c.starts_with("fdbbackup status")),
        "only status reads: {new:?}"
    );
}

#[tokio::test]
async fn a_backup_runs_its_agents_and_follows_its_spec() {
    let h = setup("fdb-backup", "db").await;
    create_backup(&h, "nightly", "db", json!({"agentCount": 3})).await;
    let b = settled(&h, "nightly", |b| {
        let s = b.status.clone().unwrap_or_default();
        let d = details(b);
        s.agent_count == 3 && s.deployment_configured && d.running && d.restorable
    })
    .await;
    assert!(kit::conditions::is_true(
        &b.status.clone().unwrap().conditions,
        "Ready"
    ));
    assert_eq!(details(&b).url, url("nightly"));
    assert_eq!(details(&b).tag, "default");

    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), &h.ns.name);
    let d = deployments
        .get("nightly-backup-agents")
        .await
        .expect("agents");
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(
        d.labels().get("foundationdb.org/backup-for"),
        b.metadata.uid.as_ref()
    );
    assert_eq!(d.owner_references()[0].uid, b.uid().unwrap());
    let starts = calls(&h, "db", "fdbbackup start");
    assert_eq!(
        starts,
        vec![format!(
            "fdbbackup start -d {} -t default -s 864000 -z",
            url("nightly")
        )],
        "started exactly once"
    );
    quiet_backup_pass(&h, "db", "nightly").await;

    // Pause, then resume.
    patch_backup(&h, "nightly", json!({"backupState": "Paused"})).await;
    settled(&h, "nightly", |b| details(b).paused).await;
    assert!(h.db("db").backups_paused());
    patch_backup(&h, "nightly", json!({"backupState": "Running"})).await;
    settled(&h, "nightly", |b| !details(b).paused).await;
    assert!(!h.db("db").backups_paused());
    assert_eq!(calls(&h, "db", "fdbbackup pause").len(), 1);
    assert_eq!(calls(&h, "db", "fdbbackup resume").len(), 1);

    // A new snapshot period modifies the running backup.
    patch_backup(&h, "nightly", json!({"snapshotPeriodSeconds": 3600})).await;
    settled(&h, "nightly", |b| {
        details(b).snapshot_period_seconds == 3600
    })
    .await;
    assert_eq!(
        calls(&h, "db", "fdbbackup modify"),
        vec![format!(
            "fdbbackup modify -s 3600 -d {} -t default",
            url("nightly")
        )]
    );
    assert_eq!(h.db("db").backups()["default"].snapshot_period, 3600);

    // Stopped: discontinued once.
    patch_backup(&h, "nightly", json!({"backupState": "Stopped"})).await;
    settled(&h, "nightly", |b| !details(b).running).await;
    assert_eq!(
        calls(&h, "db", "fdbbackup discontinue"),
        vec!["fdbbackup discontinue -t default"]
    );
    assert_eq!(
        calls(&h, "db", "fdbbackup start").len(),
        1,
        "never restarted"
    );

    // No agents: the Deployment goes.
    patch_backup(&h, "nightly", json!({"agentCount": 0})).await;
    testenv::wait_deleted(&deployments, "nightly-backup-agents", TIMEOUT)
        .await
        .expect("agents deleted");
    let b = settled(&h, "nightly", |b| {
        b.status.clone().unwrap_or_default().deployment_configured
    })
    .await;
    assert_eq!(b.status.unwrap().agent_count, 0);
    quiet_backup_pass(&h, "db", "nightly").await;
}

#[tokio::test]
async fn an_agent_pod_stuck_failed_is_deleted_and_replaced() {
    let h = setup("fdb-backup-agent", "db").await;
    create_backup(&h, "nightly", "db", json!({"agentCount": 2})).await;
    settled(&h, "nightly", |b| {
        b.status.clone().unwrap_or_default().agent_count == 2
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns.name);
    let selector = "foundationdb.org/deployment-name=nightly-backup-agents";
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap();
    let victim = list.items[0].clone();
    let (name, uid) = (victim.name_any(), victim.uid().unwrap());
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"}}})),
    )
    .await
    .expect("label the pod to fail");
    testenv::eventually("the failed agent pod deleted", TIMEOUT, || async {
        let p = pods.get_opt(&name).await.ok()?;
        p.is_none_or(|p| p.uid().as_deref() != Some(uid.as_str()))
            .then_some(())
    })
    .await
    .unwrap();
    let note = event(&h, "nightly", "DeletedTerminalAgentPod", false).await;
    assert!(note.contains(&name), "{note}");
    settled(&h, "nightly", |b| {
        b.status.clone().unwrap_or_default().agent_count == 2
    })
    .await;
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap();
    assert!(
        list.items
            .iter()
            .all(|p| p.uid().as_deref() != Some(uid.as_str()))
    );
}

#[tokio::test]
async fn deleting_a_backup_follows_its_deletion_policy() {
    let h = setup("fdb-backup-del", "db").await;
    for (name, tag, policy) in [
        ("keep", "a", "noop"),
        ("halt", "b", "stop"),
        ("wipe", "c", "cleanup"),
    ] {
        create_backup(
            &h,
            name,
            "db",
            json!({"tag": tag, "deletionPolicy": policy, "agentCount": 1}),
        )
        .await;
    }
    for name in ["keep", "halt", "wipe"] {
        let b = settled(&h, name, |b| details(b).running).await;
        let finalizer = b
            .finalizers()
            .iter()
            .any(|f| f == "foundationdb.org/backup");
        assert_eq!(finalizer, name != "keep", "{name}: {:?}", b.finalizers());
    }
    for name in ["keep", "halt", "wipe"] {
        backups(&h)
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
        testenv::wait_deleted(&backups(&h), name, TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{name} not released: {e}; calls {:?}", h.db("db").calls()));
    }
    let db = h.db("db");
    let live = db.backups();
    assert!(live["a"].running, "noop leaves the backup running");
    assert!(
        !live["b"].running && live["b"].state == "aborted",
        "stop aborts: {:?}",
        live["b"]
    );
    assert!(
        !live["c"].running && live["c"].state == "aborted",
        "cleanup aborts: {:?}",
        live["c"]
    );
    let data = db.backup_data();
    assert!(
        data.contains(&url("keep")) && data.contains(&url("halt")),
        "{data:?}"
    );
    assert!(
        !data.contains(&url("wipe")),
        "cleanup deletes the data: {data:?}"
    );
    assert_eq!(
        calls(&h, "db", "fdbbackup abort"),
        vec!["fdbbackup abort -t b", "fdbbackup abort -t c"]
    );
    assert_eq!(
        calls(&h, "db", "fdbbackup delete"),
        vec![format!("fdbbackup delete -d {}", url("wipe"))]
    );
}

fn restores(h: &Harness) -> Api<FoundationDBRestore> {
    Api::namespaced(h.client.clone(), &h.ns.name)
}

async fn create_restore(h: &Harness, name: &str, cluster: &str, conf: serde_json::Value) {
    let r: FoundationDBRestore = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBRestore",
        "metadata": {"name": name},
        "spec": {"destinationClusterName": cluster, "blobStoreConfiguration": conf},
    }))
    .unwrap();
    restores(h)
        .create(&PostParams::default(), &r)
        .await
        .expect("create the restore");
}

#[tokio::test]
async fn a_restore_is_started_once_and_followed_to_completion() {
    let h = setup("fdb-restore", "db").await;
    create_backup(&h, "nightly", "db", json!({"agentCount": 1})).await;
    settled(&h, "nightly", |b| details(b).restorable).await;
    h.db("db").set_restore_reads(4);

    create_restore(&h, "recover", "db", blob_store(Some("nightly"))).await;
    let r = testenv::wait_for(
        &restores(&h),
        "recover",
        TIMEOUT,
        |r: &FoundationDBRestore| r.status.as_ref().is_some_and(|s| s.state == "completed"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; calls {:?}", h.db("db").calls()));
    let status = r.status.unwrap();
    assert!(!status.running);
    assert!(kit::conditions::is_true(&status.conditions, "Complete"));
    assert_eq!(
        calls(&h, "db", "fdbrestore start"),
        vec![format!("fdbrestore start -r {}", url("nightly"))],
        "started exactly once"
    );
    let reads = calls(&h, "db", "fdbrestore status").len();
    assert!(reads >= 4, "followed until completed: {reads} status reads");

    // The completed restore: a pass calls nothing and writes nothing.
    let (counting, counts) = testenv::counting_client().await;
    let ctx = Arc::new(fdb::backup::Context::new(
        counting,
        Arc::new(h.clients.clone()),
    ));
    // The backup `nightly` still runs, and its controller reads its status on its own
    // schedule: only restore calls are this pass's.
    let before = calls(&h, "db", "fdbrestore").len();
    let live = restores(&h).get("recover").await.unwrap();
    fdb::restore::reconcile(Arc::new(live), ctx)
        .await
        .expect("pass");
    assert_eq!(
        counts.writes(),
        0,
        "requests by verb: {:?}",
        counts.by_verb()
    );
    assert_eq!(
        calls(&h, "db", "fdbrestore").len(),
        before,
        "no restore call: {:?}",
        calls(&h, "db", "fdbrestore")
    );
}

async fn warning(h: &Harness, object: &str, reason: &str) -> String {
    event(h, object, reason, true).await
}

async fn event(h: &Harness, object: &str, reason: &str, warning: bool) -> String {
    let type_ = if warning { "Warning" } else { "Normal" };
    let events: Api<Event> = Api::namespaced(h.client.clone(), &h.ns.name);
    testenv::eventually(&format!("{reason} on {object}"), TIMEOUT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            let about = e.regarding.as_ref()?.name.as_deref()? == object;
            (about && e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some(type_))
                .then(|| e.note.unwrap_or_default())
        })
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn bad_input_is_explained_with_warning_events() {
    let h = Harness::start("fdb-backup-bad").await;
    h.spawn_backup_controllers(options());
    create_backup(&h, "orphan", "no-such-cluster", json!({})).await;
    let note = warning(&h, "orphan", "ClusterNotFound").await;
    assert!(note.contains("\"no-such-cluster\""), "{note}");
    create_backup(
        &h,
        "unreadable",
        "no-such-cluster",
        json!({"blobStoreConfiguration": {"accountName": "no-host-here"}}),
    )
    .await;
    let note = warning(&h, "unreadable", "InvalidBlobStoreConfiguration").await;
    assert!(note.contains("blobStoreConfiguration"), "{note}");
    create_restore(&h, "lost", "no-such-cluster", blob_store(None)).await;
    let note = warning(&h, "lost", "ClusterNotFound").await;
    assert!(note.contains("destinationClusterName"), "{note}");
    // Nothing was created for them.
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), &h.ns.name);
    assert!(
        deployments
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Each says why in its condition too.
    for (name, reason) in [
        ("orphan", "ClusterNotFound"),
        ("unreadable", "InvalidBlobStoreConfiguration"),
    ] {
        let b = testenv::wait_for(&backups(&h), name, TIMEOUT, |b: &FoundationDBBackup| {
            b.status.as_ref().is_some_and(|s| !s.conditions.is_empty())
        })
        .await
        .unwrap();
        let s = b.status.unwrap();
        let ready = kit::conditions::get(&s.conditions, "Ready").expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reason)
        );
        assert!(s.backup_details.is_none(), "nothing else reported: {s:?}");
    }
    let r = testenv::wait_for(&restores(&h), "lost", TIMEOUT, |r: &FoundationDBRestore| {
        r.status.as_ref().is_some_and(|s| !s.conditions.is_empty())
    })
    .await
    .unwrap();
    let complete =
        kit::conditions::get(&r.status.as_ref().unwrap().conditions, "Complete").cloned();
    assert_eq!(
        complete.map(|c| (c.status, c.reason)),
        Some(("False".into(), "ClusterNotFound".into()))
    );
}
