//! A RedisCluster's life with real Redis: its data pods run on the process-backed nodes
//! (the instance manager from this build, Debian's redis-server), the operator in this process
//! under its own RBAC (deploy/redis). Each scenario is checked from a client's side.

mod operator;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use nix::sys::signal::Signal;
use operator::data::{self, Sampler, Writer};
use operator::{Env, T, masters, record_deletions};
use redis::crd::ClusterPhase;
use serde_json::json;
use testenv::procnode;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_become_healthy_with_one_primary_and_replication() {
    let env = Env::on_process_nodes("rc-create", &[]).await;
    let (seen, recorder) = record(&env, "demo", "demo-0");
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    let rc = env.healthy("demo", 3).await;
    // Creating until the first Healthy (the first pass, before the generated Secrets are in
    // the operator's cache, made a new cluster Degraded for good).
    let (phases, first) = testenv::eventually("the recorder sees Healthy", T, || async {
        let phases: Vec<_> = seen.lock().expect("seen").iter().map(|s| s.phase).collect();
        let first = phases
            .iter()
            .position(|p| *p == Some(ClusterPhase::Healthy))?;
        Some((phases, first))
    })
    .await
    .expect("healthy recorded");
    recorder.abort();
    assert!(
        phases[..first]
            .iter()
            .all(|p| matches!(p, None | Some(ClusterPhase::Creating))),
        "{phases:?}"
    );
    let st = rc.status.clone().expect("status");
    assert_eq!(st.current_primary, "demo-0");
    assert_eq!(masters(&rc), ["demo-0"]);
    for r in ["demo-1", "demo-2"] {
        let i = &st.instances_status[r];
        assert_eq!(
            (i.role.as_str(), i.master_link_status.as_str()),
            ("slave", "up"),
            "{r}"
        );
        assert_eq!(
            i.replication_id,
            st.instances_status["demo-0"].replication_id
        );
    }
    assert!(
        st.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    // A write acknowledged by both replicas is on both.
    let pw = env.password("demo").await;
    let primary = env.pod_ip("demo-0").await.expect("ip");
    let mut c = data::connect(&primary, &pw).await.expect("primary");
    c.command(&["SET", "hello", "world"]).await.expect("SET");
    let acked = c.command(&["WAIT", "2", "5000"]).await.expect("WAIT");
    assert_eq!(acked.int(), Some(2));
    for r in ["demo-1", "demo-2"] {
        let ip = env.pod_ip(r).await.expect("ip");
        let mut c = data::connect(&ip, &pw).await.expect("replica");
        let v = c.command(&["GET", "hello"]).await.expect("GET");
        assert_eq!(v.text().as_deref(), Some("world"), "{r}");
    }
    // Converged: the operator writes nothing.
    operator::settled(&env.counts, T).await;
    env.counts.reset();
    tokio::time::sleep(Duration::from_secs(15)).await; // the measurement window itself
    assert_eq!(
        env.counts.writes(),
        0,
        "a converged cluster's writes: {:?}",
        env.counts.by_verb()
    );
}

/// What one version of the RedisCluster said about the handoff.
#[derive(Clone, Debug)]
struct Seen {
    phase: Option<ClusterPhase>,
    current: String,
    target: String,
    fenced: bool,
}

/// Records every version of RedisCluster `name` (its primary fields and whether `pod` is
/// fenced) until dropped.
fn record(
    env: &Env,
    name: &str,
    pod: &str,
) -> (Arc<Mutex<Vec<Seen>>>, tokio::task::JoinHandle<()>) {
    let pod = pod.to_owned();
    operator::record_versions(env, name, move |rc| {
        let fenced = rc
            .annotations()
            .get(redis::names::ANN_FENCED_INSTANCES)
            .and_then(|a| serde_json::from_str::<Vec<String>>(a).ok())
            .is_some_and(|f| f.contains(&pod));
        let st = rc.status.unwrap_or_default();
        Seen {
            phase: st.phase,
            current: st.current_primary,
            target: st.target_primary,
            fenced,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashing_primary_is_fenced_and_a_synced_replica_promoted_with_no_acknowledged_write_lost()
 {
    crash_the_primary("rc-failover", Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_crash_once_the_failover_intent_is_written_does_not_stop_the_failover() {
    crash_the_primary("rc-failover-op", Fault::KillThenCrashOperator).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_primary_pod_fails_over_with_no_acknowledged_write_lost() {
    crash_the_primary("rc-failover-del", Fault::DeletePod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_primary_is_failed_over_and_once_thawed_never_takes_a_write() {
    crash_the_primary("rc-failover-stop", Fault::Freeze).await;
}

/// How the primary fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Its container (instance manager and redis-server) is SIGKILLed whenever it runs.
    Kill,
    /// The same, and the operator crashes once the failover's intent is in the status.
    KillThenCrashOperator,
    /// Its pod is deleted (gracefully, as `kubectl delete pod` does).
    DeletePod,
    /// Its container's processes are frozen (SIGSTOP) and thawed once another is primary.
    Freeze,
}

/// Fails demo-0, the primary of a 3-instance cluster, the `fault` way under a writer until the
/// operator fails over; checks what the module says. The sampler runs throughout, so a thawed
/// old primary that accepted a write is a split.
async fn crash_the_primary(prefix: &str, fault: Fault) {
    let operator_crash = fault == Fault::KillThenCrashOperator;
    let mut env = Env::on_process_nodes(prefix, &[]).await;
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    env.healthy("demo", 3).await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let (seen, recorder) = record(&env, "demo", "demo-0");
    // A client writing to the primary; a write counts once WAIT says a replica has it.
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(200, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());

    // The primary's container (instance manager and redis-server) is SIGKILLed whenever it
    // runs: the first restart is immediate, later ones back off, so the primary stays down.
    let started = Instant::now();
    let kills = AtomicU32::new(0);
    let kill = || async {
        if procnode::signal(&env.admin, &env.ns.name, "demo-0", "redis", Signal::SIGKILL)
            .await
            .is_ok()
        {
            kills.fetch_add(1, Ordering::SeqCst);
        }
    };
    if operator_crash {
        testenv::eventually("the failover's intent", T, || async {
            let rc = env.clusters().get("demo").await.ok()?;
            let st = rc.status?;
            if !st.target_primary.is_empty() && st.target_primary != st.current_primary {
                return Some(());
            }
            kill().await;
            None
        })
        .await
        .expect("intent");
        env.kill_operator().await;
        tracing::info!(after = ?started.elapsed(), "operator killed mid-failover");
        env.restart_operator();
    }
    let frozen_uid = match fault {
        Fault::DeletePod => {
            pods.delete("demo-0", &Default::default())
                .await
                .expect("delete the primary's pod");
            None
        }
        Fault::Freeze => {
            let uid = pods.get("demo-0").await.expect("demo-0").uid();
            procnode::freeze(&env.admin, &env.ns.name, "demo-0", "redis")
                .await
                .expect("freeze demo-0");
            uid
        }
        Fault::Kill | Fault::KillThenCrashOperator => None,
    };
    let kill = || async {
        if !matches!(fault, Fault::Kill | Fault::KillThenCrashOperator) {
            return;
        }
        if procnode::signal(&env.admin, &env.ns.name, "demo-0", "redis", Signal::SIGKILL)
            .await
            .is_ok()
        {
            kills.fetch_add(1, Ordering::SeqCst);
        }
    };
    let rc = testenv::eventually("a failover away from demo-0", T, || async {
        let rc = env.clusters().get("demo").await.ok()?;
        let current = rc.status.as_ref().map(|s| s.current_primary.clone());
        if current
            .as_deref()
            .is_some_and(|c| !c.is_empty() && c != "demo-0")
        {
            return Some(rc);
        }
        kill().await;
        None
    })
    .await
    .expect("failover");
    let failover = started.elapsed();
    let promoted = rc.status.expect("status").current_primary;
    assert!(
        ["demo-1", "demo-2"].contains(&promoted.as_str()),
        "{promoted}"
    );
    // A frozen old primary still in its pod is thawed: it must not take a write (the sampler
    // is still asking every instance), and comes back as a replica.
    if let Some(uid) = frozen_uid {
        let same = pods
            .get_opt("demo-0")
            .await
            .ok()
            .flatten()
            .and_then(|p| p.uid());
        if same.as_deref() == Some(uid.as_str()) {
            let _ = procnode::thaw(&env.admin, &env.ns.name, "demo-0", "redis").await;
        }
        tracing::info!(
            thawed_in_place = same.as_deref() == Some(uid.as_str()),
            "thaw"
        );
    }
    // Writes go on against the new primary, then the old one comes back as its replica.
    writer.progress(200, T).await;
    let rc = env
        .wait("demo", T, move |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.instances_status
                        .get("demo-0")
                        .is_some_and(|i| i.role == "slave" && i.master_link_status == "up")
            })
        })
        .await;
    assert_eq!(masters(&rc), std::slice::from_ref(&promoted));
    writer.progress(100, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    recorder.abort();

    let ip = env.pod_ip(&promoted).await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    tracing::info!(
        ?failover,
        kills = kills.load(Ordering::SeqCst),
        acked = writes.acked.len(),
        errors = writes.errors,
        longest_gap = ?writes.longest_gap,
        rounds = samples.rounds,
        "failover measured"
    );
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
    // Fencing first: no version of the cluster names another primary before demo-0 was fenced.
    let seen = seen.lock().expect("seen").clone();
    let moved = seen
        .iter()
        .position(|s| !s.current.is_empty() && s.current != "demo-0")
        .expect("the recorder saw the new primary");
    let fenced = seen
        .iter()
        .position(|s| s.fenced)
        .expect("demo-0 was fenced");
    assert!(
        fenced < moved,
        "fenced at version {fenced}, moved at {moved}: {seen:#?}"
    );
    assert!(
        seen[..fenced].iter().all(|s| s.current == "demo-0"),
        "{seen:#?}"
    );
    // The handoff was recorded as intent before the fence.
    assert!(
        seen[..=fenced]
            .iter()
            .any(|s| s.target == redis::cluster::handoff::PENDING),
        "{seen:#?}"
    );
    // And the operator's fence is gone once demo-0 is back.
    assert!(!seen.last().expect("seen").fenced, "{seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_update_then_scaling_3_5_2_lose_no_acknowledged_write_and_never_remove_the_primary()
 {
    let env = Env::on_process_nodes("rc-rolling", &[]).await;
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    env.healthy("demo", 3).await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let hash = |p: &Pod| p.annotations().get(redis::names::ANN_SPEC_HASH).cloned();
    let before = hash(&pods.get("demo-0").await.expect("demo-0"));
    let (deleted, recorder) = record_deletions(&env, "demo");
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(200, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());

    // A change of the pod template: every pod is replaced, the primary through a switchover.
    let started = Instant::now();
    env.patch(
        "demo",
        json!({"spec": {"resources": {"requests": {"cpu": "11m"}}}}),
    )
    .await;
    let rc = env
        .wait("demo", Duration::from_secs(240), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.observed_generation == c.metadata.generation.unwrap_or_default()
                    && s.current_primary != "demo-0"
            })
        })
        .await;
    testenv::eventually("every pod replaced", T, || async {
        let list = data::pod_ips(&pods, "demo").await;
        let mut all = list.len() == 3;
        for name in list.keys() {
            let p = pods.get(name).await.ok()?;
            all &= hash(&p) != before && p.metadata.deletion_timestamp.is_none();
        }
        all.then_some(())
    })
    .await
    .expect("rolled");
    let rolled = started.elapsed();
    let rolled_to = rc.status.clone().expect("status").current_primary;
    writer.progress(200, T).await;

    // Scale 3 -> 5 -> 2 under the same writer: the new replicas synchronise; the scale-down
    // removes the highest ordinals one at a time and never the primary (it hands over first).
    env.patch("demo", json!({"spec": {"instances": 5}})).await;
    let rc5 = env.healthy("demo", 5).await;
    let st5 = rc5.status.expect("status");
    for r in ["demo-3", "demo-4"] {
        let i = &st5.instances_status[r];
        assert_eq!(
            (i.role.as_str(), i.master_link_status.as_str()),
            ("slave", "up"),
            "{r}"
        );
    }
    writer.progress(200, T).await;
    let rolled_deletions = deleted.lock().expect("deleted").len();
    env.patch("demo", json!({"spec": {"instances": 2}})).await;
    let rc = env
        .wait("demo", Duration::from_secs(180), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 2
                    && s.instances_status.len() == 2
                    && s.observed_generation == c.metadata.generation.unwrap_or_default()
            })
        })
        .await;
    testenv::eventually("two data pods", T, || async {
        (data::pod_ips(&pods, "demo").await.len() == 2).then_some(())
    })
    .await
    .expect("scaled down");
    writer.progress(200, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    recorder.abort();
    let deleted = deleted.lock().expect("deleted").clone();
    tracing::info!(
        ?rolled,
        ?deleted,
        %rolled_to,
        acked = writes.acked.len(),
        errors = writes.errors,
        longest_gap = ?writes.longest_gap,
        rounds = samples.rounds,
        "rolling update and scaling measured"
    );
    // Replicas first, highest ordinal first; the old primary last, after the switchover.
    assert_eq!(deleted[..rolled_deletions], ["demo-2", "demo-1", "demo-0"]);
    // Scale-down: highest ordinals first; the primary only after handing over.
    assert_eq!(deleted[rolled_deletions..], ["demo-4", "demo-3", "demo-2"]);
    let promoted = rc.status.expect("status").current_primary;
    assert!(
        ["demo-0", "demo-1"].contains(&promoted.as_str()),
        "{promoted}"
    );
    let ip = env.pod_ip(&promoted).await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hibernation_stops_every_pod_and_waking_up_keeps_the_data_and_the_primary() {
    let env = Env::on_process_nodes("rc-hibernate", &[]).await;
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    env.healthy("demo", 3).await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let ip = env.pod_ip("demo-0").await.expect("ip");
    let mut c = data::connect(&ip, &pw).await.expect("primary");
    for k in 0..100 {
        c.command(&["SET", &format!("h{k}"), "v"])
            .await
            .expect("SET");
    }
    assert_eq!(
        c.command(&["WAIT", "2", "5000"]).await.expect("WAIT").int(),
        Some(2)
    );
    drop(c);

    let hibernate =
        |v: &str| json!({"metadata": {"annotations": {redis::names::ANN_HIBERNATION: v}}});
    env.patch("demo", hibernate("on")).await;
    env.wait("demo", T, |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(ClusterPhase::Hibernating))
    })
    .await;
    testenv::eventually("no data pod", T, || async {
        let lp = kube::api::ListParams::default().labels("redis.io/cluster=demo");
        pods.list(&lp).await.ok()?.items.is_empty().then_some(())
    })
    .await
    .expect("every pod stopped");
    let pvcs = env.api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>();
    for o in 0..3 {
        assert!(
            pvcs.get_opt(&format!("demo-data-{o}"))
                .await
                .expect("get")
                .is_some(),
            "demo-data-{o} is kept"
        );
    }

    env.patch("demo", hibernate("off")).await;
    let rc = env.healthy("demo", 3).await;
    assert_eq!(rc.status.expect("status").current_primary, "demo-0");
    let ip = env.pod_ip("demo-0").await.expect("ip");
    let keys: std::collections::BTreeSet<String> = (0..100).map(|k| format!("h{k}")).collect();
    let missing = data::missing(&ip, &pw, &keys).await;
    assert!(missing.is_empty(), "lost over hibernation: {missing:?}");
    // The replicas follow it again and hold the data too.
    for r in ["demo-1", "demo-2"] {
        let ip = env.pod_ip(r).await.expect("ip");
        assert!(data::missing(&ip, &pw, &keys).await.is_empty(), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fenced_instance_stays_down_across_a_restart_and_comes_back_in_sync_when_unfenced() {
    use redis::instance_api::Boot;
    let env = Env::on_process_nodes("rc-fence", &[]).await;
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    env.healthy("demo", 3).await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let fence = |v: serde_json::Value| json!({"metadata": {"annotations": {redis::names::ANN_FENCED_INSTANCES: v}}});
    env.patch("demo", fence(json!("[\"demo-1\"]"))).await;
    env.wait("demo", T, |c| {
        c.status.as_ref().is_some_and(|s| {
            s.instances_status
                .get("demo-1")
                .is_some_and(|i| !i.connected && !i.ready)
        })
    })
    .await;
    // The primary takes writes meanwhile.
    let ip = env.pod_ip("demo-0").await.expect("ip");
    let mut c = data::connect(&ip, &pw).await.expect("primary");
    c.command(&["SET", "while-fenced", "v"]).await.expect("SET");
    drop(c);

    // Restarted while fenced: the boot guard keeps redis-server down.
    let old_uid = pods.get("demo-1").await.expect("demo-1").uid();
    pods.delete("demo-1", &Default::default())
        .await
        .expect("delete demo-1");
    let report = testenv::eventually("the new demo-1 reports it waits, fenced", T, || async {
        let p = pods.get_opt("demo-1").await.ok()??;
        if p.uid() == old_uid {
            return None;
        }
        let r = env.report("demo", "demo-1").await?;
        (r.fenced && matches!(r.boot, Boot::Waiting { .. })).then_some(r)
    })
    .await
    .expect("fenced at boot");
    assert_eq!(report.role, "", "redis-server does not run: {report:?}");
    let ip1 = env.pod_ip("demo-1").await.expect("ip");
    assert!(
        data::connect(&ip1, &pw).await.is_err(),
        "port 6379 is closed"
    );
    let p = pods.get("demo-1").await.expect("demo-1");
    let restarts: i32 = p
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| c.restart_count)
        .sum();
    assert_eq!(restarts, 0, "held down, not crash-looping");

    // Unfenced: it starts as a replica and catches up.
    env.patch("demo", fence(serde_json::Value::Null)).await;
    let rc = env.healthy("demo", 3).await;
    let i = &rc.status.expect("status").instances_status["demo-1"];
    assert_eq!(
        (i.role.as_str(), i.master_link_status.as_str()),
        ("slave", "up")
    );
    let keys = ["while-fenced".to_owned()].into_iter().collect();
    assert!(data::missing(&ip1, &pw, &keys).await.is_empty());
}

/// `primaryUpdateStrategy: supervised`: a template change replaces the replicas, then waits
/// with phase `WaitingForUser` and the primary untouched until `redis.io/approve-primary-update`
/// is set; then the primary is switched over (no acknowledged write lost) and replaced, and
/// the operator removes the approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_supervised_rolling_update_waits_for_the_approval_before_the_primary() {
    use redis::names::ANN_APPROVE_PRIMARY_UPDATE;
    let env = Env::on_process_nodes("rc-supervised", &[]).await;
    env.create(
        "demo",
        json!({"instances": 3, "storage": {"size": "1Gi"}, "primaryUpdateStrategy": "supervised"}),
    )
    .await;
    env.healthy("demo", 3).await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let hash = |p: &Pod| p.annotations().get(redis::names::ANN_SPEC_HASH).cloned();
    let before = hash(&pods.get("demo-0").await.expect("demo-0"));
    let primary_uid = pods.get("demo-0").await.expect("demo-0").uid();
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(100, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());

    env.patch(
        "demo",
        json!({"spec": {"resources": {"requests": {"cpu": "12m"}}}}),
    )
    .await;
    env.wait("demo", Duration::from_secs(240), |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(ClusterPhase::WaitingForUser))
    })
    .await;
    // The replicas are replaced; the primary is not, and stays primary.
    testenv::eventually("the replicas replaced", T, || async {
        let mut done = true;
        for name in ["demo-1", "demo-2"] {
            let p = pods.get(name).await.ok()?;
            done &= hash(&p) != before && p.metadata.deletion_timestamp.is_none();
        }
        done.then_some(())
    })
    .await
    .expect("replicas");
    let p0 = pods.get("demo-0").await.expect("demo-0");
    assert_eq!((hash(&p0), p0.uid()), (before.clone(), primary_uid));
    let rc = env.clusters().get("demo").await.expect("cluster");
    assert_eq!(rc.status.expect("status").current_primary, "demo-0");
    writer.progress(100, T).await;

    env.patch(
        "demo",
        json!({"metadata": {"annotations": {ANN_APPROVE_PRIMARY_UPDATE: "true"}}}),
    )
    .await;
    let rc = env
        .wait("demo", Duration::from_secs(240), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.current_primary != "demo-0"
            }) && !c.annotations().contains_key(ANN_APPROVE_PRIMARY_UPDATE)
        })
        .await;
    testenv::eventually("demo-0 replaced", T, || async {
        let p = pods.get("demo-0").await.ok()?;
        (hash(&p) != before && p.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await
    .expect("demo-0 replaced");
    writer.progress(100, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    let primary = rc.status.expect("status").current_primary;
    let ip = env.pod_ip(&primary).await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
}
