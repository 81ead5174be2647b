//! Keys and values as fdbcli reads and prints them, and the tuple encoding of the lock
//! record.
//!
//! - [`escape`] writes bytes as one fdbcli token: letters, digits and `/._-:@` as they are,
//!   every other byte as `\xNN`, so a token never holds a space, quote or `;`.
//! - [`unescape`] reads fdbcli's printable form back: `\\` is a backslash, `\xNN` a byte.
//! - [`parse_get`] and [`parse_getrange`] read the output of `get` (`` `k' is `v' ``,
//!   `` `k': not found``) and `getrange` (one `` `k' is `v' `` line per key).
//! - [`pack_lock`]/[`unpack_lock`] encode `(owner, start, end)` with FoundationDB's tuple
//!   layer (string code 0x02, integer codes 0x0c–0x1c).

/// Bytes as one fdbcli token.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"/._-:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A key given as text whose chars below U+0100 stand for bytes (the lock prefix's
/// `\u{ff}\u{2}` are the bytes 0xff 0x02).
pub fn key_bytes(text: &str) -> Vec<u8> {
    text.chars()
        .flat_map(|c| {
            if (c as u32) < 0x100 {
                vec![c as u32 as u8]
            } else {
                c.to_string().into_bytes()
            }
        })
        .collect()
}

/// fdbcli's printable form back to bytes.
pub fn unescape(printable: &str) -> Result<Vec<u8>, String> {
    let bytes = printable.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        match bytes.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let hex = printable
                    .get(i + 2..i + 4)
                    .ok_or_else(|| format!("truncated escape in {printable:?}"))?;
                out.push(
                    u8::from_str_radix(hex, 16)
                        .map_err(|_| format!("bad escape in {printable:?}"))?,
                );
                i += 4;
            }
            _ => return Err(format!("bad escape in {printable:?}")),
        }
    }
    Ok(out)
}

/// fdbcli's printable form of bytes.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            32..=126 => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

/// The value `get` printed for a key: `Some(value)`, or `None` for `not found`.
pub fn parse_get(output: &str) -> Result<Option<Vec<u8>>, String> {
    for line in output.lines().map(strip_prompt) {
        if line.starts_with('`') && line.ends_with("': not found") {
            return Ok(None);
        }
        if let Some((_, value)) = split_pair(line) {
            return unescape(value).map(Some);
        }
    }
    Err(format!("no get result in {output:?}"))
}

/// A key and its value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// The `(key, value)` pairs `getrange` printed.
pub fn parse_getrange(output: &str) -> Result<Vec<KeyValue>, String> {
    output
        .lines()
        .map(strip_prompt)
        .filter_map(split_pair)
        .map(|(k, v)| Ok((unescape(k)?, unescape(v)?)))
        .collect()
}

fn strip_prompt(line: &str) -> &str {
    line.trim_start_matches("fdb> ").trim_end()
}

// `` `k' is `v' ``: the key ends at the first `' is `` (a printable key never holds `'`
// followed by ` is ` unescaped, since spaces inside keys are printed as-is … but keys the
// operator uses have none).
fn split_pair(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('`')?;
    let (key, value) = rest.split_once("' is `")?;
    let value = value.strip_suffix('\'')?;
    Some((key, value))
}

const STRING_CODE: u8 = 0x02;
const INT_ZERO_CODE: u8 = 0x14;

/// Packs `(owner, start, end)` as a tuple.
pub fn pack_lock(owner: &str, start: i64, end: i64) -> Vec<u8> {
    let mut out = vec![STRING_CODE];
    for &b in owner.as_bytes() {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.push(0);
    pack_int(&mut out, start);
    pack_int(&mut out, end);
    out
}

fn pack_int(out: &mut Vec<u8>, n: i64) {
    if n == 0 {
        out.push(INT_ZERO_CODE);
        return;
    }
    let magnitude = n.unsigned_abs();
    let len = (8 - magnitude.leading_zeros() as usize / 8).max(1);
    let be = magnitude.to_be_bytes();
    if n > 0 {
        out.push(INT_ZERO_CODE + len as u8);
        out.extend_from_slice(&be[8 - len..]);
    } else {
        out.push(INT_ZERO_CODE - len as u8);
        out.extend(be[8 - len..].iter().map(|b| !b));
    }
}

/// Unpacks a lock record; `None` for anything but `(string, int, int, …)`.
pub fn unpack_lock(bytes: &[u8]) -> Option<(String, i64, i64)> {
    let (&code, mut rest) = bytes.split_first()?;
    if code != STRING_CODE {
        return None;
    }
    let mut owner = Vec::new();
    loop {
        let (&b, r) = rest.split_first()?;
        rest = r;
        if b == 0 {
            if rest.first() == Some(&0xff) {
                owner.push(0);
                rest = &rest[1..];
                continue;
            }
            break;
        }
        owner.push(b);
    }
    let (start, rest) = unpack_int(rest)?;
    let (end, _) = unpack_int(rest)?;
    Some((String::from_utf8(owner).ok()?, start, end))
}

fn unpack_int(bytes: &[u8]) -> Option<(i64, &[u8])> {
    let (&code, rest) = bytes.split_first()?;
    if !(0x0c..=0x1c).contains(&code) {
        return None;
    }
    if code == INT_ZERO_CODE {
        return Some((0, rest));
    }
    let len = (code as i32 - INT_ZERO_CODE as i32).unsigned_abs() as usize;
    if len > 8 || rest.len() < len {
        return None;
    }
    let mut buf = [0u8; 8];
    if code > INT_ZERO_CODE {
        buf[8 - len..].copy_from_slice(&rest[..len]);
        Some((u64::from_be_bytes(buf) as i64, &rest[len..]))
    } else {
        for (i, b) in rest[..len].iter().enumerate() {
            buf[8 - len + i] = !b;
        }
        Some((-(u64::from_be_bytes(buf) as i64), &rest[len..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_and_printable_round_trip() {
        let key = key_bytes("\u{ff}\u{2}/org.foundationdb.kubernetes-operator/global");
        assert_eq!(key[..2], [0xff, 0x02]);
        assert_eq!(
            escape(&key),
            "\\xff\\x02/org.foundationdb.kubernetes-operator/global"
        );
        let value = pack_lock("dc 1;x", 1_700_000_000, 1_700_000_600);
        let token = escape(&value);
        assert!(!token.contains([' ', ';', '"', '\'']));
        assert_eq!(unescape(&printable(&value)).unwrap(), value);
        assert_eq!(unescape(&token).unwrap(), value);
        assert_eq!(printable(b"a\\b\x01"), "a\\\\b\\x01");
        assert!(unescape("\\q").is_err());
    }

    #[test]
    fn tuples_match_the_tuple_layer() {
        // ("dc1", 0, 1): 02 'd' 'c' '1' 00 14 15 01
        assert_eq!(pack_lock("dc1", 0, 1), b"\x02dc1\x00\x14\x15\x01");
        // 1_700_000_000 = 0x6553F100 → 0x18 + 4 bytes
        assert_eq!(
            pack_lock("", 1_700_000_000, 0),
            b"\x02\x00\x18\x65\x53\xf1\x00\x14"
        );
        // -1 → 0x13 0xfe
        let mut v = Vec::new();
        pack_int(&mut v, -1);
        assert_eq!(v, b"\x13\xfe");
        for (owner, s, e) in [
            ("a\0b", -5, 70_000_000_000),
            ("", 0, i64::MAX),
            ("x", i64::MIN + 1, -256),
        ] {
            assert_eq!(
                unpack_lock(&pack_lock(owner, s, e)),
                Some((owner.to_owned(), s, e))
            );
        }
        assert_eq!(unpack_lock(b"\x01abc"), None);
        assert_eq!(
            unpack_lock(b"\x02abc\x00\x14"),
            None,
            "an end timestamp is required"
        );
    }

    #[test]
    fn get_and_getrange_output() {
        assert_eq!(parse_get("`\\xff\\x02/x': not found\n").unwrap(), None);
        assert_eq!(
            parse_get("fdb> `k' is `v\\x00'\n").unwrap(),
            Some(b"v\0".to_vec())
        );
        assert!(parse_get("ERROR: oops").is_err());
        let out = "\nRange limited to 10000 keys\n`\\xff\\x02/p/denyList/a' is `a'\n`\\xff\\x02/p/denyList/b' is `b'\n";
        let pairs = parse_getrange(out).unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[1].1, b"b");
        assert_eq!(&pairs[0].0[..2], [0xff, 0x02]);
    }
}
