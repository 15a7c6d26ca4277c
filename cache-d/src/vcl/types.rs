//! Static types of expressions, as far as they are known at compile
//! time: literals, the variables whose type is fixed, backends and ACLs.
//! Operators are checked as VCC checks them (`"a" * "b"`, `now + now`,
//! `1s + 1`, `bereq.backend == "x"`, `client.ip > "1.2.3.4"` and `+=` on a
//! BOOL are refused); what is not known (function results, variables
//! not in the table) is not checked here, never refused.

use std::collections::HashSet;

use super::ast::*;
use super::diag::{err, VclError};

/// A VCL type; `Unknown` where this pass does not know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    Str,
    Int,
    Real,
    Dur,
    Time,
    Bytes,
    Bool,
    Ip,
    Backend,
    Acl,
    Blob,
    Unknown,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Str => "STRING",
            Ty::Int => "INT",
            Ty::Real => "REAL",
            Ty::Dur => "DURATION",
            Ty::Time => "TIME",
            Ty::Bytes => "BYTES",
            Ty::Bool => "BOOL",
            Ty::Ip => "IP",
            Ty::Backend => "BACKEND",
            Ty::Acl => "ACL",
            Ty::Blob => "BLOB",
            Ty::Unknown => "?",
        }
    }
}

/// Variables of a fixed type (headers are STRING; the rest unknown).
const VARS: &[(Ty, &[&str])] = &[
    (
        Ty::Str,
        &[
            "req.url",
            "req.method",
            "req.proto",
            "bereq.url",
            "bereq.method",
            "bereq.proto",
            "beresp.reason",
            "beresp.proto",
            "resp.reason",
            "resp.proto",
            "obj.reason",
            "obj.proto",
            "server.hostname",
            "server.identity",
        ],
    ),
    (Ty::Int, &["req.restarts", "bereq.retries", "resp.status", "beresp.status", "obj.status", "obj.hits", "req.esi_level"]),
    (Ty::Dur, &["req.ttl", "req.grace", "beresp.ttl", "beresp.grace", "beresp.keep", "obj.ttl", "obj.grace", "obj.keep", "obj.age"]),
    (Ty::Time, &["now", "req.time", "bereq.time", "beresp.time", "resp.time"]),
    (
        Ty::Bool,
        &[
            "true",
            "false",
            "beresp.do_gzip",
            "beresp.do_gunzip",
            "beresp.do_esi",
            "beresp.do_stream",
            "beresp.uncacheable",
            "beresp.was_304",
            "req.hash_always_miss",
            "req.hash_ignore_busy",
            "req.hash_ignore_vary",
            "req.can_gzip",
            "req.esi",
            "resp.do_esi",
            "resp.is_streaming",
            "obj.uncacheable",
        ],
    ),
    (Ty::Ip, &["client.ip", "server.ip", "remote.ip", "local.ip", "beresp.backend.ip"]),
    (Ty::Backend, &["req.backend_hint", "bereq.backend", "beresp.backend"]),
];

/// `+` and `-` as VCC allows them: (op, left, right, result).
const ADDS: &[(&str, Ty, Ty, Ty)] = &[
    ("+", Ty::Bytes, Ty::Bytes, Ty::Bytes),
    ("-", Ty::Bytes, Ty::Bytes, Ty::Bytes),
    ("+", Ty::Dur, Ty::Dur, Ty::Dur),
    ("-", Ty::Dur, Ty::Dur, Ty::Dur),
    ("+", Ty::Int, Ty::Int, Ty::Int),
    ("-", Ty::Int, Ty::Int, Ty::Int),
    ("+", Ty::Int, Ty::Real, Ty::Real),
    ("-", Ty::Int, Ty::Real, Ty::Real),
    ("+", Ty::Real, Ty::Int, Ty::Real),
    ("-", Ty::Real, Ty::Int, Ty::Real),
    ("+", Ty::Real, Ty::Real, Ty::Real),
    ("-", Ty::Real, Ty::Real, Ty::Real),
    ("-", Ty::Time, Ty::Time, Ty::Dur),
    ("+", Ty::Time, Ty::Dur, Ty::Time),
    ("-", Ty::Time, Ty::Dur, Ty::Time),
];

/// Functions whose result type is fixed.
const FUNCS: &[(Ty, &[&str])] = &[
    (
        Ty::Str,
        &[
            "regsub",
            "regsuball",
            "std.tolower",
            "std.toupper",
            "std.querysort",
            "std.strstr",
            "cookie.get",
            "cookie.get_re",
            "cookie.get_string",
            "cookie.format_date",
            "cookie.format_rfc1123",
        ],
    ),
    (Ty::Int, &["std.integer", "std.port", "std.real2integer", "std.time2integer"]),
    (Ty::Real, &["std.random", "std.real", "std.round", "std.time2real"]),
    (Ty::Dur, &["std.duration"]),
    (Ty::Time, &["std.time", "std.real2time"]),
    (Ty::Bool, &["std.healthy", "std.file_exists", "cookie.isset"]),
    (Ty::Ip, &["std.ip"]),
    (Ty::Blob, &["blob.decode", "blob.sub"]),
];

/// Functions that return nothing (VCC: "Function returns VOID" where one
/// stands as a value).
const VOIDS: &[&str] = &[
    "hash_data",
    "synthetic",
    "ban",
    "std.log",
    "std.syslog",
    "std.collect",
    "std.rollback",
    "std.late_100_continue",
    "cookie.clean",
    "cookie.delete",
    "cookie.filter",
    "cookie.filter_re",
    "cookie.keep",
    "cookie.keep_re",
    "cookie.parse",
    "cookie.set",
];

/// Can a value of this type stand where a BOOL is wanted (VCC's
/// vcc_expr_tobool: not a REAL, TIME, IP or BYTES)?
fn boolish(t: Ty) -> bool {
    matches!(t, Ty::Bool | Ty::Backend | Ty::Int | Ty::Dur | Ty::Str | Ty::Unknown)
}

/// The program's backends and ACLs, by name.
struct Names<'p> {
    backends: HashSet<&'p str>,
    acls: HashSet<&'p str>,
}

impl Names<'_> {
    fn var(&self, name: &str) -> Ty {
        if super::lex::header_name(name).is_some() {
            return Ty::Str;
        }
        if self.backends.contains(name) {
            return Ty::Backend;
        }
        if self.acls.contains(name) {
            return Ty::Acl;
        }
        VARS.iter().find(|(_, names)| names.contains(&name)).map_or(Ty::Unknown, |(t, _)| *t)
    }

    /// The type of `e`, evaluated where a `ctx` is wanted.
    fn expr(&self, e: &Expr, ctx: Ty) -> Result<Ty, VclError> {
        Ok(match e {
            Expr::Str(..) => Ty::Str,
            Expr::Int(..) if ctx == Ty::Real => Ty::Real,
            Expr::Int(..) => Ty::Int,
            Expr::Real(..) => Ty::Real,
            Expr::Duration(..) => Ty::Dur,
            Expr::Bytes(..) => Ty::Bytes,
            Expr::Name(n, _) => self.var(n),
            // .upper() / .lower() (see the parser)
            Expr::Call { name, .. } if name.starts_with('.') => Ty::Str,
            Expr::Call { name, pos, .. } if VOIDS.contains(&name.as_str()) => return err("Function returns VOID:", *pos),
            Expr::Call { name, .. } => FUNCS.iter().find(|(_, n)| n.contains(&name.as_str())).map_or(Ty::Unknown, |(t, _)| *t),
            Expr::Not(x, pos) => {
                let t = self.expr(x, Ty::Bool)?;
                if !boolish(t) {
                    return err(format!("'!' must be followed by BOOL, found {}.", t.name()), *pos);
                }
                Ty::Bool
            }
            Expr::Neg(x, _) => self.expr(x, ctx)?,
            Expr::Binary { op, left, right, pos } => self.binary(op, left, right, *pos, ctx)?,
        })
    }

    fn binary(&self, op: &str, left: &Expr, right: &Expr, pos: Pos, ctx: Ty) -> Result<Ty, VclError> {
        match op {
            "&&" | "||" => {
                let l = self.expr(left, Ty::Bool)?;
                if !boolish(l) {
                    return err(format!("'{op}' must be preceeded by BOOL, found {}.", l.name()), left.pos());
                }
                let r = self.expr(right, Ty::Bool)?;
                if !boolish(r) {
                    return err(format!("'{op}' must be followed by BOOL, found {}.", r.name()), right.pos());
                }
                Ok(Ty::Bool)
            }
            "~" | "!~" => {
                self.expr(left, Ty::Unknown)?;
                Ok(Ty::Bool)
            }
            "==" | "!=" | "<" | ">" | "<=" | ">=" => self.compare(op, left, right, pos),
            "%" => {
                let l = self.expr(left, Ty::Int)?;
                let r = self.expr(right, Ty::Int)?;
                if let Some(t) = [l, r].into_iter().find(|t| !matches!(t, Ty::Int | Ty::Unknown)) {
                    return err(format!("Operator % only possible on INT, not {}.", t.name()), pos);
                }
                Ok(Ty::Int)
            }
            "*" | "/" => {
                let l = self.expr(left, ctx)?;
                let r = self.expr(right, if l == Ty::Int { Ty::Int } else { Ty::Real })?;
                if !matches!(l, Ty::Int | Ty::Real | Ty::Dur | Ty::Unknown) {
                    return err(format!("Operator {op} not possible on type {}.", l.name()), pos);
                }
                if l != Ty::Unknown && !matches!(r, Ty::Int | Ty::Real | Ty::Unknown) {
                    return err(format!("{} {op} {} not possible.", l.name(), r.name()), pos);
                }
                Ok(l)
            }
            _ => {
                let l = self.expr(left, ctx)?;
                let r = self.expr(right, if l == Ty::Unknown { ctx } else { l })?;
                if let Some((.., t)) = ADDS.iter().find(|(o, a, b, _)| *o == op && *a == l && *b == r) {
                    return Ok(*t);
                }
                if op == "+" && (l == Ty::Str || ctx == Ty::Str) {
                    return Ok(Ty::Str);
                }
                if l == Ty::Unknown || r == Ty::Unknown || (ctx == Ty::Unknown && op == "+") {
                    return Ok(Ty::Unknown);
                }
                err(format!("{} {op} {} not possible.", l.name(), r.name()), pos)
            }
        }
    }

    fn compare(&self, op: &str, left: &Expr, right: &Expr, pos: Pos) -> Result<Ty, VclError> {
        let l = self.expr(left, Ty::Unknown)?;
        let r = self.expr(right, l)?;
        let ordered = matches!(l, Ty::Int | Ty::Real | Ty::Dur | Ty::Time | Ty::Bytes | Ty::Str | Ty::Unknown);
        if !ordered && !matches!(op, "==" | "!=") {
            return err(format!("Operator {op} not possible on {}", l.name()), pos);
        }
        let numeric = |t: Ty| matches!(t, Ty::Int | Ty::Real | Ty::Dur | Ty::Time | Ty::Bytes);
        let fits = l == r
            || l == Ty::Unknown
            || r == Ty::Unknown
            || (numeric(l) && matches!(right, Expr::Int(..) | Expr::Real(..) | Expr::Neg(..)))
            || (numeric(l) && numeric(r) && l != Ty::Time && r != Ty::Time)
            || (l == Ty::Ip && matches!(right, Expr::Str(..)));
        if !fits {
            return err(format!("Comparison of different types: {} '{op}' {}", l.name(), r.name()), pos);
        }
        Ok(Ty::Bool)
    }

    fn stmts(&self, body: &[Stmt]) -> Result<(), VclError> {
        for s in body {
            match s {
                Stmt::Set { target, op, value, pos } => {
                    let t = self.var(target);
                    let arith_ok = match *op {
                        "=" => true,
                        "+=" => matches!(t, Ty::Str | Ty::Int | Ty::Real | Ty::Dur | Ty::Time | Ty::Bytes | Ty::Unknown),
                        _ => matches!(t, Ty::Int | Ty::Real | Ty::Dur | Ty::Unknown),
                    };
                    if !arith_ok {
                        return err(format!("Operator {op} not possible on type {}.", t.name()), *pos);
                    }
                    self.expr(value, t)?;
                }
                Stmt::If { branches, otherwise, .. } => {
                    for (c, b) in branches {
                        let t = self.expr(c, Ty::Bool)?;
                        if !boolish(t) {
                            return err(format!("Expression has type {}, expected BOOL", t.name()), c.pos());
                        }
                        self.stmts(b)?;
                    }
                    self.stmts(otherwise.as_deref().unwrap_or(&[]))?;
                }
                Stmt::Block(b) => self.stmts(b)?,
                // A call as a statement: its value, if any, is dropped.
                Stmt::Expr(Expr::Call { .. }) => {}
                Stmt::Expr(e) => {
                    self.expr(e, Ty::Unknown)?;
                }
                Stmt::Return { args, .. } => args.iter().try_for_each(|a| self.expr(a, Ty::Unknown).map(|_| ()))?,
                Stmt::Unset { .. } | Stmt::Call { .. } | Stmt::New { .. } => {}
            }
        }
        Ok(())
    }
}

/// Check the operators of every subroutine.
pub fn check(p: &Program) -> Result<(), VclError> {
    let mut names = Names { backends: HashSet::new(), acls: HashSet::new() };
    for item in &p.items {
        match item {
            Item::Backend { name, .. } => {
                names.backends.insert(name.as_str());
            }
            Item::Acl { name, .. } => {
                names.acls.insert(name.as_str());
            }
            _ => {}
        }
    }
    for item in &p.items {
        if let Item::Sub { body, .. } = item {
            names.stmts(body)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcl::parse_source;

    fn types(src: &str) -> Result<(), String> {
        let p = parse_source("t.vcl", &format!("vcl 4.1;\nbackend b {{ .host = \"x\"; }}\n{src}\n")).map_err(|e| e.to_string())?;
        check(&p).map_err(|e| e.msg)
    }

    #[test]
    fn operators_are_typed() {
        for ok in [
            "sub vcl_recv { set req.http.x = \"a\" + 1 + now; set req.ttl = 1s + 2m; set req.http.y = 1 + \"x\"; }",
            "sub vcl_recv { if (req.restarts > 0 && client.ip == \"127.0.0.1\" && req.ttl > 0s) { } }",
            "sub vcl_recv { set req.http.n = std.integer(req.http.n, 0) + 1; set req.ttl = now - req.time; }",
            "sub vcl_backend_response { set beresp.ttl = 10s * 2; set beresp.ttl += 1s; set beresp.http.x += \"y\"; }",
            "sub vcl_recv { if (!req.http.x) { } if (req.backend_hint == b) { } }",
        ] {
            assert_eq!(types(ok), Ok(()), "{ok}");
        }
        for (bad, msg) in [
            ("set req.http.foo = \"bla\" * \"foo\";", "Operator * not possible on type STRING."),
            ("set req.http.foo = \"foo\" - \"bar\";", "STRING - STRING not possible."),
            ("set req.ttl = now + now;", "TIME + TIME not possible."),
            ("set req.ttl = 1s + 1;", "DURATION + INT not possible."),
            ("set req.ttl = client.ip + server.ip;", "IP + IP not possible."),
            ("if (\"foo\" + \"bar\" == 777) { }", "Comparison of different types: STRING '==' INT"),
            ("if (client.ip > \"127.0.0.1\") { }", "Operator > not possible on IP"),
            ("if (req.backend_hint == req.http.x) { }", "Comparison of different types: BACKEND '==' STRING"),
            ("set req.backend_hint += b;", "Operator += not possible on type BACKEND."),
            ("if (!std.random(0, 1)) { }", "'!' must be followed by BOOL, found REAL."),
            ("if (0 || std.random(0, 1)) { }", "'||' must be followed by BOOL, found REAL."),
            ("if (std.random(0, 1) && 0) { }", "'&&' must be preceeded by BOOL, found REAL."),
            ("if (now) { }", "Expression has type TIME, expected BOOL"),
        ] {
            assert_eq!(types(&format!("sub vcl_recv {{ {bad} }}")), Err(msg.to_string()), "{bad}");
        }
    }
}
