//! FoundationDB versions: parsing (`<major>.<minor>.<patch>[-rc<n>]`, found anywhere in the
//! text, as fdb-kubernetes-monitor's parser), ordering, protocol compatibility and the feature
//! gates the operator checks.

use std::fmt;

/// A FoundationDB version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FdbVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
    /// The `-rc<n>` number, 0 for a release.
    pub release_candidate: u32,
}

/// A text that holds no version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not parse FDB version from {0}")]
pub struct VersionParseError(pub String);

impl FdbVersion {
    /// A release version.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        FdbVersion {
            major,
            minor,
            patch,
            release_candidate: 0,
        }
    }

    /// The oldest version the operator supports (7.1.0).
    pub const MINIMUM: FdbVersion = FdbVersion::new(7, 1, 0);

    /// Parses the first `\d+.\d+.\d+(-rc\d+)?` in `text`.
    pub fn parse(text: &str) -> Result<Self, VersionParseError> {
        let err = || VersionParseError(text.to_owned());
        let bytes = text.as_bytes();
        for start in 0..bytes.len() {
            if !bytes[start].is_ascii_digit() || (start > 0 && bytes[start - 1].is_ascii_digit()) {
                continue;
            }
            if let Some(v) = parse_at(&text[start..]) {
                return Ok(v);
            }
        }
        Err(err())
    }

    /// `major.minor`: the directory of this version's binaries under `$FDB_BINARY_DIR`.
    pub fn compact(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }

    /// Whether `self >= other` (a release is newer than its release candidates).
    pub fn is_at_least(&self, other: &FdbVersion) -> bool {
        let a = (self.major, self.minor, self.patch);
        let b = (other.major, other.minor, other.patch);
        if a != b {
            return a > b;
        }
        if self.release_candidate == 0 {
            return true;
        }
        if other.release_candidate == 0 {
            return false;
        }
        self.release_candidate >= other.release_candidate
    }

    /// Same major, minor and release candidate: processes of both versions can talk.
    pub fn is_protocol_compatible(&self, other: &FdbVersion) -> bool {
        self.major == other.major
            && self.minor == other.minor
            && self.release_candidate == other.release_candidate
    }

    /// A version change from `self` to `other` is allowed: protocol compatible, or an upgrade.
    pub fn supports_version_change(&self, other: &FdbVersion) -> bool {
        self.is_protocol_compatible(other) || other.is_at_least(self)
    }

    /// At least the minimum supported version.
    pub fn is_supported(&self) -> bool {
        self.is_at_least(&Self::MINIMUM)
    }

    /// Whether this version can run `engine` (sharded RocksDB needs 7.2, Redwood-1 7.3).
    pub fn supports_storage_engine(&self, engine: &str) -> bool {
        match engine {
            "ssd-sharded-rocksdb" => self.is_at_least(&FdbVersion::new(7, 2, 0)),
            "ssd-redwood-1" => self.is_at_least(&FdbVersion::new(7, 3, 0)),
            _ => true,
        }
    }

    /// Recovery state with `seconds_since_last_recovered` (7.1.22+).
    pub fn supports_recovery_state(&self) -> bool {
        self.is_at_least(&FdbVersion::new(7, 1, 22))
    }

    /// Exclusions by locality: 7.1.42+ in 7.1, 7.3.26+ otherwise.
    pub fn supports_locality_based_exclusions(&self) -> bool {
        if self.is_protocol_compatible(&FdbVersion::new(7, 1, 0)) {
            return self.is_at_least(&FdbVersion::new(7, 1, 42));
        }
        self.is_at_least(&FdbVersion::new(7, 3, 26))
    }

    /// `--encryption-key-file` for backups: 7.3.73+ in 7.3, 7.4.6+ otherwise.
    pub fn supports_backup_encryption(&self) -> bool {
        if self.is_protocol_compatible(&FdbVersion::new(7, 3, 0)) {
            return self.is_at_least(&FdbVersion::new(7, 3, 73));
        }
        self.is_at_least(&FdbVersion::new(7, 4, 6))
    }

    /// Backups select partitioned logs with `--mutation-log-type` (7.4.7+).
    pub fn uses_mutation_log_type(&self) -> bool {
        self.is_at_least(&FdbVersion::new(7, 4, 7))
    }
}

fn parse_at(s: &str) -> Option<FdbVersion> {
    let (major, rest) = number(s)?;
    let rest = rest.strip_prefix('.')?;
    let (minor, rest) = number(rest)?;
    let rest = rest.strip_prefix('.')?;
    let (patch, rest) = number(rest)?;
    let release_candidate = rest
        .strip_prefix("-rc")
        .and_then(number)
        .map_or(0, |(rc, _)| rc);
    Some(FdbVersion {
        major,
        minor,
        patch,
        release_candidate,
    })
}

fn number(s: &str) -> Option<(u32, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (end > 0).then(|| s[..end].parse().ok().map(|n| (n, &s[end..])))?
}

impl fmt::Display for FdbVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if self.release_candidate > 0 {
            write!(f, "-rc{}", self.release_candidate)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_anywhere_in_the_text() {
        let cases = [
            ("7.1.57", Some((7, 1, 57, 0))),
            ("7.1.0-rc1", Some((7, 1, 0, 1))),
            (
                "foundationdb/fdb-kubernetes-monitor:7.3.69",
                Some((7, 3, 69, 0)),
            ),
            ("FoundationDB CLI 7.1 (v7.1.25)", Some((7, 1, 25, 0))),
            ("7.1", None),
            ("", None),
        ];
        for (text, want) in cases {
            let got = FdbVersion::parse(text)
                .ok()
                .map(|v| (v.major, v.minor, v.patch, v.release_candidate));
            assert_eq!(got, want, "{text}");
        }
        assert_eq!(
            FdbVersion::parse("7.1.0-rc1").unwrap().to_string(),
            "7.1.0-rc1"
        );
    }

    #[test]
    fn ordering_and_compatibility() {
        let v = |s| FdbVersion::parse(s).unwrap();
        assert!(v("7.1.57").is_at_least(&v("7.1.57")));
        assert!(v("7.3.0").is_at_least(&v("7.1.57")));
        assert!(!v("7.1.0-rc1").is_at_least(&v("7.1.0")));
        assert!(v("7.1.0").is_at_least(&v("7.1.0-rc2")));
        assert!(v("7.1.0-rc2").is_at_least(&v("7.1.0-rc1")));
        assert!(v("7.1.25").is_protocol_compatible(&v("7.1.57")));
        assert!(!v("7.1.57").is_protocol_compatible(&v("7.3.1")));
        assert!(v("7.1.57").supports_version_change(&v("7.3.1")));
        assert!(!v("7.3.1").supports_version_change(&v("7.1.57")));
        assert!(v("7.3.1").supports_version_change(&v("7.3.0")));
        assert_eq!(v("7.1.57").compact(), "7.1");
    }

    #[test]
    fn feature_gates() {
        let v = |s| FdbVersion::parse(s).unwrap();
        assert!(!v("7.1.41").supports_locality_based_exclusions());
        assert!(v("7.1.42").supports_locality_based_exclusions());
        assert!(!v("7.3.25").supports_locality_based_exclusions());
        assert!(v("7.3.26").supports_locality_based_exclusions());
        assert!(!v("7.1.57").supports_storage_engine("ssd-redwood-1"));
        assert!(v("7.3.0").supports_storage_engine("ssd-redwood-1"));
        assert!(!v("7.0.0").is_supported());
    }
}
