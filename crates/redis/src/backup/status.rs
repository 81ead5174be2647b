//! The RedisBackup status: pure transitions ([`pending`], [`running`], [`completed`],
//! [`failed`]) and the one writer ([`write`]), which patches the status subresource only when
//! it differs.
//!
//! Contract: timestamps are set once, when their transition happens (`startedAt` when the
//! backup starts, kept when it is started again on the same pod; `completedAt` when it
//! completes or fails), so an unchanged backup makes no write.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;

use crate::crd::{BackupArtifactType, BackupPhase, RedisBackup, RedisBackupStatus};
use crate::instance_api::BackupResult;
use crate::names;

/// A failed status write.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The RedisBackup changed since the pass read it (409 Conflict on the write conditional
    /// on the pass's `resourceVersion`): nothing was written; the next pass reads it again.
    #[error(
        "RedisBackup {name} changed since this pass read it (resourceVersion {read}); the next pass reads it again"
    )]
    Stale {
        /// The backup.
        name: String,
        /// The resourceVersion the pass had.
        read: String,
    },
    /// Any other API error.
    #[error("writing the status of RedisBackup {name}: {source}")]
    Api {
        /// The backup.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Waiting for an instance.
pub fn pending(s: &RedisBackupStatus) -> RedisBackupStatus {
    RedisBackupStatus {
        phase: Some(BackupPhase::Pending),
        ..s.clone()
    }
}

/// Started on `pod` at `now` (the first start time is kept).
pub fn running(s: &RedisBackupStatus, pod: &str, now: Timestamp) -> RedisBackupStatus {
    RedisBackupStatus {
        phase: Some(BackupPhase::Running),
        target_pod: pod.to_owned(),
        started_at: s.started_at.clone().or(Some(Time(now))),
        error: String::new(),
        ..s.clone()
    }
}

/// Completed with the instance's `result`.
pub fn completed(s: &RedisBackupStatus, r: &BackupResult, now: Timestamp) -> RedisBackupStatus {
    let artifact_type = match r.artifact_type.as_str() {
        "aof-archive" => Some(BackupArtifactType::AofArchive),
        "rdb" => Some(BackupArtifactType::Rdb),
        _ => None,
    };
    RedisBackupStatus {
        phase: Some(BackupPhase::Completed),
        completed_at: Some(Time(now)),
        backup_path: r.backup_path.clone(),
        backup_size: r.backup_size,
        artifact_type,
        error: String::new(),
        ..s.clone()
    }
}

/// Failed with `error`.
pub fn failed(s: &RedisBackupStatus, error: &str, now: Timestamp) -> RedisBackupStatus {
    RedisBackupStatus {
        phase: Some(BackupPhase::Failed),
        completed_at: Some(Time(now)),
        error: error.to_owned(),
        ..s.clone()
    }
}

/// Writes `desired` when it differs from `b`'s status, only if the stored object's
/// `resourceVersion` is still `b`'s; returns the backup as stored after the write (`None`
/// when nothing was written), whose `resourceVersion` the pass's next write is conditional on.
///
/// Conditional because every transition is decided on the pass's copy: an unconditional
/// write would replace a status that changed since (another writer's phase, or this
/// controller's own earlier write that the cache had not caught up with) with one decided on
/// an older view ([`StatusError::Stale`] instead).
pub async fn write(
    api: &Api<RedisBackup>,
    b: &RedisBackup,
    desired: &RedisBackupStatus,
) -> Result<Option<RedisBackup>, StatusError> {
    let name = || b.metadata.name.clone().unwrap_or_default();
    match kit::status::patch_status_if_changed_at(api, b, desired, names::FIELD_MANAGER).await {
        Ok(written) => Ok(written),
        Err(e) if kit::status::is_conflict(&e) => Err(StatusError::Stale {
            name: name(),
            read: b.metadata.resource_version.clone().unwrap_or_default(),
        }),
        Err(source) => Err(StatusError::Api {
            name: name(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).expect("ts")
    }

    #[test]
    fn transitions_set_their_fields_once() {
        let p = pending(&RedisBackupStatus::default());
        assert_eq!(p.phase, Some(BackupPhase::Pending));
        let r = running(&p, "demo-1", t(1));
        assert_eq!(
            (r.target_pod.as_str(), r.started_at.clone()),
            ("demo-1", Some(Time(t(1))))
        );
        // Started again (the instance forgot it): the first start is kept.
        assert_eq!(running(&r, "demo-1", t(9)).started_at, Some(Time(t(1))));
        let result = BackupResult {
            id: "b".into(),
            phase: "Completed".into(),
            artifact_type: "aof-archive".into(),
            backup_path: "s3://bk/b.aof.tar.gz".into(),
            backup_size: 42,
            checksum_sha256: "ab".into(),
            error: String::new(),
        };
        let c = completed(&r, &result, t(5));
        assert_eq!(c.phase, Some(BackupPhase::Completed));
        assert_eq!(c.artifact_type, Some(BackupArtifactType::AofArchive));
        assert_eq!((c.backup_size, c.completed_at), (42, Some(Time(t(5)))));
        assert_eq!(c.started_at, Some(Time(t(1))));
        let f = failed(&r, "boom", t(6));
        assert_eq!(
            (f.phase, f.error.as_str()),
            (Some(BackupPhase::Failed), "boom")
        );
    }
}
