use serde_json::{Value, json};

use super::*;
use crate::crd::RedisBackupStatus;

fn cluster(spec: Value, annotations: Value) -> RedisCluster {
    serde_json::from_value(json!({
        "apiVersion": "redis.io/v1", "kind": "RedisCluster",
        "metadata": {"name": "demo", "namespace": "ns", "annotations": annotations},
        "spec": spec,
    }))
    .expect("cluster")
}

fn spec(extra: Value) -> Value {
    let mut s = json!({"instances": 3, "storage": {"size": "1Gi"}});
    for (k, v) in extra.as_object().expect("object") {
        s[k] = v.clone();
    }
    s
}

fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

fn backup(phase: Option<BackupPhase>, path: &str, destination: Value) -> RedisBackup {
    let mut b: RedisBackup = serde_json::from_value(json!({
        "apiVersion": "redis.io/v1", "kind": "RedisBackup",
        "metadata": {"name": "b1"},
        "spec": {"clusterName": "other", "destination": destination},
    }))
    .expect("backup");
    b.status = Some(RedisBackupStatus {
        phase,
        backup_path: path.into(),
        ..RedisBackupStatus::default()
    });
    b
}

#[test]
fn annotation_values_are_checked() {
    let cases = [
        (json!({"redis.io/hibernation": "on"}), vec![]),
        (json!({"redis.io/hibernation": ""}), vec![]),
        (
            json!({"redis.io/hibernation": "yes"}),
            vec![
                r#"metadata.annotations[redis.io/hibernation]: Invalid value: "yes": must be "on", "off", "true", "false", or empty"#,
            ],
        ),
        (json!({"redis.io/approve-primary-update": "true"}), vec![]),
        (
            json!({"redis.io/approve-primary-update": "yes"}),
            vec![
                r#"metadata.annotations[redis.io/approve-primary-update]: Invalid value: "yes": must be "true" when present"#,
            ],
        ),
        (json!({"redis.io/reconciliationLoop": "disabled"}), vec![]),
        (json!({"redis.io/reconciliationLoop": "enabled"}), vec![]),
        (
            json!({"redis.io/reconciliationLoop": "off"}),
            vec![
                r#"metadata.annotations[redis.io/reconciliationLoop]: Invalid value: "off": must be "enabled" or "disabled""#,
            ],
        ),
    ];
    for (ann, want) in cases {
        let (errors, _) = validate(
            &cluster(spec(json!({})), ann.clone()),
            None,
            &Observed::default(),
        );
        assert_eq!(messages(&errors), want, "{ann}");
    }
}

#[test]
fn the_bootstrap_backup_must_be_completed_and_stored() {
    let c = cluster(spec(json!({"bootstrap": {"backupName": "b1"}})), json!({}));
    let s3 = json!({"s3": {"bucket": "b"}});
    let cases = [
        (None, vec![r#"spec.bootstrap.backupName: Not found: "b1""#]),
        (
            Some(backup(Some(BackupPhase::Completed), "s3://b/k", s3.clone())),
            vec![],
        ),
        (
            Some(backup(Some(BackupPhase::Running), "", s3.clone())),
            vec![
                r#"spec.bootstrap.backupName: Invalid value: "b1": referenced RedisBackup must be in phase "Completed""#,
                r#"spec.bootstrap.backupName: Invalid value: "b1": referenced RedisBackup must have status.backupPath or status.shardArtifacts set"#,
            ],
        ),
        (
            Some(backup(Some(BackupPhase::Completed), "s3://b/k", json!({}))),
            vec![
                r#"spec.bootstrap.backupName: Invalid value: "b1": referenced RedisBackup has an invalid destination: destination requires exactly one of s3 or azure"#,
            ],
        ),
    ];
    for (backup, want) in cases {
        let observed = Observed {
            backup,
            ..Observed::default()
        };
        let (errors, _) = validate(&c, None, &observed);
        assert_eq!(messages(&errors), want);
    }
    // Updates do not look the backup up again (the reference is immutable).
    let (errors, _) = validate(&c, Some(&c), &Observed::default());
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn storage_may_not_shrink_below_a_pvc_nor_grow_without_expansion() {
    let at = |size: &str| cluster(spec(json!({"storage": {"size": size}})), json!({}));
    let gi = |n: i128| Some(n * (1 << 30) * 1_000_000_000);
    let shrink = Observed {
        pvcs: vec![(gi(2), None), (gi(1), None)],
        ..Observed::default()
    };
    let (errors, _) = validate(&at("1Gi"), Some(&at("3Gi")), &shrink);
    assert_eq!(
        messages(&errors),
        [
            r#"spec.storage.size: Forbidden: storage size cannot be decreased below currently requested PVC size "2Gi""#
        ]
    );
    let (errors, _) = validate(&at("2Gi"), Some(&at("3Gi")), &shrink);
    assert!(
        errors.is_empty(),
        "rollback to the largest request is allowed"
    );

    let grow = |classes: &[(&str, Option<bool>)]| Observed {
        storage_classes: classes.iter().map(|(c, e)| ((*c).to_owned(), *e)).collect(),
        ..Observed::default()
    };
    let (errors, _) = validate(&at("5Gi"), Some(&at("1Gi")), &grow(&[("fast", Some(true))]));
    assert!(errors.is_empty());
    let (errors, _) = validate(
        &at("5Gi"),
        Some(&at("1Gi")),
        &grow(&[("slow", Some(false))]),
    );
    assert_eq!(
        messages(&errors),
        [r#"spec.storage.size: Forbidden: storageClass "slow" does not allow volume expansion"#]
    );
    let (errors, _) = validate(&at("5Gi"), Some(&at("1Gi")), &grow(&[("gone", None)]));
    assert_eq!(
        messages(&errors),
        [r#"spec.storage.size: Forbidden: storageClass "gone" was not found"#]
    );
}

#[test]
fn the_replica_source_secret_must_exist() {
    let c = cluster(
        spec(
            json!({"replicaMode": {"enabled": true, "source": {"host": "h", "authSecretName": "src"}}}),
        ),
        json!({}),
    );
    let observed = |exists| Observed {
        source_secret_exists: Some(exists),
        ..Observed::default()
    };
    let (errors, _) = validate(&c, None, &observed(false));
    assert_eq!(
        messages(&errors),
        [r#"spec.replicaMode.source.authSecretName: Not found: "src""#]
    );
    assert!(validate(&c, None, &observed(true)).0.is_empty());
    // An update that keeps the reference does not look the Secret up again.
    assert!(validate(&c, Some(&c), &observed(false)).0.is_empty());
    let before = cluster(spec(json!({})), json!({}));
    assert_eq!(validate(&c, Some(&before), &observed(false)).0.len(), 1);
}

#[test]
fn memory_rules_and_warnings_follow_upstream() {
    let with = |extra: Value| cluster(spec(extra), json!({}));
    let limit = |m: &str| json!({"limits": {"memory": m}});
    let cases: Vec<(Value, Vec<&str>, Vec<&str>)> = vec![
        (
            json!({"memory": {"maxMemoryPercent": 75}}),
            vec![
                "spec.memory.maxMemoryPercent: Invalid value: 75: spec.memory.maxMemoryPercent requires spec.resources.limits.memory to be set",
            ],
            vec![],
        ),
        (
            json!({"memory": {"maxMemory": "0"}}),
            vec![
                r#"spec.memory.maxMemory: Invalid value: "0": spec.memory.maxMemory must be greater than 0"#,
            ],
            vec![],
        ),
        (
            json!({"memory": {"maxMemory": "2Gi"}, "resources": limit("1Gi")}),
            vec![
                r#"spec.memory.maxMemory: Invalid value: "2Gi": spec.memory.maxMemory must not exceed spec.resources.limits.memory"#,
            ],
            vec!["at least 90%"],
        ),
        (
            json!({"memory": {"maxMemory": "1Gi"}, "redis": {"MaxMemory": "1gb", "maxmemory-policy": "x"}}),
            vec![
                "spec.redis[MaxMemory]: Forbidden: configure Redis memory via spec.memory; remove maxmemory/maxmemory-policy from spec.redis",
                "spec.redis[maxmemory-policy]: Forbidden: configure Redis memory via spec.memory; remove maxmemory/maxmemory-policy from spec.redis",
            ],
            vec![],
        ),
        (
            json!({"resources": limit("1Gi")}),
            vec![],
            vec!["no Redis maxmemory is configured"],
        ),
        (
            json!({"resources": limit("1Gi"), "redis": {"maxmemory": "500mb"}}),
            vec![],
            vec![],
        ),
        (
            json!({"memory": {"maxMemoryPercent": 75}, "resources": limit("1Gi")}),
            vec![],
            vec![],
        ),
        (
            json!({"memory": {"maxMemoryPercent": 95}, "resources": limit("1Gi")}),
            vec![],
            vec!["at least 90% of the 1073741824 byte container limit"],
        ),
        (
            json!({"minSyncReplicas": 1, "redis": {"min-replicas-to-write": "2"}}),
            vec![],
            vec!["spec.redis sets min-replicas-to-write"],
        ),
        (
            json!({"minSyncReplicas": 1, "maxSyncReplicas": 2}),
            vec![],
            vec!["maxSyncReplicas has no effect: Redis replication has no upper bound"],
        ),
        (json!({"maxSyncReplicas": 0}), vec![], vec![]),
    ];
    for (extra, want_errors, want_warnings) in cases {
        let (errors, warnings) = validate(&with(extra.clone()), None, &Observed::default());
        assert_eq!(messages(&errors), want_errors, "{extra}");
        assert_eq!(warnings.len(), want_warnings.len(), "{extra}: {warnings:?}");
        for (w, want) in warnings.iter().zip(want_warnings) {
            assert!(w.contains(want), "{extra}: {w}");
        }
    }
}
