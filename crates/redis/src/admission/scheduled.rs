//! The RedisScheduledBackup validating webhook: the time zone must load, the schedule must
//! parse, and it must fire again, so a mistake is reported at apply time rather than as a
//! condition later (upstream's rules and messages, with our own parser's reasons).
//!
//! Contract: [`validate`] is pure apart from the clock it is given; every error is returned at
//! once.

use jiff::Timestamp;

use super::review::FieldError;
use crate::crd::RedisScheduledBackup;
use crate::schedule::{Schedule, load_zone};

/// The errors of `sb` at `now`.
pub fn validate(sb: &RedisScheduledBackup, now: Timestamp) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = &sb.spec;
    let zone = match load_zone(&spec.time_zone) {
        Ok(z) => Some(z),
        Err(e) => {
            errors.push(FieldError::invalid(
                "spec.timeZone",
                &spec.time_zone,
                format!("not a valid IANA time zone: {e}"),
            ));
            None
        }
    };
    match Schedule::parse(&spec.schedule) {
        Err(e) => errors.push(FieldError::invalid(
            "spec.schedule",
            &spec.schedule,
            format!("not a valid cron expression: {e}"),
        )),
        Ok(schedule) => {
            let zone = zone.unwrap_or(jiff::tz::TimeZone::UTC);
            if schedule.next_after(now, &zone).is_none() {
                errors.push(FieldError::invalid(
                    "spec.schedule",
                    &spec.schedule,
                    "cron expression has no upcoming occurrences",
                ));
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sb(schedule: &str, zone: &str) -> RedisScheduledBackup {
        serde_json::from_value(json!({
            "apiVersion": "redis.io/v1", "kind": "RedisScheduledBackup",
            "metadata": {"name": "nightly"},
            "spec": {"schedule": schedule, "timeZone": zone, "clusterName": "demo"},
        }))
        .expect("scheduled backup")
    }

    #[test]
    fn schedules_and_zones_are_checked() {
        let now: Timestamp = "2026-03-01T00:00:00Z".parse().expect("ts");
        let cases = [
            ("0 2 * * *", "UTC", vec![]),
            ("@every 6h", "Europe/Paris", vec![]),
            ("0 2 * * *", "", vec![]),
            (
                "0 2 * * *",
                "Mars/Olympus",
                vec![
                    r#"spec.timeZone: Invalid value: "Mars/Olympus": not a valid IANA time zone: unknown time zone Mars/Olympus"#,
                ],
            ),
            (
                "0 0 30 2 *",
                "UTC",
                vec![
                    r#"spec.schedule: Invalid value: "0 0 30 2 *": cron expression has no upcoming occurrences"#,
                ],
            ),
        ];
        for (schedule, zone, want) in cases {
            let got: Vec<String> = validate(&sb(schedule, zone), now)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got.len(), want.len(), "{schedule} {zone}: {got:?}");
            for (g, w) in got.iter().zip(&want) {
                assert!(g.starts_with(w), "{g} does not start with {w}");
            }
        }
        let errors = validate(&sb("0 0 * *", "Nowhere"), now);
        assert_eq!(errors.len(), 2, "both problems at once: {errors:?}");
        assert!(
            errors[1]
                .to_string()
                .contains("not a valid cron expression: expected exactly 5 fields, found 4")
        );
    }
}
