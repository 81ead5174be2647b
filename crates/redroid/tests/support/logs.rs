//! Captures the log lines of this test binary: the operator runs in-process, and its
//! `telemetry::init` leaves an already installed subscriber in place, so the lines it writes
//! at the operator's default level (`info`) land here, as plain text.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// Everything logged so far by this process.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The lines that contain every one of `needles`.
    pub fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned();
        text.lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
            .collect()
    }
}

/// Installs the capturing subscriber (once per process) at level `info`, and returns it.
pub fn capture() -> Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            let writer = captured.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
            captured
        })
        .clone()
}
