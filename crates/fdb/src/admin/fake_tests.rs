use super::*;

fn process(n: u8, class: &str) -> FakeProcess {
    FakeProcess {
        address: format!("127.1.0.{n}:4501"),
        class: ProcessClass::new(class),
        instance_id: format!("{class}-{n}"),
        process_id: String::new(),
        zone: format!("zone-{n}"),
        version: "7.1.57".into(),
        command_line: String::new(),
        started: 0,
        restart_with: None,
        pod: String::new(),
    }
}

fn configured() -> FakeDatabase {
    let db = FakeDatabase::new();
    db.set_processes([
        process(1, "storage"),
        process(2, "log"),
        process(3, "stateless"),
    ]);
    db.set_connection_string("test:abc@127.1.0.1:4501,127.1.0.2:4501,127.1.0.3:4501");
    db
}

fn config(mode: &str) -> DatabaseConfiguration {
    DatabaseConfiguration {
        redundancy_mode: mode.into(),
        storage_engine: "ssd-2".into(),
        ..DatabaseConfiguration::default()
    }
}

#[tokio::test]
async fn unconfigured_database_is_unavailable_until_configure_new() {
    let db = configured();
    assert!(db.get_status().await.unwrap_err().is_timeout());
    let err = db.configure_database(&config("double"), false).await;
    assert!(err.is_err(), "configure without new on an empty database");
    db.configure_database(&config("double"), true)
        .await
        .unwrap();
    let status = db.get_status().await.unwrap();
    assert!(status.is_configured());
    assert_eq!(status.cluster.configuration.redundancy_mode, "double");
    assert_eq!(status.cluster.processes.len(), 3);
    assert_eq!(status.coordinator_instance_ids().len(), 3);
    assert!(status.client.coordinators.quorum_reachable);
    // A second `configure new` is refused, as FoundationDB refuses it.
    let again = db.configure_database(&config("double"), true).await;
    assert!(matches!(again, Err(AdminError::Command { .. })));
    let news = db
        .calls()
        .iter()
        .filter(|c| c.starts_with("configure new"))
        .count();
    assert_eq!(news, 2);
}

#[tokio::test]
async fn excluded_storage_drains_over_status_reads_and_blocking_exclude_waits() {
    let db = configured();
    db.configure_database(&config("double"), true)
        .await
        .unwrap();
    db.set_drain_reads(2);
    let target = ProcessAddress {
        host: "locality_instance_id:storage-1".into(),
        ..ProcessAddress::default()
    };
    db.exclude(std::slice::from_ref(&target), true)
        .await
        .unwrap();
    let s = db.get_status().await.unwrap();
    let p = &s.cluster.processes["storage-1"];
    assert!(p.excluded);
    assert!(p.has_role("storage"), "still draining");
    assert!(
        !p.has_role("coordinator"),
        "an excluded coordinator loses the role"
    );
    assert_eq!(s.exclusions(), vec!["locality_instance_id:storage-1"]);
    // A blocking exclude times out while data remains.
    let blocking = db.exclude(std::slice::from_ref(&target), false).await;
    assert!(blocking.unwrap_err().is_timeout());
    db.get_status().await.unwrap();
    let s = db.get_status().await.unwrap();
    assert!(!s.cluster.processes["storage-1"].has_role("storage"));
    db.exclude(std::slice::from_ref(&target), false)
        .await
        .unwrap();
    db.include(&[target]).await.unwrap();
    assert!(db.exclusions().is_empty());
}

#[tokio::test]
async fn recovery_timer_resets_on_configuration_changes() {
    let db = configured();
    db.configure_database(&config("double"), true)
        .await
        .unwrap();
    db.advance(300);
    let s = db.get_status().await.unwrap();
    // The wall clock moves too: allow the seconds the test itself takes.
    let since = s.cluster.recovery_state.seconds_since_last_recovered;
    assert!((300.0..305.0).contains(&since), "{since}");
    let addr = ProcessAddress::parse("127.1.0.3").unwrap();
    db.exclude(&[addr], true).await.unwrap();
    let s = db.get_status().await.unwrap();
    assert!(s.cluster.recovery_state.seconds_since_last_recovered < 5.0);
}

#[tokio::test]
async fn coordinator_change_writes_a_new_generation() {
    let db = configured();
    db.configure_database(&config("single"), true)
        .await
        .unwrap();
    let before = ConnectionString::parse(&db.connection_string()).unwrap();
    let new = db
        .change_coordinators(&[ProcessAddress::parse("127.1.0.2:4501").unwrap()])
        .await
        .unwrap();
    let after = ConnectionString::parse(&new).unwrap();
    assert_ne!(before.generation_id, after.generation_id);
    assert_eq!(after.coordinators, vec!["127.1.0.2:4501"]);
    assert_eq!(db.calls().last().unwrap(), "coordinators 127.1.0.2:4501");
}

#[tokio::test]
async fn injected_failures_and_unavailability() {
    let db = configured();
    db.configure_database(&config("double"), true)
        .await
        .unwrap();
    db.fail("get_status", AdminError::Timeout("injected".into()));
    assert!(db.get_status().await.unwrap_err().is_timeout());
    assert!(db.get_status().await.is_ok(), "only the next call fails");
    db.set_available(false);
    assert!(db.get_status().await.is_err());
    assert!(db.kill(&[]).await.is_err());
    db.set_available(true);
    assert!(db.get_status().await.is_ok());
}

#[tokio::test]
async fn lock_semantics_between_two_instances() {
    let db = configured();
    let a = db.lock_client("a", 60);
    let b = db.lock_client("b", 60);
    a.take_lock().await.unwrap();
    let start = db.lock_record().unwrap().start;
    // Held by a: b is refused, naming the owner.
    match b.take_lock().await {
        Err(AdminError::LockHeld { owner, .. }) => assert_eq!(owner, "a"),
        other => panic!("expected LockHeld, got {other:?}"),
    }
    // a extends its own lock; the start stays.
    db.advance(30);
    a.take_lock().await.unwrap();
    let rec = db.lock_record().unwrap();
    assert_eq!(
        (rec.owner.as_str(), rec.start, rec.end),
        ("a", start, db.now() + 60)
    );
    // After expiry b takes over, keeping the old start (upstream's quirk).
    db.advance(61);
    b.take_lock().await.unwrap();
    let rec = db.lock_record().unwrap();
    assert_eq!((rec.owner.as_str(), rec.start), ("b", start));
    // Deny b: a takes over b's unexpired lock; b is refused even though the lock was its own.
    a.update_deny_list(&[LockDenyListEntry {
        id: "b".into(),
        allow: false,
    }])
    .await
    .unwrap();
    a.take_lock().await.unwrap();
    assert_eq!(db.lock_record().unwrap().owner, "a");
    assert!(matches!(
        b.take_lock().await,
        Err(AdminError::LockDenied(_))
    ));
    // Only `allow: true` clears a deny entry; an update without b leaves it.
    a.update_deny_list(&[]).await.unwrap();
    assert_eq!(a.get_deny_list().await.unwrap(), vec!["b"]);
    a.update_deny_list(&[LockDenyListEntry {
        id: "b".into(),
        allow: true,
    }])
    .await
    .unwrap();
    assert!(a.get_deny_list().await.unwrap().is_empty());
    // Release: only the owner's started, unexpired lock is cleared.
    b.release_lock().await.unwrap();
    assert!(db.lock_record().is_some());
    a.release_lock().await.unwrap();
    assert!(db.lock_record().is_none());
}

#[tokio::test]
async fn pending_upgrades_are_shared() {
    let db = configured();
    let a = db.lock_client("a", 60);
    let b = db.lock_client("b", 60);
    a.add_pending_upgrades("7.3.43", &["a-storage-1".into()])
        .await
        .unwrap();
    b.add_pending_upgrades("7.3.43", &["b-storage-1".into()])
        .await
        .unwrap();
    assert_eq!(a.get_pending_upgrades("7.3.43").await.unwrap().len(), 2);
    b.clear_pending_upgrades().await.unwrap();
    assert!(a.get_pending_upgrades("7.3.43").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_kill_restarts_processes_with_what_their_pod_loaded() {
    let db = configured();
    db.configure_database(&config("double"), true)
        .await
        .unwrap();
    let now = db.now();
    let mut storage = process(1, "storage");
    storage.started = now - 100;
    storage.command_line = "fdbserver --old".into();
    storage.restart_with = Some(("fdbserver --new".into(), "7.1.63".into()));
    db.set_processes([storage, process(2, "log"), process(3, "stateless")]);
    let s = db.get_status().await.unwrap();
    let p = &s.cluster.processes["storage-1"];
    assert!(
        (100.0..110.0).contains(&p.uptime_seconds),
        "{}",
        p.uptime_seconds
    );
    assert_eq!(
        p.command_line, "fdbserver --old",
        "loading alone restarts nothing"
    );
    db.advance(50);
    let address = ProcessAddress::parse("127.1.0.1:4501").unwrap();
    db.kill(std::slice::from_ref(&address)).await.unwrap();
    let s = db.get_status().await.unwrap();
    let p = &s.cluster.processes["storage-1"];
    assert!(p.uptime_seconds < 5.0, "{}", p.uptime_seconds);
    assert_eq!(p.command_line, "fdbserver --new");
    assert_eq!(p.version, "7.1.63");
    assert!(s.cluster.recovery_state.seconds_since_last_recovered < 5.0);
    assert!(
        db.timed_calls()
            .iter()
            .any(|(t, c)| c.starts_with("kill") && *t >= now + 50)
    );
}

#[tokio::test]
async fn a_pod_runs_one_process_per_server_its_monitor_starts() {
    use crate::cluster::resources;
    use crate::crd::{FoundationDBCluster, FoundationDBClusterSpec, ProcessGroupId};
    let mut c = FoundationDBCluster::new(
        "c",
        FoundationDBClusterSpec {
            version: "7.1.57".into(),
            storage_servers_per_pod: 2,
            ..Default::default()
        },
    );
    c.status = Some(crate::crd::FoundationDBClusterStatus {
        connection_string: "c:x@127.1.0.9:4501".into(),
        ..Default::default()
    });
    let pod_of = |id: &str, class: &str, ip: &str| {
        let g = crate::crd::ProcessGroupStatus::new(
            ProcessGroupId::new(id),
            ProcessClass::new(class),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let mut pod = resources::pod(&c, &g, "h");
        pod.metadata.uid = Some(format!("uid-{id}"));
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            pod_ip: Some(ip.into()),
            phase: Some("Running".into()),
            ..Default::default()
        });
        let loaded =
            crate::admin::fake_monitor::monitor_annotations(&pod, &resources::config_map(&c))
                .expect("the monitor loads its configuration");
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(loaded);
        pod
    };
    let db = configured();
    db.configure_database(&config("double"), true)
        .await
        .unwrap();
    let pods = [
        pod_of("storage-1", "storage", "127.1.0.9"),
        pod_of("log-1", "log", "127.1.0.10"),
    ];
    let (class, id) = (
        "foundationdb.org/fdb-process-class",
        "foundationdb.org/fdb-process-group-id",
    );
    db.sync_pods(&pods, class, id, "7.1.57");
    let s = db.get_status().await.unwrap();
    let mut seen: Vec<(String, String, String)> = s
        .cluster
        .processes
        .values()
        .map(|p| {
            (
                p.address.clone(),
                p.locality["process_id"].clone(),
                p.locality["instance_id"].clone(),
            )
        })
        .collect();
    seen.sort();
    let row = |a: &str, p: &str, i: &str| (a.to_owned(), p.to_owned(), i.to_owned());
    assert_eq!(
        seen,
        vec![
            row("127.1.0.10:4501", "log-1-1", "log-1"),
            row("127.1.0.9:4501", "storage-1-1", "storage-1"),
            row("127.1.0.9:4503", "storage-1-2", "storage-1"),
        ]
    );
    let second = &s.cluster.processes["storage-1-2"];
    assert!(
        second.command_line.contains("--datadir=/var/fdb/data/2"),
        "{}",
        second.command_line
    );
    // Excluding the group's locality excludes both of its processes.
    db.exclude(
        &[ProcessAddress {
            host: "locality_instance_id:storage-1".into(),
            ..Default::default()
        }],
        true,
    )
    .await
    .unwrap();
    let s = db.get_status().await.unwrap();
    assert!(
        s.cluster.processes["storage-1-1"].excluded && s.cluster.processes["storage-1-2"].excluded
    );
    assert!(!s.cluster.processes["log-1-1"].excluded);
}
