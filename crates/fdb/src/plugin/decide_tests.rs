use super::*;
use crate::admin::status::{ProcessInfo, ProcessRoleInfo};
use serde_json::json;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).expect("time")
}

fn cluster(status: serde_json::Value) -> FoundationDBCluster {
    serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
        "metadata": {"name": "c1", "namespace": "ns", "generation": 2},
        "spec": {"version": "7.1.57", "processGroupsToRemove": ["storage-9"]},
        "status": status,
    }))
    .expect("cluster")
}

fn healthy(groups: serde_json::Value) -> FoundationDBCluster {
    cluster(json!({
        "health": {"available": true, "fullReplication": true},
        "generations": {"reconciled": 2},
        "processGroups": groups,
    }))
}

fn pod(name: &str, id: &str, phase: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {
            "foundationdb.org/fdb-cluster-name": "c1",
            "foundationdb.org/fdb-process-group-id": id,
            "foundationdb.org/fdb-process-class": "storage"}},
        "spec": {"containers": []},
        "status": {"phase": phase, "containerStatuses": [{"name": "foundationdb", "ready": true,
            "image": "i", "imageID": "", "restartCount": 0}]},
    }))
    .expect("pod")
}

fn text(a: &Analysis) -> Vec<String> {
    a.lines
        .iter()
        .map(|(m, l)| m.render(l).trim_end().to_owned())
        .collect()
}

#[test]
fn a_healthy_cluster_has_only_good_lines() {
    let c = healthy(json!([
        {"processGroupID": "storage-1", "processClass": "storage", "faultDomain": "zone-a"},
        {"processGroupID": "storage-2", "processClass": "storage", "faultDomain": "zone-b"},
        {"processGroupID": "storage-3", "processClass": "storage", "faultDomain": "zone-c"},
    ]));
    let pods = ["1", "2", "3"].map(|n| {
        pod(
            &format!("c1-storage-{n}"),
            &format!("storage-{n}"),
            "Running",
        )
    });
    let a = analyze(&c, &pods, &AnalyzeOptions::default(), t(0));
    assert_eq!(
        text(&a),
        [
            "✔ Cluster is available",
            "✔ Cluster is fully replicated",
            "✔ Cluster is reconciled",
            "✔ ProcessGroups are all in ready condition",
            "✔ Pods are all running and available",
            "Fault Domain Summary for cluster:",
            "✔ storage: Total: 3 fault domains, 3 process groups",
            "",
        ]
    );
    assert!(!a.found_issues);
}

#[test]
fn the_fault_domain_summary_counts_domains_per_class_against_the_redundancy_mode() {
    // double redundancy needs 2 fault domains.
    let c = healthy(json!([
        {"processGroupID": "storage-1", "processClass": "storage", "faultDomain": "zone-a"},
        {"processGroupID": "storage-2", "processClass": "storage", "faultDomain": "zone-a"},
        {"processGroupID": "storage-3", "processClass": "storage", "faultDomain": "zone-b"},
        {"processGroupID": "storage-4", "processClass": "storage", "faultDomain": "zone-c"},
        {"processGroupID": "storage-5", "processClass": "storage", "faultDomain": "zone-c"},
        {"processGroupID": "storage-6", "processClass": "storage", "faultDomain": "zone-c"},
        {"processGroupID": "storage-7", "processClass": "storage", "faultDomain": "zone-d"},
        // Marked for removal, or never scheduled: not counted.
        {"processGroupID": "storage-8", "processClass": "storage", "faultDomain": "zone-e",
         "removalTimestamp": "2024-01-01T00:00:00Z"},
        {"processGroupID": "storage-9", "processClass": "storage"},
        {"processGroupID": "log-1", "processClass": "log", "faultDomain": "zone-a"},
        {"processGroupID": "log-2", "processClass": "log", "faultDomain": "zone-b"},
        {"processGroupID": "cluster_controller-1", "processClass": "cluster_controller",
         "faultDomain": "zone-a"},
    ]));
    let mut lines = Vec::new();
    assert!(
        !fault_domains(&c, &mut lines),
        "one class below the minimum"
    );
    let text: Vec<String> = lines
        .iter()
        .map(|(m, l)| m.render(l).trim_end().to_owned())
        .collect();
    assert_eq!(
        text,
        [
            "Fault Domain Summary for cluster:",
            "✔ storage: Total: 4 fault domains, 7 process groups top 3 fault domains: zone-c: 3 zone-a: 2 zone-b: 1",
            "⚠ log: Total: 2 fault domains, 2 process groups",
            "✖ cluster_controller: Total: 1 fault domains, 1 process groups",
        ]
    );

    // No fault domain known at all: a warning, counted as an issue (as upstream).
    let unknown = healthy(json!([{"processGroupID": "storage-1", "processClass": "storage"}]));
    let mut lines = Vec::new();
    assert!(!fault_domains(&unknown, &mut lines));
    assert_eq!(
        lines,
        [(
            Mark::Warn,
            "Could not fetch fault domain information for cluster".to_owned()
        )]
    );
}

#[test]
fn conditions_removals_and_pods_are_reported_and_fixed_as_upstream() {
    let c = cluster(json!({
        "generations": {"reconciled": 1},
        "processGroups": [
            {"processGroupID": "storage-1", "processClass": "storage",
             "processGroupConditions": [{"type": "MissingProcesses", "timestamp": 1_700_000_000}]},
            {"processGroupID": "storage-2", "processClass": "storage",
             "processGroupConditions": [{"type": "IncorrectCommandLine", "timestamp": 1_700_000_000}]},
            {"processGroupID": "storage-3", "processClass": "storage",
             "removalTimestamp": "2024-01-01T00:00:00Z"},
        ],
    }));
    let mut stray = pod("c1-storage-7", "storage-7", "Pending");
    stray.status.as_mut().unwrap().container_statuses = None;
    let pods = [
        pod("c1-storage-1", "storage-1", "Running"),
        pod("c1-storage-3", "storage-3", "Failed"),
        stray,
    ];
    let opts = AnalyzeOptions {
        auto_fix: true,
        ignore_conditions: vec!["IncorrectCommandLine".into()],
        ignore_removals: true,
    };
    let a = analyze(&c, &pods, &opts, t(60));
    assert_eq!(
        text(&a),
        [
            "✖ Cluster is not available",
            "✖ Cluster is not fully replicated",
            "✖ Cluster is not reconciled",
            "✖ ProcessGroup: storage-1 has the following condition: MissingProcesses since 2023-11-14T22:13:20Z",
            "⚠ Ignored 1 process groups marked for removal",
            "⚠ Ignored 1 conditions",
            "✖ Pod ns/c1-storage-7 has unexpected Phase Pending with Reason:",
            "✖ Pod ns/c1-storage-7 with the ID storage-7 is not part of the cluster spec status",
            "⚠ Could not fetch fault domain information for cluster",
            "",
        ]
    );
    assert!(a.found_issues);
    // Only the group with a replacement-worthy condition is replaced.
    assert_eq!(a.replace, [ProcessGroupId("storage-1".into())]);
    let listed = analyze(
        &c,
        &pods,
        &AnalyzeOptions {
            ignore_removals: false,
            ..AnalyzeOptions::default()
        },
        t(60),
    );
    assert!(text(&listed).contains(
        &"⚠ ProcessGroup: storage-3 is marked for removal, excluded state: false".to_owned()
    ));
    assert!(listed.replace.is_empty(), "no fixes without --auto-fix");
}

#[test]
fn a_long_failed_container_deletes_its_pod_unless_its_group_is_replaced() {
    let c = healthy(json!([
        {"processGroupID": "storage-1", "processClass": "storage"},
        {"processGroupID": "storage-2", "processClass": "storage",
         "processGroupConditions": [{"type": "PodFailing", "timestamp": 1_700_000_000}]},
    ]));
    let failed = |name: &str, id: &str| {
        let mut p = pod(name, id, "Running");
        p.status.as_mut().unwrap().container_statuses = Some(vec![
            serde_json::from_value(json!({"name": "foundationdb", "ready": false, "image": "i",
                "imageID": "", "restartCount": 3, "state": {"terminated": {"exitCode": 1,
                "finishedAt": "2023-11-14T22:13:20Z"}}}))
            .unwrap(),
        ]);
        p
    };
    let pods = [
        failed("c1-storage-1", "storage-1"),
        failed("c1-storage-2", "storage-2"),
    ];
    let opts = AnalyzeOptions {
        auto_fix: true,
        ..AnalyzeOptions::default()
    };
    let a = analyze(&c, &pods, &opts, t(31 * 60));
    assert_eq!(a.replace, [ProcessGroupId("storage-2".into())]);
    assert_eq!(a.delete_pods, ["c1-storage-1"]);
    // Not yet 30 minutes: reported, not deleted.
    assert!(analyze(&c, &pods, &opts, t(29 * 60)).delete_pods.is_empty());
}

#[test]
fn unknown_conditions_are_named() {
    assert!(check_conditions(&["MissingPod".into()]).is_ok());
    assert_eq!(
        check_conditions(&["Nope".into(), "MissingPod".into(), "Bad".into()]),
        Err("unknown condition: Nope\nunknown condition: Bad".into())
    );
}

#[test]
fn selection_by_pod_id_class_condition_and_labels() {
    let c = healthy(json!([
        {"processGroupID": "storage-1", "processClass": "storage"},
        {"processGroupID": "storage-2", "processClass": "storage",
         "processGroupConditions": [{"type": "MissingPod", "timestamp": 1}]},
        {"processGroupID": "log-1", "processClass": "log"},
    ]));
    let mut log = pod("c1-log-1", "log-1", "Running");
    log.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("rack".into(), "r1".into());
    let pods = [pod("c1-storage-1", "storage-1", "Running"), log];
    let ids = |v: Vec<ProcessGroupId>| v.into_iter().map(|i| i.0).collect::<Vec<_>>();
    let by_pod = Selection {
        ids: vec!["c1-storage-1".into()],
        ..Selection::default()
    };
    assert_eq!(ids(select(&c, &pods, &by_pod).unwrap()), ["storage-1"]);
    let by_id = Selection {
        ids: vec!["storage-2".into()],
        use_process_group_id: true,
        ..Selection::default()
    };
    assert_eq!(ids(select(&c, &pods, &by_id).unwrap()), ["storage-2"]);
    let by_class = Selection {
        ids: vec!["ignored".into()],
        process_class: Some("storage".into()),
        ..Selection::default()
    };
    assert_eq!(
        ids(select(&c, &pods, &by_class).unwrap()),
        ["storage-1", "storage-2"]
    );
    let by_condition = Selection {
        conditions: vec!["MissingPod".into()],
        ..Selection::default()
    };
    assert_eq!(
        ids(select(&c, &pods, &by_condition).unwrap()),
        ["storage-2"]
    );
    let by_labels = Selection {
        match_labels: BTreeMap::from([("rack".into(), "r1".into())]),
        ..Selection::default()
    };
    assert_eq!(ids(select(&c, &pods, &by_labels).unwrap()), ["log-1"]);
    let stranger = Selection {
        ids: vec!["other-pod".into()],
        ..Selection::default()
    };
    assert_eq!(
        select(&c, &pods, &stranger),
        Err("pod \"other-pod\" is not a pod of cluster \"c1\"".into())
    );
    let unknown_id = Selection {
        ids: vec!["storage-9".into()],
        use_process_group_id: true,
        ..Selection::default()
    };
    assert!(select(&c, &pods, &unknown_id).is_err());
}

#[test]
fn the_removal_list_only_grows() {
    let c = healthy(json!([]));
    let ids = [
        ProcessGroupId("storage-9".into()),
        ProcessGroupId("storage-1".into()),
    ];
    assert_eq!(
        removal_list(&c, &ids, true),
        Some(vec![
            ProcessGroupId("storage-9".into()),
            ProcessGroupId("storage-1".into())
        ])
    );
    assert_eq!(removal_list(&c, &ids[..1], true), None, "already listed");
    assert_eq!(
        removal_list(&c, &ids[..1], false),
        Some(vec![ProcessGroupId("storage-9".into())])
    );
}

#[test]
fn the_configuration_is_what_the_operator_configures_and_fail_over_swaps_priorities() {
    let c = healthy(json!([]));
    assert_eq!(
        configuration(&c, false).unwrap(),
        "double ssd-2 usable_regions=1 logs=3 resolvers=1 log_routers=-1 remote_logs=-1 proxies=3 regions=[]"
    );
    let mut two: DatabaseConfiguration = serde_json::from_value(json!({
        "regions": [
            {"datacenters": [{"id": "a", "priority": 1}, {"id": "a-sat", "priority": 1, "satellite": 1}],
             "satellite_logs": 3},
            {"datacenters": [{"id": "b", "priority": 0}]},
        ],
    }))
    .unwrap();
    fail_over_regions(&mut two);
    let prio: Vec<(String, i64)> = two
        .regions
        .iter()
        .flat_map(|r| r.data_centers.iter().map(|d| (d.id.clone(), d.priority)))
        .collect();
    assert_eq!(
        prio,
        [("a".into(), 0), ("a-sat".into(), 1), ("b".into(), 1)]
    );
    assert_eq!(two.regions[0].satellite_logs, 3, "satellite settings kept");
    // --update writes the spec's own configuration failed over, only when that changes it.
    assert_eq!(updated_configuration(&c, false), None);
    assert_eq!(
        updated_configuration(&c, true),
        None,
        "one region: nothing to swap"
    );
    let mut ha = healthy(json!([]));
    ha.spec.database_configuration = serde_json::from_value(json!({
        "redundancy_mode": "triple",
        "regions": [{"datacenters": [{"id": "a", "priority": 1}]},
                    {"datacenters": [{"id": "b", "priority": 0}]}],
    }))
    .unwrap();
    let updated = updated_configuration(&ha, true).expect("priorities swap");
    assert_eq!(
        updated.redundancy_mode, "triple",
        "the spec's own fields, not the desired form"
    );
    assert_eq!(
        updated.role_counts,
        ha.spec.database_configuration.role_counts
    );
    assert_eq!(updated.regions[0].data_centers[0].priority, 0);
    assert_eq!(updated.regions[1].data_centers[0].priority, 1);
}

fn process(id: &str, excluded: bool, roles: &[(&str, i64)]) -> ProcessInfo {
    ProcessInfo {
        address: format!("10.0.0.{}:4501", id.len()),
        excluded,
        locality: BTreeMap::from([("instance_id".to_owned(), id.to_owned())]),
        roles: roles
            .iter()
            .map(|(r, b)| ProcessRoleInfo {
                role: (*r).to_owned(),
                stored_bytes: *b,
                ..ProcessRoleInfo::default()
            })
            .collect(),
        ..ProcessInfo::default()
    }
}

#[test]
fn exclusions_list_stateful_roles_of_excluded_processes_with_an_estimate() {
    let mut status = FdbStatus::default();
    for (k, p) in [
        (
            "a",
            process("storage-2", true, &[("storage", 3 * 1024 * 1024)]),
        ),
        ("b", process("storage-1", true, &[])),
        ("c", process("storage-3", false, &[("storage", 5)])),
        (
            "d",
            process("log-1", true, &[("log", 2048), ("coordinator", 0)]),
        ),
    ] {
        status.cluster.processes.insert(k.into(), p);
    }
    let (ongoing, done) = exclusions(&status, 100, true);
    let ids: Vec<&str> = ongoing.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["log-1", "storage-2"]);
    assert!(done.is_empty());
    let (_, done) = exclusions(&status, 100, false);
    assert_eq!(done, ["storage-1 is fully excluded"]);

    let now = &ongoing[1];
    assert_eq!(
        exclusion_line(now, None),
        "storage-2:\t 3.00Mi are left - estimate: N/A\n"
    );
    let before = Exclusion {
        id: "storage-2".into(),
        stored_bytes: 4 * 1024 * 1024,
        at: 90,
    };
    // 1 MiB in 10 s: 3 MiB left take 30 s.
    assert_eq!(
        exclusion_line(now, Some(&before)),
        "storage-2:\t 3.00Mi are left - estimate: 30s\n"
    );
    // No progress: no estimate (upstream divided by zero).
    let stalled = Exclusion {
        stored_bytes: now.stored_bytes,
        ..before
    };
    assert!(exclusion_line(now, Some(&stalled)).ends_with("estimate: N/A\n"));
    assert_eq!(pretty_bytes(512), "512.00");
    assert_eq!(pretty_bytes(1536), "1.50Ki");
}

#[test]
fn addresses_of_the_chosen_groups() {
    let mut status = FdbStatus::default();
    status
        .cluster
        .processes
        .insert("x".into(), process("storage-1", false, &[]));
    status
        .cluster
        .processes
        .insert("y".into(), process("log-12", false, &[]));
    assert_eq!(
        addresses_of(&status, &[ProcessGroupId("storage-1".into())]),
        ["10.0.0.9:4501"]
    );
}

#[test]
fn kubectl_arguments_and_the_operator_version() {
    assert_eq!(
        restart_argv("ns", "c1-storage-1").join(" "),
        "exec -n ns c1-storage-1 -c foundationdb -- /bin/bash -c pkill fdbserver || true"
    );
    assert_eq!(
        status_argv("ns", "p").join(" "),
        "exec -n ns p -c foundationdb -- fdbcli --exec status json"
    );
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "op", "namespace": "ns"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "manager", "image": "foundationdb/fdb-kubernetes-operator:v2.3.0"}]}}},
    }))
    .unwrap();
    assert_eq!(operator_version(&d, "manager").unwrap(), "v2.3.0");
    assert_eq!(
        operator_version(&d, "other"),
        Err("could not find container: other in ns/op".into())
    );
}

#[test]
fn buggify_lists_add_in_order_clear_and_clean() {
    let ids = |v: &[&str]| {
        v.iter()
            .map(|s| ProcessGroupId::new(*s))
            .collect::<Vec<_>>()
    };
    let list = ids(&["a", "b"]);
    assert_eq!(
        edit_list(&list, &ids(&["c", "a"]), ListEdit::Add),
        ids(&["a", "b", "c"])
    );
    assert_eq!(
        edit_list(&list, &ids(&["a", "z"]), ListEdit::Clear),
        ids(&["b"])
    );
    assert!(edit_list(&list, &[], ListEdit::Clean).is_empty());

    let entry = |name: &str, targets: &[&str]| CrashLoopContainerObject {
        container_name: name.into(),
        targets: ids(targets),
    };
    let containers = vec![entry("foundationdb", &["a"])];
    assert_eq!(
        edit_crash_loop(&containers, "sidecar", &ids(&["b"]), ListEdit::Add),
        vec![entry("foundationdb", &["a"]), entry("sidecar", &["b"])],
        "a new container gets its entry"
    );
    assert_eq!(
        edit_crash_loop(&containers, "sidecar", &ids(&["a"]), ListEdit::Clear),
        containers,
        "clearing a container without entry changes nothing"
    );
    assert_eq!(
        edit_crash_loop(&containers, "foundationdb", &[], ListEdit::Clean),
        vec![entry("foundationdb", &[])],
        "cleaning keeps the entry, as upstream's"
    );
}

#[test]
fn fix_coordinator_ips_takes_each_coordinators_pod_ip_or_last_known_address() {
    let c = cluster(json!({
        "connectionString": "c1:gen1@127.2.0.1:4501,127.2.0.2:4501:tls,127.2.0.3:4501",
        "processGroups": [
            // The coordinator's IP is the group's second address (upstream only looked at the first).
            {"processGroupID": "storage-1", "processClass": "storage", "addresses": ["127.9.9.9", "127.2.0.1"]},
            {"processGroupID": "log-1", "processClass": "log", "addresses": ["127.2.0.2", "127.2.1.2"]},
        ],
    }));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "c1-storage-1"},
        "status": {"podIPs": [{"ip": "127.3.0.1"}]},
    }))
    .unwrap();
    let fix = fix_coordinator_ips(&c, &[pod]).unwrap();
    assert_eq!(
        fix.connection_string,
        "c1:gen1@127.3.0.1:4501,127.2.1.2:4501:tls,127.2.0.3:4501"
    );
    assert_eq!(
        fix.lines,
        [
            "127.2.0.1:4501 is associated with process group: storage-1",
            "Update the coordinator address for 127.2.0.1 to new IP address: 127.3.0.1",
            "127.2.0.2:4501 is associated with process group: log-1",
            "Pod for process group log-1 not found will try to read information from FoundationDBCluster status",
            "ProcessGroup for 127.2.0.3:4501 is missing in the FoundationDBCluster status, coordinator address will not be updated",
        ]
    );
    assert!(
        fix_coordinator_ips(&cluster(json!({})), &[]).is_err(),
        "no connection string"
    );
    assert_eq!(
        fix_cluster_file_argv("ns", "p", "c1:g@1.2.3.4:4501")
            .last()
            .unwrap(),
        "echo c1:g@1.2.3.4:4501 > /var/fdb/data/fdb.cluster && pkill fdbserver"
    );
}

#[test]
fn exec_runs_the_command_or_bash_in_the_main_container() {
    let cmd = vec![
        "fdbcli".to_owned(),
        "--exec".to_owned(),
        "status minimal".to_owned(),
    ];
    assert_eq!(
        exec_argv("ns", "c1-log-1", &cmd, false),
        [
            "exec",
            "-i",
            "-n",
            "ns",
            "c1-log-1",
            "-c",
            "foundationdb",
            "--",
            "fdbcli",
            "--exec",
            "status minimal"
        ]
    );
    assert_eq!(
        exec_argv("ns", "c1-log-1", &[], true),
        [
            "exec",
            "-i",
            "-t",
            "-n",
            "ns",
            "c1-log-1",
            "-c",
            "foundationdb",
            "--",
            "bash"
        ]
    );
}

#[test]
fn pods_named_without_a_cluster_are_grouped_by_their_cluster_label() {
    let label = "foundationdb.org/fdb-cluster-name";
    let mut other = pod("c2-log-1", "log-1", "Running");
    other.labels_mut().insert(label.into(), "c2".into());
    let pods = [
        other,
        pod("c1-storage-2", "storage-2", "Running"),
        pod("c1-storage-1", "storage-1", "Running"),
        pod("c1-storage-2", "storage-2", "Running"),
    ];
    let groups = group_by_cluster(&pods, label).expect("grouped");
    assert_eq!(
        groups.into_iter().collect::<Vec<_>>(),
        [
            (
                "c1".to_owned(),
                vec!["c1-storage-2".to_owned(), "c1-storage-1".to_owned()]
            ),
            ("c2".to_owned(), vec!["c2-log-1".to_owned()]),
        ],
        "clusters in name order, pods as given, once"
    );
    assert_eq!(
        group_by_cluster(&pods, "team"),
        Err("no cluster-label 'team' found for pod 'c2-log-1'".into())
    );
}

#[test]
fn only_pod_names_select_across_clusters() {
    let names = Selection {
        ids: vec!["c1-storage-1".into()],
        ..Selection::default()
    };
    assert_eq!(check_cross_cluster(&names), Ok(()));
    let refused = [
        Selection {
            process_class: Some("log".into()),
            ..Selection::default()
        },
        Selection {
            conditions: vec!["MissingProcesses".into()],
            ..names.clone()
        },
        Selection {
            match_labels: [("a".to_owned(), "b".to_owned())].into(),
            ..names.clone()
        },
    ];
    for sel in refused {
        assert!(
            check_cross_cluster(&sel).is_err_and(|e| e.contains("incompatible with process-class")),
            "{sel:?}"
        );
    }
    let ids = Selection {
        use_process_group_id: true,
        ..names.clone()
    };
    assert!(check_cross_cluster(&ids).is_err_and(|e| e.contains("pass -c")));
    assert_eq!(
        check_cross_cluster(&Selection::default()),
        Err("podNames will not be selected without cluster specification".into())
    );
}
