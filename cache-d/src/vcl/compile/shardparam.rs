//! vmod_directors' shard director picks (`sh.backend(...)`) and its
//! parameter sets: `new p = directors.shard_param()`, `p.set()`,
//! `p.clear()`, the `p.get_*()` readers, `p.use()` and
//! `sh.associate(p.use())`. As Varnish: a set made in vcl_init is the
//! program's; `set()`/`clear()` in a backend subroutine (or vcl_pipe)
//! change a copy for that fetch only (kept on the [`Bereq`]), whose
//! unset arguments fall back to the program's; in other client
//! subroutines they fail the task. `set()` replaces the set with the
//! arguments given. Unset arguments end at the defaults of
//! `sh.backend()`: by=HASH, alt=0, warmup=-1, rampup=true,
//! healthy=CHOSEN.
//!
//! [`Bereq`]: crate::vcl::model::Bereq

use super::decls::ObjKind;
use super::program::*;
use super::vmod::{blob, blob_bytes, enum_arg};
use crate::backend::director::{digest_point, point, Healthy, ShardOpts};
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::{ShardParamSet, Task};

const BY: [&str; 4] = ["HASH", "URL", "KEY", "BLOB"];
const HEALTHY: [&str; 3] = ["CHOSEN", "IGNORE", "ALL"];
const SET_ARGS: [&str; 7] = ["by", "key", "key_blob", "alt", "warmup", "rampup", "healthy"];

fn state(c: &Compiled) -> std::sync::MutexGuard<'_, ShardParams> {
    c.shard_params.lock().unwrap_or_else(|e| e.into_inner())
}

/// Arguments not given in `to` taken from `from`.
fn merge(to: &ShardParamSet, from: &ShardParamSet) -> ShardParamSet {
    ShardParamSet {
        by: to.by.or(from.by),
        alt: to.alt.or(from.alt),
        warmup: to.warmup.or(from.warmup),
        rampup: to.rampup.or(from.rampup),
        healthy: to.healthy.or(from.healthy),
    }
}

/// A set as the program made it, merged over the fetch's copy (when
/// `task` and the fetch has one).
fn read(t: &Task<'_>, c: &Compiled, obj: &str, task: bool) -> ShardParamSet {
    let vcl = state(c).sets.get(obj).cloned().unwrap_or_default();
    let copy = t.bereq.as_deref().filter(|_| task).and_then(|b| b.shard_params.iter().find(|(n, _)| n == obj).map(|(_, s)| s.clone()));
    match copy {
        Some(copy) => merge(&copy, &vcl),
        None => vcl,
    }
}

/// The set a shard director starts from: `param=`'s (as the program made
/// it), else its associated one (with the fetch's changes), else none.
pub(super) fn base(t: &Task<'_>, c: &Compiled, director: &str, param: Option<&str>) -> ShardParamSet {
    if let Some(p) = param {
        return read(t, c, p, false);
    }
    let assoc = state(c).assoc.get(director).cloned();
    assoc.map(|p| read(t, c, &p, true)).unwrap_or_default()
}

/// The key a set gives: its own for by=KEY and BLOB, else the fetch's
/// digest (by=HASH on the backend side) or the URL's hash.
fn key_of(t: &Task<'_>, s: &ShardParamSet) -> u32 {
    match s.by.unwrap_or(("HASH", 0)) {
        ("KEY" | "BLOB", k) => k,
        (by, _) => match (by, t.bereq.as_deref(), t.req.as_deref()) {
            ("HASH", Some(b), _) if b.hash.is_some() => digest_point(b.hash.as_deref().unwrap_or_default()),
            (_, Some(b), _) => point(&b.url),
            (_, None, Some(r)) => point(&r.url),
            _ => 0,
        },
    }
}

/// A BLOB's shard key: its first four bytes, big-endian (a shorter one
/// right-aligned), as Varnish's shard_blob_key.
pub(super) fn blob_key(v: &Val) -> u32 {
    let b = blob_bytes(v);
    let mut k = [0u8; 4];
    let n = b.len().min(4);
    k[4 - n..].copy_from_slice(&b[..n]);
    u32::from_be_bytes(k)
}

/// The parameter object a `param=` or associate() argument names: it
/// must be `p.use()` of a directors.shard_param().
fn param_obj(e: &Expr, sc: &Scope<'_>) -> Result<String, VclError> {
    if let Expr::Call { name, args, .. } = e {
        if let Some(o) = name.strip_suffix(".use").filter(|o| args.is_empty() && sc.objects.get(*o) == Some(&ObjKind::ShardParam)) {
            return Ok(o.to_string());
        }
    }
    err("The parameter must be a directors.shard_param() object's .use()", e.pos())
}

/// `new p = directors.shard_param()`: an empty set.
pub(super) fn object_new(obj: &str) -> StmtFn {
    let obj = obj.to_string();
    Box::new(move |_, c| {
        state(c).sets.insert(obj.clone(), ShardParamSet::default());
        Flow::Next
    })
}

/// `sh.associate([p.use()])` on a shard director (no argument: none).
pub(super) fn associate(director: &str, args: &[Expr], sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let p = match args {
        [] => None,
        [e] => Some(param_obj(e, sc)?),
        _ => return err("associate() takes one argument", args[1].pos()),
    };
    let director = director.to_string();
    Ok(Box::new(move |_, c| {
        let mut s = state(c);
        match &p {
            Some(p) => s.assoc.insert(director.clone(), p.clone()),
            None => s.assoc.remove(&director),
        };
        Val::None
    }))
}

/// The arguments of set() (and of sh.backend()) by name or place.
pub(super) struct Args {
    pub by: Option<String>,
    pub key: Option<ExprFn>,
    pub key_blob: Option<ExprFn>,
    pub alt: Option<ExprFn>,
    pub warmup: Option<ExprFn>,
    pub rampup: Option<ExprFn>,
    pub healthy: Option<String>,
}

pub(super) fn set_args(what: &str, args: &[Expr], names: &[Option<String>], sc: &Scope<'_>) -> Result<Args, VclError> {
    let mut a = Args { by: None, key: None, key_blob: None, alt: None, warmup: None, rampup: None, healthy: None };
    for (i, (e, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        match n.as_deref().or_else(|| SET_ARGS.get(i).copied()).unwrap_or("") {
            "by" => a.by = Some(enum_arg(e, &BY, "by")?),
            "key" => a.key = Some(sc.expr(e)?),
            "key_blob" => a.key_blob = Some(sc.expr(e)?),
            "alt" => a.alt = Some(sc.expr(e)?),
            "warmup" => a.warmup = Some(sc.expr(e)?),
            "rampup" => a.rampup = Some(sc.expr(e)?),
            "healthy" => a.healthy = Some(enum_arg(e, &HEALTHY, "healthy")?),
            other => return err(format!("{what} has no argument '{other}'"), e.pos()),
        }
    }
    Ok(a)
}

fn static_of(s: &str, from: &[&'static str]) -> &'static str {
    from.iter().find(|x| **x == s).copied().unwrap_or(from[0])
}

/// The set the given arguments make, or why they do not (Varnish's
/// shard_param_args).
pub(super) fn make(t: &mut Task<'_>, c: &Compiled, a: &Args, what: &str) -> Result<ShardParamSet, String> {
    let mut s = ShardParamSet::default();
    // Without by= the checks are by=HASH's, and the set keeps no by.
    let by = a.by.as_deref().unwrap_or("HASH");
    {
        let key = match by {
            "KEY" => match a.key.as_ref().map(|k| k(t, c).num().unwrap_or(-1.0)) {
                None => return Err(format!("{what} missing key argument with by=KEY")),
                Some(k) if !(0.0..=f64::from(u32::MAX)).contains(&k) => return Err(format!("{what} invalid key argument {k} with by=KEY")),
                Some(k) => k as u32,
            },
            "BLOB" => match a.key_blob.as_ref().map(|k| k(t, c)) {
                None => return Err(format!("{what} missing key_blob argument with by=BLOB")),
                Some(v) => blob_key(&v),
            },
            _ if a.key.is_some() || a.key_blob.is_some() => {
                return Err(format!("{what} key and key_blob arguments are invalid with by={by}"));
            }
            _ => 0,
        };
        s.by = a.by.as_ref().map(|_| (static_of(by, &BY), key));
    }
    if let Some(alt) = &a.alt {
        let n = alt(t, c).num().unwrap_or(0.0);
        if n < 0.0 {
            return Err(format!("{what} invalid alt argument {n}"));
        }
        s.alt = Some(n as i64);
    }
    if let Some(w) = &a.warmup {
        let w = w(t, c).num().unwrap_or(0.0);
        if (w < 0.0 && w != -1.0) || w > 1.0 {
            return Err(format!("{what} invalid warmup argument {w:.6}"));
        }
        s.warmup = Some(w);
    }
    if let Some(r) = &a.rampup {
        s.rampup = Some(r(t, c).truthy());
    }
    s.healthy = a.healthy.as_deref().map(|h| static_of(h, &HEALTHY));
    Ok(s)
}

/// Store a set where the task keeps it: the program's in vcl_init, the
/// fetch's copy in a backend subroutine or vcl_pipe; elsewhere the task
/// fails.
fn store(t: &mut Task<'_>, c: &Compiled, obj: &str, what: &str, s: ShardParamSet) {
    match (t.bereq.as_deref_mut(), t.req.is_some()) {
        (Some(b), _) => match b.shard_params.iter_mut().find(|(n, _)| n == obj) {
            Some(e) => e.1 = s,
            None => b.shard_params.push((obj.to_string(), s)),
        },
        (None, true) => fail(t, format!("vmod_directors: shard {obj}: {what} may only be used in vcl_init and in backend/pipe context")),
        (None, false) => {
            state(c).sets.insert(obj.to_string(), s);
        }
    }
}

/// A method of a directors.shard_param() object.
pub(super) fn method(obj: &str, m: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let o = obj.to_string();
    let effective = move |t: &Task<'_>, c: &Compiled| merge(&read(t, c, &o, t.bereq.is_some()), &ShardParamSet::default());
    Ok(match (m, args.len()) {
        ("set", _) => {
            let a = set_args(&format!("{obj}.set()"), args, names, sc)?;
            let obj = obj.to_string();
            Box::new(move |t, c| {
                match make(t, c, &a, "shard_param.set()") {
                    Ok(s) => store(t, c, &obj, "shard_param.set()", s),
                    Err(why) => fail(t, format!("vmod_directors: shard {obj}: {why}")),
                }
                Val::None
            })
        }
        ("clear", 0) => {
            let obj = obj.to_string();
            Box::new(move |t, c| {
                store(t, c, &obj, "shard_param.clear()", ShardParamSet::default());
                Val::None
            })
        }
        ("get_by", 0) => Box::new(move |t, c| Val::Str(effective(t, c).by.map_or("HASH", |b| b.0).to_string())),
        ("get_key", 0) => Box::new(move |t, c| {
            let s = effective(t, c);
            Val::Int(i64::from(key_of(t, &s)))
        }),
        ("get_alt", 0) => Box::new(move |t, c| Val::Int(effective(t, c).alt.unwrap_or(0))),
        ("get_warmup", 0) => Box::new(move |t, c| Val::Real(effective(t, c).warmup.unwrap_or(-1.0))),
        ("get_rampup", 0) => Box::new(move |t, c| Val::Bool(effective(t, c).rampup.unwrap_or(true))),
        ("get_healthy", 0) => Box::new(move |t, c| Val::Str(effective(t, c).healthy.unwrap_or("CHOSEN").to_string())),
        // A BLOB standing for the set (for param= and associate()).
        ("use", 0) => {
            let obj = obj.to_string();
            Box::new(move |_, _| blob(obj.as_bytes()))
        }
        (m, n) => return err(format!("Method {m}() with {n} argument(s) on a shard_param object"), pos),
    })
}

/// `sh.backend(by=, key=, key_blob=, alt=, warmup=, rampup=, healthy=,
/// param=, resolve=)` on a shard director, picking now (as Varnish
/// outside vcl_init): the arguments given, over `param=`'s set or the
/// associated one. by=HASH (the default) keys on the object's digest on
/// the backend side and on the URL on the client side; by=URL on the
/// URL, by=KEY on `key=` (e.g. `sh.key(req.http.X-User)`), by=BLOB on
/// `key_blob=`'s first four bytes. resolve=LAZY, and any call in
/// vcl_init, returns the director to pick when the fetch starts, by the
/// digest.
pub(super) fn shard_backend(obj: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    const POSITIONAL: [&str; 9] = ["by", "key", "key_blob", "alt", "warmup", "rampup", "healthy", "param", "resolve"];
    let (mut set, mut set_names, mut resolve, mut param) = (Vec::new(), Vec::new(), None, None);
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        match n.as_deref().or_else(|| POSITIONAL.get(i).copied()).unwrap_or("") {
            "resolve" => resolve = Some(enum_arg(a, &["NOW", "LAZY"], "resolve")? == "LAZY"),
            "param" => param = Some(param_obj(a, sc)?),
            n if SET_ARGS.contains(&n) => {
                set.push(a.clone());
                set_names.push(Some(n.to_string()));
            }
            other => return err(format!("{obj}.backend() has no argument '{other}'"), a.pos()),
        }
    }
    let a = set_args(&format!("{obj}.backend()"), &set, &set_names, sc)?;
    if let Some(by @ ("KEY" | "BLOB")) = a.by.as_deref() {
        if a.key.is_none() && a.key_blob.is_none() {
            return err(format!("{obj}.backend(by={by}) needs key="), pos);
        }
    }
    let obj = obj.to_string();
    let more = !set.is_empty() || param.is_some();
    Ok(Box::new(move |t, c| {
        // resolve=LAZY (the default in vcl_init): the director itself, to
        // pick when the fetch starts. With other arguments Varnish keeps
        // them for the fetch, which only a backend subroutine may do.
        let init = t.req.is_none() && t.bereq.is_none();
        match resolve.unwrap_or(init) {
            false if init => {
                fail(t, format!("vmod_directors: shard {obj}: .backend(resolve=NOW) can not be used in vcl_init{{}}/vcl_fini{{}}"));
                return Val::None;
            }
            true if more && t.bereq.is_none() => {
                let why = ".backend(resolve=LAZY) with other parameters can only be used in backend/pipe context";
                fail(t, format!("vmod_directors: shard {obj}: {why}"));
                return Val::None;
            }
            // With arguments on the backend side Varnish keeps them for
            // the pick when the fetch starts, right after this
            // subroutine: the same member, so it is picked now.
            true if more => {}
            true => return Val::Backend(obj.clone()),
            false => {}
        }
        let given = match make(t, c, &a, "shard.backend()") {
            Ok(s) => s,
            Err(why) => {
                fail(t, format!("vmod_directors: shard {obj}: {why}"));
                return Val::None;
            }
        };
        let s = merge(&merge(&given, &base(t, c, &obj, param.as_deref())), &ShardParamSet::default());
        let opts = ShardOpts {
            alt: s.alt.unwrap_or(0).max(0) as usize,
            warmup: s.warmup.filter(|w| *w >= 0.0),
            rampup: s.rampup.unwrap_or(true),
            healthy: match s.healthy {
                Some("IGNORE") => Healthy::Ignore,
                Some("ALL") => Healthy::All,
                _ => Healthy::Chosen,
            },
        };
        let p = key_of(t, &s);
        let Some(d) = c.directors().get(&obj).cloned() else { return Val::None };
        match c.shard_pick(&d, p, opts, 1) {
            Some(m) => Val::Backend(m),
            None => Val::Backend(obj.clone()),
        }
    }))
}

/// A shard director's `add_backend(backend, ident, rampup, weight)` (in
/// vcl_init; a weight under 1 counts as 1, as Varnish) and
/// `remove_backend(backend, ident)` (with an ident, the member of that
/// name on the ring; else every member of that backend).
pub(super) fn members(
    obj: &str,
    method: &str,
    args: &[Expr],
    names: &[Option<String>],
    pos: Pos,
    sc: &Scope<'_>,
) -> Result<ExprFn, VclError> {
    let add = method == "add_backend";
    let params: &[&str] = if add { &["backend", "ident", "rampup", "weight"] } else { &["backend", "ident"] };
    if let Some(s) = sc.ctx.iter().find(|s| add && **s != crate::vcl::model::Sub::Init) {
        return err(format!("{method}() cannot be used in {} (it can be in: vcl_init)", s.name()), pos);
    }
    let mut parts: Vec<Option<ExprFn>> = params.iter().map(|_| None).collect();
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let at = match n {
            Some(n) => params.iter().position(|p| p == n),
            None => (i < params.len()).then_some(i),
        };
        let Some(at) = at else { return err(format!("{obj}.{method}() has no argument '{}'", n.as_deref().unwrap_or("")), a.pos()) };
        parts[at] = Some(sc.expr(a)?);
    }
    let mut parts = parts.into_iter();
    let (backend, ident) = (parts.next().flatten(), parts.next().flatten());
    let (rampup, weight) = (parts.next().flatten(), parts.next().flatten());
    if add && backend.is_none() {
        return err(format!("{obj}.add_backend() needs a backend"), pos);
    }
    let obj = obj.to_string();
    Ok(Box::new(move |t, c| {
        let b = backend.as_ref().map(|b| b(t, c));
        let id = ident.as_ref().map(|i| i(t, c).text()).filter(|i| !i.is_empty());
        let Some(d) = c.directors().get(&obj).cloned() else { return Val::Bool(false) };
        if add {
            let Some(Val::Backend(m)) = b else {
                fail(t, format!("vmod_directors: shard {obj}: None backend cannot be added"));
                return Val::Bool(false);
            };
            let w = weight.as_ref().and_then(|w| w(t, c).num()).filter(|w| *w >= 1.0).unwrap_or(1.0);
            let r = rampup.as_ref().and_then(|r| r(t, c).num());
            d.add_shard(&m, id.as_deref(), w, r);
        } else {
            let m = match b {
                Some(Val::Backend(m)) => Some(m),
                _ => None,
            };
            if m.is_none() && id.is_none() {
                fail(t, format!("vmod_directors: shard {obj}: .remove_backend(): either backend or ident are required"));
                return Val::Bool(false);
            }
            d.remove_shard(m.as_deref(), id.as_deref());
        }
        Val::Bool(true)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_keys_are_the_first_four_bytes() {
        assert_eq!(blob_key(&blob(&[1, 2, 3, 4, 5])), 0x0102_0304);
        assert_eq!(blob_key(&blob(&[1, 2])), 0x0000_0102);
        assert_eq!(blob_key(&blob(&[])), 0);
    }

    #[test]
    fn unset_arguments_come_from_the_defaults() {
        let vcl = ShardParamSet { by: Some(("URL", 0)), alt: Some(2), ..Default::default() };
        let fetch = ShardParamSet { alt: Some(3), ..Default::default() };
        let m = merge(&fetch, &vcl);
        assert_eq!(m.by, Some(("URL", 0)));
        assert_eq!(m.alt, Some(3));
        assert_eq!(m.rampup, None);
    }
}
