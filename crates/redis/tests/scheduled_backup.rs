//! The RedisScheduledBackup controller on the real control plane, with the operator in the test
//! process as its own ServiceAccount (deploy/redis/rbac).
//!
//! Checked: each tick of `@every 2s` creates one RedisBackup named `<schedule>-<unix seconds>`
//! with the cluster and schedule labels and the schedule's spec; the status says when it ran,
//! what it created and when it runs next, with `ScheduleValid=True`; finished backups beyond
//! `failedBackupsHistoryLimit` are deleted (oldest first); `suspend` stops it (phase
//! `Suspended`, no next time, no new backups); an invalid schedule is reported
//! (`ScheduleValid=False`, `InvalidSchedule`) and creates nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use redis::crd::{
    BackupPhase, RedisBackup, RedisCluster, RedisScheduledBackup, ScheduledBackupPhase,
};
use serde_json::json;
use testenv::TestNamespace;

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
