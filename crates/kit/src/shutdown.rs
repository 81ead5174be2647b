//! Graceful shutdown: SIGTERM or SIGINT cancel one [`CancellationToken`].
//!
//! Contract: [`on_signals`] installs the handlers before it returns (so a signal that arrives
//! right after cannot be missed) and returns a token that is cancelled on the first SIGTERM or
//! SIGINT. Every long-running part of an operator (controllers, the leader elector, the HTTP
//! servers) selects on that token or a child of it. A second signal is left to the caller:
//! the kubelet's SIGKILL after the grace period is the hard stop.

use std::io;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Installs SIGTERM and SIGINT handlers and returns a token cancelled when either arrives.
///
/// Must be called inside a Tokio runtime.
pub fn on_signals() -> io::Result<CancellationToken> {
    let token = CancellationToken::new();
    cancel_on_signals(token.clone())?;
    Ok(token)
}

/// Cancels `token` when SIGTERM or SIGINT arrives; the handlers are installed before returning.
pub fn cancel_on_signals(token: CancellationToken) -> io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            () = token.cancelled() => return,
        };
        tracing::info!(signal = name, "shutdown requested");
        token.cancel();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn cancelling_the_token_stops_the_listener_without_a_signal() {
        let token = on_signals().expect("install handlers");
        let child = token.child_token();
        token.cancel();
        tokio::time::timeout(Duration::from_secs(5), child.cancelled())
            .await
            .expect("child token follows the parent");
    }

    async fn assert_signal_cancels(sig: &str) {
        let token = on_signals().expect("install handlers");
        let status = std::process::Command::new("kill")
            .args([sig, &std::process::id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        tokio::time::timeout(Duration::from_secs(10), token.cancelled())
            .await
            .unwrap_or_else(|_| panic!("{sig} did not cancel the token"));
    }

    // The handlers replace the default action for the whole test process, so the signals
    // below cannot kill the test binary once `on_signals` has returned. One test sends both,
    // in turn, so each token can only have been cancelled by its own signal.
    #[tokio::test]
    async fn sigterm_and_sigint_each_cancel_the_token() {
        assert_signal_cancels("-TERM").await;
        assert_signal_cancels("-INT").await;
    }
}
