use k8s_openapi::api::apps::v1::DeploymentStatus;

use super::*;

fn status_of(
    b: &FoundationDBBackup,
    d: &[Deployment],
    l: Option<&LiveBackupStatus>,
) -> FoundationDBBackupStatus {
    compute(b, d, l, Timestamp::now())
}

fn backup(generation: i64) -> FoundationDBBackup {
    let mut b: FoundationDBBackup = serde_yaml::from_str(
        r#"
apiVersion: apps.foundationdb.org/v1beta2
kind: FoundationDBBackup
metadata: {name: b, namespace: db}
spec:
  version: 7.1.57
  clusterName: c
  blobStoreConfiguration: {accountName: minio@minio:9000}
"#,
    )
    .unwrap();
    b.metadata.uid = Some("u".into());
    b.metadata.generation = Some(generation);
    b
}

fn agents(b: &FoundationDBBackup, ready: i32, updated: i32, observed: bool) -> Deployment {
    let mut d = deployment::desired(b).unwrap();
    d.metadata.generation = Some(3);
    d.status = Some(DeploymentStatus {
        ready_replicas: Some(ready),
        updated_replicas: Some(updated),
        observed_generation: Some(if observed { 3 } else { 2 }),
        ..DeploymentStatus::default()
    });
    d
}

fn live(running: bool, paused: bool, restorable: bool, period: i64) -> LiveBackupStatus {
    LiveBackupStatus {
        destination_url: backup(1).backup_url().unwrap(),
        snapshot_interval_seconds: period,
        status: crate::admin::LiveBackupState {
            name: "running".into(),
            running,
            completed: false,
        },
        backup_agents_paused: paused,
        restorable: Some(restorable),
        uid: None,
        tag: Some("default".into()),
    }
}

#[test]
fn a_running_restorable_backup_with_ready_agents_is_reconciled() {
    let b = backup(4);
    let s = status_of(
        &b,
        &[agents(&b, 2, 2, true)],
        Some(&live(true, false, true, 864_000)),
    );
    assert_eq!(s.agent_count, 2);
    assert!(s.deployment_configured);
    let d = s.backup_details.unwrap();
    assert!(d.running && d.restorable && !d.paused);
    assert_eq!(d.tag, "default");
    assert_eq!(s.generations.reconciled, 4);
    assert!(kit::conditions::is_true(&s.conditions, "Ready"));
    assert_eq!(s.generations.needs_backup_start, 0);
}

#[test]
fn what_is_still_to_do_is_marked_with_the_generation() {
    let b = backup(5);
    // (agents ready, updated, observed, live) -> markers
    let s = status_of(&b, &[agents(&b, 1, 2, true)], None);
    assert_eq!(s.agent_count, 1, "min(ready, updated)");
    assert_eq!(s.generations.needs_backup_agent_update, 5);
    assert_eq!(s.generations.needs_backup_start, 5, "no backup yet");
    assert_eq!(s.generations.reconciled, 0);
    let s = status_of(
        &b,
        &[agents(&b, 2, 2, false)],
        Some(&live(true, false, false, 864_000)),
    );
    assert!(!s.deployment_configured, "generation not observed yet");
    let s = status_of(&b, &[], Some(&live(true, false, false, 60)));
    assert!(!s.deployment_configured, "agents wanted, none there");
    assert_eq!(
        s.generations.needs_backup_reconfiguration, 5,
        "snapshot period differs"
    );
    let mut paused = backup(5);
    paused.spec.backup_state = "Paused".into();
    let s = status_of(
        &paused,
        &[agents(&paused, 2, 2, true)],
        Some(&live(true, false, false, 864_000)),
    );
    assert_eq!(s.generations.needs_backup_pause_toggle, 5);
    let mut stopped = backup(5);
    stopped.spec.backup_state = "Stopped".into();
    let s = status_of(
        &stopped,
        &[agents(&stopped, 2, 2, true)],
        Some(&live(true, false, true, 864_000)),
    );
    assert_eq!(s.generations.needs_backup_stop, 5);
}

#[test]
fn no_agents_wanted_and_none_present_is_configured() {
    let mut b = backup(2);
    b.spec.agent_count = Some(0);
    let s = status_of(&b, &[], Some(&live(true, false, true, 864_000)));
    assert!(s.deployment_configured);
    assert_eq!(s.generations.reconciled, 2);
}

#[test]
fn a_changed_tag_is_detected_against_the_status() {
    let mut b = backup(1);
    assert_eq!(changed_tag(&b), None, "no status yet");
    b.status = Some(status_of(&b, &[], Some(&live(true, false, true, 864_000))));
    assert_eq!(changed_tag(&b), None);
    b.spec.tag = Some("other".into());
    assert_eq!(changed_tag(&b).as_deref(), Some("default"));
}
