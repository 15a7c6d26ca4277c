//! Compile-time checks that need the whole program: which `return()`
//! actions each subroutine may use (in every context that reaches it),
//! calls to undefined or recursive subroutines, unknown `vcl_*` names, and
//! hints for variables Varnish 4.0 renamed.

use std::collections::{HashMap, HashSet};

use super::ast::*;
use super::diag::VclError;
use crate::vcl::builtin::{split_method, BUILTIN_PARTS, SPLIT_SUBS};
use crate::vcl::model::Sub;

/// The modules `import` accepts (another is refused when the program
/// loads, as varnishd refuses a vmod it cannot find).
pub const VMODS: &[&str] = &[
    "std",
    "directors",
    "blob",
    "cookie",
    "purge",
    "tls",
    "xkey",
    "dynamic",
    "proxy",
    "unix",
    "vsthrottle",
    "bodyaccess",
    "saintmode",
    "tcp",
    "var",
    "str",
    "header",
    "accept",
];

/// The built-in subroutines and the actions each may return (VCL 4.1).
pub const BUILTIN_SUBS: &[(&str, &[&str])] = &[
    ("vcl_recv", &["fail", "synth", "pass", "pipe", "hash", "purge", "vcl", "restart"]),
    ("vcl_pipe", &["fail", "synth", "pipe"]),
    ("vcl_pass", &["fail", "synth", "restart", "fetch"]),
    ("vcl_hash", &["fail", "lookup"]),
    ("vcl_purge", &["fail", "synth", "restart"]),
    ("vcl_hit", &["fail", "synth", "restart", "pass", "miss", "deliver"]),
    ("vcl_miss", &["fail", "synth", "restart", "pass", "fetch"]),
    ("vcl_deliver", &["fail", "synth", "restart", "deliver"]),
    ("vcl_synth", &["fail", "restart", "deliver"]),
    ("vcl_backend_fetch", &["fail", "abandon", "fetch", "error"]),
    ("vcl_backend_response", &["fail", "abandon", "deliver", "retry", "pass", "error"]),
    ("vcl_backend_error", &["fail", "abandon", "deliver", "retry"]),
    ("vcl_init", &["fail", "ok"]),
    ("vcl_fini", &["ok"]),
];

/// Variables 4.0 renamed or removed, and what to write instead. (req.grace
/// is not here: Varnish 6 brought it back, as the upper bound on the grace
/// a request accepts, and so do we.)
const LEGACY_VARS: &[(&str, &str)] = &[
    ("req.request", "req.method"),
    ("bereq.request", "bereq.method"),
    ("obj.cacheable", "beresp.uncacheable (inverted) in vcl_backend_response"),
    ("beresp.cacheable", "beresp.uncacheable (inverted)"),
    ("obj.lastuse", "obj.age"),
    ("req.backend", "req.backend_hint"),
    ("client.identity", "client.identity (exists, but check its 4.x meaning)"),
];

/// `vcl_builtin_recv` and friends (Varnish 7): the built-in half of a
/// subroutine, callable from that subroutine.
pub use crate::vcl::builtin::builtin_part;

fn legal(sub: &str) -> Option<&'static [&'static str]> {
    BUILTIN_SUBS.iter().find(|(n, _)| *n == sub).map(|(_, a)| *a)
}

/// Visit an expression and every one inside it (depth first).
pub(super) fn walk_exprs<'a>(e: &'a Expr, f: &mut impl FnMut(&'a Expr)) {
    f(e);
    match e {
        Expr::Call { args, .. } => args.iter().for_each(|a| walk_exprs(a, f)),
        Expr::Not(x, _) | Expr::Neg(x, _) => walk_exprs(x, f),
        Expr::Binary { left, right, .. } => {
            walk_exprs(left, f);
            walk_exprs(right, f);
        }
        _ => {}
    }
}

/// Visit every statement (depth first).
pub(super) fn walk<'a>(body: &'a [Stmt], f: &mut impl FnMut(&'a Stmt)) {
    for s in body {
        f(s);
        match s {
            Stmt::If { branches, otherwise, .. } => {
                for (_, b) in branches {
                    walk(b, f);
                }
                if let Some(o) = otherwise {
                    walk(o, f);
                }
            }
            Stmt::Block(b) => walk(b, f),
            _ => {}
        }
    }
}

/// Variables of one VCL version only: (name, 4.1 only?).
const VERSIONED_VARS: &[(&str, bool)] = &[
    ("req.esi", false),
    ("beresp.storage_hint", false),
    ("resp.do_esi", true),
    ("sess.xid", true),
    ("local.endpoint", true),
    ("local.socket", true),
];

fn legacy_var(name: &str, pos: Pos, v41: bool) -> Result<(), VclError> {
    if let Some((_, only41)) = VERSIONED_VARS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).filter(|(_, o)| *o != v41) {
        let when = if *only41 { "4.1 <= VCL syntax" } else { "VCL syntax <= 4.0" };
        return Err(VclError { msg: format!("Symbol not found: '{name}' (Only available when {when})"), pos });
    }
    match LEGACY_VARS.iter().find(|(old, _)| *old == name) {
        Some((old, new)) if *old != "client.identity" => {
            Err(VclError { msg: format!("Variable '{old}' is gone since Varnish 4.0: use {new}"), pos })
        }
        _ => Ok(()),
    }
}

/// Which built-in subroutines each subroutine runs in: itself for a
/// built-in one, every built-in one that calls it (directly or not) for a
/// user one.
pub type Contexts = HashMap<String, Vec<Sub>>;

/// Check the program; the first error found, or the subroutines' contexts.
pub fn check(p: &Program) -> Result<Contexts, VclError> {
    let mut subs: HashMap<&str, (&[Stmt], Pos)> = HashMap::new();
    for item in &p.items {
        if let Item::Sub { name, body, pos } = item {
            if name.starts_with("vcl_") && legal(name).is_none() && split_method(name).is_none() && builtin_part(name).is_none() {
                return Err(VclError { msg: format!("Unknown VCL subroutine '{name}' (the vcl_ prefix is reserved)"), pos: *pos });
            }
            // Varnish concatenates repeated definitions of a sub; so do we
            // when compiling, but each body is checked on its own here.
            subs.entry(name.as_str()).or_insert((body.as_slice(), *pos));
        }
    }
    // A module cache-d does not have is refused by name, as varnishd
    // refuses one it cannot find.
    for item in &p.items {
        if let Item::Import { module, pos } = item {
            if !VMODS.contains(&module.as_str()) {
                return Err(VclError { msg: format!("Could not find VMOD {module}"), pos: *pos });
            }
        }
    }
    let mut imports: HashSet<&str> =
        p.items.iter().filter_map(|i| if let Item::Import { module, .. } = i { Some(module.as_str()) } else { None }).collect();
    // Objects made with `new` (in vcl_init) are called like modules.
    for item in &p.items {
        if let Item::Sub { name, body, .. } = item {
            let mut err = None;
            walk(body, &mut |s| {
                if let Stmt::New { name: obj, ctor, pos } = s {
                    imports.insert(obj.as_str());
                    if let Expr::Call { name: ctor_name, pos: cpos, .. } = ctor {
                        if let Some((m, _)) = ctor_name.split_once('.') {
                            let imported = p.items.iter().any(|i| matches!(i, Item::Import { module, .. } if module == m));
                            if !imported && err.is_none() {
                                err = Some(VclError {
                                    msg: format!("Symbol not found: '{ctor_name}' (did you mean to 'import {m};'?)"),
                                    pos: *cpos,
                                });
                            }
                        }
                    }
                    if name != "vcl_init" && err.is_none() {
                        err = Some(VclError { msg: "\"new\" is only allowed in vcl_init".into(), pos: *pos });
                    }
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
        }
    }
    // Statements and expressions: legacy variables, calls that exist.
    let v41 = p.items.iter().any(|i| matches!(i, Item::Version { version, .. } if version == "4.1"));
    for item in &p.items {
        let Item::Sub { body, .. } = item else { continue };
        let mut err = None;
        walk(body, &mut |s| {
            if err.is_some() {
                return;
            }
            let r = match s {
                Stmt::Set { target, pos, value, .. } => legacy_var(target, *pos, v41).and_then(|_| exprs_ok(value, &imports, v41)),
                Stmt::Unset { target, pos } => legacy_var(target, *pos, v41),
                Stmt::Call { sub, pos }
                    if !subs.contains_key(sub.as_str()) && builtin_part(sub).is_none() && split_method(sub).is_none() =>
                {
                    Err(VclError { msg: format!("Subroutine '{sub}' is not defined"), pos: *pos })
                }
                Stmt::If { branches, .. } => branches.iter().try_for_each(|(c, _)| exprs_ok(c, &imports, v41)),
                Stmt::Expr(e) => exprs_ok(e, &imports, v41),
                Stmt::Return { args, .. } => args.iter().try_for_each(|a| exprs_ok(a, &imports, v41)),
                _ => Ok(()),
            };
            if let Err(e) = r {
                err = Some(e);
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
    }
    // Which built-in subs reach each sub, and no recursion.
    let calls = |body: &[Stmt]| {
        let mut out = Vec::new();
        walk(body, &mut |s| {
            if let Stmt::Call { sub, pos } = s {
                out.push((sub.clone(), *pos));
            }
        });
        out
    };
    let mut reached: HashMap<String, HashSet<&str>> = HashMap::new();
    for (root, _) in BUILTIN_SUBS {
        let mut stack: Vec<(Vec<String>, &[Stmt])> = Vec::new();
        if let Some((body, _)) = subs.get(root) {
            stack.push((vec![root.to_string()], body));
        }
        // The built-in body calls the split subroutines (its own or the
        // program's).
        for (split, m) in SPLIT_SUBS.iter().chain(&BUILTIN_PARTS).filter(|(_, m)| m.name() == *root) {
            if let Some((body, _)) = subs.get(*split) {
                reached.entry(split.to_string()).or_default().insert(m.name());
                stack.push((vec![root.to_string(), split.to_string()], body));
            }
        }
        while let Some((path, body)) = stack.pop() {
            for (callee, pos) in calls(body) {
                if path.contains(&callee) {
                    return Err(VclError { msg: format!("Recursive call to '{callee}' ({} → {callee})", path.join(" → ")), pos });
                }
                reached.entry(callee.clone()).or_default().insert(root);
                if let Some((b, _)) = subs.get(callee.as_str()) {
                    let mut p = path.clone();
                    p.push(callee);
                    stack.push((p, b));
                }
            }
        }
    }
    // Return actions: legal in the sub itself (built-in) or in every
    // built-in sub that reaches it (user sub).
    for (name, (body, _)) in &subs {
        let contexts: Vec<&str> = match legal(name) {
            Some(_) => vec![name],
            None => reached.get(*name).map(|s| s.iter().copied().collect()).unwrap_or_default(),
        };
        let mut err = None;
        walk(body, &mut |s| {
            if let (Stmt::Return { action, pos, .. }, None) = (s, &err) {
                if action.is_empty() {
                    return;
                }
                for ctx in &contexts {
                    if !legal(ctx).is_some_and(|l| l.contains(&action.as_str())) {
                        let allowed = legal(ctx).unwrap_or(&[]).join(", ");
                        err = Some(VclError {
                            msg: format!(
                                "Invalid return \"{action}\" in {ctx}{} (allowed: {allowed})",
                                if ctx != name { format!(" (called from {name})") } else { String::new() }
                            ),
                            pos: *pos,
                        });
                        break;
                    }
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
    }
    super::types::check(p)?;
    let mut out = Contexts::new();
    for name in subs.keys() {
        let ctx: Vec<Sub> = match Sub::from_name(name) {
            Some(s) => vec![s],
            None => {
                let mut v: Vec<Sub> = reached.get(*name).map(|s| s.iter().filter_map(|n| Sub::from_name(n)).collect()).unwrap_or_default();
                v.sort_by_key(|s| *s as u8);
                v
            }
        };
        out.insert(name.to_string(), ctx);
    }
    Ok(out)
}

/// Legacy names used as values, functions 4.0 removed, and module
/// functions whose module was not imported.
fn exprs_ok(e: &Expr, imports: &HashSet<&str>, v41: bool) -> Result<(), VclError> {
    let mut r = Ok(());
    walk_exprs(e, &mut |x| {
        if r.is_err() {
            return;
        }
        r = match x {
            Expr::Name(n, pos) => legacy_var(n, *pos, v41),
            Expr::Call { name, pos, .. } if name == "purge" || name == "purge_url" => {
                Err(VclError { msg: format!("{name}() is gone since Varnish 4.0: use ban(\"req.url ~ ...\")"), pos: *pos })
            }
            Expr::Call { name, pos, .. } if name.split_once('.').is_some_and(|(m, _)| !m.is_empty() && !imports.contains(m)) => {
                let module = name.split_once('.').map_or("", |(m, _)| m);
                Err(VclError { msg: format!("Symbol not found: '{name}' (did you mean to 'import {module};'?)"), pos: *pos })
            }
            _ => Ok(()),
        };
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcl::parse_source;

    fn check_src(src: &str) -> Result<(), String> {
        let p = parse_source("t.vcl", &format!("vcl 4.1;\n{src}\n")).map_err(|e| e.to_string())?;
        check(&p).map(|_| ()).map_err(|e| e.render(&p.files))
    }

    #[test]
    fn return_actions_are_checked_per_subroutine() {
        assert!(check_src("sub vcl_recv { return (hash); }").is_ok());
        let e = check_src("sub vcl_recv { return (deliver); }").unwrap_err();
        assert!(e.contains("Invalid return \"deliver\" in vcl_recv") && e.contains("Line 2"), "{e}");
        assert!(check_src("sub vcl_backend_response { return (lookup); }").is_err());
        // A user sub is checked in every context that calls it.
        assert!(check_src("sub pick { return (pass); } sub vcl_recv { call pick; }").is_ok());
        let e = check_src("sub pick { return (pass); } sub vcl_recv { call pick; } sub vcl_deliver { call pick; }").unwrap_err();
        assert!(e.contains("in vcl_deliver (called from pick)"), "{e}");
    }

    #[test]
    fn calls_and_names() {
        assert!(check_src("sub vcl_recv { call nothere; }").unwrap_err().contains("not defined"));
        assert!(check_src("sub a { call b; } sub b { call a; } sub vcl_recv { call a; }").unwrap_err().contains("Recursive"));
        assert!(check_src("sub vcl_bogus { }").unwrap_err().contains("Unknown VCL subroutine"));
        let e = check_src("sub vcl_recv { if (req.request == \"GET\") { return (hash); } }").unwrap_err();
        assert!(e.contains("use req.method"), "{e}");
        let e = check_src("sub vcl_backend_response { set beresp.cacheable = true; }").unwrap_err();
        assert!(e.contains("beresp.uncacheable"), "{e}");
    }
}
