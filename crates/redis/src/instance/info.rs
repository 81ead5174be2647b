//! `INFO` as data: the text parsed into fields, and the replication view every decision of
//! the instance manager reads.
//!
//! Contract: [`Info::parse`] accepts any `INFO` text (sections, comments, CRLF or LF) and
//! never fails; a missing or malformed field reads as its zero value, so a decision made on a
//! half-answered INFO errs towards "not in sync" (offset 0, link down), never towards
//! promoting. Pure.

use std::collections::BTreeMap;

use crate::instance_api::ReplicaSeen;

/// The fields of one `INFO` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Info(pub BTreeMap<String, String>);

impl Info {
    /// Parses `INFO` text.
    pub fn parse(text: &str) -> Self {
        let fields = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self(fields)
    }

    /// A field's text, empty when absent.
    pub fn get(&self, key: &str) -> &str {
        self.0.get(key).map(String::as_str).unwrap_or("")
    }

    /// A numeric field, 0 when absent or not a number.
    pub fn int(&self, key: &str) -> i64 {
        self.get(key).parse().unwrap_or(0)
    }

    /// A numeric field as a float (metrics), `None` when absent or not a number.
    pub fn float(&self, key: &str) -> Option<f64> {
        self.0.get(key)?.parse().ok()
    }

    /// Whether `role:master`.
    pub fn is_master(&self) -> bool {
        self.get("role") == "master"
    }

    /// `role` (`master`/`slave`).
    pub fn role(&self) -> &str {
        self.get("role")
    }

    /// The replication offset as the status reports it: `master_repl_offset` on a primary,
    /// `slave_repl_offset` on a replica.
    pub fn offset(&self) -> i64 {
        if self.is_master() {
            self.int("master_repl_offset")
        } else {
            self.int("slave_repl_offset")
        }
    }

    /// `master_host` and `master_port` of a replica.
    pub fn master(&self) -> Option<(String, u16)> {
        if self.is_master() {
            return None;
        }
        let port = self.get("master_port").parse().ok()?;
        Some((self.get("master_host").to_owned(), port))
    }

    /// Whether a replica's link to its primary is up.
    pub fn link_up(&self) -> bool {
        self.get("master_link_status") == "up"
    }

    /// The replicas a primary sees (`slave0:ip=…,port=…,state=…,offset=…,lag=…`).
    pub fn replicas(&self) -> Vec<ReplicaSeen> {
        let n = self.int("connected_slaves").max(0);
        (0..n)
            .filter_map(|i| self.0.get(&format!("slave{i}")))
            .map(|line| {
                let kv: BTreeMap<&str, &str> =
                    line.split(',').filter_map(|p| p.split_once('=')).collect();
                ReplicaSeen {
                    ip: kv.get("ip").copied().unwrap_or("").to_owned(),
                    port: kv.get("port").and_then(|p| p.parse().ok()).unwrap_or(0),
                    state: kv.get("state").copied().unwrap_or("").to_owned(),
                    offset: kv.get("offset").and_then(|p| p.parse().ok()).unwrap_or(0),
                    lag_seconds: kv.get("lag").and_then(|p| p.parse().ok()).unwrap_or(0),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMARY: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=10.0.0.2,port=6379,state=online,offset=1234,lag=0\r\n\
        slave1:ip=10.0.0.3,port=6379,state=wait_bgsave,offset=0,lag=3\r\n\
        master_failover_state:no-failover\r\nmaster_replid:aaaa\r\nmaster_replid2:0000\r\n\
        master_repl_offset:1300\r\n";

    const REPLICA: &str = "# Replication\nrole:slave\nmaster_host:10.0.0.1\nmaster_port:6379\n\
        master_link_status:down\nmaster_sync_in_progress:0\nslave_repl_offset:1200\n\
        master_link_down_since_seconds:7\nmaster_replid:aaaa\nmaster_repl_offset:1200\n";

    #[test]
    fn a_primary_reports_its_replicas() {
        let i = Info::parse(PRIMARY);
        assert!(i.is_master());
        assert_eq!(i.offset(), 1300);
        assert_eq!(i.master(), None);
        let r = i.replicas();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            ReplicaSeen {
                ip: "10.0.0.2".into(),
                port: 6379,
                state: "online".into(),
                offset: 1234,
                lag_seconds: 0
            }
        );
        assert_eq!(r[1].state, "wait_bgsave");
    }

    #[test]
    fn a_replica_reports_its_link() {
        let i = Info::parse(REPLICA);
        assert!(!i.is_master());
        assert_eq!(i.offset(), 1200);
        assert_eq!(i.master(), Some(("10.0.0.1".into(), 6379)));
        assert!(!i.link_up());
        assert_eq!(i.int("master_link_down_since_seconds"), 7);
    }

    #[test]
    fn missing_or_malformed_fields_read_as_not_in_sync() {
        let i = Info::parse("role:slave\r\nslave_repl_offset:abc\r\nnonsense line\r\n");
        assert_eq!(i.offset(), 0);
        assert!(!i.link_up());
        assert_eq!(i.master(), None);
        assert!(Info::parse("").replicas().is_empty());
    }
}
