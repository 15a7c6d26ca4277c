//! VCL tokens, with the byte offset of each so errors can point at them.
//! Identifiers follow VCC: a letter, then letters, digits, `_`, `-` and
//! `.` (so `req.http.X-Forwarded-For` is one token).

/// What a token is.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    Str(String),
    Int(i64),
    Real(f64),
    /// A number with a time unit, in seconds.
    Duration(f64),
    /// A number with a size unit, in bytes.
    Bytes(u64),
    /// A blob literal (`:base64:`, VCL 4.1), decoded.
    Blob(Vec<u8>),
    Punct(&'static str),
    Eof,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    /// Byte offset and length in the source.
    pub at: usize,
    pub len: usize,
}

/// A lexing error at a byte offset.
#[derive(Clone, Debug, PartialEq)]
pub struct LexError {
    pub at: usize,
    pub len: usize,
    pub msg: String,
}

const PUNCTS: [&str; 30] = [
    // "++" and "--" are tokens of their own (in no expression), as in VCC.
    "++", "--", "&&", "||", "==", "!=", "!~", "<=", ">=", "+=", "-=", "*=", "/=", "{", "}", "(", ")", ";", ",", "=", "~", "<", ">", "!",
    "+", "-", "*", "/", "%", ".",
];

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic()
}
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.'
}

/// The end of a unit word after white space following a number (VCC
/// reads `4 d` as `4d`), if one is there.
fn unit_after_space(b: &[u8], j: usize) -> Option<usize> {
    let start = j + b[j..].iter().take_while(|c| c.is_ascii_whitespace()).count();
    let end = start + b[start..].iter().take_while(|c| c.is_ascii_alphabetic()).count();
    if start == j || b.get(end).is_some_and(|c| is_ident(*c)) {
        return None;
    }
    let word = std::str::from_utf8(&b[start..end]).ok()?;
    UNITS.contains(&word).then_some(end)
}

const UNITS: [&str; 12] = ["ms", "s", "m", "h", "d", "w", "y", "B", "KB", "MB", "GB", "TB"];

/// A string starting at `i` ("...", {"..."} or """..."""): its text and
/// where it ends; none if no string starts there.
fn string_at(src: &str, i: usize) -> Result<Option<(String, usize)>, LexError> {
    let rest = &src[i..];
    let (open, close) = match () {
        _ if rest.starts_with("{\"") => ("{\"", "\"}"),
        _ if rest.starts_with("\"\"\"") => ("\"\"\"", "\"\"\""),
        _ if rest.starts_with('"') => ("\"", "\""),
        _ => return Ok(None),
    };
    let body = i + open.len();
    let Some(len) = src[body..].find(close) else {
        let msg = match open {
            "\"" => "Unterminated string",
            "{\"" => "Unterminated long string {\" ... \"}",
            _ => "Unterminated long string \"\"\" ... \"\"\"",
        };
        return Err(LexError { at: i, len: open.len(), msg: msg.into() });
    };
    if open == "\"" {
        if let Some(nl) = src[body..body + len].find('\n') {
            let msg = "Unterminated string (strings cannot span lines; use {\" ... \"})".into();
            return Err(LexError { at: i, len: nl + 1, msg });
        }
    }
    Ok(Some((src[body..body + len].to_string(), body + len + close.len())))
}

/// A blob literal at `i` (a `:`): its bytes and where it ends, checked as
/// VCC checks one (n*4 base64 characters, padding only at the end, then a
/// colon).
fn blob_at(b: &[u8], i: usize) -> Result<(Vec<u8>, usize), LexError> {
    let sextet = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let data = b[i + 1..].iter().take_while(|c| sextet(**c).is_some()).count();
    let pad = b[i + 1 + data..].iter().take_while(|c| **c == b'=').count();
    let end = i + 1 + data + pad;
    let fail = |msg: &str| Err(LexError { at: i, len: end + 1 - i, msg: msg.into() });
    // As VCC: '=' only to fill the last group of four, at most two.
    if pad > 0 && (data % 4 < 2 || data % 4 + pad > 4) {
        return fail("Wrong padding ('=') in BLOB");
    }
    match b.get(end) {
        None => return fail("Missing colon at end of BLOB"),
        Some(b':') if (data + pad) % 4 != 0 => return fail("BLOB must have n*4 base64 characters"),
        Some(b':') => {}
        Some(_) => return fail("Illegal BLOB character"),
    }
    let mut out = Vec::with_capacity(data * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for v in b[i + 1..i + 1 + data].iter().filter_map(|c| sextet(*c)) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok((out, end + 1))
}

/// Split `src` into tokens (ending with [`Tok::Eof`]).
pub fn lex(src: &str) -> Result<Vec<Token>, LexError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // Comments: #, //, /* */
        if c == b'#' || (c == b'/' && b.get(i + 1) == Some(&b'/')) {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let start = i;
            i += 2;
            loop {
                if i + 1 >= b.len() {
                    return Err(LexError { at: start, len: 2, msg: "Unterminated /* ... */ comment".into() });
                }
                if b[i] == b'*' && b[i + 1] == b'/' {
                    i += 2;
                    break;
                }
                if b[i] == b'/' && b[i + 1] == b'*' {
                    return Err(LexError { at: i, len: 2, msg: "/* ... */ comment contains /*".into() });
                }
                i += 1;
            }
            continue;
        }
        let start = i;
        if src[i..].starts_with("C{") {
            return Err(LexError { at: start, len: 2, msg: "Inline-C not allowed".into() });
        }
        if let Some((text, end)) = string_at(src, i)? {
            out.push(Token { tok: Tok::Str(text), at: start, len: end - start });
            i = end;
            continue;
        }
        if c == b':' {
            let (blob, end) = blob_at(b, i)?;
            out.push(Token { tok: Tok::Blob(blob), at: start, len: end - start });
            i = end;
            continue;
        }
        if c.is_ascii_digit() {
            let mut j = i;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                j += 1;
            }
            let num = &src[i..j];
            // RFC 8941's limits, as VCC lexes numbers (units aside): at
            // most 15 digits in an integer, 12 before and 3 after a point.
            let too_many = match num.split_once('.') {
                None => (num.len() > 15).then_some("Too many digits for integer."),
                Some((int, frac)) => (int.len() > 12 || frac.len() > 3).then_some("Too many digits for real."),
            };
            if let Some(msg) = too_many {
                return Err(LexError { at: start, len: j - start, msg: msg.to_string() });
            }
            let mut k = j;
            while k < b.len() && b[k].is_ascii_alphabetic() {
                k += 1;
            }
            if k == j {
                k = unit_after_space(b, j).unwrap_or(j);
            }
            // As VCC, the unit is a word of its own: "1 s" is "1s".
            let unit = src[j..k].trim_start();
            let bad = || LexError { at: start, len: k - start, msg: format!("Invalid number \"{}\"", &src[start..k]) };
            let value: f64 = num.parse().map_err(|_| bad())?;
            let tok = match unit {
                "" if num.contains('.') => Tok::Real(value),
                "" => Tok::Int(num.parse().map_err(|_| bad())?),
                "ms" => Tok::Duration(value / 1000.0),
                "s" => Tok::Duration(value),
                "m" => Tok::Duration(value * 60.0),
                "h" => Tok::Duration(value * 3600.0),
                "d" => Tok::Duration(value * 86400.0),
                "w" => Tok::Duration(value * 604800.0),
                "y" => Tok::Duration(value * 31536000.0),
                "B" => Tok::Bytes(value as u64),
                "KB" => Tok::Bytes((value * 1024.0) as u64),
                "MB" => Tok::Bytes((value * 1048576.0) as u64),
                "GB" => Tok::Bytes((value * 1073741824.0) as u64),
                "TB" => Tok::Bytes((value * 1099511627776.0) as u64),
                _ => {
                    return Err(LexError {
                        at: start,
                        len: k - start,
                        msg: format!("Unknown unit \"{unit}\" (durations: ms s m h d w y; sizes: B KB MB GB TB)"),
                    })
                }
            };
            out.push(Token { tok, at: start, len: k - start });
            i = k;
            continue;
        }
        if is_ident_start(c) {
            let mut j = i;
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            // A quoted header name (VCL 4.1): req.http."a.b", {"..."}.
            if src[i..j].ends_with(".http.") {
                if let Some((name, end)) = string_at(src, j)? {
                    out.push(Token { tok: Tok::Ident(format!("{}{name}", &src[i..j])), at: start, len: end - start });
                    i = end;
                    continue;
                }
            }
            // A trailing dot is not part of a name.
            while j > i + 1 && b[j - 1] == b'.' {
                j -= 1;
            }
            out.push(Token { tok: Tok::Ident(src[i..j].to_string()), at: start, len: j - i });
            i = j;
            continue;
        }
        match PUNCTS.iter().find(|p| src[i..].starts_with(**p)) {
            Some(p) => {
                out.push(Token { tok: Tok::Punct(p), at: start, len: p.len() });
                i += p.len();
            }
            None => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(LexError { at: start, len: ch.len_utf8(), msg: format!("Syntax error: unexpected character {ch:?}") });
            }
        }
    }
    out.push(Token { tok: Tok::Eof, at: b.len(), len: 0 });
    Ok(out)
}

const HEADER_OWNERS: [&str; 6] = ["req.http.", "bereq.http.", "beresp.http.", "resp.http.", "obj.http.", "req_top.http."];

/// The header name in `req.http.NAME` (and the other owners'), if `id`
/// names a header.
pub fn header_name(id: &str) -> Option<&str> {
    let owner = HEADER_OWNERS.iter().find(|o| id.len() > o.len() && id[..o.len()].eq_ignore_ascii_case(o))?;
    Some(&id[owner.len()..])
}

/// Header names, as VCC checks them: a quoted one only in VCL 4.1, fewer
/// than 127 characters, each an HTTP token character; an unquoted one
/// ends at a dot (quote a name that holds one).
pub fn check_header_names(src: &str, toks: &[Token], quoted_ok: bool) -> Result<(), LexError> {
    for (i, t) in toks.iter().enumerate() {
        let Tok::Ident(id) = &t.tok else { continue };
        // req.http.x.upper(): the method is not part of the name.
        let called = matches!(toks.get(i + 1).map(|t| &t.tok), Some(Tok::Punct("(")));
        let id = match id.rsplit_once('.') {
            Some((base, "upper" | "lower")) if called => base,
            _ => id.as_str(),
        };
        let Some(name) = header_name(id) else { continue };
        let owner = &id[..id.len() - name.len()];
        let quoted = src[t.at..t.at + t.len].contains('"');
        let fail = |msg: String| Err(LexError { at: t.at, len: t.len, msg });
        if quoted && !quoted_ok {
            return fail("Quoted headers are available for VCL >= 4.1.".into());
        }
        if name.len() >= 127 {
            let head: String = name.chars().take(20).collect();
            return fail(format!("HTTP header ({head}..) is too long."));
        }
        if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(*c))) {
            return fail(format!("Invalid character '{}' in header name.", c.escape_default()));
        }
        if !quoted && name.contains('.') {
            return fail(format!("A header name ends at a dot: write {owner}\"{name}\" for a name that holds one"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn tokens() {
        assert_eq!(
            toks("set req.http.X-Forwarded-For = \"a\" + {\"b\"c\"}; # comment\n"),
            vec![
                Tok::Ident("set".into()),
                Tok::Ident("req.http.X-Forwarded-For".into()),
                Tok::Punct("="),
                Tok::Str("a".into()),
                Tok::Punct("+"),
                Tok::Str("b\"c".into()),
                Tok::Punct(";"),
                Tok::Eof
            ]
        );
        assert_eq!(
            toks("10s 1.5m 7d 100 2.5 10KB"),
            vec![
                Tok::Duration(10.0),
                Tok::Duration(90.0),
                Tok::Duration(604800.0),
                Tok::Int(100),
                Tok::Real(2.5),
                Tok::Bytes(10240),
                Tok::Eof
            ]
        );
        assert_eq!(
            toks("1 s 2\tm 4 d;"),
            vec![Tok::Duration(1.0), Tok::Duration(120.0), Tok::Duration(345600.0), Tok::Punct(";"), Tok::Eof]
        );
        assert_eq!(toks("1 sx"), vec![Tok::Int(1), Tok::Ident("sx".into()), Tok::Eof]);
        assert_eq!(toks("a /* x */ // y\n b"), vec![Tok::Ident("a".into()), Tok::Ident("b".into()), Tok::Eof]);
        assert_eq!(toks("!~ <= && ||"), vec![Tok::Punct("!~"), Tok::Punct("<="), Tok::Punct("&&"), Tok::Punct("||"), Tok::Eof]);
    }

    #[test]
    fn errors() {
        assert!(lex("\"open").is_err());
        assert!(lex("\"a\nb\"").is_err());
        assert!(lex("/* never").is_err());
        let src = "req.http.\"a.b\" resp.http.{\"!!\"} req.http.x";
        let t = lex(src).unwrap();
        assert_eq!(t[0].tok, Tok::Ident("req.http.a.b".into()));
        assert_eq!(t[1].tok, Tok::Ident("resp.http.!!".into()));
        assert!(check_header_names(src, &t, true).is_ok());
        assert!(check_header_names(src, &t, false).unwrap_err().msg.contains(">= 4.1"));
        let bad = |s: &str| check_header_names(s, &lex(s).unwrap(), true).unwrap_err().msg;
        assert!(bad("req.http.{\"a\nb\"}").contains("Invalid character '\\n'"));
        assert!(bad("req.http.req.http.foo").contains("ends at a dot"));
        assert!(bad(&format!("resp.http.{}", "x".repeat(130))).contains("is too long"));
        assert_eq!(toks("\"\"\"{\"k\":\"v\"}\"\"\""), vec![Tok::Str("{\"k\":\"v\"}".into()), Tok::Eof]);
        assert!(lex("/* a /* b */").unwrap_err().msg.contains("comment contains /*"));
        assert!(lex("10parsecs").is_err());
        assert_eq!(lex("a @ b").unwrap_err().at, 2);
    }

    #[test]
    fn blobs() {
        assert_eq!(toks(":SGk=: ::"), vec![Tok::Blob(b"Hi".to_vec()), Tok::Blob(vec![]), Tok::Eof]);
        assert_eq!(toks(":AAECAw==:;"), vec![Tok::Blob(vec![0, 1, 2, 3]), Tok::Punct(";"), Tok::Eof]);
        let msg = |s: &str| lex(s).unwrap_err().msg;
        assert_eq!(msg(":SGk"), "Missing colon at end of BLOB");
        assert_eq!(msg(":SGk:"), "BLOB must have n*4 base64 characters");
        assert_eq!(msg(":S===:"), "Wrong padding ('=') in BLOB");
        assert_eq!(msg(":SGk= :"), "Illegal BLOB character");
    }
}
