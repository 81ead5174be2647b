//! CombinedStatus upkeep (part of the status controller's pass): see the contract of
//! [`super`]; the evaluation itself is `stellar_core::combined`.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use stellar_core::combined::{Collector, Row, combine, evaluate, validate};

use super::{Key, Options, StatusError, api_for};
use crate::api::{Binding, CombinedStatus, StatusCollector, WorkStatus};
use crate::names;

/// The caches the CombinedStatus upkeep reads.
pub struct Stores {
    /// Bindings (WDS).
    pub bindings: Store<Binding>,
    /// WorkStatuses (ITS).
    pub statuses: Store<WorkStatus>,
    /// StatusCollectors (WDS).
    pub collectors: Store<StatusCollector>,
    /// CombinedStatuses (WDS).
    pub combined: Store<CombinedStatus>,
}

const CONDITION: &str = "StatusCollectorsAvailable";

fn collector_of(sc: &StatusCollector) -> Collector {
    Collector {
        filter: sc.spec.filter.clone(),
        group_by: sc
            .spec
            .group_by
            .iter()
            .map(|e| (e.name.clone(), e.def.clone()))
            .collect(),
        combined_fields: sc
            .spec
            .combined_fields
            .iter()
            .map(|a| (a.name.clone(), a.type_.clone(), a.subject.clone()))
            .collect(),
        select: sc
            .spec
            .select
            .iter()
            .map(|e| (e.name.clone(), e.def.clone()))
            .collect(),
        limit: sc.spec.limit,
    }
}

/// One pass: StatusCollector status, CombinedStatuses, Binding conditions.
pub async fn pass(wds: &Client, opts: &Options, s: &Stores) -> Vec<StatusError> {
    let mut errors = Vec::new();
    // Valid collectors by name; their status written.
    let mut valid: BTreeMap<String, Collector> = BTreeMap::new();
    let sc_api: Api<StatusCollector> = Api::all(wds.clone());
    for sc in s.collectors.state() {
        let c = collector_of(&sc);
        let errs = validate(&c);
        let status = serde_json::to_value(crate::api::StatusCollectorStatus {
            observed_generation: sc.meta().generation.unwrap_or_default(),
            errors: errs.clone(),
        })
        .expect("a status serialises");
        let live = serde_json::to_value(&sc.status).unwrap_or(Value::Null);
        if kit::status::differs(Some(&live), &status)
            && let Err(e) = sc_api
                .patch_status(
                    &sc.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": with_nulls(&status, &["errors"])})),
                )
                .await
        {
            errors.push(StatusError::new(
                format!("StatusCollector {}", sc.name_any()),
                e,
            ));
        }
        if errs.is_empty() {
            valid.insert(sc.name_any(), c);
        }
    }
    let present: BTreeSet<String> = s.collectors.state().iter().map(|c| c.name_any()).collect();
    // Reported statuses of this WDS, keyed (group, resource, ns, name, WEC).
    let mut reported: BTreeMap<Key, Vec<Option<Value>>> = BTreeMap::new();
    for ws in s.statuses.state() {
        if ws
            .labels()
            .get(names::WDS_LABEL)
            .is_some_and(|w| w != &opts.wds_name)
        {
            continue;
        }
        let r = &ws.spec.spec.source_ref;
        reported
            .entry((
                r.group.clone(),
                r.resource.clone(),
                r.namespace.clone(),
                r.name.clone(),
                ws.namespace().unwrap_or_default(),
            ))
            .or_default()
            .push(ws.status.as_ref().map(|x| x.0.clone()));
    }
    let mut desired: BTreeMap<(String, String), Value> = BTreeMap::new();
    for b in s.bindings.state() {
        if b.meta().deletion_timestamp.is_some() {
            continue;
        }
        let Some(policy_uid) = b
            .owner_references()
            .iter()
            .find(|o| o.kind == "BindingPolicy")
            .map(|o| o.uid.clone())
        else {
            continue;
        };
        let dests: Vec<String> = b
            .spec
            .destinations
            .iter()
            .map(|d| d.cluster_id.clone())
            .collect();
        let w = &b.spec.workload;
        let entries: Vec<(Key, Vec<String>)> = w
            .cluster_scope
            .iter()
            .map(|c| {
                (
                    (
                        c.object.group.clone(),
                        c.object.version.clone(),
                        c.object.resource.clone(),
                        String::new(),
                        c.object.name.clone(),
                    ),
                    c.modulation.status_collectors.clone(),
                )
            })
            .chain(w.namespace_scope.iter().map(|c| {
                (
                    (
                        c.object.group.clone(),
                        c.object.version.clone(),
                        c.object.resource.clone(),
                        c.object.namespace.clone(),
                        c.object.name.clone(),
                    ),
                    c.modulation.status_collectors.clone(),
                )
            }))
            .filter(|(_, sc)| !sc.is_empty())
            .collect();
        let mut missing: BTreeSet<String> = BTreeSet::new();
        for (key, names_wanted) in entries {
            for n in &names_wanted {
                if !present.contains(n) {
                    missing.insert(n.clone());
                }
            }
            let obj = match api_for(wds, &key).get_opt(&key.4).await {
                Ok(Some(o)) => o,
                Ok(None) => continue,
                Err(e) => {
                    errors.push(StatusError::new(
                        format!("{} {}/{}", key.2, key.3, key.4),
                        e,
                    ));
                    continue;
                }
            };
            let obj_v = serde_json::to_value(&obj).unwrap_or(Value::Null);
            let mut wanted: Vec<&String> = names_wanted.iter().collect();
            wanted.sort();
            wanted.dedup();
            let mut results = Vec::new();
            for n in wanted {
                let Some(c) = valid.get(n) else { continue };
                let rows: BTreeMap<String, Row> = dests
                    .iter()
                    .map(|wec| {
                        let got = reported.get(&(
                            key.0.clone(),
                            key.2.clone(),
                            key.3.clone(),
                            key.4.clone(),
                            wec.clone(),
                        ));
                        let status = match got.map(Vec::as_slice) {
                            Some([Some(st)]) => Some(st.clone()),
                            _ => None,
                        };
                        (wec.clone(), evaluate(c, &obj_v, wec, status.as_ref()))
                    })
                    .collect();
                results.push(combine(n, c, &rows));
            }
            let ns = if key.3.is_empty() {
                names::REPORT_NAMESPACE.to_owned()
            } else {
                key.3.clone()
            };
            let name = format!("{}.{}", obj.uid().unwrap_or_default(), policy_uid);
            let api_version = obj_v["apiVersion"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| {
                    if key.0.is_empty() {
                        key.1.clone()
                    } else {
                        format!("{}/{}", key.0, key.1)
                    }
                });
            let kind = obj
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            let cs = json!({
                "apiVersion": "control.kubestellar.io/v1alpha1",
                "kind": "CombinedStatus",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": {
                        names::CS_GROUP_LABEL: key.0,
                        names::CS_RESOURCE_LABEL: key.2,
                        names::CS_NAMESPACE_LABEL: key.3,
                        names::CS_NAME_LABEL: key.4,
                        names::CS_POLICY_LABEL: b.name_any(),
                    },
                    "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": key.4, "uid": obj.uid().unwrap_or_default()}],
                },
                "results": results,
            });
            desired.insert((ns, name), cs);
        }
        if let Err(e) = condition(wds, &b, &missing).await {
            errors.push(e);
        }
    }
    for ((ns, name), want) in &desired {
        let api: Api<CombinedStatus> = Api::namespaced(wds.clone(), ns);
        let have = s.combined.get(&ObjectRef::new(name).within(ns));
        let r = match have {
            None => {
                let cs: CombinedStatus =
                    serde_json::from_value(want.clone()).expect("a CombinedStatus");
                match api.create(&PostParams::default(), &cs).await {
                    Ok(_) => Ok(()),
                    Err(e) if kit::errors::already_exists(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Some(have) => {
                let have_v = serde_json::to_value(&*have).unwrap_or(Value::Null);
                let same = have_v["metadata"]["labels"] == want["metadata"]["labels"]
                    && have_v.get("results").cloned().unwrap_or_else(|| json!([]))
                        == want["results"];
                if same {
                    Ok(())
                } else {
                    let mut body = want.clone();
                    body["metadata"]["resourceVersion"] = json!(have.resource_version());
                    let cs: CombinedStatus =
                        serde_json::from_value(body).expect("a CombinedStatus");
                    api.replace(name, &PostParams::default(), &cs)
                        .await
                        .map(|_| ())
                }
            }
        };
        if let Err(e) = r {
            errors.push(StatusError::new(format!("CombinedStatus {ns}/{name}"), e));
        }
    }
    for cs in s.combined.state() {
        let key = (cs.namespace().unwrap_or_default(), cs.name_any());
        if cs.labels().contains_key(names::CS_POLICY_LABEL) && !desired.contains_key(&key) {
            let api: Api<CombinedStatus> = Api::namespaced(wds.clone(), &key.0);
            match api.delete(&key.1, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => errors.push(StatusError::new(
                    format!("CombinedStatus {}/{}", key.0, key.1),
                    e,
                )),
            }
        }
    }
    errors
}

// The Binding's StatusCollectorsAvailable condition (only when it requests collectors or
// already has the condition).
async fn condition(
    wds: &Client,
    b: &Binding,
    missing: &BTreeSet<String>,
) -> Result<(), StatusError> {
    let uses = b
        .spec
        .workload
        .cluster_scope
        .iter()
        .any(|c| !c.modulation.status_collectors.is_empty())
        || b.spec
            .workload
            .namespace_scope
            .iter()
            .any(|c| !c.modulation.status_collectors.is_empty());
    let conds = b
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let prev = conds.iter().find(|c| c.type_ == CONDITION);
    if !uses && prev.is_none() {
        return Ok(());
    }
    let (status, reason, message) = if missing.is_empty() {
        (
            "True",
            "ReconcileSuccess",
            "All StatusCollector(s) are available".to_owned(),
        )
    } else {
        let list: Vec<&str> = missing.iter().map(String::as_str).collect();
        (
            "False",
            "ReconcileError",
            format!("Missing StatusCollector(s) [{}]", list.join(" ")),
        )
    };
    if prev.is_some_and(|c| c.status == status && c.reason == reason && c.message == message) {
        return Ok(());
    }
    let mut next: Vec<Value> = conds
        .iter()
        .filter(|c| c.type_ != CONDITION)
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .collect();
    next.push(json!({
        "type": CONDITION, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    }));
    let api: Api<Binding> = Api::all(wds.clone());
    api.patch_status(
        &b.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": next}})),
    )
    .await
    .map_err(|e| StatusError::new(format!("conditions of Binding {}", b.name_any()), e))?;
    Ok(())
}

// `status` as a merge patch: the listed fields it omits (empty lists) become `null`, so the
// stored ones are removed.
fn with_nulls(status: &Value, fields: &[&str]) -> Value {
    let mut v = status.clone();
    if let Some(m) = v.as_object_mut() {
        for f in fields {
            m.entry(*f).or_insert(Value::Null);
        }
    }
    v
}
