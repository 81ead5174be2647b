//! Durations in and out of the plugin.
//!
//! Contract: [`parse_duration`] accepts one or more `<digits><unit>` groups (units `d`, `h`,
//! `m`, `s`; e.g. `90s`, `30m`, `1h30m`, `2d`) with a positive total and rejects anything else
//! with a message saying what is wrong. [`human_age`] renders an elapsed time exactly like
//! kubectl's AGE column (`45s`, `3m20s`, `5h`, `2d3h`, `1y`).

use std::time::Duration;

use super::error::PluginError;

/// Parses a duration such as `90s`, `30m`, `2h`, `1h30m` or `1d`.
pub fn parse_duration(input: &str) -> Result<Duration, PluginError> {
    let invalid = |reason: &'static str| PluginError::InvalidDuration {
        input: input.to_string(),
        reason,
    };
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(invalid("it is empty"));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in trimmed.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = unit_seconds(c).ok_or_else(|| invalid("unknown unit (use d, h, m or s)"))?;
        if digits.is_empty() {
            return Err(invalid("a unit must follow a number"));
        }
        let value: u64 = digits
            .parse()
            .map_err(|_| invalid("the number is too large"))?;
        let part = value
            .checked_mul(unit)
            .ok_or_else(|| invalid("the duration is too large"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| invalid("the duration is too large"))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(invalid("the last number has no unit"));
    }
    if total == 0 {
        return Err(invalid("it must be longer than zero"));
    }
    Ok(Duration::from_secs(total))
}

fn unit_seconds(c: char) -> Option<u64> {
    match c {
        'd' => Some(86_400),
        'h' => Some(3_600),
        'm' => Some(60),
        's' => Some(1),
        _ => None,
    }
}

/// kubectl's `HumanDuration`: the age of an object created `elapsed` ago.
pub fn human_age(elapsed: jiff::SignedDuration) -> String {
    let secs = elapsed.as_secs();
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86_400);
    let y = d / 365;
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if m < 10 => pair(m, "m", secs % 60, "s"),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => pair(h, "h", m % 60, "m"),
        _ if h < 48 => format!("{h}h"),
        _ if h < 24 * 8 => pair(d, "d", h % 24, "h"),
        _ if h < 24 * 365 * 2 => format!("{d}d"),
        _ if h < 24 * 365 * 8 => pair(y, "y", d % 365, "d"),
        _ => format!("{y}y"),
    }
}

fn pair(major: i64, major_unit: &str, minor: i64, minor_unit: &str) -> String {
    if minor == 0 {
        format!("{major}{major_unit}")
    } else {
        format!("{major}{major_unit}{minor}{minor_unit}")
    }
}

/// The age of something created at `created`, relative to now; `<unknown>` when unset.
pub fn age_since(created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    match created {
        Some(t) => human_age(jiff::Timestamp::now().duration_since(t.0)),
        None => "<unknown>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_compound_durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(
            parse_duration("1d2h3m4s").unwrap(),
            Duration::from_secs(93_784)
        );
    }

    #[test]
    fn rejects_garbage_with_a_clear_message() {
        for (input, why) in [
            ("", "empty"),
            ("10", "no unit"),
            ("m", "must follow a number"),
            ("10x", "unknown unit"),
            ("1h 30m", "unknown unit"),
            ("-5m", "unknown unit"),
            ("0s", "longer than zero"),
            ("99999999999999999999s", "too large"),
        ] {
            let err = parse_duration(input).unwrap_err().to_string();
            assert!(err.contains(why), "{input:?}: {err}");
            assert!(err.contains("invalid duration"), "{input:?}: {err}");
        }
    }

    #[test]
    fn ages_render_like_kubectl() {
        let s = jiff::SignedDuration::from_secs;
        assert_eq!(human_age(s(-5)), "<invalid>");
        assert_eq!(human_age(s(0)), "0s");
        assert_eq!(human_age(s(119)), "119s");
        assert_eq!(human_age(s(200)), "3m20s");
        assert_eq!(human_age(s(300)), "5m");
        assert_eq!(human_age(s(3 * 3600 - 1)), "179m");
        assert_eq!(human_age(s(5 * 3600 + 120)), "5h2m");
        assert_eq!(human_age(s(30 * 3600)), "30h");
        assert_eq!(human_age(s(3 * 86_400 + 4 * 3600)), "3d4h");
        assert_eq!(human_age(s(100 * 86_400)), "100d");
        assert_eq!(human_age(s(3 * 365 * 86_400 + 86_400)), "3y1d");
        assert_eq!(human_age(s(10 * 365 * 86_400)), "10y");
    }
}
