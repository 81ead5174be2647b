//! The RedisCluster validating webhook: the rules that need other objects (the bootstrap
//! RedisBackup, the cluster's PVCs and their StorageClasses, the replica-mode source Secret),
//! the annotation values CEL cannot see, the memory rules whose quantity arithmetic is beyond
//! CEL's cost budget, and upstream's memory warnings. Everything else is in the CRD schema.
//!
//! Contract: [`observe`] reads what the rules need (and nothing when no rule applies);
//! [`validate`] is pure and returns every error at once, with upstream's field paths and
//! messages, plus the warnings. References are checked when they are made, not on every later
//! update: the bootstrap backup on create (the reference is immutable), the replica-mode source
//! Secret on create or when the reference changes. Upstream re-checked both on every update, so a
//! deleted backup or Secret blocked every later write to the cluster, the operator's own fencing
//! and approval annotations included.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::review::FieldError;
use crate::crd::{
    BackupDestination, BackupPhase, MEMORY_EXCEEDS_LIMIT, MEMORY_NON_POSITIVE,
    MEMORY_PERCENT_REQUIRES_LIMIT, RedisBackup, RedisCluster, StorageType,
};
use crate::{names, quantity};

/// Message of `maxmemory`/`maxmemory-policy` in `spec.redis` next to `spec.memory`.
pub const MEMORY_REDIS_CONFLICT: &str =
    "configure Redis memory via spec.memory; remove maxmemory/maxmemory-policy from spec.redis";

/// What the rules read from the API.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The bootstrap RedisBackup (create with a bootstrap only); `None` when it does not exist.
    pub backup: Option<RedisBackup>,
    /// Storage requests (nano-units) and StorageClasses of the cluster's PVCs (size changes
    /// only).
    pub pvcs: Vec<(Option<i128>, Option<String>)>,
    /// `allowVolumeExpansion` of each StorageClass involved in a size increase; `None` for a
    /// class that does not exist.
    pub storage_classes: BTreeMap<String, Option<bool>>,
    /// Whether the replica-mode source Secret exists (replica mode with one only).
    pub source_secret_exists: Option<bool>,
}

/// What went wrong reading what the rules need.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// A read failed.
    #[error("reading {what}: {source}")]
    Read {
        /// What was being read.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Reads what [`validate`] needs for `new` (and `old` on updates).
pub async fn observe(
    client: &Client,
    namespace: &str,
    new: &RedisCluster,
    old: Option<&RedisCluster>,
) -> Result<Observed, ObserveError> {
    let read = |what: String| move |source| ObserveError::Read { what, source };
    let mut observed = Observed::default();
    if let Some(name) = bootstrap_name(new)
        && old.is_none()
    {
        let api: Api<RedisBackup> = Api::namespaced(client.clone(), namespace);
        observed.backup = api
            .get_opt(name)
            .await
            .map_err(read(format!("RedisBackup {namespace}/{name}")))?;
    }
    if let Some(old) = old
        && new.spec.storage.r#type == StorageType::Pvc
        && size(new) != size(old)
    {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
        let selector = format!("{}={}", names::LABEL_CLUSTER, new.name_any());
        let pvcs = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(read(format!("PVCs of {namespace}/{}", new.name_any())))?;
        observed.pvcs = pvcs.items.iter().map(pvc_facts).collect();
        if size(new) > size(old) {
            let classes: Vec<String> = expansion_classes(new, &observed.pvcs);
            let api: Api<StorageClass> = Api::all(client.clone());
            for class in classes {
                let sc = api
                    .get_opt(&class)
                    .await
                    .map_err(read(format!("StorageClass {class}")))?;
                observed
                    .storage_classes
                    .insert(class, sc.map(|s| s.allow_volume_expansion.unwrap_or(false)));
            }
        }
    }
    if let Some(secret) = new_source_secret(new, old) {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let found = api
            .get_metadata_opt(secret)
            .await
            .map_err(read(format!("Secret {namespace}/{secret}")))?;
        observed.source_secret_exists = Some(found.is_some());
    }
    Ok(observed)
}

fn pvc_facts(pvc: &PersistentVolumeClaim) -> (Option<i128>, Option<String>) {
    let spec = pvc.spec.as_ref();
    let request = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| quantity::parse(&q.0));
    let class = spec
        .and_then(|s| s.storage_class_name.clone())
        .filter(|c| !c.is_empty());
    (request, class)
}

// The classes whose expansion a size increase needs: the spec's and every PVC's.
fn expansion_classes(new: &RedisCluster, pvcs: &[(Option<i128>, Option<String>)]) -> Vec<String> {
    let mut classes: Vec<String> = new
        .spec
        .storage
        .storage_class_name
        .iter()
        .filter(|c| !c.is_empty())
        .cloned()
        .chain(pvcs.iter().filter_map(|(_, c)| c.clone()))
        .collect();
    classes.sort();
    classes.dedup();
    classes
}

fn size(c: &RedisCluster) -> Option<i128> {
    quantity::parse(&c.spec.storage.size.0)
}

fn bootstrap_name(c: &RedisCluster) -> Option<&str> {
    c.spec
        .bootstrap
        .as_ref()
        .map(|b| b.backup_name.as_str())
        .filter(|n| !n.is_empty())
}

fn source_secret(c: &RedisCluster) -> Option<&str> {
    let rm = c.spec.replica_mode.as_ref().filter(|r| r.enabled)?;
    Some(rm.source.as_ref()?.auth_secret_name.trim()).filter(|s| !s.is_empty())
}

// The source Secret reference to check: one that is new on this request.
fn new_source_secret<'a>(new: &'a RedisCluster, old: Option<&RedisCluster>) -> Option<&'a str> {
    let name = source_secret(new)?;
    (old.and_then(source_secret) != Some(name)).then_some(name)
}

/// Every error of `new` (an update when `old` is given), and the warnings.
pub fn validate(
    new: &RedisCluster,
    old: Option<&RedisCluster>,
    observed: &Observed,
) -> (Vec<FieldError>, Vec<String>) {
    let mut errors = annotations(new);
    if old.is_none() {
        errors.extend(bootstrap(new, observed));
    }
    if let Some(old) = old {
        errors.extend(storage_size(new, old, observed));
    }
    if let (Some(secret), Some(false)) =
        (new_source_secret(new, old), observed.source_secret_exists)
    {
        errors.push(FieldError::not_found(
            "spec.replicaMode.source.authSecretName",
            secret,
        ));
    }
    errors.extend(memory(new));
    (errors, warnings(new))
}

fn annotations(c: &RedisCluster) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let ann = c.annotations();
    if let Some(v) = ann.get(names::ANN_HIBERNATION)
        && !names::HIBERNATION_VALUES.contains(&v.as_str())
    {
        errors.push(FieldError::invalid(
            &format!("metadata.annotations[{}]", names::ANN_HIBERNATION),
            v,
            r#"must be "on", "off", "true", "false", or empty"#,
        ));
    }
    if let Some(v) = ann.get(names::ANN_APPROVE_PRIMARY_UPDATE)
        && v != "true"
        && !v.is_empty()
    {
        errors.push(FieldError::invalid(
            &format!(
                "metadata.annotations[{}]",
                names::ANN_APPROVE_PRIMARY_UPDATE
            ),
            v,
            r#"must be "true" when present"#,
        ));
    }
    if let Some(v) = ann.get(names::ANN_RECONCILIATION_LOOP)
        && !names::RECONCILIATION_LOOP_VALUES.contains(&v.as_str())
    {
        errors.push(FieldError::invalid(
            &format!("metadata.annotations[{}]", names::ANN_RECONCILIATION_LOOP),
            v,
            r#"must be "enabled" or "disabled""#,
        ));
    }
    errors
}

fn bootstrap(c: &RedisCluster, observed: &Observed) -> Vec<FieldError> {
    const PATH: &str = "spec.bootstrap.backupName";
    let Some(name) = bootstrap_name(c) else {
        return Vec::new();
    };
    let Some(backup) = &observed.backup else {
        return vec![FieldError::not_found(PATH, name)];
    };
    let mut errors = Vec::new();
    let status = backup.status.clone().unwrap_or_default();
    if status.phase != Some(BackupPhase::Completed) {
        errors.push(FieldError::invalid(
            PATH,
            name,
            r#"referenced RedisBackup must be in phase "Completed""#,
        ));
    }
    if let Err(e) = BackupDestination::validate(backup.spec.destination.as_ref()) {
        errors.push(FieldError::invalid(
            PATH,
            name,
            format!("referenced RedisBackup has an invalid destination: {e}"),
        ));
    }
    if status.backup_path.is_empty() && status.shard_artifacts.is_empty() {
        errors.push(FieldError::invalid(
            PATH,
            name,
            "referenced RedisBackup must have status.backupPath or status.shardArtifacts set",
        ));
    }
    errors
}

fn storage_size(new: &RedisCluster, old: &RedisCluster, observed: &Observed) -> Vec<FieldError> {
    const PATH: &str = "spec.storage.size";
    if new.spec.storage.r#type != StorageType::Pvc {
        return Vec::new();
    }
    let (Some(new_size), Some(old_size)) = (size(new), size(old)) else {
        return Vec::new();
    };
    if new_size < old_size {
        let largest = observed.pvcs.iter().filter_map(|(r, _)| *r).max();
        return match largest {
            Some(l) if l > new_size => vec![FieldError::forbidden(
                PATH,
                format!(
                    "storage size cannot be decreased below currently requested PVC size {:?}",
                    quantity::format_bytes(l)
                ),
            )],
            _ => Vec::new(),
        };
    }
    if new_size > old_size {
        for (class, expandable) in &observed.storage_classes {
            let reason = match expandable {
                None => format!("storageClass {class:?} was not found"),
                Some(false) => format!("storageClass {class:?} does not allow volume expansion"),
                Some(true) => continue,
            };
            return vec![FieldError::forbidden(PATH, reason)];
        }
    }
    Vec::new()
}

fn memory_limit(c: &RedisCluster) -> Option<i128> {
    let limit = c.spec.resources.as_ref()?.limits.as_ref()?.get("memory")?;
    quantity::parse(&limit.0)
        .map(quantity::value)
        .filter(|v| *v > 0)
}

fn memory(c: &RedisCluster) -> Vec<FieldError> {
    let Some(mem) = &c.spec.memory else {
        return Vec::new();
    };
    let mut errors: Vec<FieldError> = c
        .spec
        .redis
        .keys()
        .filter(|key| {
            let k = key.trim().to_ascii_lowercase();
            k == "maxmemory" || k == "maxmemory-policy"
        })
        .map(|k| FieldError::forbidden(&format!("spec.redis[{k}]"), MEMORY_REDIS_CONFLICT))
        .collect();
    let limit = memory_limit(c);
    if let (Some(pct), None) = (mem.max_memory_percent, limit) {
        errors.push(FieldError::invalid(
            "spec.memory.maxMemoryPercent",
            pct,
            MEMORY_PERCENT_REQUIRES_LIMIT,
        ));
    }
    if let Some(q) = &mem.max_memory {
        let bytes = quantity::parse(&q.0).map(quantity::value);
        match (bytes, limit) {
            (Some(b), _) if b <= 0 => errors.push(FieldError::invalid(
                "spec.memory.maxMemory",
                &q.0,
                MEMORY_NON_POSITIVE,
            )),
            (Some(b), Some(l)) if b > l => errors.push(FieldError::invalid(
                "spec.memory.maxMemory",
                &q.0,
                MEMORY_EXCEEDS_LIMIT,
            )),
            _ => {}
        }
    }
    errors
}

// Upstream's maxmemory resolution: explicit bytes, else a percentage of the memory limit.
fn resolved_max_memory(c: &RedisCluster, limit: i128) -> Option<i128> {
    let mem = c.spec.memory.as_ref()?;
    if let Some(q) = &mem.max_memory {
        return quantity::parse(&q.0)
            .map(quantity::value)
            .filter(|b| *b > 0);
    }
    let pct = i128::from(mem.max_memory_percent?);
    Some(limit * pct / 100).filter(|b| *b > 0 && pct > 0)
}

fn warnings(c: &RedisCluster) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(limit) = memory_limit(c) {
        match resolved_max_memory(c, limit) {
            None if !raw_max_memory(c) => warnings.push(format!(
                "spec.resources.limits.memory is set ({limit} bytes) but no Redis maxmemory is configured; \
                 Redis may be OOM-killed at the container limit instead of applying eviction. \
                 Set spec.memory.maxMemory or spec.memory.maxMemoryPercent."
            )),
            Some(bytes) if bytes * 10 >= limit * 9 => warnings.push(format!(
                "spec.memory resolves maxmemory to {bytes} bytes, at least 90% of the {limit} byte container limit; \
                 leave headroom for replication buffers, copy-on-write during persistence, and fragmentation."
            )),
            _ => {}
        }
    }
    if c.spec.max_sync_replicas > 0 {
        warnings.push(format!(
            "maxSyncReplicas has no effect: Redis replication has no upper bound on synchronous \
             replicas (spec.maxSyncReplicas={} is accepted for compatibility and ignored); \
             durability comes from spec.minSyncReplicas (min-replicas-to-write) and clients \
             using WAIT",
            c.spec.max_sync_replicas
        ));
    }
    for key in ["min-replicas-to-write", "min-replicas-max-lag"] {
        if c.spec.min_sync_replicas > 0
            && c.spec
                .redis
                .keys()
                .any(|k| k.trim().eq_ignore_ascii_case(key))
        {
            warnings.push(format!(
                "spec.redis sets {key}, which overrides the value the operator derives from spec.minSyncReplicas"
            ));
        }
    }
    warnings
}

fn raw_max_memory(c: &RedisCluster) -> bool {
    c.spec
        .redis
        .iter()
        .any(|(k, v)| k.trim().eq_ignore_ascii_case("maxmemory") && !v.trim().is_empty())
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
