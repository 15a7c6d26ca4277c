//! A VCL regular expression, with the meaning Varnish's PCRE2 gives it
//! (compiled without UTF: a subject is bytes, `.` one byte, `\w`, `\d`,
//! `\s` and `(?i)` ASCII). The regex crate runs it over bytes with
//! Unicode off (linear time, the fast path) unless it refuses the pattern
//! for a PCRE feature it lacks (look-around, back-references), which
//! fancy-regex then runs. PCRE's own escapes and class syntax are written
//! in the engines' terms first ([`translate`]): `\Q...\E` quoting, `\h`,
//! `\v`, `\R`, `\N`, `\cX`, `\e`, `\0`, and `&&`, `--`, `~~` or a bare `[`
//! inside a class, which are plain characters to PCRE. Substitution
//! follows Varnish's VRE_sub (see [`Re::replace`]).
//!
//! Measured by `scripts/regex-corpus.py` (patterns from real policies on
//! real-looking URLs and headers, varnishd beside cache-d). What is left
//! different: `$` (and `\Z`) before a final newline, which no URL or
//! header value has; Unicode properties and non-ASCII case in the
//! look-around patterns fancy-regex runs; PCRE's backtracking verbs and
//! branch reset `(?|...)`, refused here.

use std::borrow::Cow;

use crate::vcl::ast::Expr;
use crate::vcl::diag::VclError;

/// A regex argument: a string literal (or literals joined with `+`)
/// compiled now, as varnishd compiles it when the VCL loads.
pub(super) fn regex_arg(e: &Expr) -> Result<Re, VclError> {
    match literal(e) {
        Some(s) => Re::new(&s).map_err(|err| VclError { msg: format!("Regexp compilation error: {err}"), pos: e.pos() }),
        None => Err(VclError { msg: "Expected a regular expression literal (a string)".into(), pos: e.pos() }),
    }
}

/// A string literal, or string literals joined with `+` (Varnish 7.1
/// accepts `"^/static/" + "[a-z]+$"` where a regex is expected).
fn literal(e: &Expr) -> Option<String> {
    match e {
        Expr::Str(s, _) => Some(s.clone()),
        Expr::Binary { op: "+", left, right, .. } => Some(literal(left)? + &literal(right)?),
        _ => None,
    }
}

pub(super) enum Re {
    Fast(regex::bytes::Regex),
    Fancy(fancy_regex::Regex),
}

impl Re {
    /// Compile `pattern`; the error is the regex crate's (the message a
    /// pattern neither engine takes gets), or PCRE's for an escape it
    /// does not support either.
    pub(super) fn new(pattern: &str) -> Result<Re, String> {
        let pattern = translate(pattern)?;
        match regex::bytes::RegexBuilder::new(&pattern).unicode(false).build() {
            Ok(re) => Ok(Re::Fast(re)),
            Err(e) => fancy_regex::Regex::new(&pattern).map(Re::Fancy).map_err(|_| e.to_string()),
        }
    }

    /// Does `s` match? (A match fancy-regex gives up on, past its
    /// backtracking limit, is no match, as a PCRE match-limit error is.)
    pub(super) fn is_match(&self, s: &str) -> bool {
        match self {
            Re::Fast(re) => re.is_match(s.as_bytes()),
            Re::Fancy(re) => re.is_match(s).unwrap_or(false),
        }
    }

    /// `s` with the first match (every match with `all`) replaced by
    /// `rep` in VCL's syntax, as Varnish's VRE_sub: `\0`..`\9` are the
    /// groups (an unset one is empty), a backslash before anything else
    /// stands for that character; after the first match, the next is
    /// looked for from its end and may not be empty (PCRE2_NOTEMPTY).
    /// Unchanged without a match, or when fancy-regex gives up.
    pub(super) fn replace<'s>(&self, s: &'s str, rep: &str, all: bool) -> Cow<'s, str> {
        let mut out: Vec<u8> = Vec::new();
        let mut offset = 0;
        let mut first = true;
        let bytes = s.as_bytes();
        // Without a group reference the match alone will do (the regex
        // crate finds one much faster than it fills in groups).
        let refs = has_group_ref(rep.as_bytes());
        while let Some(groups) = self.captures_at(s, offset, !first, refs) {
            out.extend_from_slice(&bytes[offset..groups[0].0]);
            expand(&mut out, bytes, &groups, rep.as_bytes());
            offset = groups[0].1;
            first = false;
            if !all {
                break;
            }
        }
        if first {
            return Cow::Borrowed(s);
        }
        out.extend_from_slice(&bytes[offset..]);
        Cow::Owned(String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// The leftmost match at or after `at` (a non-empty one if
    /// `not_empty`), as the byte ranges of its groups (None: unset; with
    /// `refs` false, the whole match's only).
    fn captures_at(&self, s: &str, mut at: usize, not_empty: bool, refs: bool) -> Option<Vec<(usize, usize)>> {
        loop {
            if at > s.len() {
                return None;
            }
            let groups: Vec<Option<(usize, usize)>> = match self {
                Re::Fast(re) if !refs => {
                    let m = re.find_at(s.as_bytes(), at)?;
                    vec![Some((m.start(), m.end()))]
                }
                Re::Fast(re) => {
                    // A subject without a match (the usual case) is
                    // turned down by the fast search alone.
                    re.find_at(s.as_bytes(), at)?;
                    let c = re.captures_at(s.as_bytes(), at)?;
                    c.iter().map(|m| m.map(|m| (m.start(), m.end()))).collect()
                }
                Re::Fancy(re) => {
                    // fancy-regex works on characters: start at one.
                    while !s.is_char_boundary(at) {
                        at += 1;
                    }
                    let c = re.captures_from_pos(s, at).ok()??;
                    c.iter().map(|m| m.map(|m| (m.start(), m.end()))).collect()
                }
            };
            let (start, end) = groups[0]?;
            if not_empty && start == end {
                // PCRE would look for a longer match here first; the next
                // position is the approximation.
                at = start + 1;
                continue;
            }
            return Some(groups.into_iter().map(|g| g.unwrap_or((0, 0))).collect());
        }
    }
}

/// Does a replacement refer to a group (`\0`..`\9`)?
fn has_group_ref(rep: &[u8]) -> bool {
    let mut i = 0;
    while i + 1 < rep.len() {
        if rep[i] == b'\\' {
            if rep[i + 1].is_ascii_digit() {
                return true;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

/// Append `rep` to `out` with its group references filled in.
fn expand(out: &mut Vec<u8>, s: &[u8], groups: &[(usize, usize)], rep: &[u8]) {
    let mut i = 0;
    while i < rep.len() {
        let c = rep[i];
        if c != b'\\' || i + 1 == rep.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let n = rep[i + 1];
        if n.is_ascii_digit() {
            if let Some(&(a, b)) = groups.get(usize::from(n - b'0')) {
                out.extend_from_slice(&s[a..b]);
            }
        } else {
            out.push(n);
        }
        i += 2;
    }
}

/// The pattern in the engines' syntax, with PCRE's meaning (see the
/// module's documentation); Err for an escape PCRE2 itself refuses.
fn translate(pattern: &str) -> Result<Cow<'_, str>, String> {
    let special = pattern.contains('\\') || pattern.contains('[');
    if !special {
        return Ok(Cow::Borrowed(pattern));
    }
    let p = unquote(pattern);
    let mut out = String::with_capacity(p.len() + 16);
    let mut chars = p.chars().peekable();
    let mut class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(e) = chars.next() else {
                    out.push('\\');
                    break;
                };
                escape(e, &mut chars, class, &mut out)?;
            }
            '[' if !class => {
                class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    out.push(chars.next().unwrap_or('^'));
                }
                // A `]` first in a class is one of its characters.
                if chars.peek() == Some(&']') {
                    chars.next();
                    out.push_str("\\]");
                }
            }
            '[' if class => {
                // A POSIX class, or a plain `[`.
                let rest: String = chars.clone().take_while(|&c| c != ']').collect();
                if rest.starts_with(':') && rest.ends_with(':') && rest.len() > 2 {
                    out.push('[');
                    out.push_str(&rest);
                    out.push(']');
                    for _ in 0..=rest.chars().count() {
                        chars.next();
                    }
                } else {
                    out.push_str("\\[");
                }
            }
            ']' if class => {
                class = false;
                out.push(']');
            }
            '&' | '~' if class => {
                out.push('\\');
                out.push(c);
            }
            '-' if class && chars.peek() == Some(&'-') => out.push_str("\\-"),
            c => out.push(c),
        }
    }
    Ok(Cow::Owned(out))
}

/// One escape `\e` of a pattern, written for the engines.
fn escape(e: char, chars: &mut std::iter::Peekable<std::str::Chars<'_>>, class: bool, out: &mut String) -> Result<(), String> {
    const VSPACE: &str = r"\n\x0B\x0C\r\x85";
    match e {
        'h' if class => out.push_str(r"\t \xA0"),
        'h' => out.push_str(r"[\t \xA0]"),
        'H' => out.push_str(r"[^\t \xA0]"),
        'v' if class => out.push_str(VSPACE),
        'v' => out.push_str(&format!("[{VSPACE}]")),
        'V' => out.push_str(&format!("[^{VSPACE}]")),
        'R' => out.push_str(&format!(r"(?:\r\n|[{VSPACE}])")),
        'N' if chars.peek() == Some(&'{') => return Err(pcre_refuses()),
        'N' => out.push_str(r"[^\n]"),
        'Z' => out.push_str(r"\z"),
        'e' => out.push_str(r"\x1B"),
        'c' => {
            let x = chars.next().ok_or("\\c at the end of the pattern")?;
            out.push_str(&format!(r"\x{:02X}", (x.to_ascii_uppercase() as u32) ^ 0x40));
        }
        '0' => {
            let mut v = 0u32;
            for _ in 0..2 {
                match chars.peek().and_then(|d| d.to_digit(8)) {
                    Some(d) => {
                        v = v * 8 + d;
                        chars.next();
                    }
                    None => break,
                }
            }
            out.push_str(&format!(r"\x{v:02X}"));
        }
        'u' | 'U' | 'L' | 'l' | 'F' => return Err(pcre_refuses()),
        e => {
            out.push('\\');
            out.push(e);
        }
    }
    Ok(())
}

fn pcre_refuses() -> String {
    "PCRE2 does not support \\F, \\L, \\l, \\N{name}, \\U, or \\u".into()
}

/// The pattern with each `\Q...\E` (up to the end when `\E` is missing)
/// replaced by its text, escaped.
fn unquote(pattern: &str) -> Cow<'_, str> {
    if !pattern.contains("\\Q") {
        return Cow::Borrowed(pattern);
    }
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut rest = pattern;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.chars().next() {
            Some('Q') => {
                let quoted = &after[1..];
                let (lit, next) = match quoted.find("\\E") {
                    Some(e) => (&quoted[..e], &quoted[e + 2..]),
                    None => (quoted, ""),
                };
                out.push_str(&regex::escape(lit));
                rest = next;
            }
            // A stray \E is nothing, as in PCRE.
            Some('E') => rest = &after[1..],
            Some(c) => {
                out.push('\\');
                out.push(c);
                rest = &after[c.len_utf8()..];
            }
            None => {
                out.push('\\');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_is_literal() {
        assert_eq!(unquote(r"\Q\Q\E"), r"\\Q");
        assert_eq!(unquote(r"^\Q.*\E$"), r"^\.\*$");
        assert_eq!(unquote(r"a\\Qb"), r"a\\Qb", "an escaped backslash, then Q");
        assert_eq!(unquote(r"\Qa.b"), r"a\.b", "up to the end");
        let re = Re::new(r"\Q\Q\E").unwrap();
        assert_eq!(re.replace(r"\Q", "sane", false), "sane");
        assert_eq!(Re::new(r"\Q.\E").unwrap().replace("a.b", "-", true), "a-b");
    }

    #[test]
    fn look_around_falls_back_to_fancy_regex() {
        assert!(matches!(Re::new("^/a+$"), Ok(Re::Fast(_))));
        let re = Re::new(r"(?<=[&\?])(foo|bar)=[^&]+(?:&|$)").unwrap();
        assert!(matches!(re, Re::Fancy(_)));
        assert_eq!(re.replace("/?foo=0&bar=1&foobar=2", "", true), "/?foobar=2");
        assert!(re.is_match("/?foo=1") && !re.is_match("/foo=1"));
        assert!(Re::new("(unclosed").is_err());
    }

    #[test]
    fn bytes_and_ascii_classes_as_pcre_without_utf() {
        let r = |p: &str, s: &str, rep: &str, all: bool| Re::new(p).unwrap().replace(s, rep, all).into_owned();
        // `.` is one byte; `\w` ASCII.
        assert!(!Re::new(r"^/\w+$").unwrap().is_match("/café"));
        assert!(Re::new(r"^/.{5}$").unwrap().is_match("/café"));
        assert_eq!(r(r"[^\x00-\x7f]", "/café", "_", true), "/caf__");
        // PCRE's escapes and class syntax.
        assert_eq!(r(r"\h", "a b\tc", "_", true), "a_b_c");
        assert!(!Re::new(r"\h").unwrap().is_match("abcdef"));
        assert!(!Re::new(r"[a-z&&[^e]]").unwrap().is_match("/index.html"), "a class, then a literal ]");
        assert!(Re::new(r"[a-z&&[^e]]").unwrap().is_match("x]"));
        assert_eq!(r(r"[[:digit:]]+", "a12b", "#", false), "a#b");
        assert_eq!(r(r"\cA", "x\u{1}y", "_", false), "x_y");
        assert!(Re::new(r"\u0041").is_err());
    }

    #[test]
    fn substitution_as_varnish_does_it() {
        let r = |p: &str, s: &str, rep: &str, all: bool| Re::new(p).unwrap().replace(s, rep, all).into_owned();
        assert_eq!(r(r"^/([^/]+)/(.*)$", "/a/b/c", r"<\2|\1|\0>", false), "<b/c|a|/a/b/c>");
        assert_eq!(r(r"(a)|(b)", "b", r"[\1][\2][\3]", false), "[][b][]");
        assert_eq!(r("x", "axb", r"\\\n$1", false), r"a\n$1b");
        // After the first, no empty match (PCRE2_NOTEMPTY).
        assert_eq!(r("()", "/", "_", true), "_/");
        assert_eq!(r("(?=.*admin)", "/wp-admin/", "_", true), "_/wp-admin/");
        assert_eq!(r("a*", "baaac", "_", true), "_b_c");
        assert_eq!(r("b", "abc", "_", true), "a_c");
        assert_eq!(r("z", "abc", "_", true), "abc");
    }
}
