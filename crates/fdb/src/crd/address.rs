//! Process addresses as FoundationDB writes them (`ip:port[:flag…][(fromHostname)]`, IPv6 in
//! brackets, or a DNS name in place of the IP) and connection strings
//! (`<description>:<generationID>@<addr>,<addr>…`).

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use super::ConnectionString;

/// One process address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessAddress {
    /// The IP, or a DNS name when it is not one.
    pub host: String,
    /// The port; 0 for an address without one.
    pub port: u16,
    /// Flags after the port (`tls`).
    pub flags: BTreeSet<String>,
    /// The `(fromHostname)` suffix.
    pub from_hostname: bool,
}

/// An address that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse process address {0:?}")]
pub struct AddressParseError(pub String);

impl ProcessAddress {
    /// An address of `host` (brackets around IPv6 dropped) and `port`, with the TLS flag.
    pub fn new(host: &str, port: u16, tls: bool) -> Self {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let mut flags = BTreeSet::new();
        if tls {
            flags.insert("tls".to_owned());
        }
        ProcessAddress {
            host,
            port,
            flags,
            from_hostname: false,
        }
    }

    /// Parses an address as upstream does: a bare IP or name, or `host:port` with any number
    /// of `:flag` suffixes.
    pub fn parse(text: &str) -> Result<Self, AddressParseError> {
        if text.is_empty() {
            return Err(AddressParseError(text.to_owned()));
        }
        let mut result = ProcessAddress::default();
        let mut rest = text;
        if let Some(r) = rest.strip_suffix("(fromHostname)") {
            rest = r;
            result.from_hostname = true;
        }
        if rest.parse::<IpAddr>().is_ok() || !rest.contains(':') {
            result.host = rest.to_owned();
            return Ok(result);
        }
        let mut tmp = rest;
        while !tmp.is_empty() {
            if let Some((host, port)) = split_host_port(tmp) {
                result.host = host.to_owned();
                result.port = port
                    .parse()
                    .map_err(|_| AddressParseError(text.to_owned()))?;
                return Ok(result);
            }
            let Some(i) = tmp.rfind(':') else { break };
            result.flags.insert(tmp[i + 1..].to_owned());
            tmp = &tmp[..i];
        }
        Ok(result)
    }

    /// Whether the host is an IP (not a DNS name).
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// Whether the address carries the `tls` flag.
    pub fn is_tls(&self) -> bool {
        self.flags.contains("tls")
    }

    /// `host:port` without flags (IPv6 in brackets), or the host alone without a port.
    pub fn without_flags(&self) -> String {
        if self.port == 0 {
            return self.host.clone();
        }
        join_host_port(&self.host, self.port)
    }
}

impl fmt::Display for ProcessAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port == 0 {
            return f.write_str(&self.host);
        }
        f.write_str(&join_host_port(&self.host, self.port))?;
        for flag in &self.flags {
            write!(f, ":{flag}")?;
        }
        if self.from_hostname {
            f.write_str("(fromHostname)")?;
        }
        Ok(())
    }
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

// Go's net.SplitHostPort for the shapes FDB uses: `[v6]:port` or `host:port` with exactly one
// colon.
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, tail) = rest.split_once(']')?;
        let port = tail.strip_prefix(':')?;
        return (!port.contains(':')).then_some((host, port));
    }
    let (host, port) = s.split_once(':')?;
    (!port.contains(':')).then_some((host, port))
}

/// The port of the `n`-th process (1-based) of a pod: 4499+2n without TLS, 4498+2n with.
pub fn process_port(n: u32, tls: bool) -> u16 {
    let base = if tls { 4498 } else { 4499 };
    (base + 2 * n) as u16
}

/// The addresses in `--public_address=<a>,<b>` of a command line.
pub fn addresses_from_command_line(
    cmdline: &str,
) -> Result<Vec<ProcessAddress>, AddressParseError> {
    let value = cmdline
        .split_whitespace()
        .find_map(|arg| arg.strip_prefix("--public_address="))
        .ok_or_else(|| AddressParseError(cmdline.to_owned()))?;
    value.split(',').map(ProcessAddress::parse).collect()
}

/// A connection string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid connection string: {text}, {reason}")]
pub struct ConnectionStringError {
    /// The text.
    pub text: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl ConnectionString {
    /// Parses `<description>:<generationID>@<addr>,…`: the description alphanumeric or `_`,
    /// the generation ID alphanumeric, at least one coordinator.
    pub fn parse(text: &str) -> Result<Self, ConnectionStringError> {
        let err = |reason| ConnectionStringError {
            text: text.to_owned(),
            reason,
        };
        let text = text.trim();
        let (description, rest) = text
            .split_once(':')
            .ok_or_else(|| err("could not split string to get database description"))?;
        if description.is_empty()
            || !description
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(err(
                "database description can only contain alphanumeric characters (a-z, A-Z, 0-9) and underscores",
            ));
        }
        let (generation, coordinators) = rest
            .split_once('@')
            .ok_or_else(|| err("could not split string to get generation ID"))?;
        if generation.is_empty() || !generation.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(err(
                "generation ID can only contain alphanumeric characters (a-z, A-Z, 0-9)",
            ));
        }
        let coordinators = coordinators
            .split(',')
            .map(|c| {
                ProcessAddress::parse(c)
                    .map(|a| a.to_string())
                    .map_err(|_| err("could not parse coordinator address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if coordinators.is_empty() {
            return Err(err(
                "connection string must contain at least one coordinator",
            ));
        }
        Ok(ConnectionString {
            database_name: description.to_owned(),
            generation_id: generation.to_owned(),
            coordinators,
        })
    }

    /// A fresh random generation ID (32 alphanumerics).
    pub fn new_generation_id() -> String {
        const ALPHANUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        (0..32)
            .map(|_| ALPHANUM[fastrand::usize(..ALPHANUM.len())] as char)
            .collect()
    }
}

impl fmt::Display for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}@{}",
            self.database_name,
            self.generation_id,
            self.coordinators.join(",")
        )
    }
}

/// A cluster name as a connection-string description (`-` → `_`).
pub fn sanitize_description(name: &str) -> String {
    name.replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print_like_fdb() {
        let cases = [
            ("127.2.0.5:4501", "127.2.0.5", 4501, false, "127.2.0.5:4501"),
            (
                "127.2.0.5:4500:tls",
                "127.2.0.5",
                4500,
                true,
                "127.2.0.5:4500:tls",
            ),
            ("[::1]:4501", "::1", 4501, false, "[::1]:4501"),
            (
                "[::1]:4500:tls(fromHostname)",
                "::1",
                4500,
                true,
                "[::1]:4500:tls(fromHostname)",
            ),
            (
                "a-b.c.ns.svc.cluster.local:4501",
                "a-b.c.ns.svc.cluster.local",
                4501,
                false,
                "a-b.c.ns.svc.cluster.local:4501",
            ),
            ("127.2.0.5", "127.2.0.5", 0, false, "127.2.0.5"),
            ("::1", "::1", 0, false, "::1"),
        ];
        for (text, host, port, tls, printed) in cases {
            let a = ProcessAddress::parse(text).unwrap();
            assert_eq!(
                (a.host.as_str(), a.port, a.is_tls()),
                (host, port, tls),
                "{text}"
            );
            assert_eq!(a.to_string(), printed);
        }
        assert!(ProcessAddress::parse("").is_err());
        assert_eq!(
            ProcessAddress::new("[::1]", 4501, false).to_string(),
            "[::1]:4501"
        );
        assert_eq!(process_port(1, false), 4501);
        assert_eq!(process_port(2, true), 4502);
    }

    #[test]
    fn command_line_addresses() {
        let got = addresses_from_command_line("/usr/bin/fdbserver --class=storage --public_address=[127.2.0.5]:4501,[127.2.0.5]:4500:tls --logdir=/x").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].to_string(), "127.2.0.5:4500:tls");
        assert!(addresses_from_command_line("fdbserver").is_err());
    }

    #[test]
    fn connection_strings_round_trip_and_reject_garbage() {
        let cs =
            ConnectionString::parse("test_cluster:abc123@127.2.0.1:4501,127.2.0.2:4501").unwrap();
        assert_eq!(cs.database_name, "test_cluster");
        assert_eq!(cs.coordinators.len(), 2);
        assert_eq!(
            cs.to_string(),
            "test_cluster:abc123@127.2.0.1:4501,127.2.0.2:4501"
        );
        for bad in [
            "nocolon",
            "bad-desc:abc@1.2.3.4:1",
            "d:bad_gen@1.2.3.4:1",
            "d:gen",
            "d:@1.2.3.4:1",
        ] {
            assert!(ConnectionString::parse(bad).is_err(), "{bad}");
        }
        let id = ConnectionString::new_generation_id();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric()));
    }
}
