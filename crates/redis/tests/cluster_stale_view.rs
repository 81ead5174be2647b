//! A pass working from a stale view of its RedisCluster (the watch cache not yet showing the
//! previous pass's write) must not overwrite what that pass wrote: every write of the
//! RedisCluster is conditional on the resourceVersion the pass read, and a pass carries the
//! stored resourceVersion forward across its own writes. Driven deterministically: the
//! operator's writer, as the operator's ServiceAccount under deploy/redis/rbac, with a newer
//! status stored and a copy of the cluster from before it — no operator running, no timing.
//! The RedisBackup controller's status writer is held to the same rule.

mod operator;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use operator::Env;
use redis::cluster::apply::Writer;
use redis::cluster::facts::Members;
use redis::cluster::handoff::PENDING;
use redis::cluster::model::Model;
use redis::cluster::steps::update_status;
use redis::cluster::{Pass, observe::Observed};
use redis::context::{Context, Settings};
use redis::crd::{RedisCluster, RedisClusterStatus};
use redis::instance_client::https::HttpsConnector;
use redis::metrics::RedisMetrics;
use serde_json::json;

fn at(s: i64) -> Option<Time> {
    Some(Time(jiff::Timestamp::from_second(s).expect("time")))
}

/// The status once the failover's intent is written: `demo-0` failing, the target pending.
fn failing_over() -> RedisClusterStatus {
    RedisClusterStatus {
        current_primary: "demo-0".into(),
        target_primary: PENDING.into(),
        target_primary_timestamp: at(1_000),
        current_primary_failing_since_timestamp: at(1_000),
        ..RedisClusterStatus::default()
    }
}

/// The status once `demo-1`'s promotion is published.
fn promoted() -> RedisClusterStatus {
    RedisClusterStatus {
        current_primary: "demo-1".into(),
        target_primary: "demo-1".into(),
        target_primary_timestamp: at(1_005),
        current_primary_timestamp: at(1_008),
        ..RedisClusterStatus::default()
    }
}

/// What a pass still seeing the pending failover writes when it aborts it: the old primary back.
fn aborted() -> RedisClusterStatus {
    RedisClusterStatus {
        current_primary: "demo-0".into(),
        target_primary: "demo-0".into(),
        target_primary_timestamp: at(1_009),
        ..RedisClusterStatus::default()
    }
}

/// The operator's context, as the operator's ServiceAccount.
async fn context(env: &Env) -> Arc<Context> {
    let (client, _) = operator::counting_sa_client(&env.admin, &env.ns.name, operator::SA)
        .await
        .expect("operator client");
    Arc::new(Context::new(
        client,
        Settings::default(),
        Arc::new(HttpsConnector::default()),
        RedisMetrics::default(),
    ))
}

/// A pass over `rc` as the operator starts one (nothing observed yet).
fn pass(ctx: &Arc<Context>, rc: &RedisCluster) -> Pass {
    Pass {
        ctx: ctx.clone(),
        rc: Arc::new(rc.clone()),
        confirmed: false,
        model: Model::of(rc).expect("model"),
        seen: Observed::default(),
        now: jiff::Timestamp::now(),
        members: Members::default(),
        instances: None,
        secrets: BTreeMap::new(),
        blocked: None,
        plan: None,
        handoff: None,
        sentinel: None,
        memory: Default::default(),
    }
}

/// `demo` with the failover's intent stored, as its status writer returned it.
async fn cluster_failing_over(env: &Env, ctx: &Context) -> RedisCluster {
    let created = env
        .create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    Writer::new(ctx, &created)
        .status(created.status.as_ref(), &failing_over())
        .await
        .expect("the failover's intent")
        .expect("written")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_from_a_stale_view_writes_nothing_and_the_published_promotion_survives() {
    let env = Env::new("rc-stale").await;
    let ctx = context(&env).await;
    // The lagging cache's copy: the failover pending, demo-0 still current.
    let stale = cluster_failing_over(&env, &ctx).await;
    let published = Writer::new(&ctx, &stale)
        .status(stale.status.as_ref(), &promoted())
        .await
        .expect("the promotion published")
        .expect("written");
    assert_ne!(published.resource_version(), stale.resource_version());

    // A pass from the stale copy aborting the failover: refused, as a stale view.
    let w = Writer::new(&ctx, &stale);
    let err = w
        .status(stale.status.as_ref(), &aborted())
        .await
        .expect_err("a status write from a stale view");
    assert!(err.is_stale(), "{err}");
    // Nor its other writes of the cluster, nor an action outside it.
    let err = w
        .annotate_cluster(|_| vec![(redis::names::ANN_OPERATOR_FENCED, None)])
        .await
        .expect_err("an annotation patch from a stale view");
    assert!(err.is_stale(), "{err}");
    let err = w
        .patch_spec(json!({"instances": 2}))
        .await
        .expect_err("a spec patch from a stale view");
    assert!(err.is_stale(), "{err}");
    let err = w.confirm_current().await.expect_err("a stale view");
    assert!(err.is_stale(), "{err}");
    Writer::new(&ctx, &published)
        .confirm_current()
        .await
        .expect("the stored copy is current");

    // The step's own write, from a pass started on the stale copy, ends on it too.
    let mut stale_pass = pass(&ctx, &stale);
    stale_pass.model.status = aborted();
    let err = update_status::write(&mut stale_pass)
        .await
        .expect_err("the status step from a stale view");
    assert!(err.is_stale(), "{err}");
    let err = stale_pass
        .confirm_current()
        .await
        .expect_err("a stale pass");
    assert!(err.is_stale(), "{err}");

    let stored = env.clusters().get("demo").await.expect("demo");
    assert_eq!(stored.resource_version(), published.resource_version());
    let st = stored.status.expect("status");
    assert_eq!(
        (st.current_primary.as_str(), st.target_primary.as_str()),
        ("demo-1", "demo-1"),
        "{st:#?}"
    );
    assert_eq!(st.current_primary_timestamp, at(1_008));
    assert_eq!(st.current_primary_failing_since_timestamp, None);
    assert_eq!(stored.spec.instances, 3);
    // The stale pass was not told its view was current by its failed writes.
    assert!(!stale_pass.confirmed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_carries_the_stored_resource_version_forward_across_its_own_writes() {
    let env = Env::new("rc-carry").await;
    let ctx = context(&env).await;
    let read = cluster_failing_over(&env, &ctx).await;
    let mut p = pass(&ctx, &read);

    // Status, then the fence in the annotations, then status again, then the spec: each
    // conditional on what the previous write stored.
    p.model.status = promoted();
    update_status::write(&mut p).await.expect("first status");
    assert_ne!(p.rc.resource_version(), read.resource_version());
    assert!(p.confirmed);
    let rc = p
        .writer()
        .annotate_cluster(|_| {
            vec![(
                redis::names::ANN_OPERATOR_FENCED,
                Some("[\"demo-0\"]".into()),
            )]
        })
        .await
        .expect("fence after the status");
    p.refresh(rc);
    p.model.status.target_primary_timestamp = at(1_010);
    update_status::write(&mut p)
        .await
        .expect("status after the fence");
    let rc = p
        .writer()
        .patch_spec(json!({"instances": 4}))
        .await
        .expect("spec after the status");
    p.refresh(rc);
    p.confirm_current()
        .await
        .expect("the pass's copy is still the stored one");

    let stored = env.clusters().get("demo").await.expect("demo");
    assert_eq!(stored.resource_version(), p.rc.resource_version());
    assert_eq!(
        stored
            .annotations()
            .get(redis::names::ANN_OPERATOR_FENCED)
            .map(String::as_str),
        Some("[\"demo-0\"]")
    );
    assert_eq!(stored.spec.instances, 4);
    let st = stored.status.expect("status");
    assert_eq!(st.current_primary, "demo-1");
    assert_eq!(st.target_primary_timestamp, at(1_010));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_status_decided_on_an_older_copy_is_not_written() {
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use redis::backup::status::{self, StatusError};
    use redis::crd::{BackupPhase, RedisBackup};

    let env = Env::new("rb-stale").await;
    let ctx = context(&env).await;
    let admin = Api::<RedisBackup>::namespaced(env.admin.clone(), &env.ns.name);
    let b: RedisBackup = serde_json::from_value(json!({
        "apiVersion": "redis.io/v1", "kind": "RedisBackup",
        "metadata": {"name": "b1"},
        "spec": {"clusterName": "old", "destination": {"s3": {"bucket": "backups"}}},
    }))
    .expect("backup");
    // The controller's copy, read before anyone wrote a status.
    let stale = admin.create(&PostParams::default(), &b).await.expect("b1");
    // Someone else records the backup as completed.
    admin
        .patch_status(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Completed", "backupPath": "s3://backups/b1.rdb"}}),
            ),
        )
        .await
        .expect("completed");

    // The controller, on its old copy, fails the backup (its cluster is missing): refused.
    let api = Api::<RedisBackup>::namespaced(ctx.client.clone(), &env.ns.name);
    let failed = status::failed(
        &stale.status.clone().unwrap_or_default(),
        "the RedisCluster does not exist",
        jiff::Timestamp::now(),
    );
    let err = status::write(&api, &stale, &failed)
        .await
        .expect_err("a transition decided on an older copy");
    assert!(matches!(err, StatusError::Stale { .. }), "{err}");
    let stored = admin.get("b1").await.expect("b1");
    let st = stored.status.clone().expect("status");
    assert_eq!(st.phase, Some(BackupPhase::Completed), "{st:#?}");
    assert_eq!(st.error, "");

    // On the current copy the same write goes through.
    let written = status::write(&api, &stored, &failed)
        .await
        .expect("current copy")
        .expect("written");
    let now = admin.get("b1").await.expect("b1");
    assert_eq!(now.resource_version(), written.resource_version());
    assert_eq!(now.status.expect("status").phase, Some(BackupPhase::Failed));
}
