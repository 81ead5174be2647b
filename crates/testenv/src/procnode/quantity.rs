//! Kubernetes resource quantities (`500m`, `64Mi`, `1e3`, `2`) as plain numbers, for the
//! downward API's `resourceFieldRef`.
//!
//! Contract: decimal SI suffixes (`n u m k M G T P E`), binary suffixes (`Ki … Ei`) and
//! exponents (`1e3`, `1E-3`) are understood; anything else is `None`. Pure.

/// The quantity's value (cores, bytes, …), or `None` when it does not parse.
pub fn parse(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let base: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(base * factor)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn quantities_parse() {
        let cases = [
            ("2", Some(2.0)),
            ("500m", Some(0.5)),
            ("1.5", Some(1.5)),
            ("64Mi", Some(64.0 * 1024.0 * 1024.0)),
            ("1Gi", Some(1024f64.powi(3))),
            ("3k", Some(3000.0)),
            ("1e3", Some(1000.0)),
            ("1E-3", Some(0.001)),
            ("12x", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input), want, "{input:?}");
        }
    }
}
