//! `sentinel.conf`, pure: what a Sentinel pod's instance manager writes before the first
//! start of its Sentinel.
//!
//! Contract of [`render`]: the Sentinel binds and announces the pod IP on port 26379, keeps
//! its state in the pod's emptyDir, and monitors the master under the cluster's name with
//! upstream's settings (quorum 2, `down-after-milliseconds 5000`, `failover-timeout 60000`,
//! `parallel-syncs 1`) and the cluster's password as `auth-pass`. Scripts cannot be
//! reconfigured at runtime. Values are quoted as redis.conf parses them, so no value can
//! inject a directive.

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
}

/// The file (see the module contract).
pub fn render(i: &Input<'_>) -> String {
    let n = quote(i.name);
    let lines = [
        format!("bind {}", i.bind),
        format!("port {}", i.port),
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
    let mut out = lines.join("\n");
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
        }
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
