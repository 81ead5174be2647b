use super::*;

const DOUBLE: &str = include_str!("testdata/status_7_1_double.json");
const INCOMPLETE: &str = include_str!("testdata/status_7_1_incomplete.json");
const UNREACHABLE: &str = include_str!("testdata/status_unreachable.json");
const CONFIGURATION_MISSING: &str = include_str!("testdata/status_configuration_missing.json");

#[test]
fn a_healthy_status_yields_every_field_the_operator_reads() {
    let s = parse(DOUBLE, true).expect("the warning line is skipped and the document parses");
    // client
    assert!(s.client.database_status.available && s.client.database_status.healthy);
    assert!(s.client.coordinators.quorum_reachable);
    let coordinators: Vec<_> = s
        .client
        .coordinators
        .coordinators
        .iter()
        .map(|c| (c.address.as_str(), c.reachable))
        .collect();
    assert_eq!(
        coordinators,
        [
            ("127.2.0.10:4501", true),
            ("127.2.0.13:4501", true),
            ("127.2.1.14:4501", true)
        ]
    );
    // configuration, with FoundationDB's defaults and the exclusions
    let c = &s.cluster.configuration;
    assert_eq!(
        (
            c.redundancy_mode.as_str(),
            c.storage_engine.as_str(),
            c.usable_regions
        ),
        ("double", "ssd-2", 1)
    );
    assert_eq!(
        (
            c.role_counts.logs,
            c.role_counts.proxies,
            c.role_counts.commit_proxies,
            c.role_counts.grv_proxies
        ),
        (3, 3, 2, 1)
    );
    assert_eq!(
        (
            c.role_counts.resolvers,
            c.role_counts.log_routers,
            c.role_counts.remote_logs
        ),
        (1, -1, -1)
    );
    assert_eq!(c.version_flags.log_spill, 2);
    assert_eq!(c.storage_migration_type.as_deref(), Some("disabled"));
    assert_eq!(c.perpetual_storage_wiggle_locality.as_deref(), Some("0"));
    assert_eq!(c.perpetual_storage_wiggle_engine.as_deref(), Some("none"));
    assert_eq!(
        s.exclusions(),
        ["127.2.2.12", "locality_instance_id:storage-103"]
    );
    assert_eq!(
        s.excluded_localities().into_iter().collect::<Vec<_>>(),
        ["storage-103"]
    );
    // processes
    assert_eq!(s.cluster.processes.len(), 10);
    let p = &s.cluster.processes["a1b2c3d4e5f60001"];
    assert_eq!(p.address, "127.2.0.10:4501");
    assert_eq!(p.parsed_address().unwrap().port, 4501);
    assert_eq!(p.class_type, "storage");
    assert_eq!(p.instance_id(), Some("storage-101"));
    assert_eq!(p.locality[LOCALITY_ZONE_ID], "sample-storage-101");
    assert_eq!(
        p.locality[LOCALITY_DNS_NAME],
        "sample-storage-101.sample.ns.svc.cluster.local"
    );
    assert_eq!(p.version, "7.1.57");
    assert!(
        p.command_line
            .starts_with("/usr/bin/fdbserver --class=storage")
    );
    assert!((p.uptime_seconds - 4821.5).abs() < 1e-9);
    assert!(p.has_role("coordinator") && p.has_role("storage"));
    assert_eq!(p.roles[0].stored_bytes, 1_048_576);
    assert!((p.roles[0].data_lag.seconds - 0.3).abs() < 1e-9);
    assert!(!p.excluded && !p.under_maintenance);
    assert!(s.cluster.processes["a1b2c3d4e5f60003"].excluded);
    let io = &s.cluster.processes["a1b2c3d4e5f60006"].messages[0];
    assert_eq!(
        (io.name.as_str(), io.kind.as_str()),
        ("io_timeout", "ioTimeoutError")
    );
    assert!(s.cluster.processes["a1b2c3d4e5f60008"].run_loop_busy > 0.9);
    assert_eq!(
        s.coordinator_instance_ids().into_iter().collect::<Vec<_>>(),
        ["log-201", "log-202", "storage-101"]
    );
    // data distribution, logs, qos, recovery
    assert!(s.cluster.data.state.healthy);
    assert_eq!(s.cluster.data.state.name, "healthy");
    assert_eq!(
        s.cluster.data.team_trackers[0].state.min_replicas_remaining,
        2
    );
    assert!(s.cluster.data.team_trackers[0].primary);
    assert_eq!(s.cluster.data.moving_data.highest_priority, 0);
    assert!(s.cluster.full_replication);
    assert_eq!(
        (
            s.cluster.logs[0].log_fault_tolerance,
            s.cluster.logs[0].log_replication_factor
        ),
        (1, 2)
    );
    assert!(s.cluster.logs[0].current);
    assert!((s.cluster.qos.worst_durability_lag_storage_server.seconds - 5.2).abs() < 1e-9);
    assert_eq!(s.cluster.qos.worst_queue_bytes_log_server, 2048);
    assert_eq!(s.cluster.qos.worst_queue_bytes_storage_server, 4096);
    assert_eq!(s.cluster.recovery_state.name, "fully_recovered");
    assert_eq!(s.cluster.recovery_state.active_generations, 1);
    assert!(s.cluster.recovery_state.seconds_since_last_recovered > 4800.0);
    assert_eq!(s.cluster.generation, 4);
    assert_eq!(
        s.cluster
            .fault_tolerance
            .max_zone_failures_without_losing_data,
        1
    );
    assert_eq!(s.cluster.bounce_impact.can_clean_bounce, Some(true));
    assert_eq!(s.cluster.database_available, Some(true));
    assert_eq!(s.cluster.database_lock_state.locked, Some(false));
    assert_eq!(s.cluster.maintenance_zone, "");
    assert_eq!(s.cluster.incompatible_connections, ["10.1.1.9:40100"]);
    assert!(
        s.cluster
            .connection_string
            .starts_with("sample:Kr9d2XcHq1lWpYtB7aMvN3sZoE4uF6gJ@")
    );
    // clients
    let versions = &s.cluster.clients.supported_versions;
    assert_eq!(s.cluster.clients.count, 4);
    assert_eq!(versions[0].client_version, "6.3.24");
    assert_eq!(versions[0].protocol_version, "fdb00b063010001");
    assert_eq!(
        versions[0].max_protocol_clients[0].description(),
        "10.1.1.1:40000 (fdb-kubernetes-operator)"
    );
    assert_eq!(versions[1].connected_clients.len(), 2);
    assert_eq!(versions[2].protocol_version, "Unknown");
    // backup layer
    assert!(s.is_configured());
    let tag = &s.cluster.layers.backup.tags["default"];
    assert_eq!(tag.running_backup, Some(true));
    assert_eq!(tag.running_backup_is_restorable, Some(true));
    assert!(!s.cluster.layers.backup.paused);
}

#[test]
fn an_incomplete_status_still_parses_with_what_it_has() {
    let s = parse(INCOMPLETE, true).expect("incomplete, but available and with processes");
    let names: Vec<_> = s.cluster.messages.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["status_incomplete", "unreachable_processes"]);
    let unreachable: Vec<_> = s.cluster.messages[1]
        .unreachable_processes
        .iter()
        .map(|p| p.address.as_str())
        .collect();
    assert_eq!(unreachable, ["127.2.1.11:4501", "127.2.9.9:4501"]);
    let silent = &s.cluster.processes["a1b2c3d4e5f60002"];
    assert_eq!(
        silent.version, "",
        "a process that does not report has no version"
    );
    assert!(silent.roles.is_empty());
    assert_eq!(silent.uptime_seconds, 0.0);
    assert_eq!(silent.instance_id(), Some("storage-102"));
    assert_eq!(s.cluster.processes["a1b2c3d4e5f6000b"].class_type, "test");
    assert!(!s.cluster.data.state.healthy);
    assert_eq!(s.cluster.data.state.name, "healing");
    assert_eq!(
        s.cluster.data.team_trackers[0].state.min_replicas_remaining,
        1
    );
    assert_eq!(s.cluster.recovery_state.active_generations, 2);
    assert_eq!(s.cluster.bounce_impact.can_clean_bounce, Some(false));
    assert!(!s.client.coordinators.coordinators[1].reachable);
    assert!(!s.cluster.full_replication);
}

#[test]
fn an_unreachable_database_is_a_timeout_but_its_quorum_can_be_read() {
    assert!(
        matches!(parse(UNREACHABLE, true), Err(StatusError::Timeout(m)) if m == "database is unavailable")
    );
    let doc = parse_document(UNREACHABLE).unwrap();
    assert!(!doc.client.coordinators.quorum_reachable);
    assert_eq!(doc.client.messages[0].name, "quorum_not_reachable");
    assert!(doc.cluster.processes.is_empty());
}

#[test]
fn status_incomplete_timeout_in_cluster_messages_is_a_timeout() {
    let mut v: serde_json::Value = serde_json::from_str(strip_warnings(DOUBLE).unwrap()).unwrap();
    v["cluster"]["messages"] = serde_json::json!([{"name": "status_incomplete_timeout", "description": "Timed out fetching cluster status."}]);
    let err = parse(&v.to_string(), true).unwrap_err();
    assert_eq!(
        err,
        StatusError::Timeout("found \"status_incomplete_timeout\" in cluster messages".into())
    );
}

#[test]
fn a_status_without_processes_is_a_timeout_only_when_processes_are_required() {
    let mut v: serde_json::Value = serde_json::from_str(strip_warnings(DOUBLE).unwrap()).unwrap();
    v["cluster"]["processes"] = serde_json::json!({});
    assert!(matches!(
        parse(&v.to_string(), true),
        Err(StatusError::Timeout(_))
    ));
    assert!(parse(&v.to_string(), false).is_ok());
}

#[test]
fn configuration_missing_before_configure_new() {
    let s = parse(CONFIGURATION_MISSING, true).unwrap();
    assert!(!s.is_configured());
    assert_eq!(s.cluster.layers.error, "configurationMissing");
    assert_eq!(
        s.cluster.configuration,
        crate::crd::DatabaseConfiguration::default()
    );
    assert_eq!(s.cluster.recovery_state.name, "configuration_never_created");
    assert!(!FdbStatus::configuration_missing().is_configured());
}

#[test]
fn garbage_is_malformed() {
    assert!(matches!(
        parse("ERROR: no cluster file", true),
        Err(StatusError::Malformed(_))
    ));
    assert!(matches!(
        parse("{not json", true),
        Err(StatusError::Malformed(_))
    ));
}

#[test]
fn the_live_configuration_normalises_to_the_desired_one_of_an_empty_spec() {
    let s = parse(DOUBLE, true).unwrap();
    let spec = crate::crd::DatabaseConfiguration::default();
    assert_eq!(
        s.cluster.configuration.normalized(&spec),
        crate::crd::DatabaseConfiguration::desired(&spec)
    );
}
