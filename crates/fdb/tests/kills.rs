//! The operator killed at random points of a scale-down: the cluster controller (under its
//! RBAC, in process, on the fake database) is aborted (no graceful drain: its pass stops
//! where it is) and a new one started, with nothing kept in memory, every 0.2–2.5 s (from a
//! seeded generator; longer while the operator made no write since the last kill) while two
//! storage process groups are excluded and removed, then left alone to converge. A killed
//! pass stops at whatever `await` it was at: between an exclusion and its status write,
//! between two pod deletions, between a deletion and the include. Kills go on past 25 s until
//! two landed while a removal was under way (at most 180 s).
//!
//! Shown, per seed: no pod went while its process still held data (the harness records any),
//! the cluster converges with three storage groups, whose pods are the ones left, and the
//! removed processes are included again (the exclusion list is empty).

mod support;

use std::time::{Duration, Instant};

use fdb::crd::FoundationDBCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use support::{Harness, ID_LABEL, open_recovery_gates, storage_groups};

async fn scale_down_under_kills(seed: u64) {
    let h = Harness::start_with(&format!("fdb-kills-{seed}"), open_recovery_gates()).await;
    let name = "sample";
    h.simulate(name);
    let db = h.db(name);
    // Exclusions take a few status reads to finish, so kills land while data moves.
    db.set_drain_reads(6);
    let before = support::create(&h, name, json!({"processCounts": {"storage": 5}})).await;
    assert_eq!(storage_groups(&before).len(), 5);

    h.scale_storage(name, 3).await;
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let (mut kills, mut during_removal) = (0, 0);
    // A kill drops the operator wherever it is, so kills closer together than one pass would
    // starve it: while a kill finds the cluster unchanged since the last one, the longest
    // pause doubles (up to 16 s), and it falls back to 2.5 s once the operator wrote again.
    let (mut longest, mut last_version) = (2500, String::new());
    while started.elapsed() < Duration::from_secs(25)
        || (during_removal < 2 && started.elapsed() < Duration::from_secs(180))
    {
        let pause = Duration::from_millis(rng.u64(200..longest));
        // The pause between kills is the chaos schedule itself, not a synchronisation.
        tokio::time::sleep(pause).await;
        let c = h.clusters().get(name).await.expect("cluster");
        let removing = support::groups(&c)
            .iter()
            .any(|g| g.is_marked_for_removal());
        h.restart_operator();
        kills += 1;
        during_removal += usize::from(removing);
        let version = c.metadata.resource_version.clone().unwrap_or_default();
        longest = if version == last_version {
            (longest * 2).min(16_000)
        } else {
            2500
        };
        last_version = version;
    }
    assert!(
        during_removal > 0,
        "seed {seed}: no kill landed while a removal was under way"
    );

    let after: FoundationDBCluster = h.removals_done(name, Duration::from_secs(240)).await;
    let violations = h.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "seed {seed}, {kills} kills: {violations:?}"
    );
    let storage = storage_groups(&after);
    assert_eq!(storage.len(), 3, "seed {seed}: {storage:?}");
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name)
        .list(&Default::default())
        .await
        .expect("pods");
    let storage_pods: std::collections::BTreeSet<String> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.labels.as_ref()?.get(ID_LABEL).cloned())
        .filter(|id| id.starts_with("storage"))
        .collect();
    assert_eq!(
        storage_pods, storage,
        "seed {seed}: the pods are the groups'"
    );
    testenv::eventually(
        "the removed processes included",
        Duration::from_secs(120),
        || {
            let empty = db.exclusions().is_empty();
            async move { empty.then_some(()) }
        },
    )
    .await
    .expect("included");
    println!(
        "seed {seed}: {kills} operator kills, {during_removal} while a removal was under way; nothing removed early"
    );
}

#[tokio::test]
async fn a_scale_down_under_operator_kills_removes_nothing_early_seed_1() {
    scale_down_under_kills(1).await;
}

#[tokio::test]
async fn a_scale_down_under_operator_kills_removes_nothing_early_seed_2() {
    scale_down_under_kills(2).await;
}
