//! The flags every Flotilla operator shares, each with an environment-variable fallback.
//!
//! Contract: operators `#[command(flatten)]` [`OperatorFlags`] into their own clap parser. A
//! command-line value wins over the environment variable, which wins over the default. Defaults
//! follow controller-runtime: metrics on `:8080`, probes on `:8081`, leader election on.
//! Addresses also accept Go's `:PORT` form, meaning every interface.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use clap::{ArgAction, Args};

use crate::telemetry::LogFormat;

/// Common operator flags; flatten into an operator's `clap::Parser`.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct OperatorFlags {
    /// Address the /metrics endpoint binds to (`HOST:PORT` or `:PORT`).
    /// controller-runtime's `--metrics-bind-address` is accepted as an alias.
    #[arg(long, env = "METRICS_ADDR", default_value = ":8080", value_parser = parse_addr, alias = "metrics-bind-address")]
    pub metrics_addr: SocketAddr,

    /// Address the /healthz and /readyz probes bind to; may equal the metrics address.
    /// controller-runtime's `--health-probe-bind-address` is accepted as an alias.
    #[arg(long, env = "PROBE_ADDR", default_value = ":8081", value_parser = parse_addr, alias = "health-probe-bind-address")]
    pub probe_addr: SocketAddr,

    /// Run controllers only while holding the leader Lease (`--leader-elect=false` to disable).
    #[arg(
        long,
        env = "LEADER_ELECT",
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub leader_elect: bool,

    /// Name of the leader-election Lease (default: chosen by the operator).
    #[arg(long, env = "LEASE_NAME")]
    pub lease_name: Option<String>,

    /// Namespace of the Lease (default: POD_NAMESPACE, else the client's namespace).
    #[arg(long, env = "LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter directive such as `info` or `info,kube=debug` (default: RUST_LOG, else info).
    #[arg(long, env = "LOG_LEVEL")]
    pub log_level: Option<String>,
}

/// Parses `HOST:PORT`, `[V6]:PORT` or Go's `:PORT` (all interfaces).
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Some(port) = s.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|e| format!("invalid port in {s:?}: {e}"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    s.parse().map_err(|e| format!("invalid address {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        flags: OperatorFlags,
        #[arg(long)]
        own: Option<String>,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("operator").chain(args.iter().copied()))
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn go_style_port_means_all_interfaces() {
        assert_eq!(parse_addr(":8080"), Ok(addr("0.0.0.0:8080")));
        assert_eq!(parse_addr("127.0.0.1:9"), Ok(addr("127.0.0.1:9")));
        assert_eq!(parse_addr("[::1]:9"), Ok(addr("[::1]:9")));
        assert!(parse_addr(":http").is_err());
        assert!(parse_addr("localhost").is_err());
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(parse(&["--log-format", "xml"]).is_err());
        assert!(parse(&["--metrics-addr", "nowhere"]).is_err());
        assert!(parse(&["--leader-elect=maybe"]).is_err());
    }

    // Environment fallbacks are tested in a child process with a cleared environment: the
    // real variable names are read from the process env, and mutating it here would race
    // with the other tests (and needs `unsafe` in edition 2024).
    const CASE: &str = "KIT_FLAGS_TEST_CASE";

    #[test]
    fn env_case_child() {
        let Ok(case) = std::env::var(CASE) else {
            return;
        };
        let cli_args: Vec<String> = std::env::var("KIT_FLAGS_TEST_ARGS")
            .map(|a| a.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let args: Vec<&str> = cli_args.iter().map(String::as_str).collect();
        let f = parse(&args).expect("parse").flags;
        match case.as_str() {
            "defaults" => {
                assert_eq!(f.metrics_addr, addr("0.0.0.0:8080"));
                assert_eq!(f.probe_addr, addr("0.0.0.0:8081"));
                assert!(f.leader_elect);
                assert_eq!(
                    (f.lease_name, f.lease_namespace, f.log_level),
                    (None, None, None)
                );
                assert_eq!(f.log_format, LogFormat::Text);
            }
            "env" => {
                assert_eq!(f.metrics_addr, addr("127.0.0.1:9090"));
                assert_eq!(f.probe_addr, addr("0.0.0.0:9091"));
                assert!(!f.leader_elect);
                assert_eq!(f.lease_name.as_deref(), Some("from-env"));
                assert_eq!(f.lease_namespace.as_deref(), Some("ops"));
                assert_eq!(f.log_format, LogFormat::Json);
                assert_eq!(f.log_level.as_deref(), Some("debug"));
            }
            "override" => {
                assert_eq!(f.metrics_addr, addr("127.0.0.1:1"));
                assert!(f.leader_elect);
                assert_eq!(f.lease_name.as_deref(), Some("from-cli"));
                assert_eq!(f.log_format, LogFormat::Text);
                // Not given on the command line: the environment still applies.
                assert_eq!(f.lease_namespace.as_deref(), Some("ops"));
            }
            other => panic!("unknown case {other}"),
        }
    }

    const ENV: [(&str, &str); 7] = [
        ("METRICS_ADDR", "127.0.0.1:9090"),
        ("PROBE_ADDR", ":9091"),
        ("LEADER_ELECT", "false"),
        ("LEASE_NAME", "from-env"),
        ("LEASE_NAMESPACE", "ops"),
        ("LOG_FORMAT", "json"),
        ("LOG_LEVEL", "debug"),
    ];

    fn run_child(case: &str, env: &[(&str, &str)], args: &str) {
        let exe = std::env::current_exe().expect("test binary path");
        let out = Command::new(exe)
            .args([
                "flags::tests::env_case_child",
                "--exact",
                "--test-threads=1",
            ])
            .env_clear()
            .env(CASE, case)
            .env("KIT_FLAGS_TEST_ARGS", args)
            .envs(env.iter().copied())
            .output()
            .expect("spawn test binary");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "case {case} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn defaults_apply_without_env_or_flags() {
        run_child("defaults", &[], "");
    }

    #[test]
    fn env_fills_in_every_flag() {
        run_child("env", &ENV, "");
    }

    #[test]
    fn command_line_overrides_env() {
        let args = "--metrics-addr 127.0.0.1:1 --leader-elect --lease-name from-cli --log-format text --own x";
        run_child("override", &ENV, args);
    }

    #[test]
    fn command_line_values_parse_without_env_influence() {
        // Every flag given explicitly, so the outcome cannot depend on this process's env.
        let cli = parse(&[
            "--metrics-addr=:1",
            "--probe-addr=127.0.0.1:2",
            "--leader-elect=false",
            "--lease-name=l",
            "--lease-namespace=n",
            "--log-format=json",
            "--log-level=warn",
            "--own=o",
        ])
        .expect("parse");
        let expected = OperatorFlags {
            metrics_addr: addr("0.0.0.0:1"),
            probe_addr: addr("127.0.0.1:2"),
            leader_elect: false,
            lease_name: Some("l".into()),
            lease_namespace: Some("n".into()),
            log_format: LogFormat::Json,
            log_level: Some("warn".into()),
        };
        assert_eq!(cli.flags, expected);
        assert_eq!(cli.own.as_deref(), Some("o"));
    }
}
