use super::*;

fn backup(yaml: &str) -> FoundationDBBackup {
    let mut b: FoundationDBBackup = serde_yaml::from_str(yaml).expect("backup YAML");
    b.metadata.uid = Some("uid-1".into());
    b
}

const SAMPLE: &str = r#"
apiVersion: apps.foundationdb.org/v1beta2
kind: FoundationDBBackup
metadata: {name: nightly, namespace: db}
spec:
  version: 7.1.57
  clusterName: sample
  agentCount: 3
  customParameters: ["knob_http_verbose_level=3"]
  blobStoreConfiguration: {accountName: minio@minio:9000}
  podTemplateSpec:
    spec:
      containers:
      - name: foundationdb
        env: [{name: FDB_BLOB_CREDENTIALS, value: /var/backup-credentials/credentials}]
        volumeMounts: [{name: backup-credentials, mountPath: /var/backup-credentials}]
      volumes:
      - name: backup-credentials
        secret: {secretName: backup-credentials}
"#;

fn main(d: &Deployment) -> Container {
    let spec = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .find(|c| c.name == MAIN_CONTAINER)
        .unwrap()
        .clone()
}

#[test]
fn agents_run_backup_agent_with_the_clusters_file_and_the_users_credentials_volume() {
    let d = desired(&backup(SAMPLE)).expect("a deployment");
    assert_eq!(d.metadata.name.as_deref(), Some("nightly-backup-agents"));
    let labels = d.metadata.labels.clone().unwrap();
    assert_eq!(labels[BACKUP_FOR_LABEL], "uid-1");
    let spec = d.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let selector = spec.selector.match_labels.unwrap();
    assert_eq!(selector[DEPLOYMENT_NAME_LABEL], "nightly-backup-agents");
    let c = main(&d);
    assert_eq!(
        c.image.as_deref(),
        Some("foundationdb/fdb-kubernetes-monitor:7.1.57")
    );
    assert_eq!(c.command, Some(vec!["backup_agent".to_owned()]));
    assert_eq!(
        c.args.unwrap(),
        vec![
            "--log",
            "--logdir",
            "/var/log/fdb-trace-logs",
            "--knob_http_verbose_level=3"
        ]
    );
    let env = c.env.unwrap();
    assert!(
        env.iter()
            .any(|e| e.name == "FDB_CLUSTER_FILE" && e.value.as_deref() == Some(CLUSTER_FILE))
    );
    // No environment variable comes from a Secret: credentials stay in the mounted file.
    assert!(env.iter().all(|e| e.value_from.is_none()));
    let pod = spec.template.spec.unwrap();
    let volumes: Vec<String> = pod
        .volumes
        .unwrap()
        .iter()
        .map(|v| v.name.clone())
        .collect();
    assert_eq!(
        volumes,
        vec!["backup-credentials", "logs", "dynamic-conf", "config-map"]
    );
    let init = &pod.init_containers.unwrap()[0];
    assert_eq!(init.name, INIT_CONTAINER);
    assert!(
        init.args
            .as_ref()
            .unwrap()
            .contains(&"--require-not-empty".to_owned())
    );
}

#[test]
fn config_map_volume_reads_the_cluster_file_of_the_named_cluster() {
    let d = desired(&backup(SAMPLE)).unwrap();
    let pod = d.spec.unwrap().template.spec.unwrap();
    let cm = pod
        .volumes
        .unwrap()
        .into_iter()
        .find_map(|v| v.config_map)
        .unwrap();
    assert_eq!(cm.name, "sample-config");
    assert_eq!(cm.items.unwrap()[0].key, "cluster-file");
}

#[test]
fn zero_agents_want_no_deployment_and_split_images_use_the_sidecar_init() {
    let mut b = backup(SAMPLE);
    b.spec.agent_count = Some(0);
    assert!(desired(&b).is_none());
    b.spec.agent_count = None;
    b.spec.image_type = Some("split".into());
    let d = desired(&b).unwrap();
    assert_eq!(
        d.spec.as_ref().unwrap().replicas,
        Some(2),
        "default agent count"
    );
    assert_eq!(
        main(&d).image.as_deref(),
        Some("foundationdb/foundationdb:7.1.57")
    );
    let pod = d.spec.unwrap().template.spec.unwrap();
    let init = &pod.init_containers.unwrap()[0];
    assert_eq!(
        init.image.as_deref(),
        Some("foundationdb/foundationdb-kubernetes-sidecar:7.1.57-1")
    );
}

#[test]
fn a_spec_change_changes_the_hash_and_is_seen_as_outdated() {
    let a = desired(&backup(SAMPLE)).unwrap();
    let mut b = backup(SAMPLE);
    b.spec.agent_count = Some(4);
    let b = desired(&b).unwrap();
    assert!(matches(&a, &a));
    assert!(!matches(&a, &b));
    let mut extra = a.clone();
    extra
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("deployment.kubernetes.io/revision".into(), "1".into());
    assert!(
        matches(&extra, &a),
        "annotations added by others do not matter"
    );
}

#[test]
fn an_image_in_the_template_is_kept_with_the_version_as_its_tag() {
    let mut b = backup(SAMPLE);
    let spec = b
        .spec
        .pod_template_spec
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap();
    spec.containers[0].image = Some("registry.local/fdb/monitor".into());
    assert_eq!(
        main(&desired(&b).unwrap()).image.as_deref(),
        Some("registry.local/fdb/monitor:7.1.57")
    );
    let spec = b
        .spec
        .pod_template_spec
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap();
    spec.containers[0].image = Some("registry.local:5000/fdb/monitor:7.1.57-custom".into());
    assert_eq!(
        main(&desired(&b).unwrap()).image.as_deref(),
        Some("registry.local:5000/fdb/monitor:7.1.57-custom")
    );
}
