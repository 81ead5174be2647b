//! The operator binary as a user starts it: a configuration error is one line on stderr and
//! exit code 1, never a backtrace, even with `RUST_BACKTRACE=1`.

use std::process::Command;

#[test]
fn a_configuration_error_is_one_line_without_a_backtrace() {
    let out = Command::new(env!("CARGO_BIN_EXE_cocoon-operator"))
        .args(["--log-level", "info,kube=notalevel"])
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("run the operator binary");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line only: {stderr}");
    assert!(
        lines[0].starts_with("error: invalid log level directive")
            && lines[0].contains("notalevel"),
        "{stderr}"
    );
}
