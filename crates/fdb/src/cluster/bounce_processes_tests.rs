use super::*;
use crate::admin::status::ProcessInfo;
use crate::crd::ProcessGroupId;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

/// A group with `conditions`, first seen at 100.
fn group(id: &str, conditions: &[&str]) -> ProcessGroupStatus {
    let class = ProcessGroupId::new(id).process_class();
    let mut g = ProcessGroupStatus::new(ProcessGroupId::new(id), class, t(100));
    g.process_group_conditions.clear();
    for c in conditions {
        g.update_condition(c, true, t(100));
    }
    g
}

#[test]
fn choice_table() {
    use condition::*;
    let removed_excluded = {
        let mut g = group("storage-9", &[INCORRECT_COMMAND_LINE]);
        g.mark_for_removal(t(100));
        g.set_exclude(t(100));
        g.process_group_conditions.clear();
        g.update_condition(INCORRECT_COMMAND_LINE, true, t(100));
        g
    };
    let removed_draining = {
        let mut g = group("storage-8", &[INCORRECT_COMMAND_LINE]);
        g.mark_for_removal(t(100));
        g
    };
    let bounce = |ids: &[&str]| Choice::Bounce(ids.iter().map(|s| s.to_string()).collect());
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<ProcessGroupStatus>, Choice)> = vec![
        ("nothing wrong", vec![group("storage-1", &[]), group("log-1", &[])], Choice::Nothing),
        ("knob changed on two groups", vec![group("storage-1", &[INCORRECT_COMMAND_LINE]), group("log-1", &[INCORRECT_COMMAND_LINE]), group("log-2", &[])], bounce(&["storage-1", "log-1"])),
        ("a pod spec change recreates instead", vec![group("storage-1", &[INCORRECT_COMMAND_LINE, INCORRECT_POD_SPEC])], Choice::Nothing),
        ("sidecar unreachable", vec![group("storage-1", &[INCORRECT_COMMAND_LINE, SIDECAR_UNREACHABLE])], Choice::Nothing),
        ("one pod not synced holds everyone", vec![group("storage-1", &[INCORRECT_COMMAND_LINE]), group("storage-2", &[INCORRECT_COMMAND_LINE, INCORRECT_CONFIG_MAP])], Choice::WaitForConfig(vec!["storage-2".into()])),
        ("test class never bounced", vec![group("test-1", &[INCORRECT_COMMAND_LINE])], Choice::Nothing),
        ("terminating resources", vec![group("storage-1", &[INCORRECT_COMMAND_LINE, RESOURCES_TERMINATING])], Choice::Nothing),
        ("pending pod", vec![group("storage-1", &[INCORRECT_COMMAND_LINE, POD_PENDING])], Choice::Nothing),
        ("missing processes briefly: still bounced", vec![group("storage-1", &[INCORRECT_COMMAND_LINE, MISSING_PROCESSES])], bounce(&["storage-1"])),
        ("removed and excluded: left alone", vec![removed_excluded], Choice::Nothing),
        ("removed, still draining: bounced", vec![removed_draining], bounce(&["storage-8"])),
    ];
    for (name, groups, want) in cases {
        assert_eq!(choose(&groups, t(120), 30, false), want, "{name}");
    }
    let long_missing = vec![group(
        "storage-1",
        &[INCORRECT_COMMAND_LINE, MISSING_PROCESSES],
    )];
    assert_eq!(choose(&long_missing, t(200), 30, false), Choice::Nothing);
}

#[test]
fn during_an_incompatible_upgrade_spec_changes_do_not_hold_and_staging_does() {
    use condition::*;
    let groups = vec![
        group("storage-1", &[INCORRECT_COMMAND_LINE, INCORRECT_POD_SPEC]),
        group("log-1", &[INCORRECT_COMMAND_LINE]),
    ];
    assert_eq!(
        choose(&groups, t(120), 30, true),
        Choice::Bounce(vec!["storage-1".into(), "log-1".into()])
    );
    let unstaged = vec![
        group("storage-1", &[INCORRECT_COMMAND_LINE]),
        group("log-1", &[INCORRECT_COMMAND_LINE, INCORRECT_SIDECAR_IMAGE]),
    ];
    assert_eq!(
        choose(&unstaged, t(120), 30, true),
        Choice::WaitForConfig(vec!["log-1".into()])
    );
    let mut s = status(3600.0, &[]);
    for (key, id, version) in [("a", "storage-1", "7.3.63"), ("b", "log-1", "7.1.57")] {
        s.cluster.processes.insert(
            key.into(),
            ProcessInfo {
                address: format!("127.1.0.{}:4501", key.len()),
                version: version.into(),
                locality: [("instance_id".to_string(), id.to_string())].into(),
                ..Default::default()
            },
        );
    }
    let left: Vec<String> = not_upgraded(&s, "7.3.63")
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(left, vec!["log-1"]);
}

fn status(recovered: f64, uptimes: &[(f64, bool)]) -> FdbStatus {
    let mut s = FdbStatus::default();
    s.client.database_status.available = true;
    s.cluster.recovery_state.active_generations = 1;
    s.cluster.recovery_state.seconds_since_last_recovered = recovered;
    for (i, (uptime, excluded)) in uptimes.iter().enumerate() {
        s.cluster.processes.insert(
            format!("p{i}"),
            ProcessInfo {
                uptime_seconds: *uptime,
                excluded: *excluded,
                ..Default::default()
            },
        );
    }
    s
}

#[test]
fn uptime_gate_table() {
    #[rustfmt::skip]
    let cases: Vec<(&str, FdbStatus, Result<(), f64>)> = vec![
        ("everything old enough", status(3600.0, &[(700.0, false), (900.0, false)]), Ok(())),
        ("one process restarted recently", status(3600.0, &[(100.0, false), (900.0, false)]), Err(500.0)),
        ("an excluded process does not count", status(3600.0, &[(5.0, true), (900.0, false)]), Ok(())),
        ("a recent recovery counts", status(60.0, &[(900.0, false)]), Err(540.0)),
        ("unavailable", { let mut s = status(3600.0, &[]); s.client.database_status.available = false; s }, Err(f64::INFINITY)),
        ("too many generations", { let mut s = status(3600.0, &[]); s.cluster.recovery_state.active_generations = 11; s }, Err(f64::INFINITY)),
        ("no clean bounce possible", { let mut s = status(3600.0, &[]); s.cluster.bounce_impact.can_clean_bounce = Some(false); s }, Err(f64::INFINITY)),
    ];
    for (name, s, want) in cases {
        assert_eq!(uptime_gate(&s, 600.0, 10), want, "{name}");
    }
}

#[test]
fn addresses_are_the_groups_processes() {
    let mut s = status(3600.0, &[]);
    for (key, id, address) in [
        ("a", "storage-1", "127.1.0.1:4501"),
        ("b", "storage-2", "127.1.0.2:4501"),
    ] {
        s.cluster.processes.insert(
            key.into(),
            ProcessInfo {
                address: address.into(),
                locality: [("instance_id".to_string(), id.to_string())].into(),
                ..Default::default()
            },
        );
    }
    let got: Vec<String> = addresses(&s, &["storage-2".into()])
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(got, vec!["127.1.0.2:4501"]);
}

#[test]
fn ignore_during_restart_leaves_out_the_groups_machines() {
    let mut s = status(3600.0, &[]);
    for (key, id, address) in [
        ("a", "storage-1", "127.1.0.1:4501"),
        ("b", "storage-2", "127.1.0.2:4501"),
        ("c", "log-1", "127.1.0.3:4501"),
    ] {
        s.cluster.processes.insert(
            key.into(),
            ProcessInfo {
                address: address.into(),
                locality: [("instance_id".to_string(), id.to_string())].into(),
                ..Default::default()
            },
        );
    }
    let cluster = |ignore: serde_json::Value| -> FoundationDBCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.foundationdb.org/v1beta2",
            "kind": "FoundationDBCluster",
            "metadata": {"name": "c"},
            "spec": {"version": "7.1.57", "buggify": {"ignoreDuringRestart": ignore}},
        }))
        .unwrap()
    };
    let all = || {
        addresses(
            &s,
            &["storage-1".into(), "storage-2".into(), "log-1".into()],
        )
    };
    let kept = |ignore: serde_json::Value| -> Vec<String> {
        without_ignored(&cluster(ignore), &s, all())
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(kept(serde_json::json!([])).len(), 3, "nothing ignored");
    assert_eq!(
        kept(serde_json::json!(["storage-2"])),
        vec!["127.1.0.1:4501", "127.1.0.3:4501"]
    );
    assert_eq!(
        kept(serde_json::json!(["storage-1", "storage-2", "log-1"])),
        Vec::<String>::new(),
        "everything ignored: nothing to kill"
    );
    assert_eq!(
        kept(serde_json::json!(["storage-9"])).len(),
        3,
        "unknown group"
    );
}

#[test]
fn expected_processes_count_each_pods_servers() {
    use condition::*;
    let c = |spec: serde_json::Value| -> FoundationDBCluster {
        let mut full = serde_json::json!({"version": "7.1.57"});
        for (k, v) in spec.as_object().unwrap() {
            full[k] = v.clone();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.foundationdb.org/v1beta2",
            "kind": "FoundationDBCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": full,
        }))
        .unwrap()
    };
    let counts = serde_json::json!({"processCounts": {"storage": 3, "log": 2, "stateless": 1}});
    let mut spp = counts.clone();
    spp["storageServersPerPod"] = 2.into();
    spp["logServersPerPod"] = 3.into();
    let removed = {
        let mut g = group("storage-4", &[]);
        g.mark_for_removal(t(100));
        g
    };
    let missing_long = group("storage-1", &[MISSING_PROCESSES]);
    let terminating = {
        let mut g = group("storage-5", &[RESOURCES_TERMINATING]);
        g.mark_for_removal(t(100));
        g
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, serde_json::Value, Vec<ProcessGroupStatus>, i64)> = vec![
        ("one per pod", counts.clone(), vec![], 3 + 2 + 1),
        ("storage ×2, log ×3", spp.clone(), vec![], 3 * 2 + 2 * 3 + 1),
        ("a removed group has a replacement beside it", spp.clone(), vec![removed.clone()], 4 * 2 + 2 * 3 + 1),
        ("a group missing for long is not waited for", spp.clone(), vec![missing_long.clone()], 2 * 2 + 2 * 3 + 1),
        ("terminating resources do not count", spp.clone(), vec![terminating], 3 * 2 + 2 * 3 + 1),
    ];
    for (name, spec, groups, want) in cases {
        assert_eq!(
            expected_processes(&c(spec), &groups, t(1000), 30),
            want,
            "{name}"
        );
    }
}

/// A status of processes `(instance ID, class, version)` at 127.1.0.<n>:4501.
fn versions(processes: &[(&str, &str, &str)]) -> FdbStatus {
    let mut s = status(3600.0, &[]);
    for (n, (id, class, version)) in processes.iter().enumerate() {
        s.cluster.processes.insert(
            format!("p{n}"),
            ProcessInfo {
                address: format!("127.1.0.{}:4501", n + 1),
                class_type: (*class).into(),
                version: (*version).into(),
                locality: [("instance_id".to_string(), (*id).to_string())].into(),
                ..Default::default()
            },
        );
    }
    s
}

#[tokio::test]
async fn two_instances_each_register_before_they_wait_so_both_upgrade() {
    use crate::admin::LockClient;
    // One database, two operator instances (prefixes dc1 and dc2), every process on 7.1.
    let s = versions(&[
        ("dc1-storage-1", "storage", "7.1.57"),
        ("dc1-log-1", "log", "7.1.57"),
        ("dc2-storage-1", "storage", "7.1.57"),
        ("dc2-log-1", "log", "7.1.57"),
        ("dc1-test-1", "test", "7.1.57"),
        ("dc2-stateless-1", "stateless", "7.3.63"),
    ]);
    let db = crate::admin::fake::FakeDatabase::new();
    let (a, b) = (db.lock_client("dc1", 600), db.lock_client("dc2", 600));
    let v = "7.3.63";
    // dc1 registers its groups first, then looks: dc2's processes are not registered yet, so
    // it waits (upstream's "Waiting for processes to be updated: [...]"). The tester process
    // and the process already on 7.3 are not waited for.
    a.add_pending_upgrades(v, &["dc1-storage-1".into(), "dc1-log-1".into()])
        .await
        .unwrap();
    let (ready, waiting) = split_by_registration(&s, v, &a.get_pending_upgrades(v).await.unwrap());
    assert_eq!(waiting, vec!["dc2-log-1", "dc2-storage-1"]);
    assert_eq!(ready.len(), 2);
    // dc2 (which equally sees dc1's processes not upgraded) registers before it looks, finds
    // dc1's registration, and kills every process of both instances in one go.
    b.add_pending_upgrades(v, &["dc2-storage-1".into(), "dc2-log-1".into()])
        .await
        .unwrap();
    let (ready, waiting) = split_by_registration(&s, v, &b.get_pending_upgrades(v).await.unwrap());
    assert!(waiting.is_empty(), "{waiting:?}");
    let mut got: Vec<String> = ready.iter().map(ToString::to_string).collect();
    got.sort();
    assert_eq!(
        got,
        [
            "127.1.0.1:4501",
            "127.1.0.2:4501",
            "127.1.0.3:4501",
            "127.1.0.4:4501"
        ]
    );
}

#[test]
fn registrations_are_left_over_only_once_every_process_runs_the_version() {
    let v = "7.3.63";
    let late: BTreeSet<String> = ["dc2-log-1".to_owned()].into();
    let done = versions(&[("dc1-log-1", "log", v), ("dc2-log-1", "log", v)]);
    assert!(leftover_registrations(&done, v, &late));
    assert!(!leftover_registrations(&done, v, &BTreeSet::new()));
    // Another instance's processes still on 7.1: the records are that upgrade's, kept.
    let midway = versions(&[("dc1-log-1", "log", v), ("dc2-log-1", "log", "7.1.57")]);
    assert!(!leftover_registrations(&midway, v, &late));
    // A tester process is never restarted by a kill and does not hold the records.
    let tester = versions(&[("dc1-log-1", "log", v), ("dc1-test-1", "test", "7.1.57")]);
    assert!(leftover_registrations(&tester, v, &late));
}
