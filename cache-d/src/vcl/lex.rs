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

const PUNCTS: [&str; 27] = [
    "&&", "||", "==", "!=", "!~", "<=", ">=", "+=", "-=", "*=", "/=", "{", "}", "(", ")", ";", ",", "=", "~", "<", ">", "!", "+", "-", "*",
    "/", ".",
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
        // Long strings {" ... "}
        if c == b'{' && b.get(i + 1) == Some(&b'"') {
            let body = i + 2;
            match src[body..].find("\"}") {
                Some(end) => {
                    out.push(Token { tok: Tok::Str(src[body..body + end].to_string()), at: start, len: end + 4 });
                    i = body + end + 2;
                    continue;
                }
                None => return Err(LexError { at: start, len: 2, msg: "Unterminated long string {\" ... \"}".into() }),
            }
        }
        // Long strings """ ... """ (VCL 4.1)
        if src[i..].starts_with("\"\"\"") {
            let body = i + 3;
            match src[body..].find("\"\"\"") {
                Some(end) => {
                    out.push(Token { tok: Tok::Str(src[body..body + end].to_string()), at: start, len: end + 6 });
                    i = body + end + 3;
                    continue;
                }
                None => return Err(LexError { at: start, len: 3, msg: "Unterminated long string \"\"\" ... \"\"\"".into() }),
            }
        }
        if c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                if b[j] == b'\n' {
                    return Err(LexError {
                        at: start,
                        len: j - start,
                        msg: "Unterminated string (strings cannot span lines; use {\" ... \"})".into(),
                    });
                }
                j += 1;
            }
            if j >= b.len() {
                return Err(LexError { at: start, len: 1, msg: "Unterminated string".into() });
            }
            out.push(Token { tok: Tok::Str(src[i + 1..j].to_string()), at: start, len: j + 1 - start });
            i = j + 1;
            continue;
        }
        if c.is_ascii_digit() {
            let mut j = i;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                j += 1;
            }
            let num = &src[i..j];
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
        assert_eq!(toks("\"\"\"{\"k\":\"v\"}\"\"\""), vec![Tok::Str("{\"k\":\"v\"}".into()), Tok::Eof]);
        assert!(lex("/* a /* b */").unwrap_err().msg.contains("comment contains /*"));
        assert!(lex("10parsecs").is_err());
        assert_eq!(lex("a @ b").unwrap_err().at, 2);
    }
}
