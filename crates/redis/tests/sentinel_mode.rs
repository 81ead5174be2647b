//! Sentinel mode with real Redis: the data pods and the three Sentinel pods run on the
//! process-backed nodes (this build's instance manager, Debian's redis-server and Sentinel),
//! the operator in this process under its own RBAC (deploy/redis). Sentinel drives the
//! failover; the operator follows it. With `tlsSecret`/`caSecret` every link (clients to
//! Sentinels, Sentinels to Redis and to each other, replication) is TLS.

mod operator;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use nix::sys::signal::Signal;
use operator::data::{self, Sampler, Writer};
use operator::sentinel::{
    ask, healthy_with_sentinels, sentinels, sentinels_agree, sentinels_agree_over, spec,
};
use operator::{Env, T, masters};
use redis::crd::{ClusterPhase, RedisCluster};
use redis::instance::dial::{Ca, Dial};
use redis::instance::resp::Conn;
use serde_json::json;
use testenv::procnode;

/// SIGKILLs demo-0's container whenever it runs until the operator, following the
/// Sentinels, names another primary; counts the kills. Its first restart is immediate (and
/// Sentinel, not having noticed, still names it, so it comes back as primary); later ones
/// back off, so it stays down past Sentinel's down-after-milliseconds and Sentinel fails over.
async fn kill_until_sentinel_moves_the_primary(env: &Env, kills: &AtomicU32) -> RedisCluster {
    testenv::eventually(
        "the operator follows Sentinel away from demo-0",
        T,
        || async {
            let rc = env.clusters().get("demo").await.ok()?;
            let current = rc.status.as_ref().map(|s| s.current_primary.clone());
            if current
                .as_deref()
                .is_some_and(|c| !c.is_empty() && c != "demo-0")
            {
                return Some(rc);
            }
            if procnode::signal(&env.admin, &env.ns.name, "demo-0", "redis", Signal::SIGKILL)
                .await
                .is_ok()
            {
                kills.fetch_add(1, Ordering::SeqCst);
            }
            None
        },
    )
    .await
    .expect("failover")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_cluster_comes_up_healthy_with_three_sentinels_agreeing_on_the_primary() {
    let env = Env::on_process_nodes("rc-sentinel", &[]).await;
    env.create("demo", spec()).await;
    let rc = healthy_with_sentinels(&env).await;
    let st = rc.status.clone().expect("status");
    assert_eq!(st.current_primary, "demo-0");
    assert_eq!(masters(&rc), ["demo-0"]);
    sentinels_agree(&env, "demo-0").await;

    // The Sentinel pods: labelled as upstream, never counted as data.
    let names: Vec<String> = sentinels(&env).await.into_keys().collect();
    assert_eq!(
        names,
        ["demo-sentinel-0", "demo-sentinel-1", "demo-sentinel-2"]
    );
    for n in &names {
        let p = env.api::<Pod>().get(n).await.expect("sentinel pod");
        let l = p.metadata.labels.expect("labels");
        assert_eq!(l["redis.io/role"], "sentinel", "{n}");
        assert_eq!(l["redis.io/workload"], "sentinel", "{n}");
    }
    assert!(!st.instances_status.keys().any(|k| k.contains("sentinel")));
    // The Service clients ask Sentinel through.
    let svc = env
        .api::<Service>()
        .get("demo-sentinel")
        .await
        .expect("svc");
    let spec = svc.spec.expect("spec");
    assert_eq!(spec.ports.expect("ports")[0].port, 26379);
    assert_eq!(
        spec.selector.expect("selector")["redis.io/role"],
        "sentinel"
    );
    // The connection Secret names the Sentinels and the master name.
    let conn = testenv::eventually("the connection secret", T, || async {
        env.api::<Secret>().get("demo-conn").await.ok()?.data
    })
    .await
    .expect("connection secret");
    let text = |k: &str| String::from_utf8(conn[k].0.clone()).expect("utf-8");
    assert_eq!(text("sentinel_port"), "26379");
    assert_eq!(text("master_name"), "demo");
    assert!(
        text("sentinel_host").starts_with("demo-sentinel."),
        "{}",
        text("sentinel_host")
    );
    // The PDBs select data pods only (upstream's counted the Sentinels).
    let pdbs = env
        .api::<PodDisruptionBudget>()
        .list(&ListParams::default())
        .await
        .expect("pdbs");
    assert!(!pdbs.items.is_empty());
    for p in pdbs.items {
        let sel = p
            .spec
            .and_then(|s| s.selector)
            .and_then(|s| s.match_labels)
            .expect("labels");
        assert_eq!(
            sel.get("redis.io/workload").map(String::as_str),
            Some("data")
        );
    }
    // Replication works through what Sentinel monitors.
    let pw = env.password("demo").await;
    let ip = env.pod_ip("demo-0").await.expect("ip");
    let mut c = data::connect(&ip, &pw).await.expect("primary");
    c.command(&["SET", "hello", "sentinel"]).await.expect("SET");
    assert_eq!(
        c.command(&["WAIT", "2", "5000"]).await.expect("WAIT").int(),
        Some(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_fails_over_a_killed_primary_and_the_operator_follows_with_no_acknowledged_write_lost()
 {
    let env = Env::on_process_nodes("rc-sentinel-fo", &[]).await;
    env.create("demo", spec()).await;
    healthy_with_sentinels(&env).await;
    sentinels_agree(&env, "demo-0").await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(200, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());

    // The primary's container (instance manager and redis-server) is SIGKILLed whenever it
    // runs, until Sentinel fails over.
    let started = Instant::now();
    let kills = AtomicU32::new(0);
    let rc = kill_until_sentinel_moves_the_primary(&env, &kills).await;
    let failover = started.elapsed();
    let promoted = rc.status.expect("status").current_primary;
    assert!(
        ["demo-1", "demo-2"].contains(&promoted.as_str()),
        "{promoted}"
    );
    // The three Sentinels name it; -leader selects it; the role labels follow.
    let new_ip = env.pod_ip(&promoted).await.expect("ip");
    for sip in sentinels(&env).await.values() {
        let (master, _, _) = ask(&Dial::Tcp, sip).await.expect("sentinel answers");
        assert_eq!(master, new_ip, "Sentinel {sip}");
    }
    let leader = env
        .api::<Service>()
        .get("demo-leader")
        .await
        .expect("leader");
    assert_eq!(
        leader.spec.and_then(|s| s.selector).expect("selector")["redis.io/instance"],
        promoted
    );
    let promoted_label = promoted.clone();
    testenv::eventually("the role labels follow", T, || {
        let (pods, promoted) = (pods.clone(), promoted_label.clone());
        async move {
            let role = |p: Pod| p.metadata.labels?.get("redis.io/role").cloned();
            let new = role(pods.get(&promoted).await.ok()?)?;
            let old = role(pods.get("demo-0").await.ok()?)?;
            (new == "primary" && old == "replica").then_some(())
        }
    })
    .await
    .expect("labels");
    // Writes go on against the new primary; the old one comes back as its replica.
    writer.progress(200, T).await;
    let rc = env
        .wait("demo", T, move |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.sentinel_ready_instances == 3
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
    let missing = data::missing(&new_ip, &pw, &writes.acked).await;
    tracing::info!(
        ?failover,
        kills = kills.load(Ordering::SeqCst),
        acked = writes.acked.len(),
        errors = writes.errors,
        longest_gap = ?writes.longest_gap,
        rounds = samples.rounds,
        "sentinel failover measured"
    );
    eprintln!(
        "sentinel failover: currentPrimary moved after {failover:?}, longest gap between acknowledged writes {:?}, {} acknowledged, {} kills",
        writes.longest_gap,
        writes.acked.len(),
        kills.load(Ordering::SeqCst)
    );
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standalone_cluster_migrates_to_sentinel_mode_without_a_failover() {
    let env = Env::on_process_nodes("rc-sentinel-mig", &[]).await;
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    env.healthy("demo", 3).await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(100, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());
    env.patch("demo", json!({"spec": {"mode": "sentinel"}}))
        .await;
    // The Sentinels come up seeded with the current primary; nothing moves.
    let rc = env
        .wait("demo", T, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.sentinel_ready_instances == 3
                    && s.observed_generation == c.metadata.generation.unwrap_or_default()
            })
        })
        .await;
    assert_eq!(
        rc.status.as_ref().expect("status").current_primary,
        "demo-0"
    );
    sentinels_agree(&env, "demo-0").await;
    writer.progress(100, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    let rc = env.clusters().get("demo").await.expect("cluster");
    assert_eq!(
        rc.status.as_ref().expect("status").current_primary,
        "demo-0"
    );
    assert_eq!(masters(&rc), ["demo-0"]);
    // The data pods were not restarted by the switch.
    for p in ["demo-0", "demo-1", "demo-2"] {
        let pod = pods.get(p).await.expect("pod");
        let restarts: i32 = pod
            .status
            .and_then(|s| s.container_statuses)
            .into_iter()
            .flatten()
            .map(|c| c.restart_count)
            .sum();
        assert_eq!(restarts, 0, "{p}");
    }
    let ip = env.pod_ip("demo-0").await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    assert!(
        missing.is_empty(),
        "{} acknowledged writes lost",
        missing.len()
    );
    assert!(
        samples.split.is_empty(),
        "two instances took writes: {:?}",
        samples.split
    );
}

/// A certificate signed by `ca` for `names` (Redis and Sentinel check the chain, not the
/// name), usable as a server and as a client (replication, Sentinel's links): `tls.crt` and
/// `tls.key` as Secret data.
fn issue(ca: &redis::admission::pki::Ca, names: &[&str]) -> Vec<(&'static str, String)> {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::from_pem(&ca.key_pem).expect("CA key");
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).expect("issuer");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.subject_alt_names = names
        .iter()
        .map(|n| SanType::DnsName((*n).try_into().expect("dns name")))
        .collect();
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &issuer).expect("sign");
    vec![("tls.crt", cert.pem()), ("tls.key", key.serialize_pem())]
}

fn secret(name: &str, data: &[(&str, String)]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// Whether the TLS server at `ip:port` presents a certificate valid for `name` under `ca_pem`
/// (a strict handshake, name checked).
async fn serves(ip: &str, port: u16, ca_pem: &str, name: &str) -> bool {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA")).expect("CA");
    }
    let config = ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let Ok(tcp) = tokio::net::TcpStream::connect((ip, port)).await else {
        return false;
    };
    let name = ServerName::try_from(name.to_owned()).expect("name");
    let handshake =
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp);
    matches!(
        tokio::time::timeout(Duration::from_secs(2), handshake).await,
        Ok(Ok(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_cluster_with_tls_speaks_only_tls_and_fails_over() {
    let env = Env::on_process_nodes("rc-sentinel-tls", &[]).await;
    let ca = redis::admission::pki::Ca::generate(jiff::Timestamp::now()).expect("CA");
    let secrets = env.api::<Secret>();
    let pp = kube::api::PostParams::default();
    let ca_data = [("ca.crt", ca.cert_pem.clone())];
    secrets
        .create(&pp, &secret("demo-ca", &ca_data))
        .await
        .expect("demo-ca");
    let first = issue(&ca, &["demo-leader", "demo-sentinel"]);
    secrets
        .create(&pp, &secret("demo-tls", &first))
        .await
        .expect("demo-tls");
    let tls = Dial::Tls(Ca::Pem(ca.cert_pem.clone()));
    let mut spec = spec();
    spec["tlsSecret"] = json!({"name": "demo-tls"});
    spec["caSecret"] = json!({"name": "demo-ca"});
    env.create("demo", spec).await;
    let rc = healthy_with_sentinels(&env).await;
    assert_eq!(masters(&rc), ["demo-0"]);
    sentinels_agree_over(&env, "demo-0", &tls).await;

    // The Sentinel port speaks TLS only: a plain RESP PING gets no answer, a TLS one PONG.
    for (name, sip) in sentinels(&env).await {
        let plain = async {
            let mut c = Conn::tcp(&format!("{sip}:26379"), Duration::from_secs(2)).await?;
            c.command(&["PING"]).await
        };
        let refused = plain.await;
        assert!(refused.is_err(), "{name} answered plain TCP: {refused:?}");
        // A loaded machine may be slow to answer; what is shown is that TLS gets PONG.
        let what = format!("{name} answers PONG over TLS");
        testenv::eventually(&what, Duration::from_secs(30), || async {
            let mut c = tls.conn(&sip, 26379, Duration::from_secs(5)).await.ok()?;
            let pong = c.command(&["PING"]).await.ok()?;
            (pong.text().as_deref() == Some("PONG")).then_some(())
        })
        .await
        .expect("PING over TLS");
    }
    // The data pods too; a write reaches both replicas over TLS replication.
    let pw = env.password("demo").await;
    let primary_ip = env.pod_ip("demo-0").await.expect("ip");
    assert!(
        data::connect(&primary_ip, &pw).await.is_err(),
        "plain TCP to Redis"
    );
    let write = |ip: String| {
        let (tls, pw) = (tls.clone(), pw.clone());
        async move {
            let mut c = tls.conn(&ip, 6379, Duration::from_secs(5)).await?;
            c.command(&["AUTH", pw.as_str()]).await?;
            c.command(&["SET", "hello", "tls"]).await?;
            c.command(&["WAIT", "2", "5000"]).await
        }
    };
    assert_eq!(write(primary_ip).await.expect("write").int(), Some(2));

    // SIGKILL the primary's container whenever it runs (see the plain-TCP failover test):
    // Sentinel, over TLS, fails over and the operator follows.
    let started = Instant::now();
    let rc = kill_until_sentinel_moves_the_primary(&env, &AtomicU32::new(0)).await;
    let failover = started.elapsed();
    let promoted = rc.status.expect("status").current_primary;
    assert!(
        ["demo-1", "demo-2"].contains(&promoted.as_str()),
        "{promoted}"
    );
    // One primary, the old one back as its replica over TLS, the Sentinels agreeing on it.
    let rc = env
        .wait("demo", T, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.sentinel_ready_instances == 3
                    && s.instances_status
                        .get("demo-0")
                        .is_some_and(|i| i.role == "slave" && i.master_link_status == "up")
            })
        })
        .await;
    assert_eq!(masters(&rc), std::slice::from_ref(&promoted));
    sentinels_agree_over(&env, &promoted, &tls).await;
    let new_ip = env.pod_ip(&promoted).await.expect("ip");
    assert_eq!(write(new_ip.clone()).await.expect("write").int(), Some(2));
    eprintln!("sentinel failover over TLS: currentPrimary moved after {failover:?}");

    // A renewed certificate (same CA): the Sentinels restart to load it (Sentinel cannot
    // reload it live) and keep agreeing; Redis reloads it in place.
    let renewed = issue(&ca, &["renewed.demo", "demo-leader", "demo-sentinel"]);
    secrets
        .replace("demo-tls", &pp, &secret("demo-tls", &renewed))
        .await
        .expect("renew demo-tls");
    let renewed_at = Instant::now();
    testenv::eventually(
        "every Sentinel and Redis serves the renewed certificate",
        T,
        || async {
            let mut targets: Vec<(String, u16)> = sentinels(&env)
                .await
                .into_values()
                .map(|ip| (ip, 26379))
                .collect();
            targets.push((new_ip.clone(), 6379));
            if targets.len() != 4 {
                return None;
            }
            for (ip, port) in &targets {
                if !serves(ip, *port, &ca.cert_pem, "renewed.demo").await {
                    return None;
                }
            }
            Some(())
        },
    )
    .await
    .expect("renewed certificate served");
    sentinels_agree_over(&env, &promoted, &tls).await;
    let rc = healthy_with_sentinels(&env).await;
    assert_eq!(masters(&rc), std::slice::from_ref(&promoted));
    eprintln!(
        "renewed certificate served everywhere after {:?}",
        renewed_at.elapsed()
    );
}

/// The images of pod `p`'s containers.
fn images(p: &Pod) -> Vec<String> {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.image.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_image_update_in_sentinel_mode_rolls_every_pod_with_no_acknowledged_write_lost_and_one_primary()
 {
    let env = Env::on_process_nodes("rc-sentinel-roll", &[]).await;
    env.create("demo", spec()).await;
    healthy_with_sentinels(&env).await;
    sentinels_agree(&env, "demo-0").await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let (deleted, recorder) = operator::record_deletions(&env, "demo");
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(200, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());

    // Another tag of the same Redis: every data pod and every Sentinel pod is replaced; the
    // primary's pod last, Sentinel failing over to an updated replica.
    let started = Instant::now();
    env.patch("demo", json!({"spec": {"imageName": "redis:7.2.4"}}))
        .await;
    let updated = |p: &Pod| images(p).iter().any(|i| i == "redis:7.2.4");
    // Sentinel fails over to an updated replica, unless the recreated primary answered on its
    // old address before `down-after-milliseconds` (the process-backed nodes can hand a pod its
    // IP back): then Sentinel keeps it. Either way there is one primary; which one is read
    // once the roll is done.
    env.wait("demo", Duration::from_secs(300), |c| {
        c.status.as_ref().is_some_and(|s| {
            s.phase == Some(ClusterPhase::Healthy)
                && s.ready_instances == 3
                && s.sentinel_ready_instances == 3
                && s.observed_generation == c.metadata.generation.unwrap_or_default()
        })
    })
    .await;
    testenv::eventually("every pod replaced with the new image", T, || async {
        let list = pods
            .list(&ListParams::default().labels("redis.io/cluster=demo"))
            .await
            .ok()?;
        let all = list.items.len() == 6
            && list
                .items
                .iter()
                .all(|p| updated(p) && p.metadata.deletion_timestamp.is_none());
        all.then_some(())
    })
    .await
    .expect("rolled");
    let rolled = started.elapsed();
    let primary = healthy_with_sentinels(&env)
        .await
        .status
        .expect("status")
        .current_primary;
    sentinels_agree(&env, &primary).await;
    writer.progress(200, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    recorder.abort();
    let deleted = deleted.lock().expect("deleted").clone();
    // Replicas first, highest ordinal first; the primary's pod last.
    assert_eq!(deleted, ["demo-2", "demo-1", "demo-0"]);
    let rc = healthy_with_sentinels(&env).await;
    assert_eq!(masters(&rc), std::slice::from_ref(&primary));
    let ip = env.pod_ip(&primary).await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    eprintln!(
        "sentinel-mode image update: rolled in {rolled:?}, longest gap between acknowledged writes {:?}, {} acknowledged, {} errors",
        writes.longest_gap,
        writes.acked.len(),
        writes.errors
    );
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hibernation_in_sentinel_mode_stops_every_pod_and_waking_up_keeps_the_data_with_the_sentinels_agreeing()
 {
    let env = Env::on_process_nodes("rc-sentinel-hib", &[]).await;
    env.create("demo", spec()).await;
    healthy_with_sentinels(&env).await;
    sentinels_agree(&env, "demo-0").await;
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
    testenv::eventually("no pod at all, Sentinels included", T, || async {
        let lp = ListParams::default().labels("redis.io/cluster=demo");
        pods.list(&lp).await.ok()?.items.is_empty().then_some(())
    })
    .await
    .expect("every pod stopped");
    let rc = env
        .wait("demo", T, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Hibernating) && s.sentinel_ready_instances == 0
            })
        })
        .await;
    let hib = rc
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Hibernated"))
        .expect("Hibernated condition");
    assert_eq!(hib.status, "True", "{hib:?}");

    let woken = Instant::now();
    env.patch("demo", hibernate("off")).await;
    let rc = healthy_with_sentinels(&env).await;
    let primary = rc.status.clone().expect("status").current_primary;
    assert_eq!(primary, "demo-0", "the recorded primary starts again");
    assert_eq!(masters(&rc), ["demo-0"]);
    sentinels_agree(&env, "demo-0").await;
    eprintln!(
        "sentinel-mode wake-up: Healthy with three Sentinels after {:?}",
        woken.elapsed()
    );
    let keys: std::collections::BTreeSet<String> = (0..100).map(|k| format!("h{k}")).collect();
    for p in ["demo-0", "demo-1", "demo-2"] {
        let ip = env.pod_ip(p).await.expect("ip");
        let missing = data::missing(&ip, &pw, &keys).await;
        assert!(missing.is_empty(), "{p} lost over hibernation: {missing:?}");
    }
    // The woken cluster replicates again.
    let ip = env.pod_ip("demo-0").await.expect("ip");
    let mut c = data::connect(&ip, &pw).await.expect("primary");
    c.command(&["SET", "after-wake", "v"]).await.expect("SET");
    assert_eq!(
        c.command(&["WAIT", "2", "5000"]).await.expect("WAIT").int(),
        Some(2)
    );
}
