//! `import var;`: varnish-modules 0.20's vmod_var. A task's variables
//! (its PRIV_TASK: the client request's, the fetch's, or in vcl_init and
//! vcl_fini the call's own) are typed, kept on [`Req`], [`Bereq`] or
//! [`Task`]; a getter of another type than the variable's gives its zero
//! (0, 0.000, NULL). Global variables are strings shared by every task
//! of every program for the life of the process, as the vmod's static
//! list is.
//!
//! [`Req`]: crate::vcl::model::Req
//! [`Bereq`]: crate::vcl::model::Bereq

use std::sync::Mutex;

use super::program::*;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::{Task, TaskVar};

/// var.global_set()'s variables: name and value (None: set to NULL).
static GLOBALS: Mutex<Vec<(String, Option<String>)>> = Mutex::new(Vec::new());

/// A task's variables: the client request's where there is one, else
/// the fetch's, else (vcl_init, vcl_fini) the call's own.
fn vars<'a>(t: &'a mut Task<'_>) -> &'a mut Vec<(String, TaskVar)> {
    match (t.req.as_deref_mut(), t.bereq.as_deref_mut()) {
        (Some(r), _) => &mut r.vars,
        (None, Some(b)) => &mut b.vars,
        (None, None) => &mut t.vars,
    }
}

/// Set `name` (a NULL name does nothing, as the vmod).
fn put(t: &mut Task<'_>, name: &Val, v: TaskVar) {
    let Val::Str(name) = name else {
        if !matches!(name, Val::None) {
            put(t, &Val::Str(name.text()), v);
        }
        return;
    };
    let vs = vars(t);
    match vs.iter_mut().find(|(n, _)| n == name) {
        Some(e) => e.1 = v,
        None => vs.push((name.clone(), v)),
    }
}

/// The variable `name`, if it is set.
fn lookup(t: &mut Task<'_>, name: &Val) -> Option<TaskVar> {
    if matches!(name, Val::None) {
        return None;
    }
    let name = name.text();
    vars(t).iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone())
}

/// The arguments in the order of `params` (VCC takes them by position or
/// by name, `var.set(value = "1", key = "a")`); a missing one with a
/// default in `defaults` takes it. An unknown or repeated name, or too
/// many or too few, refuses the program.
pub(super) fn in_order(
    name: &str,
    params: &[&str],
    defaults: &[Option<Expr>],
    args: &[Expr],
    names: &[Option<String>],
    pos: Pos,
) -> Result<Vec<Expr>, VclError> {
    if args.len() > params.len() {
        return err(format!("{name}() takes at most {} argument(s), not {}", params.len(), args.len()), pos);
    }
    let mut out: Vec<Option<Expr>> = vec![None; params.len()];
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let at = match n {
            Some(n) => match params.iter().position(|p| p == n) {
                Some(at) => at,
                None => return err(format!("Unknown argument '{n}'"), a.pos()),
            },
            None => i,
        };
        if out[at].replace(a.clone()).is_some() {
            return err(format!("Argument '{}' already used", params[at]), a.pos());
        }
    }
    let mut full = Vec::with_capacity(params.len());
    for (i, a) in out.into_iter().enumerate() {
        match a.or_else(|| defaults.get(i).cloned().flatten()) {
            Some(a) => full.push(a),
            None => return err(format!("Argument '{}' missing", params[i]), pos),
        }
    }
    Ok(full)
}

/// A function of vmod_var; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("var.")?;
    let params: &[&str] = match f {
        "set" | "set_string" | "set_int" | "set_real" | "set_duration" | "set_ip" | "set_backend" => &["key", "value"],
        "get_string" | "get_int" | "get_real" | "get_duration" | "get_ip" | "get_backend" => &["key"],
        // Parameters the vmod leaves unnamed: by position only.
        "get" | "global_get" => &[""],
        "global_set" => &["", ""],
        "clear" => &[],
        _ => return Some(err(format!("Symbol not found: '{name}'"), pos)),
    };
    let compiled = in_order(name, params, &[], args, names, pos).and_then(|a| a.iter().map(|a| sc.expr(a)).collect());
    Some(compiled.map(|a: Vec<ExprFn>| build(f, a)))
}

/// The closure for function `f` of its compiled arguments (as many as
/// [`call`] lists for it).
fn build(f: &str, a: Vec<ExprFn>) -> ExprFn {
    let mut a = a.into_iter();
    let (key, value) = match (a.next(), a.next()) {
        (Some(key), Some(value)) => (key, value),
        (Some(key), None) if f == "global_get" => {
            return Box::new(move |t, c| {
                let Val::Str(k) = key(t, c) else { return Val::None };
                let g = GLOBALS.lock().unwrap_or_else(|e| e.into_inner());
                g.iter().find(|(n, _)| *n == k).and_then(|(_, v)| v.clone()).map_or(Val::None, Val::Str)
            })
        }
        (Some(key), None) => return getter(f, key),
        (None, _) => {
            return Box::new(|t, _| {
                vars(t).clear();
                Val::None
            })
        }
    };
    if f == "global_set" {
        return Box::new(move |t, c| {
            let Val::Str(k) = key(t, c) else { return Val::None };
            let v = match value(t, c) {
                Val::None => None,
                v => Some(v.text()),
            };
            let mut g = GLOBALS.lock().unwrap_or_else(|e| e.into_inner());
            match g.iter_mut().find(|(n, _)| *n == k) {
                Some(e) => e.1 = v,
                None => g.push((k, v)),
            }
            Val::None
        });
    }
    let kind: fn(Val) -> Option<TaskVar> = match f {
        // The vmod keeps an INT in a C int: past 32 bits it wraps.
        "set_int" => |v| Some(TaskVar::Int(i64::from(v.num().unwrap_or(0.0) as i64 as i32))),
        "set_real" => |v| Some(TaskVar::Real(v.num().unwrap_or(0.0))),
        "set_duration" => |v| Some(TaskVar::Dur(v.num().unwrap_or(0.0))),
        "set_ip" => |v| match v {
            Val::Ip(ip, port) => Some(TaskVar::Ip(ip, port)),
            // A NULL IP: varnishd's vmod asserts; nothing is set here.
            _ => None,
        },
        "set_backend" => |v| match v {
            Val::Backend(b) => Some(TaskVar::Backend(Some(b))),
            _ => Some(TaskVar::Backend(None)),
        },
        _ => |v| Some(TaskVar::Str(v.text())),
    };
    Box::new(move |t, c| {
        let k = key(t, c);
        if let Some(v) = kind(value(t, c)) {
            put(t, &k, v);
        }
        Val::None
    })
}

/// get/get_string, get_int, get_real, get_duration, get_ip, get_backend:
/// the variable's value if it has that type, else the type's zero.
fn getter(f: &str, key: ExprFn) -> ExprFn {
    let read: fn(Option<TaskVar>) -> Val = match f {
        "get_int" => |v| Val::Int(if let Some(TaskVar::Int(i)) = v { i } else { 0 }),
        "get_real" => |v| Val::Real(if let Some(TaskVar::Real(r)) = v { r } else { 0.0 }),
        "get_duration" => |v| Val::Dur(if let Some(TaskVar::Dur(d)) = v { d } else { 0.0 }),
        "get_ip" => |v| if let Some(TaskVar::Ip(ip, port)) = v { Val::Ip(ip, port) } else { Val::None },
        "get_backend" => |v| if let Some(TaskVar::Backend(Some(b))) = v { Val::Backend(b) } else { Val::None },
        _ => |v| if let Some(TaskVar::Str(s)) = v { Val::Str(s) } else { Val::None },
    };
    Box::new(move |t, c| {
        let k = key(t, c);
        read(lookup(t, &k))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_arguments_take_their_places_and_defaults_fill_in() {
        let s = |v: &str| Expr::Str(v.into(), Pos::default());
        let (args, names) = ([s("v"), s("k")], [Some("value".to_string()), Some("key".to_string())]);
        let got = in_order("var.set", &["key", "value"], &[], &args, &names, Pos::default()).unwrap();
        assert_eq!(got, [s("k"), s("v")]);
        let got = in_order("str.take", &["s", "n", "offset"], &[None, None, Some(s("0"))], &args, &[], Pos::default()).unwrap();
        assert_eq!(got, [s("v"), s("k"), s("0")]);
        assert!(in_order("var.get", &["key"], &[], &args, &[], Pos::default()).is_err());
        assert!(in_order("var.set", &["key", "value"], &[], &args[..1], &[], Pos::default()).is_err());
        assert!(in_order("var.set", &["key", "value"], &[], &args, &[Some("nope".into()), None], Pos::default()).is_err());
    }
}
