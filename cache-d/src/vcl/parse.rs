//! The VCL parser: tokens to [`ast`](super::ast), by recursive descent,
//! with Varnish's operator precedence and hints for Varnish 2.x/3.x
//! spellings that 4.1 dropped.

use super::ast::*;
use super::diag::VclError;
use super::lex::{Tok, Token};

/// Old statements and what 4.1 says instead.
const LEGACY_STATEMENTS: &[(&str, &str)] = &[
    ("lookup", "use \"return (hash);\" (Varnish 4.0 renamed lookup to hash)"),
    ("pass", "use \"return (pass);\""),
    ("pipe", "use \"return (pipe);\""),
    ("deliver", "use \"return (deliver);\""),
    ("fetch", "use \"return (fetch);\""),
    ("restart", "use \"return (restart);\""),
    ("error", "use \"return (synth(status, reason));\" and vcl_synth"),
    ("esi", "use \"set beresp.do_esi = true;\""),
    ("remove", "use \"unset\""),
    ("purge_url", "use \"ban(\\\"req.url ~ ...\\\")\""),
];

/// `.upper()` / `.lower()` on a STRING: a call of the method, named
/// with a leading dot (compiled in `compile::expr`).
fn string_method(m: &str, on: Expr, pos: Pos) -> Expr {
    Expr::Call { name: format!(".{m}"), args: vec![on], names: vec![None], pos }
}

/// Is `base.m()` a STRING method on a header (`req.http.x.upper()`)?
fn is_method_base(base: &str, m: &str) -> bool {
    (m == "upper" || m == "lower") && super::lex::header_name(base).is_some()
}

pub struct Parser<'a> {
    toks: &'a [Token],
    i: usize,
    file: usize,
    /// Parsing a subroutine that is not a method (a user one, a split one
    /// like vcl_req_cookie): a bare `return;` ends it.
    in_user_sub: bool,
}

type R<T> = Result<T, VclError>;

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("'{s}'"),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::Int(n) => n.to_string(),
        Tok::Real(f) => f.to_string(),
        Tok::Duration(d) => format!("{d}s"),
        Tok::Bytes(b) => format!("{b}B"),
        Tok::Blob(_) => "a BLOB".into(),
        Tok::Punct(p) => format!("'{p}'"),
        Tok::Eof => "end of input".into(),
    }
}

impl<'a> Parser<'a> {
    pub fn new(toks: &'a [Token], file: usize) -> Parser<'a> {
        Parser { toks, i: 0, file, in_user_sub: false }
    }

    fn peek(&self) -> &Token {
        &self.toks[self.i.min(self.toks.len() - 1)]
    }
    fn peek2(&self) -> &Token {
        &self.toks[(self.i + 1).min(self.toks.len() - 1)]
    }
    fn pos(&self) -> Pos {
        let t = self.peek();
        Pos { file: self.file, at: t.at, len: t.len }
    }
    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
        t
    }
    fn err<T>(&self, msg: impl Into<String>) -> R<T> {
        Err(VclError { msg: msg.into(), pos: self.pos() })
    }
    fn is(&self, p: &str) -> bool {
        matches!(&self.peek().tok, Tok::Punct(q) if *q == p)
    }
    fn is_word(&self, w: &str) -> bool {
        matches!(&self.peek().tok, Tok::Ident(s) if s == w)
    }
    fn expect(&mut self, p: &str) -> R<()> {
        if self.is(p) {
            self.next();
            Ok(())
        } else {
            self.err(format!("Expected '{p}' got {}", describe(&self.peek().tok)))
        }
    }
    /// The name a declaration gives (a backend, probe, ACL or sub): a
    /// letter, then letters, digits, `_` and `-` (no dot).
    fn decl_name(&mut self, what: &str, kind: &str) -> R<(String, Pos)> {
        let (name, pos) = self.ident(what)?;
        if name.contains('.') {
            return Err(VclError { msg: format!("Name of {kind}, '{name}', contains illegal character '.'"), pos });
        }
        Ok((name, pos))
    }
    fn ident(&mut self, what: &str) -> R<(String, Pos)> {
        let pos = self.pos();
        match self.next().tok {
            Tok::Ident(s) => Ok((s, pos)),
            t => Err(VclError { msg: format!("Expected {what} got {}", describe(&t)), pos }),
        }
    }
    fn string(&mut self, what: &str) -> R<(String, Pos)> {
        let pos = self.pos();
        match self.next().tok {
            Tok::Str(s) => Ok((s, pos)),
            t => Err(VclError { msg: format!("Expected {what} got {}", describe(&t)), pos }),
        }
    }

    /// The whole file.
    pub fn program(&mut self) -> R<Vec<Item>> {
        let mut items = Vec::new();
        while self.peek().tok != Tok::Eof {
            items.push(self.item()?);
        }
        Ok(items)
    }

    fn item(&mut self) -> R<Item> {
        let pos = self.pos();
        let (word, _) = self.ident("a declaration (vcl, import, include, backend, probe, acl, sub)")?;
        match word.as_str() {
            "vcl" => {
                // Written exactly 4.0 or 4.1 (not 4.00, 04.1).
                let vt = self.next();
                let version = match vt.tok {
                    Tok::Real(v) if vt.len == 3 => format!("{v:.1}"),
                    Tok::Real(v) => format!("{v}"),
                    t => return Err(VclError { msg: format!("Expected a version (4.0 or 4.1) got {}", describe(&t)), pos }),
                };
                if version != "4.0" && version != "4.1" {
                    return Err(VclError { msg: format!("VCL version {version} not supported (use 4.0 or 4.1)"), pos });
                }
                self.expect(";")?;
                Ok(Item::Version { version, pos })
            }
            "import" => {
                let (module, _) = self.ident("a module name")?;
                if self.is_word("from") {
                    self.next();
                    self.string("a file name")?;
                }
                self.expect(";")?;
                Ok(Item::Import { module, pos })
            }
            "include" => {
                let mut glob = false;
                while self.is("+") || self.is("-") {
                    let on = self.is("+");
                    self.next();
                    match self.ident("an include flag")? {
                        (f, _) if f == "glob" => glob = on,
                        (_, fpos) => return Err(VclError { msg: "Unknown include flag:".into(), pos: fpos }),
                    }
                }
                let (path, _) = self.string("a file name in quotes")?;
                self.expect(";")?;
                Ok(Item::Include { path, glob, pos })
            }
            "backend" => {
                let (name, _) = self.decl_name("a backend name", "backend")?;
                if matches!(&self.peek().tok, Tok::Ident(w) if w.eq_ignore_ascii_case("none")) {
                    self.next();
                    self.expect(";")?;
                    return Ok(Item::Backend { name, fields: Vec::new(), none: true, pos });
                }
                let fields = self.fields()?;
                Ok(Item::Backend { name, fields, none: false, pos })
            }
            "probe" => {
                let (name, _) = self.decl_name("a probe name", "probe")?;
                let fields = self.fields()?;
                Ok(Item::Probe { name, fields, pos })
            }
            "acl" => {
                let (name, _) = self.decl_name("an ACL name", "acl")?;
                let flags = self.acl_flags()?;
                Ok(Item::Acl { name, flags, entries: self.acl()?, pos })
            }
            "sub" => {
                let (name, _) = self.decl_name("a subroutine name", "sub")?;
                if name == "vcl_fetch" {
                    return Err(VclError { msg: "vcl_fetch is called vcl_backend_response since Varnish 4.0".into(), pos });
                }
                if name == "vcl_error" {
                    return Err(VclError { msg: "vcl_error is split into vcl_synth and vcl_backend_error since Varnish 4.0".into(), pos });
                }
                // A bare `return;` is for any subroutine but the methods.
                self.in_user_sub = crate::vcl::model::Sub::from_name(&name).is_none();
                let body = self.block()?;
                Ok(Item::Sub { name, body, pos })
            }
            other => {
                Err(VclError { msg: format!("Expected a declaration (vcl, import, include, backend, probe, acl, sub) got '{other}'"), pos })
            }
        }
    }

    fn fields(&mut self) -> R<Vec<Field>> {
        self.expect("{")?;
        let mut out = Vec::new();
        while !self.is("}") {
            let pos = self.pos();
            self.expect(".")?;
            let (name, _) = self.ident("a field name")?;
            self.expect("=")?;
            let value = if self.is("{") {
                FieldValue::Block(self.fields()?)
            } else if let Tok::Blob(b) = &self.peek().tok {
                // A backend's .preamble.
                let b = b.clone();
                self.next();
                self.expect(";")?;
                FieldValue::Blob(b)
            } else if name == "request" && matches!(self.peek().tok, Tok::Str(_)) {
                // A probe's request: one line per string (not concatenated).
                let (first, fpos) = self.string("a string")?;
                let mut e = Expr::Str(first, fpos);
                while let Tok::Str(s) = &self.peek().tok {
                    let right = Box::new(Expr::Str(s.clone(), self.pos()));
                    e = Expr::Binary { op: "+", left: Box::new(e), right, pos: fpos };
                    self.next();
                }
                self.expect(";")?;
                FieldValue::Expr(e)
            } else {
                let e = self.expr()?;
                if let Expr::Name(n, _) = &e {
                    if !self.is(";") {
                        return self.err(format!("Expected ';' got {}", describe(&self.peek().tok)));
                    }
                    self.next();
                    out.push(Field { name, value: FieldValue::Name(n.clone()), pos });
                    continue;
                }
                self.expect(";")?;
                FieldValue::Expr(e)
            };
            out.push(Field { name, value, pos });
        }
        self.expect("}")?;
        Ok(out)
    }

    /// `+log`, `-pedantic`, `+table`... before an ACL's body (`table` only
    /// chooses Varnish's compiled form: accepted, no effect here).
    fn acl_flags(&mut self) -> R<AclFlags> {
        let mut flags = AclFlags::default();
        while self.is("+") || self.is("-") {
            let on = self.is("+");
            let pos = self.pos();
            self.next();
            let (flag, _) = self.ident("an ACL flag")?;
            match flag.as_str() {
                "log" => flags.log = on,
                "pedantic" => flags.pedantic = on,
                "table" => {}
                _ => return Err(VclError { msg: format!("Unknown ACL flag: {flag}"), pos }),
            }
        }
        Ok(flags)
    }

    fn acl(&mut self) -> R<Vec<AclEntry>> {
        self.expect("{")?;
        let out = self.acl_entries("}")?;
        self.expect("}")?;
        Ok(out)
    }

    /// An ACL's entries up to `end` (`}`, or the end of an included file):
    /// `[!] [(] [!] "address" [/ mask] [)] ;`, the mask also inside the
    /// quotes, or `include "file";`.
    pub fn acl_entries(&mut self, end: &str) -> R<Vec<AclEntry>> {
        let mut out = Vec::new();
        while !(self.is(end) || (end.is_empty() && self.peek().tok == Tok::Eof)) {
            let pos = self.pos();
            if self.is_word("include") {
                self.next();
                let (addr, _) = self.string("a file name in quotes")?;
                self.expect(";")?;
                let e = AclEntry { negated: false, addr, mask: None, pos, para: false, include: true };
                out.push(e);
                continue;
            }
            let mut negated = self.eat("!");
            let para = self.eat("(");
            negated = negated || (para && self.eat("!"));
            let (mut addr, apos) = self.string("an address in quotes")?;
            let mut mask = None;
            if let Some((a, m)) = addr.split_once('/') {
                let m = m.parse::<u32>().map_err(|_| VclError { msg: ".../mask is not numeric.".into(), pos: apos })?;
                (addr, mask) = (a.to_string(), Some(m.min(255) as u8));
                if self.is("/") {
                    return self.err("/mask only allowed once.");
                }
            } else if self.eat("/") {
                match self.next().tok {
                    Tok::Int(m) if m >= 0 => mask = Some(m.min(255) as u8),
                    t => return Err(VclError { msg: format!("Expected a mask length got {}", describe(&t)), pos: apos }),
                }
            }
            if para {
                self.expect(")")?;
            }
            self.expect(";")?;
            out.push(AclEntry { negated, addr, mask, pos: apos, para, include: false });
        }
        Ok(out)
    }

    /// Take the punctuation `p` if it is next.
    fn eat(&mut self, p: &str) -> bool {
        let here = self.is(p);
        if here {
            self.next();
        }
        here
    }

    fn block(&mut self) -> R<Vec<Stmt>> {
        self.expect("{")?;
        let mut out = Vec::new();
        while !self.is("}") {
            if self.peek().tok == Tok::Eof {
                return self.err("Expected '}' got end of input");
            }
            out.push(self.stmt()?);
        }
        self.expect("}")?;
        Ok(out)
    }

    fn stmt(&mut self) -> R<Stmt> {
        let pos = self.pos();
        if self.is("{") {
            return Ok(Stmt::Block(self.block()?));
        }
        let word = match &self.peek().tok {
            Tok::Ident(w) => w.clone(),
            t => return self.err(format!("Expected a statement got {}", describe(t))),
        };
        match word.as_str() {
            "set" => {
                self.next();
                let (target, _) = self.ident("a variable")?;
                let op = match self.next().tok {
                    Tok::Punct(p @ ("=" | "+=" | "-=" | "*=" | "/=")) => p,
                    t => return Err(VclError { msg: format!("Expected '=' got {}", describe(&t)), pos: self.pos() }),
                };
                let value = self.expr()?;
                self.expect(";")?;
                Ok(Stmt::Set { target, op, value, pos })
            }
            "unset" => {
                self.next();
                let (target, _) = self.ident("a variable")?;
                self.expect(";")?;
                Ok(Stmt::Unset { target, pos })
            }
            "if" => {
                self.next();
                let mut branches = Vec::new();
                self.expect("(")?;
                let cond = self.expr()?;
                self.expect(")")?;
                branches.push((cond, self.block()?));
                let mut otherwise = None;
                loop {
                    if self.is_word("elseif")
                        || self.is_word("elsif")
                        || self.is_word("elif")
                        || (self.is_word("else") && matches!(&self.peek2().tok, Tok::Ident(w) if w == "if"))
                    {
                        if self.is_word("else") {
                            self.next();
                        }
                        self.next();
                        self.expect("(")?;
                        let c = self.expr()?;
                        self.expect(")")?;
                        branches.push((c, self.block()?));
                    } else if self.is_word("else") {
                        self.next();
                        otherwise = Some(self.block()?);
                        break;
                    } else {
                        break;
                    }
                }
                Ok(Stmt::If { branches, otherwise, pos })
            }
            "return" => {
                self.next();
                if self.in_user_sub && self.is(";") {
                    // Ends this subroutine; its caller goes on.
                    self.next();
                    return Ok(Stmt::Return { action: String::new(), args: Vec::new(), pos });
                }
                self.expect("(")?;
                let (action, _) = self.ident("an action")?;
                let mut args = Vec::new();
                if self.is("(") {
                    self.next();
                    if !self.is(")") {
                        args.push(self.expr()?);
                        while self.is(",") {
                            self.next();
                            args.push(self.expr()?);
                        }
                    }
                    self.expect(")")?;
                }
                self.expect(")")?;
                self.expect(";")?;
                Ok(Stmt::Return { action, args, pos })
            }
            "call" => {
                self.next();
                let (sub, _) = self.ident("a subroutine name")?;
                self.expect(";")?;
                Ok(Stmt::Call { sub, pos })
            }
            "new" => {
                self.next();
                let (name, _) = self.ident("an object name")?;
                self.expect("=")?;
                let ctor = self.expr()?;
                self.expect(";")?;
                Ok(Stmt::New { name, ctor, pos })
            }
            w if w == "purge" && matches!(&self.peek2().tok, Tok::Punct("(")) => {
                self.err("purge() is gone since Varnish 4.0: use ban(\"req.url ~ ...\"), or return (purge) in vcl_recv")
            }
            w => {
                if let Some((_, hint)) = LEGACY_STATEMENTS.iter().find(|(old, _)| *old == w) {
                    if !matches!(&self.peek2().tok, Tok::Punct("(")) {
                        return self.err(format!("\"{w}\" is not a VCL 4.1 statement: {hint}"));
                    }
                }
                let e = self.expr()?;
                if !matches!(e, Expr::Call { .. }) {
                    return Err(VclError {
                        msg: format!("Expected a statement (set, unset, if, return, call, new, or a function call) got '{w}'"),
                        pos,
                    });
                }
                self.expect(";")?;
                Ok(Stmt::Expr(e))
            }
        }
    }

    // Precedence, lowest first: || , && , ! , comparisons , + - , * / , unary -.
    pub fn expr(&mut self) -> R<Expr> {
        self.or()
    }

    fn binary(&mut self, ops: &[&'static str], next: fn(&mut Self) -> R<Expr>) -> R<Expr> {
        let mut left = next(self)?;
        loop {
            let op = match &self.peek().tok {
                Tok::Punct(p) if ops.contains(p) => *p,
                _ => return Ok(left),
            };
            let pos = self.pos();
            self.next();
            let right = next(self)?;
            left = Expr::Binary { op, left: Box::new(left), right: Box::new(right), pos };
        }
    }

    fn or(&mut self) -> R<Expr> {
        self.binary(&["||"], Self::and)
    }
    fn and(&mut self) -> R<Expr> {
        self.binary(&["&&"], Self::not)
    }
    fn not(&mut self) -> R<Expr> {
        if self.is("!") {
            let pos = self.pos();
            self.next();
            return Ok(Expr::Not(Box::new(self.not()?), pos));
        }
        self.cmp()
    }
    fn cmp(&mut self) -> R<Expr> {
        let left = self.add()?;
        let op = match &self.peek().tok {
            Tok::Punct(p @ ("==" | "!=" | "~" | "!~" | "<" | ">" | "<=" | ">=")) => *p,
            _ => return Ok(left),
        };
        let pos = self.pos();
        self.next();
        let right = self.add()?;
        Ok(Expr::Binary { op, left: Box::new(left), right: Box::new(right), pos })
    }
    fn add(&mut self) -> R<Expr> {
        self.binary(&["+", "-"], Self::mul)
    }
    fn mul(&mut self) -> R<Expr> {
        self.binary(&["*", "/", "%"], Self::unary)
    }
    fn unary(&mut self) -> R<Expr> {
        if self.is("-") {
            let pos = self.pos();
            self.next();
            return Ok(Expr::Neg(Box::new(self.unary()?), pos));
        }
        let mut e = self.primary()?;
        // A STRING's methods: "...".upper(), req.http."a b".lower().
        while self.is(".") && matches!(&self.peek2().tok, Tok::Ident(m) if m == "upper" || m == "lower") {
            let pos = self.pos();
            self.next();
            let (m, _) = self.ident("a method")?;
            self.expect("(")?;
            self.expect(")")?;
            e = string_method(&m, e, pos);
        }
        Ok(e)
    }
    fn primary(&mut self) -> R<Expr> {
        let pos = self.pos();
        match self.next().tok {
            Tok::Str(s) => {
                // Adjacent string literals concatenate.
                let mut s = s;
                while let Tok::Str(more) = &self.peek().tok {
                    s.push_str(more);
                    self.next();
                }
                Ok(Expr::Str(s, pos))
            }
            Tok::Int(n) => Ok(Expr::Int(n, pos)),
            Tok::Real(f) => Ok(Expr::Real(f, pos)),
            Tok::Duration(d) => Ok(Expr::Duration(d, pos)),
            Tok::Bytes(b) => Ok(Expr::Bytes(b, pos)),
            Tok::Punct("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Ident(name) => {
                if self.is("(") {
                    self.next();
                    let (mut args, mut names) = (Vec::new(), Vec::new());
                    if !self.is(")") {
                        loop {
                            let (n, a) = self.arg()?;
                            names.push(n);
                            args.push(a);
                            if !self.is(",") {
                                break;
                            }
                            self.next();
                        }
                    }
                    self.expect(")")?;
                    // req.http.x.upper(): one name to the lexer, a method here.
                    if let Some((base, m)) = name.rsplit_once('.').filter(|(b, m)| args.is_empty() && is_method_base(b, m)) {
                        return Ok(string_method(m, Expr::Name(base.to_string(), pos), pos));
                    }
                    return Ok(Expr::Call { name, args, names, pos });
                }
                Ok(Expr::Name(name, pos))
            }
            t => Err(VclError { msg: format!("Expected an expression got {}", describe(&t)), pos }),
        }
    }
    /// A call argument, with its name if given as `name = value`.
    fn arg(&mut self) -> R<(Option<String>, Expr)> {
        let mut name = None;
        if let (Tok::Ident(n), Tok::Punct("=")) = (&self.peek().tok, &self.peek2().tok) {
            name = Some(n.clone());
            self.next();
            self.next();
        }
        Ok((name, self.expr()?))
    }
}
