//! A RedisCluster's life with real Redis: its data pods run on the process-backed nodes
//! (the instance manager from this build, Debian's redis-server), the operator in this process
//! under its own RBAC (deploy/redis). Each scenario is checked from a client's side.

mod operator;

use std::time::Duration;

use operator::data;
use operator::{Env, T};
use redis::crd::RedisCluster;
use serde_json::json;

fn masters(rc: &RedisCluster) -> Vec<String> {
    rc.status
        .iter()
        .flat_map(|s| s.instances_status.iter())
        .filter(|(_, i)| i.role == "master")
        .map(|(n, _)| n.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_become_healthy_with_one_primary_and_replication() {
    let env = Env::on_process_nodes("rc-create", &[]).await;
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    let rc = env.healthy("demo", 3).await;
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
