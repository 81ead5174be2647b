use std::path::Path;

use super::*;
use crate::admin::cli::{BinaryConfig, FDBBACKUP, FDBCLI, FDBRESTORE, Invocation};

fn config(trace: bool) -> BinaryConfig {
    BinaryConfig {
        binary_dir: "/sim".into(),
        trace_dir: trace.then(|| "/var/log/fdb".to_owned()),
        trace_format: None,
        tmp_dir: "/tmp".into(),
        cli_timeout: crate::admin::DEFAULT_TIMEOUT,
        max_cli_timeout: crate::admin::MAX_TIMEOUT,
    }
}

// The arguments exactly as the admin client builds them.
fn argv(inv: &Invocation, trace: bool) -> Vec<String> {
    let knobs = ["--knob_http_verbose_level=3".to_owned()];
    inv.arguments(Path::new("/tmp/u-cli/f"), &knobs, &config(trace))
        .0
}

#[test]
fn fdbcli_exec_with_and_without_traces() {
    for trace in [false, true] {
        let mut inv = Invocation::exec(
            "writemode on; option on ACCESS_SYSTEM_KEYS; begin; set \\xff\\x02/a b; commit",
        );
        inv.timeout = Some(Duration::from_secs(40));
        let parsed = parse(FDBCLI, &argv(&inv, trace)).unwrap();
        let Parsed::Run {
            cluster_file,
            timeout,
            call: Call::Exec(commands),
        } = parsed
        else {
            panic!("an exec: {parsed:?}");
        };
        assert_eq!(cluster_file.unwrap(), Path::new("/tmp/u-cli/f"));
        assert_eq!(timeout, Some(Duration::from_secs(40)));
        assert_eq!(commands.len(), 5);
        assert_eq!(commands[3], ["set", "\\xff\\x02/a", "b"]);
    }
}

#[test]
fn fdbcli_version_needs_no_cluster_file() {
    let mut inv = Invocation::with_args(FDBCLI, vec!["--version".into()]);
    inv.ignore_cluster_file = true;
    assert_eq!(parse(FDBCLI, &argv(&inv, false)).unwrap(), Parsed::Version);
}

#[test]
fn fdbbackup_subcommands_as_the_client_sends_them() {
    let url = "blobstore://a@h:443/b?bucket=fdb-backups";
    let args: Vec<String> = [
        "start",
        "-d",
        url,
        "-t",
        "t1",
        "-s",
        "3600",
        "-z",
        "--encryption-key-file",
        "/k",
        "--mutation-log-type",
        "partitioned-log-experimental",
    ]
    .map(str::to_owned)
    .to_vec();
    for trace in [false, true] {
        let parsed = parse(
            FDBBACKUP,
            &argv(&Invocation::with_args(FDBBACKUP, args.clone()), trace),
        );
        let Ok(Parsed::Run {
            cluster_file: Some(_),
            timeout: None,
            call: Call::Backup(b),
        }) = parsed
        else {
            panic!("a backup call: {parsed:?}");
        };
        assert_eq!(
            b,
            BackupArgs {
                command: "start".into(),
                url: Some(url.into()),
                tag: Some("t1".into()),
                snapshot_seconds: Some(3600),
                continuous: true,
                json: false,
                encryption_key_file: Some("/k".into()),
                partitioned_log: true,
            }
        );
    }
    // delete runs without a cluster file.
    let mut inv = Invocation::with_args(FDBBACKUP, vec!["delete".into(), "-d".into(), url.into()]);
    inv.ignore_cluster_file = true;
    let Ok(Parsed::Run {
        cluster_file: None,
        call: Call::Backup(b),
        ..
    }) = parse(FDBBACKUP, &argv(&inv, false))
    else {
        panic!("a delete without cluster file");
    };
    assert_eq!(b.command, "delete");
    let status = ["status", "--json", "-t", "default"]
        .map(str::to_owned)
        .to_vec();
    let Ok(Parsed::Run {
        call: Call::Backup(b),
        ..
    }) = parse(
        FDBBACKUP,
        &argv(&Invocation::with_args(FDBBACKUP, status), true),
    )
    else {
        panic!("a status call");
    };
    assert!(b.json);
}

#[test]
fn fdbrestore_start_and_status() {
    let args: Vec<String> = [
        "start",
        "-r",
        "blobstore://a@h/r",
        "-v",
        "123",
        "-k",
        "a b;c d",
    ]
    .map(str::to_owned)
    .to_vec();
    let Ok(Parsed::Run {
        cluster_file: Some(f),
        call: Call::Restore(r),
        ..
    }) = parse(
        FDBRESTORE,
        &argv(&Invocation::with_args(FDBRESTORE, args), true),
    )
    else {
        panic!("a restore");
    };
    assert_eq!(f, Path::new("/tmp/u-cli/f"), "from --dest_cluster_file");
    assert_eq!(r.version, Some(123));
    assert_eq!(r.key_ranges.as_deref(), Some("a b;c d"));
    let status = Invocation::with_args(FDBRESTORE, vec!["status".into()]);
    assert!(matches!(
        parse(FDBRESTORE, &argv(&status, false)),
        Ok(Parsed::Run { call: Call::Restore(RestoreArgs { ref command, .. }), .. }) if command == "status"
    ));
}

#[test]
fn what_the_client_never_sends_is_refused_by_name() {
    let err = parse(
        FDBCLI,
        &["--exec".into(), "status".into(), "--bogus".into()],
    )
    .unwrap_err();
    assert!(err.contains("--bogus"), "{err}");
    assert!(parse(FDBCLI, &["-C".into()]).unwrap_err().contains("-C"));
    assert!(
        parse(FDBCLI, &["-C".into(), "/f".into()]).is_err(),
        "no --exec"
    );
    assert!(parse(FDBBACKUP, &["explode".into()]).is_err());
    assert!(parse(FDBRESTORE, &["start".into(), "-C".into(), "/f".into()]).is_err());
    assert!(parse("fdbserver", &[]).is_err());
}

#[test]
fn exec_strings_split_like_fdbcli() {
    assert_eq!(
        split_commands("kill; kill 1.2.3.4:4501 1.2.3.5:4501; sleep 5").unwrap(),
        vec![
            vec!["kill".to_owned()],
            vec!["kill".into(), "1.2.3.4:4501".into(), "1.2.3.5:4501".into()],
            vec!["sleep".into(), "5".into()],
        ]
    );
    assert_eq!(
        split_commands("set k \"a; b\" ;; status").unwrap(),
        vec![
            vec!["set".to_owned(), "k".into(), "a; b".into()],
            vec!["status".into()],
        ]
    );
    assert!(split_commands("set k \"open").is_err());
}
