//! `import saintmode;`: varnish-modules' vmod_saintmode. `new sm =
//! saintmode.saintmode(backend, threshold)` makes a director standing for
//! one backend; saintmode.blacklist(DURATION) in vcl_backend_response
//! marks the object being fetched (its hash) as troubled on the backend
//! that answered, for that long (the lists: crate::backend::saintmode).
//! The objects live on the program ([`Compiled::saints`]), in the order
//! vcl_init made them.

use std::sync::Arc;

use common::log::vsl::Tag;

use super::program::*;
use super::vmodargs::vcc_args;
use crate::backend::saintmode::{Health, Saint};
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::Sub;

/// The key a fetch resolves its backend with (the object's hash, else
/// the URL), as fetch::steps hands it to the program.
fn fetch_key(t: &crate::vcl::model::Task<'_>) -> Option<Vec<u8>> {
    let b = t.bereq.as_deref()?;
    Some(b.hash.as_deref().unwrap_or(&b.url).to_vec())
}

/// `new NAME = saintmode.saintmode(backend, threshold)`.
pub(super) fn object_new(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<StmtFn, VclError> {
    let given = vcc_args(&["backend", "threshold"], 2, args, names, pos)?;
    let [Some(be), Some(th)] = given[..] else { return err("saintmode.saintmode() takes a backend and a threshold", pos) };
    let (be, th) = (sc.expr(be)?, sc.expr(th)?);
    let name = name.to_string();
    Ok(Box::new(move |t, c| {
        let threshold = th(t, c).num().unwrap_or(0.0) as i64;
        match be(t, c) {
            Val::Backend(b) => c.saints().push(Arc::new(Saint::new(&name, &b, threshold))),
            _ => fail(t, format!("saintmode.saintmode(): {name} needs a backend")),
        }
        Flow::Next
    }))
}

/// `sm.backend()`, `sm.blacklist_count()`, `sm.is_healthy()`.
pub(super) fn method(
    obj: &str,
    method: &str,
    args: &[Expr],
    names: &[Option<String>],
    pos: Pos,
    sc: &Scope<'_>,
) -> Result<ExprFn, VclError> {
    vcc_args(&[], 0, args, names, pos)?;
    let obj = obj.to_string();
    // The client side looks for the request's object except in vcl_recv
    // and vcl_hash, where there is none yet.
    let early = sc.ctx.iter().all(|s| matches!(s, Sub::Recv | Sub::Hash));
    Ok(match method {
        "backend" => Box::new(move |_, _| Val::Backend(obj.clone())),
        "blacklist_count" => Box::new(move |_, c| Val::Int(c.saint(&obj).map_or(0, |s| s.count() as i64))),
        "is_healthy" => Box::new(move |t, c| {
            let Some(s) = c.saint(&obj) else { return Val::Bool(false) };
            let now = crate::util::now();
            let ok = match t.req.as_deref() {
                Some(r) => {
                    let digest = if early { None } else { r.hash.as_deref() };
                    s.check(digest, now) == Health::Healthy
                }
                None => s.healthy(fetch_key(t).as_deref(), now) == Health::Healthy && c.usable(&s.backend, 1),
            };
            Val::Bool(ok)
        }),
        m => return err(format!("Symbol not found: '{obj}.{m}'"), pos),
    })
}

/// saintmode.blacklist(DURATION) and saintmode.status().
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("saintmode.")?;
    Some(match f {
        "blacklist" => {
            let in_response = sc.ctx.contains(&Sub::BackendResponse);
            let given = vcc_args(&["expires"], 1, args, names, pos).and_then(|a| a.into_iter().flatten().map(|e| sc.expr(e)).collect());
            given.map(|mut a: Vec<ExprFn>| -> ExprFn {
                let d = a.remove(0);
                Box::new(move |t, c| {
                    let expires = d(t, c).num().unwrap_or(0.0);
                    blacklist(t, c, expires, in_response);
                    Val::None
                })
            })
        }
        "status" => vcc_args(&[], 0, args, names, pos).map(|_| -> ExprFn { Box::new(|_, c| Val::Str(status(&c.saints()))) }),
        _ => err(format!("Symbol not found: '{name}'"), pos),
    })
}

/// The object being fetched goes on the list of the saintmode director
/// whose backend answered (the vmod's errors otherwise).
fn blacklist(t: &mut crate::vcl::model::Task<'_>, c: &Compiled, expires: f64, in_response: bool) {
    if c.saints().is_empty() {
        t.record(Tag::VclError, b"saintmode.blacklist(): Saintmode is not configured");
        return;
    }
    if !in_response || t.beresp.is_none() {
        t.record(Tag::VclError, b"saintmode.blacklist() called outside of vcl_backend_response");
        return;
    }
    let answered = t.beresp.as_deref().map(|b| b.backend.clone()).unwrap_or_default();
    let sm = c.saints().iter().find(|s| s.backend == answered).cloned();
    let (Some(sm), Some(key)) = (sm, fetch_key(t)) else {
        t.record(Tag::VclError, b"Error: saintmode.blacklist(): Saintmode not configured for this backend.");
        return;
    };
    sm.blacklist(&key, crate::util::now() + expires);
    let line = format!("saintmode: object put on blacklist for backend {} for {expires:.2} seconds", sm.backend);
    t.record(Tag::VclLog, line.as_bytes());
}

/// saintmode.status(): the vmod's JSON, one line per object.
pub(crate) fn status(saints: &[Arc<Saint>]) -> String {
    let mut out = String::from("{\n\t\"saintmode\": [\n");
    for (i, s) in saints.iter().enumerate() {
        out.push_str(&format!(
            "\t\t{{ \"name\": \"{}\", \"backend\": \"{}\", \"count\": \"{}\", \"threshold\": \"{}\" }}",
            s.name,
            s.backend,
            s.count(),
            s.threshold
        ));
        if i + 1 < saints.len() {
            out.push(',');
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_the_vmods_json() {
        let a = Arc::new(Saint::new("sm1", "foo", 10));
        a.blacklist(b"x", 1e18);
        let b = Arc::new(Saint::new("sm2", "bar", 5));
        assert_eq!(
            status(&[a, b]),
            "{\n\t\"saintmode\": [\n\t\t{ \"name\": \"sm1\", \"backend\": \"foo\", \"count\": \"1\", \"threshold\": \"10\" },\n\t\t{ \"name\": \"sm2\", \"backend\": \"bar\", \"count\": \"0\", \"threshold\": \"5\" }\n"
        );
    }
}
