//! `redis-operator restore`: the bootstrap init container. Downloads a completed RedisBackup
//! into the data directory before redis-server ever starts.
//!
//! Contract:
//! - The RedisBackup must be `Completed` with a valid S3 destination and a `backupPath` in
//!   that bucket (`s3://<bucket>/<key>`); credentials come from the projected
//!   `/backup-credentials` files (as the backup's), never from the API.
//! - An RDB lands as `dump.rdb` and as the base of a fresh `appendonlydir` (with
//!   `appendonly yes`, Redis loads the AOF and would start empty without one — upstream's RDB
//!   restores did); an AOF archive is extracted into a staging directory and swapped in as
//!   `appendonlydir`. Extraction is path-traversal safe ([`check_entry`]: only
//!   plain relative names, only files and directories, a size cap) and the archive must hold
//!   the AOF manifest. Whatever was there before is moved aside
//!   (`*.pre-restore`), never deleted.
//! - A marker (`.restored-<backup>`) makes a re-run a no-op, so a restarted init container
//!   never overwrites data the instance wrote since.

use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use kube::api::Api;

use super::{backup, s3};
use crate::crd::{BackupArtifactType, BackupDestination, BackupMethod, BackupPhase, RedisBackup};
use crate::names;

/// The AOF manifest's file name (Redis 7 multi-part AOF, `appendfilename appendonly.aof`).
pub const AOF_MANIFEST: &str = "appendonly.aof.manifest";
/// The base file a restored RDB becomes.
pub const RDB_BASE: &str = "appendonly.aof.1.base.rdb";

/// Biggest archive content restored (upstream's cap).
pub const MAX_EXTRACTED: u64 = 32 << 30;

/// Flags of `redis-operator restore`.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
#[command(about = "Restore a completed RedisBackup into the data directory (init container)")]
pub struct RestoreFlags {
    /// The RedisBackup to restore.
    #[arg(long, env = "BACKUP_NAME")]
    pub backup_name: String,
    /// Its namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: String,
    /// The data directory.
    #[arg(long, default_value = names::DATA_DIR)]
    pub data_dir: PathBuf,
    /// Object storage credentials.
    #[arg(long, default_value = names::BACKUP_CREDENTIALS_DIR)]
    pub backup_credentials_dir: PathBuf,
}

/// Where a completed backup is (pure): bucket, key, and whether it is an AOF archive.
pub fn locate(b: &RedisBackup) -> Result<(crate::crd::S3Destination, String, bool), String> {
    let status = b.status.clone().unwrap_or_default();
    if status.phase != Some(BackupPhase::Completed) {
        return Err(format!(
            "RedisBackup {} is not Completed (phase {:?})",
            b.metadata.name.clone().unwrap_or_default(),
            status.phase
        ));
    }
    BackupDestination::validate(b.spec.destination.as_ref())?;
    let Some(d) = b.spec.destination.as_ref().and_then(|d| d.s3.clone()) else {
        return Err("only S3 destinations can be restored by this version".into());
    };
    let rest = status
        .backup_path
        .strip_prefix("s3://")
        .ok_or_else(|| format!("backupPath {:?} is not an s3:// path", status.backup_path))?;
    let (bucket, key) = rest
        .split_once('/')
        .ok_or_else(|| format!("backupPath {:?} has no key", status.backup_path))?;
    if bucket != d.bucket || key.is_empty() {
        return Err(format!(
            "backupPath {:?} is not in bucket {:?}",
            status.backup_path, d.bucket
        ));
    }
    let aof = match status.artifact_type {
        Some(BackupArtifactType::AofArchive) => true,
        Some(BackupArtifactType::Rdb) => false,
        None => b.spec.method == BackupMethod::Aof,
    };
    Ok((d, key.to_owned(), aof))
}

/// Whether an archive entry may be extracted (pure): a relative path of plain names, at
/// most one directory deep, that is a file or a directory.
pub fn check_entry(path: &Path, kind: tar::EntryType) -> Result<(), String> {
    if !(kind.is_file() || kind.is_dir()) {
        return Err(format!(
            "{}: only files and directories may be restored",
            path.display()
        ));
    }
    let parts: Vec<Component<'_>> = path.components().collect();
    if parts.is_empty()
        || parts
            .iter()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!("{}: not a plain relative path", path.display()));
    }
    Ok(())
}

/// Extracts the AOF archive `archive` into `staging` (see the module contract).
pub fn extract(archive: &Path, staging: &Path) -> Result<(), String> {
    let f =
        std::fs::File::open(archive).map_err(|e| format!("opening {}: {e}", archive.display()))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    std::fs::create_dir_all(staging).map_err(|e| format!("creating {}: {e}", staging.display()))?;
    let mut total = 0u64;
    for entry in tar
        .entries()
        .map_err(|e| format!("reading the archive: {e}"))?
    {
        let mut entry = entry.map_err(|e| format!("reading the archive: {e}"))?;
        let path = entry
            .path()
            .map_err(|e| format!("reading the archive: {e}"))?
            .into_owned();
        check_entry(&path, entry.header().entry_type())?;
        total += entry.header().size().unwrap_or(0);
        if total > MAX_EXTRACTED {
            return Err(format!("the archive holds more than {MAX_EXTRACTED} bytes"));
        }
        let target = staging.join(&path);
        if entry.header().entry_type().is_dir() {
            std::fs::create_dir_all(&target)
                .map_err(|e| format!("creating {}: {e}", target.display()))?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        let mut out = std::fs::File::create(&target)
            .map_err(|e| format!("creating {}: {e}", target.display()))?;
        std::io::copy(&mut entry, &mut out)
            .map_err(|e| format!("writing {}: {e}", target.display()))?;
    }
    if !staging.join(AOF_MANIFEST).is_file() {
        return Err("the archive holds no appendonly.aof.manifest".into());
    }
    Ok(())
}

fn aside(path: &Path) -> std::io::Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let mut n = 0;
    loop {
        let mut name = path.as_os_str().to_owned();
        name.push(if n == 0 {
            ".pre-restore".to_owned()
        } else {
            format!(".pre-restore.{n}")
        });
        let to = PathBuf::from(name);
        if !to.exists() {
            return std::fs::rename(path, to);
        }
        n += 1;
    }
}

/// Puts a downloaded artifact in place in `data` (see the module contract).
pub fn install(data: &Path, downloaded: &Path, aof: bool) -> Result<(), String> {
    let aof_dir = data.join("appendonlydir");
    if aof {
        let staging = data.join("appendonlydir.restore-tmp");
        let _ = std::fs::remove_dir_all(&staging);
        extract(downloaded, &staging)?;
        aside(&aof_dir).map_err(|e| format!("moving the old appendonlydir aside: {e}"))?;
        std::fs::rename(&staging, &aof_dir)
            .map_err(|e| format!("installing appendonlydir: {e}"))?;
    } else {
        // With `appendonly yes` Redis loads the AOF, not dump.rdb, and starts empty when there
        // is none: the RDB also becomes the base of a fresh multi-part AOF.
        let staging = data.join("appendonlydir.restore-tmp");
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)
            .map_err(|e| format!("creating {}: {e}", staging.display()))?;
        std::fs::copy(downloaded, staging.join(RDB_BASE))
            .map_err(|e| format!("writing the AOF base: {e}"))?;
        std::fs::write(
            staging.join(AOF_MANIFEST),
            format!("file {RDB_BASE} seq 1 type b\n"),
        )
        .map_err(|e| format!("writing the AOF manifest: {e}"))?;
        aside(&aof_dir).map_err(|e| format!("moving the old appendonlydir aside: {e}"))?;
        aside(&data.join("dump.rdb")).map_err(|e| format!("moving the old dump.rdb aside: {e}"))?;
        std::fs::rename(downloaded, data.join("dump.rdb"))
            .map_err(|e| format!("installing dump.rdb: {e}"))?;
        std::fs::rename(&staging, &aof_dir)
            .map_err(|e| format!("installing appendonlydir: {e}"))?;
    }
    Ok(())
}

/// Runs the restore (see the module contract).
pub async fn run(flags: RestoreFlags) -> anyhow::Result<()> {
    let marker = flags
        .data_dir
        .join(format!(".restored-{}", flags.backup_name));
    if marker.exists() {
        println!(
            "RedisBackup {} was already restored here; nothing to do",
            flags.backup_name
        );
        return Ok(());
    }
    let client = kube::Client::try_default()
        .await
        .context("building the Kubernetes client")?;
    let api: Api<RedisBackup> = Api::namespaced(client, &flags.namespace);
    let b = api.get(&flags.backup_name).await.with_context(|| {
        format!(
            "reading RedisBackup {}/{}",
            flags.namespace, flags.backup_name
        )
    })?;
    let (dest, key, aof) = locate(&b).map_err(anyhow::Error::msg)?;
    let creds = s3::Credentials::read(&flags.backup_credentials_dir).map_err(anyhow::Error::msg)?;
    let http = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .build()?;
    std::fs::create_dir_all(&flags.data_dir)?;
    let tmp = flags.data_dir.join(".restore-download");
    let bytes = backup::bucket(&dest, creds)
        .get_to_file(&http, &key, &tmp)
        .await
        .map_err(anyhow::Error::msg)?;
    let result = install(&flags.data_dir, &tmp, aof);
    let _ = std::fs::remove_file(&tmp);
    result.map_err(anyhow::Error::msg)?;
    std::fs::write(&marker, b.status.map(|s| s.backup_path).unwrap_or_default())?;
    println!(
        "restored RedisBackup {} ({bytes} bytes from s3://{}/{key})",
        flags.backup_name, dest.bucket
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("restore-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("tmp");
        d
    }

    #[test]
    fn only_plain_relative_files_and_dirs_are_extracted() {
        use tar::EntryType;
        assert!(check_entry(Path::new("appendonly.aof.1.base.rdb"), EntryType::Regular).is_ok());
        assert!(check_entry(Path::new("./appendonly.aof.manifest"), EntryType::Regular).is_ok());
        assert!(check_entry(Path::new("sub"), EntryType::Directory).is_ok());
        for bad in ["../etc/passwd", "/etc/passwd", "a/../../b", ""] {
            assert!(
                check_entry(Path::new(bad), EntryType::Regular).is_err(),
                "{bad}"
            );
        }
        assert!(check_entry(Path::new("link"), EntryType::Symlink).is_err());
        assert!(check_entry(Path::new("dev"), EntryType::Char).is_err());
    }

    // A hand-built archive with a `../` entry (the tar crate refuses to write one).
    fn evil_archive(path: &Path) {
        let mut header = tar::Header::new_gnu();
        header.set_size(4);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        {
            let name = b"../escaped";
            let raw = header.as_old_mut();
            raw.name[..name.len()].copy_from_slice(name);
        }
        header.set_cksum();
        let f = std::fs::File::create(path).expect("create");
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
            f,
            flate2::Compression::default(),
        ));
        b.append(&header, &b"evil"[..]).expect("append");
        b.into_inner().expect("tar").finish().expect("gz");
    }

    #[test]
    fn a_traversing_archive_is_refused_and_nothing_escapes() {
        let d = tmp("evil");
        let archive = d.join("evil.tar.gz");
        evil_archive(&archive);
        let data = d.join("data");
        std::fs::create_dir_all(&data).expect("data");
        let err = install(&data, &archive, true).unwrap_err();
        assert!(err.contains("not a plain relative path"), "{err}");
        assert!(!d.join("escaped").exists());
        assert!(!data.join("appendonlydir").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_aof_archive_round_trips_and_old_data_is_kept_aside() {
        let d = tmp("aof");
        let src = d.join("src");
        std::fs::create_dir_all(&src).expect("src");
        std::fs::write(
            src.join("appendonly.aof.manifest"),
            "file appendonly.aof.1.base.rdb seq 1 type b\n",
        )
        .expect("w");
        std::fs::write(src.join("appendonly.aof.1.base.rdb"), "REDIS0010").expect("w");
        let archive = d.join("a.tar.gz");
        backup::archive(&src, &archive).expect("archive");
        let data = d.join("data");
        std::fs::create_dir_all(data.join("appendonlydir")).expect("old");
        std::fs::write(data.join("appendonlydir").join("old"), "x").expect("w");
        install(&data, &archive, true).expect("install");
        assert_eq!(
            std::fs::read_to_string(data.join("appendonlydir/appendonly.aof.1.base.rdb"))
                .expect("r"),
            "REDIS0010"
        );
        assert!(data.join("appendonlydir.pre-restore/old").exists());
        // An archive without its manifest is refused.
        std::fs::remove_file(src.join("appendonly.aof.manifest")).expect("rm");
        assert!(backup::archive(&src, &d.join("b.tar.gz")).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_backup_is_located_only_when_completed_in_its_bucket() {
        let b = |phase: &str, path: &str| -> RedisBackup {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "redis.io/v1", "kind": "RedisBackup", "metadata": {"name": "b"},
                "spec": {"clusterName": "demo", "destination": {"s3": {"bucket": "bk"}}},
                "status": {"phase": phase, "backupPath": path, "artifactType": "rdb"}
            }))
            .expect("backup")
        };
        let (d, key, aof) = locate(&b("Completed", "s3://bk/x/b.rdb")).expect("located");
        assert_eq!(
            (d.bucket.as_str(), key.as_str(), aof),
            ("bk", "x/b.rdb", false)
        );
        assert!(locate(&b("Running", "s3://bk/x/b.rdb")).is_err());
        assert!(locate(&b("Completed", "s3://other/b.rdb")).is_err());
        assert!(locate(&b("Completed", "azblob://bk/b.rdb")).is_err());
    }
}
