use serde_json::json;

use super::*;
use crate::transport::manifest_work_spec;

fn cm(name: &str, bytes: usize) -> Wrapee {
    Wrapee {
        obj: json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "n"},
                    "data": {"k": "x".repeat(bytes)}}),
        group: String::new(),
        resource: "configmaps".into(),
        uid: format!("uid-{name}"),
        create_only: false,
    }
}

fn size(w: &Wrapee) -> usize {
    serde_json::to_vec(&w.obj).expect("json").len()
}

fn names(w: &Wrapped) -> Vec<&str> {
    w.shards.iter().map(|s| s.name.as_str()).collect()
}

fn counts(w: &Wrapped) -> Vec<usize> {
    w.shards.iter().map(|s| s.uids.len()).collect()
}

#[test]
fn one_per_work_is_upstreams_chart_default_and_name() {
    let objs = [cm("a", 1), cm("b", 1)];
    let w = wrap(&objs, "bp", "b-uid", "wds1", Limits::default());
    assert_eq!(names(&w), ["b-uid-wds1-uid-a", "b-uid-wds1-uid-b"]);
    // The same spec as before wrapping existed, so upgrading rewrites nothing.
    assert_eq!(
        w.shards[0].spec,
        manifest_work_spec(&objs[0].obj, "", "configmaps", false)
    );
    assert!(w.too_big.is_empty());
}

#[test]
fn shards_by_count_and_size() {
    let objs: Vec<Wrapee> = (0..5).map(|i| cm(&format!("o{i}"), 10)).collect();
    let one = size(&objs[0]);
    // (max_num, max_size) → objects per shard
    let cases: [(usize, usize, Vec<usize>); 6] = [
        (2, 512_000, vec![2, 2, 1]),
        (5, 512_000, vec![5]),
        (100, 512_000, vec![5]),
        // size + batch >= max closes a shard: two fit only when 2*one < max.
        (100, 2 * one, vec![1, 1, 1, 1, 1]),
        (100, 2 * one + 1, vec![2, 2, 1]),
        (100, 3 * one + 1, vec![3, 2]),
    ];
    for (max_num, max_size, want) in cases {
        let w = wrap(&objs, "bp", "b-uid", "wds1", Limits { max_num, max_size });
        assert_eq!(counts(&w), want, "max_num {max_num} max_size {max_size}");
        let expected: Vec<String> = (0..want.len()).map(|i| format!("bp-wds1-{i}")).collect();
        assert_eq!(names(&w), expected);
    }
}

#[test]
fn keeps_binding_order_and_create_only_configs() {
    let mut objs: Vec<Wrapee> = (0..3).map(|i| cm(&format!("o{i}"), 1)).collect();
    objs[1].create_only = true;
    let w = wrap(
        &objs,
        "bp",
        "u",
        "wds1",
        Limits {
            max_num: 10,
            max_size: 512_000,
        },
    );
    let s = &w.shards[0];
    assert_eq!(s.uids, ["uid-o0", "uid-o1", "uid-o2"]);
    let listed: Vec<&str> = s.spec["workload"]["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|m| m["metadata"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(listed, ["o0", "o1", "o2"]);
    assert_eq!(
        s.spec["manifestConfigs"],
        json!([{"resourceIdentifier": {"group": "", "resource": "configmaps", "namespace": "n", "name": "o1"},
                "updateStrategy": {"type": "CreateOnly"}}])
    );
}

#[test]
fn an_object_over_the_limit_is_reported_and_the_rest_delivered() {
    let objs = [cm("small", 1), cm("huge", 2000), cm("small2", 1)];
    let w = wrap(
        &objs,
        "bp",
        "u",
        "wds1",
        Limits {
            max_num: 10,
            max_size: 1000,
        },
    );
    assert_eq!(w.too_big, [(1, size(&objs[1]))]);
    assert_eq!(counts(&w), [2]);
    // Exactly at the limit alone: wrapped alone, never an empty shard before it.
    let exact = cm("exact", 1);
    let lim = size(&exact);
    let w = wrap(
        &[exact],
        "bp",
        "u",
        "wds1",
        Limits {
            max_num: 10,
            max_size: lim,
        },
    );
    assert_eq!(counts(&w), [1]);
    assert!(w.too_big.is_empty());
}

#[test]
fn nothing_to_wrap_makes_no_shard() {
    assert_eq!(
        wrap(&[], "bp", "u", "wds1", Limits::default()),
        Wrapped::default()
    );
}
