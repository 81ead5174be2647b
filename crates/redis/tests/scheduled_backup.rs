//! The RedisScheduledBackup controller on the real control plane, with the operator in the test
//! process as its own ServiceAccount (deploy/redis/rbac).
//!
//! Checked: each tick of `@every 2s` creates one RedisBackup named `<schedule>-<unix seconds>`
//! with the cluster and schedule labels and the schedule's spec; the status says when it ran,
//! what it created and when it runs next, with `ScheduleValid=True`; finished backups beyond
//! `failedBackupsHistoryLimit` are deleted (oldest first); `suspend` stops it (phase
//! `Suspended`, no next time, no new backups); an invalid schedule is reported
//! (`ScheduleValid=False`, `InvalidSchedule`) and creates nothing.
//!
//! Retention of artifacts, with the whole operator and a cluster on the process-backed nodes
//! and the S3 server (s3s-fs) on the nodes' gateway: `backupDeletionPolicy: Delete` makes each
//! backup a schedule creates carry `deletionPolicy: Delete` and the finalizer, and a pruned one
//! takes its stored object with it; a backup without the policy keeps its object when deleted;
//! one whose cluster is gone keeps it with a Warning `ArtifactKept` once
//! `--artifact-deletion-timeout` passes, and goes. The S3 DeleteObject the instances send is
//! also checked on its own against the server.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use redis::crd::{
    BackupPhase, RedisBackup, RedisCluster, RedisScheduledBackup, ScheduledBackupPhase,
};
use serde_json::json;
use testenv::TestNamespace;

mod operator;
mod support;

use support::operator::Operator;
use support::pods::obj;

const T: Duration = Duration::from_secs(60);

async fn setup(prefix: &str) -> (kube::Client, TestNamespace) {
    let admin = testenv::client().await;
    for crd in redis::crd::crds() {
        testenv::install_crd(&admin, crd).await.expect("CRD");
    }
    let ns = TestNamespace::new(&admin, prefix).await;
    // No backupCredentialsSecret: every backup fails at once, which is what the history
    // limit prunes.
    let rc: RedisCluster = obj(json!({"apiVersion": "redis.io/v1", "kind": "RedisCluster",
        "metadata": {"name": "demo"},
        "spec": {"storage": {"size": "1Gi", "type": "emptyDir"}, "instances": 1}}));
    Api::<RedisCluster>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &rc)
        .await
        .expect("cluster");
    (admin, ns)
}

fn schedule(name: &str, cron: &str) -> RedisScheduledBackup {
    obj(
        json!({"apiVersion": "redis.io/v1", "kind": "RedisScheduledBackup",
        "metadata": {"name": name},
        "spec": {"schedule": cron, "clusterName": "demo", "method": "aof", "target": "primary",
                 "destination": {"s3": {"bucket": "bk"}},
                 "failedBackupsHistoryLimit": 2}}),
    )
}

async fn children(api: &Api<RedisBackup>, name: &str) -> Vec<RedisBackup> {
    let lp = ListParams::default().labels(&format!("redis.io/scheduled-backup={name}"));
    api.list(&lp).await.expect("list").items
}

#[tokio::test]
async fn ticks_create_backups_prune_failed_ones_and_suspend_stops_them() {
    let (admin, ns) = setup("redis-sched").await;
    let op = Operator::start(&admin, &ns.name, &[]).await;
    let schedules: Api<RedisScheduledBackup> = Api::namespaced(admin.clone(), &ns.name);
    let backups: Api<RedisBackup> = Api::namespaced(admin.clone(), &ns.name);
    schedules
        .create(&PostParams::default(), &schedule("nightly", "@every 2s"))
        .await
        .expect("schedule");

    // Ticks create backups; the failed ones beyond the limit of 2 go, so at some point four
    // distinct names have been seen while at most 2 finished ones remain.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    testenv::eventually("four ticks, pruned to the limit", T, || {
        let backups = backups.clone();
        let seen = seen.clone();
        async move {
            let list = children(&backups, "nightly").await;
            let mut seen = seen.lock().expect("lock");
            for b in &list {
                seen.insert(b.name_any());
            }
            let failed = list
                .iter()
                .filter(|b| b.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Failed))
                .count();
            (seen.len() >= 4 && list.len() < seen.len() && failed <= 2).then_some(())
        }
    })
    .await
    .expect("ticks");
    let list = children(&backups, "nightly").await;
    for b in &list {
        assert!(b.name_any().starts_with("nightly-"), "{}", b.name_any());
        let suffix: i64 = b.name_any()["nightly-".len()..]
            .parse()
            .expect("unix seconds");
        assert!(suffix > 1_700_000_000);
        assert_eq!(
            b.labels().get("redis.io/cluster").map(String::as_str),
            Some("demo")
        );
        assert_eq!(b.spec.cluster_name, "demo");
        assert_eq!(
            serde_json::to_value(b.spec.method).expect("m"),
            json!("aof")
        );
        assert!(b.owner_references().is_empty(), "no owner, as upstream");
    }
    let sb = schedules.get("nightly").await.expect("get");
    let st = sb.status.clone().expect("status");
    assert_eq!(st.phase, Some(ScheduledBackupPhase::Active));
    assert!(st.last_schedule_time.is_some() && st.next_schedule_time.is_some());
    assert!(st.last_backup_name.starts_with("nightly-"));
    let valid = kit::conditions::get(&st.conditions, "ScheduleValid").expect("condition");
    assert_eq!(valid.status, "True");

    // Suspended: no next time, and no new backup over several would-be ticks.
    schedules
        .patch(
            "nightly",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");
    let sb = testenv::wait_for(&schedules, "nightly", T, |s: &RedisScheduledBackup| {
        s.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(ScheduledBackupPhase::Suspended))
    })
    .await
    .expect("suspended");
    assert!(sb.status.as_ref().expect("st").next_schedule_time.is_none());
    let last = sb.status.expect("st").last_backup_name;
    let names_then: BTreeSet<String> = children(&backups, "nightly")
        .await
        .iter()
        .map(|b| b.name_any())
        .collect();
    // The newest backup the schedule created is still the one its status names after three
    // ticks' worth of time: observed through a second schedule that keeps ticking meanwhile.
    schedules
        .create(&PostParams::default(), &schedule("witness", "@every 2s"))
        .await
        .expect("witness");
    testenv::eventually("the witness ticks three times", T, || {
        let backups = backups.clone();
        async move {
            let n: BTreeSet<String> = children(&backups, "witness")
                .await
                .iter()
                .map(|b| b.name_any())
                .collect();
            (n.len() >= 3).then_some(())
        }
    })
    .await
    .expect("witness ticks");
    let names_now: BTreeSet<String> = children(&backups, "nightly")
        .await
        .iter()
        .map(|b| b.name_any())
        .collect();
    assert!(
        names_now.is_subset(&names_then),
        "a suspended schedule created {:?}",
        names_now.difference(&names_then).collect::<Vec<_>>()
    );
    let st = schedules
        .get("nightly")
        .await
        .expect("get")
        .status
        .expect("st");
    assert_eq!(st.last_backup_name, last);

    // An invalid schedule: reported, nothing created.
    schedules
        .create(&PostParams::default(), &schedule("broken", "61 * * * *"))
        .await
        .expect("broken");
    let sb = testenv::wait_for(&schedules, "broken", T, |s: &RedisScheduledBackup| {
        s.status.as_ref().is_some_and(|s| {
            kit::conditions::get(&s.conditions, "ScheduleValid")
                .is_some_and(|c| c.status == "False")
        })
    })
    .await
    .expect("invalid schedule reported");
    let c = kit::conditions::get(&sb.status.expect("st").conditions, "ScheduleValid")
        .cloned()
        .expect("condition");
    assert_eq!(c.reason, "InvalidSchedule");
    assert!(children(&backups, "broken").await.is_empty());
    op.stop().await;
}

/// A pass whose cached copy lags: it says a tick is due, but the stored schedule was suspended
/// meanwhile. The pass decides again from the stored copy, so no backup is created and the
/// status it writes is the suspended one.
#[tokio::test]
async fn a_pass_from_a_stale_copy_never_ticks_a_suspended_schedule() {
    let (admin, ns) = setup("redis-sched-stale").await;
    let schedules: Api<RedisScheduledBackup> = Api::namespaced(admin.clone(), &ns.name);
    let backups: Api<RedisBackup> = Api::namespaced(admin.clone(), &ns.name);
    let stale = schedules
        .create(&PostParams::default(), &schedule("stale", "@every 2s"))
        .await
        .expect("schedule");
    // No operator runs: the copy read at creation becomes due once its first tick has passed.
    let created = stale
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("created")
        .0;
    testenv::eventually("the first tick has passed", T, || async move {
        (jiff::Timestamp::now().duration_since(created).as_secs() >= 3).then_some(())
    })
    .await
    .expect("due");
    schedules
        .patch(
            "stale",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");

    let connector = std::sync::Arc::new(redis::instance_client::https::HttpsConnector::default());
    let shared = redis::backup::Shared::new(
        admin.clone(),
        &kit::metrics::Metrics::new(),
        Duration::from_secs(60),
        connector,
    );
    let ctx = std::sync::Arc::new(redis::scheduled_backup::Ctx {
        shared: std::sync::Arc::new(shared),
    });
    redis::scheduled_backup::reconcile(std::sync::Arc::new(stale), ctx)
        .await
        .expect("pass");

    assert!(
        children(&backups, "stale").await.is_empty(),
        "a backup was created for a suspended schedule"
    );
    let st = schedules
        .get("stale")
        .await
        .expect("get")
        .status
        .expect("st");
    assert_eq!(st.phase, Some(ScheduledBackupPhase::Suspended));
    assert!(st.next_schedule_time.is_none());
}

#[tokio::test]
async fn s3_delete_object_removes_the_key_and_a_missing_key_counts_as_gone() {
    use redis::crd::S3Destination;
    use redis::instance::{backup, s3};
    let store = support::s3_server("deletions", "127.0.0.1").await;
    let bucket = backup::bucket(
        &S3Destination {
            bucket: "deletions".into(),
            path: "demo".into(),
            endpoint: store.endpoint.clone(),
            region: String::new(),
        },
        s3::Credentials {
            access_key: support::AK.into(),
            secret_key: support::SK.into(),
            session_token: String::new(),
        },
    );
    let s = backup::Store::S3(bucket);
    let file = std::env::temp_dir().join(format!("s3-delete-{}.rdb", std::process::id()));
    std::fs::write(&file, b"REDIS0011 payload").expect("file");
    s.put_file("demo/b1.rdb", &file).await.expect("put");
    let stored = store.root.join("deletions/demo/b1.rdb");
    assert!(stored.exists());
    s.delete("demo/b1.rdb").await.expect("delete");
    assert!(!stored.exists(), "the object is gone");
    assert!(s.get_to_file("demo/b1.rdb", &file).await.is_err());
    let _ = std::fs::remove_file(&file);
    // S3 answers a missing key like a deleted one: gone either way.
    s.delete("demo/b1.rdb").await.expect("a missing key");
    // A wrong signature is the store's refusal, with its reason.
    let Store::S3(mut wrong) = s else {
        unreachable!()
    };
    wrong.creds.secret_key = "wrong".into();
    let err = Store::S3(wrong)
        .delete("demo/b1.rdb")
        .await
        .expect_err("refused");
    assert!(err.contains("HTTP 403"), "{err}");
}

use redis::instance::backup::Store;

const RETENTION_BUCKET: &str = "retention";

fn scheduled_children(backups: &[RedisBackup], schedule: &str) -> Vec<RedisBackup> {
    backups
        .iter()
        .filter(|b| {
            b.labels()
                .get("redis.io/scheduled-backup")
                .map(String::as_str)
                == Some(schedule)
        })
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pruned_backups_with_the_delete_policy_take_their_artifacts_and_retained_ones_keep_them() {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use redis::crd::BackupDeletionPolicy;
    let started = std::time::Instant::now();
    let env =
        operator::Env::on_process_nodes("rsb-retention", &["--artifact-deletion-timeout=5s"]).await;
    let gateway = testenv::procnode::gateway().expect("gateway").to_string();
    let store = support::s3_server(RETENTION_BUCKET, &gateway).await;
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
    env.create(
        "demo",
        json!({"instances": 2, "storage": {"size": "1Gi"},
            "backupCredentialsSecret": {"name": "s3-creds"}}),
    )
    .await;
    env.healthy("demo", 2).await;
    let object = |name: &str| {
        store
            .root
            .join(RETENTION_BUCKET)
            .join(format!("demo/{name}.rdb"))
    };
    let destination =
        json!({"s3": {"bucket": RETENTION_BUCKET, "path": "demo", "endpoint": store.endpoint}});
    let schedules: Api<RedisScheduledBackup> = env.api();
    let backups: Api<RedisBackup> = env.api();
    let sb: RedisScheduledBackup = obj(
        json!({"apiVersion": "redis.io/v1", "kind": "RedisScheduledBackup",
        "metadata": {"name": "often"},
        "spec": {"schedule": "@every 4s", "clusterName": "demo", "destination": destination,
                 "successfulBackupsHistoryLimit": 1, "backupDeletionPolicy": "Delete"}}),
    );
    schedules
        .create(&PostParams::default(), &sb)
        .await
        .expect("schedule");

    // A completed backup pruned beyond the limit of 1 takes its object with it, while the
    // newest completed one's object stays.
    let completed =
        |b: &RedisBackup| b.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Completed);
    let found = testenv::eventually("a pruned backup's object deleted", 2 * T, || async {
        let deleted = events_about(&env, "ArtifactDeleted").await;
        let list = backups.list(&ListParams::default()).await.ok()?.items;
        let live: BTreeSet<String> = list.iter().map(|b| b.name_any()).collect();
        let pruned = deleted
            .into_iter()
            .find(|n| !live.contains(n) && !object(n).exists())?;
        let kept = scheduled_children(&list, "often")
            .into_iter()
            .filter(completed)
            .find(|b| object(&b.name_any()).exists())?;
        Some((pruned, kept))
    })
    .await;
    let (pruned, kept) = match found {
        Ok(f) => f,
        Err(e) => panic!("{e}: {}", env.summary("demo").await),
    };
    let pruned_at = started.elapsed();
    assert!(pruned.starts_with("often-"), "{pruned}");
    let deleted_note = env.wait_event(&pruned, "ArtifactDeleted").await;
    assert!(
        deleted_note.iter().any(|n| n.contains(&format!(
            "deleted s3://{RETENTION_BUCKET}/demo/{pruned}.rdb"
        ))),
        "{deleted_note:?}"
    );
    assert_eq!(
        kept.spec.deletion_policy,
        Some(BackupDeletionPolicy::Delete)
    );
    assert!(
        kept.finalizers()
            .iter()
            .any(|f| f == "redis.io/artifact-cleanup"),
        "{:?}",
        kept.finalizers()
    );
    schedules
        .patch(
            "often",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");

    // Retain (no policy, upstream's manifest): deleting the backup keeps its object.
    let retained: RedisBackup = obj(json!({"apiVersion": "redis.io/v1", "kind": "RedisBackup",
        "metadata": {"name": "kept"},
        "spec": {"clusterName": "demo", "destination": destination}}));
    backups
        .create(&PostParams::default(), &retained)
        .await
        .expect("backup");
    let done = testenv::wait_for(&backups, "kept", T, completed)
        .await
        .expect("kept completed");
    assert!(done.finalizers().is_empty(), "{:?}", done.finalizers());
    assert!(object("kept").exists());
    backups
        .delete("kept", &Default::default())
        .await
        .expect("delete kept");
    testenv::eventually("kept deleted", T, || async {
        backups.get_opt("kept").await.ok()?.is_none().then_some(())
    })
    .await
    .expect("gone");
    assert!(object("kept").exists(), "Retain keeps the artifact");

    // No data pod left to ask: kept with a Warning after --artifact-deletion-timeout.
    testenv::eventually("no backup of the schedule running", T, || async {
        let list = backups.list(&ListParams::default()).await.ok()?.items;
        scheduled_children(&list, "often")
            .iter()
            .all(|b| {
                matches!(
                    b.status.as_ref().and_then(|s| s.phase),
                    Some(BackupPhase::Completed | BackupPhase::Failed)
                )
            })
            .then_some(())
    })
    .await
    .expect("settled");
    let list = backups
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    let last = scheduled_children(&list, "often")
        .into_iter()
        .filter(completed)
        .max_by_key(|b| b.name_any())
        .expect("a completed backup of the schedule");
    let last = last.name_any();
    assert!(object(&last).exists());
    env.clusters()
        .delete("demo", &Default::default())
        .await
        .expect("delete the cluster");
    let pods: Api<Pod> = env.api();
    testenv::eventually("the cluster's pods gone", T, || async {
        let lp = ListParams::default().labels("redis.io/cluster=demo");
        pods.list(&lp).await.ok()?.items.is_empty().then_some(())
    })
    .await
    .expect("pods gone");
    let asked = std::time::Instant::now();
    backups
        .delete(&last, &Default::default())
        .await
        .expect("delete the last backup");
    let notes = env.wait_event(&last, "ArtifactKept").await;
    assert!(
        notes.iter().any(|n| n.contains("was not deleted within 5s")
            && n.contains("RedisCluster demo does not exist")),
        "{notes:?}"
    );
    testenv::eventually("the last backup released", T, || async {
        backups.get_opt(&last).await.ok()?.is_none().then_some(())
    })
    .await
    .expect("released");
    let released = asked.elapsed();
    assert!(object(&last).exists(), "kept in the bucket");
    tracing::info!(?pruned_at, ?released, %pruned, %last, "retention measured");
    eprintln!(
        "retention: first pruned artifact deleted {pruned_at:?} after the start; kept one released {released:?} after its deletion"
    );
}

async fn events_about(env: &operator::Env, reason: &str) -> Vec<String> {
    use k8s_openapi::api::events::v1::Event;
    let list = env.api::<Event>().list(&ListParams::default()).await;
    list.map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.regarding.and_then(|r| r.name))
        .collect()
}
