//! Table tests of [`super::decide`] and of the pod builder's buggify rules.

use jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::cluster::resources;
use crate::crd::{ProcessClass, ProcessGroupId};

fn cluster(buggify: serde_json::Value) -> FoundationDBCluster {
    serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBCluster",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"version": "7.1.57", "buggify": buggify},
    }))
    .unwrap()
}

fn group(id: &str, terminating: bool) -> ProcessGroupStatus {
    let mut g = ProcessGroupStatus::new(
        ProcessGroupId::new(id),
        ProcessClass::new("storage"),
        Timestamp::UNIX_EPOCH,
    );
    g.process_group_conditions.clear();
    if terminating {
        g.update_condition(
            condition::RESOURCES_TERMINATING,
            true,
            Timestamp::UNIX_EPOCH,
        );
    }
    g
}

/// The pod the builder makes for `id` under `buggify`.
fn built(buggify: serde_json::Value, id: &str) -> Pod {
    resources::pod(&cluster(buggify), &group(id, false), "h")
}

#[test]
fn the_pod_builder_honours_crash_loop_and_no_schedule() {
    let main_args = |p: &Pod| {
        let c = p.spec.as_ref().unwrap().containers.iter();
        let main = c.clone().find(|c| c.name == MAIN_CONTAINER).unwrap();
        let side = c.clone().find(|c| c.name == SIDECAR_CONTAINER).unwrap();
        (
            main.args.clone().unwrap()[0].clone(),
            main.command.clone(),
            side.args.clone().unwrap()[0].clone(),
        )
    };
    let crash = Some(vec![CRASH_LOOP.to_owned()]);
    let plain = built(json!({}), "storage-1");
    assert!(!in_crash_loop(&plain) && !in_no_schedule(&plain));
    assert_eq!(main_args(&plain).0, "--input-dir");

    let deprecated = built(json!({"crashLoop": ["storage-1"]}), "storage-1");
    assert_eq!(
        main_args(&deprecated),
        (CRASH_LOOP.into(), crash.clone(), "--mode".into())
    );
    let all_main =
        json!({"crashLoopContainers": [{"containerName": "foundationdb", "targets": ["*"]}]});
    assert!(in_crash_loop(&built(all_main.clone(), "log-3")));
    let sidecar = json!({"crashLoopContainers": [{"containerName": "foundationdb-kubernetes-sidecar", "targets": ["storage-1"]}]});
    let p = built(sidecar.clone(), "storage-1");
    assert_eq!(main_args(&p).0, "--input-dir");
    assert_eq!(main_args(&p).2, CRASH_LOOP);
    assert!(in_crash_loop(&p));
    assert!(
        !in_crash_loop(&built(sidecar, "storage-2")),
        "another group"
    );

    let ns = built(json!({"noSchedule": ["storage-1"]}), "storage-1");
    assert!(in_no_schedule(&ns) && !in_crash_loop(&ns));
    assert!(!in_no_schedule(&built(
        json!({"noSchedule": ["storage-1"]}),
        "storage-2"
    )));
}

#[test]
fn pods_whose_buggify_state_differs_are_recreated() {
    let crash_one =
        json!({"crashLoopContainers": [{"containerName": "foundationdb", "targets": ["s1"]}]});
    let crash_all = json!({"crashLoop": ["*"]});
    let no_sched = json!({"noSchedule": ["s1"]});
    // (case, spec buggify, pod built under, group terminating, expected reason)
    type Case = (
        &'static str,
        serde_json::Value,
        serde_json::Value,
        bool,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "nothing asked, nothing done",
            json!({}),
            json!({}),
            false,
            None,
        ),
        (
            "crash loop asked",
            crash_one.clone(),
            json!({}),
            false,
            Some("crash loop requested"),
        ),
        (
            "crash loop already on",
            crash_one.clone(),
            crash_one.clone(),
            false,
            None,
        ),
        (
            "crash loop for all",
            crash_all.clone(),
            json!({}),
            false,
            Some("crash loop requested"),
        ),
        (
            "crash loop lifted",
            json!({}),
            crash_all.clone(),
            false,
            Some("crash loop lifted"),
        ),
        (
            "other group's crash loop",
            json!({"crashLoop": ["s2"]}),
            json!({}),
            false,
            None,
        ),
        (
            "no-schedule asked",
            no_sched.clone(),
            json!({}),
            false,
            Some("no-schedule requested"),
        ),
        (
            "no-schedule already on",
            no_sched.clone(),
            no_sched.clone(),
            false,
            None,
        ),
        (
            "no-schedule lifted",
            json!({}),
            no_sched.clone(),
            false,
            Some("no-schedule lifted"),
        ),
        (
            "terminating groups are left alone",
            crash_one.clone(),
            json!({}),
            true,
            None,
        ),
        // emptyMonitorConf and the restart/removal lists do not touch the pod.
        (
            "other options",
            json!({"emptyMonitorConf": true, "ignoreDuringRestart": ["s1"], "blockRemoval": ["s1"]}),
            json!({}),
            false,
            None,
        ),
    ];
    for (name, spec, pod_under, terminating, want) in cases {
        let pods: BTreeMap<String, Pod> = [("s1".to_owned(), built(pod_under, "s1"))].into();
        let got = decide(&cluster(spec), &[group("s1", terminating)], &pods);
        let reasons: Vec<&str> = got.iter().map(|r| r.reason).collect();
        assert_eq!(reasons, want.into_iter().collect::<Vec<_>>(), "{name}");
        assert!(
            got.iter().all(|r| r.group == "s1" && r.pod == "c-s1"),
            "{name}"
        );
    }
}

#[test]
fn groups_without_a_pod_are_skipped_and_each_pod_counts_once() {
    let spec = json!({"crashLoop": ["*"], "noSchedule": ["a", "b"]});
    let pods: BTreeMap<String, Pod> = [
        ("a".to_owned(), built(json!({}), "a")),
        ("b".to_owned(), built(json!({"crashLoop": ["*"]}), "b")),
    ]
    .into();
    let got = decide(
        &cluster(spec),
        &[group("a", false), group("b", false), group("c", false)],
        &pods,
    );
    let summary: Vec<(&str, &str)> = got.iter().map(|r| (r.group.as_str(), r.reason)).collect();
    assert_eq!(
        summary,
        vec![
            ("a", "crash loop requested"),
            ("b", "no-schedule requested")
        ]
    );
}
