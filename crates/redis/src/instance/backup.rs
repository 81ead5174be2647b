//! Backups taken on this instance (`POST /v1/backup`, `GET /v1/backup/<id>`): asynchronous,
//! one per RedisBackup name.
//!
//! Contract:
//! - [`start`] validates the request (name, method, exactly one destination), answers 202 with
//!   the job in phase `Running` at once, and runs it in the background; a second request with
//!   the same name answers the existing job (202 while it runs, 200 once it ended), so a
//!   retried call never starts a second backup.
//! - RDB ([`snapshot`]): the snapshot always starts after the request — a save already
//!   running is waited out first (it may predate the request), then `BGSAVE SCHEDULE` (which
//!   waits for an AOF rewrite instead of failing); a save another client starts in between
//!   counts, since it began after the request. Completion is `rdb_saves` (which counts saves
//!   as they start) past its value before the request, no save running, and
//!   `rdb_last_bgsave_status:ok`. Upstream issued `BGSAVE`
//!   blindly, which fails while a save runs.
//! - AOF: the same with `BGREWRITEAOF` and `aof_rewrites`, then a tar.gz of
//!   `appendonlydir` (which must hold its manifest).
//! - Upload ([`Store`]): S3-compatible storage ([`super::s3`]) or Azure Blob Storage
//!   ([`super::azure`]) at `<path>/<backupName>.rdb` or `.aof.tar.gz`, credentials from the
//!   projected `/backup-credentials` files, read before the snapshot is taken (missing
//!   credentials fail the backup without a snapshot).
//! - Deletion ([`delete`], `DELETE /v1/backup/<id>`, for a RedisBackup with
//!   `deletionPolicy: Delete`): only the key backup `id` was (or would have been) uploaded
//!   to, never another; S3 DeleteObject or Azure Delete Blob, a missing object counting as
//!   deleted; refused while that backup still runs here (its upload could come after).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::local::Local;
use super::manager::Instance;
use super::resp::RespError;
use super::{azure, s3};
use crate::crd::{BackupDestination, S3Destination};
use crate::instance_api::{BackupRequest, BackupResult, Boot};

/// How long a backup may take, snapshot and upload.
pub const BACKUP_TIMEOUT: Duration = Duration::from_secs(3600);

/// Backups by id.
#[derive(Debug, Default)]
pub struct Jobs(Mutex<BTreeMap<String, BackupResult>>);

impl Jobs {
    /// A backup's state.
    pub fn get(&self, id: &str) -> Option<BackupResult> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn put(&self, r: BackupResult) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(r.id.clone(), r);
    }

    // Inserts a running job unless one exists; returns the existing one.
    fn claim(&self, id: &str) -> Option<BackupResult> {
        let mut jobs = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = jobs.get(id) {
            return Some(r.clone());
        }
        jobs.insert(id.to_owned(), running(id));
        None
    }
}

fn running(id: &str) -> BackupResult {
    BackupResult {
        id: id.to_owned(),
        phase: "Running".into(),
        artifact_type: String::new(),
        backup_path: String::new(),
        backup_size: 0,
        checksum_sha256: String::new(),
        error: String::new(),
    }
}

/// What a request asks for, checked (pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The RedisBackup's name (the job id and the object's file name).
    pub name: String,
    /// RDB or AOF archive.
    pub aof: bool,
    /// The object key.
    pub key: String,
    /// Where.
    pub destination: BackupDestination,
}

/// Checks a request (pure).
pub fn plan(req: &BackupRequest) -> Result<Plan, String> {
    let name = req.backup_name.trim();
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if name.is_empty() || name.len() > 253 || !name.chars().all(safe) || name.starts_with('.') {
        return Err(format!(
            "backupName {:?} must be a Kubernetes object name",
            req.backup_name
        ));
    }
    let aof = match req.method.as_str() {
        "" | "rdb" => false,
        "aof" => true,
        other => return Err(format!("unsupported backup method {other:?} (rdb or aof)")),
    };
    BackupDestination::validate(Some(&req.destination))?;
    let prefix = match (&req.destination.s3, &req.destination.azure) {
        (Some(s), _) => s.path.clone(),
        (_, Some(a)) => a.path.clone(),
        _ => String::new(),
    };
    Ok(Plan {
        name: name.to_owned(),
        aof,
        key: object_key(&prefix, name, aof),
        destination: req.destination.clone(),
    })
}

/// Upstream's object key: `<path>/<name>.rdb` or `<path>/<name>.aof.tar.gz`.
pub fn object_key(prefix: &str, name: &str, aof: bool) -> String {
    let file = format!("{name}{}", if aof { ".aof.tar.gz" } else { ".rdb" });
    match prefix.trim_matches('/') {
        "" => file,
        p => format!("{p}/{file}"),
    }
}

/// `POST /v1/backup`.
pub async fn start(
    State(inst): State<Arc<Instance>>,
    body: Result<Json<BackupRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let req = match body {
        Ok(Json(r)) => r,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("the body must be a BackupRequest: {e}"),
            )
                .into_response();
        }
    };
    let plan = match plan(&req) {
        Ok(p) => p,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    if let Some(existing) = inst.backups.claim(&plan.name) {
        let code = if existing.phase == "Running" {
            StatusCode::ACCEPTED
        } else {
            StatusCode::OK
        };
        return (code, Json(existing)).into_response();
    }
    if inst.state().boot != Boot::Running {
        let mut r = running(&plan.name);
        r.phase = "Failed".into();
        r.error = "redis-server is not running on this instance".into();
        inst.backups.put(r.clone());
        return (StatusCode::CONFLICT, Json(r)).into_response();
    }
    let job = inst.clone();
    let id = plan.name.clone();
    tokio::spawn(async move {
        let outcome = tokio::time::timeout(BACKUP_TIMEOUT, run(&job, &plan)).await;
        let mut r = running(&plan.name);
        match outcome {
            Ok(Ok(done)) => r = done,
            Ok(Err(e)) => {
                r.phase = "Failed".into();
                r.error = e;
            }
            Err(_) => {
                r.phase = "Failed".into();
                r.error = format!("the backup did not finish within {BACKUP_TIMEOUT:?}");
            }
        }
        tracing::info!(backup = %r.id, phase = %r.phase, error = %r.error, path = %r.backup_path, "backup ended");
        job.backups.put(r);
    });
    (StatusCode::ACCEPTED, Json(running(&id))).into_response()
}

async fn run(inst: &Instance, plan: &Plan) -> Result<BackupResult, String> {
    let s = &inst.settings;
    take(
        &inst.local,
        &s.paths.data_dir,
        &s.backup_credentials_dir,
        plan,
    )
    .await
}

/// Where a backup goes, with its credentials read.
#[derive(Clone, Debug)]
pub enum Store {
    /// An S3-compatible bucket.
    S3(s3::Bucket),
    /// An Azure Blob container.
    Azure(azure::Container),
}

impl Store {
    /// The store of `d` with the credentials projected in `credentials`.
    pub fn open(d: &BackupDestination, credentials: &Path) -> Result<Self, String> {
        match (&d.s3, &d.azure) {
            (Some(s), None) => Ok(Store::S3(bucket(s, s3::Credentials::read(credentials)?))),
            (None, Some(a)) => {
                let creds = azure::Credentials::read(credentials)?;
                Ok(Store::Azure(azure::Container::new(a, creds)?))
            }
            _ => Err(BackupDestination::validate(Some(d))
                .err()
                .unwrap_or_else(|| "destination must set exactly one of s3 or azure".into())),
        }
    }

    /// `s3://<bucket>/<key>` or `azblob://<container>/<key>`.
    pub fn path(&self, key: &str) -> String {
        match self {
            Store::S3(b) => format!("s3://{}/{key}", b.bucket),
            Store::Azure(c) => format!("azblob://{}/{key}", c.container),
        }
    }

    /// Uploads `file` as `key`; returns its size and hex SHA-256.
    pub async fn put_file(&self, key: &str, file: &Path) -> Result<(u64, String), String> {
        let http = http()?;
        match self {
            Store::S3(b) => b.put_file(&http, key, file).await,
            Store::Azure(c) => c.put_file(&http, key, file).await,
        }
    }

    /// Downloads `key` into `file`; returns the bytes written.
    pub async fn get_to_file(&self, key: &str, file: &Path) -> Result<u64, String> {
        let http = http()?;
        match self {
            Store::S3(b) => b.get_to_file(&http, key, file).await,
            Store::Azure(c) => c.get_to_file(&http, key, file).await,
        }
    }

    /// Deletes `key`; `false` when the store said it was not there.
    pub async fn delete(&self, key: &str) -> Result<bool, String> {
        let http = http()?;
        match self {
            Store::S3(b) => b.delete(&http, key).await,
            Store::Azure(c) => c.delete(&http, key).await,
        }
    }
}

/// `DELETE /v1/backup/<id>` with the backup's [`BackupRequest`] (its name, method and
/// destination): deletes the artifact of backup `id` at its key in that destination, with
/// the projected credentials (see [`crate::instance_api`]). 200 when it is gone (deleted, or
/// not there), 409 while that backup still runs on this instance or when the store refused
/// (with its reason), 400 for a request that does not describe backup `id`.
pub async fn delete(
    State(inst): State<Arc<Instance>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: Result<Json<BackupRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let plan = match body.map_err(|e| format!("the body must be a BackupRequest: {e}")) {
        Ok(Json(r)) => plan(&r),
        Err(e) => Err(e),
    };
    let plan = match plan {
        Ok(p) if p.name == id => p,
        Ok(p) => {
            let msg = format!("the request describes backup {:?}, not {id:?}", p.name);
            return (StatusCode::BAD_REQUEST, msg).into_response();
        }
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let answer = |code: StatusCode, done: bool, message: String| {
        (
            code,
            Json(crate::instance_api::CommandResult { done, message }),
        )
            .into_response()
    };
    if inst.backups.get(&id).is_some_and(|r| r.phase == "Running") {
        let msg = format!("backup {id} is still running on this instance");
        return answer(StatusCode::CONFLICT, false, msg);
    }
    let store = match Store::open(&plan.destination, &inst.settings.backup_credentials_dir) {
        Ok(s) => s,
        Err(e) => return answer(StatusCode::CONFLICT, false, e),
    };
    let path = store.path(&plan.key);
    match store.delete(&plan.key).await {
        Ok(true) => {
            tracing::info!(backup = %id, %path, "backup artifact deleted");
            answer(StatusCode::OK, true, format!("deleted {path}"))
        }
        Ok(false) => answer(StatusCode::OK, true, format!("{path} was not there")),
        Err(e) => answer(StatusCode::CONFLICT, false, e),
    }
}

fn http() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())
}

/// Takes the backup `plan` describes on the redis-server behind `local` (whose data
/// directory is `data`) and uploads it with the credentials projected in `credentials`.
pub async fn take(
    local: &Local,
    data: &Path,
    credentials: &Path,
    plan: &Plan,
) -> Result<BackupResult, String> {
    // Credentials first: a backup that cannot be uploaded is not taken.
    let store = Store::open(&plan.destination, credentials)?;
    let artifact = if plan.aof {
        snapshot(local, Kind::Aof, BACKUP_TIMEOUT).await?;
        let dir = data.join("appendonlydir");
        let out = data.join(format!(".backup-{}.aof.tar.gz", plan.name));
        let o = out.clone();
        tokio::task::spawn_blocking(move || archive(&dir, &o))
            .await
            .map_err(|e| e.to_string())??;
        out
    } else {
        snapshot(local, Kind::Rdb, BACKUP_TIMEOUT).await?;
        // A copy, so a later save replacing dump.rdb cannot change what is uploaded.
        let copy = data.join(format!(".backup-{}.rdb", plan.name));
        tokio::fs::copy(data.join("dump.rdb"), &copy)
            .await
            .map_err(|e| format!("copying dump.rdb: {e}"))?;
        copy
    };
    let result = store.put_file(&plan.key, &artifact).await;
    let _ = tokio::fs::remove_file(&artifact).await;
    let (size, sha) = result?;
    Ok(BackupResult {
        id: plan.name.clone(),
        phase: "Completed".into(),
        artifact_type: if plan.aof { "aof-archive" } else { "rdb" }.into(),
        backup_path: store.path(&plan.key),
        backup_size: i64::try_from(size).unwrap_or(i64::MAX),
        checksum_sha256: sha,
        error: String::new(),
    })
}

/// The bucket of an S3 destination with `creds`.
pub fn bucket(d: &S3Destination, creds: s3::Credentials) -> s3::Bucket {
    s3::Bucket {
        bucket: d.bucket.clone(),
        endpoint: d.endpoint.clone(),
        region: if d.region.is_empty() {
            s3::DEFAULT_REGION.into()
        } else {
            d.region.clone()
        },
        creds,
    }
}

/// Which persistence a backup waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `BGSAVE`.
    Rdb,
    /// `BGREWRITEAOF`.
    Aof,
}

impl Kind {
    fn fields(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Rdb => (
                "rdb_bgsave_in_progress",
                "rdb_saves",
                "rdb_last_bgsave_status",
            ),
            Kind::Aof => (
                "aof_rewrite_in_progress",
                "aof_rewrites",
                "aof_last_bgrewrite_status",
            ),
        }
    }
}

/// Takes a snapshot that starts after this call (see the module contract).
pub async fn snapshot(local: &Local, kind: Kind, timeout: Duration) -> Result<(), String> {
    let (running, count, status) = kind.fields();
    let deadline = Instant::now() + timeout;
    let poll = || async {
        if Instant::now() > deadline {
            return Err(format!("no snapshot within {timeout:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    };
    let mut info = local.info("persistence").await.map_err(|e| e.to_string())?;
    while info.int(running) == 1 {
        poll().await?;
        info = local.info("persistence").await.map_err(|e| e.to_string())?;
    }
    if !info.0.contains_key(count) {
        return Err(format!(
            "INFO persistence has no {count}: Redis 7 or later is required"
        ));
    }
    let before = info.int(count);
    let cmd: &[&str] = match kind {
        Kind::Rdb => &["BGSAVE", "SCHEDULE"],
        Kind::Aof => &["BGREWRITEAOF"],
    };
    match local
        .conn()
        .await
        .map_err(|e| e.to_string())?
        .command(cmd)
        .await
    {
        Ok(_) => {}
        // Another client started one after our request: it counts.
        Err(RespError::Server(m)) if m.contains("already in progress") => {}
        Err(e) => return Err(format!("{}: {e}", cmd.join(" "))),
    }
    let mut seen_running = false;
    loop {
        let i = local.info("persistence").await.map_err(|e| e.to_string())?;
        let now_running = i.int(running) == 1;
        seen_running |= now_running;
        if !now_running && i.int(count) > before {
            return match i.get(status) {
                "ok" => Ok(()),
                other => Err(format!("{status}:{other}")),
            };
        }
        if !now_running && seen_running && i.get(status) != "ok" {
            return Err(format!("the snapshot failed ({status}:{})", i.get(status)));
        }
        poll().await?;
    }
}

/// Writes a tar.gz of `dir` (which must hold `appendonly.aof.manifest`) to `out`.
pub fn archive(dir: &Path, out: &Path) -> Result<(), String> {
    let manifest = dir.join("appendonly.aof.manifest");
    if !manifest.is_file() {
        return Err(format!("{} is missing", manifest.display()));
    }
    let f = std::fs::File::create(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        tar.append_path_with_name(&p, &name)
            .map_err(|e| format!("archiving {}: {e}", p.display()))?;
    }
    let gz = tar
        .into_inner()
        .map_err(|e| format!("writing {}: {e}", out.display()))?;
    let f = gz
        .finish()
        .map_err(|e| format!("writing {}: {e}", out.display()))?;
    f.sync_all()
        .map_err(|e| format!("writing {}: {e}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::AzureBlobDestination;

    fn req(name: &str, method: &str, dest: BackupDestination) -> BackupRequest {
        BackupRequest {
            backup_name: name.into(),
            method: method.into(),
            destination: dest,
        }
    }

    fn s3(path: Option<&str>) -> BackupDestination {
        BackupDestination {
            s3: Some(S3Destination {
                bucket: "bk".into(),
                path: path.unwrap_or_default().into(),
                endpoint: String::new(),
                region: String::new(),
            }),
            azure: None,
        }
    }

    #[test]
    fn requests_are_checked() {
        let p = plan(&req("nightly-1", "", s3(Some("/backups/demo/")))).expect("valid");
        assert_eq!(
            (p.key.as_str(), p.aof),
            ("backups/demo/nightly-1.rdb", false)
        );
        let p = plan(&req("n", "aof", s3(None))).expect("valid");
        assert_eq!(p.key, "n.aof.tar.gz");
        for (name, method, dest) in [
            ("", "rdb", s3(None)),
            ("../x", "rdb", s3(None)),
            ("a/b", "rdb", s3(None)),
            ("ok", "zip", s3(None)),
            ("ok", "rdb", BackupDestination::default()),
            (
                "ok",
                "rdb",
                BackupDestination {
                    azure: Some(AzureBlobDestination::default()),
                    ..s3(None)
                },
            ),
        ] {
            assert!(
                plan(&req(name, method, dest.clone())).is_err(),
                "{name:?} {method:?} {dest:?}"
            );
        }
    }

    #[test]
    fn a_claimed_job_is_answered_again() {
        let jobs = Jobs::default();
        assert!(jobs.claim("b1").is_none());
        assert_eq!(jobs.claim("b1").map(|r| r.phase), Some("Running".into()));
    }
}
