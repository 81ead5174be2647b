use super::*;
use crate::crd::{FoundationDBClusterSpec, ProcessGroupId};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

fn cluster(mode: &str) -> FoundationDBCluster {
    let mut c = FoundationDBCluster::new(
        "c",
        FoundationDBClusterSpec {
            version: "7.1.57".into(),
            ..Default::default()
        },
    );
    c.spec.automation_options.deletion_mode = mode.into();
    c
}

fn group(id: &str, zone: &str, conditions: &[&str]) -> ProcessGroupStatus {
    let id = ProcessGroupId::new(id);
    let mut g = ProcessGroupStatus::new(id.clone(), id.process_class(), t(100));
    g.process_group_conditions.clear();
    for c in conditions {
        g.update_condition(c, true, t(100));
    }
    g.fault_domain = zone.into();
    g
}

/// The group's pod, current (the desired spec hash) or `outdated`, created at 0.
fn pod(c: &FoundationDBCluster, g: &ProcessGroupStatus, outdated: bool) -> Pod {
    let mut p = resources::pod(c, g, "cm");
    if outdated {
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(resources::LAST_SPEC_KEY.into(), "old".into());
    }
    p.metadata.creation_timestamp = Some(Time(t(0)));
    p
}

struct Case {
    name: &'static str,
    mode: &'static str,
    groups: Vec<(ProcessGroupStatus, Option<bool>)>,
    want: Plan,
}

fn delete(ids: &[&str]) -> Plan {
    Plan::Delete(
        ids.iter()
            .map(|id| (id.to_string(), format!("c-{}", id)))
            .collect(),
    )
}

#[test]
fn plan_table() {
    use condition::*;
    let s = |id, zone| group(id, zone, &[]);
    #[rustfmt::skip]
    let cases = vec![
        Case { name: "all current", mode: "", groups: vec![(s("storage-1", "a"), Some(false)), (s("storage-2", "b"), Some(false))], want: Plan::Nothing },
        Case { name: "zone mode takes one zone", mode: "", groups: vec![(s("storage-1", "a"), Some(true)), (s("storage-2", "a"), Some(true)), (s("storage-3", "b"), Some(true))], want: delete(&["storage-1", "storage-2"]) },
        Case { name: "process-group mode takes one pod", mode: "ProcessGroup", groups: vec![(s("storage-1", "a"), Some(true)), (s("storage-2", "a"), Some(true))], want: delete(&["storage-1"]) },
        Case { name: "all mode takes everything", mode: "All", groups: vec![(s("storage-1", "a"), Some(true)), (s("storage-3", "b"), Some(true))], want: delete(&["storage-1", "storage-3"]) },
        Case { name: "none mode refuses", mode: "None", groups: vec![(s("storage-1", "a"), Some(true))], want: Plan::Disabled(vec!["storage-1".into()]) },
        Case { name: "logs are replaced, not recreated (default strategy)", mode: "", groups: vec![(s("log-1", "a"), Some(true))], want: Plan::Nothing },
        Case { name: "a pod missing for a moment holds the rollout", mode: "", groups: vec![(group("storage-1", "a", &[MISSING_POD]), None), (s("storage-2", "b"), Some(true))], want: Plan::Wait("the pod of storage-1 is being recreated".into()) },
        Case { name: "a pending pod is skipped", mode: "", groups: vec![(group("storage-1", "a", &[POD_PENDING]), Some(true)), (s("storage-2", "b"), Some(true))], want: delete(&["storage-2"]) },
        Case { name: "removed groups are left to removal", mode: "", groups: vec![({ let mut g = s("storage-1", "a"); g.mark_for_removal(t(1)); g }, Some(true))], want: Plan::Nothing },
    ];
    for case in cases {
        let c = cluster(case.mode);
        let mut groups = Vec::new();
        let mut pods = BTreeMap::new();
        for (g, p) in case.groups {
            if let Some(outdated) = p {
                pods.insert(g.process_group_id.to_string(), pod(&c, &g, outdated));
            }
            groups.push(g);
        }
        assert_eq!(
            plan(&c, &groups, &pods, &BTreeMap::new(), t(150), ""),
            case.want,
            "{}",
            case.name
        );
    }
}

#[test]
fn delete_strategy_recreates_logs_too_and_zone_limits_hold() {
    let mut c = cluster("");
    c.spec.automation_options.pod_update_strategy = "Delete".into();
    let g = group("log-1", "a", &[]);
    let pods = BTreeMap::from([("log-1".to_string(), pod(&c, &g, true))]);
    assert_eq!(
        plan(
            &c,
            std::slice::from_ref(&g),
            &pods,
            &BTreeMap::new(),
            t(150),
            ""
        ),
        delete(&["log-1"])
    );
    c.spec.max_zones_with_unavailable_pods = Some(0);
    let down = group("storage-2", "b", &[condition::POD_FAILING]);
    let mut pods = pods;
    pods.insert("storage-2".into(), pod(&c, &down, false));
    assert_eq!(
        plan(&c, &[g, down], &pods, &BTreeMap::new(), t(150), ""),
        Plan::Wait("1 zones have unavailable pods".into())
    );
}

#[test]
fn zones_with_storage_wait_while_another_zone_is_in_maintenance() {
    let c = cluster("");
    let groups = vec![
        group("storage-1", "a", &[]),
        group("storage-2", "b", &[]),
        group("stateless-1", "c", &[]),
    ];
    let pods: BTreeMap<String, Pod> = groups
        .iter()
        .map(|g| (g.process_group_id.to_string(), pod(&c, g, true)))
        .collect();
    let run = |zone: &str| plan(&c, &groups, &pods, &BTreeMap::new(), t(150), zone);
    assert_eq!(
        run(""),
        delete(&["storage-1"]),
        "no maintenance: first zone"
    );
    assert_eq!(
        run("b"),
        delete(&["storage-2"]),
        "the zone in maintenance goes on"
    );
    // Stateless pods are replaced by the default strategy, so only storage zones are left.
    assert_eq!(run("x"), Plan::Wait("zone x is in maintenance".into()));
    assert_eq!(
        run("unknown"),
        Plan::Wait("zone unknown is in maintenance".into())
    );
    let mut all = cluster("All");
    all.spec.automation_options.pod_update_strategy = "Delete".into();
    let got = plan(&all, &groups, &pods, &BTreeMap::new(), t(150), "x");
    assert_eq!(
        got,
        delete(&["storage-1", "storage-2", "stateless-1"]),
        "mode All ignores it"
    );
}

#[test]
fn maintenance_targets_are_the_storage_groups_when_enabled() {
    let groups = vec![group("storage-1", "a", &[]), group("log-1", "a", &[])];
    let chosen: Vec<(String, String)> = ["storage-1", "log-1"]
        .iter()
        .map(|id| (id.to_string(), format!("c-{id}")))
        .collect();
    let with = |mode: &str, on: Option<bool>| {
        let mut c = cluster(mode);
        c.spec
            .automation_options
            .maintenance_mode_options
            .use_maintenance_mode_checker = on;
        maintenance_targets(&c, &groups, &chosen)
    };
    let want = Some(("a".to_string(), vec!["storage-1".to_string()]));
    assert_eq!(with("", Some(true)), want, "Zone (default)");
    assert_eq!(with("ProcessGroup", Some(true)), want);
    assert_eq!(with("All", Some(true)), None, "mode All");
    assert_eq!(with("", None), None, "off by default");
    assert_eq!(with("", Some(false)), None);
    let mut c = cluster("");
    c.spec
        .automation_options
        .maintenance_mode_options
        .use_maintenance_mode_checker = Some(true);
    let logs_only = [("log-1".to_string(), "c-log-1".to_string())];
    assert_eq!(
        maintenance_targets(&c, &groups, &logs_only),
        None,
        "no storage pod"
    );
    let unknown = [group("storage-1", "", &[])];
    assert_eq!(
        maintenance_targets(&c, &unknown, &chosen),
        None,
        "zone not known yet"
    );
}
