//! `fdbbackup` and `fdbrestore` against the fake database, and how any failure is printed.
//!
//! Contract:
//! - Each subcommand is the fake's [`AdminClient`] method of the same meaning, given a
//!   backup or restore resource carrying what the command line names (tag, URL, snapshot
//!   period, encryption key, version, key ranges): the fake records the same calls as with
//!   the in-process fake clients.
//! - `fdbbackup status --json` prints the live status as fdbbackup's JSON (PascalCase names).
//! - [`render_error`] prints an [`AdminError`] so that the admin client's classification of
//!   the output ([`crate::admin::cli::classify`]) gives back its category: a timeout as
//!   `Specified timeout reached`, a missing backup as `Backup does not exist`, a stopped one as
//!   `A backup was not running on tag`, no restore as `No restores found`; exit code 1.

use serde_json::json;

use super::Response;
use super::args::{BackupArgs, RestoreArgs};
use super::keyspace::Keys;
use crate::admin::{AdminClient, AdminError, LiveBackupStatus};
use crate::crd::{FoundationDBBackup, FoundationDBRestore};

/// How a tool prints `e` and exits.
pub fn render_error(e: &AdminError) -> Response {
    let text = match e {
        AdminError::Timeout(m) => format!("ERROR: Specified timeout reached -- {m}\n"),
        AdminError::BackupDoesNotExist(m) => format!("ERROR: Backup does not exist: {m}\n"),
        AdminError::BackupNotRunning(tag) => {
            format!("ERROR: A backup was not running on tag `{tag}'\n")
        }
        AdminError::RestoreDoesNotExist => "No restores found for tag `default'.\n".into(),
        AdminError::Command { output, code, .. } => {
            let mut r = Response::error(format!("{}\n", output.trim_end()));
            r.code = code.filter(|c| *c != 0).unwrap_or(1);
            return r;
        }
        AdminError::Conflict => {
            "ERROR: Transaction not committed due to conflict with another transaction (1020)\n"
                .into()
        }
        other => format!("ERROR: {other}\n"),
    };
    Response::error(text)
}

// `blobstore://<account>@<host>:<port>/<name>?bucket=<b>&<params>` back into the backup's
// blob store configuration, which the fake builds the same URL from.
fn blob_store(url: &str) -> Option<serde_json::Value> {
    let rest = url.strip_prefix("blobstore://")?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (account, name) = path.split_once('/')?;
    let (mut bucket, mut params) = (None, Vec::new());
    for p in query.split('&').filter(|p| !p.is_empty()) {
        match p.strip_prefix("bucket=") {
            Some(b) => bucket = Some(b),
            None => params.push(p),
        }
    }
    let mut conf = json!({"accountName": account, "backupName": name, "urlParameters": params});
    if let Some(b) = bucket {
        conf["bucket"] = json!(b);
    }
    Some(conf)
}

fn backup_resource(args: &BackupArgs) -> Result<FoundationDBBackup, AdminError> {
    let mut spec = json!({"version": "", "clusterName": "fdb-sim"});
    if let Some(conf) = args.url.as_deref().and_then(blob_store) {
        spec["blobStoreConfiguration"] = conf;
    }
    if let Some(tag) = &args.tag {
        spec["tag"] = json!(tag);
    }
    if let Some(s) = args.snapshot_seconds {
        spec["snapshotPeriodSeconds"] = json!(s);
    }
    if let Some(k) = &args.encryption_key_file {
        spec["encryptionKeyPath"] = json!(k);
    }
    if !args.continuous && args.command == "start" {
        spec["backupMode"] = json!("oneTime");
    }
    serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBBackup",
        "metadata": {"name": args.tag.clone().unwrap_or_else(|| "default".into())},
        "spec": spec,
    }))
    .map_err(|e| AdminError::InvalidInput(e.to_string()))
}

/// Runs an `fdbbackup` subcommand.
pub async fn backup(keys: &Keys, args: &BackupArgs) -> Response {
    let db = &keys.fake;
    let b = match backup_resource(args) {
        Ok(b) => b,
        Err(e) => return render_error(&e),
    };
    let result = match args.command.as_str() {
        "start" => db.start_backup(&b).await.map(|()| {
            format!(
                "The backup on tag `{}' was successfully submitted.\n",
                b.tag()
            )
        }),
        "discontinue" => db.stop_backup(&b).await.map(|()| {
            format!(
                "The backup on tag `{}' was successfully discontinued.\n",
                b.tag()
            )
        }),
        "abort" => db.abort_backup(&b).await.map(|()| {
            format!(
                "The backup on tag `{}' was successfully aborted.\n",
                b.tag()
            )
        }),
        "delete" => db
            .delete_backup(&b)
            .await
            .map(|()| "The specified backup has been deleted.\n".to_owned()),
        "pause" => db
            .pause_backups()
            .await
            .map(|()| "All backup agents have been paused.\n".to_owned()),
        "resume" => db
            .resume_backups()
            .await
            .map(|()| "All backup agents have been resumed.\n".to_owned()),
        "modify" => db.modify_backup(&b).await.map(|()| String::new()),
        "status" if args.json => db.get_backup_status(&b).await.map(|s| status_json(&s)),
        other => Err(AdminError::InvalidInput(format!(
            "fdbbackup {other}: not simulated by fdb-sim (status needs --json)"
        ))),
    };
    match result {
        Ok(text) => Response::ok(text),
        Err(e) => render_error(&e),
    }
}

/// `fdbbackup status --json`'s document for `s`.
pub fn status_json(s: &LiveBackupStatus) -> String {
    let doc = json!({
        "DestinationURL": s.destination_url,
        "SnapshotIntervalSeconds": s.snapshot_interval_seconds,
        "Status": {"Name": s.status.name, "Running": s.status.running, "Completed": s.status.completed},
        "BackupAgentsPaused": s.backup_agents_paused,
        "Restorable": s.restorable,
        "UID": s.uid,
        "Tag": s.tag,
    });
    format!("{doc:#}\n")
}

/// Runs an `fdbrestore` subcommand.
pub async fn restore(keys: &Keys, args: &RestoreArgs) -> Response {
    let db = &keys.fake;
    let result = match args.command.as_str() {
        "start" => match &args.url {
            None => Err(AdminError::InvalidInput("fdbrestore start needs -r".into())),
            Some(url) => match restore_resource(args) {
                Ok(r) => db.start_restore(url, &r).await.map(|()| {
                    format!(
                        "Restoring backup to version: {}\n",
                        args.version.unwrap_or(-1)
                    )
                }),
                Err(e) => Err(e),
            },
        },
        "status" => db.get_restore_status().await,
        other => Err(AdminError::InvalidInput(format!(
            "fdbrestore {other}: not simulated by fdb-sim"
        ))),
    };
    match result {
        Ok(text) => Response::ok(text),
        Err(e) => render_error(&e),
    }
}

fn restore_resource(args: &RestoreArgs) -> Result<FoundationDBRestore, AdminError> {
    let ranges: Vec<serde_json::Value> = args
        .key_ranges
        .iter()
        .flat_map(|r| r.split(';'))
        .filter_map(|r| r.split_once(' '))
        .map(|(start, end)| json!({"start": start, "end": end}))
        .collect();
    let mut spec = json!({"destinationClusterName": "fdb-sim", "keyRanges": ranges});
    if let Some(v) = args.version {
        spec["backupVersion"] = json!(v);
    }
    if let Some(k) = &args.encryption_key_file {
        spec["encryptionKeyPath"] = json!(k);
    }
    serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBRestore",
        "metadata": {"name": "fdb-sim"},
        "spec": spec,
    }))
    .map_err(|e| AdminError::InvalidInput(e.to_string()))
}
