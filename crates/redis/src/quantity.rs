//! Kubernetes quantities (`128Mi`, `100m`, `1e3`, `0.5Gi`) as exact numbers, for the admission
//! rules that compare sizes (memory limits, PVC requests) and the defaults that cap requests at
//! limits.
//!
//! Contract: [`parse`] accepts exactly the strings Kubernetes' quantity pattern accepts (and
//! JSON numbers through [`from_json`]) and returns the value in nano-units, so `100m` and
//! `0.1` compare equal and nothing is rounded; values beyond about 10^29 saturate. [`value`]
//! rounds up to a whole unit like Go's `Quantity.Value()`.

use serde_json::Value;

const NANO: i128 = 1_000_000_000;

/// The value of `s` in nano-units, or `None` when it is not a quantity.
pub fn parse(s: &str) -> Option<i128> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || number.matches('.').count() > 1 {
        return None;
    }
    let mantissa = digits(int)?
        .checked_mul(10i128.checked_pow(u32::try_from(frac.len()).ok()?)?)?
        .checked_add(digits(frac)?)?;
    let frac_digits = i32::try_from(frac.len()).ok()?;
    let nanos = scale(mantissa, suffix, frac_digits)?;
    Some(if negative { -nanos } else { nanos })
}

/// A quantity given as a JSON string or number (int-or-string fields), in nano-units.
pub fn from_json(v: &Value) -> Option<i128> {
    match v {
        Value::String(s) => parse(s),
        Value::Number(n) => parse(&n.to_string()),
        _ => None,
    }
}

/// Whole units, rounded up (Go's `Quantity.Value()`).
pub fn value(nanos: i128) -> i128 {
    nanos.div_euclid(NANO) + i128::from(nanos.rem_euclid(NANO) != 0)
}

fn digits(s: &str) -> Option<i128> {
    if s.is_empty() {
        return Some(0);
    }
    s.bytes().try_fold(0i128, |acc, b| {
        if !b.is_ascii_digit() {
            return None;
        }
        Some(
            acc.saturating_mul(10)
                .saturating_add(i128::from(b - b'0'))
                .min(i128::MAX / 4),
        )
    })
}

// mantissa × 10^-frac_digits × suffix, in nano-units.
fn scale(mantissa: i128, suffix: &str, frac_digits: i32) -> Option<i128> {
    let binary = |p: u32| Some((1024i128.pow(p), 0));
    let (factor, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => binary(1)?,
        "Mi" => binary(2)?,
        "Gi" => binary(3)?,
        "Ti" => binary(4)?,
        "Pi" => binary(5)?,
        "Ei" => binary(6)?,
        e if e.starts_with(['e', 'E']) => {
            let exp = &e[1..];
            let (neg, digits_part) = match exp.as_bytes().first()? {
                b'+' => (false, &exp[1..]),
                b'-' => (true, &exp[1..]),
                _ => (false, exp),
            };
            if digits_part.is_empty() || !digits_part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let n: i32 = digits_part.parse().ok()?;
            (1, if neg { -n } else { n })
        }
        _ => return None,
    };
    let exp = exp10 + 9 - frac_digits;
    let base = mantissa.saturating_mul(factor);
    Some(if exp >= 0 {
        base.saturating_mul(
            10i128
                .checked_pow(u32::try_from(exp).ok()?)
                .unwrap_or(i128::MAX),
        )
    } else {
        // Round up what cannot be represented in nano-units (it only matters below 1n).
        let d = 10i128.checked_pow(u32::try_from(-exp).ok()?)?;
        base.div_euclid(d) + i128::from(base.rem_euclid(d) != 0)
    })
}

/// Formats `nanos` of a memory quantity the way it is most readable: whole `Mi`/`Gi` when it
/// divides evenly, else bytes.
pub fn format_bytes(nanos: i128) -> String {
    let bytes = value(nanos);
    for (unit, size) in [("Gi", 1i128 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes != 0 && bytes % size == 0 {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_exact_nano_units() {
        let cases: &[(&str, Option<i128>)] = &[
            ("1", Some(NANO)),
            ("0", Some(0)),
            ("100m", Some(NANO / 10)),
            ("0.1", Some(NANO / 10)),
            (".5", Some(NANO / 2)),
            ("5.", Some(5 * NANO)),
            ("1k", Some(1000 * NANO)),
            ("1Ki", Some(1024 * NANO)),
            ("128Mi", Some(128 * 1024 * 1024 * NANO)),
            ("1.5Gi", Some(3 * 512 * 1024 * 1024 * NANO)),
            ("1e3", Some(1000 * NANO)),
            ("1E-3", Some(NANO / 1000)),
            ("+2", Some(2 * NANO)),
            ("-2", Some(-2 * NANO)),
            ("1n", Some(1)),
            ("", None),
            (".", None),
            ("1.2.3", None),
            ("Mi", None),
            ("1mi", None),
            ("1 Gi", None),
            ("1e", None),
            ("banana", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse(s), *want, "{s:?}");
        }
    }

    #[test]
    fn values_round_up_like_go() {
        assert_eq!(value(parse("0.5").unwrap()), 1);
        assert_eq!(value(parse("1m").unwrap()), 1);
        assert_eq!(value(parse("2").unwrap()), 2);
        assert_eq!(value(parse("-0.5").unwrap()), 0);
        assert_eq!(value(parse("1Gi").unwrap()), 1 << 30);
    }

    #[test]
    fn json_numbers_are_quantities() {
        assert_eq!(from_json(&serde_json::json!(1024)), Some(1024 * NANO));
        assert_eq!(from_json(&serde_json::json!("1Ki")), Some(1024 * NANO));
        assert_eq!(from_json(&serde_json::json!(true)), None);
    }

    #[test]
    fn bytes_are_formatted_readably() {
        assert_eq!(format_bytes(parse("2Gi").unwrap()), "2Gi");
        assert_eq!(format_bytes(parse("128Mi").unwrap()), "128Mi");
        assert_eq!(format_bytes(parse("1000").unwrap()), "1000");
    }
}
