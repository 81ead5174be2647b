//! Table tests of [`super::classify`] and [`super::unsafe_to_reset`]: upstream's rules for
//! the maintenance list.

use jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::admin::status::ProcessInfo;
use crate::crd::{ProcessClass, ProcessGroupId};

const NOW: i64 = 1_000_000;
const STALE: Duration = Duration::from_secs(4 * 3600);
const WAIT: Duration = Duration::from_secs(300);

fn cluster(prefix: &str) -> FoundationDBCluster {
    serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBCluster",
        "metadata": {"name": "c"},
        "spec": {"version": "7.1.57", "processGroupIDPrefix": prefix},
    }))
    .unwrap()
}

fn storage_group(id: &str) -> ProcessGroupStatus {
    ProcessGroupStatus::new(
        ProcessGroupId::new(id),
        ProcessClass::new("storage"),
        Timestamp::UNIX_EPOCH,
    )
}

/// A status in maintenance of `zone` with processes `(id, class, zone, uptime)`.
fn status(zone: &str, processes: &[(&str, &str, &str, i64)]) -> FdbStatus {
    let mut s = FdbStatus::default();
    s.client.database_status.available = true;
    s.cluster.recovery_state.active_generations = 1;
    s.cluster.maintenance_zone = zone.into();
    for (id, class, z, uptime) in processes {
        s.cluster.processes.insert(
            (*id).into(),
            ProcessInfo {
                address: "127.1.0.1:4501".into(),
                class_type: (*class).into(),
                locality: [
                    ("instance_id".to_string(), id.to_string()),
                    ("zoneid".to_string(), z.to_string()),
                ]
                .into(),
                uptime_seconds: *uptime as f64,
                ..Default::default()
            },
        );
    }
    s
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn classification_table() {
    let groups = [storage_group("storage-1"), storage_group("storage-2")];
    // (case, status, listed (id, age of the entry), finished, stale, to update)
    type Case = (
        &'static str,
        FdbStatus,
        Vec<(&'static str, i64)>,
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
    );
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("nothing listed", status("z1", &[("storage-1", "storage", "z1", 10)]), vec![], &[], &[], &[]),
        ("restarted after its entry", status("z1", &[("storage-1", "storage", "z1", 10)]), vec![("storage-1", 60)], &["storage-1"], &[], &[]),
        ("started just when listed", status("z1", &[("storage-1", "storage", "z1", 60)]), vec![("storage-1", 60)], &[], &[], &["storage-1"]),
        ("not restarted yet", status("z1", &[("storage-1", "storage", "z1", 100)]), vec![("storage-1", 60)], &[], &[], &["storage-1"]),
        ("other zone, recent: waited for", status("z2", &[("storage-1", "storage", "z1", 100)]), vec![("storage-1", 60)], &[], &[], &["storage-1"]),
        ("other zone, older than the wait", status("z2", &[("storage-1", "storage", "z1", 9_000)]), vec![("storage-1", 600)], &[], &[], &[]),
        ("other zone, older than stale", status("z2", &[("storage-1", "storage", "z1", 90_000)]), vec![("storage-1", 20_000)], &[], &["storage-1"], &[]),
        ("no zone in maintenance counts as another zone", status("", &[("storage-1", "storage", "z1", 90_000)]), vec![("storage-1", 20_000)], &[], &["storage-1"], &[]),
        ("only storage processes count", status("z1", &[("storage-1", "log", "z1", 10)]), vec![("storage-1", 60)], &[], &[], &["storage-1"]),
        ("no process, group exists: waited for", status("z1", &[]), vec![("storage-2", 60)], &[], &[], &["storage-2"]),
        ("no process, group removed: stale", status("z1", &[]), vec![("storage-9", 60)], &[], &["storage-9"], &[]),
        ("no process, very old: stale", status("z1", &[]), vec![("storage-2", 20_000)], &[], &["storage-2"], &[]),
    ];
    for (name, db, listed, finished, stale, to_update) in cases {
        let listed: BTreeMap<String, i64> = listed
            .into_iter()
            .map(|(id, age)| (id.to_string(), NOW - age))
            .collect();
        let got = classify(&cluster(""), &groups, &db, &listed, NOW as f64, STALE, WAIT);
        let want = Classified {
            finished: set(finished),
            stale: set(stale),
            to_update: set(to_update),
        };
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn another_operators_groups_are_not_taken_for_removed_ones() {
    let listed = BTreeMap::from([("other-storage-1".to_string(), NOW - 60)]);
    let got = classify(
        &cluster("mine"),
        &[storage_group("mine-storage-1")],
        &status("z1", &[]),
        &listed,
        NOW as f64,
        STALE,
        WAIT,
    );
    assert_eq!(got.to_update, set(&["other-storage-1"]));
    assert!(got.stale.is_empty());
}

#[test]
fn reset_safety_table() {
    let ok = status("z1", &[]);
    let mut down = ok.clone();
    down.client.database_status.available = false;
    let mut recovering = ok.clone();
    recovering.cluster.recovery_state.active_generations = 11;
    let mut lagging = ok.clone();
    lagging
        .cluster
        .qos
        .worst_durability_lag_storage_server
        .seconds = 61.0;
    let mut queued = ok.clone();
    queued.cluster.qos.worst_queue_bytes_log_server = MAXIMUM_QUEUE_BYTES + 1;
    assert_eq!(unsafe_to_reset(&ok, 10), None);
    for (name, db) in [
        ("unavailable", down),
        ("generations", recovering),
        ("lag", lagging),
        ("queue", queued),
    ] {
        assert!(unsafe_to_reset(&db, 10).is_some(), "{name}");
    }
}
