//! Table tests of [`super::choose`]: upstream's limits and defaults for automatic
//! replacements.

use jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::crd::{ProcessClass, condition};

const NOW: i64 = 100_000;

fn cluster(spec: serde_json::Value) -> FoundationDBCluster {
    let mut full = json!({"version": "7.1.57"});
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBCluster",
        "metadata": {"name": "c"},
        "spec": full,
    }))
    .unwrap()
}

/// A group `id` in zone `zone` with an address, failing with `kind` for `age` seconds
/// (no condition when `kind` is empty).
fn group(id: &str, zone: &str, kind: &str, age: i64) -> ProcessGroupStatus {
    let mut g = ProcessGroupStatus::new(
        ProcessGroupId::new(id),
        ProcessClass::new("storage"),
        Timestamp::UNIX_EPOCH,
    );
    g.process_group_conditions.clear();
    g.fault_domain = zone.into();
    g.addresses = vec![format!("127.1.0.{}", id.len())];
    if !kind.is_empty() {
        g.update_condition(kind, true, Timestamp::from_second(NOW - age).unwrap());
    }
    g
}

fn marked(mut g: ProcessGroupStatus, excluded: bool) -> ProcessGroupStatus {
    g.mark_for_removal(Timestamp::UNIX_EPOCH);
    if excluded {
        g.set_exclude(Timestamp::UNIX_EPOCH);
    }
    g
}

fn ids(c: &Choice) -> Vec<String> {
    c.replace.iter().map(|r| r.id.to_string()).collect()
}

fn run(spec: serde_json::Value, groups: &[ProcessGroupStatus], zone: &str, ft: bool) -> Choice {
    choose(
        &cluster(spec),
        groups,
        zone,
        ft,
        Timestamp::from_second(NOW).unwrap(),
    )
}

#[test]
fn failure_time_budget_and_switches() {
    let failed = |id: &str| group(id, id, condition::POD_FAILING, 7201);
    type Case = (
        &'static str,
        serde_json::Value,
        Vec<ProcessGroupStatus>,
        Vec<&'static str>,
        bool,
    );
    let cases: Vec<Case> = vec![
        (
            "healthy groups stay",
            json!({}),
            vec![group("a", "a", "", 0)],
            vec![],
            false,
        ),
        (
            "failed for less than the default 7200 s",
            json!({}),
            vec![group("a", "a", condition::MISSING_PROCESSES, 7199)],
            vec![],
            false,
        ),
        (
            "failed for longer: replaced",
            json!({}),
            vec![failed("a")],
            vec!["a"],
            false,
        ),
        (
            "a condition that does not need replacement",
            json!({}),
            vec![group("a", "a", condition::INCORRECT_COMMAND_LINE, 9999)],
            vec![],
            false,
        ),
        (
            "the default budget is one at a time",
            json!({}),
            vec![failed("a"), failed("b")],
            vec!["a"],
            true,
        ),
        (
            "a removal in flight uses the budget",
            json!({}),
            vec![marked(group("x", "x", "", 0), false), failed("a")],
            vec![],
            true,
        ),
        (
            "an excluded removal does not",
            json!({}),
            vec![marked(group("x", "x", "", 0), true), failed("a")],
            vec!["a"],
            false,
        ),
        (
            "a larger budget",
            json!({"automationOptions": {"replacements": {"maxConcurrentReplacements": 2}}}),
            vec![failed("a"), failed("b"), failed("c")],
            vec!["a", "b"],
            true,
        ),
        (
            "disabled",
            json!({"automationOptions": {"replacements": {"enabled": false}}}),
            vec![failed("a")],
            vec![],
            false,
        ),
        (
            "budget zero",
            json!({"automationOptions": {"replacements": {"maxConcurrentReplacements": 0}}}),
            vec![failed("a")],
            vec![],
            false,
        ),
        (
            "a shorter failure time",
            json!({"automationOptions": {"replacements": {"failureDetectionTimeSeconds": 60}}}),
            vec![group("a", "a", condition::MISSING_PROCESSES, 61)],
            vec!["a"],
            false,
        ),
        (
            "already marked groups are not chosen again",
            json!({"automationOptions": {"replacements": {"maxConcurrentReplacements": 5}}}),
            vec![marked(failed("a"), false), failed("b")],
            vec!["b"],
            false,
        ),
        (
            "crash-looping on purpose",
            json!({"buggify": {"crashLoop": ["a"]}}),
            vec![failed("a"), failed("b")],
            vec!["b"],
            false,
        ),
        (
            "every group crash-loops",
            json!({"buggify": {"crashLoopContainers": [{"containerName": "foundationdb", "targets": ["*"]}]}}),
            vec![failed("a")],
            vec![],
            false,
        ),
        (
            "taints are ignored without taint options",
            json!({}),
            vec![group("a", "a", condition::NODE_TAINT_REPLACING, 999_999)],
            vec![],
            false,
        ),
    ];
    for (name, spec, groups, want, more) in cases {
        let got = run(spec, &groups, "", true);
        assert_eq!(ids(&got), want, "{name}");
        assert_eq!(got.more, more, "{name}: more");
    }
}

#[test]
fn the_maintenance_zone_is_left_alone() {
    let groups = [
        group("a", "zone-a", condition::POD_FAILING, 9000),
        group("b", "zone-b", condition::POD_FAILING, 9000),
    ];
    let got = run(json!({}), &groups, "zone-a", true);
    assert_eq!(ids(&got), ["b"]);
}

#[test]
fn a_group_without_address() {
    let mut g = group("a", "a", condition::MISSING_POD, 9000);
    g.addresses.clear();
    // Locality exclusions (the default from 7.1): replaced and excluded by locality.
    let got = run(json!({}), std::slice::from_ref(&g), "", false);
    assert_eq!(ids(&got), ["a"]);
    assert!(!got.replace[0].skip_exclusion);
    // IP exclusions: only with the desired fault tolerance, and without exclusion.
    let ip = json!({"automationOptions": {"useLocalitiesForExclusion": false}});
    assert!(
        run(ip.clone(), std::slice::from_ref(&g), "", false)
            .replace
            .is_empty()
    );
    let got = run(ip, std::slice::from_ref(&g), "", true);
    assert_eq!(ids(&got), ["a"]);
    assert!(got.replace[0].skip_exclusion);
    assert_eq!(got.replace[0].condition, condition::MISSING_POD);
    assert_eq!(got.replace[0].since, NOW - 9000);
}

#[test]
fn the_earliest_condition_names_the_failure() {
    let mut g = group("a", "a", condition::MISSING_PROCESSES, 8000);
    g.update_condition(
        condition::POD_FAILING,
        true,
        Timestamp::from_second(NOW - 9000).unwrap(),
    );
    let got = run(json!({}), &[g], "", true);
    assert_eq!(got.replace[0].condition, condition::POD_FAILING);
}

#[test]
fn fault_domain_based_budget() {
    let spec =
        json!({"automationOptions": {"replacements": {"faultDomainBasedReplacements": true}}});
    // One fault domain may be replaced at once, but all of its groups.
    let groups = [
        group("a1", "zone-a", condition::POD_FAILING, 9000),
        group("a2", "zone-a", condition::POD_FAILING, 9000),
        group("b1", "zone-b", condition::POD_FAILING, 9000),
    ];
    let got = run(spec.clone(), &groups, "", true);
    assert_eq!(ids(&got), ["a1", "a2"]);
    assert!(got.more);
    // A removal in flight in zone-b: only zone-b's groups now.
    let mut with_flight = vec![marked(group("b0", "zone-b", "", 0), false)];
    with_flight.extend(groups);
    let got = run(spec, &with_flight, "", true);
    assert_eq!(ids(&got), ["b1"]);
    assert!(got.more);
}

fn tainted(id: &str, zone: &str, age: i64) -> ProcessGroupStatus {
    group(id, zone, condition::NODE_TAINT_REPLACING, age)
}

#[test]
fn a_tainted_group_is_replaced_after_the_taint_replacement_time() {
    let spec = |max: serde_json::Value| {
        let mut r = json!({"taintReplacementOptions": [{"key": "*", "durationInSeconds": 0}],
                           "taintReplacementTimeSeconds": 60});
        if !max.is_null() {
            r["maxFaultDomainsWithTaintedProcessGroups"] = max;
        }
        json!({"automationOptions": {"replacements": r}})
    };
    let healthy: Vec<ProcessGroupStatus> = (0..9)
        .map(|i| group(&format!("h{i}"), &format!("z{i}"), "", 0))
        .collect();
    let with = |extra: Vec<ProcessGroupStatus>| {
        let mut all = healthy.clone();
        all.extend(extra);
        all
    };
    // Ten fault domains: 10 % allows one tainted domain.
    let got = run(
        spec(serde_json::Value::Null),
        &with(vec![tainted("t", "zt", 61)]),
        "",
        true,
    );
    assert_eq!(ids(&got), ["t"]);
    assert_eq!(got.replace[0].condition, condition::NODE_TAINT_REPLACING);
    let got = run(
        spec(serde_json::Value::Null),
        &with(vec![tainted("t", "zt", 60)]),
        "",
        true,
    );
    assert!(
        ids(&got).is_empty(),
        "not yet past taintReplacementTimeSeconds"
    );
    // Two tainted domains of eleven: 10 % (one) is exceeded, nothing is replaced.
    let two = with(vec![tainted("t", "zt", 600), tainted("u", "zu", 600)]);
    assert!(ids(&run(spec(serde_json::Value::Null), &two, "", true)).is_empty());
    // A number or a larger percentage allows them (one at a time, the replacement budget).
    let got = run(spec(json!(2)), &two, "", true);
    assert_eq!(ids(&got), ["t"]);
    assert!(got.more);
    assert_eq!(ids(&run(spec(json!("20%")), &two, "", true)), ["t"]);
    // Unparsable: no taint replacement at all, failures still replaced.
    let mixed = with(vec![
        tainted("t", "zt", 600),
        group("f", "zf", condition::POD_FAILING, 9000),
    ]);
    assert_eq!(ids(&run(spec(json!("lots")), &mixed, "", true)), ["f"]);
}

#[test]
fn the_tainted_fault_domain_limit_is_at_least_one() {
    let c = cluster(json!({"automationOptions": {"replacements": {
        "taintReplacementOptions": [{"key": "*", "durationInSeconds": 0}],
        "maxFaultDomainsWithTaintedProcessGroups": "10%"}}}));
    assert_eq!(c.max_fault_domains_with_tainted_process_groups(3), Ok(1));
    assert_eq!(c.max_fault_domains_with_tainted_process_groups(25), Ok(2));
    assert!(
        c.max_fault_domains_with_tainted_process_groups(0).is_ok(),
        "no fault domain known yet"
    );
    let groups = [
        tainted("a", "z1", 10),
        tainted("b", "z1", 10),
        group("c", "z2", "", 0),
    ];
    assert!(
        taint_replacements_allowed(&c, &groups),
        "two groups of one domain count once"
    );
}
