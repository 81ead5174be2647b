//! The operator binary as a user starts it: a configuration error is one line on stderr and
//! exit code 1, never a backtrace, even with `RUST_BACKTRACE=1`.

#[test]
fn a_configuration_error_is_one_line_without_a_backtrace() {
    let line = testenv::start_up_error(
        env!("CARGO_BIN_EXE_cocoon-operator"),
        &["--log-level", "info,kube=notalevel"],
    );
    assert!(
        line.starts_with("error: invalid log level directive") && line.contains("notalevel"),
        "{line}"
    );
}
