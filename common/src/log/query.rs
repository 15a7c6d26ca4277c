//! The log query language (`-q`), Varnish's grammar (vsl-query(7)):
//!
//! ```text
//! query    := or
//! or       := and ('or' and)*
//! and      := not ('and' not)*
//! not      := 'not' not | '(' query ')' | test
//! test     := selector [op operand]
//! selector := ['{' level ['+'|'-'] '}'] taglist [':' header] ['[' field ']']
//! taglist  := tag (',' tag)*            tag: a name, or a prefix ending in '*'
//! op       := == != < <= > >=  (numbers)   eq ne  (strings)   ~ !~  (regex)
//! operand  := integer | float | "string" | 'string' | word
//! ```
//!
//! A test holds for a group when some transaction in it (at the selected
//! level) has a record with one of the tags whose payload — after the
//! `header:` name when given, then the field when given (blank-separated
//! or double-quoted, see `field`) — satisfies the comparison (or merely
//! exists, without one). Several queries on lines of their own (`#`
//! comments) are OR-ed. Errors carry the position in the query.

use std::fmt;

use regex::Regex;

use crate::log::field::{self, Num};
use crate::log::group::{Group, OwnedRecord};
use crate::log::vsl::Tag;

/// A query that failed to parse: what and where (a byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    pub msg: String,
    pub at: usize,
    pub query: String,
}

impl fmt::Display for QueryError {
    /// Varnish's layout: the message, the query, a caret under the place.
    /// With several lines, the line at fault.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at.min(self.query.len());
        let start = self.query[..at].rfind('\n').map_or(0, |i| i + 1);
        let end = self.query[at..].find('\n').map_or(self.query.len(), |i| at + i);
        let col = self.query[start..at].chars().count();
        let line = &self.query[start..end];
        write!(f, "Query expression error:\n{} (at position {})\n{line}\n{}^", self.msg, self.at + 1, " ".repeat(col))
    }
}

impl std::error::Error for QueryError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LevelOp {
    Eq,
    AtLeast,
    AtMost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    NumEq,
    NumNe,
    Lt,
    Le,
    Gt,
    Ge,
    StrEq,
    StrNe,
    Match,
    NoMatch,
}

#[derive(Debug)]
enum Operand {
    Num(Num),
    Str(String),
    Regex(Regex),
}

#[derive(Debug)]
struct Test {
    /// `vxid OP N`: the transaction's own id, not a record (tags empty).
    vxid: bool,
    level: Option<(usize, LevelOp)>,
    tags: Vec<Tag>,
    header: Option<String>,
    field: Option<usize>,
    cmp: Option<(Op, Operand)>,
}

#[derive(Debug)]
enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Test(Test),
}

/// A parsed query.
#[derive(Debug)]
pub struct Query {
    expr: Expr,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Punct(&'static str),
    End,
}

struct Lexer<'a> {
    s: &'a str,
    i: usize,
}

const PUNCT: [&str; 17] = ["==", "!=", "<=", ">=", "!~", "<", ">", "~", "(", ")", "{", "}", "[", "]", ":", ",", "+"];

impl Lexer<'_> {
    fn err(&self, msg: impl Into<String>, at: usize) -> QueryError {
        QueryError { msg: msg.into(), at, query: self.s.to_string() }
    }

    /// The next token and where it starts.
    fn next(&mut self) -> Result<(Tok, usize), QueryError> {
        let b = self.s.as_bytes();
        // Blanks, `#` comments (to the end of the line) and a backslash
        // before a newline are skipped; a newline ends one query of a list.
        loop {
            match b.get(self.i) {
                Some(b'\n') | None => break,
                Some(c) if c.is_ascii_whitespace() => self.i += 1,
                Some(b'#') => {
                    while self.i < b.len() && b[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                Some(b'\\') if b.get(self.i + 1) == Some(&b'\n') => self.i += 2,
                Some(_) => break,
            }
        }
        let start = self.i;
        if self.i >= b.len() {
            return Ok((Tok::End, start));
        }
        let c = b[self.i];
        if c == b'\n' {
            self.i += 1;
            return Ok((Tok::Punct("\n"), start));
        }
        if c == b'"' || c == b'\'' {
            let mut out = String::new();
            let mut j = self.i + 1;
            while j < b.len() && b[j] != c && b[j] != b'\n' {
                if b[j] == b'\\' && j + 1 < b.len() && b[j + 1] != b'\n' {
                    j += 1;
                }
                let ch = self.s[j..].chars().next().unwrap_or('\u{fffd}');
                out.push(ch);
                j += ch.len_utf8();
            }
            if j >= b.len() || b[j] != c {
                return Err(self.err("Unterminated string", start));
            }
            self.i = j + 1;
            return Ok((Tok::Str(out), start));
        }
        for p in PUNCT {
            if self.s[self.i..].starts_with(p) {
                self.i += p.len();
                return Ok((Tok::Punct(p), start));
            }
        }
        if c == b'-' && !b.get(self.i + 1).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
            return Ok((Tok::Punct("-"), start));
        }
        let mut j = self.i;
        while j < b.len() && !b[j].is_ascii_whitespace() && !b"()[]{}:,<>=!~\"'#".contains(&b[j]) {
            if b[j] == b'+' && j > self.i && !b[j - 1].eq_ignore_ascii_case(&b'e') {
                break;
            }
            j += 1;
        }
        if j == self.i {
            return Err(self.err(format!("Unexpected character '{}'", c as char), start));
        }
        self.i = j;
        Ok((Tok::Word(self.s[start..j].to_string()), start))
    }
}

struct Parser<'a> {
    lex: Lexer<'a>,
    tok: Tok,
    at: usize,
}

impl Parser<'_> {
    fn bump(&mut self) -> Result<(), QueryError> {
        let (t, at) = self.lex.next()?;
        self.tok = t;
        self.at = at;
        Ok(())
    }
    fn err<T>(&self, msg: impl Into<String>) -> Result<T, QueryError> {
        Err(self.lex.err(msg, self.at))
    }
    fn is_word(&self, w: &str) -> bool {
        matches!(&self.tok, Tok::Word(x) if x == w)
    }
    fn is(&self, p: &str) -> bool {
        matches!(&self.tok, Tok::Punct(x) if *x == p)
    }
    fn expect(&mut self, p: &str) -> Result<(), QueryError> {
        if self.is(p) {
            self.bump()
        } else {
            self.err(format!("Expected '{p}'"))
        }
    }

    fn or(&mut self) -> Result<Expr, QueryError> {
        let mut e = self.and()?;
        while self.is_word("or") {
            self.bump()?;
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }
    fn and(&mut self) -> Result<Expr, QueryError> {
        let mut e = self.not()?;
        while self.is_word("and") {
            self.bump()?;
            e = Expr::And(Box::new(e), Box::new(self.not()?));
        }
        Ok(e)
    }
    fn not(&mut self) -> Result<Expr, QueryError> {
        if self.is_word("not") {
            self.bump()?;
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        if self.is("(") {
            self.bump()?;
            let e = self.or()?;
            self.expect(")")?;
            return Ok(e);
        }
        self.test().map(Expr::Test)
    }

    fn field(&mut self, what: &str) -> Result<usize, QueryError> {
        match &self.tok {
            Tok::Word(w) => match w.parse::<usize>() {
                Ok(n) => {
                    self.bump()?;
                    Ok(n)
                }
                Err(_) => self.err(format!("Expected {what}")),
            },
            _ => self.err(format!("Expected {what}")),
        }
    }

    /// A test's `{N}`, `{N+}` or `{N-}` level, if it has one.
    fn level(&mut self) -> Result<Option<(usize, LevelOp)>, QueryError> {
        if !self.is("{") {
            return Ok(None);
        }
        self.bump()?;
        // "{1-}" lexes as one word (a '-' can sit inside words).
        let (n, mut op) = match self.tok.clone() {
            Tok::Word(w) => match w.strip_suffix('-') {
                Some(d) => (d.parse::<usize>().ok(), LevelOp::AtMost),
                None => (w.parse::<usize>().ok(), LevelOp::Eq),
            },
            _ => (None, LevelOp::Eq),
        };
        let Some(n) = n else { return self.err("Expected a level") };
        self.bump()?;
        if op == LevelOp::Eq && self.is("+") {
            self.bump()?;
            op = LevelOp::AtLeast;
        } else if op == LevelOp::Eq && self.is("-") {
            self.bump()?;
            op = LevelOp::AtMost;
        }
        self.expect("}")?;
        Ok(Some((n, op)))
    }

    fn test(&mut self) -> Result<Test, QueryError> {
        let level = self.level()?;
        if matches!(&self.tok, Tok::Word(w) if w.eq_ignore_ascii_case("vxid")) {
            return self.vxid_test(level.is_some());
        }
        let mut tags = Vec::new();
        loop {
            let Tok::Word(name) = self.tok.clone() else { return self.err("Expected a tag name") };
            if name.eq_ignore_ascii_case("vxid") {
                return self.err("Unexpected taglist selection for vxid");
            }
            let found: Vec<Tag> = match name.strip_suffix('*') {
                Some(p) => {
                    Tag::ALL.iter().copied().filter(|t| t.name().to_ascii_lowercase().starts_with(&p.to_ascii_lowercase())).collect()
                }
                None => Tag::from_name(&name).into_iter().collect(),
            };
            if found.is_empty() {
                return self.err(format!("Tag name matches zero tags: '{name}'"));
            }
            tags.extend(found);
            self.bump()?;
            if !self.is(",") {
                break;
            }
            self.bump()?;
        }
        let mut header = None;
        if self.is(":") {
            self.bump()?;
            match self.tok.clone() {
                Tok::Word(h) => {
                    header = Some(h);
                    self.bump()?;
                }
                _ => return self.err("Expected a header name after ':'"),
            }
        }
        let mut field = None;
        if self.is("[") {
            self.bump()?;
            let n = self.field("a field number")?;
            if n == 0 {
                return self.err("Field numbers start at 1");
            }
            self.expect("]")?;
            field = Some(n);
        }
        let op = num_op(&self.tok).or(match &self.tok {
            Tok::Punct("~") => Some(Op::Match),
            Tok::Punct("!~") => Some(Op::NoMatch),
            Tok::Word(w) if w == "eq" => Some(Op::StrEq),
            Tok::Word(w) if w == "ne" => Some(Op::StrNe),
            _ => None,
        });
        let Some(op) = op else { return Ok(Test { vxid: false, level, tags, header, field, cmp: None }) };
        self.bump()?;
        let at = self.at;
        let text = match &self.tok {
            Tok::Word(w) if !matches!(w.as_str(), "and" | "or" | "not") => w.clone(),
            Tok::Str(s) => s.clone(),
            _ => return self.err("Expected an operand"),
        };
        self.bump()?;
        let operand = match op {
            Op::Match | Op::NoMatch => {
                Operand::Regex(Regex::new(&text).map_err(|e| self.lex.err(format!("Regular expression error: {e}"), at))?)
            }
            Op::StrEq | Op::StrNe => Operand::Str(text),
            // A quoted number is a number too, as for varnishlog.
            _ => Operand::Num(field::operand(&text).map_err(|e| self.lex.err(format!("{e} '{text}'"), at))?),
        };
        Ok(Test { vxid: false, level, tags, header, field, cmp: Some((op, operand)) })
    }

    /// `vxid OP N` as varnishlog takes it: an integer comparison, and no
    /// level, field or tag list with it.
    fn vxid_test(&mut self, leveled: bool) -> Result<Test, QueryError> {
        if leveled {
            return self.err("Unexpected taglist selection for vxid");
        }
        self.bump()?;
        if self.is("[") || self.is(",") || self.is(":") {
            return self.err("Unexpected taglist selection for vxid");
        }
        let op = match (num_op(&self.tok), &self.tok) {
            (Some(op), _) => op,
            (None, Tok::Punct(p)) => return self.err(format!("Expected vxid operator got '{p}'")),
            (None, Tok::Word(w)) => return self.err(format!("Expected vxid operator got '{w}'")),
            (None, _) => return self.err("Expected vxid operator"),
        };
        self.bump()?;
        let n = match &self.tok {
            Tok::Word(w) => match w.parse::<u32>() {
                Ok(n) => n,
                Err(_) => return self.err(format!("Expected integer got '{w}'")),
            },
            _ => return self.err("Expected integer"),
        };
        self.bump()?;
        Ok(Test {
            vxid: true,
            level: None,
            tags: Vec::new(),
            header: None,
            field: None,
            cmp: Some((op, Operand::Num(Num::Int(i64::from(n))))),
        })
    }
}

impl Query {
    /// One query, or several on lines of their own (blank lines and `#`
    /// comments aside): a group matches when one of them does.
    pub fn parse(s: &str) -> Result<Query, QueryError> {
        let mut p = Parser { lex: Lexer { s, i: 0 }, tok: Tok::End, at: 0 };
        p.bump()?;
        let mut expr: Option<Expr> = None;
        loop {
            while p.is("\n") {
                p.bump()?;
            }
            if p.tok == Tok::End {
                break;
            }
            let e = p.or()?;
            if p.tok != Tok::End && !p.is("\n") {
                return p.err("Expected 'and', 'or' or the end of the query");
            }
            expr = Some(match expr {
                Some(prev) => Expr::Or(Box::new(prev), Box::new(e)),
                None => e,
            });
        }
        match expr {
            Some(expr) => Ok(Query { expr }),
            None => p.err("Empty query"),
        }
    }

    /// The query of the -q and -Q options (varnishlog's): each -q
    /// argument and each -Q file's text is a list of queries, all OR-ed.
    /// None when there is none.
    pub fn from_options(queries: &[String], files: &[std::path::PathBuf]) -> Result<Option<Query>, String> {
        let mut all = queries.to_vec();
        for f in files {
            all.push(std::fs::read_to_string(f).map_err(|e| format!("-Q {}: {e}", f.display()))?);
        }
        if all.is_empty() {
            return Ok(None);
        }
        Query::parse(&all.join("\n")).map(Some).map_err(|e| e.to_string())
    }

    /// Does the group match?
    pub fn matches(&self, g: &Group) -> bool {
        eval(&self.expr, g)
    }
}

fn eval(e: &Expr, g: &Group) -> bool {
    match e {
        Expr::Or(a, b) => eval(a, g) || eval(b, g),
        Expr::And(a, b) => eval(a, g) && eval(b, g),
        Expr::Not(a) => !eval(a, g),
        Expr::Test(t) if t.vxid => g.txs.iter().any(|(_, tx)| compare(t, Some(Num::Int(i64::from(tx.vxid))))),
        Expr::Test(t) => g.txs.iter().any(|(level, tx)| {
            let lvl_ok = match t.level {
                None => true,
                Some((n, LevelOp::Eq)) => *level == n,
                Some((n, LevelOp::AtLeast)) => *level >= n,
                Some((n, LevelOp::AtMost)) => *level <= n,
            };
            lvl_ok && tx.records.iter().any(|r| test_record(t, r))
        }),
    }
}

/// A numeric comparison operator.
fn num_op(t: &Tok) -> Option<Op> {
    Some(match t {
        Tok::Punct("==") => Op::NumEq,
        Tok::Punct("!=") => Op::NumNe,
        Tok::Punct("<") => Op::Lt,
        Tok::Punct("<=") => Op::Le,
        Tok::Punct(">") => Op::Gt,
        Tok::Punct(">=") => Op::Ge,
        _ => return None,
    })
}

/// A record's number (of the operand's kind) against a test's numeric
/// comparison; no number never compares.
fn compare(t: &Test, v: Option<Num>) -> bool {
    fn by<T: PartialOrd>(op: Op, a: T, b: T) -> bool {
        match op {
            Op::NumEq => a == b,
            Op::NumNe => a != b,
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
            _ => false,
        }
    }
    match (&t.cmp, v) {
        (Some((op, Operand::Num(Num::Int(want)))), Some(Num::Int(v))) => by(*op, v, *want),
        (Some((op, Operand::Num(Num::Float(want)))), Some(Num::Float(v))) => by(*op, v, *want),
        _ => false,
    }
}

fn test_record(t: &Test, r: &OwnedRecord) -> bool {
    if !t.tags.contains(&r.tag) {
        return false;
    }
    let text = r.text();
    let mut value: &str = &text;
    if let Some(h) = &t.header {
        let Some(rest) = field::after_prefix(value, h) else { return false };
        value = rest;
    }
    if let Some(n) = t.field {
        let Some(f) = field::field(value, n) else { return false };
        value = f;
    }
    let Some((op, operand)) = &t.cmp else { return true };
    match (op, operand) {
        (Op::Match, Operand::Regex(re)) => re.is_match(value),
        (Op::NoMatch, Operand::Regex(re)) => !re.is_match(value),
        (Op::StrEq, Operand::Str(s)) => value == s,
        (Op::StrNe, Operand::Str(s)) => value != s,
        (_, Operand::Num(want)) => compare(t, field::value(value, *want)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::group::{Tx, TxKind};
    use crate::log::vsl::Side;

    fn tx(vxid: u32, recs: &[(Tag, &str)]) -> Tx {
        let mut t = Tx::detached(vxid, TxKind::Request);
        t.records =
            recs.iter().map(|(tag, p)| OwnedRecord { tag: *tag, side: Side::Client, vxid, payload: p.as_bytes().to_vec() }).collect();
        t
    }

    fn group() -> Group {
        Group {
            txs: vec![
                (
                    1,
                    tx(
                        5,
                        &[
                            (Tag::ReqMethod, "GET"),
                            (Tag::ReqUrl, "/news/today?x=1"),
                            (Tag::ReqHeader, "Host: example.com"),
                            (Tag::ReqHeader, "User-Agent: curl/8.5"),
                            (Tag::RespStatus, "200"),
                            (Tag::Timestamp, "Resp: 1700000000.000200 0.004500 0.000100"),
                            (Tag::ReqAcct, "80 0 80 250 1024 1274"),
                        ],
                    ),
                ),
                (2, tx(6, &[(Tag::BerespStatus, "503"), (Tag::BereqUrl, "/news/today?x=1"), (Tag::FetchError, "backend closed")])),
            ],
        }
    }

    fn q(s: &str) -> bool {
        Query::parse(s).unwrap_or_else(|e| panic!("{s}: {e}")).matches(&group())
    }

    #[test]
    fn operators() {
        assert!(q("RespStatus == 200") && !q("RespStatus == 404"));
        assert!(q("RespStatus != 404") && !q("RespStatus != 200"));
        assert!(q("RespStatus < 300") && !q("RespStatus < 200"));
        assert!(q("RespStatus <= 200") && !q("RespStatus <= 199"));
        assert!(q("RespStatus > 199") && !q("RespStatus > 200"));
        assert!(q("RespStatus >= 200") && !q("RespStatus >= 201"));
        assert!(q("ReqMethod eq GET") && q("ReqMethod eq \"GET\"") && !q("ReqMethod eq 'POST'"));
        assert!(q("ReqMethod ne POST") && !q("ReqMethod ne GET"));
        assert!(q("ReqURL ~ \"^/news/\"") && !q("ReqURL ~ ^/sport"));
        assert!(q("ReqURL !~ ^/sport") && !q("ReqURL !~ news"));
        // Decimals (three of them count, as for varnishlog), and a field
        // that is not a number never compares.
        assert!(q("Timestamp:Resp[2] > 0.003") && !q("Timestamp:Resp[2] > 0.004"));
        assert!(q("Timestamp:Resp[2] >= 0.004") && q("RespStatus == \"200\"") && q("RespStatus == 0xc8"));
        assert!(!q("ReqMethod > 1") && !q("ReqMethod < 1"));
    }

    #[test]
    fn selectors() {
        // Existence alone.
        assert!(q("FetchError") && !q("VCL_Error"));
        // Header names, case-insensitively, the value after the colon.
        assert!(q("ReqHeader:host eq example.com") && q("ReqHeader:User-Agent ~ curl"));
        assert!(!q("ReqHeader:Cookie") && q("ReqHeader:Host"));
        // Fields, 1-based.
        assert!(q("ReqAcct[5] == 1024") && !q("ReqAcct[5] == 80") && !q("ReqAcct[9]"));
        // Tag lists and prefixes.
        assert!(q("RespStatus,BerespStatus == 503") && q("Beresp* == 503") && q("Req* eq GET"));
        // Levels: the backend request is at level 2.
        assert!(q("{2}BerespStatus == 503") && !q("{1}BerespStatus == 503"));
        assert!(q("{2+}FetchError") && !q("{3+}FetchError"));
        assert!(q("{1-}ReqMethod") && !q("{1-}FetchError"));
    }

    #[test]
    fn boolean_logic() {
        assert!(q("RespStatus == 200 and ReqMethod eq GET"));
        assert!(!q("RespStatus == 200 and ReqMethod eq POST"));
        assert!(q("RespStatus == 404 or ReqMethod eq GET"));
        assert!(q("not RespStatus == 404") && !q("not RespStatus == 200"));
        // and binds tighter than or; parentheses override.
        assert!(q("ReqMethod eq POST and RespStatus == 404 or FetchError"));
        assert!(!q("ReqMethod eq POST and (RespStatus == 404 or FetchError)"));
        assert!(q("not (ReqMethod eq POST or RespStatus == 404)"));
    }

    #[test]
    fn errors_have_positions() {
        let e = |s: &str| Query::parse(s).err().unwrap_or_else(|| panic!("{s} parsed"));
        assert_eq!(e("").at, 0);
        let x = e("RespStatus == 200 and");
        assert_eq!((x.msg.as_str(), x.at), ("Expected a tag name", 21));
        let x = e("NoSuchTag == 1");
        assert!(x.msg.contains("matches zero tags") && x.at == 0, "{x:?}");
        let x = e("RespStatus == abc");
        assert!(x.msg.contains("Integer parse error") && x.at == 14, "{x:?}");
        assert!(e("RespStatus == 1.x").msg.contains("Floating point parse error"));
        let x = e("ReqURL ~ \"(\"");
        assert!(x.msg.contains("Regular expression") && x.at == 9, "{x:?}");
        assert_eq!(e("(RespStatus == 200").msg, "Expected ')'");
        assert_eq!(e("{x}RespStatus").msg, "Expected a level");
        assert_eq!(e("ReqAcct[0]").msg, "Field numbers start at 1");
        assert_eq!(e("ReqURL eq \"open").msg, "Unterminated string");
        assert_eq!(e("RespStatus == 200 RespStatus").msg, "Expected 'and', 'or' or the end of the query");
        let shown = e("RespStatus == abc").to_string();
        assert!(shown.ends_with("RespStatus == abc\n              ^"), "{shown}");
    }

    #[test]
    fn lines_are_queries_ored_with_comments() {
        assert!(q("RespStatus == 404\n# a comment\n\n  ReqMethod eq GET # trailing"));
        assert!(!q("RespStatus == 404\nReqMethod eq POST"));
        assert!(q("RespStatus == 404 or \\\n ReqMethod eq GET"));
        assert_eq!(Query::parse("\n  # only a comment\n").err().map(|e| e.msg), Some("Empty query".into()));
        assert_eq!(Query::parse("ReqURL eq \"a\nb\"").err().map(|e| e.msg), Some("Unterminated string".into()));
        let e = Query::parse("RespStatus == 1\nRespStatus == x\nReqURL").unwrap_err().to_string();
        assert!(e.ends_with("\nRespStatus == x\n              ^"), "{e}");
    }

    #[test]
    fn vxid_is_an_integer_comparison_of_the_transaction_id() {
        assert!(Query::parse("vxid == 1001").is_ok());
        assert!(Query::parse("vxid >= 2 and ReqURL eq /").is_ok());
        for (q, msg) in [
            ("vxid ~ 1001", "Expected vxid operator got '~'"),
            ("vxid eq 1001", "Expected vxid operator got 'eq'"),
            ("vxid != 1001.5", "Expected integer got '1001.5'"),
            ("vxid[1] >= 1001", "Unexpected taglist selection for vxid"),
            ("{1}vxid <= 1001", "Unexpected taglist selection for vxid"),
            ("Link,vxid < 1001", "Unexpected taglist selection for vxid"),
        ] {
            let e = Query::parse(q).expect_err(q);
            assert!(e.msg.contains(msg), "{q}: {e:?}");
        }
    }
}
