//! `$(VAR)` expansion exactly as the kubelet does it (Kubernetes'
//! `third_party/forked/golang/expansion`), for env values, `command` and `args`.
//!
//! Contract:
//! - `$(NAME)` becomes the value of `NAME` when the lookup knows it; otherwise it stays
//!   `$(NAME)` verbatim.
//! - `$$` is an escaped `$`: `$$(NAME)` becomes the literal `$(NAME)`.
//! - A `$` followed by anything else (or an unclosed `$(`) is kept as written.
//! - Pure: no environment of this process is read.

/// Expands `input` with `lookup`, which answers `None` for unknown names.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            // How many bytes after the `$` were consumed.
            let advance = match read_after_dollar(&input[cursor + 1..]) {
                Read::Variable(name) => {
                    match lookup(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    name.len() + 2
                }
                Read::Escaped => {
                    out.push('$');
                    1
                }
                Read::Keep(len) => {
                    out.push_str(&input[cursor..cursor + 1 + len]);
                    len
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    out
}

/// What follows a `$`.
enum Read<'a> {
    /// `$(name)`.
    Variable(&'a str),
    /// `$$`: a literal `$`.
    Escaped,
    /// The `$` and the next `len` bytes are kept verbatim (`$x`, or an unclosed `$(` whose
    /// scan goes on after the `(`).
    Keep(usize),
}

fn read_after_dollar(rest: &str) -> Read<'_> {
    match rest.as_bytes()[0] {
        b'$' => Read::Escaped,
        b'(' => match rest[1..].find(')') {
            Some(i) => Read::Variable(&rest[1..i + 1]),
            None => Read::Keep(1),
        },
        // The character may be multi-byte.
        _ => Read::Keep(rest.chars().next().map(char::len_utf8).unwrap_or(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env() -> HashMap<&'static str, &'static str> {
        HashMap::from([
            ("VAR_A", "A"),
            ("VAR_B", "B"),
            ("VAR_C", "C"),
            ("VAR_REF", "$(VAR_A)"),
            ("VAR_EMPTY", ""),
            ("VAR_EMPTY2", ""),
        ])
    }

    fn run(input: &str) -> String {
        let env = env();
        expand(input, |k| env.get(k).map(|v| v.to_string()))
    }

    // The cases of Kubernetes' expansion tests (TestMapReference / TestMapping).
    #[test]
    fn expansion_matches_the_kubelet() {
        let cases = [
            ("whole string", "$(VAR_A)", "A"),
            ("repeat", "$(VAR_A)-$(VAR_A)", "A-A"),
            ("beginning", "$(VAR_A)-1", "A-1"),
            ("middle", "___$(VAR_B)___", "___B___"),
            ("end", "___$(VAR_C)", "___C"),
            ("compound", "$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
            ("escape & expand", "$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
            (
                "compound escape",
                "$$(VAR_A)_$$(VAR_B)",
                "$(VAR_A)_$(VAR_B)",
            ),
            ("mixed in escapes", "f000-$$VAR_A", "f000-$VAR_A"),
            ("backslash escape ignored", "foo\\$(VAR_C)bar", "foo\\Cbar"),
            (
                "backslash escape ignored 2",
                "foo\\\\$(VAR_C)bar",
                "foo\\\\Cbar",
            ),
            (
                "lots of backslashes",
                "foo\\\\\\\\$(VAR_A)bar",
                "foo\\\\\\\\Abar",
            ),
            (
                "nested var references",
                "$(VAR_A$(VAR_B))",
                "$(VAR_A$(VAR_B))",
            ),
            (
                "nested var references second type",
                "$(VAR_A$(VAR_B)",
                "$(VAR_A$(VAR_B)",
            ),
            ("value is a reference", "$(VAR_REF)", "$(VAR_A)"),
            (
                "value is a reference x 2",
                "%%$(VAR_REF)--$(VAR_REF)%%",
                "%%$(VAR_A)--$(VAR_A)%%",
            ),
            ("empty var", "foo$(VAR_EMPTY)bar", "foobar"),
            (
                "unterminated expression",
                "foo$(VAR_Awhoops!",
                "foo$(VAR_Awhoops!",
            ),
            (
                "expression without operator",
                "f00__(VAR_A)__",
                "f00__(VAR_A)__",
            ),
            ("shell special vars pass through", "$?_boo_$!", "$?_boo_$!"),
            ("bare operators are ignored", "$VAR_A", "$VAR_A"),
            (
                "undefined vars are passed through",
                "$(VAR_DNE)",
                "$(VAR_DNE)",
            ),
            (
                "multiple (even) operators, var undefined",
                "$$$$$$(BIG_MONEY)",
                "$$$(BIG_MONEY)",
            ),
            (
                "multiple (even) operators, var defined",
                "$$$$$$(VAR_A)",
                "$$$(VAR_A)",
            ),
            (
                "multiple (odd) operators, var undefined",
                "$$$$$$$(GOOD_ODDS)",
                "$$$$(GOOD_ODDS)",
            ),
            (
                "multiple (odd) operators, var defined",
                "$$$$$$$(VAR_A)",
                "$$$A",
            ),
            ("missing open expression", "$VAR_A)", "$VAR_A)"),
            ("shell syntax ignored", "${VAR_A}", "${VAR_A}"),
            (
                "trailing incomplete expression not consumed",
                "$(VAR_B)_______$(A",
                "B_______$(A",
            ),
            (
                "trailing incomplete expression, no content, is not consumed",
                "$(VAR_C)_______$(",
                "C_______$(",
            ),
            (
                "operator at end of input string is preserved",
                "$(VAR_A)foobarzab$",
                "Afoobarzab$",
            ),
            (
                "shell escaped incomplete expr",
                "foo-\\$(VAR_A",
                "foo-\\$(VAR_A",
            ),
            ("lots of $( in middle", "--$($($($($--", "--$($($($($--"),
            (
                "lots of $( in beginning",
                "$($($($($--foo$(",
                "$($($($($--foo$(",
            ),
            ("lots of $( at end", "foo0--$($($($(", "foo0--$($($($("),
            (
                "escaped operators in variable names are not escaped",
                "$(foo$$var)",
                "$(foo$$var)",
            ),
            ("newline not expanded", "\n", "\n"),
            ("utf-8 after operator", "a$é", "a$é"),
        ];
        for (name, input, want) in cases {
            assert_eq!(run(input), want, "{name}: {input:?}");
        }
    }
}
