//! The `redis-operator` binary as the init container and a user run it: `copy-binary` installs
//! a working copy of itself, and a start-up mistake is one line on stderr with exit code 1.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_redis-operator");

#[test]
fn copy_binary_installs_a_runnable_copy() {
    let dir = std::env::temp_dir().join(format!("redis-cli-copy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let dst = dir.join("manager");
    let out = Command::new(BIN)
        .args(["copy-binary", dst.to_str().expect("utf-8")])
        .output()
        .expect("run copy-binary");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::fs::metadata(&dst).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
    // The copy is the same program: it answers --version like the original.
    let version = Command::new(&dst)
        .arg("--version")
        .output()
        .expect("run the copy");
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("redis-operator "));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn start_up_errors_are_one_line() {
    let line = testenv::start_up_error(BIN, &["controller", "--max-concurrent-reconciles=0"]);
    assert_eq!(
        line,
        "error: --max-concurrent-reconciles must be at least 1, got 0"
    );
    let line = testenv::start_up_error(BIN, &["copy-binary", "/nonexistent-dir/manager"]);
    assert!(
        line.starts_with("error: creating /nonexistent-dir/"),
        "{line}"
    );
}
