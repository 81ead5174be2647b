use super::*;

fn collector(v: Value) -> Collector {
    let pairs = |k: &str| -> Vec<(String, String)> {
        v[k].as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["def"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    Collector {
        filter: v["filter"].as_str().map(Into::into),
        group_by: pairs("groupBy"),
        select: pairs("select"),
        combined_fields: v["combinedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["type"].as_str().unwrap().into(),
                    e["subject"].as_str().map(Into::into),
                )
            })
            .collect(),
        limit: v["limit"].as_i64().unwrap_or(20),
    }
}

fn rows(c: &Collector, obj: &Value, wecs: &[(&str, Option<Value>)]) -> BTreeMap<String, Row> {
    wecs.iter()
        .map(|(w, s)| (w.to_string(), evaluate(c, obj, w, s.as_ref())))
        .collect()
}

#[test]
fn numbers_format_as_go() {
    let cases = [
        (2.0, "2"),
        (0.5, "0.5"),
        (-3.25, "-3.25"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (123456789.0, "1.23456789e+08"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (f64::INFINITY, "+Inf"),
        (f64::NEG_INFINITY, "-Inf"),
        (f64::NAN, "NaN"),
        (0.0, "0"),
    ];
    for (f, want) in cases {
        assert_eq!(number(f), want, "{f}");
    }
}

#[test]
fn validation_catches_structure_and_cel() {
    let ok = collector(json!({"combinedFields": [{"name": "n", "type": "COUNT"}]}));
    assert!(validate(&ok).is_empty());
    let bad = collector(json!({
        "filter": "obj.(",
        "groupBy": [{"name": "g", "def": "1"}],
        "select": [{"name": "s", "def": "1"}],
        "combinedFields": [{"name": "n", "type": "COUNT", "subject": "1"}, {"name": "m", "type": "MEDIAN", "subject": "1"}],
        "limit": -1}));
    let errs = validate(&bad);
    assert!(errs.iter().any(|e| e.starts_with("filter:")), "{errs:?}");
    assert!(
        errs.iter()
            .any(|e| e.contains("COUNT must have no subject")),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.contains("unknown type \"MEDIAN\"")),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.contains("select excludes")),
        "{errs:?}"
    );
    assert!(errs.iter().any(|e| e.contains("limit")), "{errs:?}");
}

#[test]
fn select_lists_each_wec() {
    let c = collector(
        json!({"select": [{"name": "wecName", "def": "inventory.name"},
                                        {"name": "replicas", "def": "returned.status.availableReplicas"}]}),
    );
    let r = rows(
        &c,
        &json!({}),
        &[
            ("wec2", Some(json!({"availableReplicas": 1}))),
            ("wec1", Some(json!({"availableReplicas": 2}))),
        ],
    );
    assert_eq!(
        combine("sel", &c, &r),
        json!({"name": "sel", "columnNames": ["wecName", "replicas"], "rows": [
            {"columns": [{"type": "String", "string": "wec1"}, {"type": "Number", "float": "2"}]},
            {"columns": [{"type": "String", "string": "wec2"}, {"type": "Number", "float": "1"}]}]})
    );
}

#[test]
fn filter_and_aggregations() {
    let obj = json!({"spec": {"replicas": 2}});
    let wecs = [
        ("wec1", Some(json!({"availableReplicas": 2, "zone": "a"}))),
        ("wec2", Some(json!({"availableReplicas": 1, "zone": "a"}))),
        ("wec3", Some(json!({"availableReplicas": 2, "zone": "b"}))),
        ("wec4", None),
    ];
    let filtered = collector(json!({
        "filter": "returned.status != null && obj.spec.replicas == returned.status.availableReplicas",
        "select": [{"name": "wec", "def": "inventory.name"}]}));
    let res = combine("f", &filtered, &rows(&filtered, &obj, &wecs));
    let names: Vec<&Value> = res["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["columns"][0]["string"])
        .collect();
    assert_eq!(names, [&json!("wec1"), &json!("wec3")]);

    let agg = collector(json!({
        "filter": "returned.status != null",
        "groupBy": [{"name": "zone", "def": "returned.status.zone"}],
        "combinedFields": [{"name": "count", "type": "COUNT"},
                           {"name": "sum", "type": "SUM", "subject": "returned.status.availableReplicas"},
                           {"name": "avg", "type": "AVG", "subject": "returned.status.availableReplicas"},
                           {"name": "min", "type": "MIN", "subject": "returned.status.availableReplicas"},
                           {"name": "max", "type": "MAX", "subject": "returned.status.availableReplicas"}]}));
    let res = combine("a", &agg, &rows(&agg, &obj, &wecs));
    let cols = |i: usize| -> Vec<String> {
        res["rows"][i]["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                c["string"]
                    .as_str()
                    .or(c["float"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(cols(0), ["a", "2", "3", "1.5", "1", "2"]);
    assert_eq!(cols(1), ["b", "1", "2", "2", "2", "2"]);

    // Nothing passes the filter: one group with the empty values.
    let none = collector(json!({
        "filter": "false",
        "combinedFields": [{"name": "count", "type": "COUNT"},
                           {"name": "max", "type": "MAX", "subject": "1"},
                           {"name": "min", "type": "MIN", "subject": "1"},
                           {"name": "sum", "type": "SUM", "subject": "1"},
                           {"name": "avg", "type": "AVG", "subject": "1"}]}));
    let res = combine("e", &none, &rows(&none, &obj, &wecs));
    let got: Vec<&Value> = res["rows"][0]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["float"])
        .collect();
    assert_eq!(
        got,
        [
            &json!("0"),
            &json!("-Inf"),
            &json!("+Inf"),
            &json!("0"),
            &json!("NaN")
        ]
    );
}

#[test]
fn errors_exclude_rows_from_aggregations_and_limit_cuts() {
    let c = collector(json!({
        "combinedFields": [{"name": "sum", "type": "SUM", "subject": "returned.status.n"}]}));
    let wecs = [
        ("wec1", Some(json!({"n": 2}))),
        ("wec2", None),
        ("wec3", Some(json!({"n": "x"}))),
    ];
    let res = combine("s", &c, &rows(&c, &json!({}), &wecs));
    assert_eq!(res["rows"][0]["columns"][0]["float"], json!("2"));
    assert_eq!(res["rowErrors"][0]["wec"]["clusterId"], json!("wec2"));
    assert_eq!(res["rowErrors"][0]["columnName"], json!("sum"));
    assert_eq!(res["aggregationErrors"][0]["columnName"], json!("sum"));

    let sel = collector(json!({"select": [{"name": "w", "def": "inventory.name"}], "limit": 1}));
    let res = combine("l", &sel, &rows(&sel, &json!({}), &wecs));
    assert_eq!(res["rows"].as_array().unwrap().len(), 1);
}
