use super::*;

fn spec(extra: serde_json::Value) -> RedisClusterSpec {
    let mut base = serde_json::json!({"storage": {"size": "1Gi"}});
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let c: crate::crd::RedisCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "redis.io/v1", "kind": "RedisCluster", "metadata": {"name": "demo"}, "spec": base
    }))
    .expect("spec");
    c.spec
}

fn paths() -> Paths {
    Paths {
        data_dir: "/data".into(),
        socket: "/controller/redis.sock".into(),
        tls_dir: "/tls".into(),
    }
}

fn render_with(s: &RedisClusterSpec, boot: &Boot) -> Rendered {
    let p = paths();
    render(&Input {
        spec: s,
        boot,
        bind: "10.1.2.3",
        port: 6379,
        paths: &p,
        default_user: "on #abc ~* &* +@all",
        masterauth: "pa ss\"word",
        shutdown_timeout: 10,
    })
}

fn lines(r: &Rendered) -> Vec<&str> {
    r.text.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn a_primary_boots_with_its_password_and_no_replicaof() {
    let r = render_with(&spec(serde_json::json!({})), &Boot::Primary);
    assert_eq!(
        lines(&r),
        vec![
            "bind 10.1.2.3",
            "replica-announce-ip 10.1.2.3",
            "port 6379",
            "unixsocket \"/controller/redis.sock\"",
            "unixsocketperm 700",
            "dir \"/data\"",
            "daemonize no",
            "dbfilename dump.rdb",
            "appenddirname appendonlydir",
            "shutdown-timeout 10",
            "appendonly yes",
            "aof-use-rdb-preamble yes",
            "save 900 1 300 10 60 10000",
            "user default on #abc ~* &* +@all",
            "masterauth \"pa ss\\\"word\"",
            "min-replicas-max-lag 10",
            "min-replicas-to-write 0",
        ]
    );
    assert!(r.ignored.is_empty());
}

#[test]
fn a_replica_follows_and_tls_replaces_the_port() {
    let s = spec(serde_json::json!({"tlsSecret": {"name": "t"}, "caSecret": {"name": "c"}}));
    let r = render_with(
        &s,
        &Boot::Replica {
            host: "10.0.0.9".into(),
            port: 6379,
        },
    );
    let l = lines(&r);
    for want in [
        "port 0",
        "tls-port 6379",
        "tls-cert-file \"/tls/tls.crt\"",
        "tls-key-file \"/tls/tls.key\"",
        "tls-ca-cert-file \"/tls/ca.crt\"",
        "tls-replication yes",
        "replicaof \"10.0.0.9\" 6379",
    ] {
        assert!(l.contains(&want), "missing {want:?} in {l:#?}");
    }
    assert!(!l.contains(&"port 6379"));
}

#[test]
fn the_acl_file_replaces_the_user_line() {
    let s = spec(serde_json::json!({"aclConfigSecret": {"name": "acl"}}));
    let l = render_with(&s, &Boot::Primary).text;
    assert!(l.contains("aclfile \"/data/users.acl\"\n"));
    assert!(!l.contains("user default"));
}

#[test]
fn spec_redis_is_sorted_cannot_touch_owned_keys_and_cannot_inject() {
    let s = spec(serde_json::json!({"redis": {
        "timeout": "300", "Appendonly": "no", "bind": "0.0.0.0", "requirepass": "x",
        "maxclients": "100", "hz": "20\nreplicaof evil 6379", "rename-command": "CONFIG \"\"",
        "min-replicas-to-write": "2", "bad key": "1"
    }}));
    let r = render_with(&s, &Boot::Primary);
    let l = lines(&r);
    let tail: Vec<&str> = l.iter().rev().take(4).rev().copied().collect();
    assert_eq!(
        tail,
        vec![
            "appendonly no",
            "maxclients 100",
            "min-replicas-to-write 2",
            "timeout 300"
        ]
    );
    assert!(
        !l.contains(&"appendonly yes"),
        "the user's appendonly replaces the default"
    );
    assert_eq!(
        l.iter()
            .filter(|x| x.starts_with("min-replicas-to-write"))
            .count(),
        1
    );
    assert!(!r.text.contains("evil"));
    assert!(!r.text.contains("0.0.0.0"));
    assert_eq!(r.ignored.len(), 5, "{:?}", r.ignored);
    // Deterministic: rendering twice gives the same bytes.
    assert_eq!(render_with(&s, &Boot::Primary), r);
}

#[test]
fn memory_and_sync_replicas_are_rendered_and_live() {
    let s = spec(serde_json::json!({
        "minSyncReplicas": 1, "minSyncReplicasMaxLag": 5, "instances": 3,
        "resources": {"limits": {"memory": "1Gi"}},
        "memory": {"maxMemoryPercent": 75, "maxMemoryPolicy": "allkeys-lru"},
        "redis": {"databases": "32", "timeout": "10", "maxmemory": "1"}
    }));
    let text = render_with(&s, &Boot::Primary).text;
    for want in [
        "min-replicas-to-write 1\n",
        "min-replicas-max-lag 5\n",
        "maxmemory 805306368\n",
        "maxmemory-policy allkeys-lru\n",
        "databases 32\n",
    ] {
        assert!(text.contains(want), "missing {want:?}");
    }
    let l = live(&s);
    assert_eq!(
        l.into_iter().collect::<Vec<_>>(),
        [
            ("maxmemory", "805306368"),
            ("maxmemory-policy", "allkeys-lru"),
            ("min-replicas-max-lag", "5"),
            ("min-replicas-to-write", "1"),
            ("timeout", "10"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec(),
        "databases is restart-only; maxmemory in spec.redis yields to spec.memory"
    );
}

#[test]
fn maxmemory_from_a_quantity_or_a_percentage() {
    let table = [
        (
            serde_json::json!({"memory": {"maxMemory": "256Mi"}}),
            Some(268_435_456),
        ),
        (
            serde_json::json!({"memory": {"maxMemory": "1G"}}),
            Some(1_000_000_000),
        ),
        (
            serde_json::json!({"memory": {"maxMemoryPercent": 50}, "resources": {"limits": {"memory": "2Gi"}}}),
            Some(1_073_741_824),
        ),
        (
            serde_json::json!({"memory": {"maxMemoryPercent": 50}}),
            None,
        ),
        (serde_json::json!({}), None),
    ];
    for (extra, want) in table {
        assert_eq!(maxmemory(&spec(extra.clone())), want, "{extra}");
    }
}

#[test]
fn quoting_escapes_what_the_parser_would_split() {
    assert_eq!(quote("plain"), "\"plain\"");
    assert_eq!(quote("a b\"c\\d\n"), "\"a b\\\"c\\\\d\\x0a\"");
}
