//! The layout of `$FDB_BINARY_DIR` at start-up, as upstream's manager arranges it.
//!
//! Contract: upstream's init containers (`fdb-kubernetes-monitor --copy-binary fdbcli …
//! --output-dir <dir>`) leave the binaries of version `x.y.z` in `<dir>/x.y.z/bin/x.y.z/`;
//! the admin client runs them from `<dir>/x.y/`. [`arrange`] moves every file of such a
//! directory into `<dir>/x.y/` (creating it) and returns what it moved; directories whose
//! name is not a version, and versions without a `bin/<version>` directory, are left alone,
//! so running it twice moves nothing the second time. The client library (`lib/libfdb_c.so`)
//! is not moved: this operator talks to the database through fdbcli only.

use std::io;
use std::path::{Path, PathBuf};

use crate::crd::FdbVersion;

/// Moves `<dir>/x.y.z/bin/x.y.z/*` to `<dir>/x.y/`; returns `(from, to)` per moved file.
pub fn arrange(dir: &Path) -> io::Result<Vec<(PathBuf, PathBuf)>> {
    let mut moved = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let Ok(version) = FdbVersion::parse(&name) else {
            continue;
        };
        if version.to_string() != name {
            continue;
        }
        let bin = entry.path().join("bin").join(&name);
        if !bin.is_dir() {
            continue;
        }
        let target = dir.join(version.compact());
        std::fs::create_dir_all(&target)?;
        let mut files: Vec<_> = std::fs::read_dir(&bin)?.collect::<Result<_, _>>()?;
        files.sort_by_key(std::fs::DirEntry::file_name);
        for file in files {
            let to = target.join(file.file_name());
            std::fs::rename(file.path(), &to)?;
            moved.push((file.path(), to));
        }
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fdb-binaries-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn init_container_layout_is_moved_to_major_minor() {
        let dir = scratch("layout");
        for v in ["7.1.67", "7.3.63"] {
            let bin = dir.join(v).join("bin").join(v);
            std::fs::create_dir_all(&bin).unwrap();
            for b in ["fdbcli", "fdbbackup", "fdbrestore"] {
                std::fs::write(bin.join(b), v).unwrap();
            }
        }
        // Not a version, and a version without bin/<version>: left alone.
        std::fs::create_dir_all(dir.join("tools/bin/tools")).unwrap();
        std::fs::create_dir_all(dir.join("7.4.1/lib")).unwrap();
        let moved = arrange(&dir).unwrap();
        assert_eq!(moved.len(), 6);
        assert_eq!(
            std::fs::read_to_string(dir.join("7.1/fdbcli")).unwrap(),
            "7.1.67"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("7.3/fdbrestore")).unwrap(),
            "7.3.63"
        );
        assert!(!dir.join("7.4").exists());
        assert!(
            arrange(&dir).unwrap().is_empty(),
            "a second run moves nothing"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        assert!(arrange(Path::new("/nonexistent/fdb-binaries")).is_err());
    }
}
