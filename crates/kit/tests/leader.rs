//! Leader election against the real local control plane: one Lease, two contenders.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::api::coordination::v1::Lease;
use kit::leader::{LeaderElector, LeaderError, LeaseConfig, run_while_leading};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use tokio::{sync::watch, task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;

const LEASE: &str = "kit-test-lock";
// Short enough for a quick test, long enough that a loaded machine (CI runs three test binaries
// and their operators on two cores) answers a renewal within the deadline: at 3 s / 2 s a
// renewal round trip over 2 s made the leader step down, and `elect` failed.
const DURATION: Duration = Duration::from_secs(8);
const RENEW_DEADLINE: Duration = Duration::from_secs(6);
const RETRY: Duration = Duration::from_millis(500);
const MARGIN: Duration = Duration::from_secs(4);

fn config(ns: &str, identity: &str) -> LeaseConfig {
    LeaseConfig {
        identity: identity.to_owned(),
        lease_duration: DURATION,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY,
        ..LeaseConfig::new(LEASE, ns)
    }
}

struct Contender {
    identity: &'static str,
    leading: watch::Receiver<bool>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), LeaderError>>,
}

fn contend(client: &Client, ns: &str, identity: &'static str) -> Contender {
    let elector = LeaderElector::new(client.clone(), config(ns, identity));
    let leading = elector.subscribe();
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    Contender {
        identity,
        leading,
        stop,
        task,
    }
}

fn leads(c: &Contender) -> bool {
    *c.leading.borrow()
}

/// Samples the contenders every 10 ms, failing if two of them ever lead at once, until
/// `until` holds (`Ok(elapsed)`) or `window` passes (`Err(())`).
async fn sample(
    all: &[&Contender],
    window: Duration,
    until: impl Fn() -> bool,
) -> Result<Duration, ()> {
    let start = Instant::now();
    loop {
        let leaders: Vec<&str> = all
            .iter()
            .filter(|c| leads(c))
            .map(|c| c.identity)
            .collect();
        assert!(leaders.len() <= 1, "several leaders at once: {leaders:?}");
        if until() {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= window {
            return Err(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await; // sampling interval of a check with a deadline
    }
}

async fn lease(client: &Client, ns: &str) -> Lease {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get(LEASE)
        .await
        .expect("get lease")
}

async fn holder(client: &Client, ns: &str) -> Option<String> {
    lease(client, ns).await.spec.and_then(|s| s.holder_identity)
}

/// Starts two contenders; once one leads, watches for longer than a lease duration (several
/// renewals) that the other never leads too. Returns (leader, follower).
async fn elect(client: &Client, ns: &str) -> (Contender, Contender) {
    let a = contend(client, ns, "contender-a");
    let b = contend(client, ns, "contender-b");
    sample(&[&a, &b], Duration::from_secs(20), || {
        leads(&a) || leads(&b)
    })
    .await
    .expect("someone leads");
    let (leader, follower) = if leads(&a) { (a, b) } else { (b, a) };
    let flipped = sample(
        &[&leader, &follower],
        DURATION + Duration::from_secs(1),
        || !leads(&leader),
    )
    .await;
    assert!(flipped.is_err(), "a renewing leader kept its lease");
    assert_eq!(holder(client, ns).await.as_deref(), Some(leader.identity));
    (leader, follower)
}

#[tokio::test]
async fn released_lease_passes_to_the_other_contender_at_once() {
    let client = testenv::client().await;
    let ns = testenv::TestNamespace::new(&client, "kit-leader-release").await;
    let (leader, follower) = elect(&client, &ns.name).await;
    let transitions = lease(&client, &ns.name)
        .await
        .spec
        .and_then(|s| s.lease_transitions);

    leader.stop.cancel();
    let took = sample(&[&leader, &follower], DURATION + MARGIN, || {
        leads(&follower)
    })
    .await
    .expect("follower takes over");
    // A released lease is taken on the follower's next retry, well before it could expire.
    assert!(took < DURATION, "takeover after release took {took:?}");
    assert!(!leads(&leader));
    leader
        .task
        .await
        .expect("join")
        .expect("graceful stop is Ok");

    let after = lease(&client, &ns.name).await.spec.expect("spec");
    assert_eq!(after.holder_identity.as_deref(), Some(follower.identity));
    assert_eq!(after.lease_transitions, transitions.map(|t| t + 1));
    follower.stop.cancel();
    follower
        .task
        .await
        .expect("join")
        .expect("graceful stop is Ok");
    assert_eq!(
        holder(&client, &ns.name).await,
        None,
        "graceful stop releases the lease"
    );
}

#[tokio::test]
async fn crashed_leader_is_replaced_after_its_lease_expires() {
    let client = testenv::client().await;
    let ns = testenv::TestNamespace::new(&client, "kit-leader-crash").await;
    let (leader, follower) = elect(&client, &ns.name).await;

    // A crash: the task stops without releasing, so only expiry frees the lease. The
    // aborted contender's watch keeps its last value, so only the follower is sampled.
    leader.task.abort();
    let _ = leader.task.await;
    let took = sample(&[&follower], DURATION + RETRY + MARGIN, || leads(&follower))
        .await
        .expect("follower takes over after expiry");
    // The last renewal was at most one retry period before the crash.
    assert!(
        took >= DURATION - RETRY - Duration::from_millis(200),
        "took over too early: {took:?}"
    );
    assert_eq!(
        holder(&client, &ns.name).await.as_deref(),
        Some(follower.identity)
    );
    follower.stop.cancel();
    follower
        .task
        .await
        .expect("join")
        .expect("graceful stop is Ok");
}

#[tokio::test]
async fn work_runs_only_while_leading_and_stops_when_the_lease_is_lost() {
    let client = testenv::client().await;
    let ns = testenv::TestNamespace::new(&client, "kit-leader-lost").await;
    let elector = LeaderElector::new(client.clone(), config(&ns.name, "worker"));
    let leading = elector.subscribe();
    let (running, dropped) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (r, d) = (running.clone(), dropped.clone());
    let lead_state = leading.clone();
    let task = tokio::spawn(run_while_leading(
        elector,
        CancellationToken::new(),
        move |token| async move {
            assert!(*lead_state.borrow(), "work started without leadership");
            r.store(true, Ordering::SeqCst);
            let _on_drop = DropFlag(d);
            token.cancelled().await;
        },
    ));
    testenv::eventually("work running", Duration::from_secs(20), || async {
        running.load(Ordering::SeqCst).then_some(())
    })
    .await
    .expect("work starts once leading");

    // Someone else takes the lease (as after a partition): the holder must step down.
    let stolen =
        serde_json::json!({"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 60}});
    Api::<Lease>::namespaced(client.clone(), &ns.name)
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(&stolen))
        .await
        .expect("steal lease");
    let result = tokio::time::timeout(DURATION + MARGIN, task)
        .await
        .expect("run_while_leading returns after losing the lease")
        .expect("join");
    assert!(
        matches!(result, Err(LeaderError::Lost { .. })),
        "{result:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "work was stopped");
    assert!(!*leading.borrow());
    assert_eq!(holder(&client, &ns.name).await.as_deref(), Some("intruder"));
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
