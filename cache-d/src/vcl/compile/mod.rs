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
use std::sync::Arc;

use common::log::vsl::Tag;

use super::ast::*;
use super::diag::{err, unsupported, VclError};
use crate::vcl::builtin;
use crate::vcl::model::{Action, NoEnv, Sub, Task};
use crate::vcl::policy::Policy;

mod accept;
mod blob;
mod bodyaccess;
mod cookie;
mod decls;
mod dynamic;
mod funcs;
mod header;
mod program;
mod proxy;
mod re;
mod saintmode;
mod shardparam;
mod stdx;
mod strmod;
mod tcp;
#[cfg(test)]
mod tests;
mod unixmod;
mod var;
mod vars;
mod vmod;
mod vmodargs;
mod vsthrottle;

pub use decls::BackendSpec;
use decls::*;
use funcs::*;
pub use funcs::{querysort, variables, FUNCTIONS, VMODS};
use program::*;
pub use program::{Compiled, Val};
use re::regex_arg;
use vars::*;

/// Compile a parsed program; checks first.
pub fn compile(p: &Program) -> Result<Compiled, VclError> {
    super::xref::redefinitions(p)?;
    let contexts = super::check::check(p)?;
    let mut c = Compiled::new(p.files.iter().any(|(_, src)| src.contains("do_esi")));
    let mut probes: HashMap<String, crate::backend::health::ProbeSpec> = HashMap::new();
    for item in &p.items {
        match item {
            Item::Probe { name, fields, .. } => {
                check_probe(fields)?;
                probes.insert(name.clone(), probe_spec(fields));
            }
            Item::Acl { name, flags, entries, pos } => {
                if c.acls.contains_key(name) {
                    return err(format!("ACL '{name}' redefined"), *pos);
                }
                c.acls.insert(name.clone(), Acl { entries: acl_entries(flags, entries)?, log: flags.log });
            }
            Item::Backend { name, fields, none, pos } => {
                if c.backends.contains(name) {
                    return err(format!("Backend '{name}' redefined"), *pos);
                }
                if *none {
                    // Declared, never contacted: no address, nothing to connect to.
                    c.backends.push(name.clone());
                    continue;
                }
                check_backend(name, fields, *pos)?;
                c.backends.push(name.clone());
                c.backend_specs.push(backend_spec(name, fields, &probes, *pos)?);
                if c.backend.is_none() || name == "default" {
                    let get = |n: &str| {
                        fields.iter().find(|f| f.name == n).and_then(|f| match &f.value {
                            FieldValue::Expr(Expr::Str(s, _)) => Some(s.clone()),
                            FieldValue::Expr(Expr::Int(i, _)) => Some(i.to_string()),
                            _ => None,
                        })
                    };
                    let host = get("host").unwrap_or_else(|| "127.0.0.1".into());
                    c.backend = Some(crate::backend::pool::host_port(&host, &get("port").unwrap_or_else(|| "80".into())));
                }
            }
            _ => {}
        }
    }
    // Objects are declared by `new` in vcl_init; collected first so every
    // subroutine can call them.
    let version = p.items.iter().find_map(|i| match i {
        Item::Version { version, .. } => version.parse::<f64>().ok(),
        _ => None,
    });
    let version = version.unwrap_or(4.0);
    let mut objects: HashMap<String, ObjKind> = HashMap::new();
    for item in &p.items {
        if let Item::Sub { body, .. } = item {
            collect_objects(body, &mut objects)?;
        }
    }
    c.declares_directors =
        objects.values().any(|k| !matches!(k, ObjKind::Resolver | ObjKind::Blob | ObjKind::Accept | ObjKind::ShardParam));
    for item in &p.items {
        if let Item::Sub { name, body, .. } = item {
            let scope = Scope {
                ctx: contexts.get(name).cloned().unwrap_or_default(),
                acls: &c.acls,
                backends: &c.backends,
                probes: &probes,
                objects: &objects,
                version,
                compile_expr: expr,
            };
            let mut stmts = block(body, &scope)?;
            c.subs.entry(name.clone()).or_default().append(&mut stmts);
            // A method's own vcl_builtin_* is code of the program's in it too.
            if let Some(s) = Sub::from_name(name).or_else(|| builtin::builtin_part(name)) {
                c.defined[s as usize] = true;
            }
        }
    }
    super::xref::unused(p, super::xref::err_unref())?;
    Ok(c)
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
                // A header set from something unset is there, empty (as
                // Varnish's VRT_SetHdr makes it); only `unset` removes it.
                let header = target.contains(".http.");
                Box::new(move |t, c| {
                    let val = match v(t, c) {
                        Val::None if header => Val::Str(String::new()),
                        // Past what a date can say (year 2^31): the task fails.
                        Val::Time(ts) if header && (ts.is_nan() || ts.abs() >= 6.7e16) => {
                            fail(t, "Unformatable VCL_TIME".into());
                            return Flow::Next;
                        }
                        val => val,
                    };
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
        // The request body is not sent (Varnish allows it in
        // vcl_backend_fetch only).
        Stmt::Unset { target, pos } if target.eq_ignore_ascii_case("bereq.body") => {
            if let Some(other) = sc.ctx.iter().find(|s| **s != Sub::BackendFetch) {
                return err(format!("'bereq.body' cannot be unset in {}", other.name()), *pos);
            }
            Box::new(move |t, _| {
                if let Some(b) = t.bereq.as_deref_mut() {
                    b.no_body = true;
                }
                Flow::Next
            })
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
            Box::new(move |t, c| {
                let a = builtin::builtin_with(part, t, &split_hook(c));
                if a == builtin::fallthrough(part) {
                    Flow::Next
                } else {
                    Flow::Return(a)
                }
            })
        }
        Stmt::Call { sub, .. } if builtin::split_method(sub).is_some() => {
            let sub = sub.clone();
            Box::new(move |t, c| match builtin::split(&sub, t, &split_hook(c)) {
                Some(a) => Flow::Return(a),
                None => Flow::Next,
            })
        }
        Stmt::Call { sub, .. } => {
            let sub = sub.clone();
            Box::new(move |t, c| match c.subs.get(&sub) {
                Some(body) => match run(body, t, c) {
                    Flow::Leave => Flow::Next,
                    flow => flow,
                },
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
        Stmt::New { name, ctor, .. } => match (sc.objects[name], ctor) {
            (ObjKind::Director(kind), _) => {
                let name = name.clone();
                Box::new(move |_, c| {
                    c.directors().insert(name.clone(), Arc::new(crate::backend::director::Director::new(&name, kind)));
                    Flow::Next
                })
            }
            (ObjKind::Dynamic, Expr::Call { args, names, .. }) => dynamic::director_new(name, args, names, sc)?,
            (ObjKind::Resolver, Expr::Call { args, names, .. }) => dynamic::resolver_new(name, args, names)?,
            (ObjKind::Saintmode, Expr::Call { args, names, pos, .. }) => saintmode::object_new(name, args, names, *pos, sc)?,
            (ObjKind::Blob, Expr::Call { args, names, .. }) => blob::object_new(name, args, names, sc)?,
            (ObjKind::ShardParam, _) => shardparam::object_new(name),
            (ObjKind::Accept, Expr::Call { args, names, pos, .. }) => accept::object_new(name, args, names, *pos, sc)?,
            (_, other) => return err("\"new\" takes a constructor", other.pos()),
        },
    })
}

/// Runs the program's own version of a split subroutine (`vcl_req_cookie`
/// and the like), which comes before the built-in body.
fn split_hook(c: &Compiled) -> impl Fn(&str, &mut Task<'_>) -> builtin::Split + '_ {
    move |name, t| match c.subs.get(name) {
        None => builtin::Split::Builtin,
        Some(body) => match run(body, t, c) {
            Flow::Return(a) => builtin::Split::Return(a),
            Flow::Leave => builtin::Split::Done,
            Flow::Next => builtin::Split::Builtin,
        },
    }
}

/// `return (action)`: its arguments evaluated when it runs.
fn ret(action: &str, args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<StmtFn, VclError> {
    if let ("vcl", [Expr::Name(label, _)]) = (action, args) {
        let label = label.clone();
        return Ok(Box::new(move |_, _| Flow::Return(Action::Vcl(label.clone()))));
    }
    let a: Vec<ExprFn> = args.iter().map(|x| expr(x, sc)).collect::<Result<_, _>>()?;
    let fixed = match (action, a.len()) {
        ("", 0) => return Ok(Box::new(|_, _| Flow::Leave)),
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
                let reason = reason.unwrap_or_else(|| builtin::reason_phrase(status % 1000).to_string());
                // The reason goes on the status line: the same check as resp.reason.
                if vars::wire_text(t, if err_side { "error" } else { "synth" }, &Val::Str(reason.clone())).is_none() {
                    return Flow::Return(Action::Fail);
                }
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

/// A backend name on the right of `set req.backend_hint =` / `set
/// bereq.backend =` must be declared.
fn backend_assign(target: &str, name: &str, pos: Pos, sc: &Scope<'_>) -> Result<(), VclError> {
    if !matches!(target, "req.backend_hint" | "bereq.backend") || sc.backends.iter().any(|b| b == name) {
        return Ok(());
    }
    err(format!("Backend '{name}' is not declared"), pos)
}

/// `+ - * /` on two values (and string concatenation with `+`). Every
/// operation is checked: an overflow, a division by zero or a result that
/// is not a finite number fails the request (VCL_Error, 503), as Varnish's
/// VRT checks do; it never wraps, saturates silently or panics.
fn arith(op: &str, a: Val, b: Val) -> Result<Val, String> {
    let v = arith_unchecked(op, a, b)?;
    match v {
        Val::Real(x) | Val::Dur(x) | Val::Time(x) if !x.is_finite() => Err(format!("{op}: the result is not a finite number")),
        v => Ok(v),
    }
}

fn arith_unchecked(op: &str, a: Val, b: Val) -> Result<Val, String> {
    use Val::*;
    let r = |x: &Val| x.num().unwrap_or(0.0);
    Ok(match (op, &a, &b) {
        ("+", Str(_) | None, _) | ("+", _, Str(_) | None) => Str(a.text() + &b.text()),
        ("+", Int(x), Int(y)) => Int(x.checked_add(*y).ok_or("integer overflow")?),
        ("-", Int(x), Int(y)) => Int(x.checked_sub(*y).ok_or("integer overflow")?),
        ("*", Int(x), Int(y)) => Int(x.checked_mul(*y).ok_or("integer overflow")?),
        ("/", Int(_), Int(0)) => return Err("division by zero".into()),
        ("/", Int(x), Int(y)) => Int(x.checked_div(*y).ok_or("integer overflow")?),
        ("%", Int(_), Int(0)) => return Err("division by zero".into()),
        ("%", Int(x), Int(y)) => Int(x.checked_rem(*y).ok_or("integer overflow")?),
        ("+" | "-", Time(t), Dur(d)) => Time(if op == "+" { t + d } else { t - d }),
        ("+", Dur(d), Time(t)) => Time(t + d),
        ("-", Time(x), Time(y)) => Dur(x - y),
        ("+" | "-", Dur(x), Dur(y)) => Dur(if op == "+" { x + y } else { x - y }),
        ("+" | "-", Bytes(x), Bytes(y)) => Bytes(if op == "+" { x.checked_add(*y) } else { x.checked_sub(*y) }.ok_or("BYTES overflow")?),
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
        // No arithmetic for these types (BOOL + INT, INT + DURATION):
        // in a string, VCC joins them as text ("false9", "90.000").
        ("+", _, _) => Str(a.text() + &b.text()),
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
                // An ACL where a string is expected is its name (Varnish).
                let name = n.clone();
                return Ok(Box::new(move |_, _| Val::Str(name.clone())));
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
                Val::Int(i) => match i.checked_neg() {
                    Some(n) => Val::Int(n),
                    None => {
                        fail(t, "integer overflow".into());
                        Val::None
                    }
                },
                Val::Real(d) => Val::Real(-d),
                Val::Dur(d) => Val::Dur(-d),
                _ => Val::None,
            })
        }
        Expr::Binary { op, left, right, pos: _ } => {
            let op = *op;
            if matches!(op, "~" | "!~") {
                return match_op(op == "~", left, right, sc);
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
        // A STRING's .upper() and .lower() (see the parser).
        Expr::Call { name, args, .. } if (name == ".upper" || name == ".lower") && args.len() == 1 => {
            let (on, upper) = (expr(&args[0], sc)?, name == ".upper");
            Box::new(move |t, c| {
                let s = on(t, c).text();
                Val::Str(if upper { s.to_uppercase() } else { s.to_lowercase() })
            })
        }
        Expr::Call { name, args, names, pos } => call(name, args, names, *pos, sc)?,
    })
}

/// `~` and `!~` (`want` is false for `!~`): an ACL match on an IP, or a
/// regex match on the text.
fn match_op(want: bool, left: &Expr, right: &Expr, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let l = expr(left, sc)?;
    if let Expr::Name(acl, _) = right {
        if sc.acls.contains_key(acl) {
            let acl = acl.clone();
            return Ok(Box::new(move |t, c| {
                let ip = l(t, c).ip();
                let hit = ip.is_some_and(|ip| c.acls.get(&acl).is_some_and(|a| a.matches(ip)));
                if let Some(ip) = ip {
                    if c.acls.get(&acl).is_some_and(|a| a.log) {
                        let verdict = if hit == want { "MATCH" } else { "NO_MATCH" };
                        t.record(Tag::VclAcl, format!("{verdict} {acl} {ip}").as_bytes());
                    }
                }
                Val::Bool(hit == want)
            }));
        }
    }
    let re = regex_arg(right)?;
    Ok(Box::new(move |t, c| {
        let v = l(t, c);
        // An unset value matches as the empty string (Varnish).
        let hit = re.is_match(&v.text());
        Val::Bool(hit == want)
    }))
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
            let addrs = crate::backend::pool::resolve(&crate::backend::pool::host_port(&spec.host, &spec.port))
                .map_err(|e| format!("backend {}: {e}", spec.name))?;
            bes.insert(spec.name.clone(), Arc::new(crate::backend::pool::Backend::with_cfg(name, &spec.name, addrs, spec.cfg.clone())));
        }
        let _ = prog.runtime.set(bes);
        let _ = prog.vcl_name.set(name.to_string());
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
    fn may_esi(&self) -> bool {
        self.prog.may_esi
    }
    fn defines(&self, sub: Sub) -> bool {
        self.prog.defined[sub as usize]
    }
    fn fini(&self) {
        let _ = self.call(Sub::Fini, &mut Task::new(&NoEnv));
        for d in self.prog.dynamics().values() {
            d.stop();
        }
        for b in self.backends() {
            b.stop_probe();
        }
    }
    fn start(&self, seg: &Arc<common::segment::SegmentWriter>) {
        for b in self.backends() {
            crate::backend::probe::start(&b, seg.clone());
        }
        for d in self.prog.dynamics().values() {
            d.attach(seg);
        }
    }
    fn backend(&self, name: Option<&str>, key: &[u8]) -> Option<Arc<crate::backend::pool::Backend>> {
        match name {
            Some(n) => self.prog.backend_named(n, key),
            None => self.prog.default_backend().and_then(|n| self.prog.backend_named(n, key)),
        }
    }
    fn backends(&self) -> Vec<Arc<crate::backend::pool::Backend>> {
        let Some(bes) = self.prog.runtime.get() else { return Vec::new() };
        let mut all: Vec<_> = self.prog.backends.iter().filter_map(|n| bes.get(n).cloned()).collect();
        all.extend(self.prog.dynamic_backends());
        all
    }
    fn directors(&self) -> Vec<crate::backend::probe::DirectorRow> {
        let ds: Vec<_> = self.prog.directors().values().cloned().collect();
        let bes = self.prog.runtime.get();
        let mut rows: Vec<_> = ds
            .iter()
            .map(|d| {
                let members = d.member_names();
                let since = members.iter().filter_map(|m| bes.and_then(|b| b.get(m))).map(|b| b.admin().1).fold(0.0, f64::max);
                let healthy = members.iter().filter(|m| self.prog.usable(m, 1)).count();
                crate::backend::probe::DirectorRow {
                    name: format!("{}.{}", self.name, d.name),
                    kind: d.kind.word(),
                    healthy,
                    total: members.len(),
                    since,
                }
            })
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        // A director of directors: when any member's health last changed.
        let latest = rows.iter().map(|r| r.since).fold(0.0, f64::max);
        for r in rows.iter_mut().filter(|r| r.since == 0.0) {
            r.since = latest;
        }
        rows
    }
    fn call(&self, sub: Sub, t: &mut Task<'_>) -> Action {
        let hook = split_hook(&self.prog);
        if !self.prog.defined[sub as usize] {
            return builtin::builtin_with(sub, t, &hook);
        }
        let action = match self.prog.subs.get(sub.name()).map(|body| run(body, t, &self.prog)) {
            Some(Flow::Return(a)) => a,
            _ => builtin::builtin_with(sub, t, &hook),
        };
        // A client subroutine's failure ends the request's task state
        // (Varnish's Req_Rollback before vcl_synth): the cookie jar.
        if matches!(action, Action::Fail) && !matches!(sub, Sub::Synth) && !sub.is_backend() {
            if let Some(r) = t.req.as_deref_mut() {
                r.cookies.clear();
                r.vars.clear();
            }
        }
        action
    }
}
