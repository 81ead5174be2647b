use super::*;
use jiff::civil::date;
use jiff::tz::TimeZone;

fn utc(y: i16, mo: i8, d: i8, h: i8, mi: i8, s: i8) -> Timestamp {
    date(y, mo, d)
        .at(h, mi, s, 0)
        .to_zoned(TimeZone::UTC)
        .expect("zoned")
        .timestamp()
}

fn spec(schedule: &str, tz: &str) -> RedisScheduledBackupSpec {
    RedisScheduledBackupSpec {
        schedule: schedule.into(),
        time_zone: tz.into(),
        cluster_name: "demo".into(),
        ..RedisScheduledBackupSpec::default()
    }
}

fn run(
    spec: &RedisScheduledBackupSpec,
    status: &RedisScheduledBackupStatus,
    created: Timestamp,
    now: Timestamp,
) -> Plan {
    plan(&Facts {
        name: "nightly",
        created,
        generation: Some(2),
        spec,
        status,
        now,
    })
}

fn valid_condition(p: &Plan) -> (String, String) {
    let c = conditions::get(&p.status.conditions, CONDITION_SCHEDULE_VALID).expect("condition");
    (c.status.clone(), c.reason.clone())
}

#[test]
fn the_first_backup_comes_at_the_first_tick_after_creation() {
    let s = spec("0 2 * * *", "UTC");
    let created = utc(2024, 3, 1, 10, 0, 0);
    let p = run(&s, &Default::default(), created, utc(2024, 3, 1, 10, 0, 5));
    assert_eq!(p.create, None);
    assert_eq!(
        p.status.next_schedule_time,
        Some(Time(utc(2024, 3, 2, 2, 0, 0)))
    );
    assert_eq!(p.status.phase, Some(ScheduledBackupPhase::Active));
    assert_eq!(p.requeue, Some(Duration::from_secs(16 * 3600 - 5)));
    assert_eq!(
        valid_condition(&p),
        ("True".into(), "ScheduleParsed".into())
    );
}

#[test]
fn a_due_tick_creates_one_backup_named_after_the_tick() {
    let s = spec("0 2 * * *", "UTC");
    let created = utc(2024, 3, 1, 10, 0, 0);
    let now = utc(2024, 3, 2, 2, 0, 1);
    let p = run(&s, &Default::default(), created, now);
    let tick = utc(2024, 3, 2, 2, 0, 0).as_second();
    assert_eq!(p.create, Some(format!("nightly-{tick}")));
    assert_eq!(p.status.last_schedule_time, Some(Time(now)));
    assert_eq!(p.status.last_backup_name, format!("nightly-{tick}"));
    assert_eq!(
        p.status.next_schedule_time,
        Some(Time(utc(2024, 3, 3, 2, 0, 0)))
    );
    // Written: the next pass waits for the next tick.
    let again = run(&s, &p.status, created, utc(2024, 3, 2, 2, 0, 2));
    assert_eq!(again.create, None);
}

#[test]
fn a_repeated_pass_before_its_status_was_written_names_the_same_backup() {
    let s = spec("@every 2s", "UTC");
    let created = utc(2024, 3, 1, 10, 0, 0);
    let a = run(&s, &Default::default(), created, utc(2024, 3, 1, 10, 0, 3));
    let b = run(&s, &Default::default(), created, utc(2024, 3, 1, 10, 0, 4));
    assert_eq!(a.create, b.create);
    assert_eq!(
        a.create,
        Some(format!("nightly-{}", utc(2024, 3, 1, 10, 0, 2).as_second()))
    );
}

#[test]
fn missed_ticks_after_downtime_give_one_backup() {
    let s = spec("@hourly", "UTC");
    let last = RedisScheduledBackupStatus {
        last_schedule_time: Some(Time(utc(2024, 3, 1, 0, 0, 0))),
        ..Default::default()
    };
    // Down for three days: one backup now, the next on the next hour.
    let now = utc(2024, 3, 4, 0, 30, 0);
    let p = run(&s, &last, utc(2024, 2, 1, 0, 0, 0), now);
    assert!(p.create.is_some());
    assert_eq!(
        p.status.next_schedule_time,
        Some(Time(utc(2024, 3, 4, 1, 0, 0)))
    );
    assert_eq!(p.requeue, Some(Duration::from_secs(1800)));
    let after = run(&s, &p.status, utc(2024, 2, 1, 0, 0, 0), now);
    assert_eq!(after.create, None);
}

#[test]
fn the_time_zone_moves_the_tick() {
    let s = spec("0 2 * * *", "America/Chicago");
    let created = utc(2024, 7, 1, 0, 0, 0);
    let p = run(&s, &Default::default(), created, created);
    // 02:00 CDT is 07:00 UTC.
    assert_eq!(
        p.status.next_schedule_time,
        Some(Time(utc(2024, 7, 1, 7, 0, 0)))
    );
}

#[test]
fn suspended_schedules_create_nothing_and_show_no_next_run() {
    let mut s = spec("@every 2s", "UTC");
    s.suspend = Some(true);
    let status = RedisScheduledBackupStatus {
        next_schedule_time: Some(Time(utc(2024, 1, 1, 0, 0, 0))),
        ..Default::default()
    };
    let p = run(
        &s,
        &status,
        utc(2023, 1, 1, 0, 0, 0),
        utc(2024, 1, 1, 0, 0, 0),
    );
    assert_eq!(p.create, None);
    assert_eq!(p.requeue, None);
    assert_eq!(p.status.phase, Some(ScheduledBackupPhase::Suspended));
    assert_eq!(p.status.next_schedule_time, None);
    // Resumed long after: one catch-up backup at once.
    s.suspend = Some(false);
    let p = run(
        &s,
        &p.status,
        utc(2023, 1, 1, 0, 0, 0),
        utc(2024, 1, 1, 0, 0, 0),
    );
    assert!(p.create.is_some());
}

#[test]
fn invalid_schedules_are_reported_and_never_fire() {
    let now = utc(2024, 1, 1, 0, 0, 0);
    let cases = [
        (spec("61 * * * *", "UTC"), "invalid schedule"),
        (spec("0 0 30 2 *", "UTC"), "no upcoming occurrences"),
        (spec("@daily", "Mars/Olympus"), "invalid timeZone"),
    ];
    for (s, why) in cases {
        let p = run(&s, &Default::default(), now, now);
        assert_eq!(p.create, None, "{why}");
        assert_eq!(p.requeue, None, "{why}");
        assert!(
            p.invalid.as_deref().is_some_and(|m| m.contains(why)),
            "{why}: {p:?}"
        );
        assert_eq!(
            valid_condition(&p),
            ("False".into(), "InvalidSchedule".into())
        );
    }
    let long = "x".repeat(64);
    let p = plan(&Facts {
        name: &long,
        created: now,
        generation: None,
        spec: &spec("@daily", "UTC"),
        status: &Default::default(),
        now,
    });
    assert!(p.invalid.is_some_and(|m| m.contains("63 characters")));
}

fn backup(name: &str, phase: Option<&str>, created_s: i64) -> RedisBackup {
    let created = Time(Timestamp::from_second(1_700_000_000 + created_s).expect("ts"));
    serde_json::from_value(serde_json::json!({
        "apiVersion": "redis.io/v1", "kind": "RedisBackup",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"clusterName": "demo"},
        "status": phase.map(|p| serde_json::json!({"phase": p})).unwrap_or_default(),
    }))
    .expect("backup")
}

#[test]
fn history_limits_prune_the_oldest_first_and_never_running_ones() {
    let all = [
        backup("c1", Some("Completed"), 1),
        backup("c3", Some("Completed"), 3),
        backup("c2", Some("Completed"), 2),
        backup("c4", Some("Completed"), 4),
        backup("f1", Some("Failed"), 1),
        backup("f2", Some("Failed"), 2),
        backup("r", Some("Running"), 0),
        backup("p", None, 0),
    ];
    let refs: Vec<&RedisBackup> = all.iter().collect();
    let mut s = spec("@daily", "UTC");
    assert_eq!(prune(&refs, &s), vec!["c1".to_owned()]);
    s.successful_backups_history_limit = Some(1);
    s.failed_backups_history_limit = Some(0);
    assert_eq!(prune(&refs, &s), ["c1", "c2", "c3", "f1", "f2"]);
    s.successful_backups_history_limit = Some(10);
    s.failed_backups_history_limit = None;
    assert!(prune(&refs, &s).is_empty());
}
