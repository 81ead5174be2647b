//! A RedisCluster's life with real Redis: its data pods run on the process-backed nodes
//! (the instance manager from this build, Debian's redis-server), the operator in this process
//! under its own RBAC (deploy/redis). Each scenario is checked from a client's side.

mod operator;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
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

/// The operator crashes (its task dropped) right after each step of the failover, one crash
/// per step, deterministically ([`crash_the_operator_after_each_step`]): each time, the new
/// operator resumes from the status, the fences, the Lease and `-leader`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_crash_at_each_failover_step_still_ends_with_one_primary_and_nothing_lost() {
    crash_the_primary("rc-failover-ops", Fault::KillThenCrashOperatorAtEachStep).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_primary_pod_fails_over_with_no_acknowledged_write_lost() {
    crash_the_primary("rc-failover-del", Fault::DeletePod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_primary_is_failed_over_and_once_thawed_never_takes_a_write() {
    crash_the_primary("rc-failover-stop", Fault::Freeze).await;
}

/// `kubectl redis promote` under a writer: the planned switchover (Redis `FAILOVER TO`) loses
/// no acknowledged write and never lets two instances accept one; the old primary follows
/// the new one. Then the command `kubectl redis cli` execs, run in the new primary's
/// container, reaches its redis-server (which listens on the pod IP only, not on 127.0.0.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_redis_promote_switches_over_under_a_writer_and_cli_reaches_the_primary() {
    let env = Env::on_process_nodes("rc-promote", &[]).await;
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    env.healthy("demo", 3).await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(200, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());

    let kubeconfig = testenv::kubeconfig_path().display().to_string();
    let argv: Vec<String> = ["--kubeconfig", &kubeconfig, "-n", &env.ns.name]
        .into_iter()
        .chain(["promote", "demo", "demo-2"])
        .map(str::to_owned)
        .collect();
    let mut out = Vec::new();
    redis::plugin::main_with(argv, &mut out)
        .await
        .expect("kubectl redis promote");
    let started = Instant::now();
    let rc = env
        .wait("demo", T, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.current_primary == "demo-2"
                    && s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.instances_status
                        .get("demo-0")
                        .is_some_and(|i| i.role == "slave" && i.master_link_status == "up")
            })
        })
        .await;
    let switched = started.elapsed();
    assert_eq!(masters(&rc), ["demo-2"]);
    env.wait_event("demo", "SwitchoverCompleted").await;
    writer.progress(200, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    let ip = env.pod_ip("demo-2").await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    tracing::info!(
        ?switched,
        acked = writes.acked.len(),
        errors = writes.errors,
        longest_gap = ?writes.longest_gap,
        rounds = samples.rounds,
        "switchover measured"
    );
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);

    // `kubectl redis cli demo ROLE`: what it runs inside the primary's container.
    let argv =
        redis::plugin::decide::cli_argv(&env.ns.name, "demo-2", "demo-auth", &["ROLE".into()]);
    let dashdash = argv.iter().position(|a| a == "--").expect("--");
    let cmd: Vec<&str> = argv[dashdash + 1..].iter().map(String::as_str).collect();
    let (code, out) = procnode::exec(&env.admin, &env.ns.name, "demo-2", "redis", &cmd)
        .await
        .expect("exec");
    assert_eq!(
        (code, out.lines().next()),
        (0, Some("master")),
        "redis-cli in demo-2: {out}"
    );
}

/// A drain: the node running the primary is cordoned (`spec.unschedulable`), so the operator
/// switches over (Redis `FAILOVER TO`) to a replica on another node before anything evicts
/// the primary; under a writer no acknowledged write is lost and never are two instances
/// writable. The node is uncordoned even when the test fails (the process-backed nodes are
/// shared by every test on the plane).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_on_a_cordoned_node_is_switched_over_to_a_replica_on_another_node() {
    let env = Env::on_process_nodes("rc-cordon", &[]).await;
    env.create("demo", json!({"instances": 3, "storage": {"size": "1Gi"}}))
        .await;
    let rc = env.healthy("demo", 3).await;
    let old = rc.status.expect("status").current_primary;
    let pods = env.api::<Pod>();
    let node_of = |pod: String| {
        let pods = pods.clone();
        async move {
            let p = pods.get(&pod).await.expect("pod");
            p.spec.and_then(|s| s.node_name).expect("scheduled")
        }
    };
    let node = node_of(old.clone()).await;
    let pw = env.password("demo").await;
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(200, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());

    let cordon = Cordon::new(env.admin.clone(), &node).await;
    let started = Instant::now();
    let old_ = old.clone();
    let rc = env
        .wait("demo", T, move |c| {
            c.status.as_ref().is_some_and(|s| {
                !s.current_primary.is_empty()
                    && s.current_primary != old_
                    && s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && s.instances_status
                        .get(&old_)
                        .is_some_and(|i| i.role == "slave" && i.master_link_status == "up")
            })
        })
        .await;
    let switched = started.elapsed();
    let new = rc.status.clone().expect("status").current_primary;
    assert_eq!(masters(&rc), std::slice::from_ref(&new));
    assert_ne!(
        node_of(new.clone()).await,
        node,
        "{new} is on the cordoned node"
    );
    env.wait_event("demo", "SwitchoverCompleted").await;
    writer.progress(200, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    cordon.lift().await;

    let ip = env.pod_ip(&new).await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    tracing::info!(
        ?switched,
        %old,
        %new,
        acked = writes.acked.len(),
        errors = writes.errors,
        longest_gap = ?writes.longest_gap,
        rounds = samples.rounds,
        "drain switchover measured"
    );
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
}

/// A cordoned node (`spec.unschedulable = true`), uncordoned by [`Cordon::lift`] or, should
/// the test fail first, when dropped.
struct Cordon {
    nodes: kube::Api<Node>,
    node: Option<String>,
}

impl Cordon {
    async fn new(admin: kube::Client, node: &str) -> Cordon {
        let nodes = kube::Api::<Node>::all(admin);
        let c = Cordon {
            nodes,
            node: Some(node.to_owned()),
        };
        c.set(node, true).await.expect("cordon");
        c
    }

    async fn set(&self, node: &str, unschedulable: bool) -> kube::Result<Node> {
        let patch = json!({"spec": {"unschedulable": unschedulable}});
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
    }

    async fn lift(mut self) {
        if let Some(node) = self.node.take() {
            self.set(&node, false).await.expect("uncordon");
        }
    }
}

impl Drop for Cordon {
    fn drop(&mut self) {
        let Some(node) = self.node.take() else {
            return;
        };
        // A failing test unwinds out of the runtime's thread: uncordon from there.
        let done = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(self.set(&node, false))
        });
        if let Err(e) = done {
            eprintln!("could not uncordon {node}: {e}");
        }
    }
}

/// A replica that never synchronised is never promoted: a 1-instance cluster with data is
/// scaled to 2 while its primary is frozen, so demo-1 boots as a replica that cannot reach it
/// (its replication ID is its own). The frozen primary is failing, yet nothing is promoted;
/// the status says why, naming demo-1's replication ID. Thawed, demo-0 stays the primary with
/// every key, and demo-1 synchronises from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_never_synchronised_is_never_promoted() {
    let env = Env::on_process_nodes("rc-unsynced", &[]).await;
    env.create("demo", json!({"instances": 1, "storage": {"size": "1Gi"}}))
        .await;
    env.healthy("demo", 1).await;
    let pw = env.password("demo").await;
    let primary = env.pod_ip("demo-0").await.expect("ip");
    let mut c = data::connect(&primary, &pw).await.expect("primary");
    let mut keys = std::collections::BTreeSet::new();
    for i in 0..100 {
        let k = format!("k{i}");
        c.command(&["SET", &k, "v"]).await.expect("SET");
        keys.insert(k);
    }
    drop(c);
    let (seen, recorder) = operator::record_versions(&env, "demo", |rc| {
        let st = rc.status.unwrap_or_default();
        let demo1 = st.instances_status.get("demo-1").map(|i| i.role.clone());
        (st.current_primary, st.target_primary, demo1)
    });

    procnode::freeze(&env.admin, &env.ns.name, "demo-0", "redis")
        .await
        .expect("freeze demo-0");
    env.patch("demo", json!({"spec": {"instances": 2}})).await;
    // demo-1 runs as a replica of the frozen demo-0 that never synchronised (its own
    // replication ID), and the operator sees demo-0 failing with nobody to promote.
    let rc = env
        .wait("demo", T, |c| {
            c.status.as_ref().is_some_and(|s| {
                let (Some(p), Some(r)) = (
                    s.instances_status.get("demo-0"),
                    s.instances_status.get("demo-1"),
                ) else {
                    return false;
                };
                r.role == "slave"
                    && r.master_link_status != "up"
                    && !r.replication_id.is_empty()
                    && r.replication_id != p.replication_id
                    && s.phase_reason.contains("none may be promoted")
                    && s.phase_reason.contains(&r.replication_id)
            })
        })
        .await;
    let st = rc.status.expect("status");
    tracing::info!(reason = %st.phase_reason, "no failover");
    assert_eq!(st.current_primary, "demo-0");
    // It stays so: a failover would have happened within this window, so the primary is
    // read at every look across it (a window with nothing to wait for, not a synchronisation).
    let window = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < window {
        let rc = env.clusters().get("demo").await.expect("demo");
        let primary = rc.status.map(|s| s.current_primary).unwrap_or_default();
        assert_eq!(
            primary, "demo-0",
            "a never-synchronised replica was promoted"
        );
        tokio::time::sleep(Duration::from_millis(500)).await; // the period between looks
    }
    let rc = env.clusters().get("demo").await.expect("demo");
    let st = rc.status.expect("status");
    assert_eq!(st.current_primary, "demo-0");
    assert!(
        st.target_primary.is_empty() || st.target_primary == "demo-0",
        "{st:?}"
    );

    procnode::thaw(&env.admin, &env.ns.name, "demo-0", "redis")
        .await
        .expect("thaw demo-0");
    let rc = env
        .wait("demo", T, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 2
                    && s.instances_status
                        .get("demo-1")
                        .is_some_and(|i| i.role == "slave" && i.master_link_status == "up")
            })
        })
        .await;
    recorder.abort();
    assert_eq!(masters(&rc), ["demo-0"]);
    let seen = seen.lock().expect("seen").clone();
    assert!(
        seen.iter()
            .all(|(current, target, demo1)| current != "demo-1"
                && target != "demo-1"
                && demo1.as_deref() != Some("master")),
        "demo-1 was never a primary or a target: {seen:?}"
    );
    for pod in ["demo-0", "demo-1"] {
        let ip = env.pod_ip(pod).await.expect("ip");
        let missing = data::missing(&ip, &pw, &keys).await;
        assert!(missing.is_empty(), "{pod} misses {missing:?}");
    }
}

/// How the primary fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Its container (instance manager and redis-server) is SIGKILLed whenever it runs.
    Kill,
    /// The same, and the operator crashes once the failover's intent is in the status.
    KillThenCrashOperator,
    /// The same, and the operator crashes at the first sight of each step of the failover.
    KillThenCrashOperatorAtEachStep,
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
        Fault::KillThenCrashOperatorAtEachStep => {
            let crashed = crash_the_operator_after_each_step(&mut env).await;
            tracing::info!(?crashed, after = ?started.elapsed(), "operator crashed after");
            let missed: Vec<&&str> = CRASH_AFTER
                .iter()
                .filter(|s| !OPTIONAL.contains(s) && !crashed.contains(s))
                .collect();
            assert!(
                missed.is_empty(),
                "never crashed after {missed:?}: {crashed:?}"
            );
            // In the order the failover takes them.
            let order: Vec<usize> = crashed
                .iter()
                .map(|s| CRASH_AFTER.iter().position(|c| c == s).expect("known"))
                .collect();
            assert!(order.is_sorted(), "{crashed:?}");
            None
        }
        Fault::Kill | Fault::KillThenCrashOperator => None,
    };
    let kill = || async {
        if !matches!(
            fault,
            Fault::Kill | Fault::KillThenCrashOperator | Fault::KillThenCrashOperatorAtEachStep
        ) {
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

/// The handoff steps that change something (`redis::cluster::handoff::Step::kind`), in the
/// order a failover takes them: the operator is crashed right after the first of each.
const CRASH_AFTER: &[&str] = &[
    "MarkFailing",
    "StartFailover",
    "Fence",
    "StopPod",
    "Elect",
    "MoveLease",
    "Promote",
    "PointLeader",
    "Publish",
    "Release",
];

/// The [`CRASH_AFTER`] steps a failover away from a killed primary may skip: detection's
/// `MarkFailing` (a restarted operator may find it already recorded) and `StopPod` (needed only
/// when the old primary cannot be confirmed stopped otherwise). Every other one is required.
const OPTIONAL: &[&str] = &["MarkFailing", "StopPod"];

/// Keeps demo-0's container down until another pod is the primary, and crashes the operator
/// right after the first execution of each [`CRASH_AFTER`] step: the operator's handoff hook
/// stops the pass there (nothing after the step is done), the test drops the operator's task
/// as SIGKILL would and starts a new one, which resumes from the status, the fences, the Lease
/// and `-leader`. Returns the steps crashed after, in order; ends after `Release`.
async fn crash_the_operator_after_each_step(env: &mut Env) -> Vec<&'static str> {
    let crashed: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let hook = {
        let (crashed, ns) = (crashed.clone(), env.ns.name.clone());
        redis::context::HandoffHook(Arc::new(move |namespace: &str, kind: &'static str| {
            if namespace != ns || !CRASH_AFTER.contains(&kind) {
                return false;
            }
            let mut done = crashed.lock().expect("crashed");
            if done.contains(&kind) {
                return false;
            }
            done.push(kind);
            let _ = tx.send(kind);
            true
        }))
    };
    env.kill_operator().await;
    env.restart_operator_with(Some(hook.clone()));
    let deadline = Instant::now() + 2 * T;
    let mut published = false;
    loop {
        tokio::select! {
            step = rx.recv() => {
                let step = step.expect("the hook lives as long as the test");
                env.kill_operator().await;
                tracing::info!(step, "operator crashed right after a handoff step");
                env.restart_operator_with(Some(hook.clone()));
                published |= step == "Publish";
                if step == "Release" {
                    break;
                }
            }
            // How often the old primary's container is killed while it is still the primary.
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                if !published {
                    let _ = procnode::signal(&env.admin, &env.ns.name, "demo-0", "redis", Signal::SIGKILL)
                        .await;
                }
            }
        }
        if Instant::now() >= deadline {
            let summary = env.summary("demo").await;
            let done = crashed.lock().expect("crashed").clone();
            panic!("the failover did not finish; crashed after {done:?}: {summary}");
        }
    }
    crashed.lock().expect("crashed").clone()
}

/// The image the rolling-update tests move to (the default is `redis:7.2`).
const ROLLED_IMAGE: &str = "redis:7.2.4";

/// The image of a data pod's `redis` container.
fn redis_image(p: &Pod) -> Option<String> {
    p.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "redis")?
        .image
        .clone()
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

    // A new image: every pod is replaced, the primary through a switchover. (The process
    // nodes run Debian's redis-server for every `redis:<tag>`; what a user sees is the pods'
    // image.)
    let started = Instant::now();
    env.patch("demo", json!({"spec": {"imageName": ROLLED_IMAGE}}))
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
    for name in data::pod_ips(&pods, "demo").await.keys() {
        let p = pods.get(name).await.expect("pod");
        assert_eq!(redis_image(&p).as_deref(), Some(ROLLED_IMAGE), "{name}");
    }
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

/// One fenced replica stays down across a restart of its pod and comes back in sync when
/// unfenced; then `["*"]` fences every instance: every redis-server down, the pods Running,
/// no failover; unfenced, Healthy with the same primary.
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

    // Every instance fenced (`["*"]`): every redis-server stops, the pods stay Running
    // without a restart, and no failover starts (a fenced primary is never failed over);
    // unfenced, the same primary serves again, with its data.
    let restarts = |p: &Pod| -> i32 {
        p.status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .map(|c| c.restart_count)
            .sum()
    };
    let names = ["demo-0", "demo-1", "demo-2"];
    let mut before = std::collections::BTreeMap::new();
    for n in names {
        let p = pods.get(n).await.expect("pod");
        before.insert(n, (p.uid(), restarts(&p)));
    }
    let (versions, recorder) = operator::record_versions(&env, "demo", |rc| {
        let st = rc.status.unwrap_or_default();
        (st.current_primary, st.target_primary)
    });
    let fenced_at = Instant::now();
    env.patch("demo", fence(json!("[\"*\"]"))).await;
    testenv::eventually(
        "every instance fenced with redis-server down",
        T,
        || async {
            for n in names {
                let r = env.report("demo", n).await?;
                if !(r.fenced && r.role.is_empty() && matches!(r.boot, Boot::Waiting { .. })) {
                    return None;
                }
            }
            Some(())
        },
    )
    .await
    .expect("all fenced");
    let all_down = fenced_at.elapsed();
    for n in names {
        let ip = env.pod_ip(n).await.expect("ip");
        assert!(
            data::connect(&ip, &pw).await.is_err(),
            "{n}: port 6379 closed"
        );
    }
    // Longer than the failure detection (3 bad polls over 4 s) and the poll interval: read
    // the cluster and the pods every 0.5 s across the window.
    let window = Instant::now() + Duration::from_secs(15);
    while Instant::now() < window {
        let st = env
            .clusters()
            .get("demo")
            .await
            .expect("cluster")
            .status
            .unwrap_or_default();
        assert_eq!(st.current_primary, "demo-0", "no failover: {st:?}");
        assert!(
            ["", "demo-0"].contains(&st.target_primary.as_str()),
            "no handoff: {st:?}"
        );
        for n in names {
            let p = pods.get(n).await.expect("pod");
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            assert_eq!(phase.as_deref(), Some("Running"), "{n} stays Running");
            assert_eq!((p.uid(), restarts(&p)), before[n], "{n}: not restarted");
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // the sampling pace
    }
    let unfenced_at = Instant::now();
    env.patch("demo", fence(serde_json::Value::Null)).await;
    let rc = env.healthy("demo", 3).await;
    let healthy_again = unfenced_at.elapsed();
    recorder.abort();
    assert_eq!(rc.status.expect("status").current_primary, "demo-0");
    let seen = versions.lock().expect("versions").clone();
    assert!(
        seen.iter()
            .all(|(c, t)| c == "demo-0" && ["", "demo-0"].contains(&t.as_str())),
        "the primary never moved: {seen:?}"
    );
    let ip0 = env.pod_ip("demo-0").await.expect("ip");
    assert!(data::missing(&ip0, &pw, &keys).await.is_empty());
    eprintln!(
        "fence *: every redis-server down {all_down:?} after the annotation; Healthy {healthy_again:?} after it went"
    );
}

/// The image of the supervised rolling update.
const SUPERVISED_IMAGE: &str = "redis:7.2.5";

/// `primaryUpdateStrategy: supervised`: a new image replaces the replicas, then waits
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

    env.patch("demo", json!({"spec": {"imageName": SUPERVISED_IMAGE}}))
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
    assert_eq!(
        redis_image(&p0).as_deref(),
        Some("redis:7.2"),
        "the primary keeps its image"
    );
    for name in ["demo-1", "demo-2"] {
        let p = pods.get(name).await.expect("replica");
        assert_eq!(redis_image(&p).as_deref(), Some(SUPERVISED_IMAGE), "{name}");
    }
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
    for name in ["demo-0", "demo-1", "demo-2"] {
        let p = pods.get(name).await.expect("pod");
        assert_eq!(redis_image(&p).as_deref(), Some(SUPERVISED_IMAGE), "{name}");
    }
    writer.progress(100, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    let primary = rc.status.expect("status").current_primary;
    let ip = env.pod_ip(&primary).await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
}

/// A StorageClass that allows volume expansion and a pre-bound 1Gi PersistentVolume for each
/// PVC `<cluster>-data-<o>` (kwok provisions only its own class; the process nodes keep a
/// volume's data by the PV's name), removed by [`ExpandableVolumes::remove`].
struct ExpandableVolumes {
    class: String,
    pvs: Vec<String>,
}

impl ExpandableVolumes {
    async fn create(env: &Env, cluster: &str, n: i32) -> Self {
        use k8s_openapi::api::core::v1::PersistentVolume;
        use k8s_openapi::api::storage::v1::StorageClass;
        use kube::api::{Api, PostParams};
        let class = format!("expandable-{}", env.ns.name);
        let sc: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": class},
            "provisioner": "kwok.x-k8s.io/volume",
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": true,
        }))
        .expect("class");
        Api::<StorageClass>::all(env.admin.clone())
            .create(&PostParams::default(), &sc)
            .await
            .expect("create the class");
        let mut pvs = Vec::new();
        for o in 0..n {
            let name = format!("grow-{}-{o}", env.ns.name);
            let pv: PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": format!("/tmp/{name}")},
                    "claimRef": {"namespace": env.ns.name, "name": format!("{cluster}-data-{o}")},
                },
            }))
            .expect("pv");
            Api::<PersistentVolume>::all(env.admin.clone())
                .create(&PostParams::default(), &pv)
                .await
                .expect("create the volume");
            pvs.push(name);
        }
        Self { class, pvs }
    }

    async fn remove(self, env: &Env) {
        use k8s_openapi::api::core::v1::PersistentVolume;
        use k8s_openapi::api::storage::v1::StorageClass;
        use kube::api::Api;
        for pv in &self.pvs {
            let _ = Api::<PersistentVolume>::all(env.admin.clone())
                .delete(pv, &Default::default())
                .await;
        }
        let _ = Api::<StorageClass>::all(env.admin.clone())
            .delete(&self.class, &Default::default())
            .await;
    }
}

/// `spec.storage.size` grown from 1Gi to 2Gi on PVCs of an expandable StorageClass, under a
/// `WAIT 1` writer. The test plays the two parts of a real cluster that are not here: the
/// volume resizer (once the operator has asked for 2Gi, the PV grows and the PVC reports
/// `FileSystemResizePending`, its capacity still 1Gi) and the kubelet (when a pod of that PVC
/// starts again, the file system is grown: capacity 2Gi, the condition gone). The operator
/// grows the requests, reports `PVCResizeInProgress` True, restarts the replicas first (highest
/// ordinal first, each back in sync before the next), switches the primary over to a replica
/// and restarts it last; then `PVCResizeInProgress` is False. No acknowledged write is lost, no
/// sampled round sees two instances accept a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pvc_resize_restarts_the_replicas_first_then_the_primary_after_a_switchover_losing_no_acknowledged_write()
 {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use kube::api::Api;
    let env = Env::on_process_nodes("rc-pvc-resize", &[]).await;
    let volumes = ExpandableVolumes::create(&env, "demo", 3).await;
    env.create(
        "demo",
        json!({"instances": 3, "storage": {"size": "1Gi", "storageClassName": volumes.class}}),
    )
    .await;
    env.healthy("demo", 3).await;
    let pw = env.password("demo").await;
    let pods = env.api::<Pod>();
    let pvcs = env.api::<PersistentVolumeClaim>();
    let mut uids = Vec::new();
    for o in 0..3 {
        uids.push(pods.get(&format!("demo-{o}")).await.expect("pod").uid());
    }
    let (deleted, deletions) = record_deletions(&env, "demo");
    let (resizing, versions) = operator::record_versions(&env, "demo", |rc| {
        rc.status.and_then(|s| {
            kit::conditions::get(&s.conditions, "PVCResizeInProgress").map(|c| c.status.clone())
        })
    });
    let writer = Writer::start(env.clusters(), pods.clone(), "demo", pw.clone(), 1);
    writer.progress(200, T).await;
    let sampler = Sampler::start(pods.clone(), "demo", pw.clone());

    let started = Instant::now();
    env.patch("demo", json!({"spec": {"storage": {"size": "2Gi"}}}))
        .await;
    // The resizer: the operator asked for 2Gi; the volume grows, the file system waits for the
    // pod to restart. Every request first, then the volumes from the highest ordinal down, so
    // the operator's order (the highest stale replica first) does not depend on which PVC the
    // resizer finished first.
    let pvs = Api::<PersistentVolume>::all(env.admin.clone());
    for o in 0..3 {
        let name = format!("demo-data-{o}");
        testenv::wait_for(&pvcs, &name, T, |p: &PersistentVolumeClaim| {
            p.spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .is_some_and(|q| q.0 == "2Gi")
        })
        .await
        .unwrap_or_else(|e| panic!("{name} grown: {e}"));
    }
    for o in (0..3).rev() {
        let name = format!("demo-data-{o}");
        pvs.patch(
            &volumes.pvs[o as usize],
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"capacity": {"storage": "2Gi"}}})),
        )
        .await
        .expect("the volume grows");
        pvcs.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": {"storage": "1Gi"},
                "conditions": [{"type": "FileSystemResizePending", "status": "True",
                    "message": "Waiting for user to (re-)start a pod to finish file system resize of volume on node."}],
            }})),
        )
        .await
        .expect("FileSystemResizePending");
    }
    // The kubelet: a restarted pod's volume mount finishes the resize.
    let mut finished = [false; 3];
    let deadline = Instant::now() + Duration::from_secs(300);
    while finished.iter().any(|d| !d) {
        for o in 0..3usize {
            if finished[o] {
                continue;
            }
            let Ok(Some(p)) = pods.get_opt(&format!("demo-{o}")).await else {
                continue;
            };
            if p.uid() != uids[o] && p.metadata.deletion_timestamp.is_none() {
                pvcs.patch_status(
                    &format!("demo-data-{o}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                        "capacity": {"storage": "2Gi"}, "conditions": null,
                    }})),
                )
                .await
                .expect("the file system grown");
                finished[o] = true;
            }
        }
        if Instant::now() > deadline {
            let summary = env.summary("demo").await;
            panic!("restarted for the resize: {finished:?}: {summary}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // the kubelet's polling pace
    }
    let rc = env
        .wait("demo", Duration::from_secs(180), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(ClusterPhase::Healthy)
                    && s.ready_instances == 3
                    && kit::conditions::get(&s.conditions, "PVCResizeInProgress")
                        .is_some_and(|c| c.status == "False")
            })
        })
        .await;
    let took = started.elapsed();
    writer.progress(100, T).await;
    let writes = writer.finish().await;
    let samples = sampler.finish().await;
    deletions.abort();
    versions.abort();
    let deleted = deleted.lock().expect("deleted").clone();
    let seen = resizing.lock().expect("resizing").clone();
    tracing::info!(?took, ?deleted, longest_gap = ?writes.longest_gap, "PVC resize measured");
    eprintln!(
        "pvc resize: {took:?} from the spec change to Healthy with ResizeComplete, longest gap between acknowledged writes {:?}, {} acknowledged",
        writes.longest_gap,
        writes.acked.len()
    );
    assert_eq!(deleted, ["demo-2", "demo-1", "demo-0"], "replicas first");
    let primary = rc.status.clone().expect("status").current_primary;
    assert_ne!(primary, "demo-0", "the primary was switched over first");
    let first_true = seen.iter().position(|s| s.as_deref() == Some("True"));
    let last_false = seen.iter().rposition(|s| s.as_deref() == Some("False"));
    assert!(
        matches!((first_true, last_false), (Some(t), Some(f)) if t < f),
        "PVCResizeInProgress True then False: {seen:?}"
    );
    for o in 0..3 {
        let p = pvcs.get(&format!("demo-data-{o}")).await.expect("pvc");
        let st = p.status.expect("status");
        assert_eq!(st.capacity.expect("capacity")["storage"].0, "2Gi");
        assert!(st.conditions.unwrap_or_default().is_empty());
    }
    let ip = env.pod_ip(&primary).await.expect("ip");
    let missing = data::missing(&ip, &pw, &writes.acked).await;
    data::assert_nothing_lost_never_split(&missing, &writes, &samples);
    volumes.remove(&env).await;
}
