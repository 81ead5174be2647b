//! `redis-operator copy-binary <dst>`: the data pods' init container copies the operator
//! binary (which is also the instance manager) into an emptyDir shared with the Redis
//! container, whose image has no shell tools to do it.
//!
//! Contract: [`copy_binary`] writes `src`'s bytes to a temporary file in `dst`'s directory,
//! flushes it to disk, gives it mode 0755 and renames it over `dst`, so `dst` is at every moment
//! either absent, the previous file, or the complete new executable (a container restart in the
//! middle never leaves a truncated binary for the main container to exec). On failure the
//! temporary file is removed and the error names the path and the step that failed.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of the installed binary.
pub const MODE: u32 = 0o755;

/// A copy that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The source could not be opened.
    #[error("opening source {path}: {source}")]
    OpenSource {
        /// The source path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The temporary file beside the destination could not be created.
    #[error("creating {path}: {source}")]
    CreateTemp {
        /// The temporary path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Copying the bytes, flushing or setting the mode failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The temporary path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The temporary file could not be renamed over the destination.
    #[error("renaming {from} to {to}: {source}")]
    Rename {
        /// The temporary path.
        from: PathBuf,
        /// The destination.
        to: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Copies `src` to `dst` with mode 0755, atomically (see the module docs).
pub fn copy_binary(src: &Path, dst: &Path) -> Result<(), CopyError> {
    let mut input = File::open(src).map_err(|source| CopyError::OpenSource {
        path: src.to_path_buf(),
        source,
    })?;
    let tmp = temp_path(dst);
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MODE)
        .open(&tmp)
        .map_err(|source| CopyError::CreateTemp {
            path: tmp.clone(),
            source,
        })?;
    let written = io::copy(&mut input, &mut out)
        .and_then(|_| out.sync_all())
        // The umask may have narrowed the mode given at creation.
        .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(MODE)));
    drop(out);
    if let Err(source) = written {
        let _ = fs::remove_file(&tmp);
        return Err(CopyError::Write { path: tmp, source });
    }
    if let Err(source) = fs::rename(&tmp, dst) {
        let _ = fs::remove_file(&tmp);
        return Err(CopyError::Rename {
            from: tmp,
            to: dst.to_path_buf(),
            source,
        });
    }
    Ok(())
}

// `.<name>.tmp-<pid>` in the destination's directory: the same file system, so the rename is
// atomic, and hidden from a glance at the directory.
fn temp_path(dst: &Path) -> PathBuf {
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "binary".into());
    let tmp = format!(".{name}.tmp-{}", std::process::id());
    match dst.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(tmp),
        _ => PathBuf::from(tmp),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "redis-copy-binary-{name}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("scratch dir");
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn copies_bytes_with_mode_0755_and_leaves_no_temp_file() {
        let s = Scratch::new("copy");
        let src = s.0.join("src");
        fs::write(&src, b"\x7fELF pretend binary").expect("write src");
        fs::set_permissions(&src, fs::Permissions::from_mode(0o600)).expect("chmod");
        let dst = s.0.join("manager");
        copy_binary(&src, &dst).expect("copy");
        assert_eq!(fs::read(&dst).expect("read"), b"\x7fELF pretend binary");
        let mode = fs::metadata(&dst).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert_eq!(entries(&s.0), ["manager", "src"]);
    }

    #[test]
    fn replaces_an_existing_destination_whole() {
        let s = Scratch::new("replace");
        let src = s.0.join("src");
        fs::write(&src, b"new").expect("write src");
        let dst = s.0.join("manager");
        fs::write(&dst, b"an older and longer binary").expect("write old");
        copy_binary(&src, &dst).expect("copy");
        assert_eq!(fs::read(&dst).expect("read"), b"new");
        assert_eq!(entries(&s.0), ["manager", "src"]);
    }

    #[test]
    fn copies_the_running_executable() {
        let s = Scratch::new("self");
        let me = std::env::current_exe().expect("current exe");
        let dst = s.0.join("manager");
        copy_binary(&me, &dst).expect("copy");
        assert_eq!(
            fs::metadata(&dst).expect("stat").len(),
            fs::metadata(&me).expect("stat").len()
        );
    }

    #[test]
    fn errors_name_the_failing_path() {
        let s = Scratch::new("errors");
        let err = copy_binary(&s.0.join("absent"), &s.0.join("manager")).unwrap_err();
        assert!(matches!(err, CopyError::OpenSource { .. }), "{err}");
        assert!(err.to_string().contains("absent"), "{err}");

        let src = s.0.join("src");
        fs::write(&src, b"x").expect("write src");
        let err = copy_binary(&src, &s.0.join("missing-dir/manager")).unwrap_err();
        assert!(matches!(err, CopyError::CreateTemp { .. }), "{err}");
        assert!(err.to_string().contains("missing-dir"), "{err}");

        // A directory in the way: the rename fails and the temporary file is cleaned up.
        fs::create_dir(s.0.join("taken")).expect("mkdir");
        fs::write(s.0.join("taken/file"), b"x").expect("write");
        let err = copy_binary(&src, &s.0.join("taken")).unwrap_err();
        assert!(matches!(err, CopyError::Rename { .. }), "{err}");
        assert_eq!(entries(&s.0), ["src", "taken"]);
    }
}
