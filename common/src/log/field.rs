//! What a query test reads from a record, by libvarnishapi's rules
//! (vsl_query.c, vnum.c): the value after a `prefix:`, the n-th
//! blank-separated (or double-quoted) field, and numbers parsed as Varnish
//! parses them, leniently.

/// A number of a numeric comparison: an integer when the query's operand
/// has no `.`, else a decimal; a record's value is read as the operand's
/// kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

/// Varnish's largest decimal (VRT_DECIMAL_MAX).
const DECIMAL_MAX: f64 = 999_999_999_999.999;

/// C's isspace.
trait Space {
    fn is_space(&self) -> bool;
}

impl Space for u8 {
    fn is_space(&self) -> bool {
        matches!(self, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
    }
}

/// The value after `prefix:` (the name compared case-insensitively, no
/// blank before the colon; blanks after it skipped), if the payload has it.
pub fn after_prefix<'a>(payload: &'a str, prefix: &str) -> Option<&'a str> {
    let name = payload.get(..prefix.len())?;
    if !name.eq_ignore_ascii_case(prefix) || payload.as_bytes().get(prefix.len()) != Some(&b':') {
        return None;
    }
    Some(payload[prefix.len() + 1..].trim_start_matches(|c: char| u8::try_from(c).is_ok_and(|c| c.is_space())))
}

/// The `n`-th field (1-based): fields are separated by blanks; a field
/// that starts with `"` runs to the next `"` (the quotes are not part of
/// it). None when there are fewer fields, or when a quoted field before
/// the one asked is not closed or is followed by something other than a
/// blank: such a record has no field `n`.
pub fn field(value: &str, n: usize) -> Option<&str> {
    let v = value.as_bytes();
    let (mut b, mut e, mut quoted) = (0, 0, false);
    let mut i = 0;
    while e < v.len() && i < n {
        if quoted {
            e += 1;
            if e >= v.len() {
                break;
            }
            if !v[e].is_space() {
                return None;
            }
        }
        b = e;
        while b < v.len() && v[b].is_space() {
            b += 1;
        }
        quoted = v.get(b) == Some(&b'"');
        if quoted {
            b += 1;
        }
        e = b;
        if quoted {
            while e < v.len() && v[e] != b'"' {
                e += 1;
            }
            if e >= v.len() {
                return None;
            }
        } else {
            while e < v.len() && !v[e].is_space() {
                e += 1;
            }
        }
        i += 1;
    }
    (b < v.len() && i == n).then(|| &value[b..e])
}

/// Varnish's SF_Parse_Number, not strict: blanks, a `-`, at most 15
/// digits, blanks, then optionally `.` and decimals of which three count;
/// what follows is left in the returned rest. None where Varnish fails (no
/// digits at all, too many digits).
fn sf_number(s: &str) -> Option<(f64, &str)> {
    let b = s.as_bytes();
    let blanks = |mut i: usize| {
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        i
    };
    let mut i = blanks(0);
    let sign = if b.get(i) == Some(&b'-') {
        i += 1;
        -1.0
    } else {
        1.0
    };
    let (mut int, start) = (0i64, i);
    while i < b.len() && b[i].is_ascii_digit() {
        if i - start == 15 {
            return None;
        }
        int = int * 10 + i64::from(b[i] - b'0');
        i += 1;
    }
    let no_digits = i == start;
    if !no_digits {
        i = blanks(i);
    }
    if b.get(i) != Some(&b'.') {
        return (!no_digits).then_some((int as f64 * sign, &s[i..]));
    }
    let mut v = int as f64;
    if v > DECIMAL_MAX || (no_digits && !b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
        return None;
    }
    i += 1;
    let mut scale = 1.0;
    for _ in 0..3 {
        scale *= 0.1;
        let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) else { break };
        v += scale * f64::from(d - b'0');
        i += 1;
    }
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    Some((v * sign, &s[blanks(i)..]))
}

/// A query's numeric operand, as vxp_parse.c reads it: with a `.` a
/// decimal (the whole text a number), else an integer as C's strtoll in
/// base 0 reads it (0x hex, leading-0 octal; trailing blanks allowed).
pub fn operand(text: &str) -> Result<Num, &'static str> {
    if text.contains('.') {
        return match sf_number(text) {
            Some((v, "")) => Ok(Num::Float(v)),
            _ => Err("Floating point parse error"),
        };
    }
    let t = text.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = match t.get(..2) {
        Some("0x" | "0X") if t[2..].starts_with(|c: char| c.is_ascii_hexdigit()) => (16, &t[2..]),
        _ if t.len() > 1 && t.starts_with('0') => (8, &t[1..]),
        _ => (10, t),
    };
    let end = digits.find(|c: char| !c.is_digit(radix)).unwrap_or(digits.len());
    if (end == 0 && radix != 8) || !digits[end..].trim().is_empty() {
        return Err("Integer parse error");
    }
    let v = i64::from_str_radix(&digits[..end], radix).unwrap_or(i64::MAX);
    Ok(Num::Int(if neg { v.wrapping_neg() } else { v }))
}

/// A record's value as a number of the operand's kind: a decimal within
/// Varnish's range, or an integer (a decimal truncated). Text after the
/// number is ignored, as Varnish does; a value without digits is none.
pub fn value(text: &str, like: Num) -> Option<Num> {
    if text.is_empty() {
        return None;
    }
    let (v, _) = sf_number(text)?;
    match like {
        Num::Int(_) => Some(Num::Int(v as i64)),
        Num::Float(_) if v.abs() > DECIMAL_MAX => None,
        Num::Float(_) => Some(Num::Float(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_split_on_blanks_and_quotes() {
        assert_eq!(field("  custom   log     \"ok\" ", 3), Some("ok"));
        assert_eq!(field(" \"valid\"  \"fields\"  ok ", 3), Some("ok"));
        assert_eq!(field(" \"valid\"  \"fields\"  ok ", 2), Some("fields"));
        // No blank after a closing quote, or no closing quote: no field 3.
        assert_eq!(field(" \"missing\"\"blank\"   ko ", 3), None);
        assert_eq!(field(" \"missing\"\"blank\"   ko ", 1), Some("missing"));
        assert_eq!(field("  missing  dquote  \"ko ", 3), None);
        assert_eq!(field("a b ", 3), None);
        assert_eq!(field("a \"\" c", 2), Some(""));
        assert_eq!(field("", 1), None);
    }

    #[test]
    fn prefixes() {
        assert_eq!(after_prefix("Host:  example.com", "host"), Some("example.com"));
        assert_eq!(after_prefix("Host : x", "host"), None);
        assert_eq!(after_prefix("Hostname: x", "host"), None);
        assert_eq!(after_prefix("Ho", "host"), None);
    }

    #[test]
    fn numbers_as_varnish_reads_them() {
        let int = Num::Int(0);
        let float = Num::Float(0.0);
        assert_eq!(value("123.456", int), Some(Num::Int(123)));
        assert_eq!(value("123.", int), Some(Num::Int(123)));
        assert_eq!(value(".456", int), Some(Num::Int(0)));
        assert_eq!(value("123abc", int), Some(Num::Int(123)));
        assert_eq!(value("e1", int), None);
        assert_eq!(value("", int), None);
        assert_eq!(value(" -7", int), Some(Num::Int(-7)));
        assert_eq!(value("1234567890123456", int), None);
        // Three decimals count.
        assert_eq!(value("0.004500", float), operand("0.004").ok());
        assert_eq!(operand("200"), Ok(Num::Int(200)));
        assert_eq!(operand("0x10"), Ok(Num::Int(16)));
        assert_eq!(operand("010"), Ok(Num::Int(8)));
        assert_eq!(operand("1e3"), Err("Integer parse error"));
        assert_eq!(operand("abc"), Err("Integer parse error"));
        assert_eq!(operand("1.5x"), Err("Floating point parse error"));
        assert_eq!(operand("-0.5"), Ok(Num::Float(-0.5)));
    }
}
