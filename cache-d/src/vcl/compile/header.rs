//! `import header;`: varnish-modules 0.20's vmod_header, for headers that
//! come more than once (Set-Cookie): add a line, copy every line of one
//! header to another, read or remove the lines whose value matches a
//! regex, rewrite whole lines (`Name: value`) of a request or response.
//! A HEADER argument is a header variable (`beresp.http.Set-Cookie`) or
//! `header.dyn(beresp, name)`, whose name is known only when it runs.

use bytes::Bytes;
use common::log::vsl::Tag;

use super::program::*;
use super::re::{regex_arg, Re};
use super::var::in_order;
use super::vars::{access, header_prefix, headers, headers_mut, wire_text, Hdrs};
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::{Headers, Task};

/// A HEADER argument: which headers, and the name, fixed or computed.
enum Target {
    Fixed(Hdrs, String),
    Dyn(Hdrs, ExprFn),
}

impl Target {
    /// The headers and the name now; None for a header.dyn() whose name
    /// is empty or unset (see cache-vcl(7)).
    fn resolve(&self, t: &mut Task<'_>, c: &Compiled) -> Option<(Hdrs, String)> {
        match self {
            Target::Fixed(w, n) => Some((*w, n.clone())),
            Target::Dyn(w, f) => {
                let n = f(t, c).text();
                // The name ends at a ':' (the vmod's dyn()).
                let n = n.split(':').next().unwrap_or_default();
                (!n.is_empty()).then(|| (*w, n.to_string()))
            }
        }
    }
}

/// An HTTP argument (`req`, `req_top`, `bereq`, `beresp`, `resp`), checked
/// as its headers would be in the subroutines the call is in.
fn http_arg(e: &Expr, sc: &Scope<'_>) -> Result<Hdrs, VclError> {
    let w = match e {
        Expr::Name(n, _) => match n.as_str() {
            "req" => Some(Hdrs::Req),
            "req_top" => Some(Hdrs::ReqTop),
            "bereq" => Some(Hdrs::Bereq),
            "beresp" => Some(Hdrs::Beresp),
            "resp" => Some(Hdrs::Resp),
            _ => None,
        },
        _ => None,
    };
    let (Some(w), Expr::Name(n, pos)) = (w, e) else {
        return err("Expected an HTTP object (req, req_top, bereq, beresp, resp)", e.pos());
    };
    access(&format!("{n}.http.x"), false, *pos, sc)?;
    Ok(w)
}

/// A HEADER argument: a header variable, or a call of header.dyn().
fn header_arg(e: &Expr, sc: &Scope<'_>) -> Result<Target, VclError> {
    match e {
        Expr::Name(n, pos) => {
            let Some((w, h)) = header_prefix(n) else { return err(format!("Expected a header (req.http.X...), not '{n}'"), *pos) };
            access(n, false, *pos, sc)?;
            Ok(Target::Fixed(w, h.to_string()))
        }
        Expr::Call { name, args, names, pos } if name == "header.dyn" => {
            let a = in_order(name, &["", ""], &[], args, names, *pos)?;
            Ok(Target::Dyn(http_arg(&a[0], sc)?, sc.expr(&a[1])?))
        }
        other => err("Expected a header (req.http.X...) or header.dyn()", other.pos()),
    }
}

/// A value as the vmod sees it: leading blanks skipped.
fn value_of(v: &[u8]) -> &[u8] {
    let at = v.iter().position(|b| *b != b' ' && *b != b'\t').unwrap_or(v.len());
    &v[at..]
}

/// Is this line header `name` with a value that matches `re`? (An empty
/// value never matches, as in the vmod.)
fn matches(line: &(Bytes, Bytes), name: &str, re: &Re) -> bool {
    let v = value_of(&line.1);
    line.0.eq_ignore_ascii_case(name.as_bytes()) && !v.is_empty() && re.is_match(&String::from_utf8_lossy(v))
}

/// Add a line `name: value` at the end of the headers (logged where the
/// headers were logged before the subroutine, as `set` logs).
fn append(t: &mut Task<'_>, w: Hdrs, name: &str, value: Bytes) {
    let Some(hs) = headers_mut(t, w) else { return };
    hs.0.push((Bytes::copy_from_slice(name.as_bytes()), value.clone()));
    let tag = match w {
        Hdrs::Req => Tag::ReqHeader,
        Hdrs::Beresp => Tag::BerespHeader,
        _ => return,
    };
    if let Some((log, vxid, side)) = t.log.as_mut() {
        log.rec_parts(tag, *side, *vxid, &[name.as_bytes(), b": ", &value]);
    }
}

/// A function of vmod_header; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("header.")?;
    let all_false = Expr::Name("false".into(), pos);
    let (params, defaults): (&[&str], Vec<Option<Expr>>) = match f {
        "append" | "copy" | "dyn" => (&["", ""], vec![]),
        "get" | "remove" => (&["header", "regex"], vec![]),
        "regsub" => (&["", "regex", "sub", "all"], vec![None, None, None, Some(all_false)]),
        _ => return Some(err(format!("Symbol not found: '{name}'"), pos)),
    };
    Some(in_order(name, params, &defaults, args, names, pos).and_then(|a| build(f, &a, sc)))
}

/// The closure for function `f` of its arguments, in order.
fn build(f: &str, a: &[Expr], sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    Ok(match f {
        "append" => {
            let (to, v) = (header_arg(&a[0], sc)?, sc.expr(&a[1])?);
            Box::new(move |t, c| {
                let Some((w, n)) = to.resolve(t, c) else { return Val::None };
                let value = v(t, c);
                if let Some(b) = wire_text(t, "header.append()", &value) {
                    append(t, w, &n, b);
                }
                Val::None
            })
        }
        "copy" => {
            let (from, to) = (header_arg(&a[0], sc)?, header_arg(&a[1], sc)?);
            Box::new(move |t, c| {
                let (Some((fw, fname)), Some((tw, tname))) = (from.resolve(t, c), to.resolve(t, c)) else { return Val::None };
                let values: Vec<Bytes> = headers(t, fw)
                    .map(|hs| {
                        hs.0.iter()
                            .filter(|(n, _)| n.eq_ignore_ascii_case(fname.as_bytes()))
                            .map(|(_, v)| v.slice_ref(value_of(v)))
                            .collect()
                    })
                    .unwrap_or_default();
                for v in values {
                    append(t, tw, &tname, v);
                }
                Val::None
            })
        }
        "get" | "remove" => {
            let (h, re) = (header_arg(&a[0], sc)?, regex_arg(&a[1])?);
            if f == "get" {
                Box::new(move |t, c| {
                    let Some((w, n)) = h.resolve(t, c) else { return Val::None };
                    let found = headers(t, w).and_then(|hs| hs.0.iter().find(|l| matches(l, &n, &re)).map(|l| value_of(&l.1).to_vec()));
                    found.map_or(Val::None, |v| Val::Str(String::from_utf8_lossy(&v).into_owned()))
                })
            } else {
                Box::new(move |t, c| {
                    let Some((w, n)) = h.resolve(t, c) else { return Val::None };
                    if let Some(hs) = headers_mut(t, w) {
                        hs.0.retain(|l| !matches(l, &n, &re));
                    }
                    Val::None
                })
            }
        }
        "regsub" => {
            let (w, re, sub, all) = (http_arg(&a[0], sc)?, regex_arg(&a[1])?, sc.expr(&a[2])?, sc.expr(&a[3])?);
            Box::new(move |t, c| {
                let (sub, all) = (sub(t, c).text(), all(t, c).truthy());
                if let Some(hs) = headers_mut(t, w) {
                    regsub(hs, &re, &sub, all);
                }
                Val::None
            })
        }
        // header.dyn() alone (a HEADER is only an argument): nothing to do.
        _ => {
            http_arg(&a[0], sc)?;
            drop(sc.expr(&a[1])?);
            Box::new(|_, _| Val::None)
        }
    })
}

/// header.regsub(): each whole line `Name: value` that matches is
/// rewritten; the new line is split again at its first ':' (a line
/// without one becomes a name with an empty value).
fn regsub(hs: &mut Headers, re: &Re, sub: &str, all: bool) {
    for line in hs.0.iter_mut() {
        let text = format!("{}: {}", String::from_utf8_lossy(&line.0), String::from_utf8_lossy(&line.1));
        if !re.is_match(&text) {
            continue;
        }
        let new = re.replace(&text, sub, all);
        if new == text {
            continue;
        }
        let (n, v) = new.split_once(':').unwrap_or((&new, ""));
        *line = (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(value_of(v.as_bytes())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs(lines: &[(&str, &str)]) -> Headers {
        Headers(lines.iter().map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect())
    }

    #[test]
    fn regsub_rewrites_whole_lines() {
        let mut h = hs(&[("Foo1", "bar=x"), ("Other", "bar=y"), ("foo2", "bar=z")]);
        regsub(&mut h, &Re::new("^(?i)Foo(\\d): (?-i)bar=(.*)$").unwrap(), "Bar\\1: \\2", false);
        assert_eq!(h.0, hs(&[("Bar1", "x"), ("Other", "bar=y"), ("Bar2", "z")]).0);
        regsub(&mut h, &Re::new("a").unwrap(), "A", true);
        assert_eq!(h.0, hs(&[("BAr1", "x"), ("Other", "bAr=y"), ("BAr2", "z")]).0);
    }

    #[test]
    fn only_named_lines_with_a_matching_value_match() {
        let re = Re::new("^a").unwrap();
        let line = |n: &str, v: &str| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()));
        assert!(matches(&line("X-A", "  abc"), "x-a", &re));
        assert!(!matches(&line("X-A", "bc"), "x-a", &re));
        assert!(!matches(&line("X-B", "abc"), "x-a", &re));
        assert!(!matches(&line("X-A", ""), "x-a", &Re::new("").unwrap()));
    }
}
