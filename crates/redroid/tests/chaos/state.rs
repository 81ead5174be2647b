//! The scenario's observable end state, normalized so two runs compare: what a user sees
//! with `kubectl get` (phases, condition reasons, overrides, which children exist and with
//! which template), without names that embed UIDs, timestamps, resource versions, messages or
//! the namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use redroid::crd::{RedroidInstance, RedroidTask};
use redroid::names;
use serde_json::{Value, json};

fn conditions(c: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> Value {
    let mut m: BTreeMap<&str, String> = BTreeMap::new();
    for c in c {
        m.insert(&c.type_, format!("{}/{}", c.status, c.reason));
    }
    json!(m)
}

async fn list<K>(client: &Client, ns: &str) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    Ok(api.list(&ListParams::default()).await?.items)
}

/// The normalized state of namespace `ns`.
pub async fn capture(client: &Client, ns: &str) -> anyhow::Result<Value> {
    let mut instances = BTreeMap::new();
    for i in list::<RedroidInstance>(client, ns).await? {
        let s = i.status.clone().unwrap_or_default();
        let actor =
            |o: &Option<redroid::crd::TemporaryOverride>| o.as_ref().and_then(|o| o.actor.clone());
        instances.insert(
            i.name_any(),
            json!({
                "phase": s.phase,
                "current": s.observed_generation == i.metadata.generation,
                "conditions": conditions(&s.conditions),
                "suspended": actor(&s.suspended),
                "woken": actor(&s.woken),
                "pod": s.pod_name.is_some(),
                "service": s.service_name,
                "adb": s.adb_address.map(|a| a.replace(ns, "<ns>")),
            }),
        );
    }
    let mut tasks = BTreeMap::new();
    for t in list::<RedroidTask>(client, ns).await? {
        let s = t.status.clone().unwrap_or_default();
        let jobs: Vec<Value> = s
            .jobs
            .iter()
            .map(|j| json!([j.instance, j.job, j.phase, j.reason]))
            .collect();
        tasks.insert(
            t.name_any(),
            json!({
                "current": s.observed_generation == t.metadata.generation,
                "conditions": conditions(&s.conditions),
                "jobs": jobs,
                "active": s.active_jobs,
                "finalizers": t.finalizers(),
            }),
        );
    }
    let mut pods: Vec<Value> = list::<Pod>(client, ns)
        .await?
        .into_iter()
        .filter(|p| p.labels().contains_key(names::INSTANCE_LABEL))
        .map(|p| {
            let l = p.labels();
            json!([
                l.get(names::INSTANCE_LABEL),
                l.get(names::COMPONENT_LABEL),
                p.annotations().get(names::POD_TEMPLATE_HASH_ANNOTATION),
                p.metadata.deletion_timestamp.is_some(),
            ])
        })
        .collect();
    pods.sort_by_key(|v| v.to_string());
    let services: Vec<String> = list::<Service>(client, ns)
        .await?
        .iter()
        .filter(|s| s.labels().contains_key(names::MANAGED_BY_LABEL))
        .map(|s| s.name_any())
        .collect();
    let jobs: Vec<String> = list::<Job>(client, ns)
        .await?
        .iter()
        .map(|j| j.name_any())
        .collect();
    let cronjobs: Vec<Value> = list::<CronJob>(client, ns)
        .await?
        .iter()
        .map(|c| json!([c.name_any(), c.spec.schedule]))
        .collect();
    Ok(json!({
        "instances": instances,
        "tasks": tasks,
        "pods": pods,
        "services": services,
        "jobs": jobs,
        "cronjobs": cronjobs,
    }))
}
