//! DNS-1123 name validation and sanitising.
//!
//! Contract:
//! - [`is_dns1123_label`] / [`is_dns1123_subdomain`] match the Kubernetes validators.
//! - [`sanitize_label`] / [`sanitize_subdomain`] always return a valid name. A valid input is
//!   returned unchanged; otherwise the input is lower-cased, invalid characters become `-`,
//!   runs of `-` collapse, and `-` + [`short_hash`] of the *original* input is appended, the
//!   base being truncated so the result fits. Distinct inputs that sanitise alike therefore
//!   stay distinct, and the output is a pure function of the input.
//! - [`label_with_hash`] always appends the hash (the redroid ConfigMap volume rule).
//! - [`truncate_with_hash`] / [`with_hash_suffix`] are the building blocks.

use sha2::{Digest, Sha256};

/// Maximum length of a DNS-1123 label.
pub const LABEL_MAX: usize = 63;
/// Maximum length of a DNS-1123 subdomain.
pub const SUBDOMAIN_MAX: usize = 253;
/// Length of [`short_hash`].
pub const HASH_LEN: usize = 8;

/// The first 8 hex characters of the SHA-256 of `s`.
pub fn short_hash(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    digest[..HASH_LEN / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= LABEL_MAX && is_segment(s)
}

/// Labels joined by `.`, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= SUBDOMAIN_MAX && s.split('.').all(is_segment)
}

/// `base` if it fits in `max` bytes, else a prefix of it + `-` + [`short_hash`] of `base`.
pub fn truncate_with_hash(base: &str, max: usize) -> String {
    if base.len() <= max {
        base.to_owned()
    } else {
        with_hash_suffix(base, base, max)
    }
}

/// `base` + `-` + [`short_hash`] of `original`, cutting `base` so the result fits in `max`.
///
/// Trailing `-` and `.` left by the cut are trimmed; an empty base yields the hash alone, and
/// a `max` below [`HASH_LEN`] a prefix of the hash.
pub fn with_hash_suffix(base: &str, original: &str, max: usize) -> String {
    let hash = short_hash(original);
    let room = max.saturating_sub(HASH_LEN + 1);
    let cut = floor_char_boundary(base, room);
    let kept = base[..cut].trim_end_matches(['-', '.']);
    if kept.is_empty() {
        hash[..HASH_LEN.min(max)].to_owned()
    } else {
        format!("{kept}-{hash}")
    }
}

/// A valid DNS-1123 label derived from `s` (see the module docs).
pub fn sanitize_label(s: &str) -> String {
    if is_dns1123_label(s) {
        return s.to_owned();
    }
    with_hash_suffix(&clean_segment(s), s, LABEL_MAX)
}

/// A valid DNS-1123 subdomain derived from `s` (see the module docs); empty segments drop out.
pub fn sanitize_subdomain(s: &str) -> String {
    if is_dns1123_subdomain(s) {
        return s.to_owned();
    }
    let lowered = s.to_lowercase();
    let segments: Vec<String> = lowered
        .split('.')
        .map(clean_segment)
        .filter(|seg| !seg.is_empty())
        .collect();
    with_hash_suffix(&segments.join("."), s, SUBDOMAIN_MAX)
}

/// `prefix` + sanitised `name` + `-` + [`short_hash`] of `name`, at most 63 characters, the
/// middle cut to fit.
///
/// The redroid ConfigMap volume name is `label_with_hash("cm-", configmap_name)`: lower-cased,
/// `.` and `_` mapped to `-`, always suffixed by the hash of the original name, so `foo.bar`
/// and `foo-bar` get distinct volumes.
pub fn label_with_hash(prefix: &str, name: &str) -> String {
    with_hash_suffix(&clean_segment(&format!("{prefix}{name}")), name, LABEL_MAX)
}

fn is_segment(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

// Lower-case, map anything outside [a-z0-9] to '-', collapse runs of '-', trim '-' at the ends.
fn clean_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.to_lowercase().chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
            out.push(c);
        }
    }
    out.trim_end_matches('-').to_owned()
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    (0..=max.min(s.len()))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_hash_is_sha256_prefix() {
        // sha256("") = e3b0c442...
        assert_eq!(short_hash(""), "e3b0c442");
        assert_eq!(short_hash("abc"), "ba7816bf");
    }

    #[test]
    fn label_validator() {
        for ok in ["a", "0", "a-b", "abc123", &"a".repeat(63)] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "é", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }

    #[test]
    fn subdomain_validator() {
        for ok in ["a", "a.b", "a-b.c-d", "example.com", &"a".repeat(253)] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in ["", ".", "a.", ".a", "a..b", "a.-b", "A.b", &"a".repeat(254)] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn valid_label_is_unchanged() {
        assert_eq!(sanitize_label("web-0"), "web-0");
        let exact = "a".repeat(63);
        assert_eq!(sanitize_label(&exact), exact);
    }

    #[test]
    fn changed_label_gets_hash_of_original() {
        let got = sanitize_label("My_App.Name");
        assert_eq!(got, format!("my-app-name-{}", short_hash("My_App.Name")));
        assert_ne!(got, sanitize_label("my-app-name-x"));
        assert_ne!(sanitize_label("a.b"), sanitize_label("a_b"));
    }

    #[test]
    fn dashes_collapse_and_trim() {
        let got = sanitize_label("--a__b--");
        assert_eq!(got, format!("a-b-{}", short_hash("--a__b--")));
    }

    #[test]
    fn empty_and_all_invalid_inputs_become_the_hash() {
        assert_eq!(sanitize_label(""), short_hash(""));
        assert_eq!(sanitize_label("___"), short_hash("___"));
        assert!(is_dns1123_label(&sanitize_label("___")));
        assert_eq!(sanitize_subdomain("..."), short_hash("..."));
    }

    #[test]
    fn too_long_label_is_cut_to_63_with_hash() {
        let long = "a".repeat(64);
        let got = sanitize_label(&long);
        assert_eq!(got.len(), 63);
        assert_eq!(got, format!("{}-{}", "a".repeat(54), short_hash(&long)));
        assert!(is_dns1123_label(&got));
    }

    #[test]
    fn cut_never_leaves_a_trailing_dash() {
        // Position 54 (the cut) falls right after a '-'.
        let s = format!("{}-{}", "a".repeat(53), "b".repeat(20));
        let got = sanitize_label(&s);
        assert_eq!(got, format!("{}-{}", "a".repeat(53), short_hash(&s)));
        assert!(is_dns1123_label(&got));
    }

    #[test]
    fn unicode_is_mapped_and_hashed() {
        let got = sanitize_label("Ünïcödé-Näme");
        assert_eq!(got, format!("n-c-d-n-me-{}", short_hash("Ünïcödé-Näme")));
        assert!(is_dns1123_label(&got));
        assert!(is_dns1123_label(&sanitize_label("日本語")));
    }

    #[test]
    fn subdomain_keeps_dots_and_fixes_segments() {
        assert_eq!(sanitize_subdomain("api.example.com"), "api.example.com");
        let got = sanitize_subdomain("API..Ex_ample.-com-");
        assert_eq!(
            got,
            format!("api.ex-ample.com-{}", short_hash("API..Ex_ample.-com-"))
        );
        assert!(is_dns1123_subdomain(&got));
    }

    #[test]
    fn long_subdomain_fits_253() {
        let s = format!("{}.{}", "a".repeat(200), "b".repeat(100));
        let got = sanitize_subdomain(&s);
        assert_eq!(got.len(), 253);
        assert!(is_dns1123_subdomain(&got));
        assert!(got.ends_with(&short_hash(&s)));
    }

    #[test]
    fn truncate_with_hash_only_cuts_when_needed() {
        assert_eq!(truncate_with_hash("short", 10), "short");
        let got = truncate_with_hash("abcdefghijklmnop", 12);
        assert_eq!(got, format!("abc-{}", short_hash("abcdefghijklmnop")));
        assert_eq!(got.len(), 12);
        assert_eq!(
            truncate_with_hash("abcdefghij", 5),
            short_hash("abcdefghij")[..5]
        );
    }

    #[test]
    fn with_hash_suffix_cuts_unicode_on_char_boundary() {
        let got = with_hash_suffix("ééééé", "x", 13);
        assert_eq!(got, format!("éé-{}", short_hash("x")));
    }

    #[test]
    fn redroid_configmap_volume_rule() {
        let vol = |cm: &str| label_with_hash("cm-", cm);
        assert_eq!(
            vol("foo.bar"),
            format!("cm-foo-bar-{}", short_hash("foo.bar"))
        );
        assert_eq!(
            vol("Foo_Bar"),
            format!("cm-foo-bar-{}", short_hash("Foo_Bar"))
        );
        assert_ne!(vol("foo.bar"), vol("foo-bar"));
        // Always suffixed, even when the name is already a valid label.
        assert_eq!(vol("plain"), format!("cm-plain-{}", short_hash("plain")));
        let long = format!("{}.{}", "x".repeat(100), "y".repeat(100));
        let got = vol(&long);
        assert_eq!(got.len(), 63);
        assert!(got.starts_with("cm-xxx") && got.ends_with(&short_hash(&long)));
        assert!(is_dns1123_label(&got));
    }
}
