//! Tracing setup: text or JSON lines on stdout, filtered by a level directive.
//!
//! Contract: [`init`] installs the global subscriber at most once per process and is safe to
//! call again (tests, several entry points): later calls change nothing and return
//! `Ok(false)`. The filter comes from the `--log-level` flag when given, else `RUST_LOG`, else
//! `info`; it accepts full `EnvFilter` directives (`info,kube=debug`). A malformed directive is
//! an error rather than a silently dropped filter. Text lines carry ANSI colours only when
//! stdout is a terminal, so logs captured by CI, a file or a collector stay plain.

use tracing::Subscriber;
use tracing_subscriber::{EnvFilter, fmt::MakeWriter, util::SubscriberInitExt};

/// How log lines are rendered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// A tracing setup that could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The level directive did not parse.
    #[error("invalid log level directive {directive:?}: {source}")]
    InvalidFilter {
        /// The directive as given.
        directive: String,
        /// The parser's complaint.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
}

/// The level used when neither the flag nor `RUST_LOG` says anything.
pub const DEFAULT_LEVEL: &str = "info";

/// Builds the filter: the flag wins over `RUST_LOG`, which wins over [`DEFAULT_LEVEL`].
pub fn filter(flag: Option<&str>, rust_log: Option<&str>) -> Result<EnvFilter, TelemetryError> {
    let directive = flag
        .or(rust_log)
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .unwrap_or(DEFAULT_LEVEL);
    EnvFilter::try_new(directive).map_err(|source| TelemetryError::InvalidFilter {
        directive: directive.to_owned(),
        source,
    })
}

fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        LogFormat::Text => Box::new(builder.finish()),
        LogFormat::Json => Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .finish(),
        ),
    }
}

/// Installs the global subscriber writing to stdout.
///
/// Returns `Ok(true)` when this call installed it, `Ok(false)` when one was already installed.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<bool, TelemetryError> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(level, rust_log.as_deref())?;
    // try_init also routes `log` records from dependencies into tracing; it fails only when
    // a global subscriber or logger is already installed, which is the idempotent case.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    Ok(subscriber(format, filter, std::io::stdout, ansi)
        .try_init()
        .is_ok())
}

#[cfg(test)]
mod tests {
    use std::{
        io::Write,
        sync::{Arc, Mutex},
    };

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Buf {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("buffer lock").clone()).expect("utf-8 logs")
        }
    }

    fn capture(format: LogFormat, level: &str, emit: impl FnOnce()) -> String {
        capture_with(format, level, false, emit)
    }

    fn capture_with(format: LogFormat, level: &str, ansi: bool, emit: impl FnOnce()) -> String {
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = subscriber(
            format,
            filter(Some(level), None).expect("filter"),
            move || writer.clone(),
            ansi,
        );
        tracing::subscriber::with_default(sub, emit);
        buf.text()
    }

    #[test]
    fn json_format_writes_one_object_per_line() {
        let out = capture(LogFormat::Json, "info", || {
            tracing::info!(object = "ns/a", "reconciled")
        });
        let line = out.lines().next().expect("one line");
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        assert_eq!(v["message"], "reconciled");
        assert_eq!(v["object"], "ns/a");
        assert_eq!(v["level"], "INFO");
    }

    #[test]
    fn text_format_respects_the_level() {
        let out = capture(LogFormat::Text, "warn", || {
            tracing::info!("hidden");
            tracing::warn!("shown");
        });
        assert!(out.contains("shown"));
        assert!(!out.contains("hidden"));
    }

    #[test]
    fn text_is_plain_unless_colours_are_asked_for() {
        let plain = capture(LogFormat::Text, "info", || {
            tracing::info!(pod = "p", "created")
        });
        assert!(!plain.contains('\x1b'), "no escape codes: {plain:?}");
        assert!(plain.contains("created pod=\"p\""), "{plain}");
        let coloured = capture_with(LogFormat::Text, "info", true, || tracing::info!("created"));
        assert!(
            coloured.contains('\x1b'),
            "a terminal gets colours: {coloured:?}"
        );
    }

    #[test]
    fn flag_wins_over_rust_log_and_default_is_info() {
        assert_eq!(
            filter(Some("debug"), Some("error"))
                .expect("filter")
                .to_string(),
            "debug"
        );
        assert_eq!(
            filter(None, Some("kube=trace"))
                .expect("filter")
                .to_string(),
            "kube=trace"
        );
        assert_eq!(filter(None, None).expect("filter").to_string(), "info");
        assert_eq!(filter(Some(" "), None).expect("filter").to_string(), "info");
    }

    #[test]
    fn malformed_directive_is_an_error() {
        let err = filter(Some("info,kube=notalevel"), None).expect_err("invalid");
        assert!(err.to_string().contains("notalevel"));
    }

    #[test]
    fn init_is_safe_to_call_twice() {
        init(LogFormat::Text, Some("error")).expect("first init");
        assert!(!init(LogFormat::Json, Some("debug")).expect("second init"));
    }
}
