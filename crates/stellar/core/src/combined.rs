//! StatusCollectors and the CombinedStatus they produce (upstream's
//! `pkg/status/cel-evaluator.go` and the combined-status aggregation), as pure functions.
//!
//! Contract:
//! - [`validate`]: every expression compiles as CEL; the structural rules (COUNT has no
//!   subject and every other aggregation has one; `groupBy` only with `combinedFields`;
//!   `select` only without either). Invalid collectors produce no result.
//! - [`evaluate`]: one WEC's row: CEL variables `obj` (the WDS object), `returned`
//!   (`{"status": <WEC status or null>}`), `inventory` (`{"name": <WEC>}`) and `propagation`
//!   (`{}`); a `filter` that is false or null drops the row, an error in it is an error in
//!   column `""`; then the `select` expressions, or the `groupBy` expressions followed by the
//!   subjects of the `combinedFields` (COUNT has none).
//! - [`combine`]: the result of one collector over every WEC's row, WECs in name order:
//!   `select` gives one row per WEC (an errored value shows as its error text);
//!   aggregation excludes rows with any error (first error per column in `rowErrors`), groups
//!   by the `groupBy` values (no `groupBy`: exactly one group, also with no rows), and
//!   computes COUNT/SUM/AVG/MIN/MAX over numeric values (numbers or numeric strings; others
//!   are skipped with an `aggregationErrors` entry): empty SUM 0, AVG NaN, MIN +Inf, MAX −Inf.
//!   Rows are sorted and cut to `limit` (upstream ignores `limit` and leaves order undefined).
//! - [`number`]: numbers as Go's `strconv.FormatFloat(f, 'g', -1, 64)` writes them
//!   ("2", "0.5", "1e+06", "+Inf", "-Inf", "NaN").

use std::collections::BTreeMap;

use cel_interpreter::{Context, Program};
use serde_json::{Value, json};

/// A StatusCollector's spec, as evaluated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collector {
    /// `filter`.
    pub filter: Option<String>,
    /// `groupBy` (name, expression).
    pub group_by: Vec<(String, String)>,
    /// `combinedFields` (name, type, subject).
    pub combined_fields: Vec<(String, String, Option<String>)>,
    /// `select` (name, expression).
    pub select: Vec<(String, String)>,
    /// `limit`.
    pub limit: i64,
}

const AGGREGATIONS: [&str; 5] = ["COUNT", "SUM", "AVG", "MIN", "MAX"];

/// The collector's errors (empty: valid).
pub fn validate(c: &Collector) -> Vec<String> {
    let mut errs = Vec::new();
    let check = |errs: &mut Vec<String>, what: String, expr: &str| {
        if let Err(e) = Program::compile(expr) {
            errs.push(format!("{what}: {e}"));
        }
    };
    if let Some(f) = &c.filter {
        check(&mut errs, "filter".into(), f);
    }
    for (i, (_, d)) in c.group_by.iter().enumerate() {
        check(&mut errs, format!("groupBy[{i}]"), d);
    }
    for (i, (_, d)) in c.select.iter().enumerate() {
        check(&mut errs, format!("select[{i}]"), d);
    }
    for (i, (_, t, s)) in c.combined_fields.iter().enumerate() {
        if let Some(s) = s {
            check(&mut errs, format!("combinedFields[{i}].subject"), s);
        }
        if !AGGREGATIONS.contains(&t.as_str()) {
            errs.push(format!("combinedFields[{i}]: unknown type {t:?}"));
        } else if (t == "COUNT") != s.is_none() {
            errs.push(format!(
                "combinedFields[{i}]: COUNT must have no subject, other types must have one"
            ));
        }
    }
    if c.combined_fields.is_empty() && !c.group_by.is_empty() {
        errs.push("groupBy requires combinedFields".into());
    }
    let aggregating = !c.group_by.is_empty() || !c.combined_fields.is_empty();
    if !c.select.is_empty() && aggregating {
        errs.push("select excludes groupBy and combinedFields".into());
    }
    if c.limit < 0 {
        errs.push("limit must be >= 0".into());
    }
    errs
}

/// One WEC's row: `None` when the filter drops it; else a value or an error per column
/// (a filter error is one error in column `""`).
pub type Row = Option<Vec<(String, Result<Value, String>)>>;

fn eval(expr: &str, ctx: &Context) -> Result<Value, String> {
    let p = Program::compile(expr).map_err(|e| e.to_string())?;
    let v = p.execute(ctx).map_err(|e| e.to_string())?;
    v.json().map_err(|e| format!("{e:?}"))
}

/// Evaluates one WEC's row (see the module contract).
pub fn evaluate(c: &Collector, obj: &Value, wec: &str, returned: Option<&Value>) -> Row {
    let mut ctx = Context::default();
    let vars = [
        ("obj", obj.clone()),
        (
            "returned",
            json!({"status": returned.cloned().unwrap_or(Value::Null)}),
        ),
        ("inventory", json!({"name": wec})),
        ("propagation", json!({})),
    ];
    for (n, v) in vars {
        if let Err(e) = ctx.add_variable(n, v) {
            return Some(vec![(String::new(), Err(e.to_string()))]);
        }
    }
    if let Some(f) = &c.filter {
        match eval(f, &ctx) {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false) | Value::Null) => return None,
            Ok(other) => {
                return Some(vec![(
                    String::new(),
                    Err(format!("filter yielded {other}, not a bool")),
                )]);
            }
            Err(e) => return Some(vec![(String::new(), Err(e))]),
        }
    }
    let exprs: Vec<(String, String)> = if !c.select.is_empty() {
        c.select.clone()
    } else {
        c.group_by
            .iter()
            .cloned()
            .chain(
                c.combined_fields
                    .iter()
                    .filter_map(|(n, _, s)| s.clone().map(|s| (n.clone(), s))),
            )
            .collect()
    };
    Some(
        exprs
            .into_iter()
            .map(|(n, e)| {
                let v = eval(&e, &ctx);
                (n, v)
            })
            .collect(),
    )
}

/// Go's shortest `'g'` formatting of a float (see the module contract).
pub fn number(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return "0".into();
    }
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

/// A JSON value as a CombinedStatus column value.
pub fn column_value(v: &Value) -> Value {
    match v {
        Value::Null => json!({"type": "Null"}),
        Value::Bool(b) => json!({"type": "Bool", "bool": b}),
        Value::Number(n) => {
            json!({"type": "Number", "float": number(n.as_f64().unwrap_or(f64::NAN))})
        }
        Value::String(s) => json!({"type": "String", "string": s}),
        Value::Array(_) => json!({"type": "Array", "array": v}),
        Value::Object(_) => json!({"type": "Object", "object": v}),
    }
}

fn numeric(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

// One group of good rows: its groupBy values and its members.
type Group<'a> = (Vec<Value>, Vec<&'a BTreeMap<String, Value>>);

/// The result of collector `name` over the rows of every WEC (see the module contract).
pub fn combine(name: &str, c: &Collector, rows: &BTreeMap<String, Row>) -> Value {
    let mut out_rows: Vec<Vec<Value>> = Vec::new();
    let mut row_errors = Vec::new();
    let mut agg_errors: Vec<Value> = Vec::new();
    let column_names: Vec<String>;
    if !c.select.is_empty() {
        column_names = c.select.iter().map(|(n, _)| n.clone()).collect();
        for row in rows.values().flatten() {
            out_rows.push(
                row.iter()
                    .map(|(_, v)| match v {
                        Ok(v) => column_value(v),
                        Err(e) => column_value(&json!(e)),
                    })
                    .collect(),
            );
        }
    } else {
        column_names = c
            .group_by
            .iter()
            .map(|(n, _)| n.clone())
            .chain(c.combined_fields.iter().map(|(n, _, _)| n.clone()))
            .collect();
        // Good rows: name → value.
        let mut good: Vec<BTreeMap<String, Value>> = Vec::new();
        for (wec, row) in rows {
            let Some(row) = row else { continue };
            let mut seen = std::collections::BTreeSet::new();
            let mut bad = false;
            for (col, v) in row {
                if let Err(e) = v {
                    bad = true;
                    if seen.insert(col.clone()) {
                        row_errors.push(
                            json!({"wec": {"clusterId": wec}, "columnName": col, "error": e}),
                        );
                    }
                }
            }
            if !bad {
                good.push(
                    row.iter()
                        .filter_map(|(n, v)| v.as_ref().ok().map(|v| (n.clone(), v.clone())))
                        .collect(),
                );
            }
        }
        let mut groups: BTreeMap<String, Group> = BTreeMap::new();
        if c.group_by.is_empty() {
            groups.insert(String::new(), (vec![], good.iter().collect()));
        } else {
            for r in &good {
                let key_vals: Vec<Value> = c
                    .group_by
                    .iter()
                    .map(|(n, _)| r.get(n).cloned().unwrap_or(Value::Null))
                    .collect();
                let key = serde_json::to_string(&key_vals).expect("JSON");
                groups
                    .entry(key)
                    .or_insert_with(|| (key_vals, vec![]))
                    .1
                    .push(r);
            }
        }
        for (_, (key_vals, members)) in groups {
            let mut cols: Vec<Value> = key_vals.iter().map(column_value).collect();
            for (n, t, _) in &c.combined_fields {
                if t == "COUNT" {
                    cols.push(column_value(&json!(members.len())));
                    continue;
                }
                let mut nums = Vec::new();
                for m in &members {
                    let v = m.get(n).cloned().unwrap_or(Value::Null);
                    match numeric(&v) {
                        Some(x) => nums.push(x),
                        None => agg_errors.push(
                            json!({"columnName": n, "error": format!("value {v} is not numeric")}),
                        ),
                    }
                }
                let r = match t.as_str() {
                    "SUM" => nums.iter().sum(),
                    "AVG" if nums.is_empty() => f64::NAN,
                    "AVG" => nums.iter().sum::<f64>() / nums.len() as f64,
                    "MIN" => nums.iter().copied().fold(f64::INFINITY, f64::min),
                    _ => nums.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                };
                cols.push(json!({"type": "Number", "float": number(r)}));
            }
            out_rows.push(cols);
        }
    }
    out_rows.sort_by_key(|r| serde_json::to_string(r).expect("JSON"));
    if c.limit >= 0 {
        out_rows.truncate(c.limit as usize);
    }
    let mut res = json!({"name": name, "columnNames": column_names});
    if !out_rows.is_empty() {
        res["rows"] = out_rows
            .into_iter()
            .map(|cols| json!({"columns": cols}))
            .collect();
    }
    if !row_errors.is_empty() {
        res["rowErrors"] = Value::Array(row_errors);
    }
    if !agg_errors.is_empty() {
        res["aggregationErrors"] = Value::Array(agg_errors);
    }
    res
}

#[cfg(test)]
#[path = "combined_tests.rs"]
mod tests;
