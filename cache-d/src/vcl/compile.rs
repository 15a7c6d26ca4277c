//! Compiling a checked program into closures (evaluated per request; the
//! text is never walked again), and the policy that runs them in the
//! request-path hooks, falling through to the built-in policy when a
//! subroutine does not return.
//!
//! Supported so far: vcl_recv, vcl_hash, vcl_backend_response and
//! vcl_deliver, user subroutines and `call`; `set`, `unset`, `if`,
//! `return`; strings, booleans, integers, durations; `== != ~ !~ < > <= >=
//! && || !` and `+`; regex and ACL matches; `regsub`, `regsuball`,
//! `hash_data`, `std.tolower`, `std.toupper`, `std.integer`,
//! `std.duration`, `std.querysort`; the variables listed in
//! [`var`]. Anything else is a compile error that says it is not supported
//! yet, never a silent no-op.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use regex::Regex;

use super::ast::*;
use super::diag::VclError;
use crate::policy::{self, Beresp, BerespAction, Headers, Policy, Recv, Req};

#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Str(String),
    Bool(bool),
    Int(i64),
    Dur(f64),
    /// An unset header or variable.
    None,
}

impl Val {
    fn text(&self) -> String {
        match self {
            Val::Str(s) => s.clone(),
            Val::Bool(b) => b.to_string(),
            Val::Int(i) => i.to_string(),
            Val::Dur(d) => format!("{d:.3}"),
            Val::None => String::new(),
        }
    }
    fn truthy(&self) -> bool {
        match self {
            Val::Bool(b) => *b,
            Val::Str(s) => !s.is_empty(),
            Val::Int(i) => *i != 0,
            Val::Dur(d) => *d != 0.0,
            Val::None => false,
        }
    }
    fn num(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Dur(d) => Some(*d),
            Val::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

/// What a subroutine can see and change.
pub struct Ctx<'a, 'h> {
    pub req: Option<&'a mut Req>,
    pub key: Option<&'a mut Vec<u8>>,
    pub beresp: Option<&'a mut Beresp<'h>>,
    pub resp: Option<&'a mut Headers>,
    pub client_ip: Option<IpAddr>,
}

enum Flow {
    Next,
    Return(String, Vec<Val>),
}

type ExprFn = Box<dyn Fn(&mut Ctx<'_, '_>, &Compiled) -> Val + Send + Sync>;
type StmtFn = Box<dyn Fn(&mut Ctx<'_, '_>, &Compiled) -> Flow + Send + Sync>;

struct Acl {
    entries: Vec<(bool, IpAddr, u8)>,
}

impl Acl {
    fn matches(&self, ip: IpAddr) -> bool {
        let mut verdict = false;
        let mut best = -1i32;
        for (neg, net, mask) in &self.entries {
            if in_net(ip, *net, *mask) && *mask as i32 > best {
                best = *mask as i32;
                verdict = !neg;
            }
        }
        verdict
    }
}

fn in_net(ip: IpAddr, net: IpAddr, mask: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = if mask == 0 { 0 } else { u32::MAX << (32 - mask.min(32) as u32) };
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = if mask == 0 { 0 } else { u128::MAX << (128 - mask.min(128) as u32) };
            u128::from(a) & m == u128::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V4(_)) => a.to_ipv4_mapped().is_some_and(|v4| in_net(IpAddr::V4(v4), net, mask)),
        _ => false,
    }
}

/// A compiled program.
pub struct Compiled {
    subs: HashMap<String, Vec<StmtFn>>,
    acls: HashMap<String, Acl>,
    /// The first backend's host and port, if the program declares one.
    pub backend: Option<String>,
}

const SUPPORTED_SUBS: [&str; 4] = ["vcl_recv", "vcl_hash", "vcl_backend_response", "vcl_deliver"];

fn unsupported<T>(what: &str, pos: Pos) -> Result<T, VclError> {
    Err(VclError { msg: format!("{what} is not supported yet by cache-d's VCL"), pos })
}

/// Compile a parsed, checked program.
pub fn compile(p: &Program) -> Result<Compiled, VclError> {
    super::check::check(p)?;
    let mut c = Compiled { subs: HashMap::new(), acls: HashMap::new(), backend: None };
    for item in &p.items {
        match item {
            Item::Acl { name, entries, .. } => {
                let mut list = Vec::new();
                for e in entries {
                    let ips: Vec<IpAddr> = if let Ok(ip) = e.addr.parse::<IpAddr>() {
                        vec![ip]
                    } else {
                        use std::net::ToSocketAddrs;
                        (e.addr.as_str(), 0).to_socket_addrs().map(|i| i.map(|s| s.ip()).collect()).unwrap_or_default()
                    };
                    if ips.is_empty() {
                        return Err(VclError {
                            msg: format!("ACL entry \"{}\" is not an address or a resolvable name", e.addr),
                            pos: e.pos,
                        });
                    }
                    for ip in ips {
                        let full = if ip.is_ipv4() { 32 } else { 128 };
                        list.push((e.negated, ip, e.mask.unwrap_or(full)));
                    }
                }
                c.acls.insert(name.clone(), Acl { entries: list });
            }
            Item::Backend { fields, .. } if c.backend.is_none() => {
                let get = |n: &str| {
                    fields.iter().find(|f| f.name == n).and_then(|f| match &f.value {
                        FieldValue::Expr(Expr::Str(s, _)) => Some(s.clone()),
                        FieldValue::Expr(Expr::Int(i, _)) => Some(i.to_string()),
                        _ => None,
                    })
                };
                let host = get("host").unwrap_or_else(|| "127.0.0.1".into());
                c.backend = Some(format!("{host}:{}", get("port").unwrap_or_else(|| "80".into())));
            }
            Item::Sub { name, pos, .. } if name.starts_with("vcl_") && !SUPPORTED_SUBS.contains(&name.as_str()) => {
                return unsupported(&format!("Subroutine {name}"), *pos);
            }
            _ => {}
        }
    }
    for item in &p.items {
        if let Item::Sub { name, body, .. } = item {
            let mut stmts = block(body, &c.acls)?;
            c.subs.entry(name.clone()).or_default().append(&mut stmts);
        }
    }
    Ok(c)
}

fn block(body: &[Stmt], acls: &HashMap<String, Acl>) -> Result<Vec<StmtFn>, VclError> {
    body.iter().map(|s| stmt(s, acls)).collect()
}

fn stmt(s: &Stmt, acls: &HashMap<String, Acl>) -> Result<StmtFn, VclError> {
    Ok(match s {
        Stmt::Set { target, op, value, pos } => {
            if *op != "=" {
                return unsupported(&format!("\"{op}\""), *pos);
            }
            let set = var_set(target, *pos)?;
            let v = expr(value, acls)?;
            Box::new(move |cx, c| {
                let val = v(cx, c);
                set(cx, val);
                Flow::Next
            })
        }
        Stmt::Unset { target, pos } => {
            let set = var_set(target, *pos)?;
            Box::new(move |cx, _| {
                set(cx, Val::None);
                Flow::Next
            })
        }
        Stmt::If { branches, otherwise, .. } => {
            let mut arms = Vec::new();
            for (cond, body) in branches {
                arms.push((expr(cond, acls)?, block(body, acls)?));
            }
            let other = match otherwise {
                Some(b) => block(b, acls)?,
                None => Vec::new(),
            };
            Box::new(move |cx, c| {
                for (cond, body) in &arms {
                    if cond(cx, c).truthy() {
                        return run(body, cx, c);
                    }
                }
                run(&other, cx, c)
            })
        }
        Stmt::Block(b) => {
            let b = block(b, acls)?;
            Box::new(move |cx, c| run(&b, cx, c))
        }
        Stmt::Return { action, args, .. } => {
            let action = action.clone();
            let args: Vec<ExprFn> = args.iter().map(|a| expr(a, acls)).collect::<Result<_, _>>()?;
            Box::new(move |cx, c| Flow::Return(action.clone(), args.iter().map(|a| a(cx, c)).collect()))
        }
        Stmt::Call { sub, .. } => {
            let sub = sub.clone();
            Box::new(move |cx, c| match c.subs.get(&sub) {
                Some(body) => run(body, cx, c),
                None => Flow::Next,
            })
        }
        Stmt::Expr(e) => {
            let f = expr(e, acls)?;
            Box::new(move |cx, c| {
                f(cx, c);
                Flow::Next
            })
        }
        Stmt::New { pos, .. } => return unsupported("\"new\"", *pos),
    })
}

fn run(body: &[StmtFn], cx: &mut Ctx<'_, '_>, c: &Compiled) -> Flow {
    for s in body {
        if let Flow::Return(a, v) = s(cx, c) {
            return Flow::Return(a, v);
        }
    }
    Flow::Next
}

type SetFn = Box<dyn Fn(&mut Ctx<'_, '_>, Val) + Send + Sync>;

fn header_set(h: &mut Headers, name: &str, v: Val) {
    match v {
        Val::None => h.unset(name),
        v => h.set(name, Bytes::from(v.text())),
    }
}

/// A variable that can be written (or unset).
fn var_set(name: &str, pos: Pos) -> Result<SetFn, VclError> {
    if let Some(h) = name.strip_prefix("req.http.") {
        let h = h.to_string();
        return Ok(Box::new(move |cx, v| {
            if let Some(r) = cx.req.as_deref_mut() {
                header_set(&mut r.headers, &h, v)
            }
        }));
    }
    if let Some(h) = name.strip_prefix("resp.http.") {
        let h = h.to_string();
        return Ok(Box::new(move |cx, v| {
            if let Some(r) = cx.resp.as_deref_mut() {
                header_set(r, &h, v)
            }
        }));
    }
    Ok(match name {
        "req.url" => Box::new(|cx, v| {
            if let Some(r) = cx.req.as_deref_mut() {
                r.url = Bytes::from(v.text());
            }
        }),
        "req.method" => Box::new(|cx, v| {
            if let Some(r) = cx.req.as_deref_mut() {
                r.method = Bytes::from(v.text());
            }
        }),
        "beresp.ttl" | "beresp.grace" | "beresp.keep" => {
            let which = name.to_string();
            Box::new(move |cx, v| {
                if let (Some(b), Some(n)) = (cx.beresp.as_deref_mut(), v.num()) {
                    match which.as_str() {
                        "beresp.ttl" => b.ttl = n,
                        "beresp.grace" => b.grace = n,
                        _ => b.keep = n,
                    }
                }
            })
        }
        "beresp.uncacheable" => Box::new(|cx, v| {
            if let Some(b) = cx.beresp.as_deref_mut() {
                b.bereq_uncacheable = v.truthy();
            }
        }),
        _ => return Err(VclError { msg: format!("Variable '{name}' cannot be set here (or is not supported yet)"), pos }),
    })
}

/// A variable's value.
fn var_get(name: &str, pos: Pos) -> Result<ExprFn, VclError> {
    fn hdr(h: &Headers, n: &str) -> Val {
        h.get(n).map(|v| Val::Str(String::from_utf8_lossy(v).into_owned())).unwrap_or(Val::None)
    }
    for (prefix, which) in [("req.http.", 0u8), ("resp.http.", 1), ("beresp.http.", 2)] {
        if let Some(h) = name.strip_prefix(prefix) {
            let h = h.to_string();
            return Ok(Box::new(move |cx, _| match which {
                0 => cx.req.as_deref().map(|r| hdr(&r.headers, &h)).unwrap_or(Val::None),
                1 => cx.resp.as_deref().map(|r| hdr(r, &h)).unwrap_or(Val::None),
                _ => cx.beresp.as_deref().map(|b| hdr(b.headers, &h)).unwrap_or(Val::None),
            }));
        }
    }
    let s = |b: &Bytes| Val::Str(String::from_utf8_lossy(b).into_owned());
    Ok(match name {
        "true" => Box::new(|_, _| Val::Bool(true)),
        "false" => Box::new(|_, _| Val::Bool(false)),
        "req.url" => Box::new(move |cx, _| cx.req.as_deref().map(|r| s(&r.url)).unwrap_or(Val::None)),
        "req.method" => Box::new(move |cx, _| cx.req.as_deref().map(|r| s(&r.method)).unwrap_or(Val::None)),
        "req.proto" => Box::new(|cx, _| {
            cx.req.as_deref().map(|r| Val::Str(if r.minor == 0 { "HTTP/1.0" } else { "HTTP/1.1" }.into())).unwrap_or(Val::None)
        }),
        "client.ip" => Box::new(|cx, _| cx.client_ip.map(|i| Val::Str(i.to_string())).unwrap_or(Val::None)),
        "server.ip" => Box::new(|cx, _| cx.req.as_deref().map(|r| Val::Str(r.server_ip.clone())).unwrap_or(Val::None)),
        "beresp.status" => Box::new(|cx, _| cx.beresp.as_deref().map(|b| Val::Int(b.status as i64)).unwrap_or(Val::None)),
        "beresp.ttl" => Box::new(|cx, _| cx.beresp.as_deref().map(|b| Val::Dur(b.ttl)).unwrap_or(Val::None)),
        "beresp.grace" => Box::new(|cx, _| cx.beresp.as_deref().map(|b| Val::Dur(b.grace)).unwrap_or(Val::None)),
        "beresp.keep" => Box::new(|cx, _| cx.beresp.as_deref().map(|b| Val::Dur(b.keep)).unwrap_or(Val::None)),
        _ => return Err(VclError { msg: format!("Variable '{name}' is not known (or not supported yet)"), pos }),
    })
}

/// std.querysort: the query string's parameters in sorted order (so
/// equivalent URLs hash alike); empty parameters are dropped.
pub fn querysort(url: &str) -> String {
    let Some((path, query)) = url.split_once('?') else { return url.to_string() };
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    if params.is_empty() {
        return path.to_string();
    }
    params.sort_unstable();
    format!("{path}?{}", params.join("&"))
}

/// VCL's replacement syntax (`\1` back-references) in regex's (`${1}`).
fn vcl_replacement(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' => out.push_str("$$"),
            '\\' => match chars.peek().copied() {
                Some(d) if d.is_ascii_digit() => {
                    out.push_str(&format!("${{{d}}}"));
                    chars.next();
                }
                Some('\\') => {
                    out.push('\\');
                    chars.next();
                }
                _ => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    out
}

fn regex_arg(e: &Expr) -> Result<Regex, VclError> {
    match e {
        Expr::Str(s, pos) => Regex::new(s).map_err(|err| VclError { msg: format!("Regexp compilation error: {err}"), pos: *pos }),
        other => Err(VclError { msg: "Expected a regular expression literal (a string)".into(), pos: other.pos() }),
    }
}

fn expr(e: &Expr, acls: &HashMap<String, Acl>) -> Result<ExprFn, VclError> {
    Ok(match e {
        Expr::Str(s, _) => {
            let s = s.clone();
            Box::new(move |_, _| Val::Str(s.clone()))
        }
        Expr::Int(i, _) => {
            let i = *i;
            Box::new(move |_, _| Val::Int(i))
        }
        Expr::Duration(d, _) => {
            let d = *d;
            Box::new(move |_, _| Val::Dur(d))
        }
        Expr::Real(_, pos) | Expr::Bytes(_, pos) => return unsupported("This kind of literal", *pos),
        Expr::Name(n, pos) => var_get(n, *pos)?,
        Expr::Not(x, _) => {
            let x = expr(x, acls)?;
            Box::new(move |cx, c| Val::Bool(!x(cx, c).truthy()))
        }
        Expr::Neg(x, _) => {
            let x = expr(x, acls)?;
            Box::new(move |cx, c| match x(cx, c) {
                Val::Int(i) => Val::Int(-i),
                Val::Dur(d) => Val::Dur(-d),
                _ => Val::None,
            })
        }
        Expr::Binary { op, left, right, pos } => {
            let op = *op;
            if matches!(op, "~" | "!~") {
                let l = expr(left, acls)?;
                let want = op == "~";
                if let Expr::Name(acl, _) = &**right {
                    if acls.contains_key(acl) {
                        let acl = acl.clone();
                        return Ok(Box::new(move |cx, c| {
                            let ip = l(cx, c).text().parse::<IpAddr>().ok();
                            let hit = ip.is_some_and(|ip| c.acls.get(&acl).is_some_and(|a| a.matches(ip)));
                            Val::Bool(hit == want)
                        }));
                    }
                }
                let re = regex_arg(right)?;
                return Ok(Box::new(move |cx, c| {
                    let v = l(cx, c);
                    // A missing value never matches.
                    let hit = !matches!(v, Val::None) && re.is_match(&v.text());
                    Val::Bool(hit == want)
                }));
            }
            let (l, r) = (expr(left, acls)?, expr(right, acls)?);
            match op {
                "&&" => Box::new(move |cx, c| Val::Bool(l(cx, c).truthy() && r(cx, c).truthy())),
                "||" => Box::new(move |cx, c| Val::Bool(l(cx, c).truthy() || r(cx, c).truthy())),
                "==" | "!=" => Box::new(move |cx, c| {
                    let (a, b) = (l(cx, c), r(cx, c));
                    let eq = match (a.num(), b.num(), &a, &b) {
                        (Some(x), Some(y), Val::Int(_) | Val::Dur(_), _) | (Some(x), Some(y), _, Val::Int(_) | Val::Dur(_)) => x == y,
                        _ => a.text() == b.text() && !(matches!(a, Val::None) ^ matches!(b, Val::None)),
                    };
                    Val::Bool(eq == (op == "=="))
                }),
                "<" | ">" | "<=" | ">=" => Box::new(move |cx, c| {
                    let (a, b) = (l(cx, c).num(), r(cx, c).num());
                    Val::Bool(match (a, b) {
                        (Some(x), Some(y)) => match op {
                            "<" => x < y,
                            ">" => x > y,
                            "<=" => x <= y,
                            _ => x >= y,
                        },
                        _ => false,
                    })
                }),
                "+" => Box::new(move |cx, c| match (l(cx, c), r(cx, c)) {
                    (Val::Int(a), Val::Int(b)) => Val::Int(a.saturating_add(b)),
                    (Val::Dur(a), Val::Dur(b)) => Val::Dur(a + b),
                    (a, b) => Val::Str(a.text() + &b.text()),
                }),
                "-" => Box::new(move |cx, c| match (l(cx, c), r(cx, c)) {
                    (Val::Int(a), Val::Int(b)) => Val::Int(a.saturating_sub(b)),
                    (Val::Dur(a), Val::Dur(b)) => Val::Dur(a - b),
                    _ => Val::None,
                }),
                _ => return unsupported(&format!("Operator \"{op}\""), *pos),
            }
        }
        Expr::Call { name, args, pos } => {
            let a: Vec<ExprFn> = args.iter().map(|x| expr(x, acls)).collect::<Result<_, _>>()?;
            match (name.as_str(), args.len()) {
                ("regsub" | "regsuball", 3) => {
                    let re = regex_arg(&args[1])?;
                    let all = name == "regsuball";
                    let (src, sub) = (a.into_iter().next(), expr(&args[2], acls)?);
                    let src = src.ok_or_else(|| VclError { msg: "regsub needs 3 arguments".into(), pos: *pos })?;
                    Box::new(move |cx, c| {
                        let s = src(cx, c).text();
                        let rep = vcl_replacement(&sub(cx, c).text());
                        Val::Str(if all {
                            re.replace_all(&s, rep.as_str()).into_owned()
                        } else {
                            re.replace(&s, rep.as_str()).into_owned()
                        })
                    })
                }
                ("hash_data", 1) => {
                    let x = a.into_iter().next().ok_or_else(|| VclError { msg: "hash_data needs an argument".into(), pos: *pos })?;
                    Box::new(move |cx, c| {
                        let v = x(cx, c).text();
                        if let Some(k) = cx.key.as_deref_mut() {
                            k.extend_from_slice(v.as_bytes());
                            k.push(0);
                        }
                        Val::None
                    })
                }
                ("std.tolower" | "std.toupper", 1) => {
                    let up = name == "std.toupper";
                    let x = a.into_iter().next().ok_or_else(|| VclError { msg: "needs an argument".into(), pos: *pos })?;
                    Box::new(move |cx, c| {
                        let t = x(cx, c).text();
                        Val::Str(if up { t.to_uppercase() } else { t.to_lowercase() })
                    })
                }
                ("std.integer", 2) => {
                    let mut it = a.into_iter();
                    let (x, fallback) = (it.next(), it.next());
                    let (Some(x), Some(fallback)) = (x, fallback) else { return unsupported("std.integer()", *pos) };
                    Box::new(move |cx, c| match x(cx, c).text().trim().parse::<i64>() {
                        Ok(n) => Val::Int(n),
                        Err(_) => fallback(cx, c),
                    })
                }
                ("std.duration", 2) => {
                    let mut it = a.into_iter();
                    let (x, fallback) = (it.next(), it.next());
                    let (Some(x), Some(fallback)) = (x, fallback) else { return unsupported("std.duration()", *pos) };
                    Box::new(move |cx, c| match crate::cache::ban::parse_duration(x(cx, c).text().trim()) {
                        Some(d) => Val::Dur(d),
                        None => fallback(cx, c),
                    })
                }
                ("std.querysort", 1) => {
                    let x = a.into_iter().next().ok_or_else(|| VclError { msg: "needs an argument".into(), pos: *pos })?;
                    Box::new(move |cx, c| Val::Str(querysort(&x(cx, c).text())))
                }
                _ => return unsupported(&format!("Function {name}() with {} arguments", args.len()), *pos),
            }
        }
    })
}

/// The compiled program as request-path hooks.
pub struct VclPolicy {
    pub name: String,
    pub prog: Arc<Compiled>,
}

impl VclPolicy {
    fn sub(&self, name: &str, cx: &mut Ctx<'_, '_>) -> Option<(String, Vec<Val>)> {
        let body = self.prog.subs.get(name)?;
        match run(body, cx, &self.prog) {
            Flow::Return(a, v) => Some((a, v)),
            Flow::Next => None,
        }
    }
}

impl Policy for VclPolicy {
    fn name(&self) -> &str {
        &self.name
    }
    fn recv(&self, req: &mut Req) -> Recv {
        let ip = req.client_ip;
        let ret = {
            let mut cx = Ctx { req: Some(req), key: None, beresp: None, resp: None, client_ip: ip };
            self.sub("vcl_recv", &mut cx)
        };
        match ret {
            None => policy::builtin_recv(req),
            Some((a, v)) => match a.as_str() {
                "hash" => Recv::Hash,
                "pass" => Recv::Pass,
                "pipe" => Recv::Pipe,
                "purge" => Recv::Purge,
                "synth" => {
                    let code = v.first().and_then(Val::num).unwrap_or(503.0) as u16;
                    let reason: &'static str = match code {
                        200 => "OK",
                        301 => "Moved Permanently",
                        302 => "Found",
                        400 => "Bad Request",
                        403 => "Forbidden",
                        404 => "Not Found",
                        405 => "Method Not Allowed",
                        _ => "Unavailable",
                    };
                    Recv::Synth(code, reason)
                }
                // fail (and actions checked away at compile time): 503.
                _ => Recv::Synth(503, "VCL failed"),
            },
        }
    }
    fn hash(&self, req: &Req, key: &mut Vec<u8>) {
        let mut copy = req.clone();
        let returned = {
            let mut cx = Ctx { req: Some(&mut copy), key: Some(key), beresp: None, resp: None, client_ip: req.client_ip };
            self.sub("vcl_hash", &mut cx).is_some()
        };
        if !returned {
            policy::builtin_hash(req, key);
        }
    }
    fn backend_response(&self, beresp: &mut Beresp<'_>) -> BerespAction {
        // The subroutine works on a copy whose borrow ends here; its
        // changes are copied back.
        let mut view = Beresp {
            status: beresp.status,
            headers: beresp.headers,
            ttl: beresp.ttl,
            grace: beresp.grace,
            keep: beresp.keep,
            bereq_uncacheable: beresp.bereq_uncacheable,
        };
        let ret = {
            let mut cx = Ctx { req: None, key: None, beresp: Some(&mut view), resp: None, client_ip: None };
            self.sub("vcl_backend_response", &mut cx)
        };
        beresp.ttl = view.ttl;
        beresp.grace = view.grace;
        beresp.keep = view.keep;
        beresp.bereq_uncacheable = view.bereq_uncacheable;
        match ret {
            None => policy::builtin_backend_response(beresp),
            Some((a, v)) => match a.as_str() {
                "pass" => BerespAction::HitForPass(v.first().and_then(Val::num).unwrap_or(beresp.ttl.max(1.0))),
                _ if beresp.bereq_uncacheable => BerespAction::HitForMiss(beresp.ttl.max(1.0)),
                _ => BerespAction::Deliver,
            },
        }
    }
    fn deliver(&self, req: &Req, resp: &mut Headers) {
        let mut copy = req.clone();
        let mut cx = Ctx { req: Some(&mut copy), key: None, beresp: None, resp: Some(resp), client_ip: req.client_ip };
        let _ = self.sub("vcl_deliver", &mut cx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcl::parse_source;

    fn recv_url(vcl: &str, url: &str, hdrs: &[(&str, &str)]) -> (Recv, String, Headers) {
        let p = parse_source("t.vcl", vcl).unwrap_or_else(|e| panic!("{e}"));
        let c = compile(&p).unwrap_or_else(|e| panic!("{}", e.render(&p.files)));
        let pol = VclPolicy { name: "t".into(), prog: Arc::new(c) };
        let mut req = Req {
            method: Bytes::from_static(b"GET"),
            url: Bytes::copy_from_slice(url.as_bytes()),
            minor: 1,
            headers: Headers(
                hdrs.iter().map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect(),
            ),
            server_ip: "127.0.0.1".into(),
            client_ip: Some("10.1.2.3".parse().unwrap()),
        };
        let r = pol.recv(&mut req);
        (r, String::from_utf8_lossy(&req.url).into_owned(), req.headers)
    }

    #[test]
    fn std_functions_and_regsub() {
        assert_eq!(querysort("/a?b=2&a=1&&c"), "/a?a=1&b=2&c");
        assert_eq!(querysort("/a?"), "/a");
        assert_eq!(querysort("/a"), "/a");
        let vcl = r#"vcl 4.1;
            sub vcl_recv {
                set req.url = std.querysort(req.url);
                set req.http.X-N = std.integer(req.http.X-Num, 7) + 1;
                set req.http.X-D = std.duration("90s", 1s) + 30s;
                set req.http.X-R = regsub(req.url, "^/(\w+)\?.*$", "\1!");
                return (hash);
            }"#;
        let (r, url, h) = recv_url(vcl, "/page?z=1&a=2", &[("X-Num", "41")]);
        assert_eq!(r, Recv::Hash);
        assert_eq!(url, "/page?a=2&z=1");
        assert_eq!(h.get("x-n").unwrap(), &b"42"[..]);
        assert_eq!(h.get("x-d").unwrap(), &b"120.000"[..]);
        assert_eq!(h.get("x-r").unwrap(), &b"page!"[..]);
        let (_, _, h) = recv_url(vcl, "/p", &[("X-Num", "lots")]);
        assert_eq!(h.get("x-n").unwrap(), &b"8"[..], "the fallback");
    }

    #[test]
    fn acls_pick_the_longest_prefix() {
        let vcl = r#"vcl 4.1;
            acl inner { "10.0.0.0"/8; ! "10.1.0.0"/16; "10.1.2.3"; }
            sub vcl_recv { if (client.ip ~ inner) { return (pass); } }"#;
        // 10.1.2.3 is in /8, excluded by /16, included again by /32.
        assert_eq!(recv_url(vcl, "/", &[("Host", "x")]).0, Recv::Pass);
        assert!(in_net("10.1.9.9".parse().unwrap(), "10.1.0.0".parse().unwrap(), 16));
        assert!(!in_net("11.0.0.1".parse().unwrap(), "10.0.0.0".parse().unwrap(), 8));
        // Falls through to the built-in policy when the sub does not return.
        let (r, _, _) = recv_url("vcl 4.1; sub vcl_recv { set req.http.X = \"1\"; }", "/", &[("Host", "x"), ("Cookie", "a=b")]);
        assert_eq!(r, Recv::Pass, "the built-in policy passes cookies");
    }

    #[test]
    fn unsupported_constructs_are_errors() {
        for src in [
            "sub vcl_hit { return (deliver); }",
            "sub vcl_recv { set req.http.x = std.log(\"a\"); }",
            "sub vcl_recv { set req.ttl = 1s; }",
            "sub vcl_recv { set req.http.x += \"a\"; }",
        ] {
            let p = parse_source("t.vcl", &format!("vcl 4.1;\n{src}")).unwrap();
            let e = compile(&p).err().expect(src);
            assert!(e.msg.contains("not supported yet") || e.msg.contains("cannot be set"), "{src}: {}", e.msg);
        }
    }
}
