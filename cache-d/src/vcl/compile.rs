//! Compiling a checked program into closures (evaluated per request; the
//! text is never walked again), and the policy that runs them in the
//! engine's subroutines, falling through to the built-in policy when a
//! subroutine does not return.
//!
//! Variables are checked at compile time against the subroutines they are
//! used in (Varnish's read/write rules, see [`access`]), in every context
//! that reaches a user subroutine. What is not implemented is a compile
//! error that says so, never a silent no-op.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use common::vsl::Tag;
use regex::Regex;

use super::ast::*;
use super::diag::VclError;
use crate::policy::{self, Action, Headers, NoEnv, Policy, Sub, Task};

/// A value at run time.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Str(String),
    Bool(bool),
    Int(i64),
    Real(f64),
    Dur(f64),
    Bytes(u64),
    /// Seconds since the epoch.
    Time(f64),
    Ip(IpAddr, u16),
    Backend(String),
    /// An unset header or variable.
    None,
}

impl Val {
    pub fn text(&self) -> String {
        match self {
            Val::Str(s) => s.clone(),
            Val::Bool(b) => b.to_string(),
            Val::Int(i) => i.to_string(),
            Val::Real(d) | Val::Dur(d) => format!("{d:.3}"),
            Val::Bytes(b) => b.to_string(),
            Val::Time(t) => common::httpdate::format(*t),
            Val::Ip(ip, _) => ip.to_string(),
            Val::Backend(b) => b.clone(),
            Val::None => String::new(),
        }
    }
    /// In a boolean context: a string (header) is true when it is set.
    fn truthy(&self) -> bool {
        match self {
            Val::Bool(b) => *b,
            Val::Int(i) => *i != 0,
            Val::Real(d) | Val::Dur(d) => *d != 0.0,
            Val::Bytes(b) => *b != 0,
            Val::None => false,
            _ => true,
        }
    }
    fn num(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Real(d) | Val::Dur(d) | Val::Time(d) => Some(*d),
            Val::Bytes(b) => Some(*b as f64),
            Val::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
    fn is_numeric(&self) -> bool {
        matches!(self, Val::Int(_) | Val::Real(_) | Val::Dur(_) | Val::Bytes(_) | Val::Time(_))
    }
    fn ip(&self) -> Option<IpAddr> {
        match self {
            Val::Ip(ip, _) => Some(*ip),
            Val::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

enum Flow {
    Next,
    Return(Action),
}

type ExprFn = Box<dyn Fn(&mut Task<'_>, &Compiled) -> Val + Send + Sync>;
type StmtFn = Box<dyn Fn(&mut Task<'_>, &Compiled) -> Flow + Send + Sync>;
type SetFn = Box<dyn Fn(&mut Task<'_>, Val) + Send + Sync>;

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
    defined: [bool; Sub::ALL.len()],
    acls: HashMap<String, Acl>,
    /// The backends declared, in order; the first is the default.
    pub backends: Vec<String>,
    /// Each backend's address and settings, in order.
    pub backend_specs: Vec<BackendSpec>,
    /// The backends themselves, made when the program is loaded.
    runtime: std::sync::OnceLock<HashMap<String, Arc<crate::backend::Backend>>>,
    /// The directors vcl_init made.
    directors: std::sync::Mutex<HashMap<String, Arc<crate::director::Director>>>,
    /// The first backend's host and port, if the program declares one.
    pub backend: Option<String>,
}

impl Compiled {
    fn directors(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<crate::director::Director>>> {
        self.directors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The healthy backend `name` stands for: itself if it is a backend,
    /// what a director picks (nested directors followed) if it is one.
    pub fn resolve(&self, name: &str, depth: usize) -> Option<Arc<crate::backend::Backend>> {
        if let Some(b) = self.runtime.get().and_then(|r| r.get(name)) {
            return b.healthy().then(|| b.clone());
        }
        let d = self.directors().get(name).cloned()?;
        if depth > 8 {
            return None;
        }
        let picked = d.pick(None, &|m| self.usable(m, depth + 1))?;
        self.resolve(&picked, depth + 1)
    }

    /// Could `name` take a request now? (A director: could one of its
    /// members; asking changes no director's state.)
    fn usable(&self, name: &str, depth: usize) -> bool {
        if let Some(b) = self.runtime.get().and_then(|r| r.get(name)) {
            return b.healthy();
        }
        let Some(d) = self.directors().get(name).cloned() else { return false };
        depth <= 8 && d.member_names().iter().any(|m| self.usable(m, depth + 1))
    }

    /// Like [`resolve`], but a backend is returned even when sick (so the
    /// fetch fails as "sick" rather than "no backend").
    fn backend_named(&self, name: &str) -> Option<Arc<crate::backend::Backend>> {
        self.runtime.get().and_then(|r| r.get(name).cloned()).or_else(|| self.resolve(name, 0))
    }
}

fn unsupported<T>(what: &str, pos: Pos) -> Result<T, VclError> {
    Err(VclError { msg: format!("{what} is not supported yet by cache-d's VCL"), pos })
}

fn err<T>(msg: impl Into<String>, pos: Pos) -> Result<T, VclError> {
    Err(VclError { msg: msg.into(), pos })
}

/// What a statement or expression is compiled against: the subroutines it
/// can run in, the ACLs and backends declared.
struct Scope<'a> {
    ctx: Vec<Sub>,
    acls: &'a HashMap<String, Acl>,
    backends: &'a [String],
    /// Objects made with `new` (directors), by name.
    objects: &'a HashMap<String, crate::director::Kind>,
}

/// Compile a parsed program; checks first.
pub fn compile(p: &Program) -> Result<Compiled, VclError> {
    let contexts = super::check::check(p)?;
    let mut c = Compiled {
        subs: HashMap::new(),
        defined: [false; Sub::ALL.len()],
        acls: HashMap::new(),
        backends: Vec::new(),
        backend_specs: Vec::new(),
        runtime: std::sync::OnceLock::new(),
        directors: std::sync::Mutex::new(HashMap::new()),
        backend: None,
    };
    let mut probes: HashMap<String, crate::probe::ProbeSpec> = HashMap::new();
    for item in &p.items {
        match item {
            Item::Probe { name, fields, .. } => {
                check_probe(fields)?;
                probes.insert(name.clone(), probe_spec(fields));
            }
            Item::Acl { name, entries, pos } => {
                if c.acls.contains_key(name) {
                    return err(format!("ACL '{name}' redefined"), *pos);
                }
                let mut list = Vec::new();
                for e in entries {
                    let ips: Vec<IpAddr> = if let Ok(ip) = e.addr.parse::<IpAddr>() {
                        vec![ip]
                    } else {
                        use std::net::ToSocketAddrs;
                        (e.addr.as_str(), 0).to_socket_addrs().map(|i| i.map(|s| s.ip()).collect()).unwrap_or_default()
                    };
                    if ips.is_empty() {
                        return err(format!("ACL entry \"{}\" is not an address or a resolvable name", e.addr), e.pos);
                    }
                    for ip in ips {
                        let full = if ip.is_ipv4() { 32 } else { 128 };
                        list.push((e.negated, ip, e.mask.unwrap_or(full)));
                    }
                }
                c.acls.insert(name.clone(), Acl { entries: list });
            }
            Item::Backend { name, fields, pos } => {
                if c.backends.contains(name) {
                    return err(format!("Backend '{name}' redefined"), *pos);
                }
                check_backend(name, fields, *pos)?;
                c.backends.push(name.clone());
                c.backend_specs.push(backend_spec(name, fields, &probes, *pos)?);
                if c.backend.is_none() {
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
            }
            _ => {}
        }
    }
    // Objects are declared by `new` in vcl_init; collected first so every
    // subroutine can call them.
    let mut objects: HashMap<String, crate::director::Kind> = HashMap::new();
    for item in &p.items {
        if let Item::Sub { body, .. } = item {
            collect_objects(body, &mut objects)?;
        }
    }
    for item in &p.items {
        if let Item::Sub { name, body, .. } = item {
            let scope =
                Scope { ctx: contexts.get(name).cloned().unwrap_or_default(), acls: &c.acls, backends: &c.backends, objects: &objects };
            let mut stmts = block(body, &scope)?;
            c.subs.entry(name.clone()).or_default().append(&mut stmts);
            if let Some(s) = Sub::from_name(name) {
                c.defined[s as usize] = true;
            }
        }
    }
    Ok(c)
}

/// A declared backend: where it is and its settings.
#[derive(Clone, Debug)]
pub struct BackendSpec {
    pub name: String,
    pub host: String,
    pub port: String,
    pub cfg: crate::backend::BackendCfg,
}

/// A probe's settings, with Varnish's defaults for what is left out.
fn probe_spec(fields: &[Field]) -> crate::probe::ProbeSpec {
    let mut p = crate::probe::ProbeSpec::default();
    let mut initial = None;
    for f in fields {
        match (f.name.as_str(), &f.value) {
            ("url", FieldValue::Expr(Expr::Str(s, _))) => p.url = s.clone(),
            ("request", FieldValue::Expr(e)) => {
                // `.request = "GET / HTTP/1.1" "Host: x" "Connection: close";`
                // arrives as a concatenation of strings.
                let mut lines = Vec::new();
                collect_strings(e, &mut lines);
                p.request = Some(lines);
            }
            ("expected_response", FieldValue::Expr(Expr::Int(n, _))) => p.expected = (*n).clamp(100, 999) as u16,
            ("timeout", FieldValue::Expr(Expr::Duration(d, _))) => p.timeout = std::time::Duration::from_secs_f64(d.max(0.001)),
            ("interval", FieldValue::Expr(Expr::Duration(d, _))) => p.interval = std::time::Duration::from_secs_f64(d.max(0.01)),
            ("window", FieldValue::Expr(Expr::Int(n, _))) => p.window = (*n).clamp(1, 64) as u32,
            ("threshold", FieldValue::Expr(Expr::Int(n, _))) => p.threshold = (*n).clamp(0, 64) as u32,
            ("initial", FieldValue::Expr(Expr::Int(n, _))) => initial = Some((*n).clamp(0, 64) as u32),
            _ => {}
        }
    }
    // Varnish: .initial defaults to .threshold - 1.
    p.initial = initial.unwrap_or(p.threshold.saturating_sub(1));
    p
}

fn collect_strings(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::Str(s, _) => out.push(s.clone()),
        Expr::Binary { left, right, .. } => {
            collect_strings(left, out);
            collect_strings(right, out);
        }
        _ => {}
    }
}

fn backend_spec(
    name: &str,
    fields: &[Field],
    probes: &HashMap<String, crate::probe::ProbeSpec>,
    pos: Pos,
) -> Result<BackendSpec, VclError> {
    let text = |n: &str| {
        field_value(fields, n).and_then(|f| match &f.value {
            FieldValue::Expr(Expr::Str(s, _)) => Some(s.clone()),
            FieldValue::Expr(Expr::Int(i, _)) => Some(i.to_string()),
            _ => None,
        })
    };
    let dur = |n: &str| {
        field_value(fields, n).and_then(|f| match &f.value {
            FieldValue::Expr(Expr::Duration(d, _)) => Some(std::time::Duration::from_secs_f64(d.max(0.0))),
            _ => None,
        })
    };
    let max = field_value(fields, "max_connections").and_then(|f| match &f.value {
        FieldValue::Expr(Expr::Int(i, _)) if *i > 0 => Some(*i as usize),
        _ => None,
    });
    let probe = match field_value(fields, "probe").map(|f| &f.value) {
        Some(FieldValue::Block(inner)) => Some(probe_spec(inner)),
        Some(FieldValue::Name(n)) | Some(FieldValue::Expr(Expr::Name(n, _))) => Some(
            probes
                .get(n)
                .cloned()
                .ok_or_else(|| VclError { msg: format!("Probe '{n}' is not declared (declare it before the backend)"), pos })?,
        ),
        _ => None,
    };
    Ok(BackendSpec {
        name: name.to_string(),
        host: text("host").unwrap_or_else(|| "127.0.0.1".into()),
        port: text("port").unwrap_or_else(|| "80".into()),
        cfg: crate::backend::BackendCfg {
            connect_timeout: dur("connect_timeout"),
            first_byte_timeout: dur("first_byte_timeout"),
            between_bytes_timeout: dur("between_bytes_timeout"),
            max_connections: max,
            host_header: text("host_header"),
            probe,
        },
    })
}

const BACKEND_FIELDS: [&str; 13] = [
    "host",
    "port",
    "path",
    "host_header",
    "connect_timeout",
    "first_byte_timeout",
    "between_bytes_timeout",
    "probe",
    "proxy_header",
    "max_connections",
    "authority",
    "via",
    "preamble",
];
const PROBE_FIELDS: [&str; 8] = ["url", "request", "expected_response", "timeout", "interval", "initial", "window", "threshold"];

fn field_value<'f>(fields: &'f [Field], name: &str) -> Option<&'f Field> {
    fields.iter().find(|f| f.name == name)
}

/// A backend declaration: known fields of the right kinds, an address that
/// resolves (at load, as Varnish does).
fn check_backend(name: &str, fields: &[Field], pos: Pos) -> Result<(), VclError> {
    for f in fields {
        if !BACKEND_FIELDS.contains(&f.name.as_str()) {
            return err(format!("Unknown field: '{}' (backends take: {})", f.name, BACKEND_FIELDS.join(", ")), f.pos);
        }
        if fields.iter().filter(|g| g.name == f.name).count() > 1 {
            return err(format!("Field '{}' redefined", f.name), f.pos);
        }
        match (f.name.as_str(), &f.value) {
            ("connect_timeout" | "first_byte_timeout" | "between_bytes_timeout", FieldValue::Expr(Expr::Duration(..))) => {}
            ("connect_timeout" | "first_byte_timeout" | "between_bytes_timeout", _) => {
                return err(format!("'.{}' takes a duration (e.g. 5s)", f.name), f.pos);
            }
            ("max_connections" | "proxy_header", FieldValue::Expr(Expr::Int(..))) => {}
            ("max_connections" | "proxy_header", _) => return err(format!("'.{}' takes a number", f.name), f.pos),
            ("probe", FieldValue::Block(inner)) => check_probe(inner)?,
            ("probe", _) => {}
            (_, FieldValue::Expr(Expr::Str(..))) => {}
            ("port", FieldValue::Expr(Expr::Int(..))) => {}
            _ => return err(format!("'.{}' takes a string", f.name), f.pos),
        }
    }
    let text = |n: &str| {
        field_value(fields, n).and_then(|f| match &f.value {
            FieldValue::Expr(Expr::Str(s, _)) => Some(s.clone()),
            FieldValue::Expr(Expr::Int(i, _)) => Some(i.to_string()),
            _ => None,
        })
    };
    let Some(host) = text("host") else {
        if field_value(fields, "path").is_some() {
            return unsupported("A backend on a Unix socket (.path)", pos);
        }
        return err(format!("Mandatory field 'host' missing in backend '{name}'"), pos);
    };
    let port = text("port").unwrap_or_else(|| "80".into());
    use std::net::ToSocketAddrs;
    let resolves = port.parse::<u16>().is_ok()
        && (host.as_str(), port.parse::<u16>().unwrap_or(0)).to_socket_addrs().is_ok_and(|mut a| a.next().is_some());
    if !resolves {
        let at = field_value(fields, "host").map_or(pos, |f| f.pos);
        return err(format!("Backend host '{host}' port '{port}' could not be resolved to an IP address"), at);
    }
    Ok(())
}

fn check_probe(fields: &[Field]) -> Result<(), VclError> {
    for f in fields {
        if !PROBE_FIELDS.contains(&f.name.as_str()) {
            return err(format!("Unknown field: '{}' (probes take: {})", f.name, PROBE_FIELDS.join(", ")), f.pos);
        }
        match (f.name.as_str(), &f.value) {
            ("timeout" | "interval", FieldValue::Expr(Expr::Duration(..))) => {}
            ("timeout" | "interval", _) => return err(format!("'.{}' takes a duration (e.g. 5s)", f.name), f.pos),
            ("initial" | "window" | "threshold" | "expected_response", FieldValue::Expr(Expr::Int(n, _))) => {
                if f.name != "expected_response" && !(0..=64).contains(n) {
                    return err(format!("'.{}' must be between 0 and 64", f.name), f.pos);
                }
            }
            ("initial" | "window" | "threshold" | "expected_response", _) => return err(format!("'.{}' takes a number", f.name), f.pos),
            (_, FieldValue::Expr(Expr::Str(..))) => {}
            _ => return err(format!("'.{}' takes a string", f.name), f.pos),
        }
    }
    if field_value(fields, "url").is_some() && field_value(fields, "request").is_some() {
        return err("A probe takes .url or .request, not both", fields[0].pos);
    }
    let num = |n: &str| {
        field_value(fields, n).and_then(|f| match &f.value {
            FieldValue::Expr(Expr::Int(i, _)) => Some(*i),
            _ => None,
        })
    };
    if let (Some(t), Some(w)) = (num("threshold"), num("window")) {
        if t > w {
            let at = field_value(fields, "threshold").map_or(Pos::default(), |f| f.pos);
            return err(format!("Probe .threshold ({t}) is larger than .window ({w})"), at);
        }
    }
    Ok(())
}

/// The directors `new` makes, with their kind; anything else `new` is
/// refused.
fn collect_objects(body: &[Stmt], out: &mut HashMap<String, crate::director::Kind>) -> Result<(), VclError> {
    for s in body {
        match s {
            Stmt::New { name, ctor, pos } => {
                let Expr::Call { name: ctor_name, args, pos: cpos } = ctor else {
                    return err("\"new\" takes a constructor, e.g. directors.round_robin()", *pos);
                };
                let sticky = match args.first() {
                    Some(Expr::Name(b, _)) => b == "true",
                    _ => false,
                };
                let Some(kind) = crate::director::Kind::from_ctor(ctor_name, sticky) else {
                    return unsupported(&format!("Object {ctor_name}()"), *cpos);
                };
                if out.insert(name.clone(), kind).is_some() {
                    return err(format!("Object '{name}' redefined"), *pos);
                }
            }
            Stmt::If { branches, otherwise, .. } => {
                for (_, b) in branches {
                    collect_objects(b, out)?;
                }
                if let Some(o) = otherwise {
                    collect_objects(o, out)?;
                }
            }
            Stmt::Block(b) => collect_objects(b, out)?,
            _ => {}
        }
    }
    Ok(())
}

fn block(body: &[Stmt], sc: &Scope<'_>) -> Result<Vec<StmtFn>, VclError> {
    body.iter().map(|s| stmt(s, sc)).collect()
}

fn stmt(s: &Stmt, sc: &Scope<'_>) -> Result<StmtFn, VclError> {
    Ok(match s {
        Stmt::Set { target, op, value, pos } => {
            let set = var_set(target, *pos, sc)?;
            let v = expr(value, sc)?;
            if *op == "=" {
                if let Expr::Name(b, bpos) = value {
                    backend_assign(target, b, *bpos, sc)?;
                }
                Box::new(move |t, c| {
                    let val = v(t, c);
                    set(t, val);
                    Flow::Next
                })
            } else {
                let cur = var_get(target, *pos, sc)?;
                let bin: &'static str = match *op {
                    "+=" => "+",
                    "-=" => "-",
                    "*=" => "*",
                    _ => "/",
                };
                Box::new(move |t, c| {
                    let (a, b) = (cur(t, c), v(t, c));
                    match arith(bin, a, b) {
                        Ok(val) => set(t, val),
                        Err(e) => fail(t, e),
                    }
                    Flow::Next
                })
            }
        }
        Stmt::Unset { target, pos } => {
            if !target.contains(".http.") {
                return err(format!("'{target}' cannot be unset (only headers can)"), *pos);
            }
            let set = var_set(target, *pos, sc)?;
            Box::new(move |t, _| {
                set(t, Val::None);
                Flow::Next
            })
        }
        Stmt::If { branches, otherwise, .. } => {
            let mut arms = Vec::new();
            for (cond, body) in branches {
                arms.push((expr(cond, sc)?, block(body, sc)?));
            }
            let other = match otherwise {
                Some(b) => block(b, sc)?,
                None => Vec::new(),
            };
            Box::new(move |t, c| {
                for (cond, body) in &arms {
                    if cond(t, c).truthy() {
                        return run(body, t, c);
                    }
                }
                run(&other, t, c)
            })
        }
        Stmt::Block(b) => {
            let b = block(b, sc)?;
            Box::new(move |t, c| run(&b, t, c))
        }
        Stmt::Return { action, args, pos } => ret(action, args, *pos, sc)?,
        Stmt::Call { sub, pos } if super::check::builtin_part(sub).is_some() => {
            let part = super::check::builtin_part(sub).expect("checked");
            if let Some(other) = sc.ctx.iter().find(|s| **s != part) {
                return err(format!("'{sub}' can only be called from {} (not {})", part.name(), other.name()), *pos);
            }
            // The built-in half runs; its final default return means
            // "go on" (as the call in Varnish 7's builtin.vcl does).
            Box::new(move |t, _| {
                let a = policy::builtin(part, t);
                if a == policy::fallthrough(part) {
                    Flow::Next
                } else {
                    Flow::Return(a)
                }
            })
        }
        Stmt::Call { sub, .. } => {
            let sub = sub.clone();
            Box::new(move |t, c| match c.subs.get(&sub) {
                Some(body) => run(body, t, c),
                None => Flow::Next,
            })
        }
        Stmt::Expr(e) => {
            let f = expr(e, sc)?;
            Box::new(move |t, c| {
                f(t, c);
                Flow::Next
            })
        }
        Stmt::New { name, .. } => {
            let kind = sc.objects[name];
            let name = name.clone();
            Box::new(move |_, c| {
                c.directors().insert(name.clone(), Arc::new(crate::director::Director::new(&name, kind)));
                Flow::Next
            })
        }
    })
}

/// `return (action)`: its arguments evaluated when it runs.
fn ret(action: &str, args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<StmtFn, VclError> {
    let a: Vec<ExprFn> = args.iter().map(|x| expr(x, sc)).collect::<Result<_, _>>()?;
    let fixed = match (action, a.len()) {
        ("ok", 0) => Action::Ok,
        ("fail", 0) => Action::Fail,
        ("pass", 0) => Action::Pass,
        ("pipe", 0) => Action::Pipe,
        ("hash", 0) => Action::Hash,
        ("purge", 0) => Action::Purge,
        ("restart", 0) => Action::Restart,
        ("fetch", 0) => Action::Fetch,
        ("lookup", 0) => Action::Lookup,
        ("deliver", 0) => Action::Deliver,
        ("miss", 0) => Action::Miss,
        ("abandon", 0) => Action::Abandon,
        ("retry", 0) => Action::Retry,
        ("synth" | "error", 1 | 2) => {
            let err_side = action == "error";
            return Ok(Box::new(move |t, c| {
                let status = a[0](t, c).num().unwrap_or(503.0);
                let status = if (100.0..=65535.0).contains(&status) { status as u16 } else { 503 };
                let reason = a.get(1).map(|r| r(t, c).text()).filter(|r| !r.is_empty());
                let reason = reason.unwrap_or_else(|| policy::reason_phrase(status % 1000).to_string());
                Flow::Return(if err_side { Action::Error(status, reason) } else { Action::Synth(status, reason) })
            }));
        }
        ("error", 0) => Action::Error(503, "Backend fetch failed".into()),
        ("pass", 1) if sc.ctx.iter().all(|s| *s == Sub::BackendResponse) => {
            return Ok(Box::new(move |t, c| Flow::Return(Action::PassFor(a[0](t, c).num().unwrap_or(0.0)))));
        }
        ("vcl", _) => return unsupported("return (vcl(...)) (switching to a labelled VCL)", pos),
        (other, n) => return err(format!("return ({other}) does not take {n} argument(s)"), pos),
    };
    Ok(Box::new(move |_, _| Flow::Return(fixed.clone())))
}

fn run(body: &[StmtFn], t: &mut Task<'_>, c: &Compiled) -> Flow {
    for s in body {
        if let Flow::Return(a) = s(t, c) {
            return Flow::Return(a);
        }
        if t.failed.is_some() {
            return Flow::Return(Action::Fail);
        }
    }
    Flow::Next
}

/// A runtime failure: logged (VCL_Error); the subroutine returns fail.
fn fail(t: &mut Task<'_>, msg: String) {
    t.record(Tag::VclError, msg.as_bytes());
    t.failed.get_or_insert(msg);
}

/// A backend name on the right of `set req.backend_hint =` / `set
/// bereq.backend =` must be declared.
fn backend_assign(target: &str, name: &str, pos: Pos, sc: &Scope<'_>) -> Result<(), VclError> {
    if !matches!(target, "req.backend_hint" | "bereq.backend") || sc.backends.iter().any(|b| b == name) {
        return Ok(());
    }
    err(format!("Backend '{name}' is not declared"), pos)
}

const fn mask(subs: &[Sub]) -> u32 {
    let mut m = 0;
    let mut i = 0;
    while i < subs.len() {
        m |= 1 << subs[i] as u32;
        i += 1;
    }
    m
}

const CLIENT: u32 = mask(&[Sub::Recv, Sub::Pipe, Sub::Pass, Sub::Hash, Sub::Purge, Sub::Hit, Sub::Miss, Sub::Deliver, Sub::Synth]);
const BACKEND: u32 = mask(&[Sub::BackendFetch, Sub::BackendResponse, Sub::BackendError]);
const ALL: u32 = CLIENT | BACKEND | mask(&[Sub::Init, Sub::Fini]);
const BERESP: u32 = mask(&[Sub::BackendResponse, Sub::BackendError]);
const BEREQ: u32 = BACKEND | mask(&[Sub::Pipe]);
const RESP: u32 = mask(&[Sub::Deliver, Sub::Synth]);
const HIT: u32 = mask(&[Sub::Hit]);

/// Where a variable can be read and where written (vcl-var(7)), as masks
/// of subroutines. Names ending in '.' are header prefixes.
const ACCESS: &[(&str, u32, u32)] = &[
    ("now", ALL, 0),
    ("server.hostname", ALL, 0),
    ("server.identity", ALL, 0),
    ("server.ip", CLIENT | BACKEND, 0),
    ("local.ip", CLIENT | BACKEND, 0),
    ("client.ip", CLIENT | BACKEND, 0),
    ("remote.ip", CLIENT | BACKEND, 0),
    ("client.identity", CLIENT | BACKEND, CLIENT),
    ("req.method", CLIENT, CLIENT),
    ("req.url", CLIENT, CLIENT),
    ("req.proto", CLIENT, CLIENT),
    ("req.http.", CLIENT, CLIENT),
    ("req.xid", CLIENT, 0),
    ("req.restarts", CLIENT, 0),
    ("req.esi_level", CLIENT, 0),
    ("req.can_gzip", CLIENT, 0),
    ("req.is_hitmiss", CLIENT, 0),
    ("req.is_hitpass", CLIENT, 0),
    ("req.ttl", CLIENT, CLIENT),
    ("req.grace", CLIENT, CLIENT),
    ("req.hash_always_miss", CLIENT, mask(&[Sub::Recv])),
    ("req.hash_ignore_busy", CLIENT, mask(&[Sub::Recv])),
    ("req.backend_hint", CLIENT, CLIENT),
    ("bereq.method", BEREQ, BEREQ),
    ("bereq.url", BEREQ, BEREQ),
    ("bereq.proto", BEREQ, BEREQ),
    ("bereq.http.", BEREQ, BEREQ),
    ("bereq.xid", BACKEND, 0),
    ("bereq.retries", BACKEND, 0),
    ("bereq.uncacheable", BACKEND, 0),
    ("bereq.is_bgfetch", BACKEND, 0),
    ("bereq.backend", BEREQ, BEREQ),
    ("beresp.status", BERESP, BERESP),
    ("beresp.reason", BERESP, BERESP),
    ("beresp.proto", BERESP, 0),
    ("beresp.http.", BERESP, BERESP),
    ("beresp.ttl", BERESP, BERESP),
    ("beresp.grace", BERESP, BERESP),
    ("beresp.keep", BERESP, BERESP),
    ("beresp.uncacheable", BERESP, BERESP),
    ("beresp.do_stream", BERESP, BERESP),
    ("beresp.was_304", BERESP, 0),
    ("beresp.age", BERESP, 0),
    ("beresp.backend.name", BERESP, 0),
    ("beresp.backend", BERESP, 0),
    ("obj.status", HIT, 0),
    ("obj.reason", HIT, 0),
    ("obj.proto", HIT, 0),
    ("obj.http.", HIT, 0),
    ("obj.ttl", HIT, 0),
    ("obj.grace", HIT, 0),
    ("obj.keep", HIT, 0),
    ("obj.age", HIT, 0),
    ("obj.hits", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.uncacheable", HIT | mask(&[Sub::Deliver]), 0),
    ("resp.status", RESP, RESP),
    ("resp.reason", RESP, RESP),
    ("resp.proto", RESP, 0),
    ("resp.http.", RESP, RESP),
    ("resp.is_streaming", RESP, 0),
    ("resp.body", 0, mask(&[Sub::Synth])),
    ("beresp.body", 0, mask(&[Sub::BackendError])),
];

fn subs_in(m: u32) -> String {
    let names: Vec<&str> = Sub::ALL.iter().filter(|s| m & (1 << **s as u32) != 0).map(|s| s.name()).collect();
    if names.is_empty() {
        "nowhere".into()
    } else {
        names.join(", ")
    }
}

/// Check that `name` may be read (or written) in every subroutine the code
/// runs in.
fn access(name: &str, write: bool, pos: Pos, sc: &Scope<'_>) -> Result<(), VclError> {
    let entry = ACCESS.iter().find(|(n, _, _)| if n.ends_with('.') { name.starts_with(n) && name.len() > n.len() } else { *n == name });
    let Some((_, r, w)) = entry else {
        return err(format!("Unknown variable '{name}'"), pos);
    };
    let m = if write { *w } else { *r };
    if write && m == 0 {
        return err(format!("Variable '{name}' is read only"), pos);
    }
    for s in &sc.ctx {
        if m & (1 << *s as u32) == 0 {
            let how = if write { "cannot be set" } else { "is not available" };
            return err(format!("'{name}' {how} in {} (it can be in: {})", s.name(), subs_in(m)), pos);
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Hdrs {
    Req,
    Bereq,
    Beresp,
    Obj,
    Resp,
}

fn headers<'t>(t: &'t Task<'_>, w: Hdrs) -> Option<&'t Headers> {
    match w {
        Hdrs::Req => t.req.as_deref().map(|r| &r.headers),
        Hdrs::Bereq => t.bereq.as_deref().map(|r| &r.headers),
        Hdrs::Beresp => t.beresp.as_deref().map(|r| &r.headers),
        Hdrs::Obj => t.obj.map(|r| &r.headers),
        Hdrs::Resp => t.resp.as_deref().map(|r| &r.headers),
    }
}

fn headers_mut<'t>(t: &'t mut Task<'_>, w: Hdrs) -> Option<&'t mut Headers> {
    match w {
        Hdrs::Req => t.req.as_deref_mut().map(|r| &mut r.headers),
        Hdrs::Bereq => t.bereq.as_deref_mut().map(|r| &mut r.headers),
        Hdrs::Beresp => t.beresp.as_deref_mut().map(|r| &mut r.headers),
        Hdrs::Resp => t.resp.as_deref_mut().map(|r| &mut r.headers),
        Hdrs::Obj => None,
    }
}

fn header_prefix(name: &str) -> Option<(Hdrs, &str)> {
    [
        ("req.http.", Hdrs::Req),
        ("bereq.http.", Hdrs::Bereq),
        ("beresp.http.", Hdrs::Beresp),
        ("obj.http.", Hdrs::Obj),
        ("resp.http.", Hdrs::Resp),
    ]
    .into_iter()
    .find_map(|(p, w)| name.strip_prefix(p).map(|h| (w, h)))
}

/// A value fit for the wire: no CR or LF (a header value with one would
/// split the message).
fn wire_text(t: &mut Task<'_>, what: &str, v: &Val) -> Option<Bytes> {
    let s = v.text();
    if s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        fail(t, format!("{what}: the value contains CR, LF or NUL"));
        return None;
    }
    Some(Bytes::from(s))
}

fn status_val(t: &mut Task<'_>, v: &Val) -> Option<u16> {
    match v.num() {
        Some(n) if (100.0..=999.0).contains(&n) => Some(n as u16),
        Some(n) if (1000.0..65536.0).contains(&n) && (n as u32 % 1000) >= 100 => Some((n as u32 % 1000) as u16),
        _ => {
            fail(t, format!("status {} is out of range", v.text()));
            None
        }
    }
}

fn text(b: &Bytes) -> Val {
    Val::Str(String::from_utf8_lossy(b).into_owned())
}

fn proto(minor: u8) -> Val {
    Val::Str(if minor == 0 { "HTTP/1.0" } else { "HTTP/1.1" }.into())
}

fn parse_proto(v: &Val) -> u8 {
    if v.text().eq_ignore_ascii_case("HTTP/1.0") {
        0
    } else {
        1
    }
}

macro_rules! get {
    ($field:ident, |$x:ident| $e:expr) => {
        Box::new(|t: &mut Task<'_>, _: &Compiled| t.$field.as_deref().map(|$x| $e).unwrap_or(Val::None))
    };
}

macro_rules! set {
    ($field:ident, |$t:ident, $x:ident, $v:ident| $e:expr) => {
        Box::new(|$t: &mut Task<'_>, $v: Val| {
            if let Some($x) = $t.$field.take() {
                $e;
                $t.$field = Some($x);
            }
        })
    };
}

/// A variable's value.
fn var_get(name: &str, pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    if name == "true" || name == "false" {
        let b = name == "true";
        return Ok(Box::new(move |_, _| Val::Bool(b)));
    }
    if sc.backends.iter().any(|b| b == name) {
        let b = name.to_string();
        return Ok(Box::new(move |_, _| Val::Backend(b.clone())));
    }
    access(name, false, pos, sc)?;
    if let Some((w, h)) = header_prefix(name) {
        let h = h.to_string();
        return Ok(Box::new(move |t, _| headers(t, w).and_then(|hs| hs.get(&h)).map(text).unwrap_or(Val::None)));
    }
    Ok(match name {
        "now" => Box::new(|_, _| Val::Time(crate::util::now())),
        "server.hostname" | "server.identity" => {
            let host = crate::util::hostname();
            Box::new(move |_, _| Val::Str(host.clone()))
        }
        "server.ip" | "local.ip" => Box::new(|t, _| t.local.map(|a| Val::Ip(a.ip(), a.port())).unwrap_or(Val::None)),
        "client.ip" | "remote.ip" => Box::new(|t, _| t.client.map(|a| Val::Ip(a.ip(), a.port())).unwrap_or(Val::None)),
        "client.identity" => Box::new(|t, _| t.client.map(|a| Val::Str(a.ip().to_string())).unwrap_or(Val::None)),
        "req.method" => get!(req, |r| text(&r.method)),
        "req.url" => get!(req, |r| text(&r.url)),
        "req.proto" => get!(req, |r| proto(r.minor)),
        "req.xid" => get!(req, |r| Val::Int(r.xid as i64)),
        "req.restarts" => get!(req, |r| Val::Int(r.restarts as i64)),
        "req.esi_level" => Box::new(|_, _| Val::Int(0)),
        "req.can_gzip" => get!(req, |r| Val::Bool(r.headers.contains_ci("accept-encoding", "gzip"))),
        "req.is_hitmiss" => get!(req, |r| Val::Bool(r.is_hitmiss)),
        "req.is_hitpass" => get!(req, |r| Val::Bool(r.is_hitpass)),
        "req.ttl" => get!(req, |r| r.ttl.map(Val::Dur).unwrap_or(Val::Dur(-1.0))),
        "req.grace" => get!(req, |r| r.grace.map(Val::Dur).unwrap_or(Val::Dur(-1.0))),
        "req.hash_always_miss" => get!(req, |r| Val::Bool(r.hash_always_miss)),
        "req.hash_ignore_busy" => get!(req, |r| Val::Bool(r.hash_ignore_busy)),
        "req.backend_hint" => {
            let default = sc.backends.first().cloned().unwrap_or_else(|| "default".into());
            Box::new(move |t, _| {
                t.req.as_deref().map(|r| Val::Backend(r.backend_hint.clone().unwrap_or_else(|| default.clone()))).unwrap_or(Val::None)
            })
        }
        "bereq.method" => get!(bereq, |r| text(&r.method)),
        "bereq.url" => get!(bereq, |r| text(&r.url)),
        "bereq.proto" => get!(bereq, |r| proto(r.minor)),
        "bereq.xid" => get!(bereq, |r| Val::Int(r.xid as i64)),
        "bereq.retries" => get!(bereq, |r| Val::Int(r.retries as i64)),
        "bereq.uncacheable" => get!(bereq, |r| Val::Bool(r.uncacheable)),
        "bereq.is_bgfetch" => get!(bereq, |r| Val::Bool(r.is_bgfetch)),
        "bereq.backend" => {
            let default = sc.backends.first().cloned().unwrap_or_else(|| "default".into());
            Box::new(move |t, _| {
                t.bereq.as_deref().map(|r| Val::Backend(r.backend.clone().unwrap_or_else(|| default.clone()))).unwrap_or(Val::None)
            })
        }
        "beresp.status" => get!(beresp, |b| Val::Int(b.status as i64)),
        "beresp.reason" => get!(beresp, |b| text(&b.reason)),
        "beresp.proto" => Box::new(|_, _| Val::Str("HTTP/1.1".into())),
        "beresp.ttl" => get!(beresp, |b| Val::Dur(b.ttl)),
        "beresp.grace" => get!(beresp, |b| Val::Dur(b.grace)),
        "beresp.keep" => get!(beresp, |b| Val::Dur(b.keep)),
        "beresp.age" => get!(beresp, |b| Val::Dur(b.age)),
        "beresp.uncacheable" => get!(beresp, |b| Val::Bool(b.uncacheable)),
        "beresp.do_stream" => get!(beresp, |b| Val::Bool(b.do_stream)),
        "beresp.was_304" => get!(beresp, |b| Val::Bool(b.was_304)),
        "beresp.backend.name" | "beresp.backend" => get!(beresp, |b| Val::Str(b.backend.clone())),
        "obj.status" => Box::new(|t, _| t.obj.map(|o| Val::Int(o.status as i64)).unwrap_or(Val::None)),
        "obj.reason" => Box::new(|t, _| t.obj.map(|o| text(&o.reason)).unwrap_or(Val::None)),
        "obj.proto" => Box::new(|_, _| Val::Str("HTTP/1.1".into())),
        "obj.ttl" => Box::new(|t, _| t.obj.map(|o| Val::Dur(o.ttl)).unwrap_or(Val::None)),
        "obj.grace" => Box::new(|t, _| t.obj.map(|o| Val::Dur(o.grace)).unwrap_or(Val::None)),
        "obj.keep" => Box::new(|t, _| t.obj.map(|o| Val::Dur(o.keep)).unwrap_or(Val::None)),
        "obj.age" => Box::new(|t, _| t.obj.map(|o| Val::Dur(o.age)).unwrap_or(Val::None)),
        "obj.hits" => Box::new(|t, _| t.obj.map(|o| Val::Int(o.hits as i64)).unwrap_or(Val::None)),
        "obj.uncacheable" => Box::new(|t, _| t.obj.map(|o| Val::Bool(o.uncacheable)).unwrap_or(Val::None)),
        "resp.status" => get!(resp, |r| Val::Int(r.status as i64)),
        "resp.reason" => get!(resp, |r| text(&r.reason)),
        "resp.proto" => Box::new(|_, _| Val::Str("HTTP/1.1".into())),
        "resp.is_streaming" => get!(resp, |r| Val::Bool(r.is_streaming)),
        _ => return unsupported(&format!("Reading '{name}'"), pos),
    })
}

/// A variable that can be written (or unset).
fn var_set(name: &str, pos: Pos, sc: &Scope<'_>) -> Result<SetFn, VclError> {
    access(name, true, pos, sc)?;
    if let Some((w, h)) = header_prefix(name) {
        let h = h.to_string();
        let what = name.to_string();
        return Ok(Box::new(move |t, v| match v {
            Val::None => {
                if let Some(hs) = headers_mut(t, w) {
                    hs.unset(&h)
                }
            }
            v => {
                if let Some(b) = wire_text(t, &what, &v) {
                    if let Some(hs) = headers_mut(t, w) {
                        hs.set(&h, b)
                    }
                }
            }
        }));
    }
    fn dur(v: &Val) -> Option<f64> {
        v.num()
    }
    Ok(match name {
        "req.method" => set!(req, |t, r, v| if let Some(b) = wire_text(t, "req.method", &v) {
            r.method = b
        }),
        "req.url" => set!(req, |t, r, v| if let Some(b) = wire_text(t, "req.url", &v) {
            r.url = b
        }),
        "req.proto" => set!(req, |t, r, v| r.minor = parse_proto(&v)),
        "req.ttl" => set!(req, |t, r, v| r.ttl = dur(&v)),
        "req.grace" => set!(req, |t, r, v| r.grace = dur(&v)),
        "req.hash_always_miss" => set!(req, |t, r, v| r.hash_always_miss = v.truthy()),
        "req.hash_ignore_busy" => set!(req, |t, r, v| r.hash_ignore_busy = v.truthy()),
        "req.backend_hint" => set!(req, |t, r, v| r.backend_hint = Some(v.text())),
        "client.identity" => Box::new(|_, _| {}),
        "bereq.method" => set!(bereq, |t, r, v| if let Some(b) = wire_text(t, "bereq.method", &v) {
            r.method = b
        }),
        "bereq.url" => set!(bereq, |t, r, v| if let Some(b) = wire_text(t, "bereq.url", &v) {
            r.url = b
        }),
        "bereq.proto" => set!(bereq, |t, r, v| r.minor = parse_proto(&v)),
        "bereq.backend" => set!(bereq, |t, r, v| r.backend = Some(v.text())),
        "beresp.status" => set!(beresp, |t, b, v| if let Some(s) = status_val(t, &v) {
            b.status = s
        }),
        "beresp.reason" => set!(beresp, |t, b, v| if let Some(r) = wire_text(t, "beresp.reason", &v) {
            b.reason = r
        }),
        "beresp.ttl" => set!(beresp, |t, b, v| b.ttl = dur(&v).unwrap_or(0.0)),
        "beresp.grace" => set!(beresp, |t, b, v| b.grace = dur(&v).unwrap_or(0.0)),
        "beresp.keep" => set!(beresp, |t, b, v| b.keep = dur(&v).unwrap_or(0.0)),
        // Once uncacheable, always: Varnish ignores setting it back.
        "beresp.uncacheable" => set!(beresp, |t, b, v| b.uncacheable |= v.truthy()),
        "beresp.do_stream" => set!(beresp, |t, b, v| b.do_stream = v.truthy()),
        "resp.status" => set!(resp, |t, r, v| if let Some(s) = status_val(t, &v) {
            r.status = s;
            r.reason = Bytes::from_static(policy::reason_phrase(s).as_bytes());
        }),
        "resp.reason" => set!(resp, |t, r, v| if let Some(b) = wire_text(t, "resp.reason", &v) {
            r.reason = b
        }),
        // Varnish 6+: the synthetic body, replaced whole.
        "resp.body" | "beresp.body" => Box::new(|t, v| {
            if let Some(b) = t.body.as_deref_mut() {
                *b = v.text().into_bytes();
            }
        }),
        _ => return unsupported(&format!("Setting '{name}'"), pos),
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

/// `+ - * /` on two values (and string concatenation with `+`).
fn arith(op: &str, a: Val, b: Val) -> Result<Val, String> {
    use Val::*;
    let r = |x: &Val| x.num().unwrap_or(0.0);
    Ok(match (op, &a, &b) {
        ("+", Str(_) | None, _) | ("+", _, Str(_) | None) => Str(a.text() + &b.text()),
        ("+", Int(x), Int(y)) => Int(x.saturating_add(*y)),
        ("-", Int(x), Int(y)) => Int(x.saturating_sub(*y)),
        ("*", Int(x), Int(y)) => Int(x.saturating_mul(*y)),
        ("/", Int(_), Int(0)) => return Err("division by zero".into()),
        ("/", Int(x), Int(y)) => Int(x / y),
        ("+" | "-", Time(t), Dur(d)) => Time(if op == "+" { t + d } else { t - d }),
        ("+", Dur(d), Time(t)) => Time(t + d),
        ("-", Time(x), Time(y)) => Dur(x - y),
        ("+" | "-", Dur(x), Dur(y)) => Dur(if op == "+" { x + y } else { x - y }),
        ("+" | "-", Bytes(x), Bytes(y)) => Bytes(if op == "+" { x.saturating_add(*y) } else { x.saturating_sub(*y) }),
        ("*", Dur(d), Int(_) | Real(_)) | ("*", Int(_) | Real(_), Dur(d)) => Dur(d * if matches!(a, Dur(_)) { r(&b) } else { r(&a) }),
        ("/", Dur(d), Int(_) | Real(_)) if r(&b) != 0.0 => Dur(d / r(&b)),
        ("/", Dur(x), Dur(y)) if *y != 0.0 => Real(x / y),
        (_, Int(_) | Real(_), Int(_) | Real(_)) => {
            let (x, y) = (r(&a), r(&b));
            match op {
                "+" => Real(x + y),
                "-" => Real(x - y),
                "*" => Real(x * y),
                _ if y == 0.0 => return Err("division by zero".into()),
                _ => Real(x / y),
            }
        }
        _ => return Err(format!("cannot compute {a:?} {op} {b:?}")),
    })
}

/// `==` and `!=` (and the orderings on numbers and strings).
fn compare(op: &str, a: &Val, b: &Val) -> bool {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (a, b) {
        _ if a.is_numeric() || b.is_numeric() => match (a.num(), b.num()) {
            (Some(x), Some(y)) => x.partial_cmp(&y),
            _ => None,
        },
        (Val::Ip(x, _), Val::Ip(y, _)) => Some(if x == y { Ordering::Equal } else { Ordering::Less }),
        (Val::Bool(x), Val::Bool(y)) => Some(x.cmp(y)),
        (Val::None, Val::None) => Some(Ordering::Equal),
        (Val::None, _) | (_, Val::None) => None,
        _ => Some(a.text().cmp(&b.text())),
    };
    match op {
        "==" => ord == Some(std::cmp::Ordering::Equal),
        "!=" => ord != Some(std::cmp::Ordering::Equal),
        "<" => ord == Some(std::cmp::Ordering::Less),
        ">" => ord == Some(std::cmp::Ordering::Greater),
        "<=" => matches!(ord, Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)),
        _ => matches!(ord, Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)),
    }
}

fn expr(e: &Expr, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    Ok(match e {
        Expr::Str(s, _) => {
            let s = s.clone();
            Box::new(move |_, _| Val::Str(s.clone()))
        }
        Expr::Int(i, _) => {
            let i = *i;
            Box::new(move |_, _| Val::Int(i))
        }
        Expr::Real(r, _) => {
            let r = *r;
            Box::new(move |_, _| Val::Real(r))
        }
        Expr::Duration(d, _) => {
            let d = *d;
            Box::new(move |_, _| Val::Dur(d))
        }
        Expr::Bytes(b, _) => {
            let b = *b;
            Box::new(move |_, _| Val::Bytes(b))
        }
        Expr::Name(n, pos) => {
            if sc.acls.contains_key(n) {
                return err(format!("ACL '{n}' can only be used on the right of ~ or !~"), *pos);
            }
            var_get(n, *pos, sc)?
        }
        Expr::Not(x, _) => {
            let x = expr(x, sc)?;
            Box::new(move |t, c| Val::Bool(!x(t, c).truthy()))
        }
        Expr::Neg(x, _) => {
            let x = expr(x, sc)?;
            Box::new(move |t, c| match x(t, c) {
                Val::Int(i) => Val::Int(-i),
                Val::Real(d) => Val::Real(-d),
                Val::Dur(d) => Val::Dur(-d),
                _ => Val::None,
            })
        }
        Expr::Binary { op, left, right, pos: _ } => {
            let op = *op;
            if matches!(op, "~" | "!~") {
                let l = expr(left, sc)?;
                let want = op == "~";
                if let Expr::Name(acl, _) = &**right {
                    if sc.acls.contains_key(acl) {
                        let acl = acl.clone();
                        return Ok(Box::new(move |t, c| {
                            let ip = l(t, c).ip();
                            let hit = ip.is_some_and(|ip| c.acls.get(&acl).is_some_and(|a| a.matches(ip)));
                            if let Some(ip) = ip {
                                let verdict = if hit == want { "MATCH" } else { "NO_MATCH" };
                                t.record(Tag::VclAcl, format!("{verdict} {acl} {ip}").as_bytes());
                            }
                            Val::Bool(hit == want)
                        }));
                    }
                }
                let re = regex_arg(right)?;
                return Ok(Box::new(move |t, c| {
                    let v = l(t, c);
                    // A missing value never matches.
                    let hit = !matches!(v, Val::None) && re.is_match(&v.text());
                    Val::Bool(hit == want)
                }));
            }
            let (l, r) = (expr(left, sc)?, expr(right, sc)?);
            match op {
                "&&" => Box::new(move |t, c| Val::Bool(l(t, c).truthy() && r(t, c).truthy())),
                "||" => Box::new(move |t, c| Val::Bool(l(t, c).truthy() || r(t, c).truthy())),
                "==" | "!=" | "<" | ">" | "<=" | ">=" => Box::new(move |t, c| {
                    let (a, b) = (l(t, c), r(t, c));
                    Val::Bool(compare(op, &a, &b))
                }),
                _ => Box::new(move |t, c| {
                    let (a, b) = (l(t, c), r(t, c));
                    match arith(op, a, b) {
                        Ok(v) => v,
                        Err(e) => {
                            fail(t, e);
                            Val::None
                        }
                    }
                }),
            }
        }
        Expr::Call { name, args, pos } => call(name, args, *pos, sc)?,
    })
}

fn one_arg(args: &[Expr], name: &str, n: usize, pos: Pos, sc: &Scope<'_>) -> Result<Vec<ExprFn>, VclError> {
    if args.len() != n {
        return err(format!("{name}() takes {n} argument(s), not {}", args.len()), pos);
    }
    args.iter().map(|a| expr(a, sc)).collect()
}

fn only_in(name: &str, allowed: u32, pos: Pos, sc: &Scope<'_>) -> Result<(), VclError> {
    match sc.ctx.iter().find(|s| allowed & (1 << **s as u32) == 0) {
        Some(s) => err(format!("{name}() cannot be used in {} (it can be in: {})", s.name(), subs_in(allowed)), pos),
        None => Ok(()),
    }
}

/// The functions [`call`] knows (documented in cache-vcl(7)).
pub const FUNCTIONS: [&str; 19] = [
    "regsub",
    "regsuball",
    "hash_data",
    "synthetic",
    "ban",
    "std.ban",
    "std.log",
    "std.syslog",
    "std.tolower",
    "std.toupper",
    "std.querysort",
    "std.integer",
    "std.real",
    "std.duration",
    "std.time",
    "std.ip",
    "std.port",
    "std.healthy",
    "std.collect",
];

/// Every variable a program can name (headers as `req.http.`), for the
/// documentation's test.
pub fn variables() -> impl Iterator<Item = &'static str> {
    ACCESS.iter().map(|(n, _, _)| *n)
}

/// A function call: the built-in functions and vmod_std's.
fn call(name: &str, args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    // Functions with a fallback: (value, fallback).
    let with_fallback = |parse: fn(&str) -> Option<Val>| -> Result<ExprFn, VclError> {
        let mut a = one_arg(args, name, 2, pos, sc)?.into_iter();
        let (x, fb) = (a.next().expect("2 args"), a.next().expect("2 args"));
        Ok(Box::new(move |t, c| match parse(x(t, c).text().trim()) {
            Some(v) => v,
            None => fb(t, c),
        }))
    };
    if let Some((obj, method)) = name.split_once('.') {
        if let Some(kind) = sc.objects.get(obj) {
            return director_call(obj, *kind, method, args, pos, sc);
        }
    }
    Ok(match name {
        "regsub" | "regsuball" => {
            if args.len() != 3 {
                return err(format!("{name}() takes 3 arguments"), pos);
            }
            let re = regex_arg(&args[1])?;
            let all = name == "regsuball";
            let (src, sub) = (expr(&args[0], sc)?, expr(&args[2], sc)?);
            Box::new(move |t, c| {
                let s = src(t, c).text();
                let rep = vcl_replacement(&sub(t, c).text());
                Val::Str(if all { re.replace_all(&s, rep.as_str()).into_owned() } else { re.replace(&s, rep.as_str()).into_owned() })
            })
        }
        "hash_data" => {
            only_in(name, mask(&[Sub::Hash]), pos, sc)?;
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let v = x(t, c);
                if let Some(k) = t.key.as_deref_mut() {
                    k.extend_from_slice(v.text().as_bytes());
                    k.push(0);
                }
                Val::None
            })
        }
        "synthetic" => {
            only_in(name, mask(&[Sub::Synth, Sub::BackendError]), pos, sc)?;
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let v = x(t, c).text();
                if let Some(b) = t.body.as_deref_mut() {
                    b.extend_from_slice(v.as_bytes());
                }
                Val::None
            })
        }
        "ban" | "std.ban" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            let returns = name == "std.ban";
            Box::new(move |t, c| {
                let spec = x(t, c).text();
                match t.env.ban(&spec) {
                    Ok(()) => Val::Bool(true),
                    Err(e) => {
                        // A bad ban is logged and the subroutine goes on.
                        t.record(Tag::VclError, format!("ban(): {e}").as_bytes());
                        if returns {
                            Val::Bool(false)
                        } else {
                            Val::None
                        }
                    }
                }
            })
        }
        "std.log" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let v = x(t, c).text();
                t.record(Tag::VclLog, v.as_bytes());
                Val::None
            })
        }
        "std.syslog" => {
            let mut a = one_arg(args, name, 2, pos, sc)?.into_iter();
            let (prio, msg) = (a.next().expect("2 args"), a.next().expect("2 args"));
            Box::new(move |t, c| {
                let p = prio(t, c).num().unwrap_or(6.0) as i32;
                let m = msg(t, c).text().replace('\0', " ");
                if let Ok(cs) = std::ffi::CString::new(m) {
                    // SAFETY: both strings are NUL-terminated; "%s" takes one.
                    unsafe { libc::syslog(p, c"%s".as_ptr(), cs.as_ptr()) };
                }
                Val::None
            })
        }
        "std.tolower" | "std.toupper" => {
            let up = name == "std.toupper";
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let s = x(t, c).text();
                Val::Str(if up { s.to_uppercase() } else { s.to_lowercase() })
            })
        }
        "std.querysort" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| Val::Str(querysort(&x(t, c).text())))
        }
        "std.integer" => with_fallback(|s| s.parse::<i64>().ok().map(Val::Int))?,
        "std.real" => with_fallback(|s| s.parse::<f64>().ok().filter(|f| f.is_finite()).map(Val::Real))?,
        "std.duration" => with_fallback(|s| crate::cache::ban::parse_duration(s).map(Val::Dur))?,
        "std.time" => {
            with_fallback(|s| common::httpdate::parse(s).or_else(|| s.parse::<f64>().ok().filter(|f| f.is_finite())).map(Val::Time))?
        }
        "std.ip" => {
            if args.len() != 2 && args.len() != 3 {
                return err("std.ip() takes 2 or 3 arguments", pos);
            }
            let (x, fb) = (expr(&args[0], sc)?, expr(&args[1], sc)?);
            Box::new(move |t, c| match x(t, c).ip() {
                Some(ip) => Val::Ip(ip, 0),
                None => match fb(t, c) {
                    Val::Ip(ip, p) => Val::Ip(ip, p),
                    other => other.ip().map(|ip| Val::Ip(ip, 0)).unwrap_or(Val::None),
                },
            })
        }
        "std.port" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| match x(t, c) {
                Val::Ip(_, p) => Val::Int(p as i64),
                _ => Val::Int(0),
            })
        }
        "std.healthy" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let b = x(t, c);
                let name = match &b {
                    Val::Backend(n) => Some(n.as_str()),
                    _ => None,
                };
                match name {
                    Some(n) if c.runtime.get().is_some_and(|r| r.contains_key(n)) || c.directors().contains_key(n) => {
                        Val::Bool(c.usable(n, 0))
                    }
                    _ => Val::Bool(t.env.healthy(name)),
                }
            })
        }
        "std.collect" => {
            if args.is_empty() || args.len() > 2 {
                return err("std.collect() takes a header and an optional separator", pos);
            }
            let Expr::Name(h, hpos) = &args[0] else { return err("std.collect() takes a header (req.http.X, resp.http.X...)", pos) };
            access(h, true, *hpos, sc)?;
            let Some((w, hname)) = header_prefix(h) else { return err("std.collect() takes a header", *hpos) };
            let hname = hname.to_string();
            let sep = match args.get(1) {
                Some(e) => Some(expr(e, sc)?),
                None => None,
            };
            Box::new(move |t, c| {
                let sep = sep.as_ref().map_or_else(|| ", ".to_string(), |s| s(t, c).text());
                if let Some(hs) = headers_mut(t, w) {
                    let vals: Vec<Bytes> =
                        hs.0.iter().filter(|(n, _)| n.eq_ignore_ascii_case(hname.as_bytes())).map(|(_, v)| v.clone()).collect();
                    if vals.len() > 1 {
                        let joined = vals.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect::<Vec<_>>().join(&sep);
                        hs.set(&hname, Bytes::from(joined));
                    }
                }
                Val::None
            })
        }
        _ => return unsupported(&format!("Function {name}()"), pos),
    })
}

/// `obj.method(...)` on a director.
fn director_call(
    obj: &str,
    kind: crate::director::Kind,
    method: &str,
    args: &[Expr],
    pos: Pos,
    sc: &Scope<'_>,
) -> Result<ExprFn, VclError> {
    use crate::director::Kind;
    let a: Vec<ExprFn> = args.iter().map(|x| expr(x, sc)).collect::<Result<_, _>>()?;
    let obj_name = obj.to_string();
    let obj = obj.to_string();
    let with = move |c: &Compiled| c.directors().get(&obj).cloned();
    Ok(match (method, a.len()) {
        ("add_backend", 1 | 2) => {
            only_in(method, mask(&[Sub::Init]), pos, sc)?;
            let mut it = a.into_iter();
            let (b, w) = (it.next().expect("1 arg"), it.next());
            Box::new(move |t, c| {
                let (member, weight) = (b(t, c), w.as_ref().map_or(1.0, |w| w(t, c).num().unwrap_or(1.0)));
                if let (Some(d), Val::Backend(m)) = (with(c), member) {
                    d.add(&m, weight);
                }
                Val::None
            })
        }
        ("remove_backend", 1) => {
            let b = a.into_iter().next().expect("1 arg");
            Box::new(move |t, c| {
                if let (Some(d), Val::Backend(m)) = (with(c), b(t, c)) {
                    d.remove(&m);
                }
                Val::None
            })
        }
        ("reconfigure", 0) if kind == Kind::Shard => Box::new(move |_, c| {
            if let Some(d) = with(c) {
                d.reconfigure();
            }
            Val::Bool(true)
        }),
        // Hash and shard pick now, by the key (shard: the URL without one).
        ("backend", 0 | 1) if matches!(kind, Kind::Hash | Kind::Shard) => {
            let key = a.into_iter().next();
            Box::new(move |t, c| {
                let k = match &key {
                    Some(k) => k(t, c).text(),
                    None => t.req.as_deref().map(|r| String::from_utf8_lossy(&r.url).into_owned()).unwrap_or_default(),
                };
                let Some(d) = with(c) else { return Val::None };
                match d.pick(Some(&k), &|m| c.usable(m, 1)) {
                    Some(m) => Val::Backend(m),
                    None => Val::Backend(d.name.clone()),
                }
            })
        }
        // The others are resolved when the fetch starts (as in Varnish).
        ("backend", 0) => Box::new(move |_, _| Val::Backend(obj_name.clone())),
        (m, n) => return unsupported(&format!("Method {m}() with {n} argument(s) on this director"), pos),
    })
}

/// The compiled program as the engine's subroutines.
pub struct VclPolicy {
    pub name: String,
    pub prog: Arc<Compiled>,
}

impl VclPolicy {
    /// A compiled program, ready once its vcl_init has run (an error if
    /// vcl_init returned fail).
    pub fn load(name: &str, prog: Compiled) -> Result<VclPolicy, String> {
        let mut bes = HashMap::new();
        for spec in &prog.backend_specs {
            let addrs =
                crate::backend::resolve(&format!("{}:{}", spec.host, spec.port)).map_err(|e| format!("backend {}: {e}", spec.name))?;
            bes.insert(spec.name.clone(), Arc::new(crate::backend::Backend::with_cfg(name, &spec.name, addrs, spec.cfg.clone())));
        }
        let _ = prog.runtime.set(bes);
        let p = VclPolicy { name: name.to_string(), prog: Arc::new(prog) };
        let mut t = Task::new(&NoEnv);
        match p.call(Sub::Init, &mut t) {
            Action::Ok => Ok(p),
            _ => Err(format!("VCL \"{name}\" Failed initialization: {}", t.failed.unwrap_or_else(|| "vcl_init returned fail".into()))),
        }
    }
}

impl Policy for VclPolicy {
    fn name(&self) -> &str {
        &self.name
    }
    fn defines(&self, sub: Sub) -> bool {
        self.prog.defined[sub as usize]
    }
    fn fini(&self) {
        let _ = self.call(Sub::Fini, &mut Task::new(&NoEnv));
        for b in self.backends() {
            b.stop_probe();
        }
    }
    fn backend(&self, name: Option<&str>) -> Option<Arc<crate::backend::Backend>> {
        match name {
            Some(n) => self.prog.backend_named(n),
            None => self.prog.backends.first().and_then(|n| self.prog.backend_named(n)),
        }
    }
    fn backends(&self) -> Vec<Arc<crate::backend::Backend>> {
        let Some(bes) = self.prog.runtime.get() else { return Vec::new() };
        self.prog.backends.iter().filter_map(|n| bes.get(n).cloned()).collect()
    }
    fn call(&self, sub: Sub, t: &mut Task<'_>) -> Action {
        if !self.prog.defined[sub as usize] {
            return policy::builtin(sub, t);
        }
        let body = &self.prog.subs[sub.name()];
        match run(body, t, &self.prog) {
            Flow::Return(a) => a,
            Flow::Next => policy::builtin(sub, t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Bereq, Beresp, ObjView, Req, Resp};
    use crate::vcl::parse_source;
    use std::sync::Mutex;

    fn load(vcl: &str) -> VclPolicy {
        let p = parse_source("t.vcl", vcl).unwrap_or_else(|e| panic!("{e}"));
        let c = compile(&p).unwrap_or_else(|e| panic!("{}", e.render(&p.files)));
        VclPolicy::load("t", c).unwrap()
    }

    fn compile_err(src: &str) -> String {
        let p = parse_source("t.vcl", &format!("vcl 4.1;\nimport std;\nbackend default {{ .host = \"127.0.0.1\"; }}\n{src}")).unwrap();
        match compile(&p) {
            Ok(_) => panic!("compiled: {src}"),
            Err(e) => e.render(&p.files),
        }
    }

    fn req(url: &str, hdrs: &[(&str, &str)]) -> Req {
        Req {
            method: Bytes::from_static(b"GET"),
            url: Bytes::copy_from_slice(url.as_bytes()),
            minor: 1,
            headers: Headers(
                hdrs.iter().map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect(),
            ),
            server_ip: "127.0.0.1".into(),
            client_ip: Some("10.1.2.3".parse().unwrap()),
            ..Req::default()
        }
    }

    fn recv_url(vcl: &str, url: &str, hdrs: &[(&str, &str)]) -> (Action, String, Headers) {
        let pol = load(vcl);
        let mut r = req(url, hdrs);
        let a = {
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            t.client = Some("10.1.2.3:5555".parse().unwrap());
            pol.call(Sub::Recv, &mut t)
        };
        (a, String::from_utf8_lossy(&r.url).into_owned(), r.headers)
    }

    #[test]
    fn std_functions_and_regsub() {
        assert_eq!(querysort("/a?b=2&a=1&&c"), "/a?a=1&b=2&c");
        assert_eq!(querysort("/a?"), "/a");
        assert_eq!(querysort("/a"), "/a");
        let vcl = r#"vcl 4.1;
            import std;
            sub vcl_recv {
                set req.url = std.querysort(req.url);
                set req.http.X-N = std.integer(req.http.X-Num, 7) + 1;
                set req.http.X-D = std.duration("90s", 1s) + 30s;
                set req.http.X-R = regsub(req.url, "^/(\w+)\?.*$", "\1!");
                set req.http.X-Real = std.real("2.5", 0.0) * 2;
                set req.http.X-Ip = std.ip("bogus", "192.0.2.1");
                set req.http.X-Port = std.port(client.ip);
                set req.http.X-T = std.time("Thu, 01 Jan 1970 00:01:40 GMT", now) + 20s;
                set req.http.X-Append = "a";
                set req.http.X-Append += "b";
                return (hash);
            }"#;
        let (r, url, h) = recv_url(vcl, "/page?z=1&a=2", &[("X-Num", "41")]);
        assert_eq!(r, Action::Hash);
        assert_eq!(url, "/page?a=2&z=1");
        assert_eq!(h.get("x-n").unwrap(), &b"42"[..]);
        assert_eq!(h.get("x-d").unwrap(), &b"120.000"[..]);
        assert_eq!(h.get("x-r").unwrap(), &b"page!"[..]);
        assert_eq!(h.get("x-real").unwrap(), &b"5.000"[..]);
        assert_eq!(h.get("x-ip").unwrap(), &b"192.0.2.1"[..]);
        assert_eq!(h.get("x-port").unwrap(), &b"5555"[..]);
        assert_eq!(h.get("x-t").unwrap(), &b"Thu, 01 Jan 1970 00:02:00 GMT"[..]);
        assert_eq!(h.get("x-append").unwrap(), &b"ab"[..]);
        let (_, _, h) = recv_url(vcl, "/p", &[("X-Num", "lots")]);
        assert_eq!(h.get("x-n").unwrap(), &b"8"[..], "the fallback");
    }

    #[test]
    fn acls_pick_the_longest_prefix() {
        let vcl = r#"vcl 4.1;
            acl inner { "10.0.0.0"/8; ! "10.1.0.0"/16; "10.1.2.3"; }
            sub vcl_recv { if (client.ip ~ inner) { return (pass); } }"#;
        // 10.1.2.3 is in /8, excluded by /16, included again by /32.
        assert_eq!(recv_url(vcl, "/", &[("Host", "x")]).0, Action::Pass);
        assert!(in_net("10.1.9.9".parse().unwrap(), "10.1.0.0".parse().unwrap(), 16));
        assert!(!in_net("11.0.0.1".parse().unwrap(), "10.0.0.0".parse().unwrap(), 8));
        // Falls through to the built-in policy when the sub does not return.
        let (r, _, _) = recv_url("vcl 4.1; sub vcl_recv { set req.http.X = \"1\"; }", "/", &[("Host", "x"), ("Cookie", "a=b")]);
        assert_eq!(r, Action::Pass, "the built-in policy passes cookies");
    }

    #[test]
    fn variables_are_checked_per_subroutine() {
        let e = compile_err("sub vcl_recv { set beresp.ttl = 1s; }");
        assert!(e.contains("'beresp.ttl' cannot be set in vcl_recv") && e.contains("vcl_backend_response"), "{e}");
        let e = compile_err("sub vcl_backend_response { set req.url = \"/\"; }");
        assert!(e.contains("'req.url' cannot be set in vcl_backend_response"), "{e}");
        let e = compile_err("sub vcl_deliver { if (obj.ttl > 0s) { return (deliver); } }");
        assert!(e.contains("'obj.ttl' is not available in vcl_deliver"), "{e}");
        let e = compile_err("sub vcl_hit { set obj.ttl = 1s; }");
        assert!(e.contains("read only"), "{e}");
        assert!(compile_err("sub vcl_recv { set req.nonsense = 1; }").contains("Unknown variable 'req.nonsense'"));
        // A user sub is checked in every context that calls it.
        let e = compile_err("sub f { set req.http.x = bereq.url; } sub vcl_backend_fetch { call f; }");
        assert!(e.contains("'req.http.x' cannot be set in vcl_backend_fetch"), "{e}");
        assert!(compile_err("sub vcl_recv { synthetic(\"x\"); }").contains("synthetic() cannot be used in vcl_recv"));
        assert!(compile_err("sub vcl_recv { hash_data(req.url); }").contains("hash_data() cannot be used in vcl_recv"));
        assert!(compile_err("sub vcl_recv { unset req.url; }").contains("cannot be unset"));
        assert!(compile_err("sub vcl_recv { set req.backend_hint = nothere; }").contains("Unknown variable 'nothere'"));
        assert!(compile_err("sub vcl_recv { set req.http.x = std.nothing(1); }").contains("not supported yet"));
        assert!(compile_err("sub vcl_init { new rr = directors.round_robin(); }").contains("import directors;"));
        assert!(compile_err("sub vcl_recv { new rr = std.tolower(\"x\"); }").contains("only allowed in vcl_init"));
        let decl = |src: &str| {
            let p = parse_source("t.vcl", &format!("vcl 4.1;\n{src}")).unwrap();
            compile(&p).err().map(|e| e.render(&p.files)).unwrap_or_default()
        };
        assert!(decl("backend b { .host = \"127.0.0.1\"; .bogus = 1; }").contains("Unknown field: 'bogus'"));
        assert!(decl("backend b { .port = \"80\"; }").contains("Mandatory field 'host' missing"));
        assert!(decl("backend b { .host = \"127.0.0.1\"; .connect_timeout = \"5\"; }").contains("takes a duration"));
        assert!(decl("backend b { .host = \"no-such-host.invalid\"; }").contains("could not be resolved"));
        assert!(decl("backend b { .host = \"127.0.0.1\"; .probe = { .window = 3; .threshold = 5; } }").contains("larger than .window"));
        assert!(decl("probe p { .url = \"/\"; .request = \"GET / HTTP/1.1\"; }").contains("not both"));
        assert!(decl("backend b { .host = \"127.0.0.1\"; } backend b { .host = \"127.0.0.1\"; }").contains("redefined"));
        assert!(decl(
            "backend b { .host = \"127.0.0.1\"; .port = \"8080\"; .connect_timeout = 1s; .first_byte_timeout = 5s; .max_connections = 50; .probe = { .url = \"/health\"; .interval = 5s; .timeout = 1s; .window = 5; .threshold = 3; } }"
        )
        .is_empty());
    }

    #[test]
    fn synth_builds_the_response_and_body() {
        let pol = load(
            r#"vcl 4.1;
            sub vcl_recv { if (req.url == "/old") { return (synth(750, "")); } }
            sub vcl_synth {
                if (resp.status == 750) {
                    set resp.status = 301;
                    set resp.http.Location = "https://example.com" + req.url;
                    return (deliver);
                }
                set resp.http.Content-Type = "text/plain";
                synthetic("custom " + resp.status + " " + resp.reason);
                return (deliver);
            }"#,
        );
        let mut r = req("/old", &[("Host", "a")]);
        let a = {
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            pol.call(Sub::Recv, &mut t)
        };
        assert_eq!(a, Action::Synth(750, "Unknown HTTP Status".into()));
        let mut resp = Resp { status: 750, reason: Bytes::from_static(b""), ..Resp::default() };
        let mut body = Vec::new();
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        t.resp = Some(&mut resp);
        t.body = Some(&mut body);
        assert_eq!(pol.call(Sub::Synth, &mut t), Action::Deliver);
        assert_eq!((resp.status, &resp.reason[..]), (301, &b"Moved Permanently"[..]));
        assert_eq!(resp.headers.get("location").unwrap(), &b"https://example.com/old"[..]);
        let mut resp = Resp { status: 404, reason: Bytes::from_static(b"Not Found"), ..Resp::default() };
        let mut body = Vec::new();
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        t.resp = Some(&mut resp);
        t.body = Some(&mut body);
        pol.call(Sub::Synth, &mut t);
        assert_eq!(body, b"custom 404 Not Found");
    }

    #[test]
    fn backend_and_hit_subroutines() {
        let pol = load(
            r#"vcl 4.1;
            sub vcl_backend_fetch { set bereq.http.X-Fetch = bereq.url; }
            sub vcl_backend_response {
                if (bereq.url ~ "^/static/") { set beresp.ttl = 1h; unset beresp.http.Set-Cookie; }
                if (beresp.status >= 500) { return (retry); }
                if (bereq.url ~ "^/private/") { return (pass(30s)); }
            }
            sub vcl_hit {
                if (obj.ttl >= 0s) { return (deliver); }
                if (obj.ttl + obj.grace > 0s && obj.hits < 3) { return (deliver); }
                return (miss);
            }"#,
        );
        let mut bereq = Bereq { url: Bytes::from_static(b"/static/a.css"), ..Bereq::default() };
        let mut t = Task::new(&NoEnv);
        t.bereq = Some(&mut bereq);
        assert_eq!(pol.call(Sub::BackendFetch, &mut t), Action::Fetch);
        assert_eq!(bereq.headers.get("x-fetch").unwrap(), &b"/static/a.css"[..]);
        let resp = |url: &'static str, status: u16| {
            let mut bereq = Bereq { url: Bytes::from_static(url.as_bytes()), ..Bereq::default() };
            let mut b = Beresp { status, ttl: 120.0, ..Beresp::default() };
            b.headers.set("Set-Cookie", Bytes::from_static(b"a=b"));
            let mut t = Task::new(&NoEnv);
            t.bereq = Some(&mut bereq);
            t.beresp = Some(&mut b);
            let a = pol.call(Sub::BackendResponse, &mut t);
            (a, b)
        };
        let (a, b) = resp("/static/a.css", 200);
        assert_eq!((a, b.ttl, b.uncacheable), (Action::Deliver, 3600.0, false), "Set-Cookie removed, so cacheable");
        let (a, b) = resp("/x", 200);
        assert_eq!((a, b.uncacheable), (Action::Deliver, true), "the built-in policy: Set-Cookie makes it uncacheable");
        assert_eq!(resp("/x", 503).0, Action::Retry);
        assert_eq!(resp("/private/x", 200).0, Action::PassFor(30.0));
        let hit = |ttl: f64, hits: u64| {
            let obj = ObjView { ttl, grace: 10.0, hits, ..ObjView::default() };
            let mut r = req("/", &[]);
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            t.obj = Some(&obj);
            pol.call(Sub::Hit, &mut t)
        };
        assert_eq!(hit(5.0, 100), Action::Deliver);
        assert_eq!(hit(-5.0, 1), Action::Deliver);
        assert_eq!(hit(-5.0, 3), Action::Miss);
        assert_eq!(hit(-15.0, 0), Action::Miss);
    }

    struct Recorder(Mutex<Vec<String>>);
    impl policy::Env for Recorder {
        fn ban(&self, spec: &str) -> Result<(), String> {
            if spec.contains("~") || spec.contains("==") {
                self.0.lock().unwrap().push(spec.to_string());
                Ok(())
            } else {
                Err("expected an operator".into())
            }
        }
        fn healthy(&self, _: Option<&str>) -> bool {
            false
        }
    }

    #[test]
    fn ban_log_and_runtime_failures() {
        let pol = load(
            r#"vcl 4.1;
            import std;
            # No probe has run yet and none counts as good: sick.
            backend default { .host = "127.0.0.1"; .probe = { .url = "/health"; .initial = 0; } }
            sub vcl_recv {
                if (req.method == "BAN") {
                    ban("obj.http.x-url ~ " + req.url);
                    ban("nonsense");
                    std.log("banned " + req.url);
                    return (synth(200, "Ban added"));
                }
                if (!std.healthy(req.backend_hint)) { set req.http.X-Sick = "1"; }
                set req.http.X-Evil = req.http.X-In;
                return (hash);
            }"#,
        );
        let env = Recorder(Mutex::new(Vec::new()));
        let mut log = common::vsl::Batch::with_reclen(255);
        let mut r = req("/news", &[]);
        r.method = Bytes::from_static(b"BAN");
        let a = {
            let mut t = Task::new(&env);
            t.req = Some(&mut r);
            t.log = Some((&mut log, 7, common::vsl::Side::Client));
            pol.call(Sub::Recv, &mut t)
        };
        assert_eq!(a, Action::Synth(200, "Ban added".into()));
        assert_eq!(*env.0.lock().unwrap(), vec!["obj.http.x-url ~ /news".to_string()]);
        let text: Vec<String> =
            common::vsl::Records::new(log.as_bytes()).map(|r| format!("{} {}", r.tag.name(), String::from_utf8_lossy(r.payload))).collect();
        assert!(text.iter().any(|l| l == "VCL_Error ban(): expected an operator"), "{text:?}");
        assert!(text.iter().any(|l| l == "VCL_Log banned /news"), "{text:?}");
        // A header value with CR LF would split the message: fail.
        let mut r = req("/", &[("X-In", "a\r\nInjected: 1")]);
        let mut t = Task::new(&env);
        t.req = Some(&mut r);
        assert_eq!(pol.call(Sub::Recv, &mut t), Action::Fail);
        assert!(t.failed.unwrap().contains("CR, LF"));
        assert_eq!(r.headers.get("x-sick").unwrap(), &b"1"[..]);
        assert!(r.headers.get("x-evil").is_none());
    }

    #[test]
    fn init_fail_refuses_the_load() {
        let p = parse_source("t.vcl", "vcl 4.1; sub vcl_init { return (fail); }").unwrap();
        let e = VclPolicy::load("t", compile(&p).unwrap()).err().unwrap();
        assert!(e.contains("Failed initialization"), "{e}");
        let p = parse_source("t.vcl", "vcl 4.1; sub vcl_init { return (ok); } sub vcl_fini { return (ok); }").unwrap();
        assert!(VclPolicy::load("t", compile(&p).unwrap()).is_ok());
    }

    #[test]
    fn arithmetic() {
        use Val::*;
        assert_eq!(arith("+", Int(2), Int(3)), Ok(Int(5)));
        assert_eq!(arith("*", Dur(10.0), Int(3)), Ok(Dur(30.0)));
        assert_eq!(arith("/", Dur(10.0), Dur(4.0)), Ok(Real(2.5)));
        assert_eq!(arith("-", Time(100.0), Time(40.0)), Ok(Dur(60.0)));
        assert_eq!(arith("+", Time(100.0), Dur(5.0)), Ok(Time(105.0)));
        assert_eq!(arith("+", Str("a".into()), Int(1)), Ok(Str("a1".into())));
        assert_eq!(arith("+", None, Str("x".into())), Ok(Str("x".into())));
        assert!(arith("/", Int(1), Int(0)).is_err());
        assert!(compare("<", &Dur(-1.0), &Dur(0.0)));
        assert!(compare("==", &Str("a".into()), &Str("a".into())));
        assert!(!compare("==", &None, &Str(String::new())));
        assert!(compare("!=", &None, &Str("x".into())));
        assert!(compare(">=", &Int(3), &Real(2.5)));
    }

    #[test]
    fn builtin_vcl_text_decides_as_the_native_builtin() {
        let p = parse_source("builtin.vcl", crate::vcl::BUILTIN_VCL).unwrap_or_else(|e| panic!("{e}"));
        let vcl = VclPolicy::load("builtin", compile(&p).unwrap_or_else(|e| panic!("{}", e.render(&p.files)))).unwrap();
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("GET", &[("Host", "a")]),
            ("GET", &[("Host", "Example.COM")]),
            ("HEAD", &[("Host", "a")]),
            ("POST", &[("Host", "a")]),
            ("GET", &[("Host", "a"), ("Cookie", "x=1")]),
            ("GET", &[("Host", "a"), ("Authorization", "Basic x")]),
            ("BREW", &[("Host", "a")]),
            ("PRI", &[("Host", "a")]),
            ("GET", &[]),
        ];
        for (method, hdrs) in cases {
            let run = |pol: &dyn Policy| {
                let mut r = req("/x", hdrs);
                r.method = Bytes::copy_from_slice(method.as_bytes());
                let a = {
                    let mut t = Task::new(&NoEnv);
                    t.req = Some(&mut r);
                    pol.call(Sub::Recv, &mut t)
                };
                let mut key = Vec::new();
                let mut t = Task::new(&NoEnv);
                t.local = Some("127.0.0.1:80".parse().unwrap());
                t.req = Some(&mut r);
                t.key = Some(&mut key);
                pol.call(Sub::Hash, &mut t);
                (a, r.headers.get("host").cloned(), key)
            };
            assert_eq!(run(&vcl), run(&policy::Builtin), "{method} {hdrs:?}");
        }
        let beresps: &[(f64, &[(&str, &str)])] = &[
            (120.0, &[]),
            (0.0, &[]),
            (60.0, &[("Set-Cookie", "a=b")]),
            (60.0, &[("Cache-Control", "private, max-age=60")]),
            (60.0, &[("Cache-Control", "No-Store")]),
            (60.0, &[("Surrogate-Control", "max-age=60"), ("Cache-Control", "no-cache")]),
            (60.0, &[("Surrogate-Control", "no-store")]),
            (60.0, &[("Vary", "*")]),
        ];
        for (ttl, hdrs) in beresps {
            for uncacheable in [false, true] {
                let run = |pol: &dyn Policy| {
                    let mut bereq = Bereq { uncacheable, ..Bereq::default() };
                    let mut b = Beresp { status: 200, ttl: *ttl, headers: req("/", hdrs).headers, ..Beresp::default() };
                    let mut t = Task::new(&NoEnv);
                    t.bereq = Some(&mut bereq);
                    t.beresp = Some(&mut b);
                    let a = pol.call(Sub::BackendResponse, &mut t);
                    (a, b.ttl, b.uncacheable)
                };
                assert_eq!(run(&vcl), run(&policy::Builtin), "{ttl} {hdrs:?} {uncacheable}");
            }
        }
        let synth = |pol: &dyn Policy| {
            let mut r = Req { xid: 9, ..Req::default() };
            let mut resp = Resp { status: 503, reason: Bytes::from_static(b"Backend fetch failed"), ..Resp::default() };
            let mut body = Vec::new();
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            t.resp = Some(&mut resp);
            t.body = Some(&mut body);
            pol.call(Sub::Synth, &mut t);
            (body, resp.headers.get("content-type").cloned())
        };
        assert_eq!(synth(&vcl), synth(&policy::Builtin));
    }

    #[test]
    fn varnish7_builtin_calls_and_body_variables() {
        let pol = load(
            r#"vcl 4.1;
            sub vcl_recv {
                if (req.url == "/x") { set req.http.Cookie = "a=1"; }
                call vcl_builtin_recv;
                set req.http.X-After = "yes";
                return (hash);
            }
            sub vcl_synth { set resp.body = "plain " + resp.status; return (deliver); }"#,
        );
        let (a, _, h) = {
            let mut r = req("/x", &[("Host", "a")]);
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            let a = pol.call(Sub::Recv, &mut t);
            (a, (), r.headers)
        };
        assert_eq!(a, Action::Pass, "the built-in half returned pass for the cookie");
        assert!(h.get("x-after").is_none());
        let mut r = req("/y", &[("Host", "a")]);
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        assert_eq!(pol.call(Sub::Recv, &mut t), Action::Hash);
        assert_eq!(r.headers.get("x-after").unwrap(), &b"yes"[..], "fell through the built-in half");
        let mut resp = Resp { status: 404, ..Resp::default() };
        let mut body = Vec::new();
        let mut t = Task::new(&NoEnv);
        t.resp = Some(&mut resp);
        t.body = Some(&mut body);
        pol.call(Sub::Synth, &mut t);
        assert_eq!(body, b"plain 404");
        assert!(compile_err("sub vcl_deliver { call vcl_builtin_recv; }").contains("can only be called from vcl_recv"));
        let p = parse_source("t.vcl", "vcl 4.1; sub vcl_recv { std.log(\"x\"); }").unwrap();
        assert!(compile(&p).err().unwrap().msg.contains("import std;"));
    }

    #[test]
    fn every_listed_function_compiles() {
        let arity = |f: &str| match f {
            "regsub" | "regsuball" => "req.url, \"a\", \"b\"",
            "std.integer" | "std.real" | "std.duration" | "std.time" | "std.ip" | "std.syslog" => "\"1\", \"2\"",
            "std.collect" => "req.http.x",
            "std.healthy" => "req.backend_hint",
            "std.port" => "client.ip",
            _ => "\"x\"",
        };
        for f in FUNCTIONS {
            let sub = match f {
                "hash_data" => "vcl_hash",
                "synthetic" => "vcl_synth",
                _ => "vcl_recv",
            };
            let src = format!("vcl 4.1;\nimport std;\nsub {sub} {{ {f}({}); }}", arity(f));
            let p = parse_source("t.vcl", &src).unwrap();
            compile(&p).unwrap_or_else(|e| panic!("{f}: {}", e.render(&p.files)));
        }
    }
}
