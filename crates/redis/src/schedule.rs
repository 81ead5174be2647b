//! RedisScheduledBackup schedules: the cron dialect upstream accepts (robfig/cron's
//! `ParseStandard`) and the next time it fires in an IANA time zone.
//!
//! Contract:
//! - [`Schedule::parse`] accepts 5 fields (minute hour day-of-month month day-of-week) with
//!   `*`, `?`, numbers, `a-b` ranges, `/step` and comma lists, month names `JAN`-`DEC` and
//!   weekday names `SUN`-`SAT` (any case, weekdays 0-6); the descriptors `@yearly`
//!   (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly` and
//!   `@every <duration>` (a positive Go duration such as `1h30m`); and an optional leading
//!   `CRON_TZ=<zone>` or `TZ=<zone>`, which overrides the spec's time zone. No seconds field.
//!   A bad expression is an error saying what is wrong.
//! - Day-of-month and day-of-week combine as in cron: when either is `*` (or `?`) both must
//!   match, else either may.
//! - [`Schedule::next_after`] is the first firing strictly after the given instant, read in
//!   the schedule's zone, searching at most 5 years ahead (`None` for schedules that never fire,
//!   such as `0 0 30 2 *`).

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};

/// A parsed schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    kind: Kind,
    zone: Option<TimeZone>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Cron(Fields),
    Every(SignedDuration),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Fields {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    dom_star: bool,
    dow_star: bool,
}

struct Bounds {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    name: "day-of-week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Schedule {
    /// Parses `expr` (see the module docs).
    pub fn parse(expr: &str) -> Result<Schedule, String> {
        let expr = expr.trim();
        let (zone, rest) = match expr
            .strip_prefix("CRON_TZ=")
            .or_else(|| expr.strip_prefix("TZ="))
        {
            Some(tail) => {
                let (name, rest) = tail
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| format!("no schedule after the time zone in {expr:?}"))?;
                let zone = load_zone(name)?;
                (Some(zone), rest.trim())
            }
            None => (None, expr),
        };
        let kind = if let Some(descriptor) = rest.strip_prefix('@') {
            parse_descriptor(descriptor)?
        } else {
            Kind::Cron(parse_fields(rest)?)
        };
        Ok(Schedule { kind, zone })
    }

    /// The first firing strictly after `after`, in the schedule's own zone if it names one,
    /// else in `zone`.
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let zone = self.zone.as_ref().unwrap_or(zone);
        match &self.kind {
            Kind::Every(d) => {
                // Like robfig: whole seconds after `after`'s second.
                let base = Timestamp::from_second(after.as_second()).ok()?;
                base.checked_add(*d).ok()
            }
            Kind::Cron(f) => f.next_after(after, zone),
        }
    }
}

/// Loads an IANA time zone (`""` is UTC), with a message naming the zone on failure.
pub fn load_zone(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() || name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|e| format!("unknown time zone {name}: {e}"))
}

fn parse_descriptor(d: &str) -> Result<Kind, String> {
    let fields = match d {
        "yearly" | "annually" => "0 0 1 1 *",
        "monthly" => "0 0 1 * *",
        "weekly" => "0 0 * * 0",
        "daily" | "midnight" => "0 0 * * *",
        "hourly" => "0 * * * *",
        other => {
            let Some(duration) = other.strip_prefix("every ") else {
                return Err(format!("unrecognized descriptor: @{other}"));
            };
            let d = parse_go_duration(duration.trim())
                .map_err(|e| format!("failed to parse duration @{other}: {e}"))?;
            if d <= SignedDuration::ZERO {
                return Err(format!("@every needs a positive duration, got {duration}"));
            }
            // robfig rounds sub-second intervals up to one second.
            return Ok(Kind::Every(d.max(SignedDuration::from_secs(1))));
        }
    };
    Ok(Kind::Cron(parse_fields(fields)?))
}

fn parse_fields(expr: &str) -> Result<Fields, String> {
    let parts: Vec<&str> = expr.split_whitespace().collect();
    if parts.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: {expr:?}",
            parts.len()
        ));
    }
    let (dom, dom_star) = parse_field(parts[2], &DOM)?;
    let (dow, dow_star) = parse_field(parts[4], &DOW)?;
    Ok(Fields {
        minute: parse_field(parts[0], &MINUTE)?.0,
        hour: parse_field(parts[1], &HOUR)?.0,
        dom,
        month: parse_field(parts[3], &MONTH)?.0,
        dow,
        dom_star,
        dow_star,
    })
}

// The bit set of a field and whether it was `*`/`?`.
fn parse_field(field: &str, b: &Bounds) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("invalid step {s:?} in {} field {field:?}", b.name))?;
                if step == 0 {
                    return Err(format!("step of 0 in {} field {field:?}", b.name));
                }
                (r, Some(step))
            }
            None => (part, None),
        };
        let (start, end) = if range == "*" || range == "?" {
            star = star || step.is_none();
            (b.min, b.max)
        } else if let Some((lo, hi)) = range.split_once('-') {
            (value_of(lo, b, field)?, value_of(hi, b, field)?)
        } else {
            let v = value_of(range, b, field)?;
            (v, if step.is_some() { b.max } else { v })
        };
        if start > end {
            return Err(format!(
                "beginning of range ({start}) beyond end of range ({end}) in {} field {field:?}",
                b.name
            ));
        }
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

fn value_of(s: &str, b: &Bounds, field: &str) -> Result<u32, String> {
    let lower = s.to_ascii_lowercase();
    let v = match b.names.iter().position(|n| *n == lower) {
        Some(i) => u32::try_from(i).unwrap_or(0) + b.min,
        None => s
            .parse()
            .map_err(|_| format!("invalid value {s:?} in {} field {field:?}", b.name))?,
    };
    if v < b.min || v > b.max {
        return Err(format!(
            "{v} is out of range {}-{} in {} field {field:?}",
            b.min, b.max, b.name
        ));
    }
    Ok(v)
}

impl Fields {
    fn day_matches(&self, d: Date) -> bool {
        let dom = self.dom & (1 << d.day()) != 0;
        let dow = self.dow & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let start = after.to_zoned(zone.clone()).datetime();
        let limit_year = start.year() + 5;
        let mut t = start
            .with()
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()?
            .checked_add(1.minute())
            .ok()?;
        while t.year() <= limit_year {
            if self.month & (1 << t.month()) == 0 {
                let first = t.date().first_of_month().checked_add(1.month()).ok()?;
                t = DateTime::from_parts(first, Time::midnight());
            } else if !self.day_matches(t.date()) {
                t = DateTime::from_parts(t.date().tomorrow().ok()?, Time::midnight());
            } else if self.hour & (1 << t.hour()) == 0 {
                t = t
                    .with()
                    .minute(0)
                    .build()
                    .ok()?
                    .checked_add(1.hour())
                    .ok()?;
            } else if self.minute & (1 << t.minute()) == 0 {
                t = t.checked_add(1.minute()).ok()?;
            } else {
                let ts = zone.to_ambiguous_zoned(t).compatible().ok()?.timestamp();
                if ts > after {
                    return Some(ts);
                }
                t = t.checked_add(1.minute()).ok()?;
            }
        }
        None
    }
}

/// Parses a Go duration (`300ms`, `1.5h`, `2h45m`; units ns, us, µs, ms, s, m, h).
pub fn parse_go_duration(s: &str) -> Result<SignedDuration, String> {
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(SignedDuration::ZERO);
    }
    if rest.is_empty() {
        return Err(format!("invalid duration {s:?}"));
    }
    let mut total_nanos: i128 = 0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        let (num, tail) = rest.split_at(num_end);
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let per: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        if int.is_empty() && frac.is_empty() {
            return Err(format!("invalid duration {s:?}"));
        }
        let int: i128 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| format!("invalid duration {s:?}"))?
        };
        let mut part = int.saturating_mul(per);
        let mut scale = per;
        for d in frac.bytes() {
            scale /= 10;
            part = part.saturating_add(i128::from(d - b'0') * scale);
        }
        total_nanos = total_nanos.saturating_add(part);
        rest = tail;
    }
    let nanos = i64::try_from(total_nanos).map_err(|_| format!("duration {s:?} too large"))?;
    let d = SignedDuration::from_nanos(nanos);
    Ok(if negative { -d } else { d })
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
