use serde_json::json;

use super::*;

#[test]
fn objects_without_spec_deserialise_to_the_default_spec() {
    let c: FoundationDBCluster = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
        "metadata": {"name": "a"}
    }))
    .expect("cluster without spec");
    assert_eq!(c.spec, FoundationDBClusterSpec::default());
    let b: FoundationDBBackup = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
        "metadata": {"name": "b"}
    }))
    .expect("backup without spec");
    assert_eq!(b.spec, FoundationDBBackupSpec::default());
    let r: FoundationDBRestore = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBRestore",
        "metadata": {"name": "r"}, "spec": null
    }))
    .expect("restore without spec");
    assert_eq!(r.spec, FoundationDBRestoreSpec::default());
}

#[test]
fn crds_carry_upstream_names_columns_and_release() {
    let crds = crds();
    let names: Vec<_> = crds
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "foundationdbclusters.apps.foundationdb.org",
            "foundationdbbackups.apps.foundationdb.org",
            "foundationdbrestores.apps.foundationdb.org"
        ]
    );
    let cluster = &crds[0];
    assert_eq!(
        cluster.spec.names.short_names.as_deref(),
        Some(&["fdb".to_owned()][..])
    );
    assert_eq!(
        cluster.metadata.annotations.as_ref().unwrap()["foundationdb.org/release"],
        UPSTREAM_RELEASE
    );
    let columns: Vec<_> = cluster.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.as_str(), c.priority.unwrap_or(0)))
        .collect();
    assert_eq!(
        columns,
        [
            ("Generation", 0),
            ("Reconciled", 0),
            ("Available", 0),
            ("FullReplication", 0),
            ("ReconciledProcessGroups", 1),
            ("DesiredProcessGroups", 1),
            ("Version", 0),
            ("Age", 0)
        ]
    );
}

#[test]
fn embedded_metadata_is_narrowed_to_upstreams_five_fields() {
    let crd = serde_json::to_value(&crds()[0]).unwrap();
    let pod_meta = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/processes/additionalProperties/properties/podTemplate/properties/metadata/properties")
        .unwrap();
    let keys: Vec<_> = pod_meta.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        ["annotations", "finalizers", "labels", "name", "namespace"]
    );
    let cm_meta = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/configMap/properties/metadata/properties")
        .unwrap();
    assert_eq!(cm_meta.as_object().unwrap().len(), 5);
    let backup = serde_json::to_value(&crds()[1]).unwrap();
    let deployment_meta = backup
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/backupDeploymentMetadata/properties")
        .unwrap();
    assert_eq!(deployment_meta.as_object().unwrap().len(), 5);
}

#[test]
fn process_group_ids_and_pod_names() {
    let id = ProcessGroupId::new("dc1-storage-12");
    assert_eq!(id.number(), Some(12));
    assert_eq!(id.process_class().as_str(), "storage");
    assert_eq!(id.exclusion_string(), "locality_instance_id:dc1-storage-12");
    let g = ProcessGroupStatus {
        process_group_id: ProcessGroupId::new("dc1-cluster_controller-3"),
        process_class: ProcessClass::new("cluster_controller"),
        ..Default::default()
    };
    assert_eq!(g.pod_name("sample"), "sample-cluster-controller-3");
    assert_eq!(g.pvc_name("sample"), None);
    let g = ProcessGroupStatus {
        process_group_id: ProcessGroupId::new("log-7"),
        process_class: ProcessClass::new("log"),
        ..Default::default()
    };
    assert_eq!(g.pvc_name("sample").as_deref(), Some("sample-log-7-data"));
}

#[test]
fn process_group_conditions_follow_upstream_rules() {
    let t0 = jiff::Timestamp::from_second(1000).unwrap();
    let t1 = jiff::Timestamp::from_second(2000).unwrap();
    let mut g = ProcessGroupStatus::new(
        ProcessGroupId::new("storage-1"),
        ProcessClass::new("storage"),
        t0,
    );
    let kinds: Vec<_> = g
        .process_group_conditions
        .iter()
        .map(|c| c.kind.as_str())
        .collect();
    assert_eq!(kinds, ["MissingProcesses", "MissingPod", "MissingPVC"]);
    g.update_condition(condition::MISSING_POD, true, t1);
    assert_eq!(
        g.condition_time(condition::MISSING_POD),
        Some(1000),
        "first timestamp kept"
    );
    g.update_condition(condition::MISSING_POD, false, t1);
    assert!(!g.has_condition(condition::MISSING_POD));
    // Failed long enough: replacement by the earliest condition.
    assert_eq!(
        g.needs_replacement(500, 1800, t1),
        Some(("MissingProcesses".to_owned(), 1000))
    );
    assert_eq!(g.needs_replacement(5000, 1800, t1), None);
    g.mark_for_removal(t1);
    assert_eq!(
        g.needs_replacement(500, 1800, t1),
        None,
        "removed groups are not replaced"
    );
    g.update_condition(condition::RESOURCES_TERMINATING, true, t1);
    g.set_exclude(t1);
    let kinds: Vec<_> = g
        .process_group_conditions
        .iter()
        .map(|c| c.kind.as_str())
        .collect();
    assert_eq!(kinds, ["ResourcesTerminating"]);
    g.update_condition(condition::POD_FAILING, true, t1);
    assert!(
        !g.has_condition(condition::POD_FAILING),
        "excluded removals only gain ResourcesTerminating"
    );
}

#[test]
fn addresses_replace_or_accumulate() {
    let mut g = ProcessGroupStatus::default();
    g.add_addresses(&["1.1.1.1".into()], false);
    g.add_addresses(&["".into()], false);
    assert_eq!(g.addresses, ["1.1.1.1"]);
    g.add_addresses(&["2.2.2.2".into(), "1.1.1.1".into()], true);
    assert_eq!(g.addresses, ["1.1.1.1", "2.2.2.2"]);
    g.add_addresses(&["3.3.3.3".into()], false);
    assert_eq!(g.addresses, ["3.3.3.3"]);
}

#[test]
fn backup_reconciliation_markers() {
    let mut b: FoundationDBBackup = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
        "metadata": {"name": "b", "generation": 3},
        "spec": {"version": "7.1.57", "clusterName": "c", "blobStoreConfiguration": {"accountName": "a@h"}}
    }))
    .unwrap();
    let mut status = FoundationDBBackupStatus {
        agent_count: 2,
        deployment_configured: true,
        ..Default::default()
    };
    assert!(!b.check_reconciliation(&mut status));
    assert_eq!(status.generations.needs_backup_start, 3);
    status.backup_details = Some(FoundationDBBackupStatusBackupDetails {
        url: b.backup_url().unwrap(),
        running: true,
        snapshot_period_seconds: 864000,
        ..Default::default()
    });
    status.generations = Default::default();
    assert!(b.check_reconciliation(&mut status));
    assert_eq!(
        status.generations,
        BackupGenerationStatus {
            reconciled: 3,
            ..Default::default()
        }
    );
    b.spec.snapshot_period_seconds = Some(60);
    b.status = Some(status.clone());
    assert!(!b.check_reconciliation(&mut status));
    assert_eq!(status.generations.needs_backup_reconfiguration, 3);
}
