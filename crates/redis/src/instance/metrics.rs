//! `/metrics`: the Redis instance's Prometheus metrics, computed from `INFO` at scrape time,
//! with upstream's names (`redis_*`) and labels (`namespace`, `cluster`, `pod`, `role`).
//!
//! Contract: [`render`] is pure — the same `INFO` gives the same text, in a fixed order.
//! `redis_up` and `redis_fenced` are always present (0 while redis-server is down or
//! fenced); the others only when `INFO` had the field. `redis_fenced` comes from the
//! instance manager's last view of the RedisCluster (upstream read the API on every scrape).
//! `redis_command_calls_total` covers every command `INFO commandstats` lists (upstream:
//! only GET, SET and DEL).

use std::fmt::Write as _;

use super::info::Info;

/// Who is scraped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Namespace.
    pub namespace: String,
    /// RedisCluster.
    pub cluster: String,
    /// Pod.
    pub pod: String,
}

// (metric, INFO field, type, help)
const FIELDS: &[(&str, &str, &str, &str)] = &[
    (
        "connected_clients",
        "connected_clients",
        "gauge",
        "Number of client connections.",
    ),
    (
        "blocked_clients",
        "blocked_clients",
        "gauge",
        "Number of clients pending on a blocking call.",
    ),
    (
        "rejected_connections_total",
        "rejected_connections",
        "counter",
        "Connections rejected because of maxclients.",
    ),
    (
        "used_memory_bytes",
        "used_memory",
        "gauge",
        "Memory used by Redis in bytes.",
    ),
    (
        "used_memory_rss_bytes",
        "used_memory_rss",
        "gauge",
        "Resident set size of Redis in bytes.",
    ),
    (
        "used_memory_peak_bytes",
        "used_memory_peak",
        "gauge",
        "Peak memory used by Redis in bytes.",
    ),
    (
        "maxmemory_bytes",
        "maxmemory",
        "gauge",
        "Configured maxmemory in bytes.",
    ),
    (
        "mem_fragmentation_ratio",
        "mem_fragmentation_ratio",
        "gauge",
        "Memory fragmentation ratio.",
    ),
    (
        "evicted_keys_total",
        "evicted_keys",
        "counter",
        "Keys evicted because of maxmemory.",
    ),
    (
        "total_commands_processed",
        "total_commands_processed",
        "counter",
        "Commands processed by the server.",
    ),
    (
        "instantaneous_ops_per_sec",
        "instantaneous_ops_per_sec",
        "gauge",
        "Operations per second over the last sample.",
    ),
    (
        "keyspace_hits_total",
        "keyspace_hits",
        "counter",
        "Successful key lookups.",
    ),
    (
        "keyspace_misses_total",
        "keyspace_misses",
        "counter",
        "Failed key lookups.",
    ),
    (
        "connected_replicas",
        "connected_slaves",
        "gauge",
        "Connected replicas.",
    ),
    (
        "replication_offset",
        "master_repl_offset",
        "gauge",
        "Replication offset of the primary stream.",
    ),
    (
        "replica_repl_offset",
        "slave_repl_offset",
        "gauge",
        "Replication offset of a replica.",
    ),
    (
        "rdb_last_save_timestamp",
        "rdb_last_save_time",
        "gauge",
        "Last successful RDB save (unix seconds).",
    ),
    (
        "rdb_last_bgsave_duration_seconds",
        "rdb_last_bgsave_time_sec",
        "gauge",
        "Duration of the last RDB background save.",
    ),
    (
        "aof_last_rewrite_duration_seconds",
        "aof_last_rewrite_time_sec",
        "gauge",
        "Duration of the last AOF rewrite.",
    ),
    (
        "rdb_changes_since_last_save",
        "rdb_changes_since_last_save",
        "gauge",
        "Changes since the last RDB save.",
    ),
    (
        "loading",
        "loading",
        "gauge",
        "Whether Redis is loading its dataset (1) or not (0).",
    ),
    (
        "uptime_seconds",
        "uptime_in_seconds",
        "gauge",
        "Seconds since redis-server started.",
    ),
];

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The metrics text; `info` is `None` while redis-server is down or does not answer.
pub fn render(id: &Identity, info: Option<&Info>, fenced: bool) -> String {
    let role = info
        .map(Info::role)
        .filter(|r| !r.is_empty())
        .unwrap_or("unknown");
    let labels = format!(
        "namespace=\"{}\",cluster=\"{}\",pod=\"{}\",role=\"{}\"",
        escape(&id.namespace),
        escape(&id.cluster),
        escape(&id.pod),
        escape(role)
    );
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, extra: &str, v: f64| {
        let _ = writeln!(
            out,
            "# HELP redis_{name} {help}\n# TYPE redis_{name} {kind}"
        );
        let _ = writeln!(out, "redis_{name}{{{labels}{extra}}} {v}");
    };
    metric(
        "up",
        "gauge",
        "Whether Redis answers (1) or not (0).",
        "",
        f64::from(u8::from(info.is_some())),
    );
    metric(
        "fenced",
        "gauge",
        "Whether this instance is fenced (1) or not (0).",
        "",
        f64::from(u8::from(fenced)),
    );
    let Some(info) = info else {
        return out;
    };
    let extra = format!(
        ",redis_version=\"{}\",os=\"{}\"",
        escape(info.get("redis_version")),
        escape(info.get("os"))
    );
    metric(
        "instance_info",
        "gauge",
        "Static Redis instance information.",
        &extra,
        1.0,
    );
    for (name, field, kind, help) in FIELDS {
        if let Some(v) = info.float(field) {
            metric(name, kind, help, "", v);
        }
    }
    let link = f64::from(u8::from(info.link_up()));
    metric(
        "master_link_up",
        "gauge",
        "Whether a replica's link to its primary is up (1) or not (0).",
        "",
        link,
    );
    if let (Some(m), Some(s)) = (
        info.float("master_repl_offset"),
        info.float("slave_repl_offset"),
    ) {
        metric(
            "replication_lag_bytes",
            "gauge",
            "Replication lag in bytes.",
            "",
            (m - s).max(0.0),
        );
    }
    let mut first = true;
    for (k, v) in &info.0 {
        let Some(cmd) = k.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some(calls) = v
            .split(',')
            .find_map(|p| p.strip_prefix("calls="))
            .and_then(|c| c.parse::<f64>().ok())
        else {
            continue;
        };
        if first {
            let _ = writeln!(
                out,
                "# HELP redis_command_calls_total Calls of each Redis command.\n# TYPE redis_command_calls_total counter"
            );
            first = false;
        }
        let _ = writeln!(
            out,
            "redis_command_calls_total{{{labels},command=\"{}\"}} {calls}",
            escape(cmd)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Identity {
        Identity {
            namespace: "ns".into(),
            cluster: "demo".into(),
            pod: "demo-0".into(),
        }
    }

    #[test]
    fn down_reports_up_zero_and_fencing() {
        let t = render(&id(), None, true);
        assert!(t.contains(
            "redis_up{namespace=\"ns\",cluster=\"demo\",pod=\"demo-0\",role=\"unknown\"} 0\n"
        ));
        assert!(t.contains(
            "redis_fenced{namespace=\"ns\",cluster=\"demo\",pod=\"demo-0\",role=\"unknown\"} 1\n"
        ));
        assert!(!t.contains("redis_used_memory_bytes"));
    }

    #[test]
    fn info_fields_become_metrics() {
        let info = Info::parse(
            "redis_version:7.0.15\r\nos:Linux\r\nrole:slave\r\nused_memory:1024\r\nconnected_clients:3\r\n\
             master_link_status:up\r\nmaster_repl_offset:100\r\nslave_repl_offset:90\r\n\
             cmdstat_set:calls=5,usec=10,usec_per_call=2.00\r\ncmdstat_get:calls=7,usec=1\r\n",
        );
        let t = render(&id(), Some(&info), false);
        let l = "namespace=\"ns\",cluster=\"demo\",pod=\"demo-0\",role=\"slave\"";
        for want in [
            format!("redis_up{{{l}}} 1"),
            format!("redis_instance_info{{{l},redis_version=\"7.0.15\",os=\"Linux\"}} 1"),
            format!("redis_used_memory_bytes{{{l}}} 1024"),
            format!("redis_connected_clients{{{l}}} 3"),
            format!("redis_master_link_up{{{l}}} 1"),
            format!("redis_replication_lag_bytes{{{l}}} 10"),
            format!("redis_command_calls_total{{{l},command=\"get\"}} 7"),
            format!("redis_command_calls_total{{{l},command=\"set\"}} 5"),
        ] {
            assert!(t.contains(&format!("{want}\n")), "missing {want}\n{t}");
        }
        assert_eq!(t, render(&id(), Some(&info), false), "deterministic");
    }
}
