//! The end of an operator binary's `main`.
//!
//! Contract: [`finish`] turns the operator's result into the process exit code. Success exits
//! 0. An error prints one line, `error: <what failed>: <why>…` (the whole cause chain), to
//! stderr and exits 1, with no backtrace even when `RUST_BACKTRACE` is set: a start-up error
//! is a configuration mistake for the user to fix (a bad flag, an unreachable API server), not
//! a crash to debug. Returning `anyhow::Result` from `main` instead would print Rust's `Debug`
//! rendering, which appends a backtrace under `RUST_BACKTRACE=1`.

use std::process::ExitCode;

/// The one line printed for `e`.
pub fn render(e: &anyhow::Error) -> String {
    format!("error: {e:#}")
}

/// Exit code for `result`; an error is printed as [`render`] says.
pub fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", render(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn the_whole_cause_chain_on_one_line() {
        let e = Err::<(), _>(std::io::Error::other("connection refused"))
            .context("building the Kubernetes client")
            .unwrap_err();
        assert_eq!(
            render(&e),
            "error: building the Kubernetes client: connection refused"
        );
    }
}
