use serde_json::json;

use super::*;

fn cluster(spec: Value, connection_string: &str) -> FoundationDBCluster {
    serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
        "metadata": {"name": "c1", "namespace": "ns"},
        "spec": spec,
        "status": {"connectionString": connection_string},
    }))
    .expect("cluster")
}

fn pod(name: &str, class: &str, ip: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"foundationdb.org/fdb-process-class": class}},
        "status": {"phase": "Running", "podIP": ip},
    }))
    .expect("pod")
}

fn status(available: bool, healthy: bool, quorum: bool) -> FdbStatus {
    serde_json::from_value(json!({"client": {
        "database_status": {"available": available, "healthy": healthy},
        "coordinators": {"quorum_reachable": quorum},
    }}))
    .expect("status")
}

#[test]
fn only_a_database_without_quorum_is_recovered() {
    let cases = [
        (
            status(true, true, true),
            Err("cluster is available, will abort any further actions"),
        ),
        (
            status(false, true, true),
            Err("cluster is healthy, will abort any further actions"),
        ),
        (
            status(false, false, true),
            Err("quorum of coordinators are reachable, will abort any further actions"),
        ),
        (status(false, false, false), Ok(())),
    ];
    for (s, want) in cases {
        assert_eq!(check_should_recover(&s), want.map_err(str::to_owned));
    }
}

// A two-region cluster: the recovery counts coordinators for one region (3, not 9).
const SPEC: &str = r#"{"version": "7.1.57", "dataCenter": "primary",
    "routing": {"useDNSInClusterFile": false},
    "databaseConfiguration": {"usable_regions": 2, "regions": [
        {"datacenters": [{"id": "primary", "priority": 1}]},
        {"datacenters": [{"id": "remote"}]}]}}"#;

#[test]
fn survivors_are_kept_and_stateful_candidates_fill_up_in_order() {
    // double redundancy: 3 coordinators; one survives (10.0.0.2), two are new.
    let c = cluster(
        serde_json::from_str(SPEC).unwrap(),
        "c1:gen1@10.0.0.1:4501,10.0.0.2:4501,10.0.0.3:4501",
    );
    let running = [
        pod("c1-stateless-1", "stateless", "10.0.1.1"),
        pod("c1-storage-1", "storage", "10.0.1.2"),
        pod("c1-log-1", "log", "10.0.0.2"),
        pod("c1-log-2", "log", ""),
        pod("c1-storage-2", "storage", "10.0.1.3"),
        pod("c1-storage-3", "storage", "10.0.1.4"),
    ];
    let p = plan(&c, &running).expect("plan");
    assert_eq!(p.source, "c1-log-1");
    assert_eq!(
        p.connection_string,
        "c1:gen1@10.0.0.2:4501,10.0.1.2:4501,10.0.1.3:4501"
    );
    assert_eq!(
        p.new_coordinators,
        [
            ("c1-storage-1".to_owned(), ProcessClass::new("storage")),
            ("c1-storage-2".to_owned(), ProcessClass::new("storage")),
        ]
    );
    assert!(
        p.lines
            .contains(&"Found no public IPs for pod: c1-log-2".to_owned())
    );
    assert!(
        p.lines
            .contains(&"Found coordinator for cluster c1-log-1 address 10.0.0.2".to_owned())
    );
}

#[test]
fn tls_coordinators_get_tls_addresses_and_dns_names_are_matched() {
    let c = cluster(
        json!({"version": "7.1.57", "routing": {"useDNSInClusterFile": true}}),
        "c1:gen1@c1-log-1.c1.ns.svc.cluster.local:4500:tls,10.9.9.9:4500:tls,10.9.9.8:4500:tls",
    );
    let running = [
        pod("c1-log-1", "log", "10.0.0.1"),
        pod("c1-storage-1", "storage", "10.0.0.2"),
        pod("c1-storage-2", "storage", "10.0.0.3"),
    ];
    let p = plan(&c, &running).expect("plan");
    assert_eq!(
        p.connection_string,
        "c1:gen1@c1-log-1.c1.ns.svc.cluster.local:4500:tls,\
         c1-storage-1.c1.ns.svc.cluster.local:4500:tls,\
         c1-storage-2.c1.ns.svc.cluster.local:4500:tls"
    );
}

#[test]
fn without_a_running_coordinator_or_enough_candidates_nothing_is_planned() {
    let c = cluster(
        serde_json::from_str(SPEC).unwrap(),
        "c1:gen1@10.0.0.1:4501,10.0.0.2:4501,10.0.0.3:4501",
    );
    assert_eq!(
        plan(&c, &[pod("c1-storage-1", "storage", "10.0.1.2")]),
        Err("could not find any running coordinator for this cluster".into())
    );
    assert_eq!(
        plan(
            &c,
            &[
                pod("c1-log-1", "log", "10.0.0.1"),
                pod("c1-storage-1", "storage", "10.0.1.2"),
                pod("c1-stateless-1", "stateless", "10.0.1.3"),
            ]
        ),
        Err("not enough coordinator candidates: need 2, have 1".into())
    );
    let broken = cluster(serde_json::from_str(SPEC).unwrap(), "");
    assert!(plan(&broken, &[]).is_err());
}

#[test]
fn the_single_region_patch_keeps_only_the_own_data_center() {
    let c = cluster(serde_json::from_str(SPEC).unwrap(), "c1:g@1.1.1.1:4501");
    assert_eq!(
        single_region_patch(&c),
        json!({"spec": {
            "databaseConfiguration": {"usable_regions": 1,
                "regions": [{"datacenters": [{"id": "primary"}]}]},
            "seedConnectionString": null}})
    );
}

#[test]
fn target_data_dirs_follow_the_image_type_and_servers_per_pod() {
    let unified = cluster(json!({"version": "7.1.57"}), "");
    let split = cluster(
        json!({"version": "7.1.57", "imageType": "split", "storageServersPerPod": 2}),
        "",
    );
    let (storage, log) = (ProcessClass::new("storage"), ProcessClass::new("log"));
    let cases = [
        (&unified, "/var/fdb/data/1", &storage, "/var/fdb/data/1"),
        (&unified, "/var/fdb/data", &log, "/var/fdb/data/1"),
        (&split, "/var/fdb/data", &log, "/var/fdb/data"),
        (&split, "/var/fdb/data/2", &log, "/var/fdb/data"),
        (&split, "/var/fdb/data", &storage, "/var/fdb/data/1"),
    ];
    for (c, found, class, want) in cases {
        assert_eq!(target_data_dir(found, c, class), want, "{found} {class:?}");
    }
}

#[test]
fn every_step_runs_in_the_main_container() {
    let cases: [(Vec<String>, &str); 7] = [
        (
            find_coordination_file_argv("ns", "p"),
            "exec -n ns p -c foundationdb -- /bin/bash -c find /var/fdb/data/ -type f -name 'coordination-0.fdq' -print -quit | head -n 1",
        ),
        (
            download_argv("ns", "p", "/var/fdb/data/1/coordination-0.fdq"),
            "exec -n ns p -c foundationdb -- /bin/cp /var/fdb/data/1/coordination-0.fdq /dev/stdout",
        ),
        (
            upload_argv("ns", "p", "/var/fdb/data/1/coordination-1.fdq"),
            "exec -i -n ns p -c foundationdb -- tee /var/fdb/data/1/coordination-1.fdq",
        ),
        (
            restart_from_seed_argv("ns", "p"),
            "exec -n ns p -c foundationdb -- /bin/bash -c pkill fdbserver && rm -f /var/fdb/data/fdb.cluster && pkill fdbserver || true",
        ),
        (
            seed_cluster_file_argv("ns", "p"),
            "exec -n ns p -c foundationdb -- cat /var/dynamic-conf/fdb.cluster",
        ),
        (
            copy_files_argv("ns", "p", "10.0.0.1", false),
            "exec -n ns p -c foundationdb -- /bin/bash -c curl -X POST http://10.0.0.1:8080/copy_files > /dev/null",
        ),
        (
            force_recovery_argv("ns", "p", "primary"),
            "exec -n ns p -c foundationdb -- fdbcli --exec force_recovery_with_data_loss primary",
        ),
    ];
    for (argv, want) in cases {
        assert_eq!(argv.join(" "), want);
    }
    assert!(copy_files_argv("ns", "p", "10.0.0.1", true).last().unwrap().contains(
        "--cacert ${FDB_TLS_CA_FILE} --cert ${FDB_TLS_CERTIFICATE_FILE} --key ${FDB_TLS_KEY_FILE} -k https://10.0.0.1:8080/copy_files"
    ));
}
