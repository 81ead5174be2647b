use serde_json::json;

use super::*;

#[test]
fn objects_without_spec_deserialise_to_the_default_spec() {
    for obj in [
        json!({"apiVersion": "redis.io/v1", "kind": "RedisCluster", "metadata": {"name": "a"}}),
        json!({"apiVersion": "redis.io/v1", "kind": "RedisCluster", "metadata": {"name": "a"}, "spec": null}),
    ] {
        let c: RedisCluster = serde_json::from_value(obj).expect("cluster without spec");
        assert_eq!(c.spec, RedisClusterSpec::default());
    }
    let b: RedisBackup = serde_json::from_value(
        json!({"apiVersion": "redis.io/v1", "kind": "RedisBackup", "metadata": {"name": "b"}}),
    )
    .expect("backup without spec");
    assert_eq!(b.spec, RedisBackupSpec::default());
    let s: RedisScheduledBackup = serde_json::from_value(json!({
        "apiVersion": "redis.io/v1", "kind": "RedisScheduledBackup", "metadata": {"name": "s"}
    }))
    .expect("scheduled backup without spec");
    assert_eq!(s.spec, RedisScheduledBackupSpec::default());
}

#[test]
fn the_default_spec_is_what_the_api_server_stores_for_an_empty_one() {
    // What the schema defaults (and the defaulting webhook) make of `spec: {storage: {}}`.
    let stored = json!({
        "instances": 1, "mode": "standalone", "primaryUpdateStrategy": "unsupervised",
        "primaryUpdateMethod": "switchover", "imageName": "redis:7.2",
        "storage": {"type": "pvc", "size": "1Gi"},
        "minSyncReplicasMaxLag": 10, "failoverDelay": 0, "switchoverDelay": 30,
        "enablePodDisruptionBudget": true,
        "primaryIsolation": {"enabled": true, "apiServerTimeout": "5s", "peerTimeout": "5s"},
    });
    let spec: RedisClusterSpec = serde_json::from_value(stored.clone()).expect("spec");
    assert_eq!(spec, RedisClusterSpec::default());
    assert_eq!(serde_json::to_value(&spec).expect("json"), stored);
}

#[test]
fn a_full_upstream_manifest_round_trips() {
    let spec = json!({
        "instances": 3, "mode": "sentinel", "imageName": "redis:7.2.5",
        "primaryUpdateStrategy": "supervised",
        "storage": {"type": "pvc", "size": "10Gi", "storageClassName": "fast"},
        "redis": {"appendfsync": "everysec"},
        "resources": {"requests": {"memory": "1Gi", "cpu": "500m"}, "limits": {"memory": "2Gi"}},
        "memory": {"maxMemoryPercent": 75, "maxMemoryPolicy": "allkeys-lru"},
        "minSyncReplicas": 1, "maxSyncReplicas": 2,
        "enablePodDisruptionBudget": false,
        "authSecret": {"name": "a"}, "aclConfigSecret": {"name": "acl"},
        "tlsSecret": {"name": "tls"}, "caSecret": {"name": "ca"},
        "backupCredentialsSecret": {"name": "creds"},
        "primaryIsolation": {"enabled": false, "apiServerTimeout": "3s", "peerTimeout": "1500ms"},
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "bootstrap": {"backupName": "b"},
        "nodeMaintenanceWindow": {"inProgress": true, "reusePVC": false},
        "replicaMode": {"enabled": true, "promote": false,
            "source": {"clusterName": "east", "host": "redis.east", "port": 6380, "authSecretName": "src"}},
        "connectionSecret": {"name": "conn"},
    });
    let parsed: RedisClusterSpec = serde_json::from_value(spec).expect("spec");
    assert_eq!(parsed.mode, ClusterMode::Sentinel);
    assert_eq!(parsed.storage.size.0, "10Gi");
    let memory = parsed.memory.clone().expect("memory");
    assert_eq!(memory.max_memory_percent, Some(75));
    assert_eq!(memory.max_memory_policy, MaxMemoryPolicy::AllKeysLru);
    assert_eq!(
        parsed
            .replica_mode
            .as_ref()
            .and_then(|r| r.source.as_ref())
            .map(|s| s.port),
        Some(6380)
    );
    let again: RedisClusterSpec =
        serde_json::from_value(serde_json::to_value(&parsed).expect("json")).expect("again");
    assert_eq!(again, parsed);
}

#[test]
fn destinations_are_checked_like_upstream() {
    let s3 = |bucket: &str| S3Destination {
        bucket: bucket.into(),
        ..S3Destination::default()
    };
    let az = |container: &str| AzureBlobDestination {
        container: container.into(),
        ..AzureBlobDestination::default()
    };
    let d = |s3, azure| BackupDestination { s3, azure };
    let cases = [
        (None, Err("destination is required")),
        (
            Some(d(None, None)),
            Err("destination requires exactly one of s3 or azure"),
        ),
        (
            Some(d(Some(s3("b")), Some(az("c")))),
            Err("destination must set exactly one of s3 or azure"),
        ),
        (
            Some(d(Some(s3("")), None)),
            Err("destination.s3.bucket is required"),
        ),
        (
            Some(d(None, Some(az("")))),
            Err("destination.azure.container is required"),
        ),
        (Some(d(Some(s3("b")), None)), Ok(())),
        (Some(d(None, Some(az("c")))), Ok(())),
    ];
    for (dest, want) in cases {
        let got = BackupDestination::validate(dest.as_ref());
        assert_eq!(got, want.map_err(str::to_owned), "{dest:?}");
    }
}
