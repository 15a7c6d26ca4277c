//! Cross references, as Varnish's VCC checks them: a backend, probe, ACL or
//! subroutine that is declared but never named is an error (a warning
//! with the `vcc_err_unref` parameter off), and a subroutine or probe
//! declared twice is refused.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ast::*;
use super::diag::{err, VclError};

/// The `vcc_err_unref` parameter: is an unused declaration an error? One
/// per process (the manager and the child each keep their parameters),
/// set when the parameter is.
static ERR_UNREF: AtomicBool = AtomicBool::new(true);

/// Set `vcc_err_unref` (from [`crate::params::Params::set`]).
pub fn set_err_unref(on: bool) {
    ERR_UNREF.store(on, Ordering::Relaxed);
}

/// The current `vcc_err_unref`.
pub fn err_unref() -> bool {
    ERR_UNREF.load(Ordering::Relaxed)
}

fn names_in(e: &Expr, out: &mut HashSet<String>) {
    super::check::walk_exprs(e, &mut |x| {
        if let Expr::Name(n, _) = x {
            out.insert(n.clone());
        }
    });
}

fn names_in_stmts(body: &[Stmt], out: &mut HashSet<String>) {
    super::check::walk(body, &mut |s| match s {
        Stmt::Set { value, .. } => names_in(value, out),
        Stmt::If { branches, .. } => branches.iter().for_each(|(c, _)| names_in(c, out)),
        Stmt::Return { args, .. } => args.iter().for_each(|a| names_in(a, out)),
        Stmt::Call { sub, .. } => {
            out.insert(sub.clone());
        }
        Stmt::New { ctor, .. } => names_in(ctor, out),
        Stmt::Expr(e) => names_in(e, out),
        Stmt::Block(_) | Stmt::Unset { .. } => {}
    });
}

fn names_in_fields(fields: &[Field], out: &mut HashSet<String>) {
    for f in fields {
        match &f.value {
            FieldValue::Name(n) => {
                out.insert(n.clone());
            }
            FieldValue::Expr(e) => names_in(e, out),
            FieldValue::Block(b) => names_in_fields(b, out),
            FieldValue::Blob(_) => {}
        }
    }
}

/// Every name the program mentions (in subroutines and declarations).
fn referenced(p: &Program) -> HashSet<String> {
    let mut out = HashSet::new();
    for item in &p.items {
        match item {
            Item::Sub { body, .. } => names_in_stmts(body, &mut out),
            Item::Backend { fields, .. } | Item::Probe { fields, .. } => names_in_fields(fields, &mut out),
            _ => {}
        }
    }
    out
}

/// A user subroutine or a probe declared twice.
pub fn redefinitions(p: &Program) -> Result<(), VclError> {
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    for item in &p.items {
        match item {
            Item::Sub { name, pos, .. } if !name.starts_with("vcl_") && !seen.insert(("sub", name)) => {
                return err(format!("Subroutine '{name}' redefined"), *pos);
            }
            Item::Probe { name, pos, .. } if !seen.insert(("probe", name)) => {
                return err(format!("Probe '{name}' redefined."), *pos);
            }
            _ => {}
        }
    }
    Ok(())
}

/// With `err_unref`, a declaration never used. The first backend is the
/// default one and needs no reference, unless one named `default` follows.
pub fn unused(p: &Program, err_unref: bool) -> Result<(), VclError> {
    match err_unref {
        true => never_named(p).into_iter().next().map_or(Ok(()), Err),
        false => Ok(()),
    }
}

/// Without `err_unref`, the declarations never used: warnings, printed
/// before "VCL compiled." as Varnish's compiler prints them.
pub fn warnings(p: &Program) -> Vec<VclError> {
    match err_unref() {
        true => Vec::new(),
        false => never_named(p),
    }
}

/// Every declaration never named, in order.
fn never_named(p: &Program) -> Vec<VclError> {
    let refs = referenced(p);
    let has_default = p.items.iter().any(|i| matches!(i, Item::Backend { name, .. } if name == "default"));
    let mut first_backend = !has_default;
    let mut out = Vec::new();
    for item in &p.items {
        let (kind, name, pos) = match item {
            Item::Backend { name, pos, .. } => {
                if std::mem::take(&mut first_backend) || name == "default" {
                    continue;
                }
                ("backend", name, pos)
            }
            // A probe named default is the one backends without .probe get.
            Item::Probe { name, pos, .. } if name != "default" => ("probe", name, pos),
            Item::Acl { name, pos, .. } => ("acl", name, pos),
            Item::Sub { name, pos, .. } if !name.starts_with("vcl_") => ("sub", name, pos),
            _ => continue,
        };
        if !refs.contains(name.as_str()) {
            out.push(VclError { msg: format!("Unused {kind} {name}, defined:"), pos: *pos });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcl::parse_source;

    fn xref(src: &str, on: bool) -> Result<(), String> {
        let p = parse_source("t.vcl", &format!("vcl 4.1;\n{src}\n")).map_err(|e| e.to_string())?;
        redefinitions(&p).and_then(|_| unused(&p, on)).map_err(|e| e.msg)
    }

    #[test]
    fn unused_declarations() {
        let two = "backend a { .host = \"x\"; } backend b { .host = \"y\"; }";
        assert_eq!(xref(two, true).unwrap_err(), "Unused backend b, defined:");
        assert!(xref(two, false).is_ok());
        assert!(xref(&format!("{two} sub vcl_recv {{ set req.backend_hint = b; }}"), true).is_ok());
        // A later `default` makes the first one need a reference.
        let e = xref("backend a { .host = \"x\"; } backend default { .host = \"y\"; }", true).unwrap_err();
        assert_eq!(e, "Unused backend a, defined:");
        assert_eq!(xref("acl foo { \"127.0.0.1\"; }", true).unwrap_err(), "Unused acl foo, defined:");
        assert_eq!(xref("sub foo { }", true).unwrap_err(), "Unused sub foo, defined:");
        assert!(xref("sub foo { } sub vcl_recv { call foo; }", true).is_ok());
        assert!(xref("probe p { } backend a { .host = \"x\"; .probe = p; }", true).is_ok());
    }

    #[test]
    fn redefined_subs_and_probes() {
        assert!(xref("sub c1 { } sub c1 { } sub vcl_recv { call c1; }", false).unwrap_err().contains("redefined"));
        assert!(xref("probe p { } probe p { }", false).unwrap_err().contains("redefined"));
        assert!(xref("sub vcl_recv { } sub vcl_recv { }", true).is_ok());
    }
}
