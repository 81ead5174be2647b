//! Tables for the retention of artifacts: where a backup is stored, which pod is asked, and
//! what a deleting backup needs.

use super::*;
use serde_json::json;

fn backup(spec: serde_json::Value) -> RedisBackup {
    serde_json::from_value(json!({
        "apiVersion": "redis.io/v1", "kind": "RedisBackup",
        "metadata": {"name": "nightly-1", "namespace": "ns"},
        "spec": spec,
    }))
    .expect("backup")
}

#[test]
fn the_expected_path_is_upstreams_key_in_the_destination() {
    let s3 = backup(json!({"clusterName": "demo",
        "destination": {"s3": {"bucket": "bk", "path": "/prod/"}}}));
    assert_eq!(
        expected_path(&s3).as_deref(),
        Some("s3://bk/prod/nightly-1.rdb")
    );
    let aof = backup(json!({"clusterName": "demo", "method": "aof",
        "destination": {"azure": {"container": "c"}}}));
    assert_eq!(
        expected_path(&aof).as_deref(),
        Some("azblob://c/nightly-1.aof.tar.gz")
    );
    let invalid = backup(json!({"clusterName": "demo", "destination": {}}));
    assert_eq!(expected_path(&invalid), None);
    assert_eq!(
        s3.spec.deletion_policy(),
        BackupDeletionPolicy::Retain,
        "the default keeps artifacts, as upstream"
    );
}

const PATH: &str = "s3://bk/demo/nightly-1.rdb";

type Check = Box<dyn Fn(&Cleanup) -> bool>;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).expect("ts")
}

fn facts() -> Facts<'static> {
    Facts {
        policy: BackupDeletionPolicy::Delete,
        deleting_since: t(0),
        now: t(5),
        timeout: Duration::from_secs(600),
        target_pod: "demo-1",
        backup_path: PATH,
        expected: Some(PATH),
        restoring: None,
        via: Ok("127.2.0.5"),
        last_error: None,
    }
}

#[test]
fn a_deleting_backup_is_released_kept_held_or_deleted() {
    let released = |c: &Cleanup| matches!(c, Cleanup::Release(_));
    let kept = |c: &Cleanup, want: &str| matches!(c, Cleanup::Keep(w) if w.contains(want));
    let waits = |c: &Cleanup, want: &str| matches!(c, Cleanup::Wait(w) if w.contains(want));
    assert_eq!(decide(&facts()), Cleanup::Delete("127.2.0.5".into()));
    // Running: the pod that took it is asked all the same (it refuses while it runs).
    let running = Facts {
        backup_path: "",
        ..facts()
    };
    assert_eq!(decide(&running), Cleanup::Delete("127.2.0.5".into()));
    let cases: Vec<(Facts<'static>, Check)> = vec![
        (
            Facts {
                policy: BackupDeletionPolicy::Retain,
                ..facts()
            },
            Box::new(released),
        ),
        (
            Facts {
                target_pod: "",
                backup_path: "",
                ..facts()
            },
            Box::new(released),
        ),
        (
            Facts {
                expected: None,
                ..facts()
            },
            Box::new(released),
        ),
        (
            Facts {
                backup_path: "s3://other/elsewhere.rdb",
                ..facts()
            },
            Box::new(move |c| kept(c, "is not where this backup is stored")),
        ),
        (
            Facts {
                restoring: Some("copy"),
                ..facts()
            },
            Box::new(move |c| waits(c, "RedisCluster copy is still being restored")),
        ),
        (
            Facts {
                via: Err("no data pod of RedisCluster demo is Ready"),
                ..facts()
            },
            Box::new(move |c| waits(c, "no data pod")),
        ),
        // Past the deadline: kept, saying why, whatever it waited for.
        (
            Facts {
                now: t(600),
                via: Err("no data pod"),
                last_error: Some("AccessDenied"),
                ..facts()
            },
            Box::new(move |c| kept(c, "not deleted within 600s") && kept(c, "AccessDenied")),
        ),
        (
            Facts {
                now: t(601),
                restoring: Some("copy"),
                ..facts()
            },
            Box::new(move |c| kept(c, "a cluster was still restoring from it")),
        ),
    ];
    for (f, ok) in cases {
        let got = decide(&f);
        assert!(ok(&got), "{f:?} -> {got:?}");
    }
}

fn pod(name: &str, ip: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
    }))
    .expect("pod")
}

#[test]
fn the_pod_that_took_the_backup_is_asked_first_else_a_ready_one() {
    let pods = vec![
        pod("demo-0", "10.0.0.1", true),
        pod("demo-1", "10.0.0.2", false),
        pod("demo-2", "", true),
    ];
    let name = |p: Option<&Pod>| p.map(|p| p.name_any());
    assert_eq!(name(via("demo-1", &pods)).as_deref(), Some("demo-1"));
    assert_eq!(name(via("demo-2", &pods)).as_deref(), Some("demo-0"));
    assert_eq!(name(via("", &pods)).as_deref(), Some("demo-0"));
    let none = vec![pod("demo-1", "10.0.0.2", false)];
    assert_eq!(name(via("demo-4", &none)), None);
}
