//! Sentinel mode as a client and an administrator see it: the Sentinel pods, what each
//! Sentinel answers, and waiting until the three agree.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use redis::crd::{ClusterPhase, RedisCluster};
use redis::instance::dial::Dial;
use redis::instance::resp::Value;
use serde_json::json;

use super::{Env, T};

/// RedisCluster `demo` in sentinel mode: 3 instances and a connection Secret.
pub fn spec() -> serde_json::Value {
    json!({"instances": 3, "mode": "sentinel", "storage": {"size": "1Gi"},
        "connectionSecret": {"name": "demo-conn"}})
}

/// The Sentinel pods' IPs by name.
pub async fn sentinels(env: &Env) -> BTreeMap<String, String> {
    let lp = ListParams::default().labels("redis.io/cluster=demo,redis.io/workload=sentinel");
    let list = env.api::<Pod>().list(&lp).await.expect("list sentinels");
    list.items
        .into_iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            Some((name, p.status?.pod_ip.filter(|ip| !ip.is_empty())?))
        })
        .collect()
}

/// What one Sentinel says: the master's IP and, from `SENTINEL master`, the replicas and
/// other Sentinels it knows.
pub async fn ask(dial: &Dial, ip: &str) -> Option<(String, i64, i64)> {
    let mut c = dial.conn(ip, 26379, Duration::from_secs(2)).await.ok()?;
    let addr = c
        .command(&["SENTINEL", "get-master-addr-by-name", "demo"])
        .await
        .ok()?;
    let Value::Array(Some(parts)) = addr else {
        return None;
    };
    let master = parts.first()?.text()?;
    let Value::Array(Some(kv)) = c.command(&["SENTINEL", "master", "demo"]).await.ok()? else {
        return None;
    };
    let field = |k: &str| {
        kv.chunks(2)
            .find(|p| p[0].text().as_deref() == Some(k))
            .and_then(|p| p[1].int())
    };
    Some((master, field("num-slaves")?, field("num-other-sentinels")?))
}

/// Waits until the three Sentinels name `primary`'s IP and know 2 replicas and each other.
pub async fn sentinels_agree(env: &Env, primary: &str) {
    sentinels_agree_over(env, primary, &Dial::Tcp).await;
}

/// [`sentinels_agree`], asking them with `dial`.
pub async fn sentinels_agree_over(env: &Env, primary: &str, dial: &Dial) {
    let ip = env.pod_ip(primary).await.expect("primary ip");
    testenv::eventually("the three Sentinels agree", T, || async {
        let s = sentinels(env).await;
        if s.len() != 3 {
            return None;
        }
        for sip in s.values() {
            let (master, replicas, others) = ask(dial, sip).await?;
            if master != ip || replicas < 2 || others != 2 {
                return None;
            }
        }
        Some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits until `demo` is Healthy with 3 Ready instances and 3 Ready Sentinels.
pub async fn healthy_with_sentinels(env: &Env) -> RedisCluster {
    env.wait("demo", T, |c| {
        c.status.as_ref().is_some_and(|s| {
            s.phase == Some(ClusterPhase::Healthy)
                && s.ready_instances == 3
                && s.sentinel_ready_instances == 3
        })
    })
    .await
}
