use std::sync::Mutex;

use super::*;

// Records every call and answers from a script.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(String, Vec<String>, Duration)>>,
    answers: Mutex<Vec<CommandOutput>>,
}

impl Recorder {
    fn answering(outputs: &[(bool, &str)]) -> Arc<Self> {
        let r = Recorder::default();
        *r.answers.lock().unwrap() = outputs
            .iter()
            .rev()
            .map(|(ok, out)| CommandOutput {
                success: *ok,
                code: Some(if *ok { 0 } else { 1 }),
                output: (*out).to_owned(),
            })
            .collect();
        Arc::new(r)
    }

    fn calls(&self) -> Vec<(String, Vec<String>, Duration)> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl CommandRunner for Recorder {
    async fn run(
        &self,
        program: &Path,
        args: &[String],
        hard: Duration,
    ) -> Result<CommandOutput, AdminError> {
        self.calls
            .lock()
            .unwrap()
            .push((program.display().to_string(), args.to_vec(), hard));
        Ok(self.answers.lock().unwrap().pop().unwrap_or(CommandOutput {
            success: true,
            code: Some(0),
            output: String::new(),
        }))
    }
}

fn config() -> Arc<BinaryConfig> {
    Arc::new(BinaryConfig {
        binary_dir: "/usr/bin/fdb".into(),
        trace_dir: None,
        trace_format: None,
        tmp_dir: std::env::temp_dir(),
        cli_timeout: crate::admin::DEFAULT_TIMEOUT,
        max_cli_timeout: crate::admin::MAX_TIMEOUT,
    })
}

fn target() -> ClusterTarget {
    ClusterTarget {
        uid: "uid-1".into(),
        connection_string: "test:abc@127.2.0.1:4501".into(),
        running_version: "7.1.57".into(),
        spec_version: "7.1.57".into(),
        lock_prefix: crate::crd::DEFAULT_LOCK_PREFIX.into(),
        lock_id: "dc1".into(),
        lock_duration: Duration::from_secs(600),
        use_locks: true,
        ..Default::default()
    }
}

fn client(rec: &Arc<Recorder>) -> CliAdminClient {
    CliAdminClient::new(config(), rec.clone(), target())
}

// The arguments with the temporary cluster file's path replaced by `<file>`.
fn argv(call: &(String, Vec<String>, Duration)) -> Vec<String> {
    let mut args = call.1.clone();
    for i in 0..args.len() {
        if i > 0 && (args[i - 1] == "-C" || args[i - 1] == "--dest_cluster_file") {
            args[i] = "<file>".into();
        }
    }
    args
}

fn backup(spec: serde_json::Value) -> FoundationDBBackup {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
        "metadata": {"name": "mybackup"}, "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn status_runs_fdbcli_of_the_running_version_with_the_slow_timeout() {
    let doc = include_str!("testdata/status_7_1_double.json");
    let rec = Recorder::answering(&[(true, doc)]);
    let s = client(&rec).get_status().await.unwrap();
    assert_eq!(s.cluster.processes.len(), 10);
    let calls = rec.calls();
    assert_eq!(calls[0].0, "/usr/bin/fdb/7.1/fdbcli");
    assert_eq!(
        argv(&calls[0]),
        ["--exec", "status json", "-C", "<file>", "--timeout", "40"]
    );
    assert_eq!(
        calls[0].2,
        Duration::from_secs(80),
        "hard kill at twice the timeout"
    );
}

#[tokio::test]
async fn during_an_incompatible_upgrade_status_falls_back_to_the_new_version() {
    let doc = include_str!("testdata/status_7_1_double.json");
    let rec = Recorder::answering(&[(false, "ERROR: Specified timeout reached"), (true, doc)]);
    let mut t = target();
    t.spec_version = "7.3.69".into();
    t.incompatible_upgrade = true;
    let c = CliAdminClient::new(config(), rec.clone(), t);
    c.get_status().await.unwrap();
    let calls = rec.calls();
    assert_eq!(calls[0].0, "/usr/bin/fdb/7.1/fdbcli");
    assert_eq!(calls[1].0, "/usr/bin/fdb/7.3/fdbcli");
}

#[tokio::test]
async fn commands_are_upstreams_exact_strings() {
    let rec = Recorder::answering(&[]);
    let c = client(&rec);
    let a = |s: &str| ProcessAddress::parse(s).unwrap();
    c.exclude(&[a("127.2.0.5:4501"), a("127.2.0.6:4500:tls")], true)
        .await
        .unwrap();
    c.exclude(
        &[ProcessAddress::new(
            "locality_instance_id:storage-1",
            0,
            false,
        )],
        false,
    )
    .await
    .unwrap();
    c.include(&[a("127.2.0.5")]).await.unwrap();
    c.kill(&[a("127.2.0.5:4501"), a("127.2.0.6:4500:tls")])
        .await
        .unwrap();
    c.kill_for_upgrade(&[a("127.2.0.5:4501")]).await.unwrap();
    c.set_maintenance_zone("zone-a", 600).await.unwrap();
    c.reset_maintenance_mode().await.unwrap();
    let want = [
        "exclude no_wait 127.2.0.5 127.2.0.6",
        "exclude locality_instance_id:storage-1",
        "include 127.2.0.5",
        "kill; kill 127.2.0.5:4501 127.2.0.6:4500; sleep 5",
        "kill; kill 127.2.0.5:4501; sleep 1; kill 127.2.0.5:4501; sleep 5",
        "maintenance on zone-a 600",
        "maintenance off",
    ];
    let got: Vec<String> = rec.calls().iter().map(|c| c.1[1].clone()).collect();
    assert_eq!(got, want);
    // Slow calls get 40 s, the rest 10 s.
    let timeouts: Vec<String> = rec
        .calls()
        .iter()
        .map(|c| c.1.last().unwrap().clone())
        .collect();
    assert_eq!(timeouts, ["40", "40", "10", "40", "40", "10", "10"]);
}

#[tokio::test]
async fn configure_sends_new_once_and_refuses_separators() {
    let rec = Recorder::answering(&[]);
    let c = client(&rec);
    let desired = DatabaseConfiguration::desired(&DatabaseConfiguration::default());
    c.configure_database(&desired, true).await.unwrap();
    assert_eq!(
        rec.calls()[0].1[1],
        "configure new double ssd-2 usable_regions=1 logs=3 resolvers=1 log_routers=-1 remote_logs=-1 proxies=3 regions=[]"
    );
    let mut bad = desired.clone();
    bad.storage_migration_type = Some("gradual;kill".into());
    assert!(matches!(
        c.configure_database(&bad, false).await,
        Err(AdminError::InvalidInput(_))
    ));
    assert_eq!(
        rec.calls().len(),
        1,
        "nothing is run for a refused configuration"
    );
}

#[tokio::test]
async fn coordinators_then_the_new_connection_string() {
    let rec = Recorder::answering(&[
        (true, "Coordination state changed\n"),
        (
            true,
            ">>> option on READ_SYSTEM_KEYS\nOption enabled for all transactions\n>>> get \\xff/coordinators\n`\\xff/coordinators' is `test:newgen@127.2.0.1:4501,127.2.0.2:4501'\n",
        ),
    ]);
    let c = client(&rec);
    let addrs = [
        ProcessAddress::parse("127.2.0.1:4501").unwrap(),
        ProcessAddress::parse("127.2.0.2:4501").unwrap(),
    ];
    assert_eq!(
        c.change_coordinators(&addrs).await.unwrap(),
        "test:newgen@127.2.0.1:4501,127.2.0.2:4501"
    );
    assert_eq!(
        rec.calls()[0].1[1],
        "coordinators 127.2.0.1:4501 127.2.0.2:4501"
    );
}

#[tokio::test]
async fn protocol_version_from_fdbcli_version() {
    let out = "FoundationDB CLI 7.1 (v7.1.57)\nsource version abc\nprotocol fdb00b071010000\n";
    let rec = Recorder::answering(&[(true, out)]);
    let c = client(&rec);
    assert_eq!(
        c.protocol_version("7.1.57").await.unwrap(),
        "fdb00b071010000"
    );
    assert_eq!(
        argv(&rec.calls()[0]),
        ["--version", "--timeout", "10"],
        "no cluster file"
    );
    let rec = Recorder::answering(&[(true, "garbage")]);
    assert!(matches!(
        client(&rec).protocol_version("7.1.57").await,
        Err(AdminError::Parse(_))
    ));
}

#[tokio::test]
async fn backup_arguments_follow_the_spec() {
    let rec = Recorder::answering(&[]);
    let c = client(&rec).with_knobs(vec!["--knob_http_verbose_level=3".into()]);
    let b = backup(serde_json::json!({
        "version": "7.1.57", "clusterName": "c", "snapshotPeriodSeconds": 3600,
        "blobStoreConfiguration": {"accountName": "account@minio", "urlParameters": ["secure_connection=0"]},
    }));
    c.start_backup(&b).await.unwrap();
    c.stop_backup(&b).await.unwrap();
    c.abort_backup(&b).await.unwrap();
    c.delete_backup(&b).await.unwrap();
    c.pause_backups().await.unwrap();
    c.resume_backups().await.unwrap();
    c.modify_backup(&b).await.unwrap();
    let url = "blobstore://account@minio:80/mybackup?bucket=fdb-backups&secure_connection=0";
    let calls = rec.calls();
    assert!(calls.iter().all(|c| c.0 == "/usr/bin/fdb/7.1/fdbbackup"));
    let got: Vec<Vec<String>> = calls.iter().map(argv).collect();
    let k = "--knob_http_verbose_level=3";
    assert_eq!(
        got[0],
        [
            "start", "-d", url, "-t", "default", "-s", "3600", "-z", "-C", "<file>", k
        ]
    );
    assert_eq!(got[1], ["discontinue", "-t", "default", "-C", "<file>", k]);
    assert_eq!(got[2], ["abort", "-t", "default", "-C", "<file>", k]);
    assert_eq!(
        got[3],
        ["delete", "-d", url, k],
        "delete needs no cluster file"
    );
    assert_eq!(calls[3].2, Duration::from_secs(600));
    assert_eq!(got[4], ["pause", "-C", "<file>", k]);
    assert_eq!(got[5], ["resume", "-C", "<file>", k]);
    assert_eq!(
        got[6],
        [
            "modify", "-s", "3600", "-d", url, "-t", "default", "-C", "<file>", k
        ]
    );
    assert_eq!(
        calls[0].2,
        Duration::from_secs(10),
        "fdbbackup has no --timeout; killed at 10 s"
    );
    // One-time and partitioned-log backups.
    let rec = Recorder::answering(&[]);
    let b = backup(serde_json::json!({
        "version": "7.4.7", "clusterName": "c", "backupMode": "oneTime", "backupType": "partitioned_log",
        "tag": "t1", "encryptionKeyPath": "/keys/k",
        "blobStoreConfiguration": {"accountName": "a@h:9000", "bucket": "bkt"},
    }));
    client(&rec).start_backup(&b).await.unwrap();
    assert_eq!(
        argv(&rec.calls()[0]),
        [
            "start",
            "-d",
            "blobstore://a@h:9000/mybackup?bucket=bkt",
            "-t",
            "t1",
            "--encryption-key-file",
            "/keys/k",
            "--mutation-log-type",
            "partitioned-log-experimental",
            "-C",
            "<file>"
        ]
    );
}

#[tokio::test]
async fn restore_arguments_and_status() {
    let rec = Recorder::answering(&[
        (true, ""),
        (false, "No restores found for tag `default'.\n"),
    ]);
    let c = client(&rec);
    let r: FoundationDBRestore = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBRestore",
        "metadata": {"name": "r"},
        "spec": {"destinationClusterName": "c", "backupVersion": 123,
                 "keyRanges": [{"start": "a", "end": "b"}, {"start": "c", "end": "d"}],
                 "blobStoreConfiguration": {"accountName": "a@h"}},
    }))
    .unwrap();
    c.start_restore("blobstore://a@h:443/r?bucket=fdb-backups", &r)
        .await
        .unwrap();
    assert_eq!(
        argv(&rec.calls()[0]),
        [
            "start",
            "-r",
            "blobstore://a@h:443/r?bucket=fdb-backups",
            "-v",
            "123",
            "-k",
            "a b;c d",
            "--dest_cluster_file",
            "<file>"
        ]
    );
    assert_eq!(rec.calls()[0].0, "/usr/bin/fdb/7.1/fdbrestore");
    assert!(matches!(
        c.get_restore_status().await,
        Err(AdminError::RestoreDoesNotExist)
    ));
    let rec = Recorder::answering(&[(
        true,
        "Tag: default  UID: ABCD  State: running  Blocks: 1/4\n",
    )]);
    assert!(
        client(&rec)
            .get_restore_status()
            .await
            .unwrap()
            .contains("State: running")
    );
}

#[tokio::test]
async fn failures_are_classified_by_output() {
    let cases: [(&str, &str); 4] = [
        (
            "ERROR: Specified timeout reached -- Failed to get status",
            "database_timeout",
        ),
        ("ERROR: Backup does not exist", "backup_does_not_exist"),
        (
            "ERROR: A backup was not running on tag `default'",
            "backup_not_running",
        ),
        ("ERROR: something else", "fdb_command_failed"),
    ];
    for (out, category) in cases {
        let rec = Recorder::answering(&[(false, out)]);
        let err = client(&rec).reset_maintenance_mode().await.unwrap_err();
        assert_eq!(err.category(), category, "{out}");
    }
}

#[tokio::test]
async fn traces_and_binary_paths() {
    let cfg = BinaryConfig {
        binary_dir: "/b".into(),
        trace_dir: Some("/var/log/fdb".into()),
        trace_format: None,
        tmp_dir: "/tmp".into(),
        cli_timeout: crate::admin::DEFAULT_TIMEOUT,
        max_cli_timeout: crate::admin::MAX_TIMEOUT,
    };
    let (args, _) = Invocation::exec("status").arguments(Path::new("/f"), &[], &cfg);
    assert_eq!(
        args,
        [
            "--exec",
            "status",
            "-C",
            "/f",
            "--log",
            "--trace_format",
            "xml",
            "--log-dir",
            "/var/log/fdb",
            "--timeout",
            "10"
        ]
    );
    let (args, hard) = Invocation::with_args(FDBRESTORE, vec!["status".into()]).arguments(
        Path::new("/f"),
        &["--knob_x=1".into()],
        &cfg,
    );
    assert_eq!(
        args,
        [
            "status",
            "--dest_cluster_file",
            "/f",
            "--knob_x=1",
            "--log",
            "--logdir",
            "/var/log/fdb"
        ]
    );
    assert_eq!(hard, Duration::from_secs(10));
    assert_eq!(
        cfg.binary_path("fdbcli", "7.1.0-rc1"),
        Path::new("/b/7.1.0-rc1/fdbcli")
    );
    assert_eq!(
        cfg.binary_path("fdbcli", "7.3.69"),
        Path::new("/b/7.3/fdbcli")
    );
}

#[tokio::test]
async fn maintenance_list_round_trip() {
    let out = "`\\xff\\x02/org.foundationdb.kubernetes-operator/maintenance/storage-1' is `\\x00\\xf1Se\\x00\\x00\\x00\\x00'\n";
    let rec = Recorder::answering(&[(true, ""), (true, out)]);
    let c = client(&rec);
    c.set_processes_under_maintenance(&["storage-1".into()], 1_700_000_000)
        .await
        .unwrap();
    assert_eq!(
        rec.calls()[0].1[1],
        "writemode on; option on ACCESS_SYSTEM_KEYS; begin; set \\xff\\x02/org.foundationdb.kubernetes-operator/maintenance/storage-1 \\x00\\xf1Se\\x00\\x00\\x00\\x00; commit"
    );
    let got = c.get_processes_under_maintenance().await.unwrap();
    assert_eq!(got.get("storage-1"), Some(&1_700_000_000));
    assert_eq!(
        rec.calls()[1].1[1],
        "option on READ_SYSTEM_KEYS; getrange \\xff\\x02/org.foundationdb.kubernetes-operator/maintenance \\xff\\x02/org.foundationdb.kubernetes-operator/maintenancf 10000"
    );
}

fn lock_line(owner: &str, start: i64, end: i64) -> String {
    format!(
        "`\\xff\\x02/org.foundationdb.kubernetes-operator/global' is `{}'\n",
        keys::printable(&pack_lock(owner, start, end))
    )
}

const NO_LOCK: &str = "`\\xff\\x02/org.foundationdb.kubernetes-operator/global': not found\n";

#[tokio::test]
async fn take_lock_reads_then_swaps_in_one_transaction() {
    let rec = Recorder::answering(&[
        (true, NO_LOCK),
        (
            true,
            &format!("Transaction started\n{NO_LOCK}Committed (42)\n"),
        ),
    ]);
    let lc = CliLockClient::new(client(&rec)).with_clock(Arc::new(|| 1000));
    lc.take_lock().await.unwrap();
    let calls = rec.calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[1].1[1].starts_with("writemode on; option on ACCESS_SYSTEM_KEYS; begin; get \\xff\\x02/org.foundationdb.kubernetes-operator/global; getrange "));
    assert!(calls[1].1[1].contains(&format!(
        "set \\xff\\x02/org.foundationdb.kubernetes-operator/global {}",
        escape(&pack_lock("dc1", 1000, 1600))
    )));
    assert!(calls[1].1[1].ends_with("; commit"));
}

#[tokio::test]
async fn a_lock_held_elsewhere_is_refused_without_writing() {
    let rec = Recorder::answering(&[(true, &lock_line("dc2", 900, 1500))]);
    let lc = CliLockClient::new(client(&rec)).with_clock(Arc::new(|| 1000));
    let err = lc.take_lock().await.unwrap_err();
    assert!(
        matches!(err, AdminError::LockHeld { ref owner, expires: 1500 } if owner == "dc2"),
        "{err}"
    );
    assert_eq!(rec.calls().len(), 1);
}

#[tokio::test]
async fn a_contended_take_is_undone() {
    // Read: free. Our transaction finds dc2's fresh lock (written in between): we undo.
    let ours = lock_line("dc1", 1000, 1600);
    let rec = Recorder::answering(&[
        (true, NO_LOCK),
        (
            true,
            &format!("{}Committed (1)\n", lock_line("dc2", 999, 1599)),
        ),
        (true, &format!("{ours}Committed (2)\n")),
    ]);
    let lc = CliLockClient::new(client(&rec)).with_clock(Arc::new(|| 1000));
    assert!(matches!(
        lc.take_lock().await,
        Err(AdminError::LockHeld { .. })
    ));
    let calls = rec.calls();
    assert_eq!(calls.len(), 3);
    assert!(
        calls[2].1[1].contains(&escape(&pack_lock("dc2", 999, 1599))),
        "dc2's record is put back"
    );
}

#[tokio::test]
async fn deny_list_updates_touch_only_listed_ids() {
    let denied = "`\\xff\\x02/org.foundationdb.kubernetes-operator/denyList/dc3' is `dc3'\n";
    let rec = Recorder::answering(&[(true, denied), (true, "Committed (3)\n")]);
    let lc = CliLockClient::new(client(&rec));
    lc.update_deny_list(&[
        LockDenyListEntry {
            id: "dc2".into(),
            allow: false,
        },
        LockDenyListEntry {
            id: "dc3".into(),
            allow: true,
        },
        LockDenyListEntry {
            id: "dc4".into(),
            allow: true,
        },
    ])
    .await
    .unwrap();
    let cmd = &rec.calls()[1].1[1];
    assert!(cmd.contains("set \\xff\\x02/org.foundationdb.kubernetes-operator/denyList/dc2 dc2"));
    assert!(cmd.contains("clear \\xff\\x02/org.foundationdb.kubernetes-operator/denyList/dc3"));
    assert!(!cmd.contains("dc4"));
}
