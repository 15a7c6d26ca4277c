//! A VCL regular expression, in the PCRE syntax Varnish takes: the regex
//! crate runs it (linear time, the fast path) unless it refuses the
//! pattern for a PCRE feature it lacks (look-around, back-references),
//! which fancy-regex then runs; `\Q...\E` quoting is turned into escaped
//! literals before either sees the pattern.

use std::borrow::Cow;

pub(super) enum Re {
    Fast(regex::Regex),
    Fancy(fancy_regex::Regex),
}

impl Re {
    /// Compile `pattern`; the error is the regex crate's (the message a
    /// pattern neither engine takes gets).
    pub(super) fn new(pattern: &str) -> Result<Re, regex::Error> {
        let pattern = unquote(pattern);
        match regex::Regex::new(&pattern) {
            Ok(re) => Ok(Re::Fast(re)),
            Err(e) => fancy_regex::Regex::new(&pattern).map(Re::Fancy).map_err(|_| e),
        }
    }

    /// Does `s` match? (A match fancy-regex gives up on, past its
    /// backtracking limit, is no match, as a PCRE match-limit error is.)
    pub(super) fn is_match(&self, s: &str) -> bool {
        match self {
            Re::Fast(re) => re.is_match(s),
            Re::Fancy(re) => re.is_match(s).unwrap_or(false),
        }
    }

    /// `s` with the first match (every match with `all`) replaced by
    /// `rep`, in the regex crate's replacement syntax (`${1}`); unchanged
    /// when fancy-regex gives up.
    pub(super) fn replace<'s>(&self, s: &'s str, rep: &str, all: bool) -> Cow<'s, str> {
        let limit = if all { 0 } else { 1 };
        match self {
            Re::Fast(re) => re.replacen(s, limit, rep),
            Re::Fancy(re) => re.try_replacen(s, limit, rep).unwrap_or(Cow::Borrowed(s)),
        }
    }
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
}
