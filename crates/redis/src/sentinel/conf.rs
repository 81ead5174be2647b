//! `sentinel.conf`, pure: what a Sentinel pod's instance manager writes before the first
//! start of its Sentinel.
//!
//! Contract of [`render`]: the Sentinel binds and announces the pod IP on port 26379, keeps
//! its state in the pod's emptyDir, and monitors the master under the cluster's name with
//! upstream's settings (quorum 2, `down-after-milliseconds 5000`, `failover-timeout 60000`,
//! `parallel-syncs 1`) and the cluster's password as `auth-pass`. Scripts cannot be
//! reconfigured at runtime. Values are quoted as redis.conf parses them, so no value can
//! inject a directive.
//!
//! With TLS ([`Input::tls`], the cluster's `tlsSecret`/`caSecret` projected at `/tls`): no
//! plain port (`port 0`), TLS on the Sentinel port (`tls-port`, announced as before), the
//! user's certificate, key and CA, `tls-auth-clients optional` (as the data pods: clients need
//! the CA, not a certificate of their own) and `tls-replication yes`, which makes the Sentinel
//! speak TLS to the data pods and to the other Sentinels.

use crate::instance::config::quote;

/// What the file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input<'a> {
    /// The master name (the cluster's name).
    pub name: &'a str,
    /// The pod IP (bind and announce).
    pub bind: &'a str,
    /// The Sentinel port.
    pub port: u16,
    /// The master's IP it is seeded with.
    pub master_ip: &'a str,
    /// The master's port.
    pub master_port: u16,
    /// The password of the data instances' default user.
    pub password: &'a str,
    /// The state directory.
    pub dir: &'a str,
    /// TLS, when the cluster has it.
    pub tls: Option<Tls<'a>>,
}

/// The TLS files, as paths in the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls<'a> {
    /// The certificate (`tls.crt`).
    pub cert: &'a str,
    /// Its key (`tls.key`).
    pub key: &'a str,
    /// The CA (`ca.crt`).
    pub ca: &'a str,
}

/// The file (see the module contract).
pub fn render(i: &Input<'_>) -> String {
    let n = quote(i.name);
    let listen = match &i.tls {
        None => vec![format!("port {}", i.port)],
        Some(t) => vec![
            "port 0".to_owned(),
            format!("tls-port {}", i.port),
            format!("tls-cert-file {}", quote(t.cert)),
            format!("tls-key-file {}", quote(t.key)),
            format!("tls-ca-cert-file {}", quote(t.ca)),
            "tls-auth-clients optional".to_owned(),
            "tls-replication yes".to_owned(),
        ],
    };
    let head = [format!("bind {}", i.bind)];
    let lines = [
        "protected-mode no".to_owned(),
        "daemonize no".to_owned(),
        format!("dir {}", quote(i.dir)),
        format!("sentinel announce-ip {}", i.bind),
        format!("sentinel announce-port {}", i.port),
        "sentinel resolve-hostnames no".to_owned(),
        "sentinel deny-scripts-reconfig yes".to_owned(),
        format!(
            "sentinel monitor {n} {} {} {}",
            i.master_ip,
            i.master_port,
            super::QUORUM
        ),
        format!(
            "sentinel down-after-milliseconds {n} {}",
            super::DOWN_AFTER_MS
        ),
        format!(
            "sentinel failover-timeout {n} {}",
            super::FAILOVER_TIMEOUT_MS
        ),
        format!("sentinel parallel-syncs {n} {}", super::PARALLEL_SYNCS),
        format!("sentinel auth-pass {n} {}", quote(i.password)),
    ];
    let all: Vec<String> = head.into_iter().chain(listen).chain(lines).collect();
    let mut out = all.join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(password: &'a str) -> Input<'a> {
        Input {
            name: "demo",
            bind: "127.2.0.7",
            port: 26379,
            master_ip: "127.2.0.3",
            master_port: 6379,
            password,
            dir: "/data",
            tls: None,
        }
    }

    fn tls() -> Tls<'static> {
        Tls {
            cert: "/tls/tls.crt",
            key: "/tls/tls.key",
            ca: "/tls/ca.crt",
        }
    }

    #[test]
    fn with_tls_only_the_tls_port_listens() {
        let text = render(&Input {
            tls: Some(tls()),
            ..input("s3cret")
        });
        for want in [
            "port 0\n",
            "tls-port 26379\n",
            "tls-cert-file \"/tls/tls.crt\"\n",
            "tls-key-file \"/tls/tls.key\"\n",
            "tls-ca-cert-file \"/tls/ca.crt\"\n",
            "tls-auth-clients optional\n",
            "tls-replication yes\n",
            "sentinel announce-port 26379\n",
            "sentinel monitor \"demo\" 127.2.0.3 6379 2\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(!text.contains("\nport 26379"), "{text}");
    }

    #[test]
    fn without_tls_no_tls_directive() {
        let text = render(&input("s3cret"));
        assert!(!text.contains("tls-"), "{text}");
    }

    #[test]
    fn a_tls_path_cannot_inject_a_directive() {
        let text = render(&Input {
            tls: Some(Tls {
                cert: "/tls/x\"\nport 1234",
                ..tls()
            }),
            ..input("s3cret")
        });
        assert!(!text.lines().any(|l| l == "port 1234"), "{text}");
    }

    #[test]
    fn the_file_carries_upstreams_settings() {
        let text = render(&input("s3cret"));
        for want in [
            "bind 127.2.0.7\n",
            "port 26379\n",
            "dir \"/data\"\n",
            "sentinel announce-ip 127.2.0.7\n",
            "sentinel monitor \"demo\" 127.2.0.3 6379 2\n",
            "sentinel down-after-milliseconds \"demo\" 5000\n",
            "sentinel failover-timeout \"demo\" 60000\n",
            "sentinel parallel-syncs \"demo\" 1\n",
            "sentinel auth-pass \"demo\" \"s3cret\"\n",
            "sentinel deny-scripts-reconfig yes\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn a_password_cannot_inject_a_directive() {
        let text = render(&input("a\"b\nsentinel monitor evil 1.2.3.4 6379 1"));
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("sentinel monitor"))
                .count(),
            1,
            "{text}"
        );
        assert!(!text.contains("evil 1.2.3.4 6379 1\n"), "{text}");
    }
}
