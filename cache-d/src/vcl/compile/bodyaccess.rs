//! `import bodyaccess;`: varnish-modules' vmod_bodyaccess, on the client
//! request's body that std.cache_req_body() keeps (the task reaches it
//! through [`crate::vcl::model::BodyAccess`]). As in the vmod, a body not
//! kept logs "Unbuffered req.body" (VCL_Error) and reads as -1; the
//! functions limited to one subroutine log their own error elsewhere.

use bytes::Bytes;
use common::log::vsl::Tag;

use super::program::*;
use super::re::{regex_arg, Re};
use super::vmodargs::vcc_args;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::{Sub, Task};

/// The body std.cache_req_body() kept: read now if vcl_recv is still
/// running; None (with the vmod's error logged) when there is none.
fn kept(t: &mut Task<'_>) -> Option<Bytes> {
    let limit = t.req.as_deref().and_then(|r| match r.body_size {
        // A Content-Length over the limit: std.cache_req_body() failed.
        Some(Some(n)) if r.cache_body.is_some_and(|l| n > l) => None,
        _ => r.cache_body,
    });
    let body = match (limit, t.req_body.as_deref_mut()) {
        (Some(l), Some(src)) => src.cached(l),
        _ => None,
    };
    if body.is_none() {
        t.record(Tag::VclError, b"Unbuffered req.body");
    }
    body
}

/// The body's bytes as the vmod's log_req_body() writes them: Debug
/// records of `prefix` and at most `length` bytes each (all of it in one
/// when `length` is 0 or less).
pub(crate) fn log_lines(body: &[u8], prefix: &str, length: i64) -> Vec<Vec<u8>> {
    let step = if length > 0 { usize::try_from(length).unwrap_or(usize::MAX) } else { body.len().max(1) };
    body.chunks(step).map(|c| [prefix.as_bytes(), c].concat()).collect()
}

/// Does the body match? On its bytes (a binary body too); a pattern
/// only the backtracking engine takes sees invalid UTF-8 as U+FFFD.
fn matches(re: &Re, body: &[u8]) -> bool {
    match re {
        Re::Fast(r) => r.is_match(body),
        Re::Fancy(_) => re.is_match(&String::from_utf8_lossy(body)),
    }
}

/// A function of vmod_bodyaccess; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("bodyaccess.")?;
    // The vmod checks the subroutine when the function runs; a
    // subroutine called from vcl_recv counts as vcl_recv.
    let in_recv = sc.ctx.contains(&Sub::Recv);
    Some(match f {
        "hash_req_body" => vcc_args(&[], 0, args, names, pos).map(|_| -> ExprFn {
            Box::new(|t, _| {
                let Some(body) = kept(t) else { return Val::None };
                if t.key.is_none() {
                    t.record(Tag::VclError, b"hash_req_body can only be used in vcl_hash{}");
                    return Val::None;
                }
                if let Some(k) = t.key.as_deref_mut() {
                    k.extend_from_slice(&body);
                }
                t.record(Tag::Hash, &body);
                Val::None
            })
        }),
        "len_req_body" => vcc_args(&[], 0, args, names, pos).map(|_| -> ExprFn {
            Box::new(move |t, _| {
                let Some(body) = kept(t) else { return Val::Int(-1) };
                if !in_recv {
                    t.record(Tag::VclError, b"len_req_body can only be used in vcl_recv{}");
                    return Val::Int(-1);
                }
                Val::Int(body.len() as i64)
            })
        }),
        "rematch_req_body" => {
            let arg = match vcc_args(&["re"], 1, args, names, pos) {
                Ok(a) => a.into_iter().flatten().next(),
                Err(e) => return Some(Err(e)),
            };
            arg.map_or_else(|| err("bodyaccess.rematch_req_body() takes a REGEX", pos), regex_arg).map(|re| -> ExprFn {
                Box::new(move |t, _| {
                    let Some(body) = kept(t) else { return Val::Int(-1) };
                    if !in_recv {
                        t.record(Tag::VclError, b"rematch_req_body can be used only in vcl_recv{}");
                        return Val::Int(-1);
                    }
                    Val::Int(i64::from(matches(&re, &body)))
                })
            })
        }
        "log_req_body" => log_req_body(args, names, pos, sc),
        _ => err(format!("Symbol not found: '{name}'"), pos),
    })
}

/// log_req_body(STRING prefix = "", INT length = 200).
fn log_req_body(args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let given = vcc_args(&["prefix", "length"], 0, args, names, pos)?;
    let (prefix, length) = match given.as_slice() {
        [p, l] => (p.map(|p| sc.expr(p)).transpose()?, l.map(|l| sc.expr(l)).transpose()?),
        _ => (None, None),
    };
    Ok(Box::new(move |t, c| {
        let prefix = prefix.as_ref().map_or_else(String::new, |p| p(t, c).text());
        let length = length.as_ref().map_or(200, |l| l(t, c).num().unwrap_or(0.0) as i64);
        let Some(body) = kept(t) else { return Val::None };
        for line in log_lines(&body, &prefix, length) {
            t.record(Tag::Debug, &line);
        }
        Val::None
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_body_matches_on_its_bytes() {
        let re = Re::new("\\x00\\xff+A").unwrap();
        assert!(matches(&re, b"x\x00\xff\xffAy"));
        assert!(!matches(&re, b"x\x00A"));
    }

    #[test]
    fn the_body_logs_in_lines_of_length_with_the_prefix() {
        assert_eq!(log_lines(b"abcdefg", "P:", 3), [b"P:abc".to_vec(), b"P:def".to_vec(), b"P:g".to_vec()]);
        assert_eq!(log_lines(b"abc", "", 0), [b"abc".to_vec()]);
        assert_eq!(log_lines(b"abc", "x", -1), [b"xabc".to_vec()]);
        assert!(log_lines(b"", "x", 5).is_empty());
    }
}
