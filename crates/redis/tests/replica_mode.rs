//! Replica mode with real Redis: a RedisCluster (`west`) replicating from another one
//! (`east`, its external source) on the process-backed nodes, the operator in this process
//! under its own RBAC (deploy/redis). The source is addressed by its primary's pod IP: the
//! plane has no cluster DNS (on a real cluster, `<east>-leader.<namespace>.svc` is the
//! address that follows east's failovers).

mod operator;

use std::collections::BTreeSet;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use operator::data::{self, Sampler, Writer};
use operator::{Env, T};
use redis::crd::{ClusterPhase, RedisCluster, condition};
use redis::instance::resp::{RespError, Value};
use serde_json::json;

fn cond<'a>(
    rc: &'a RedisCluster,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    rc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// `INFO replication` of the instance at `ip` as `field:value` pairs.
async fn replication(ip: &str, pw: &str) -> std::collections::BTreeMap<String, String> {
    let mut c = data::connect(ip, pw).await.expect("connect");
    let info = c
        .command(&["INFO", "replication"])
        .await
        .expect("INFO")
        .text()
        .expect("text");
    info.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Whether the instance at `ip` refuses a write as a read-only replica.
async fn refuses_writes(ip: &str, pw: &str) -> bool {
    let mut c = data::connect(ip, pw).await.expect("connect");
    matches!(
        c.command(&["SET", "must-not-land", "x"]).await,
        Err(RespError::Server(e)) if e.starts_with("READONLY")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_cluster_follows_its_source_and_promote_makes_it_an_independent_primary_with_the_same_data()
 {
    let env = Env::on_process_nodes("rc-replica", &[]).await;
    let pods = env.api::<Pod>();
    env.create("east", json!({"instances": 2, "storage": {"size": "1Gi"}}))
        .await;
    env.healthy("east", 2).await;
    let east_pw = env.password("east").await;
    let east_ip = env.pod_ip("east-0").await.expect("east-0 ip");
    let mut c = data::connect(&east_ip, &east_pw).await.expect("east");
    let mut keys: BTreeSet<String> = BTreeSet::new();
    for k in 0..200 {
        let key = format!("before-{k}");
        c.command(&["SET", &key, "east"]).await.expect("SET");
        keys.insert(key);
    }
    assert_eq!(
        c.command(&["WAIT", "1", "5000"]).await.expect("WAIT").int(),
        Some(1)
    );
    drop(c);

    // West replicates from east's primary, authenticating with east's own auth Secret.
    let started = Instant::now();
    env.create(
        "west",
        json!({"instances": 2, "storage": {"size": "1Gi"},
            "replicaMode": {"enabled": true, "source": {"clusterName": "east", "host": east_ip,
                "port": 6379, "authSecretName": redis::names::auth_secret("east")}}}),
    )
    .await;
    let writer = Writer::start(env.clusters(), pods.clone(), "east", east_pw.clone(), 1);
    let rc = env
        .wait("west", 2 * T, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Replicating)
                    && s.ready_instances == 2
                    && s.observed_generation == c.metadata.generation.unwrap_or_default()
            })
        })
        .await;
    let replicating = started.elapsed();
    let st = rc.status.clone().expect("status");
    assert_eq!(st.current_primary, "west-0", "the designated leader");
    for p in ["west-0", "west-1"] {
        let i = &st.instances_status[p];
        assert_eq!(
            (i.role.as_str(), i.master_link_status.as_str()),
            ("slave", "up"),
            "{p}"
        );
        let r = env.report("west", p).await.expect("report");
        assert_eq!(
            (r.master_host.as_str(), r.master_port),
            (east_ip.as_str(), 6379),
            "{p}"
        );
    }
    let rm = cond(&rc, condition::REPLICA_MODE).expect("ReplicaMode condition");
    assert_eq!(
        (rm.status.as_str(), rm.reason.as_str()),
        ("True", "ReplicaModeEnabled")
    );
    let pa = cond(&rc, condition::PRIMARY_AVAILABLE).expect("PrimaryAvailable condition");
    assert_eq!(
        (pa.status.as_str(), pa.reason.as_str()),
        ("False", "ReplicaMode")
    );
    let ready = cond(&rc, condition::READY).expect("Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Replicating")
    );
    let notes = env.wait_event("west", "PrimaryNamed").await;
    assert!(notes[0].contains("west-0"), "{notes:?}");
    let leader = env
        .api::<Service>()
        .get(&redis::names::leader_service("west"))
        .await
        .expect("west-leader");
    assert_eq!(
        leader
            .annotations()
            .get(redis::names::ANN_REPLICA_MODE)
            .map(String::as_str),
        Some("true")
    );

    // No instance of west takes a write; east's writes reach every one of them.
    let west_pw = env.password("west").await;
    assert_ne!(west_pw, east_pw);
    let west = data::pod_ips(&pods, "west").await;
    assert_eq!(west.len(), 2);
    for (name, ip) in &west {
        assert!(refuses_writes(ip, &west_pw).await, "{name} took a write");
    }
    let sampler = Sampler::start(pods.clone(), "west", west_pw.clone());
    writer.progress(300, T).await;
    let writes = writer.finish().await;
    keys.extend(writes.acked.iter().cloned());
    for (name, ip) in &west {
        let what = format!("{name} holds every write acknowledged on east");
        testenv::eventually(&what, T, || async {
            data::missing(ip, &west_pw, &keys)
                .await
                .is_empty()
                .then_some(())
        })
        .await
        .expect("replicated");
        assert!(refuses_writes(ip, &west_pw).await, "{name} took a write");
    }
    let east_size = {
        let mut c = data::connect(&east_ip, &east_pw).await.expect("east");
        c.command(&["DBSIZE"]).await.expect("DBSIZE").int()
    };

    // Promote: the designated leader stops following east and takes writes; the operator
    // turns replica mode off; the other instance follows the leader.
    let promoting = Instant::now();
    env.patch("west", json!({"spec": {"replicaMode": {"promote": true}}}))
        .await;
    let rc = env
        .wait("west", 2 * T, |c| {
            let rm = c.spec.replica_mode.as_ref();
            rm.is_some_and(|r| !r.enabled && !r.promote)
                && c.status.as_ref().is_some_and(|s| {
                    s.phase == Some(ClusterPhase::Healthy)
                        && s.ready_instances == 2
                        && s.observed_generation == c.metadata.generation.unwrap_or_default()
                })
        })
        .await;
    let promoted = promoting.elapsed();
    let st = rc.status.clone().expect("status");
    assert_eq!(st.current_primary, "west-0");
    assert_eq!(st.instances_status["west-0"].role, "master");
    let w1 = &st.instances_status["west-1"];
    assert_eq!(
        (w1.role.as_str(), w1.master_link_status.as_str()),
        ("slave", "up")
    );
    let r = env.report("west", "west-1").await.expect("report");
    assert_eq!(
        r.master_host, west["west-0"],
        "west-1 follows the new primary"
    );
    let rm = cond(&rc, condition::REPLICA_MODE).expect("ReplicaMode condition");
    assert_eq!(
        (rm.status.as_str(), rm.reason.as_str()),
        ("False", "ReplicaClusterPromoted")
    );
    let ready = cond(&rc, condition::READY).expect("Ready");
    assert_eq!(ready.status, "True", "{ready:?}");
    let notes = env.wait_event("west", "ReplicaClusterPromoted").await;
    assert!(notes[0].contains("west-0"), "{notes:?}");
    testenv::eventually("west-leader no longer marked replica mode", T, || async {
        let svc = env
            .api::<Service>()
            .get(&redis::names::leader_service("west"))
            .await
            .ok()?;
        (!svc
            .annotations()
            .contains_key(redis::names::ANN_REPLICA_MODE))
        .then_some(())
    })
    .await
    .expect("annotation removed");

    // West takes writes, replicated to its own replica, with the data it had from east.
    let mut c = data::connect(&west["west-0"], &west_pw)
        .await
        .expect("west-0");
    c.command(&["SET", "after-promotion", "west"])
        .await
        .expect("a write on west");
    assert_eq!(
        c.command(&["WAIT", "1", "5000"]).await.expect("WAIT").int(),
        Some(1)
    );
    let west_size = c.command(&["DBSIZE"]).await.expect("DBSIZE").int();
    // East's keys, plus `after-promotion` and the sampler's `probe`.
    assert_eq!(west_size, east_size.map(|n| n + 2), "the same data");
    for (name, ip) in &west {
        assert!(
            data::missing(ip, &west_pw, &keys).await.is_empty(),
            "{name}"
        );
    }
    // East is independent: it lost west-0 as a replica, and its writes no longer reach west.
    testenv::eventually("east has only its own replica", T, || async {
        (replication(&east_ip, &east_pw)
            .await
            .get("connected_slaves")?
            .as_str()
            == "1")
            .then_some(())
    })
    .await
    .expect("east alone");
    let mut c = data::connect(&east_ip, &east_pw).await.expect("east");
    c.command(&["SET", "east-only", "1"]).await.expect("SET");
    assert_eq!(
        c.command(&["WAIT", "1", "5000"]).await.expect("WAIT").int(),
        Some(1)
    );
    let mut w = data::connect(&west["west-0"], &west_pw)
        .await
        .expect("west-0");
    assert_eq!(
        w.command(&["EXISTS", "east-only"]).await.expect("EXISTS"),
        Value::Int(0)
    );
    let samples = sampler.finish().await;
    assert!(samples.rounds > 10, "{samples:?}");
    assert!(
        samples.split.is_empty(),
        "two west instances took writes: {:?}",
        samples.split
    );
    eprintln!(
        "replica mode: west Replicating {replicating:?} after its creation; promoted (Healthy, replica mode off) {promoted:?} after promote: true"
    );
}
