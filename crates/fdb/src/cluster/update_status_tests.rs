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
        command_line: line.map(Into::into),
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
