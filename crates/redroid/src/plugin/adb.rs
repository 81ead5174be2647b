//! `instance adb`: a forward on a free loopback port, then the real adb against it.
//!
//! Contract: fails first, with a clear message, when `adb` is not on PATH or the instance has no
//! running pod. Otherwise forwards `127.0.0.1:<free port>` to the instance (following pod
//! restarts), runs `adb connect 127.0.0.1:P`, then `adb -s 127.0.0.1:P ARGS…` with the
//! terminal attached (upstream passed the port to `-H/-P`, which address the adb server, not
//! the device), and disconnects afterwards.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::PluginError;
use super::kubeconfig::Session;
use super::portforward::{self, InstanceResolver, PodDialer, PodResolver, Retry};

/// The first executable `name` on `path` (a `PATH`-style list).
pub fn find_on_path(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs `adb ARGS…` against the instance through a temporary forward.
pub async fn run(s: &Session, name: &str, args: &[String]) -> Result<(), PluginError> {
    let adb =
        find_on_path("adb", std::env::var_os("PATH").as_deref()).ok_or(PluginError::AdbNotFound)?;
    let resolver = Arc::new(InstanceResolver::new(s, name));
    resolver.resolve().await?;
    let listener = portforward::listen("127.0.0.1", 0).await?;
    let port = listener
        .local_addr()
        .map_err(|e| PluginError::io("read the local address", e))?
        .port();
    let server = tokio::spawn(portforward::serve(
        listener,
        resolver,
        Arc::new(PodDialer::new(s)),
        Retry::default(),
    ));
    let serial = format!("127.0.0.1:{port}");
    let result = adb_session(&adb, &serial, args).await;
    let _ = run_adb(&adb, &["disconnect".into(), serial]).await;
    server.abort();
    result
}

async fn adb_session(adb: &Path, serial: &str, args: &[String]) -> Result<(), PluginError> {
    run_adb(adb, &["connect".into(), serial.into()]).await?;
    let mut full = vec!["-s".to_string(), serial.to_string()];
    full.extend_from_slice(args);
    run_adb(adb, &full).await
}

async fn run_adb(adb: &Path, args: &[String]) -> Result<(), PluginError> {
    let fail = |reason: String| PluginError::Adb {
        args: args.join(" "),
        reason,
    };
    let status = tokio::process::Command::new(adb)
        .args(args)
        .status()
        .await
        .map_err(|e| fail(e.to_string()))?;
    if status.success() {
        Ok(())
    } else {
        Err(fail(status.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_only_executables_on_path() {
        let dir = std::env::temp_dir().join(format!("kubectl-redroid-path-{}", std::process::id()));
        let (bin, data) = (dir.join("bin"), dir.join("data"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("adb"), "not executable").unwrap();
        std::fs::write(bin.join("adb"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(bin.join("adb"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([&data, &bin]).unwrap();
        assert_eq!(find_on_path("adb", Some(&path)), Some(bin.join("adb")));
        assert_eq!(find_on_path("adb", Some(data.as_os_str())), None);
        assert_eq!(find_on_path("adb", None), None);
    }

    #[test]
    fn missing_adb_is_a_clear_message() {
        assert!(
            PluginError::AdbNotFound
                .to_string()
                .starts_with("adb was not found on PATH")
        );
    }
}
