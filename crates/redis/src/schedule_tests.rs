use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn next(expr: &str, after: &str, zone: &str) -> Option<String> {
    let schedule = Schedule::parse(expr).expect("parses");
    let zone = load_zone(zone).expect("zone");
    schedule.next_after(ts(after), &zone).map(|t| t.to_string())
}

#[test]
fn next_firings_follow_cron() {
    let cases = [
        (
            "0 * * * *",
            "2026-03-01T10:15:00Z",
            "UTC",
            Some("2026-03-01T11:00:00Z"),
        ),
        (
            "*/15 * * * *",
            "2026-03-01T10:15:00Z",
            "UTC",
            Some("2026-03-01T10:30:00Z"),
        ),
        (
            "30 2 * * *",
            "2026-03-01T10:15:00Z",
            "UTC",
            Some("2026-03-02T02:30:00Z"),
        ),
        (
            "0 0 1 1 *",
            "2026-03-01T00:00:00Z",
            "UTC",
            Some("2027-01-01T00:00:00Z"),
        ),
        (
            "@daily",
            "2026-03-01T10:15:00Z",
            "UTC",
            Some("2026-03-02T00:00:00Z"),
        ),
        (
            "@hourly",
            "2026-03-01T10:59:59Z",
            "UTC",
            Some("2026-03-01T11:00:00Z"),
        ),
        (
            "@weekly",
            "2026-03-04T00:00:00Z",
            "UTC",
            Some("2026-03-08T00:00:00Z"),
        ),
        (
            "@monthly",
            "2026-03-04T00:00:00Z",
            "UTC",
            Some("2026-04-01T00:00:00Z"),
        ),
        (
            "@yearly",
            "2026-03-04T00:00:00Z",
            "UTC",
            Some("2027-01-01T00:00:00Z"),
        ),
        (
            "@every 90m",
            "2026-03-01T10:15:30.5Z",
            "UTC",
            Some("2026-03-01T11:45:30Z"),
        ),
        (
            "0 9 * * MON-FRI",
            "2026-03-06T10:00:00Z",
            "UTC",
            Some("2026-03-09T09:00:00Z"),
        ),
        (
            "0 0 * JAN,jul *",
            "2026-03-01T00:00:00Z",
            "UTC",
            Some("2026-07-01T00:00:00Z"),
        ),
        // Day-of-month OR day-of-week when both are restricted: the 13th or a Friday.
        (
            "0 0 13 * 5",
            "2026-03-01T00:00:00Z",
            "UTC",
            Some("2026-03-06T00:00:00Z"),
        ),
        // Read in the time zone: 06:00 in Chicago (CST, UTC-6) is 12:00 UTC.
        (
            "0 6 * * *",
            "2026-01-10T00:00:00Z",
            "America/Chicago",
            Some("2026-01-10T12:00:00Z"),
        ),
        (
            "CRON_TZ=Asia/Tokyo 0 9 * * *",
            "2026-01-10T00:00:00Z",
            "UTC",
            Some("2026-01-11T00:00:00Z"),
        ),
        // Never fires.
        ("0 0 30 2 *", "2026-01-01T00:00:00Z", "UTC", None),
        ("0 0 31 4 *", "2026-01-01T00:00:00Z", "UTC", None),
    ];
    for (expr, after, zone, want) in cases {
        assert_eq!(
            next(expr, after, zone).as_deref(),
            want,
            "{expr} after {after} in {zone}"
        );
    }
}

#[test]
fn bad_expressions_say_what_is_wrong() {
    let cases = [
        ("", "expected exactly 5 fields, found 0"),
        ("* * * *", "expected exactly 5 fields, found 4"),
        ("0 * * * * *", "expected exactly 5 fields, found 6"),
        ("60 * * * *", "60 is out of range 0-59 in minute field"),
        ("* 24 * * *", "24 is out of range 0-23 in hour field"),
        ("* * 0 * *", "0 is out of range 1-31 in day-of-month field"),
        ("* * * 13 *", "13 is out of range 1-12 in month field"),
        ("* * * * 7", "7 is out of range 0-6 in day-of-week field"),
        (
            "5-1 * * * *",
            "beginning of range (5) beyond end of range (1)",
        ),
        ("*/0 * * * *", "step of 0"),
        ("x * * * *", "invalid value \"x\" in minute field"),
        ("@sometimes", "unrecognized descriptor: @sometimes"),
        ("@every banana", "failed to parse duration"),
        ("@every -1h", "positive duration"),
        (
            "TZ=Mars/Olympus 0 * * * *",
            "unknown time zone Mars/Olympus",
        ),
    ];
    for (expr, want) in cases {
        let err = Schedule::parse(expr).expect_err(expr);
        assert!(err.contains(want), "{expr:?}: {err}");
    }
}

#[test]
fn go_durations_parse() {
    let cases = [
        ("5s", Some(5_000)),
        ("1h30m", Some(5_400_000)),
        ("1.5h", Some(5_400_000)),
        ("300ms", Some(300)),
        ("0", Some(0)),
        ("5", None),
        ("", None),
        ("1d", None),
    ];
    for (s, want) in cases {
        let got = parse_go_duration(s).ok().map(|d| d.as_millis() as i64);
        assert_eq!(got, want, "{s}");
    }
}
