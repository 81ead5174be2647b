//! `stellar where`: where each WDS object landed: for every object of every Binding and every
//! destination, the ManifestWork carrying it and the agent's `Applied` / `Available` for it.
//!
//! Contract:
//! - [`rows`] is pure over Bindings (WDS) and ManifestWorks (ITS). Each (object, Binding,
//!   destination) is one row; a row with no ManifestWork yet shows `-` and `Pending`.
//!   ManifestWork manifests that no Binding lists (a Binding being deleted, another WDS) are
//!   rows too. Without Bindings (no WDS kubeconfig) only the ManifestWorks speak.
//! - Applied/Available are the per-manifest conditions the agent reports in
//!   `status.resourceStatus`, else the ManifestWork's own, else `Unknown`.
//! - Rows are sorted by namespace, object, Binding, WEC.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use serde_json::Value;

use crate::api::Binding;
use crate::names;
use crate::ocm::ManifestWork;

/// One line of `stellar where`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    /// The object's namespace (`-` when cluster-scoped).
    pub namespace: String,
    /// `resource[.group]/name`.
    pub object: String,
    /// The Binding (= BindingPolicy) name.
    pub binding: String,
    /// The WEC.
    pub wec: String,
    /// The ManifestWork carrying it in the WEC's mailbox, or `-`.
    pub work: String,
    /// `True`, `False`, `Unknown` or `Pending` (no ManifestWork yet).
    pub applied: String,
    /// As `applied`, for `Available`.
    pub available: String,
}

// (group, resource, namespace, name)
type ObjKey = (String, String, String, String);

// (namespace or `-`, `resource[.group]/name`)
fn label(k: &ObjKey) -> (String, String) {
    let (g, r, ns, n) = k;
    let gr = if g.is_empty() {
        r.clone()
    } else {
        format!("{r}.{g}")
    };
    let ns = if ns.is_empty() {
        "-".into()
    } else {
        ns.clone()
    };
    (ns, format!("{gr}/{n}"))
}

/// A display plural for a kind the agent has not reported a resource for yet.
fn plural(kind: &str) -> String {
    let k = kind.to_lowercase();
    if k.ends_with('s') || k.ends_with('x') {
        format!("{k}es")
    } else if let Some(stem) = k.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{k}s")
    }
}

fn condition(
    conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    t: &str,
) -> Option<String> {
    conds
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| c.status.clone())
}

// Each manifest of `mw` as (object, applied, available).
fn carried(mw: &ManifestWork) -> Vec<(ObjKey, String, String)> {
    let status = mw.status.clone().unwrap_or_default();
    let overall = |t: &str| condition(&status.conditions, t).unwrap_or_else(|| "Unknown".into());
    mw.spec
        .workload
        .manifests
        .iter()
        .enumerate()
        .map(|(i, m): (usize, &Value)| {
            let api_version = m["apiVersion"].as_str().unwrap_or_default();
            let group = api_version.split_once('/').map_or("", |(g, _)| g);
            let ns = m["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = m["metadata"]["name"].as_str().unwrap_or_default();
            let reported =
                status.resource_status.manifests.iter().find(|c| {
                    c.resource_meta.ordinal as usize == i && c.resource_meta.name == name
                });
            let resource = reported
                .map(|c| c.resource_meta.resource.clone())
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| plural(m["kind"].as_str().unwrap_or_default()));
            let per = |t: &str| {
                reported
                    .and_then(|c| condition(&c.conditions, t))
                    .unwrap_or_else(|| overall(t))
            };
            (
                (group.into(), resource, ns.into(), name.into()),
                per("Applied"),
                per("Available"),
            )
        })
        .collect()
}

fn binding_objects(b: &Binding) -> Vec<ObjKey> {
    let w = &b.spec.workload;
    let cluster = w.cluster_scope.iter().map(|c| {
        let o = &c.object;
        (
            o.group.clone(),
            o.resource.clone(),
            String::new(),
            o.name.clone(),
        )
    });
    let namespaced = w.namespace_scope.iter().map(|c| {
        let o = &c.object;
        (
            o.group.clone(),
            o.resource.clone(),
            o.namespace.clone(),
            o.name.clone(),
        )
    });
    cluster.chain(namespaced).collect()
}

/// The rows of `stellar where` (see the module contract).
pub fn rows(bindings: &[Binding], works: &[ManifestWork]) -> Vec<Row> {
    // (object, binding, wec) → (work, applied, available)
    let mut landed: BTreeMap<(ObjKey, String, String), (String, String, String)> = BTreeMap::new();
    for mw in works {
        let Some(binding) = mw.labels().get(names::BINDING_LABEL) else {
            continue;
        };
        let wec = mw.namespace().unwrap_or_default();
        for (obj, applied, available) in carried(mw) {
            landed.insert(
                (obj, binding.clone(), wec.clone()),
                (mw.name_any(), applied, available),
            );
        }
    }
    let mut out = BTreeSet::new();
    for b in bindings {
        let name = b.name_any();
        for obj in binding_objects(b) {
            for d in &b.spec.destinations {
                let key = (obj.clone(), name.clone(), d.cluster_id.clone());
                let (work, applied, available) = landed
                    .remove(&key)
                    .unwrap_or_else(|| ("-".into(), "Pending".into(), "Pending".into()));
                let (namespace, object) = label(&obj);
                out.insert(Row {
                    namespace,
                    object,
                    binding: name.clone(),
                    wec: d.cluster_id.clone(),
                    work,
                    applied,
                    available,
                });
            }
        }
    }
    for ((obj, binding, wec), (work, applied, available)) in landed {
        let (namespace, object) = label(&obj);
        out.insert(Row {
            namespace,
            object,
            binding,
            wec,
            work,
            applied,
            available,
        });
    }
    out.into_iter().collect()
}

/// Reads the Bindings of `wds` (when given) and this WDS's ManifestWorks in `its`, and
/// returns [`rows`].
pub async fn fetch(
    wds: Option<&kube::Client>,
    its: &kube::Client,
    wds_name: &str,
) -> Result<Vec<Row>, kube::Error> {
    use kube::api::{Api, ListParams};
    let bindings = match wds {
        Some(c) => {
            Api::<Binding>::all(c.clone())
                .list(&ListParams::default())
                .await?
                .items
        }
        None => Vec::new(),
    };
    let works = Api::<ManifestWork>::all(its.clone())
        .list(&ListParams::default().labels(&format!("{}={wds_name}", names::WDS_LABEL)))
        .await?
        .items;
    Ok(rows(&bindings, &works))
}

/// `rows` as an aligned table.
pub fn table(rows: &[Row]) -> String {
    let head = Row {
        namespace: "NAMESPACE".into(),
        object: "OBJECT".into(),
        binding: "BINDING".into(),
        wec: "WEC".into(),
        work: "MANIFESTWORK".into(),
        applied: "APPLIED".into(),
        available: "AVAILABLE".into(),
    };
    let all: Vec<&Row> = std::iter::once(&head).chain(rows).collect();
    let w = |f: fn(&Row) -> &str| all.iter().map(|r| f(r).len()).max().unwrap_or(0);
    let (wn, wo, wb, ww, wm, wa) = (
        w(|r| &r.namespace),
        w(|r| &r.object),
        w(|r| &r.binding),
        w(|r| &r.wec),
        w(|r| &r.work),
        w(|r| &r.applied),
    );
    let mut s = String::new();
    for r in all {
        s.push_str(&format!(
            "{:<wn$}  {:<wo$}  {:<wb$}  {:<ww$}  {:<wm$}  {:<wa$}  {}\n",
            r.namespace, r.object, r.binding, r.wec, r.work, r.applied, r.available
        ));
    }
    s
}

#[cfg(test)]
#[path = "whereis_tests.rs"]
mod tests;
