use super::*;

#[test]
fn only_the_projected_token_opens_the_api() {
    let table: &[(Option<&str>, Option<&str>, bool)] = &[
        (Some("Bearer s3cret"), Some("s3cret\n"), true),
        (Some("Bearer s3cret "), Some("s3cret"), true),
        (Some("Bearer other"), Some("s3cret"), false),
        (Some("bearer s3cret"), Some("s3cret"), false),
        (Some("s3cret"), Some("s3cret"), false),
        (None, Some("s3cret"), false),
        (Some("Bearer "), Some(""), false),
        (Some("Bearer x"), None, false),
        (Some("Bearer s3cre"), Some("s3cret"), false),
    ];
    for (header, file, want) in table {
        assert_eq!(
            token_matches(*header, *file),
            *want,
            "{header:?} vs {file:?}"
        );
    }
}

fn replica(replid: &str, offset: i64) -> Info {
    Info::parse(&format!(
        "role:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\nmaster_link_status:up\r\nmaster_replid:{replid}\r\nslave_repl_offset:{offset}\r\n"
    ))
}

fn req(id: &str, min: i64) -> PromoteRequest {
    PromoteRequest {
        expected_replication_id: id.into(),
        min_offset: min,
    }
}

#[test]
fn promotion_is_guarded_by_lineage_and_offset() {
    assert_eq!(
        promote_check(&replica("aaa", 100), &req("aaa", 100)),
        Ok(true)
    );
    assert_eq!(
        promote_check(&replica("aaa", 100), &req("aaa", 0)),
        Ok(true)
    );
    assert!(
        promote_check(&replica("bbb", 100), &req("aaa", 0))
            .unwrap_err()
            .contains("re-synchronised")
    );
    assert!(
        promote_check(&replica("aaa", 99), &req("aaa", 100))
            .unwrap_err()
            .contains("behind")
    );
    // After REPLICAOF NO ONE the old ID is replid2: a retried promotion is "already done".
    let promoted = Info::parse("role:master\r\nmaster_replid:new\r\nmaster_replid2:aaa\r\n");
    assert_eq!(promote_check(&promoted, &req("aaa", 100)), Ok(false));
    assert!(promote_check(&promoted, &req("zzz", 0)).is_err());
}

#[test]
fn readiness_is_fence_and_link_aware() {
    let running = Boot::Running;
    let primary = Info::parse("role:master\r\nloading:0\r\n");
    assert_eq!(not_ready(&running, false, Ok(&primary)), None);
    assert_eq!(
        not_ready(&running, true, Ok(&primary)).as_deref(),
        Some("fenced")
    );
    let waiting = Boot::Waiting {
        reason: "fenced: demo-0".into(),
    };
    assert!(
        not_ready(&waiting, true, Err(String::new()))
            .expect("not ready")
            .contains("fenced: demo-0")
    );
    assert_eq!(not_ready(&running, false, Ok(&replica("a", 1))), None);
    let down = Info::parse("role:slave\r\nmaster_link_status:down\r\n");
    assert!(
        not_ready(&running, false, Ok(&down))
            .expect("down")
            .contains("link")
    );
    let syncing =
        Info::parse("role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:1\r\n");
    assert!(
        not_ready(&running, false, Ok(&syncing))
            .expect("sync")
            .contains("synchronisation")
    );
    let loading = Info::parse("role:master\r\nloading:1\r\n");
    assert!(
        not_ready(&running, false, Ok(&loading))
            .expect("loading")
            .contains("loading")
    );
    assert!(not_ready(&Boot::Stopping, false, Ok(&primary)).is_some());
}

#[test]
fn the_report_reads_info() {
    let st = crate::instance::manager::State {
        boot: Boot::Running,
        fenced: false,
        hold: None,
        generation: "g1".into(),
        min_replicas_to_write: 1,
        isolation: crate::instance::manager::Isolation {
            enabled: true,
            api_timeout: Duration::from_secs(5),
            peer_timeout: Duration::from_secs(5),
        },
        peers: Vec::new(),
    };
    let i = Info::parse(
        "role:master\r\nconnected_slaves:0\r\nmaster_replid:r1\r\nmaster_replid2:r0\r\nmaster_repl_offset:42\r\nmin_slaves_good_slaves:0\r\n",
    );
    let r = report("demo-0", &st, Some(&i));
    assert_eq!(
        (
            r.role.as_str(),
            r.replication_id.as_str(),
            r.replication_offset
        ),
        ("master", "r1", 42)
    );
    assert!(
        r.writes_refused,
        "min-replicas-to-write 1 with no good replica refuses writes"
    );
    assert_eq!(r.auth_generation, "g1");
    let none = report("demo-0", &st, None);
    assert_eq!(none.role, "");
}
