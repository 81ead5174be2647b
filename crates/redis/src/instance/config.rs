//! redis.conf, rendered from the RedisCluster on every start, and the subset of it that is
//! applied live with `CONFIG SET`.
//!
//! Contract (pure):
//! - [`render`] writes the whole file in a fixed order, so the same inputs give the same
//!   bytes: the instance manager's own settings (bind to the pod IP and announce it as the
//!   replica IP, port or TLS port, the local Unix socket, `dir`, persistence defaults),
//!   authentication (`user default` with the password hashes, or `aclfile`; `masterauth`) —
//!   present before the first boot, so there is never a passwordless moment — then
//!   `replicaof` for a replica, `min-replicas-to-write` / `min-replicas-max-lag` from
//!   `minSyncReplicas`/`minSyncReplicasMaxLag`, `maxmemory` / `maxmemory-policy` from
//!   `spec.memory`, and last `spec.redis` sorted by key.
//! - `spec.redis` may override the defaults it names (`appendonly`, `save`,
//!   `min-replicas-to-write`, …) but never the keys the instance manager owns ([`OWNED`]:
//!   addresses, paths, authentication, replication and TLS files, `rename-command`); those, and
//!   keys or values with characters that could break the file (a newline would inject a
//!   directive), are left out and listed in [`Rendered::ignored`].
//! - [`live`] is what the running instance applies with `CONFIG SET` when the spec changes:
//!   every rendered parameter except the owned and restart-only ones ([`RESTART_ONLY`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::crd::RedisClusterSpec;
use crate::instance::decide::Boot;
use crate::quantity;

/// Keys the instance manager sets itself; `spec.redis` cannot change them.
pub const OWNED: &[&str] = &[
    "bind",
    "port",
    "tls-port",
    "unixsocket",
    "unixsocketperm",
    "dir",
    "daemonize",
    "supervised",
    "pidfile",
    "logfile",
    "include",
    "replicaof",
    "slaveof",
    "masterauth",
    "masteruser",
    "requirepass",
    "aclfile",
    "user",
    "tls-cert-file",
    "tls-key-file",
    "tls-ca-cert-file",
    "tls-ca-cert-dir",
    "tls-replication",
    "dbfilename",
    "appenddirname",
    "appendfilename",
    "rename-command",
    "cluster-enabled",
    "cluster-config-file",
    "shutdown-timeout",
];

/// Keys that only take effect on a restart (upstream's list): rendered, never `CONFIG SET`.
pub const RESTART_ONLY: &[&str] = &[
    "bind",
    "port",
    "tls-port",
    "unixsocket",
    "databases",
    "loadmodule",
];

/// Files and directories the configuration points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// `dir` (the data volume).
    pub data_dir: PathBuf,
    /// The Unix socket the instance manager talks to redis-server through.
    pub socket: PathBuf,
    /// The user TLS material (`tls.crt`, `tls.key`, `ca.crt`).
    pub tls_dir: PathBuf,
}

impl Paths {
    /// The rendered configuration file.
    pub fn conf(&self) -> PathBuf {
        self.data_dir.join("redis.conf")
    }

    /// The rendered ACL file (with `aclConfigSecret`).
    pub fn acl_file(&self) -> PathBuf {
        self.data_dir.join("users.acl")
    }
}

/// What [`render`] needs besides the spec.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The cluster spec.
    pub spec: &'a RedisClusterSpec,
    /// How redis-server starts (`Wait` renders nothing role-specific).
    pub boot: &'a Boot,
    /// The pod IP to bind.
    pub bind: &'a str,
    /// The Redis port (TLS port when TLS is on).
    pub port: u16,
    /// Where things are.
    pub paths: &'a Paths,
    /// The default user's rules (`on #<sha256> … ~* &* +@all`) when no ACL file is used.
    pub default_user: &'a str,
    /// `masterauth`: the password replicas authenticate to their primary with.
    pub masterauth: &'a str,
    /// Seconds a `SHUTDOWN` waits for lagging replicas (`shutdown-timeout`).
    pub shutdown_timeout: u32,
}

/// A rendered configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The file's text.
    pub text: String,
    /// `spec.redis` entries left out, each with the reason.
    pub ignored: Vec<String>,
}

/// A value as a redis.conf argument: double-quoted, with `\`, `"` and non-printable bytes
/// escaped (Redis' `sdssplitargs` syntax).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for b in s.bytes() {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
    out
}

/// `maxmemory` in bytes from `spec.memory` (an explicit quantity, or a percentage of the
/// memory limit).
pub fn maxmemory(spec: &RedisClusterSpec) -> Option<i128> {
    let memory = spec.memory.as_ref()?;
    if let Some(q) = &memory.max_memory {
        return quantity::parse(&q.0)
            .map(quantity::value)
            .filter(|b| *b > 0);
    }
    let pct = i128::from(memory.max_memory_percent?);
    let limit = spec.resources.as_ref()?.limits.as_ref()?.get("memory")?;
    let bytes = quantity::value(quantity::parse(&limit.0)?);
    Some(bytes * pct / 100).filter(|b| *b > 0)
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn valid_value(v: &str) -> bool {
    !v.bytes().any(|b| b.is_ascii_control())
}

/// The user's `spec.redis` entries that are rendered (lower-cased keys), and what was left
/// out.
fn user_entries(spec: &RedisClusterSpec) -> (BTreeMap<String, String>, Vec<String>) {
    let mut kept = BTreeMap::new();
    let mut ignored = Vec::new();
    for (k, v) in &spec.redis {
        let key = k.trim().to_ascii_lowercase();
        if !valid_key(&key) {
            ignored.push(format!("spec.redis key {k:?} is not a configuration name"));
        } else if !valid_value(v) {
            ignored.push(format!("spec.redis[{k}] contains control characters"));
        } else if OWNED.contains(&key.as_str()) {
            ignored.push(format!(
                "spec.redis[{k}] is managed by the instance manager"
            ));
        } else if key == "maxmemory" || key == "maxmemory-policy" {
            if spec.memory.is_some() {
                ignored.push(format!("spec.redis[{k}] conflicts with spec.memory"));
            } else {
                kept.insert(key, v.trim().to_owned());
            }
        } else {
            kept.insert(key, v.trim().to_owned());
        }
    }
    (kept, ignored)
}

/// The parameters derived from the spec (not `spec.redis`), by key.
fn derived(spec: &RedisClusterSpec) -> BTreeMap<String, String> {
    let mut d = BTreeMap::new();
    d.insert(
        "min-replicas-to-write".to_owned(),
        spec.min_sync_replicas.max(0).to_string(),
    );
    d.insert(
        "min-replicas-max-lag".to_owned(),
        spec.min_sync_replicas_max_lag.max(1).to_string(),
    );
    if let Some(bytes) = maxmemory(spec) {
        d.insert("maxmemory".to_owned(), bytes.to_string());
    }
    if let Some(m) = &spec.memory {
        d.insert(
            "maxmemory-policy".to_owned(),
            m.max_memory_policy.as_str().to_owned(),
        );
    }
    d
}

/// The parameters applied live (see the module contract), by key.
pub fn live(spec: &RedisClusterSpec) -> BTreeMap<String, String> {
    let (user, _) = user_entries(spec);
    let mut all = derived(spec);
    all.extend(user);
    all.retain(|k, _| !RESTART_ONLY.contains(&k.as_str()));
    all
}

/// Whether the spec turns TLS on (both Secrets set).
pub fn tls_enabled(spec: &RedisClusterSpec) -> bool {
    spec.tls_secret.is_some() && spec.ca_secret.is_some()
}

/// Renders redis.conf (see the module contract).
pub fn render(i: &Input<'_>) -> Rendered {
    let (user, ignored) = user_entries(i.spec);
    let mut out = String::from(
        "# Rendered by the Redis operator's instance manager at every start; edits are lost.\n",
    );
    let mut line = |k: &str, v: &str| {
        let _ = writeln!(out, "{k} {v}");
    };
    line("bind", i.bind);
    // The primary lists its replicas under this IP (what `FAILOVER TO <pod IP>` names),
    // whatever source address their connections come from.
    line("replica-announce-ip", i.bind);
    if tls_enabled(i.spec) {
        let tls = |f: &str| quote(&i.paths.tls_dir.join(f).to_string_lossy());
        line("port", "0");
        line("tls-port", &i.port.to_string());
        line("tls-cert-file", &tls(crate::names::KEY_TLS_CRT));
        line("tls-key-file", &tls(crate::names::KEY_TLS_KEY));
        line("tls-ca-cert-file", &tls(crate::names::KEY_CA_CRT));
        line("tls-auth-clients", "optional");
        line("tls-replication", "yes");
    } else {
        line("port", &i.port.to_string());
    }
    line("unixsocket", &quote(&i.paths.socket.to_string_lossy()));
    line("unixsocketperm", "700");
    line("dir", &quote(&i.paths.data_dir.to_string_lossy()));
    line("daemonize", "no");
    line("dbfilename", "dump.rdb");
    line("appenddirname", "appendonlydir");
    line("shutdown-timeout", &i.shutdown_timeout.to_string());
    let defaults = [
        ("appendonly", "yes"),
        ("aof-use-rdb-preamble", "yes"),
        ("save", "900 1 300 10 60 10000"),
    ];
    for (k, v) in defaults {
        if !user.contains_key(k) {
            line(k, v);
        }
    }
    if i.spec.acl_config_secret.is_some() {
        line("aclfile", &quote(&i.paths.acl_file().to_string_lossy()));
    } else {
        line("user", &format!("default {}", i.default_user));
    }
    line("masterauth", &quote(i.masterauth));
    if let Boot::Replica { host, port } = i.boot {
        line("replicaof", &format!("{} {port}", quote(host)));
    }
    for (k, v) in derived(i.spec) {
        if !user.contains_key(&k) {
            line(&k, &v);
        }
    }
    for (k, v) in &user {
        line(k, v);
    }
    Rendered { text: out, ignored }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
