//! The real admin and lock clients ([`crate::admin::cli`]) against the simulator: every
//! output they parse is produced by the front end's command-line reading and the server's
//! execution, without processes (the plane test `tests/cli_path.rs` runs the binaries).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::server::Registry;
use super::{Prepared, prepare};
use crate::admin::cli::{
    BinaryConfig, CliAdminClient, CliLockClient, CommandOutput, CommandRunner, classify,
};
use crate::admin::fake::{FakeDatabase, FakeProcess};
use crate::admin::{AdminClient, AdminError, ClusterTarget, LockClient};
use crate::crd::{
    DatabaseConfiguration, FoundationDBBackup, FoundationDBRestore, LockDenyListEntry,
    ProcessAddress, ProcessClass,
};

/// The front end and the server in one call.
struct SimRunner(Registry);

#[async_trait]
impl CommandRunner for SimRunner {
    async fn run(
        &self,
        program: &Path,
        args: &[String],
        _hard: Duration,
    ) -> Result<CommandOutput, AdminError> {
        let r = match prepare(program, args) {
            Prepared::Answer(r) => r,
            Prepared::Send(req, _) => self.0.handle(&req).await,
        };
        Ok(CommandOutput {
            success: r.code == 0,
            code: Some(r.code),
            output: format!("{}{}", r.stdout, r.stderr),
        })
    }
}

const CS: &str = "sample:abc123@127.2.0.1:4501,127.2.0.2:4501,127.2.0.3:4501";

fn target(lock_id: &str) -> ClusterTarget {
    ClusterTarget {
        uid: format!("sim-{}", std::process::id()),
        connection_string: CS.into(),
        running_version: "7.1.57".into(),
        spec_version: "7.1.57".into(),
        lock_prefix: "\u{ff}\u{2}/org.foundationdb.kubernetes-operator".into(),
        lock_id: lock_id.into(),
        lock_duration: Duration::from_secs(600),
        use_locks: true,
        ..ClusterTarget::default()
    }
}

fn setup() -> (Registry, FakeDatabase, CliAdminClient) {
    let registry = Registry::new();
    let db = registry.database("sample");
    db.set_processes((1..=4).map(|i| FakeProcess {
        address: format!("127.2.0.{i}:4501"),
        class: ProcessClass(if i == 4 { "log" } else { "storage" }.into()),
        instance_id: format!("storage-{i}"),
        process_id: String::new(),
        zone: format!("z{i}"),
        version: "7.1.57".into(),
        command_line: String::new(),
        started: db.now() - 600,
        restart_with: None,
        pod: String::new(),
    }));
    let config = Arc::new(BinaryConfig {
        binary_dir: "/sim".into(),
        trace_dir: None,
        trace_format: None,
        tmp_dir: std::env::temp_dir(),
        cli_timeout: crate::admin::DEFAULT_TIMEOUT,
        max_cli_timeout: crate::admin::MAX_TIMEOUT,
    });
    let runner = Arc::new(SimRunner(registry.clone()));
    (
        registry,
        db,
        CliAdminClient::new(config, runner, target("dc1")),
    )
}

fn addr(s: &str) -> ProcessAddress {
    ProcessAddress::parse(s).unwrap()
}

#[tokio::test]
async fn configure_status_exclude_include_through_the_command_line() {
    let (registry, db, c) = setup();
    let err = c.get_status().await.unwrap_err();
    assert!(err.is_timeout(), "unconfigured is unavailable: {err}");
    assert_eq!(
        db.connection_string(),
        CS,
        "the first cluster file is claimed"
    );
    let desired = DatabaseConfiguration::desired(&DatabaseConfiguration::default());
    c.configure_database(&desired, true).await.unwrap();
    let sent = format!("configure new {}", desired.configuration_string().unwrap());
    assert_eq!(db.calls(), [sent], "exactly what the client sent");
    let again = c.configure_database(&desired, true).await.unwrap_err();
    assert!(again.to_string().contains("already exists"), "{again}");

    let status = c.get_status().await.unwrap();
    assert_eq!(status.cluster.processes.len(), 4);
    assert_eq!(status.cluster.configuration.redundancy_mode, "double");
    assert_eq!(status.coordinator_instance_ids().len(), 3);

    db.set_drain_reads(1);
    c.exclude(&[addr("127.2.0.2:4501")], true).await.unwrap();
    let blocking = c.exclude(&[addr("127.2.0.2:4501")], false).await;
    assert!(
        blocking.as_ref().is_err_and(AdminError::is_timeout),
        "still draining: {blocking:?}"
    );
    c.get_status().await.unwrap();
    c.exclude(&[addr("127.2.0.2:4501")], false).await.unwrap();
    assert_eq!(c.get_exclusions().await.unwrap(), ["127.2.0.2"]);
    c.include(&[addr("127.2.0.2:4501")]).await.unwrap();
    assert!(c.get_exclusions().await.unwrap().is_empty());
    assert_eq!(registry.databases().len(), 1);
}

#[tokio::test]
async fn coordinators_maintenance_and_versions() {
    let (registry, db, c) = setup();
    let desired = DatabaseConfiguration::desired(&DatabaseConfiguration::default());
    c.configure_database(&desired, true).await.unwrap();
    let new = c
        .change_coordinators(&[addr("127.2.0.2:4501"), addr("127.2.0.4:4501")])
        .await
        .unwrap();
    assert_eq!(new, db.connection_string());
    assert!(new.starts_with("sample:") && new.ends_with("@127.2.0.2:4501,127.2.0.4:4501"));
    // The old cluster file still reaches the same database; so does the new one.
    assert!(registry.resolve(CS).unwrap().fake.connection_string() == new);
    assert!(registry.resolve(&new).is_ok());
    assert_eq!(registry.databases().len(), 1);

    c.set_maintenance_zone("z2", 600).await.unwrap();
    assert_eq!(c.get_status().await.unwrap().cluster.maintenance_zone, "z2");
    c.reset_maintenance_mode().await.unwrap();
    c.set_processes_under_maintenance(&["storage-2".into()], 1_700_000_000)
        .await
        .unwrap();
    assert_eq!(
        db.get_processes_under_maintenance().await.unwrap()["storage-2"],
        1_700_000_000
    );
    assert_eq!(
        c.get_processes_under_maintenance().await.unwrap()["storage-2"],
        1_700_000_000
    );
    c.remove_processes_under_maintenance(&["storage-2".into()])
        .await
        .unwrap();
    assert!(
        c.get_processes_under_maintenance()
            .await
            .unwrap()
            .is_empty()
    );

    assert_eq!(
        c.protocol_version("7.1.57").await.unwrap(),
        "fdb00b071010000"
    );
    assert_eq!(
        c.protocol_version("7.3.63").await.unwrap(),
        "fdb00b073000000"
    );
    assert_eq!(
        c.version_from_reachable_coordinators().await.as_deref(),
        Some("7.1.57")
    );
}

#[tokio::test]
async fn the_lock_records_are_the_fakes_own() {
    let (_registry, db, c) = setup();
    let lock = CliLockClient::new(c.clone());
    lock.take_lock().await.unwrap();
    assert_eq!(db.lock_record().unwrap().owner, "dc1");
    // Another instance through the fake sees dc1's lock, and the CLI sees the fake's.
    let other = db.lock_client("dc2", 600);
    assert!(
        matches!(other.take_lock().await, Err(AdminError::LockHeld { ref owner, .. }) if owner == "dc1")
    );
    lock.update_deny_list(&[LockDenyListEntry {
        id: "dc1".into(),
        allow: false,
    }])
    .await
    .unwrap();
    assert_eq!(other.get_deny_list().await.unwrap(), ["dc1"]);
    other.take_lock().await.unwrap();
    assert_eq!(db.lock_record().unwrap().owner, "dc2");
    assert!(matches!(
        lock.take_lock().await,
        Err(AdminError::LockDenied(_))
    ));
    lock.update_deny_list(&[LockDenyListEntry {
        id: "dc1".into(),
        allow: true,
    }])
    .await
    .unwrap();
    assert!(lock.get_deny_list().await.unwrap().is_empty());
    assert!(
        matches!(lock.take_lock().await, Err(AdminError::LockHeld { ref owner, .. }) if owner == "dc2")
    );
    other.release_lock().await.unwrap();
    lock.take_lock().await.unwrap();
    lock.release_lock().await.unwrap();
    assert_eq!(db.lock_record(), None);

    lock.add_pending_upgrades("7.3.63", &["storage-1".into(), "storage-2".into()])
        .await
        .unwrap();
    let pending = other.get_pending_upgrades("7.3.63").await.unwrap();
    assert_eq!(pending.len(), 2);
    assert_eq!(lock.get_pending_upgrades("7.3.63").await.unwrap(), pending);
    lock.clear_pending_upgrades().await.unwrap();
    assert!(
        other
            .get_pending_upgrades("7.3.63")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn kills_restart_processes_once_per_call() {
    let (_registry, db, c) = setup();
    let before = db.processes()[0].started;
    db.advance(60);
    let (one, two) = ([addr("127.2.0.1:4501")], [addr("127.2.0.2:4501")]);
    let (a, b) = tokio::join!(c.kill(&one), c.kill_for_upgrade(&two));
    a.unwrap();
    b.unwrap();
    let kills: Vec<String> = db
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("kill"))
        .collect();
    assert_eq!(kills.len(), 2, "{kills:?}");
    assert!(db.processes()[0].started > before);
}

#[tokio::test]
async fn injected_failures_keep_their_category_through_the_command_line() {
    let (_registry, db, c) = setup();
    db.fail("include", AdminError::Timeout("injected".into()));
    let err = c.include(&[addr("127.2.0.2")]).await.unwrap_err();
    assert_eq!(err.category(), "database_timeout", "{err}");
    db.set_available(false);
    assert!(c.get_status().await.unwrap_err().is_timeout());
    db.set_available(true);

    let backup: FoundationDBBackup = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
        "metadata": {"name": "b"},
        "spec": {"version": "7.1.57", "clusterName": "sample", "blobStoreConfiguration": {"accountName": "a@h"}},
    }))
    .unwrap();
    c.start_backup(&backup).await.unwrap();
    c.pause_backups().await.unwrap();
    let url = "blobstore://a@h:443/b?bucket=fdb-backups";
    let live = c.get_backup_status(&backup).await.unwrap();
    assert_eq!(live.destination_url, url);
    assert!(live.status.running && live.backup_agents_paused, "{live:?}");
    assert!(
        db.calls()
            .iter()
            .any(|c| c.starts_with(&format!("fdbbackup start -d {url} -t default"))),
        "{:?}",
        db.calls()
    );
    let other: FoundationDBBackup = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
        "metadata": {"name": "o"},
        "spec": {"version": "7.1.57", "clusterName": "sample", "backupState": "Running",
                 "blobStoreConfiguration": {"accountName": "a@h"}, "tag": "other"},
    }))
    .unwrap();
    let missing = c.get_backup_status(&other).await.unwrap_err();
    assert_eq!(missing.category(), "backup_does_not_exist", "{missing}");
    let restore: FoundationDBRestore = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBRestore",
        "metadata": {"name": "r"}, "spec": {"destinationClusterName": "sample"},
    }))
    .unwrap();
    assert!(matches!(
        c.get_restore_status().await,
        Err(AdminError::RestoreDoesNotExist)
    ));
    c.start_restore(url, &restore).await.unwrap();
    let state = c.get_restore_status().await.unwrap();
    assert!(state.contains("running"), "{state}");
}

#[test]
fn rendered_errors_classify_back_to_their_category() {
    let cases = [
        AdminError::Timeout("x".into()),
        AdminError::BackupDoesNotExist("default".into()),
        AdminError::BackupNotRunning("default".into()),
        AdminError::Command {
            binary: "fdbcli".into(),
            code: Some(1),
            output: "ERROR: Database not yet configured".into(),
        },
    ];
    for e in cases {
        let r = super::backup::render_error(&e);
        assert_eq!(r.code, 1);
        let out = CommandOutput {
            success: false,
            code: Some(r.code),
            output: format!("{}{}", r.stdout, r.stderr),
        };
        assert_eq!(classify("fdbcli", out).category(), e.category(), "{e}");
    }
}
