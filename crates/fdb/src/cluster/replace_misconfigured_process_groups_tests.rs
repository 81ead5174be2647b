//! Table tests of [`super::misconfiguration`] and [`super::choose`].

use jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::crd::ProcessClass;

fn cluster(spec: serde_json::Value) -> FoundationDBCluster {
    let mut full = json!({"version": "7.1.57"});
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    let mut c: FoundationDBCluster = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "spec": full,
    }))
    .unwrap();
    c.status = Some(Default::default());
    c
}

fn group(id: &str, class: &str) -> ProcessGroupStatus {
    let mut g = ProcessGroupStatus::new(
        ProcessGroupId::new(id),
        ProcessClass::new(class),
        Timestamp::UNIX_EPOCH,
    );
    g.process_group_conditions.clear();
    g
}

/// The pod and PVC the operator would have created for `g` under `c`.
fn built(c: &FoundationDBCluster, g: &ProcessGroupStatus) -> (Pod, Option<PersistentVolumeClaim>) {
    (resources::pod(c, g, "h"), resources::pvc(c, g))
}

fn reason(
    c: &FoundationDBCluster,
    g: &ProcessGroupStatus,
    built_by: &FoundationDBCluster,
) -> Option<String> {
    let (pod, pvc) = built(built_by, g);
    misconfiguration(c, g, Some(&pod), pvc.as_ref())
}

#[test]
fn what_needs_a_new_process_group() {
    let base = json!({});
    let (storage, log) = ("storage", "log");
    let image = json!({"mainContainer": {"imageConfigs": [{"baseImage": "registry.example/fdb"}]}});
    // (name, spec now, spec the pod and PVC were built with, class, expected reason)
    type Case = (
        &'static str,
        serde_json::Value,
        serde_json::Value,
        &'static str,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        ("as built", base.clone(), base.clone(), storage, None),
        (
            "a new claim template",
            json!({"processes": {"general": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "2G"}}}}}}}),
            base.clone(),
            storage,
            Some("the PVC spec changed"),
        ),
        (
            "a new prefix",
            json!({"processGroupIDPrefix": "dc1"}),
            base.clone(),
            storage,
            Some("the process group ID should be dc1-storage-1"),
        ),
        (
            "two storage servers per pod where one ran",
            json!({"storageServersPerPod": 2}),
            base.clone(),
            storage,
            Some("the servers per pod changed from 1 to 2"),
        ),
        (
            "back to one storage server per pod",
            base.clone(),
            json!({"storageServersPerPod": 2}),
            storage,
            Some("the servers per pod changed from 2 to 1"),
        ),
        (
            "storageServersPerPod 0 means 1",
            json!({"storageServersPerPod": 0}),
            base.clone(),
            storage,
            None,
        ),
        (
            "logServersPerPod replaces log pods",
            json!({"logServersPerPod": 3}),
            base.clone(),
            log,
            Some("the servers per pod changed from 1 to 3"),
        ),
        (
            "logServersPerPod leaves storage pods alone",
            json!({"logServersPerPod": 3}),
            base.clone(),
            storage,
            None,
        ),
        (
            "a new node selector, storage",
            json!({"processes": {"general": {"podTemplate": {"spec": {"nodeSelector": {"disk": "ssd"}}}}}}),
            base.clone(),
            storage,
            Some("the node selector changed"),
        ),
        (
            "another image: storage pods are recreated, not replaced, by default",
            image.clone(),
            base.clone(),
            storage,
            None,
        ),
        (
            "another image: the transaction system is replaced by default",
            image.clone(),
            base.clone(),
            log,
            Some("the pod update strategy ReplaceTransactionSystem replaces log pods"),
        ),
        (
            "strategy Replace replaces storage too",
            json!({"mainContainer": {"imageConfigs": [{"baseImage": "registry.example/fdb"}]}, "automationOptions": {"podUpdateStrategy": "Replace"}}),
            json!({"automationOptions": {"podUpdateStrategy": "Replace"}}),
            storage,
            Some("the pod update strategy Replace replaces storage pods"),
        ),
        (
            "strategy Delete replaces nothing",
            json!({"mainContainer": {"imageConfigs": [{"baseImage": "registry.example/fdb"}]}, "automationOptions": {"podUpdateStrategy": "Delete"}}),
            json!({"automationOptions": {"podUpdateStrategy": "Delete"}}),
            log,
            None,
        ),
        (
            "more CPU with replaceInstancesWhenResourcesChange",
            json!({"replaceInstancesWhenResourcesChange": true, "processes": {"general": {"podTemplate": {"spec": {"containers": [{"name": "foundationdb", "resources": {"requests": {"cpu": "2"}}}]}}}}}),
            json!({"processes": {"general": {"podTemplate": {"spec": {"containers": [{"name": "foundationdb", "resources": {"requests": {"cpu": "500m"}}}]}}}}}),
            storage,
            Some("the CPU or memory requests increased"),
        ),
        (
            "less memory is no reason",
            json!({"replaceInstancesWhenResourcesChange": true, "processes": {"general": {"podTemplate": {"spec": {"containers": [{"name": "foundationdb", "resources": {"requests": {"memory": "1Gi"}}}]}}}}}),
            json!({"processes": {"general": {"podTemplate": {"spec": {"containers": [{"name": "foundationdb", "resources": {"requests": {"memory": "2Gi"}}}]}}}}}),
            storage,
            None,
        ),
    ];
    for (name, now, before, class, want) in cases {
        let g = group(&format!("{class}-1"), class);
        let got = reason(&cluster(now), &g, &cluster(before));
        match (want, &got) {
            (None, None) => {}
            (Some(w), Some(r)) if r.contains(w) => {}
            _ => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn a_pvc_counts_only_while_the_pod_exists_and_a_marked_group_is_done() {
    let before = cluster(json!({}));
    let now = cluster(
        json!({"processes": {"general": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "2G"}}}}}}}),
    );
    let g = group("storage-1", "storage");
    let (_, pvc) = built(&before, &g);
    assert_eq!(misconfiguration(&now, &g, None, pvc.as_ref()), None);
    let mut marked = g.clone();
    marked.mark_for_removal(Timestamp::UNIX_EPOCH);
    let (pod, pvc) = built(&before, &marked);
    assert_eq!(
        misconfiguration(&now, &marked, Some(&pod), pvc.as_ref()),
        None
    );
}

#[test]
fn the_budget_counts_removals_in_flight() {
    let before = cluster(json!({}));
    let groups: Vec<ProcessGroupStatus> =
        (1..=3).map(|n| group(&format!("log-{n}"), "log")).collect();
    let mut pods = BTreeMap::new();
    for g in &groups {
        pods.insert(g.process_group_id.to_string(), built(&before, g).0);
    }
    let image = json!({"mainContainer": {"imageConfigs": [{"baseImage": "registry.example/fdb"}]}});
    let unlimited = cluster(image.clone());
    assert_eq!(
        choose(&unlimited, &groups, &pods, &BTreeMap::new()).len(),
        3
    );
    let mut limited = image;
    limited["automationOptions"] = json!({"maxConcurrentReplacements": 2});
    let limited = cluster(limited);
    let chosen = choose(&limited, &groups, &pods, &BTreeMap::new());
    assert_eq!(
        chosen
            .iter()
            .map(|(id, _)| id.to_string())
            .collect::<Vec<_>>(),
        ["log-1", "log-2"]
    );
    let mut in_flight = groups.clone();
    in_flight.push(group("log-9", "log"));
    in_flight[3].mark_for_removal(Timestamp::UNIX_EPOCH);
    assert_eq!(
        choose(&limited, &in_flight, &pods, &BTreeMap::new()).len(),
        1
    );
    in_flight[3].set_exclude(Timestamp::UNIX_EPOCH);
    assert_eq!(
        choose(&limited, &in_flight, &pods, &BTreeMap::new()).len(),
        2
    );
}

#[test]
fn quantities() {
    for (text, want) in [
        ("100m", 0.1),
        ("2", 2.0),
        ("1.5", 1.5),
        ("128Mi", 134_217_728.0),
        ("1G", 1e9),
        ("1Gi", 1_073_741_824.0),
        ("2e3", 2000.0),
        ("1E", 1e18),
    ] {
        assert_eq!(quantity(text), Some(want), "{text}");
    }
    assert_eq!(quantity("lots"), None);
}
