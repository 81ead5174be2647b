use super::*;
use crate::crd::{FoundationDBClusterSpec, ProcessClass, ProcessGroupId};
use k8s_openapi::api::core::v1::{PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

fn group(id: &str, class: &str) -> ProcessGroupStatus {
    ProcessGroupStatus::new(ProcessGroupId::new(id), ProcessClass::new(class), t(100))
}

fn pod(phase: &str, ip: &str, hash: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.annotations =
        Some([(resources::LAST_SPEC_KEY.to_string(), hash.to_string())].into());
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        pod_ip: Some(ip.into()),
        pod_ips: Some(vec![PodIP { ip: ip.into() }]),
        ..Default::default()
    });
    p
}

fn process(excluded: bool) -> ProcessInfo {
    ProcessInfo {
        excluded,
        locality: [("zoneid".to_string(), "zone-a".to_string())].into(),
        ..Default::default()
    }
}

fn kinds(g: &ProcessGroupStatus) -> Vec<&str> {
    let mut k: Vec<&str> = g
        .process_group_conditions
        .iter()
        .map(|c| c.kind.as_str())
        .collect();
    k.sort();
    k
}

#[test]
fn group_conditions_table() {
    let running = pod("Running", "127.1.0.5", "h");
    let pending = pod("Pending", "127.1.0.5", "h");
    let stale = pod("Running", "127.1.0.5", "old");
    let healthy = process(false);
    let excluded = process(true);
    let cases: Vec<(&str, &str, Observed, Vec<&str>)> = vec![
        (
            "new group without anything",
            "storage",
            Observed {
                spec_hash: "h".into(),
                ..Default::default()
            },
            vec!["MissingPVC", "MissingPod", "MissingProcesses"],
        ),
        (
            "stateless needs no PVC",
            "stateless",
            Observed {
                pod: Some(&running),
                status_has_processes: true,
                processes: vec![&healthy],
                spec_hash: "h".into(),
                ..Default::default()
            },
            vec![],
        ),
        (
            "all present",
            "storage",
            Observed {
                pod: Some(&running),
                pvc: true,
                status_has_processes: true,
                processes: vec![&healthy],
                spec_hash: "h".into(),
                ..Default::default()
            },
            vec![],
        ),
        (
            "pod pending",
            "storage",
            Observed {
                pod: Some(&pending),
                pvc: true,
                status_has_processes: true,
                processes: vec![&healthy],
                spec_hash: "h".into(),
                ..Default::default()
            },
            vec!["PodPending"],
        ),
        (
            "spec changed",
            "storage",
            Observed {
                pod: Some(&stale),
                pvc: true,
                status_has_processes: true,
                processes: vec![&healthy],
                spec_hash: "h".into(),
                ..Default::default()
            },
            vec!["IncorrectPodSpec"],
        ),
        (
            "no process yet",
            "storage",
            Observed {
                pod: Some(&running),
                pvc: true,
                status_has_processes: true,
                processes: vec![],
                spec_hash: "h".into(),
                ..Default::default()
            },
            vec!["MissingProcesses"],
        ),
        (
            "process checks need a status",
            "storage",
            Observed {
                pod: Some(&running),
                pvc: true,
                status_has_processes: false,
                processes: vec![],
                spec_hash: "h".into(),
                ..Default::default()
            },
            vec!["MissingProcesses"],
        ),
        (
            "excluded behind our back",
            "storage",
            Observed {
                pod: Some(&running),
                pvc: true,
                status_has_processes: true,
                processes: vec![&excluded],
                spec_hash: "h".into(),
                ..Default::default()
            },
            vec!["ProcessIsMarkedAsExcluded"],
        ),
    ];
    for (name, class, seen, want) in cases {
        let mut g = group("x-1", class);
        update_group(&mut g, &seen, true, t(200));
        assert_eq!(kinds(&g), want, "{name}");
    }
}

#[test]
fn config_map_and_command_line_conditions_table() {
    let mut told = pod("Running", "127.1.0.5", "h");
    told.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(resources::LAST_CONFIG_MAP_KEY.into(), "cm1".into());
    let untold = pod("Running", "127.1.0.5", "h");
    let running = |line: &str, version: &str| ProcessInfo {
        command_line: line.into(),
        version: version.into(),
        ..Default::default()
    };
    let (right, knob, old) = (
        running("fdbserver --a", "7.1.57"),
        running("fdbserver --b", "7.1.57"),
        running("fdbserver --a", "7.1.55"),
    );
    let seen = |pod, p, cm: &str, line: Option<&str>, version: Option<&str>| Observed {
        pod: Some(pod),
        status_has_processes: true,
        processes: vec![p],
        spec_hash: "h".into(),
        config_hash: Some(cm.into()),
        command_lines: line.map(|l| vec![l.to_owned()]).unwrap_or_default(),
        version: version.map(Into::into),
        ..Default::default()
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, Observed, Vec<&str>)> = vec![
        ("all current", seen(&told, &right, "cm1", Some("fdbserver --a"), Some("7.1.57")), vec![]),
        ("config map changed", seen(&told, &right, "cm2", Some("fdbserver --a"), Some("7.1.57")), vec!["IncorrectConfigMap"]),
        ("pod never told", seen(&untold, &right, "cm1", None, None), vec!["IncorrectConfigMap"]),
        ("knob changed", seen(&told, &knob, "cm1", Some("fdbserver --a"), Some("7.1.57")), vec!["IncorrectCommandLine"]),
        ("no substitutions published: not judged", seen(&told, &knob, "cm1", None, Some("7.1.57")), vec![]),
        ("old version", seen(&told, &old, "cm1", Some("fdbserver --a"), Some("7.1.57")), vec!["IncorrectCommandLine"]),
        ("old version during a patch upgrade", seen(&told, &old, "cm1", Some("fdbserver --a"), None), vec![]),
        ("a label the pod lacks", Observed { pod_metadata_missing: true, ..seen(&told, &right, "cm1", None, None) }, vec!["IncorrectPodMetadata"]),
    ];
    for (name, seen, want) in cases {
        let mut g = group("x-1", "stateless");
        update_group(&mut g, &seen, true, t(200));
        assert_eq!(kinds(&g), want, "{name}");
    }
}

#[test]
fn conditions_keep_their_first_timestamp_and_addresses_follow_the_pod() {
    let mut g = group("storage-1", "storage");
    update_group(&mut g, &Observed::default(), true, t(500));
    assert_eq!(g.condition_time("MissingPod"), Some(100));
    let p = pod("Running", "127.1.0.7", "h");
    update_group(
        &mut g,
        &Observed {
            pod: Some(&p),
            pvc: true,
            spec_hash: "h".into(),
            ..Default::default()
        },
        true,
        t(600),
    );
    assert_eq!(g.addresses, vec!["127.1.0.7"]);
}

#[test]
fn removed_and_excluded_groups_show_resources_terminating_once_their_pod_goes() {
    let mut g = group("storage-1", "storage");
    g.mark_for_removal(t(100));
    g.set_exclude(t(100));
    fn seen(p: Option<&Pod>) -> Observed<'_> {
        Observed {
            pod: p,
            pvc: true,
            status_has_processes: true,
            spec_hash: "other".into(),
            ..Default::default()
        }
    }
    let running = pod("Running", "127.1.0.7", "h");
    // Its pod still runs: nothing (and no other condition is gained once excluded).
    update_group(&mut g, &seen(Some(&running)), true, t(200));
    assert!(kinds(&g).is_empty(), "{:?}", kinds(&g));
    // Its pod is being deleted: ResourcesTerminating, timed from then (it paces the next
    // removal).
    let mut deleting = running.clone();
    deleting.metadata.deletion_timestamp = Some(Time(t(300)));
    update_group(&mut g, &seen(Some(&deleting)), true, t(300));
    assert_eq!(kinds(&g), vec!["ResourcesTerminating"]);
    assert_eq!(
        g.condition_time("ResourcesTerminating"),
        Some(t(300).as_second())
    );
    // Its pod gone (the PVC may linger): still terminating, from the first time.
    update_group(&mut g, &seen(None), true, t(400));
    assert_eq!(kinds(&g), vec!["ResourcesTerminating"]);
    assert_eq!(
        g.condition_time("ResourcesTerminating"),
        Some(t(300).as_second())
    );
}

fn cluster() -> FoundationDBCluster {
    let mut c = FoundationDBCluster::new(
        "c",
        FoundationDBClusterSpec {
            version: "7.1.57".into(),
            ..Default::default()
        },
    );
    c.metadata.generation = Some(3);
    c.spec.process_counts.storage = 1;
    c.spec.process_counts.log = -1;
    c.spec.process_counts.stateless = -1;
    c
}

fn converged(c: &FoundationDBCluster) -> FoundationDBClusterStatus {
    FoundationDBClusterStatus {
        configured: true,
        health: ClusterHealth {
            available: true,
            healthy: true,
            ..Default::default()
        },
        database_configuration: c.desired_database_configuration(),
        process_groups: vec![ProcessGroupStatus {
            process_group_conditions: vec![],
            ..group("storage-1", "storage")
        }],
        ..Default::default()
    }
}

#[test]
#[allow(clippy::type_complexity)]
fn reconciliation_table() {
    type Edit = fn(&mut FoundationDBClusterStatus);
    let cases: Vec<(&str, Edit, bool, fn(&ClusterGenerationStatus) -> i64)> = vec![
        ("converged", |_| {}, true, |g| g.reconciled),
        (
            "not configured",
            |s| s.configured = false,
            false,
            |g| g.needs_configuration_change,
        ),
        (
            "missing group",
            |s| s.process_groups.clear(),
            false,
            |g| g.needs_grow,
        ),
        (
            "extra group",
            |s| {
                let extra = ProcessGroupStatus {
                    process_group_conditions: vec![],
                    ..group("storage-2", "storage")
                };
                s.process_groups.push(extra)
            },
            false,
            |g| g.needs_shrink,
        ),
        (
            "unhealthy group",
            |s| s.process_groups[0].update_condition("MissingPod", true, t(1)),
            false,
            |g| g.has_unhealthy_process,
        ),
        (
            "database unavailable",
            |s| s.health.available = false,
            false,
            |g| g.database_unavailable,
        ),
        (
            "configuration differs",
            |s| s.database_configuration.redundancy_mode = "triple".into(),
            false,
            |g| g.needs_configuration_change,
        ),
        (
            "coordinators",
            |s| s.needs_new_coordinators = true,
            false,
            |g| g.needs_coordinator_change,
        ),
        (
            "config map",
            |s| s.has_incorrect_config_map = true,
            false,
            |g| g.needs_monitor_conf_update,
        ),
        (
            "pending removal does not block",
            |s| {
                let mut r = group("storage-9", "storage");
                r.mark_for_removal(t(1));
                r.set_exclude(t(1));
                r.update_condition("ResourcesTerminating", true, t(1));
                s.process_groups.push(r);
            },
            true,
            |g| g.has_pending_removal,
        ),
    ];
    let c = cluster();
    for (name, edit, want, marker) in cases {
        let mut s = converged(&c);
        edit(&mut s);
        let got = check_reconciliation(&c, &mut s);
        assert_eq!(got, want, "{name}");
        assert_eq!(marker(&s.generations), 3, "{name}: marker");
        if !want {
            assert_eq!(s.generations.reconciled, 0, "{name}: reconciled kept");
        }
    }
}

#[test]
fn only_storage_groups_in_the_maintenance_zone_are_left_unchecked() {
    let in_zone = |class: &str, zone: &str| {
        let mut g = group(&format!("{class}-1"), class);
        g.fault_domain = zone.into();
        g
    };
    let cases = [
        ("storage in the zone", in_zone("storage", "z1"), "z1", true),
        ("storage elsewhere", in_zone("storage", "z2"), "z1", false),
        (
            "no zone in maintenance",
            in_zone("storage", "z1"),
            "",
            false,
        ),
        (
            "fault domain not known",
            in_zone("storage", ""),
            "z1",
            false,
        ),
        ("log in the zone", in_zone("log", "z1"), "z1", false),
    ];
    for (name, g, zone, want) in cases {
        assert_eq!(under_maintenance(&g, zone), want, "{name}");
    }
}

fn numbered(group: &str, n: Option<i64>) -> ProcessInfo {
    let mut p = process(false);
    if let Some(n) = n {
        p.locality
            .insert("process_id".to_owned(), format!("{group}-{n}"));
    }
    p
}

#[test]
fn missing_processes_count_every_process_of_the_pod() {
    let (one, two, three) = (
        numbered("storage-1", Some(1)),
        numbered("storage-1", Some(2)),
        numbered("storage-1", Some(3)),
    );
    let legacy = numbered("storage-1", None);
    let other = {
        let mut p = process(false);
        p.locality
            .insert("process_id".to_owned(), "storage-10-2".to_owned());
        p
    };
    // (name, processes, expected per pod, missing)
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<&ProcessInfo>, i64, bool)> = vec![
        ("none", vec![], 1, true),
        ("one of one", vec![&one], 1, false),
        ("one of two", vec![&one], 2, true),
        ("the second only", vec![&two], 2, true),
        ("both", vec![&two, &one], 2, false),
        ("two of three", vec![&one, &three], 3, true),
        ("0 means 1", vec![&one], 0, false),
        ("without process_id: the group's only process", vec![&legacy], 2, false),
        ("another group's process_id is not ours", vec![&one, &other], 2, true),
    ];
    for (name, processes, expected, want) in cases {
        assert_eq!(
            processes_missing(&processes, "storage-1", expected),
            want,
            "{name}"
        );
    }
    assert_eq!(process_number(&two, "storage-1"), Some(2));
    assert_eq!(process_number(&other, "storage-1"), Some(0));
}

#[test]
fn each_process_is_judged_against_its_own_command_line() {
    let mut g = group("storage-1", "storage");
    let p = pod("Running", "127.1.0.5", "h");
    let with_line = |n, line: &str| {
        let mut q = numbered("storage-1", Some(n));
        q.command_line = line.into();
        q
    };
    let (a, b) = (
        with_line(1, "fdbserver --p1"),
        with_line(2, "fdbserver --p2"),
    );
    let swapped = with_line(2, "fdbserver --p1");
    fn observed<'a>(p: &'a Pod, procs: Vec<&'a ProcessInfo>) -> Observed<'a> {
        Observed {
            pod: Some(p),
            pvc: true,
            processes: procs,
            status_has_processes: true,
            spec_hash: "h".into(),
            processes_per_pod: 2,
            command_lines: vec!["fdbserver --p1".into(), "fdbserver --p2".into()],
            ..Default::default()
        }
    }
    let seen = |procs| observed(&p, procs);
    update_group(&mut g, &seen(vec![&a, &b]), true, t(200));
    assert_eq!(kinds(&g), Vec::<&str>::new());
    update_group(&mut g, &seen(vec![&a, &swapped]), true, t(200));
    assert_eq!(kinds(&g), vec!["IncorrectCommandLine"]);
    update_group(&mut g, &seen(vec![&a]), true, t(200));
    assert_eq!(kinds(&g), vec!["MissingProcesses"]);
}

#[test]
fn servers_per_disk_lists_the_desired_count_then_every_other_one_running() {
    let mut c = FoundationDBCluster::new(
        "c",
        FoundationDBClusterSpec {
            version: "7.1.57".into(),
            storage_servers_per_pod: 2,
            ..Default::default()
        },
    );
    let groups = vec![
        group("storage-1", "storage"),
        group("storage-2", "storage"),
        group("log-1", "log"),
        group("stateless-1", "stateless"),
    ];
    let built = |c: &FoundationDBCluster, g: &ProcessGroupStatus| {
        (g.process_group_id.to_string(), resources::pod(c, g, "h"))
    };
    let mut pods: BTreeMap<String, Pod> = groups.iter().map(|g| built(&c, g)).collect();
    assert_eq!(servers_per_disk(&c, &groups, &pods), (vec![2], vec![1]));
    c.spec.storage_servers_per_pod = 1;
    c.spec.log_servers_per_pod = 2;
    let (id, p) = built(&c, &groups[1]);
    pods.insert(id, p);
    assert_eq!(
        servers_per_disk(&c, &groups, &pods),
        (vec![1, 2], vec![2, 1]),
        "storage-1 still runs two, log-1 one"
    );
}

#[test]
fn a_process_running_the_real_monitors_command_line_is_not_incorrect() {
    // What fdb-kubernetes-monitor publishes and runs for a storage pod of cluster `c`
    // (kubernetes.go: the variables its arguments read plus BINARY_DIR; monitor.go:
    // `/usr/bin/fdbserver` for a protocol-compatible version; config.go: the arguments in
    // order after the binary), written out here rather than derived from our own renderer.
    let cluster = FoundationDBCluster::new(
        "c",
        FoundationDBClusterSpec {
            version: "7.1.57".into(),
            ..Default::default()
        },
    );
    let desired = resources::monitor_conf(&cluster, &ProcessClass::new("storage")).to_string();
    let published = r#"{"BINARY_DIR":"/usr/bin","FDB_INSTANCE_ID":"storage-1","FDB_MACHINE_ID":"node-a","FDB_PUBLIC_IP":"127.1.0.5","FDB_ZONE_ID":"node-a"}"#;
    let real = "/usr/bin/fdbserver --cluster_file=/var/fdb/data/fdb.cluster \
        --seed_cluster_file=/var/dynamic-conf/fdb.cluster --public_address=[127.1.0.5]:4501 \
        --class=storage --logdir=/var/log/fdb-trace-logs --loggroup=c \
        --datadir=/var/fdb/data/1 --locality_process_id=storage-1-1 \
        --locality_instance_id=storage-1 --locality_machineid=node-a --locality_zoneid=node-a";
    let mut p = pod("Running", "127.1.0.5", "h");
    let annotations = p.metadata.annotations.as_mut().unwrap();
    annotations.insert(monitor::LAUNCHER_ENVIRONMENT_KEY.into(), published.into());
    annotations.insert(monitor::LAUNCHER_CONFIGURATION_KEY.into(), desired.clone());
    let lines = expected_command_lines(Some(&desired), Some(&p), 1);
    assert_eq!(lines, vec![real.to_owned()]);
    let judged = |line: &str| {
        let process = ProcessInfo {
            command_line: line.into(),
            version: "7.1.57".into(),
            locality: [(
                crate::admin::status::LOCALITY_PROCESS_ID.to_string(),
                "storage-1-1".to_string(),
            )]
            .into(),
            ..Default::default()
        };
        let seen = Observed {
            pod: Some(&p),
            pvc: true,
            status_has_processes: true,
            processes: vec![&process],
            spec_hash: "h".into(),
            command_lines: lines.clone(),
            version: Some("7.1.57".into()),
            ..Default::default()
        };
        let mut g = group("storage-1", "storage");
        g.process_group_conditions.clear();
        update_group(&mut g, &seen, true, t(200));
        kinds(&g).into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    assert_eq!(
        judged(real),
        Vec::<String>::new(),
        "the real monitor's line is correct"
    );
    // The old rule (`binaryPath` from the configuration, `fdbserver`) is not what the
    // monitor runs: such a line is wrong.
    let relative = real.replacen("/usr/bin/fdbserver", "fdbserver", 1);
    assert_eq!(judged(&relative), vec!["IncorrectCommandLine"]);
    // A monitor that published no BINARY_DIR is not judged.
    let mut bare = p.clone();
    bare.metadata.annotations.as_mut().unwrap().insert(
        monitor::LAUNCHER_ENVIRONMENT_KEY.into(),
        published.replace(r#""BINARY_DIR":"/usr/bin","#, ""),
    );
    assert!(expected_command_lines(Some(&desired), Some(&bare), 1).is_empty());
}

#[test]
fn a_status_without_connection_string_adopts_the_config_maps_then_the_seed() {
    let cm = |cs: Option<&str>| ConfigMap {
        data: Some(
            cs.map(|cs| [("cluster-file".to_string(), cs.to_string())].into())
                .unwrap_or_default(),
        ),
        ..Default::default()
    };
    let owned_by = |uid: &str| {
        let mut c = cm(Some("c:g@127.1.0.1:4501"));
        c.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                controller: Some(true),
                uid: uid.into(),
                ..Default::default()
            },
        ]);
        c
    };
    let seed = "old:gen1@127.1.0.9:4501";
    #[rustfmt::skip]
    let cases: Vec<(&str, Option<ConfigMap>, &str, &str)> = vec![
        ("the config map's cluster file first", Some(cm(Some("c:g@127.1.0.1:4501"))), seed, "c:g@127.1.0.1:4501"),
        ("an empty cluster file does not count", Some(cm(Some(""))), seed, seed),
        ("no cluster file: the seed", Some(cm(None)), seed, seed),
        ("no config map: the seed", None, seed, seed),
        ("nothing at all", None, "", ""),
        ("this cluster's config map", Some(owned_by("uid-1")), seed, "c:g@127.1.0.1:4501"),
        ("a deleted namesake's config map does not count", Some(owned_by("uid-0")), seed, seed),
    ];
    for (name, cm, seed, want) in cases {
        assert_eq!(
            adopted_connection_string(cm.as_ref(), "uid-1", seed),
            want,
            "{name}"
        );
    }
}

#[test]
fn a_group_removed_without_exclusion_counts_as_excluded_at_once() {
    use crate::cluster::remove_process_groups::removable;
    let mut c = FoundationDBCluster::new(
        "c",
        FoundationDBClusterSpec {
            version: "7.1.57".into(),
            ..Default::default()
        },
    );
    c.spec.process_groups_to_remove = vec![ProcessGroupId::new("storage-1")];
    c.spec.process_groups_to_remove_without_exclusion = vec![ProcessGroupId::new("stateless-2")];
    let with_ip = |id: &str, class: &str| {
        let mut g = group(id, class);
        g.addresses = vec!["127.1.0.4".into()];
        g
    };
    let mut groups = vec![
        with_ip("storage-1", "storage"),
        with_ip("stateless-2", "stateless"),
        with_ip("log-3", "log"),
    ];
    for g in &mut groups {
        mark_spec_removal(&c, g, t(300));
    }
    let [storage, stateless, log] = &groups[..] else {
        unreachable!()
    };
    // processGroupsToRemove: marked, to be excluded before it goes.
    assert!(storage.is_marked_for_removal() && !storage.is_excluded());
    // processGroupsToRemoveWithoutExclusion (`kubectl fdb remove --exclusion=false`): marked,
    // exclusionSkipped, excluded as of now: ExcludeProcesses has nothing to exclude for it and
    // its resources may go at once.
    assert!(stateless.is_marked_for_removal() && stateless.exclusion_skipped);
    assert_eq!(stateless.exclusion_timestamp, Some(Time(t(300))));
    assert!(!log.is_marked_for_removal());
    let ids: Vec<String> = removable(&c, &groups)
        .iter()
        .map(|g| g.process_group_id.to_string())
        .collect();
    assert_eq!(
        ids,
        vec!["stateless-2"],
        "only the skipped one is removable yet"
    );
    // Marking again (every pass) keeps the first timestamps.
    let mut again = stateless.clone();
    mark_spec_removal(&c, &mut again, t(900));
    assert_eq!(again.exclusion_timestamp, Some(Time(t(300))));
    assert_eq!(again.removal_timestamp, stateless.removal_timestamp);
}
